//! Hearth's own decoder-only transformer over candle-core.
//!
//! One `Model` serves every supported family; `ModelConfig` says where they
//! differ. The model holds weights only: all per-conversation state lives in a
//! `KvCache` passed to `forward`, so one loaded model serves many sessions.

pub(crate) mod config;
mod delta_net;
mod experts;
mod families;
mod graph;
mod graph_experts;
mod host;
mod load;
mod matmul;
mod metadata;
mod mla;
mod mtp;
mod per_layer;
mod rope;
mod short_conv;

pub use config::{
    Architecture, AttentionShape, ExpertActivation, ExpertsConfig, Gating, ModelConfig, RecurrentConfig, YarnConfig,
    SUPPORTED_ARCHITECTURES,
};

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use crate::cpu::QuantMatrix;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::kv_cache::KvCache;
use rope::RopeFreqs;

/// Longest chunk fed in one forward pass while prefilling; bounds the
/// attention score matrix to `heads × chunk × context` floats.
pub const PREFILL_CHUNK: usize = 512;

/// Which matmul kernels run the quantized weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kernels {
    /// Hearth's own, rounding like llama.cpp, where the format has one.
    #[default]
    Hearth,
    /// candle's `QMatMul` everywhere: the reference for structure tests.
    Candle,
    /// What a GPU runs, on the CPU: candle's kernels in the tensor-graph
    /// pass (`forward_graph`), with the embeddings and the KV cache as
    /// tensors, so that everything but candle's device kernels is tested
    /// on a machine without a GPU. (On a GPU every kind runs this way.)
    Graph,
}

/// A loaded model's weights and shape.
///
/// On the CPU, [`Model::forward`] runs Hearth's own forward pass over plain
/// buffers (`host.rs`); on other devices it builds the same computation from
/// candle tensor ops (`forward_graph`), which on the CPU serves as the
/// reference the host pass is tested against.
pub struct Model {
    config: ModelConfig,
    embeddings: Embeddings,
    embed_scale: Option<f64>,
    layers: Vec<Block>,
    norm: Norm,
    output: Matrix,
    rope_global: RopeFreqs,
    /// LongRoPE's long factors (Phi-3), for sessions longer than the
    /// original context; `rope_global` has the short ones.
    rope_global_long: Option<RopeFreqs>,
    rope_local: RopeFreqs,
    /// Gemma 4's per-layer token embeddings (E2B, E4B).
    per_layer_embeddings: Option<per_layer::PerLayerEmbeddings>,
    /// The multi-token-prediction head (`mtp.rs`), loaded when a
    /// conversation first drafts with it: until then its weights take no
    /// memory. `mtp_source` is the file it loads from and how.
    mtp: std::sync::OnceLock<mtp::MtpHead>,
    mtp_source: Option<(std::path::PathBuf, Kernels)>,
    mtp_loading: std::sync::Mutex<()>,
    weight_bytes_per_token: usize,
    vocab_size: usize,
    device: Device,
    /// Whether passes run as the tensor graph (`forward_graph`): on a GPU,
    /// or on the CPU with `Kernels::Graph`.
    graph: bool,
    /// Forward passes run so far, a pass over several caches counting once:
    /// how a scheduler's tests see that replies share their passes.
    passes_run: std::sync::atomic::AtomicU64,
}

struct Block {
    /// `None` for OLMo 2, which norms only after attention and the FFN.
    attn_norm: Option<Norm>,
    mixer: Mixer,
    post_attn_norm: Option<Norm>,
    ffn_norm: Option<Norm>,
    ffn: Ffn,
    post_ffn_norm: Option<Norm>,
    sliding: bool,
    /// Gemma 4: the layer's share of the per-layer embeddings, gated by
    /// the residual and projected back into it.
    per_layer: Option<per_layer::PerLayerInput>,
    /// Gemma 4's `layer_output_scale`: the residual is multiplied by it
    /// at the layer's end.
    out_scale: Option<f32>,
}

