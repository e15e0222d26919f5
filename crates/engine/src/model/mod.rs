//! Hearth's own decoder-only transformer over candle-core.
//!
//! One `Model` serves every supported family; `ModelConfig` says where they
//! differ. The model holds weights only: all per-conversation state lives in a
//! `KvCache` passed to `forward`, so one loaded model serves many sessions.

pub(crate) mod config;
mod delta_net;
mod experts;
mod graph_experts;
mod host;
mod matmul;
mod mla;
mod per_layer;
mod short_conv;

pub use config::{
    Architecture, AttentionShape, ExpertActivation, ExpertsConfig, Gating, ModelConfig, RecurrentConfig, YarnConfig,
    SUPPORTED_ARCHITECTURES,
};

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use crate::cpu::QuantMatrix;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::kv_cache::KvCache;

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
    /// Loads weights for the architecture named in the file.
    pub fn load(file: &mut GgufFile, device: &Device) -> Result<Self> {
        Self::load_with(file, device, Kernels::Hearth)
    }

    pub fn load_with(file: &mut GgufFile, device: &Device, kernels: Kernels) -> Result<Self> {
        let config = ModelConfig::from_gguf(file)?;
        let arch = config.architecture;
        let graph = !device.is_cpu() || kernels == Kernels::Graph;
        let norm = |file: &mut GgufFile, name: &str| -> Result<Norm> {
            Norm::new(file.tensor(name, device)?, config.rms_eps, device)
        };
        let norm_opt = |file: &mut GgufFile, name: &str| -> Result<Option<Norm>> {
            match file.tensor_opt(name, device)? {
                Some(t) => Ok(Some(Norm::new(t, config.rms_eps, device)?)),
                None => Ok(None),
            }
        };
        // Bytes of weights one decode step reads: every matrix once.
        let weight_bytes = std::cell::Cell::new(0usize);
        let own_kernels = device.is_cpu() && kernels == Kernels::Hearth;
        let matmul = |file: &mut GgufFile, name: &str, rows: usize, cols: usize| -> Result<Matrix> {
            check_shape(file, name, &[rows, cols])?;
            let m = Matrix::load(file, name, device, own_kernels)?;
            weight_bytes.set(weight_bytes.get() + m.stored_bytes());
            Ok(m)
        };

        // A Q or K norm: per head, or (OLMo 2) across all `width` at once.
        let qk_norm = |file: &mut GgufFile, name: &str, width: usize| -> Result<Option<Norm>> {
            let n = norm_opt(file, name)?;
            match &n {
                Some(n) if n.host.len() != width && !width.is_multiple_of(n.host.len().max(1)) => Err(file
                    .corrupt(format!("{name} has {} values for {width} (and no head size divides it)", n.host.len()))),
                _ => Ok(n),
            }
        };
        // Rows of a fused tensor as a matrix each.
        let load_parts = |file: &mut GgufFile, name: &str, parts: &[usize]| -> Result<Vec<Matrix>> {
            let matrices = Matrix::load_parts(file, name, parts, (!own_kernels).then_some(device))?;
            weight_bytes.set(weight_bytes.get() + matrices.iter().map(Matrix::stored_bytes).sum::<usize>());
            Ok(matrices)
        };
        let matmul_parts = |file: &mut GgufFile, name: &str, parts: &[usize], cols: usize| -> Result<Vec<Matrix>> {
            check_shape(file, name, &[parts.iter().sum(), cols])?;
            load_parts(file, name, parts)
        };
        // A layer's gated FFN, its width read off `ffn_up`, which may hold
        // gate and up in one (Phi-3: gate first).
        let dense_ffn = |file: &mut GgufFile, p: &str| -> Result<(Matrix, Matrix, Matrix)> {
            let up_rows = match file.tensor_info(&format!("{p}.ffn_up.weight")).map(|i| i.dims.as_slice()) {
                Some(&[rows, _]) => rows,
                Some(_) => return Err(file.corrupt(format!("{p}.ffn_up.weight is not a matrix"))),
                None => return Err(file.corrupt(format!("missing tensor {p}.ffn_up.weight"))),
            };
            if !file.has_tensor(&format!("{p}.ffn_gate.weight")) {
                let ffn_dim = up_rows / 2;
                let mut both = matmul_parts(file, &format!("{p}.ffn_up.weight"), &[ffn_dim, ffn_dim], config.n_embd)?;
                let up = both.pop().expect("two parts");
                let gate = both.pop().expect("two parts");
                return Ok((gate, up, matmul(file, &format!("{p}.ffn_down.weight"), config.n_embd, ffn_dim)?));
            }
            let ffn_dim = up_rows;
            Ok((
                matmul(file, &format!("{p}.ffn_gate.weight"), ffn_dim, config.n_embd)?,
                matmul(file, &format!("{p}.ffn_up.weight"), ffn_dim, config.n_embd)?,
                matmul(file, &format!("{p}.ffn_down.weight"), config.n_embd, ffn_dim)?,
            ))
        };
        // The CPU pass's experts (the graph's are `GraphExperts`).
        let experts_of = |file: &mut GgufFile, p: &str, ec: &ExpertsConfig| -> Result<experts::Experts> {
            check_shape(file, &format!("{p}.ffn_gate_inp.weight"), &[ec.count, config.n_embd])?;
            let Matrix::Own(router) = Matrix::load(file, &format!("{p}.ffn_gate_inp.weight"), device, true)? else {
                unreachable!("loaded with Hearth's own kernels")
            };
            experts::Experts::load(file, p, config.n_embd, ec, router)
        };

        let embd_dims = file
            .tensor_info("token_embd.weight")
            .ok_or_else(|| file.corrupt("missing tensor token_embd.weight"))?
            .dims
            .clone();
        let &[vocab_size, embd_cols] = embd_dims.as_slice() else {
            return Err(file.corrupt("token_embd.weight is not a matrix"));
        };
        if embd_cols != config.n_embd {
            return Err(file.corrupt(format!("token_embd.weight has {embd_cols} columns, expected {}", config.n_embd)));
        }
        // On the CPU the embeddings stay in their file type, rows widened as
        // they are looked up; tied to the output, one copy serves both.
        let embd = Matrix::load(file, "token_embd.weight", device, !graph)?;
        let embeddings = match &embd {
            Matrix::Own(m) => Embeddings::Quant(m.clone()),
            Matrix::Candle(q) => Embeddings::Device(match q {
                QMatMul::QTensor(t) => t.dequantize(device)?,
                QMatMul::Tensor(t) | QMatMul::TensorF16(t) => t.to_dtype(DType::F32)?,
            }),
        };
        let output = if file.has_tensor("output.weight") {
            matmul(file, "output.weight", vocab_size, config.n_embd)?
        } else {
            match (&embd, own_kernels) {
                (Matrix::Own(m), true) => {
                    weight_bytes.set(weight_bytes.get() + m.stored_bytes());
                    Matrix::Own(m.clone())
                }
                _ => matmul(file, "token_embd.weight", vocab_size, config.n_embd)?,
            }
        };
        let mut layers = Vec::with_capacity(config.n_layers);
        for i in 0..config.n_layers {
            let shape = config.attention_shape(i);
            let (q_dim, kv_dim) = (shape.q_width(), shape.kv_width());
            let p = format!("blk.{i}");
            let bias = |file: &mut GgufFile, name: &str| -> Result<Option<(Tensor, Vec<f32>)>> {
                Ok(match file.tensor_opt(&format!("{p}.{name}.bias"), device)? {
                    Some(t) => {
                        let t = t.dequantize(device)?;
                        let host = t.flatten_all()?.to_vec1()?;
                        Some((t, host))
                    }
                    None => None,
                })
            };
            let linear = |file: &mut GgufFile, name: &str, rows: usize| -> Result<Linear> {
                Ok(Linear {
                    weight: matmul(file, &format!("{p}.{name}.weight"), rows, config.n_embd)?,
                    bias: bias(file, name)?,
                })
            };
            let mixer = if config.is_recurrent(i) {
                let shape = config.recurrent.as_ref().expect("a recurrent layer has a shape");
                let slot = (0..i).filter(|&l| config.is_recurrent(l)).count();
                let mut load =
                    |file: &mut GgufFile, name: &str, rows: usize, cols: usize| matmul(file, name, rows, cols);
                if shape.short_conv.is_some() {
                    Mixer::ShortConv(short_conv::ShortConv::load(file, &p, shape, slot, config.n_embd, &mut load)?)
                } else {
                    Mixer::DeltaNet(delta_net::DeltaNet::load(
                        file,
                        &p,
                        shape,
                        slot,
                        config.n_embd,
                        config.rms_eps as f32,
                        &mut load,
                    )?)
                }
            } else if let Some(m) = &config.mla {
                Mixer::Mla(Box::new(mla::Mla::load(
                    file,
                    &p,
                    m,
                    shape.n_heads,
                    config.n_embd,
                    config.rope_dims,
                    &|file, name| norm(file, name),
                    &|file, name, rows, cols| matmul(file, name, rows, cols),
                    &|file, name, parts| load_parts(file, name, parts),
                )?))
            } else {
                let gated = arch.is_hybrid();
                let sinks = if arch.has_attention_sinks() {
                    let name = format!("{p}.attn_sinks.weight");
                    check_shape(file, &name, &[config.n_heads])?;
                    Some(host_vector(file, &name, device)?)
                } else {
                    None
                };
                let stores_kv = config.stores_kv(i);
                let fused = format!("{p}.attn_qkv.weight");
                let (wq, wk, wv) = if !file.has_tensor(&format!("{p}.attn_q.weight")) && file.has_tensor(&fused) {
                    // Phi-3: queries, keys and values in one tensor.
                    if gated || !stores_kv || file.has_tensor(&format!("{p}.attn_qkv.bias")) {
                        return Err(file.corrupt(format!(
                            "{fused} (queries, keys and values in one tensor) with gates, shared keys or a bias"
                        )));
                    }
                    let mut qkv = matmul_parts(file, &fused, &[q_dim, kv_dim, kv_dim], config.n_embd)?.into_iter();
                    let mut next = || Linear { weight: qkv.next().expect("three parts"), bias: None };
                    (next(), Some(next()), Some(next()))
                } else {
                    // Gemma 4: a layer without `attn_v` uses its keys as values.
                    let wv = if stores_kv
                        && (arch != Architecture::Gemma4 || file.has_tensor(&format!("{p}.attn_v.weight")))
                    {
                        Some(linear(file, "attn_v", kv_dim)?)
                    } else {
                        None
                    };
                    (
                        linear(file, "attn_q", if gated { 2 * q_dim } else { q_dim })?,
                        if stores_kv { Some(linear(file, "attn_k", kv_dim)?) } else { None },
                        wv,
                    )
                };
                Mixer::Attention(Attention {
                    wq,
                    wk,
                    wv,
                    wo: Linear {
                        weight: matmul(file, &format!("{p}.attn_output.weight"), config.n_embd, q_dim)?,
                        bias: bias(file, "attn_output")?,
                    },
                    q_norm: qk_norm(file, &format!("{p}.attn_q_norm.weight"), q_dim)?,
                    k_norm: if stores_kv { qk_norm(file, &format!("{p}.attn_k_norm.weight"), kv_dim)? } else { None },
                    gated,
                    sinks_tensor: match &sinks {
                        Some(s) if graph => Some(Tensor::from_slice(s, s.len(), device)?),
                        _ => None,
                    },
                    sinks,
                    v_norm: arch == Architecture::Gemma4,
                })
            };
            let gemma4_experts = arch == Architecture::Gemma4 && file.has_tensor(&format!("{p}.ffn_gate_inp.weight"));
            let ffn = match &config.experts {
                Some(ec) if gemma4_experts => {
                    let dense = dense_ffn(file, &p)?;
                    let experts = if graph {
                        let experts = graph_experts::GraphExperts::load(file, &p, config.n_embd, ec, device)?;
                        weight_bytes.set(weight_bytes.get() + experts.bytes_per_token());
                        LayerExperts::Graph(experts)
                    } else {
                        let experts = experts_of(file, &p, ec)?;
                        weight_bytes.set(weight_bytes.get() + experts.bytes_per_token());
                        LayerExperts::Host(experts)
                    };
                    let scale_name = format!("{p}.ffn_gate_inp.scale");
                    check_shape(file, &scale_name, &[config.n_embd])?;
                    Ffn::DenseAndExperts(Box::new(DenseAndExperts {
                        gate: dense.0,
                        up: dense.1,
                        down: dense.2,
                        post_norm_1: norm(file, &format!("{p}.post_ffw_norm_1.weight"))?,
                        experts,
                        pre_norm_2: norm(file, &format!("{p}.pre_ffw_norm_2.weight"))?,
                        post_norm_2: norm(file, &format!("{p}.post_ffw_norm_2.weight"))?,
                        router_scale_tensor: file.tensor(&scale_name, device)?.dequantize(device)?,
                        router_scale: host_vector(file, &scale_name, device)?,
                    }))
                }
                Some(ec) if arch != Architecture::Gemma4 && i >= ec.dense_lead => {
                    // The graph's experts (a GPU's) or the CPU pass's.
                    let (graph_experts, experts) = if graph {
                        let experts = graph_experts::GraphExperts::load(file, &p, config.n_embd, ec, device)?;
                        weight_bytes.set(weight_bytes.get() + experts.bytes_per_token());
                        (Some(Box::new(experts)), None)
                    } else {
                        let experts = Box::new(experts_of(file, &p, ec)?);
                        weight_bytes.set(weight_bytes.get() + experts.bytes_per_token());
                        (None, Some(experts))
                    };
                    let shared = match ec.shared_ffn_len {
                        Some(n) => Some(SharedExpert {
                            gate_inp: if matches!(
                                arch,
                                Architecture::GraniteMoe | Architecture::Glm4Moe | Architecture::Deepseek2
                            ) {
                                None
                            } else {
                                let name = format!("{p}.ffn_gate_inp_shexp.weight");
                                Some(shared_gate_input(file, &name, config.n_embd, own_kernels, device)?)
                            },
                            gate: matmul(file, &format!("{p}.ffn_gate_shexp.weight"), n, config.n_embd)?,
                            up: matmul(file, &format!("{p}.ffn_up_shexp.weight"), n, config.n_embd)?,
                            down: matmul(file, &format!("{p}.ffn_down_shexp.weight"), config.n_embd, n)?,
                        }),
                        None => None,
                    };
                    match (graph_experts, experts) {
                        (Some(experts), _) => Ffn::GraphExperts { experts, shared },
                        (_, Some(experts)) => Ffn::Experts { experts, shared },
                        _ => unreachable!("one kind of experts is loaded"),
                    }
                }
                _ => {
                    let (gate, up, down) = dense_ffn(file, &p)?;
                    Ffn::Dense { gate, up, down }
                }
            };
            // Qwen 3.5 and gpt-oss name their FFN norm `post_attention_norm`.
            let (post_attn_norm, ffn_norm) = if arch.ffn_norm_is_post_attention() {
                (None, Some(norm(file, &format!("{p}.post_attention_norm.weight"))?))
            } else if arch.post_norms_only() {
                (Some(norm(file, &format!("{p}.post_attention_norm.weight"))?), None)
            } else {
                (
                    norm_opt(file, &format!("{p}.post_attention_norm.weight"))?,
                    Some(norm(file, &format!("{p}.ffn_norm.weight"))?),
                )
            };
            layers.push(Block {
                attn_norm: if arch.post_norms_only() {
                    None
                } else {
                    Some(norm(file, &format!("{p}.attn_norm.weight"))?)
                },
                mixer,
                post_attn_norm,
                ffn_norm,
                ffn,
                post_ffn_norm: norm_opt(file, &format!("{p}.post_ffw_norm.weight"))?,
                sliding: config.is_sliding(i),
                per_layer: if config.per_layer_embd > 0 {
                    Some(per_layer::PerLayerInput {
                        gate: matmul(file, &format!("{p}.inp_gate.weight"), config.per_layer_embd, config.n_embd)?,
                        proj: matmul(file, &format!("{p}.proj.weight"), config.n_embd, config.per_layer_embd)?,
                        post_norm: norm(file, &format!("{p}.post_norm.weight"))?,
                    })
                } else {
                    None
                },
                out_scale: match file.tensor_info(&format!("{p}.layer_output_scale.weight")) {
                    Some(_) => {
                        let name = format!("{p}.layer_output_scale.weight");
                        check_shape(file, &name, &[1])?;
                        Some(host_vector(file, &name, device)?[0])
                    }
                    None => None,
                },
            });
        }
        let per_layer_embeddings = if config.per_layer_embd > 0 {
            let n = config.per_layer_embd * config.n_layers;
            Some(per_layer::PerLayerEmbeddings {
                tokens: per_layer::FileRows::open(file, "per_layer_token_embd.weight", vocab_size, n)?,
                model_proj: matmul(file, "per_layer_model_proj.weight", n, config.n_embd)?,
                proj_norm: norm(file, "per_layer_proj_norm.weight")?,
            })
        } else {
            None
        };
        // LFM2's converter names the final norm `token_embd_norm`.
        let norm =
            norm(file, if arch == Architecture::Lfm2 { "token_embd_norm.weight" } else { "output_norm.weight" })?;
        let freq_factors: Option<Vec<f32>> = match file.tensor_opt("rope_freqs.weight", device)? {
            Some(t) => Some(t.dequantize(device)?.flatten_all()?.to_vec1()?),
            None => None,
        };
        if freq_factors.as_ref().is_some_and(|f| f.len() != config.head_dim / 2) {
            return Err(file.corrupt("rope_freqs.weight has the wrong length"));
        }
        if freq_factors.is_some() && config.rope_dims != config.head_dim {
            return Err(file.corrupt("rope_freqs.weight with partial rotary embeddings"));
        }
        // LongRoPE (Phi-3): factors for sessions within the original
        // context and for longer ones, chosen as llama.cpp chooses them by
        // the context a session is opened with.
        let long_rope = |file: &mut GgufFile, name: &str| -> Result<Option<Vec<f32>>> {
            if !file.has_tensor(name) {
                return Ok(None);
            }
            check_shape(file, name, &[config.rope_dims / 2])?;
            Ok(Some(host_vector(file, name, device)?))
        };
        let (short, long) =
            (long_rope(file, "rope_factors_short.weight")?, long_rope(file, "rope_factors_long.weight")?);
        if (short.is_some() || long.is_some()) && freq_factors.is_some() {
            return Err(file.corrupt("rope_freqs.weight beside LongRoPE's rope_factors_long and _short"));
        }
        let freq_scale = 1.0 / config.rope_linear_scale;
        let global = |factors: Option<Vec<f32>>| {
            let mut rope = RopeFreqs::new(config.rope_dims, config.rope_base, factors, freq_scale);
            rope.sections = config.rope_sections;
            rope.yarn = config.rope_yarn.map(|y| YarnRamp::new(&y, config.rope_dims, config.rope_base, freq_scale));
            rope.mscale = config.rope_attn_factor;
            rope
        };
        let rope_global_long = long.map(|f| global(Some(f)));
        let rope_global = global(freq_factors.or(short));
        let local_dims = (0..config.n_layers)
            .find(|&i| config.is_sliding(i))
            .map_or(config.rope_dims, |i| config.attention_shape(i).rope_dims);
        let mut rope_local = RopeFreqs::new(local_dims, config.rope_base_local, None, 1.0);
        if config.rope_scaling_local {
            rope_local.freq_scale = freq_scale;
            rope_local.yarn =
                config.rope_yarn.map(|y| YarnRamp::new(&y, local_dims, config.rope_base_local, freq_scale));
        }
        let embed_scale =
            if arch.is_gemma() { Some((config.n_embd as f64).sqrt()) } else { config.embedding_scale.map(f64::from) };
        Ok(Self {
            weight_bytes_per_token: weight_bytes.get(),
            config,
            embeddings,
            embed_scale,
            layers,
            norm,
            output,
            rope_global,
            rope_global_long,
            rope_local,
            per_layer_embeddings,
            vocab_size,
            device: device.clone(),
            graph,
            passes_run: Default::default(),
        })
    }

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
    /// batch 1): `tokens[i]` fed to `caches[i]`, logits per sequence. On the
    /// CPU the weights are read once for all of them and each row is summed
    /// as it would be alone, so every sequence gets the bits a step of its
    /// own gives; elsewhere the steps run one after another.
    pub fn decode_step_many(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Vec<Vec<f32>>> {
        if tokens.len() != caches.len() || caches.iter().any(|c| c.batch() != 1) {
            return Err(crate::EngineError::setting("caches", "one token for each cache of one sequence"));
        }
        self.check_tokens(&tokens.iter().map(|&t| vec![t]).collect::<Vec<_>>())?;
        if !self.graph {
            self.passes_run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return self.forward_host_caches(tokens, caches);
        }
        tokens
            .iter()
            .zip(caches.iter_mut())
            .map(|(&t, cache)| Ok(self.forward(&[vec![t]], cache)?.to_vec2::<f32>()?.remove(0)))
            .collect()
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

    /// [`Model::forward`] built from candle tensor ops: what runs on a GPU.
    /// On the CPU it is the reference that tests hold the host pass to.
    pub fn forward_graph(&self, tokens: &[Vec<u32>], cache: &mut KvCache) -> Result<Tensor> {
        self.forward_graph_stoppable(tokens, cache, &|| false)
    }

    /// `forward_graph`, asking `stop` between the layers of a pass of
    /// several positions (see `forward_stoppable`).
    fn forward_graph_stoppable(
        &self,
        tokens: &[Vec<u32>],
        cache: &mut KvCache,
        stop: &dyn Fn() -> bool,
    ) -> Result<Tensor> {
        self.check_tokens(tokens)?;
        let batch = tokens.len();
        let seq_len = tokens[0].len();
        cache.reserve(seq_len, batch)?;
        let pos0 = cache.len();
        let flat: Vec<u32> = tokens.iter().flatten().copied().collect();
        let mut x = match &self.embeddings {
            Embeddings::Device(t) => t.index_select(&Tensor::from_slice(&flat, batch * seq_len, &self.device)?, 0)?,
            _ => Tensor::from_vec(self.embed(&flat), (batch * seq_len, self.config.n_embd), &self.device)?,
        }
        .reshape((batch, seq_len, self.config.n_embd))?;
        if let Some(s) = self.embed_scale {
            x = (x * s)?;
        }
        let per_layer = match &self.per_layer_embeddings {
            Some(p) => Some(p.inputs_graph(&flat, &x)?),
            None => None,
        };
        let rope_global = Rope::new(self.rope_for(cache.max_len()), pos0, seq_len, &self.device)?;
        let rope_local = Rope::new(&self.rope_local, pos0, seq_len, &self.device)?;
        let mask_global = causal_mask(seq_len, pos0, 0, None, &self.device)?;
        let mask_local = match self.config.sliding_window {
            Some(w) => causal_mask(seq_len, pos0, window_start(pos0, w), Some(w), &self.device)?,
            None => None,
        };
        // Mistral 3: the queries' factor at each new position.
        let temperature = match &self.config.attention_temperature {
            Some(t) => {
                let f: Vec<f32> = (pos0..pos0 + seq_len).map(|p| t.factor(p)).collect();
                Some(Tensor::from_vec(f, (1, 1, seq_len, 1), &self.device)?)
            }
            None => None,
        };
        let mut scratch = delta_net::DeltaScratch::default();
        cache.begin_pass(seq_len);
        let mut layers = || -> Result<Tensor> {
            for (i, block) in self.layers.iter().enumerate() {
                let (rope, mask, kv_start) = if block.sliding {
                    let w = self.config.sliding_window.unwrap_or(usize::MAX);
                    (&rope_local, mask_local.as_ref(), window_start(pos0, w))
                } else {
                    (&rope_global, mask_global.as_ref(), 0)
                };
                let pass = GraphLayerInputs {
                    rope,
                    mask,
                    kv_start,
                    temperature: temperature.as_ref(),
                    per_layer: per_layer.as_ref(),
                };
                x = self.block_forward(block, i, &x, &pass, cache, &mut scratch)?;
                // Keys and values written past the cache's length are not yet
                // part of it: stopping here leaves it as it was.
                if seq_len > 1 && i + 1 < self.layers.len() && stop() {
                    return Err(crate::EngineError::Stopped);
                }
            }
            let last = self.norm.forward(&x.narrow(1, seq_len - 1, 1)?.contiguous()?)?;
            let mut logits = self.output.forward(&last)?.reshape((batch, self.vocab_size))?;
            // As the host pass's `soft_cap`: Granite's scale, Gemma 2's cap.
            if let Some(s) = self.config.logit_scale {
                logits = (logits * (1.0 / s) as f64)?;
            }
            if let Some(cap) = self.config.final_logit_softcap {
                logits = ((logits * (1.0 / cap) as f64)?.tanh()? * cap as f64)?;
            }
            Ok(logits)
        };
        let run = layers();
        if self.config.recurrent.is_some() {
            // The recurrent layers' host fallback ran on the worker pool.
            crate::worker_pool::WorkerPool::global().end_pass();
        }
        match run {
            Ok(logits) => {
                cache.advance(seq_len);
                cache.end_pass(seq_len);
                Ok(logits)
            }
            Err(e) => {
                // As in the host pass: a hybrid's recurrent state, written in
                // place, goes back to its checkpoint; nothing this pass wrote
                // (to its last logits, which a GPU may fail to hold) counts.
                cache.truncate(pos0);
                Err(e)
            }
        }
    }

    fn block_forward(
        &self,
        b: &Block,
        layer: usize,
        x: &Tensor,
        pass: &GraphLayerInputs,
        cache: &mut KvCache,
        scratch: &mut delta_net::DeltaScratch,
    ) -> Result<Tensor> {
        let h = match &b.attn_norm {
            Some(n) => n.forward(x)?,
            None => x.clone(),
        };
        let mut attn = match &b.mixer {
            Mixer::Attention(a) => self.attention_graph(a, layer, &h, pass, cache)?,
            Mixer::DeltaNet(d) => d.forward_graph(crate::worker_pool::WorkerPool::global(), &h, cache, scratch)?,
            Mixer::ShortConv(s) => s.forward_graph(&h, cache)?,
            Mixer::Mla(m) => self.mla_graph(m, layer, &h, pass, cache)?,
        };
        if let Some(n) = &b.post_attn_norm {
            attn = n.forward(&attn)?;
        }
        if let Some(s) = self.config.residual_scale {
            attn = (attn * s as f64)?;
        }
        let x = (x + attn)?;

        let h = match &b.ffn_norm {
            Some(n) => n.forward(&x)?,
            None => x.clone(),
        };
        let mut ffn = match &b.ffn {
            Ffn::Dense { gate, up, down } => self.dense_graph(gate, up, down, &h)?,
            Ffn::DenseAndExperts(d) => {
                let LayerExperts::Graph(experts) = &d.experts else {
                    unreachable!("the graph's layers load their experts as GraphExperts")
                };
                // As the host pass: `post_norm_1(dense(h)) +
                // post_norm_2(experts(pre_norm_2(x)))`, the router reading
                // `rms_norm(x) / √n_embd · router_scale`.
                let dense = d.post_norm_1.forward(&self.dense_graph(&d.gate, &d.up, &d.down, &h)?)?;
                let e = self.config.n_embd;
                let ones = Tensor::ones(e, DType::F32, &self.device)?;
                // As the host pass: `1/√n_embd` in f32.
                let inv = 1.0f32 / (e as f32).sqrt();
                let router_in = candle_nn::ops::rms_norm(&x, &ones, self.config.rms_eps as f32)?
                    .affine(inv as f64, 0.0)?
                    .broadcast_mul(&d.router_scale_tensor)?;
                let moe = experts.forward(&d.pre_norm_2.forward(&x)?, Some(&router_in))?;
                (dense + d.post_norm_2.forward(&moe)?)?
            }
            Ffn::GraphExperts { experts, shared } => {
                let mut ffn = experts.forward(&h, None)?;
                if let Some(s) = shared {
                    // llama.cpp: moe_out + ffn_shexp · σ(gate_inp · x).
                    let mut out = self.dense_graph(&s.gate, &s.up, &s.down, &h)?;
                    if let Some(g) = &s.gate_inp {
                        out = out.broadcast_mul(&candle_nn::ops::sigmoid(&g.forward(&h)?)?)?;
                    }
                    ffn = (ffn + out)?;
                }
                ffn
            }
            _ => unreachable!("the graph's layers load their experts as GraphExperts"),
        };
        if let Some(n) = &b.post_ffn_norm {
            ffn = n.forward(&ffn)?;
        }
        if let Some(s) = self.config.residual_scale {
            ffn = (ffn * s as f64)?;
        }
        let mut x = (x + ffn)?;
        if let (Some(p), Some(inputs)) = (&b.per_layer, pass.per_layer) {
            x = p.add_graph(&x, inputs, layer)?;
        }
        if let Some(s) = b.out_scale {
            x = (x * s as f64)?;
        }
        Ok(x)
    }

    /// A gated FFN in the graph pass: `down(act(gate(h)) · up(h))`, GELU
    /// for Gemma, SiLU otherwise.
    fn dense_graph(&self, gate: &Matrix, up: &Matrix, down: &Matrix, h: &Tensor) -> Result<Tensor> {
        let gate = gate.forward(h)?;
        let act =
            if self.config.architecture.is_gemma() { gelu_as_llama(&gate)? } else { candle_nn::ops::silu(&gate)? };
        Ok(down.forward(&(act * up.forward(h)?)?)?)
    }

    /// DeepSeek V2's latent attention in the graph pass, as `mla_host` runs
    /// it: each head's unrotated query taken into the latent's space by
    /// `attn_k_b`, beside its rotated part; one KV head of the normed
    /// latent beside the rotated shared key, whose first `kv_lora_rank`
    /// dimensions are the values (the cache keeps no values of its own);
    /// each head's mix of latents out through `attn_v_b`.
    fn mla_graph(
        &self,
        m: &mla::Mla,
        layer: usize,
        h: &Tensor,
        pass: &GraphLayerInputs,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let c = &self.config;
        let GraphLayerInputs { rope, mask, kv_start, .. } = *pass;
        let mla = c.mla.expect("a latent-attention layer has its shape");
        let nh = c.attention_shape(layer).n_heads;
        let (rd, kvr, hk, hv) = (c.rope_dims, mla.kv_lora_rank, mla.head_k, mla.head_v);
        let (nope, width) = (hk - rd, kvr + rd);
        let (batch, seq_len, _) = h.dims3()?;
        let interleaved = c.architecture.interleaved_rope();
        let q = match &m.query {
            mla::Query::Direct(wq) => wq.forward(h)?,
            mla::Query::LowRank { a, norm, b } => b.forward(&norm.forward(&a.forward(h)?)?)?,
        };
        let q = q.reshape((batch, seq_len, nh, hk))?.transpose(1, 2)?;
        let q_pe = rope.apply(&q.narrow(3, nope, rd)?.contiguous()?, interleaved)?;
        let absorbed = (0..nh)
            .map(|head| m.k_b[head].forward(&q.narrow(1, head, 1)?.narrow(3, 0, nope)?.squeeze(1)?.contiguous()?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let q = Tensor::cat(&[&Tensor::stack(&absorbed, 1)?, &q_pe], 3)?;

        let kva = m.kv_a.forward(h)?;
        let latent = m.kv_a_norm.forward(&kva.narrow(2, 0, kvr)?.contiguous()?)?;
        let k_pe = rope.apply(&kva.narrow(2, kvr, rd)?.reshape((batch, 1, seq_len, rd))?.contiguous()?, interleaved)?;
        let key = Tensor::cat(&[&latent.reshape((batch, 1, seq_len, kvr))?, &k_pe], 3)?;
        cache.write(layer, &key, None)?;
        let end = cache.len() + seq_len;
        let (k_all, _) = cache.view(layer, kv_start, end)?;
        let kv_len = end - kv_start;

        // Every head against the one KV head, as rows of it.
        let q = round_to_f16(&q.reshape((batch, 1, nh * seq_len, width))?)?;
        let scale = c.attention_scale.unwrap_or(1.0f32 / (width as f32).sqrt()) as f64;
        let mut scores = (q.matmul(&k_all.t()?)? * scale)?;
        if let Some(mask) = mask {
            scores = scores.reshape((batch, 1, nh, seq_len, kv_len))?.broadcast_add(mask)?.reshape((
                batch,
                1,
                nh * seq_len,
                kv_len,
            ))?;
        }
        let probs = round_to_f16(&candle_nn::ops::softmax_last_dim(&scores)?)?;
        let mixed = probs.matmul(&k_all.narrow(3, 0, kvr)?.contiguous()?)?.reshape((batch, nh, seq_len, kvr))?;
        let heads = (0..nh)
            .map(|head| m.v_b[head].forward(&mixed.narrow(1, head, 1)?.squeeze(1)?.contiguous()?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let out = Tensor::stack(&heads, 2)?.reshape((batch, seq_len, nh * hv))?;
        Ok(m.wo.forward(&out)?)
    }

    /// One attention layer of the graph pass for the normed input `h`:
    /// its keys and values written into `cache`, its output before the
    /// residual. Qwen 3.5's gated queries and partial RoPE as the host pass
    /// runs them.
    fn attention_graph(
        &self,
        a: &Attention,
        layer: usize,
        h: &Tensor,
        pass: &GraphLayerInputs,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let GraphLayerInputs { rope, mask, kv_start, temperature, .. } = *pass;
        let c = &self.config;
        let shape = c.attention_shape(layer);
        let (nh, nkv, hd) = (shape.n_heads, shape.n_kv_heads, shape.head_dim);
        let (batch, seq_len, _) = h.dims3()?;
        let heads = |t: Tensor, n: usize| t.reshape((batch, seq_len, n, hd))?.transpose(1, 2)?.contiguous();
        let projected = a.wq.forward(h)?;
        // Gated: each head's queries, then its output gate.
        let (q, gate) = if a.gated {
            let both = projected.reshape((batch, seq_len, nh, 2 * hd))?;
            (both.narrow(3, 0, hd)?.reshape((batch, seq_len, nh * hd))?, Some(both.narrow(3, hd, hd)?))
        } else {
            (projected, None)
        };
        // Q and K normed per head, or (OLMo 2) across all heads: the
        // weight's length says.
        let normed = |t: Tensor, norm: &Option<Norm>, n: usize| -> candle_core::Result<Tensor> {
            match norm {
                Some(norm) if norm.host.len() != hd => heads(norm.forward(&t)?, n),
                Some(norm) => norm.forward(&heads(t, n)?),
                None => heads(t, n),
            }
        };
        let q = normed(q, &a.q_norm, nh)?;
        let interleaved = c.architecture.interleaved_rope();
        let rotate = |t: &Tensor| -> candle_core::Result<Tensor> {
            let rd = shape.rope_dims;
            if rd == hd {
                return rope.apply(t, interleaved);
            }
            if rd == 0 {
                // SmolLM3's layers without RoPE.
                return Ok(t.clone());
            }
            // Partial RoPE: the first `rope_dims` of each head turn.
            let turned = rope.apply(&t.narrow(3, 0, rd)?.contiguous()?, interleaved)?;
            Tensor::cat(&[&turned, &t.narrow(3, rd, hd - rd)?], 3)?.contiguous()
        };
        let mut q = rotate(&q)?;
        if let Some(t) = temperature {
            q = q.broadcast_mul(t)?;
        }
        // Keys and values into the cache, but for a layer that reads an
        // earlier layer's (Gemma 4's last ones).
        if let Some(wk) = &a.wk {
            let unbiased = wk.weight.forward(h)?;
            // Gemma 4 without `attn_v`: the keys, before their bias and
            // norm, are the values (as the host pass copies them).
            let v = match &a.wv {
                Some(wv) => wv.forward(h)?,
                None => unbiased.clone(),
            };
            let k = match &wk.bias {
                Some((b, _)) => unbiased.broadcast_add(b)?,
                None => unbiased,
            };
            let k = rotate(&normed(k, &a.k_norm, nkv)?)?;
            let mut v = heads(v, nkv)?;
            if a.v_norm {
                // `ggml_rms_norm`: the norm without a weight.
                v = candle_nn::ops::rms_norm(&v, &Tensor::ones(hd, DType::F32, &self.device)?, c.rms_eps as f32)?;
            }
            cache.write(layer, &k, Some(&v))?;
        }
        let end = cache.len() + seq_len;
        let (k_all, v_all) = cache.view(c.kv_source[layer], kv_start, end)?;
        let v_all =
            v_all.ok_or_else(|| crate::EngineError::CorruptCache(format!("layer {layer}'s cache holds no values")))?;
        let kv_len = end - kv_start;

        // Grouped-query attention without repeating K/V: fold the query heads
        // that share a KV head into the row dimension.
        let n_rep = nh / nkv;
        let q = q.reshape((batch, nkv, n_rep * seq_len, hd))?;
        // In f32 as the host pass computes it (in f64, `1/√96` is another float).
        let scale = c.attention_scale.unwrap_or(1.0f32 / (hd as f32).sqrt()) as f64;
        let (q, scale) = if c.architecture.scales_queries() { ((q * scale)?, 1.0) } else { (q, scale) };
        // As the CPU pass (and llama.cpp): the f16 keys meet f16-rounded
        // queries, the f16 values f16-rounded probabilities.
        let q = round_to_f16(&q)?;
        let mut scores = (q.matmul(&k_all.t()?)? * scale)?;
        if let Some(cap) = c.attention_softcap {
            // Gemma 2: `cap · tanh(score / cap)`, before the mask.
            scores = ((scores * (1.0 / cap) as f64)?.tanh()? * cap as f64)?;
        }
        if let Some(m) = mask {
            scores = scores.reshape((batch, nkv, n_rep, seq_len, kv_len))?.broadcast_add(m)?.reshape((
                batch,
                nkv,
                n_rep * seq_len,
                kv_len,
            ))?;
        }
        let probs = match &a.sinks_tensor {
            // gpt-oss: each head's sink logit joins its softmax's
            // denominator only (a column of its own, dropped after). Query
            // head `g·n_rep + r` is row block `r` of KV head `g`.
            Some(sinks) => {
                let sink = sinks
                    .reshape((1, nkv, n_rep, 1, 1))?
                    .broadcast_as((batch, nkv, n_rep, seq_len, 1))?
                    .reshape((batch, nkv, n_rep * seq_len, 1))?;
                let all = candle_nn::ops::softmax_last_dim(&Tensor::cat(&[&scores, &sink], 3)?)?;
                all.narrow(3, 0, kv_len)?
            }
            None => candle_nn::ops::softmax_last_dim(&scores)?,
        };
        let probs = round_to_f16(&probs)?;
        let mut attn = probs
            .matmul(&v_all.contiguous()?)?
            .reshape((batch, nh, seq_len, hd))?
            .transpose(1, 2)?
            .reshape((batch, seq_len, nh * hd))?;
        if let Some(g) = gate {
            attn = (attn * candle_nn::ops::sigmoid(&g.reshape((batch, seq_len, nh * hd))?)?)?;
        }
        Ok(a.wo.forward(&attn)?)
    }
}

/// What every layer of one graph pass reads beside its input: the RoPE
/// tables, the mask and the first cache position it attends to (a sliding
/// layer's or a full one's), Mistral 3's query factors and Gemma 4's
/// per-layer inputs.
#[derive(Clone, Copy)]
struct GraphLayerInputs<'a> {
    rope: &'a Rope,
    mask: Option<&'a Tensor>,
    kv_start: usize,
    temperature: Option<&'a Tensor>,
    /// Gemma 4: every layer's per-layer input (`PerLayerEmbeddings::inputs_graph`).
    per_layer: Option<&'a Tensor>,
}

/// GELU as llama.cpp's GEGLU takes it (`vec_ops::gelu_mul`): looked up in
/// an f16 table, input and result rounded to f16, but `x` itself from 10
/// on and 0 up to −10.
pub(super) fn gelu_as_llama(t: &Tensor) -> candle_core::Result<Tensor> {
    let table = round_to_f16(&round_to_f16(t)?.gelu()?)?;
    let above = t.ge(10f64)?.where_cond(t, &table)?;
    t.le(-10f64)?.where_cond(&t.zeros_like()?, &above)
}

fn round_to_f16(t: &Tensor) -> candle_core::Result<Tensor> {
    t.to_dtype(DType::F16)?.to_dtype(DType::F32)
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

/// Qwen 3.5's shared-expert gate, one row of `n_embd`: stored as a vector
/// (`[n_embd]`) or as a matrix of one row.
fn shared_gate_input(file: &mut GgufFile, name: &str, n_embd: usize, own: bool, device: &Device) -> Result<Matrix> {
    let info = file.tensor_info(name).ok_or_else(|| file.corrupt(format!("missing tensor {name}")))?;
    if info.dims != [n_embd] && info.dims != [1, n_embd] {
        return Err(file.corrupt(format!("tensor {name} has shape {:?}, expected [{n_embd}]", info.dims)));
    }
    if !own {
        // One row, as a plain matrix on the device (candle's quantized
        // matmul wants two dimensions).
        let row = file.tensor(name, device)?.dequantize(device)?.reshape((1, n_embd))?;
        return Ok(Matrix::Candle(QMatMul::Tensor(row)));
    }
    let raw = file.raw_tensor(name)?;
    match QuantMatrix::from_raw(raw.dtype, &[1, n_embd], &raw.data) {
        Ok(m) => Ok(Matrix::Own(Arc::new(m))),
        Err(_) if !raw.dtype.is_runnable() => Err(file.unsupported_type(name, raw.dtype)),
        Err(why) => Err(file.corrupt(format!("tensor {name} {why}"))),
    }
}

/// First cache position a sliding layer can see from the first new token;
/// older positions are skipped outright rather than masked.
fn window_start(pos0: usize, window: usize) -> usize {
    (pos0 + 1).saturating_sub(window)
}

/// A RoPE frequency schedule.
struct RopeFreqs {
    half: usize,
    /// `base^(-2 / head_dim)`: the angle shrinks by this from pair to pair.
    theta_scale: f32,
    factors: Option<Vec<f32>>,
    /// Linear position scaling (1 = none).
    freq_scale: f32,
    /// Qwen 3.5's sections: pairs no section claims keep angle 0.
    sections: Option<[usize; 4]>,
    /// YaRN's blend of scaled and unscaled angles, and its magnitude.
    yarn: Option<YarnRamp>,
    /// What cos and sin are multiplied by without YaRN
    /// (`ModelConfig::rope_attn_factor`).
    mscale: f32,
}

/// YaRN for one frequency base, as llama.cpp's `rope_yarn` applies it.
#[derive(Debug, Clone, Copy)]
struct YarnRamp {
    /// The correction dimensions (`ggml_rope_yarn_corr_dims`): pairs
    /// below `low` keep their unscaled angle, pairs past `high` are fully
    /// scaled, those between are blended.
    low: f32,
    high: f32,
    ext_factor: f32,
    /// What cos and sin are multiplied by.
    mscale: f32,
}

impl YarnRamp {
    /// In f32 as ggml computes it: the correction dimensions in ggml-base
    /// (no FMA), the magnitude in `rope_yarn` (compiled with FMA, and
    /// GCC fuses `1 + 0.1 · ln(1 / freq_scale)`).
    fn new(y: &YarnConfig, dims: usize, base: f32, freq_scale: f32) -> Self {
        let corr_dim = |rotations: f32| {
            dims as f32 * (y.original_context as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let low = corr_dim(y.beta_fast).floor().max(0.0);
        let high = corr_dim(y.beta_slow).ceil().min(dims as f32 - 1.0);
        let mscale = if y.ext_factor != 0.0 {
            y.attn_factor * 0.1f32.mul_add((1.0 / freq_scale).ln(), 1.0)
        } else {
            y.attn_factor
        };
        Self { low, high, ext_factor: y.ext_factor, mscale }
    }

    /// How much of pair `i`'s angle stays unscaled, times `ext_factor`.
    fn mix(&self, i: usize) -> f32 {
        let y = (i as f32 - self.low) / (self.high - self.low).max(0.001);
        (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor
    }
}

impl RopeFreqs {
    fn new(head_dim: usize, base: f32, factors: Option<Vec<f32>>, freq_scale: f32) -> Self {
        Self {
            half: head_dim / 2,
            theta_scale: base.powf(-2.0 / head_dim as f32),
            factors,
            freq_scale,
            sections: None,
            yarn: None,
            mscale: 1.0,
        }
    }

    /// Whether pair `i` rotates: llama.cpp's IMROPE gives pair `i` the
    /// section of `i % Σ sections` in turn (time, height, width), and angle
    /// 0 where that section has run out. For text the three positions are
    /// the same, so a claimed pair rotates by the usual angle.
    fn rotates(&self, i: usize) -> bool {
        let Some(s) = self.sections else { return true };
        let sector = i % s.iter().sum::<usize>().max(1);
        match sector % 3 {
            0 => sector < 3 * s[0],
            1 => sector < 3 * s[1],
            _ => sector < 3 * s[2],
        }
    }

    /// cos/sin tables `[seq_len, head_dim / 2]` for positions
    /// `pos0..pos0 + seq_len`. The angle is built by repeated multiplication
    /// in f32, as llama.cpp's `rope_cache_init` builds it, so the tables
    /// match its to the bit.
    fn tables(&self, pos0: usize, seq_len: usize) -> (Vec<f32>, Vec<f32>) {
        let mut cos = Vec::with_capacity(seq_len * self.half);
        let mut sin = Vec::with_capacity(seq_len * self.half);
        for p in pos0..pos0 + seq_len {
            let mut theta = p as f32;
            for i in 0..self.half {
                let ff = self.factors.as_ref().map_or(1.0, |f| f[i]);
                let extrapolated = theta / ff;
                let interpolated = self.freq_scale * extrapolated;
                match (&self.yarn, self.rotates(i)) {
                    (_, false) => {
                        cos.push(1.0);
                        sin.push(0.0);
                    }
                    (None, true) => {
                        cos.push(interpolated.cos() * self.mscale);
                        sin.push(interpolated.sin() * self.mscale);
                    }
                    (Some(y), true) => {
                        // GCC fuses the blend's first product into its sum.
                        let mix = if y.ext_factor != 0.0 { y.mix(i) } else { 0.0 };
                        let angle = interpolated.mul_add(1.0 - mix, extrapolated * mix);
                        cos.push(angle.cos() * y.mscale);
                        sin.push(angle.sin() * y.mscale);
                    }
                }
                theta *= self.theta_scale;
            }
        }
        (cos, sin)
    }
}

/// cos/sin tables for just the positions of this forward pass.
struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    fn new(freqs: &RopeFreqs, pos0: usize, seq_len: usize, device: &Device) -> candle_core::Result<Self> {
        let half = freqs.half;
        let (cos, sin) = freqs.tables(pos0, seq_len);
        Ok(Self {
            cos: Tensor::from_vec(cos, (seq_len, half), device)?,
            sin: Tensor::from_vec(sin, (seq_len, half), device)?,
        })
    }

    fn apply(&self, x: &Tensor, interleaved: bool) -> candle_core::Result<Tensor> {
        if interleaved {
            candle_nn::rotary_emb::rope_i(x, &self.cos, &self.sin)
        } else {
            candle_nn::rotary_emb::rope(x, &self.cos, &self.sin)
        }
    }
}

/// Additive mask `[seq_len, kv_len]` for new positions `pos0..pos0+seq_len`
/// against cache positions `kv_start..pos0+seq_len`. `None` when nothing is masked.
fn causal_mask(
    seq_len: usize,
    pos0: usize,
    kv_start: usize,
    window: Option<usize>,
    device: &Device,
) -> candle_core::Result<Option<Tensor>> {
    let kv_end = pos0 + seq_len;
    let kv_len = kv_end - kv_start;
    let mut any = false;
    let mut m = vec![0f32; seq_len * kv_len];
    for i in 0..seq_len {
        let q = pos0 + i;
        for j in 0..kv_len {
            let k = kv_start + j;
            let hidden = k > q || window.is_some_and(|w| q - k >= w);
            if hidden {
                m[i * kv_len + j] = f32::NEG_INFINITY;
                any = true;
            }
        }
    }
    if !any {
        return Ok(None);
    }
    Ok(Some(Tensor::from_vec(m, (seq_len, kv_len), device)?.to_dtype(DType::F32)?))
}