/// How a layer mixes positions.
enum Mixer {
    /// Attention over the KV cache.
    Attention(Attention),
    /// DeepSeek V2's latent attention over the KV cache (`mla.rs`); on the CPU only.
    Mla(Box<mla::Mla>),
    /// A hybrid's recurrent layer (`delta_net.rs`); on the CPU only.
    DeltaNet(delta_net::DeltaNet),
    /// LFM2's short gated convolution (`short_conv.rs`); on the CPU only.
    ShortConv(short_conv::ShortConv),
}

struct Attention {
    /// With `gated`, each head's queries then its output gate.
    wq: Linear,
    /// `None` in a layer that reads an earlier layer's keys and values.
    wk: Option<Linear>,
    /// `None` where the keys serve as values too (Gemma 4's layers without
    /// `attn_v`) or the layer keeps none.
    wv: Option<Linear>,
    wo: Linear,
    q_norm: Option<Norm>,
    k_norm: Option<Norm>,
    /// Qwen 3.5: the output is multiplied by `σ(gate)` before `wo`.
    gated: bool,
    /// gpt-oss: each head's sink logit (`attn_sinks`), in its softmax's
    /// denominator only.
    sinks: Option<Vec<f32>>,
    /// The sinks on the device, for the graph pass.
    sinks_tensor: Option<Tensor>,
    /// Gemma 4: values RMS-normed per head, without a weight.
    v_norm: bool,
}

/// A layer's feed-forward network.
enum Ffn {
    /// One gated FFN every token runs.
    Dense { gate: Matrix, up: Matrix, down: Matrix },
    /// A mixture of experts (`experts.rs`), with a shared expert every
    /// token runs where the family has one; on the CPU only.
    Experts { experts: Box<experts::Experts>, shared: Option<SharedExpert> },
    /// Gemma 4's 26B-A4B: a dense GELU FFN and experts side by side, each
    /// with norms of its own, their outputs added.
    DenseAndExperts(Box<DenseAndExperts>),
    /// A mixture of experts in the graph pass (`graph_experts.rs`), with
    /// Qwen 3.5's shared expert where the layer has one.
    GraphExperts { experts: Box<graph_experts::GraphExperts>, shared: Option<SharedExpert> },
}

/// Gemma 4's FFN with experts: `post_norm_1(dense(ffn_norm(x))) +
/// post_norm_2(experts(pre_norm_2(x)))`, the router reading
/// `rms_norm(x) / √n_embd · router_scale`.
struct DenseAndExperts {
    gate: Matrix,
    up: Matrix,
    down: Matrix,
    post_norm_1: Norm,
    experts: LayerExperts,
    pre_norm_2: Norm,
    post_norm_2: Norm,
    /// `ffn_gate_inp.scale`, per input value.
    router_scale: Vec<f32>,
    /// `router_scale` on the device, for the graph pass.
    router_scale_tensor: Tensor,
}

/// A layer's experts in the CPU's pass or in the graph's.
enum LayerExperts {
    Host(experts::Experts),
    Graph(graph_experts::GraphExperts),
}

/// A shared expert: a dense FFN every token runs beside the routed
/// experts, scaled by `σ(gate_inp · x)` (Qwen 3.5) or not (Granite MoE).
struct SharedExpert {
    /// `ffn_gate_inp_shexp`, one row.
    gate_inp: Option<Matrix>,
    gate: Matrix,
    up: Matrix,
    down: Matrix,
}

/// A weight matrix: Hearth's own kernels where it has them (they round like
/// llama.cpp), candle's `QMatMul` for every other format and device.
enum Matrix {
    Own(Arc<QuantMatrix>),
    Candle(QMatMul),
}

/// Token embeddings: quantized rows looked up on demand (the usual case on
/// the CPU, often shared with the tied output matrix), or dequantized.
enum Embeddings {
    Quant(Arc<QuantMatrix>),
    Device(Tensor),
}

/// RMS norm weights, as a tensor for the graph and as floats for the host pass.
struct Norm {
    tensor: Tensor,
    host: Vec<f32>,
    eps: f32,
}

impl Norm {
    fn new(t: QTensor, eps: f64, device: &Device) -> Result<Self> {
        let tensor = t.dequantize(device)?;
        let host = tensor.flatten_all()?.to_vec1()?;
        Ok(Self { tensor, host, eps: eps as f32 })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::rms_norm(x, &self.tensor, self.eps)
    }
}

impl Matrix {
    /// Tensor `name` as a matrix: Hearth's own kernels (`own`, on the CPU),
    /// else candle's `QMatMul`.
    fn load(file: &mut GgufFile, name: &str, device: &Device, own: bool) -> Result<Self> {
        if own {
            let raw = file.raw_tensor(name)?;
            return match QuantMatrix::from_raw(raw.dtype, &raw.dims, &raw.data) {
                Ok(m) => Ok(Self::Own(Arc::new(m))),
                Err(_) if !raw.dtype.is_runnable() => Err(file.unsupported_type(name, raw.dtype)),
                Err(why) => Err(file.corrupt(format!("tensor {name} {why}"))),
            };
        }
        Ok(Self::Candle(QMatMul::from_qtensor(file.tensor(name, device)?)?))
    }

    /// Tensor `name` cut into matrices of `parts` rows each, read once,
    /// with Hearth's kernels, or candle's on `candle` (a GPU, or the CPU's
    /// `Kernels::Candle` and `Kernels::Graph`): the parts of a fused tensor
    /// (Phi-3's `attn_qkv`, its `ffn_up` holding gate and up) or a 3-D
    /// tensor's matrices (DeepSeek V2's `attn_k_b` per head), whose leading
    /// dimensions count as rows.
    fn load_parts(file: &mut GgufFile, name: &str, parts: &[usize], candle: Option<&Device>) -> Result<Vec<Self>> {
        let raw = file.raw_tensor(name)?;
        let Some((&k, lead)) = raw.dims.split_last().filter(|(_, lead)| !lead.is_empty()) else {
            return Err(file.corrupt(format!("tensor {name} is not a matrix")));
        };
        let n: usize = lead.iter().product();
        let bs = raw.dtype.block_size();
        if parts.iter().sum::<usize>() != n || k % bs != 0 {
            return Err(file.corrupt(format!("tensor {name} ({:?}) does not split into {parts:?} rows", raw.dims)));
        }
        let row_bytes = k / bs * raw.dtype.block_bytes();
        if raw.data.len() != n * row_bytes {
            return Err(file.corrupt(format!("tensor {name} holds {} bytes, not {}", raw.data.len(), n * row_bytes)));
        }
        let mut start = 0;
        parts
            .iter()
            .map(|&rows| {
                let data = &raw.data[start * row_bytes..(start + rows) * row_bytes];
                start += rows;
                if let Some(device) = candle {
                    let t = file.qtensor(name, raw.dtype, data, vec![rows, k], device)?;
                    return Ok(Self::Candle(QMatMul::from_qtensor(t)?));
                }
                match QuantMatrix::from_raw(raw.dtype, &[rows, k], data) {
                    Ok(m) => Ok(Self::Own(Arc::new(m))),
                    Err(_) if !raw.dtype.is_runnable() => Err(file.unsupported_type(name, raw.dtype)),
                    Err(why) => Err(file.corrupt(format!("tensor {name} {why}"))),
                }
            })
            .collect()
    }

    fn stored_bytes(&self) -> usize {
        match self {
            Self::Own(m) => m.stored_bytes(),
            Self::Candle(QMatMul::QTensor(t)) => t.storage_size_in_bytes(),
            Self::Candle(QMatMul::Tensor(t) | QMatMul::TensorF16(t)) => t.elem_count() * t.dtype().size_in_bytes(),
        }
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Candle(m) => m.forward(x),
            Self::Own(m) => {
                let mut dims = x.dims().to_vec();
                let k = dims.pop().unwrap_or(0);
                if k != m.cols() {
                    candle_core::bail!("matmul: input has {k} columns, the weight {}", m.cols());
                }
                let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
                let mut out = vec![0f32; xs.len() / k * m.rows()];
                m.matmul(&xs, &mut out);
                dims.push(m.rows());
                Tensor::from_vec(out, dims, x.device())
            }
        }
    }
}

struct Linear {
    weight: Matrix,
    bias: Option<(Tensor, Vec<f32>)>,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.weight.forward(x)?;
        match &self.bias {
            Some((b, _)) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

impl Model {
    /// The full layers' RoPE for a session of `context` positions: LongRoPE's
    /// long factors past the original context.
    fn rope_for(&self, context: usize) -> &RopeFreqs {
        match &self.rope_global_long {
            Some(long) if context > self.config.original_context => long,
            _ => &self.rope_global,
        }
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Bytes of weights a decode step reads (every matrix once): with the
    /// device's memory bandwidth, the bound on decode speed.
    pub fn weight_bytes_per_token(&self) -> usize {
        self.weight_bytes_per_token
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// An empty cache for this model holding up to `max_len` positions
    /// (clamped to the model's trained context).
    pub fn new_cache(&self, max_len: usize) -> KvCache {
        let cache = KvCache::new(&self.config, max_len.min(self.config.context_length).max(1), &self.device);
        if self.graph {
            cache.in_tensors()
        } else {
            cache
        }
    }

    /// Whether passes run as the tensor graph, as on a GPU (`Kernels::Graph`).
    pub fn runs_graph(&self) -> bool {
        self.graph
    }

    /// Runs `tokens` (`[batch][n]`, the same length for every sequence) at the
    /// cache's next positions, appends their keys and values, and returns the
    /// logits of the last position of each sequence as `[batch, vocab]`.
    pub fn forward(&self, tokens: &[Vec<u32>], cache: &mut KvCache) -> Result<Tensor> {
        self.forward_stoppable(tokens, cache, &|| false)
    }

    /// `forward`, asking `stop` between layers of a pass of several
    /// positions (a prefill chunk) and ending with [`EngineError::Stopped`]
    /// when it says so: the cache then holds what it held before (keys and
    /// values written past its length are not part of it; a hybrid's
    /// recurrent state goes back to the checkpoint taken before the pass, or
    /// for a one-row pass that failed, to its latest one). The graph pass
    /// asks between layers too (on a GPU, between the layers' launches).
    pub fn forward_stoppable(
        &self,
        tokens: &[Vec<u32>],
        cache: &mut KvCache,
        stop: &dyn Fn() -> bool,
    ) -> Result<Tensor> {
        self.check_tokens(tokens)?;
        self.passes_run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.graph {
            self.forward_graph_stoppable(tokens, cache, stop)
        } else {
            self.forward_host(tokens, cache, stop)
        }
    }

    /// One decode step for sequences that each have their own cache (of
    /// batch 1): `tokens[i]` fed to `caches[i]`, logits per sequence, the
    /// weights read once for all of them. On the CPU each row is summed as
    /// it would be alone, so every sequence gets the bits a step of its own
    /// gives; the graph pass (a GPU's) runs the rows as one batch, and on a
    /// GPU candle picks its matmul kernels by the number of rows, so a
    /// row's bits there may depend on how many conversations share the step.
    pub fn decode_step_many(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Vec<Vec<f32>>> {
        if tokens.len() != caches.len() {
            return Err(crate::EngineError::setting("caches", "one token for each cache of one sequence"));
        }
        let rows: Vec<&[u32]> = tokens.iter().map(std::slice::from_ref).collect();
        self.decode_rows_many(&rows, caches)
    }

    /// Decode rows for sequences that each have their own cache (of batch
    /// 1): `rows[i]` fed to `caches[i]` at its next positions, logits of
    /// every row in order (`rows[0]`'s first). Several rows of one cache
    /// are a speculative verify pass: on the CPU row `j` of a cache gets
    /// the logits and keys a one-row step at its position gives, bit for
    /// bit, whatever else shares the pass (a recurrent state runs the rows
    /// in order, as steps). The graph pass takes one row per cache.
    pub fn decode_rows_many(&self, rows: &[&[u32]], caches: &mut [&mut KvCache]) -> Result<Vec<Vec<f32>>> {
        if rows.len() != caches.len() || caches.iter().any(|c| c.batch() != 1) || rows.iter().any(|r| r.is_empty()) {
            return Err(crate::EngineError::setting("caches", "one or more tokens for each cache of one sequence"));
        }
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        self.check_tokens(&rows.iter().flat_map(|r| r.iter().map(|&t| vec![t])).collect::<Vec<_>>())?;
        if self.graph && rows.iter().any(|r| r.len() > 1) {
            return Err(crate::EngineError::setting("speculation", "several rows of one cache run on the CPU's pass"));
        }
        self.passes_run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.graph {
            let tokens: Vec<u32> = rows.iter().map(|r| r[0]).collect();
            return self.forward_graph_caches(&tokens, caches);
        }
        let tokens: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        let owners: Vec<usize> = rows.iter().enumerate().flat_map(|(i, r)| std::iter::repeat_n(i, r.len())).collect();
        self.forward_host_caches(&tokens, &owners, caches)
    }

    /// Forward passes run so far (`forward`, `decode_step_many`); a pass
    /// over several caches counts once.
    pub fn passes_run(&self) -> u64 {
        self.passes_run.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Logits at every position of `ids` (`[ids.len(), vocab]`), run as a
    /// prefill in chunks of [`PREFILL_CHUNK`] after what `cache` holds: how
    /// `hearth-cli score` and `perplexity` compare logits with llama.cpp's.
    pub fn logits_at_every_position(&self, ids: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        if self.graph {
            return Err(crate::EngineError::setting("device", "scoring every position runs on the CPU's own pass"));
        }
        let mut out = Vec::with_capacity(ids.len() * self.vocab_size);
        for chunk in ids.chunks(PREFILL_CHUNK) {
            let tokens = [chunk.to_vec()];
            self.check_tokens(&tokens)?;
            out.extend(self.forward_host_rows(&tokens, cache, true, &|| false)?);
        }
        Ok(out)
    }

    fn check_tokens(&self, tokens: &[Vec<u32>]) -> Result<()> {
        let seq_len = tokens.first().map_or(0, Vec::len);
        assert!(
            seq_len > 0 && tokens.iter().all(|t| t.len() == seq_len),
            "forward needs a non-empty rectangular batch"
        );
        if let Some(bad) = tokens.iter().flatten().find(|&&t| t as usize >= self.vocab_size) {
            return Err(candle_core::Error::Msg(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.vocab_size
            ))
            .into());
        }
        Ok(())
    }
}

fn check_shape(file: &GgufFile, name: &str, expected: &[usize]) -> Result<()> {
    let info = file.tensor_info(name).ok_or_else(|| file.corrupt(format!("missing tensor {name}")))?;
    if info.dims != expected {
        return Err(file.corrupt(format!("tensor {name} has shape {:?}, expected {expected:?}", info.dims)));
    }
    Ok(())
}

/// A 1-D tensor's values as f32 on the host.
fn host_vector(file: &mut GgufFile, name: &str, device: &Device) -> Result<Vec<f32>> {
    Ok(file.tensor(name, device)?.dequantize(device)?.flatten_all()?.to_vec1()?)
}

/// First cache position a sliding layer can see from the first new token;
/// older positions are skipped outright rather than masked.
fn window_start(pos0: usize, window: usize) -> usize {
    (pos0 + 1).saturating_sub(window)
}
