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
mod matmul;
mod metadata;
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
        let family = config.architecture.family();
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
                let gated = family.mixers == families::Mixers::DeltaNet;
                let sinks = if family.attention_sinks {
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
                        && (!family.values_may_be_keys || file.has_tensor(&format!("{p}.attn_v.weight")))
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
                    v_norm: family.values_may_be_keys,
                })
            };
            let beside_dense = family.experts == Some(families::ExpertStyle::BesideDense);
            let gemma4_experts = beside_dense && file.has_tensor(&format!("{p}.ffn_gate_inp.weight"));
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
                Some(ec) if !beside_dense && i >= ec.dense_lead => {
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
                            gate_inp: if !family.experts.is_some_and(|e| e.gated_shared_expert()) {
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
            let post_attention = format!("{p}.post_attention_norm.weight");
            let (post_attn_norm, ffn_norm) = match family.norms {
                families::Norms::FfnAsPostAttention => (None, Some(norm(file, &post_attention)?)),
                families::Norms::PostOnly => (Some(norm(file, &post_attention)?), None),
                families::Norms::Pre => {
                    (norm_opt(file, &post_attention)?, Some(norm(file, &format!("{p}.ffn_norm.weight"))?))
                }
            };
            layers.push(Block {
                attn_norm: if family.norms == families::Norms::PostOnly {
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
        let norm = norm(file, family.output_norm)?;
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
        let embed_scale = if family.gemma_style {
            Some((config.n_embd as f64).sqrt())
        } else {
            config.embedding_scale.map(f64::from)
        };
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
    /// batch 1): `tokens[i]` fed to `caches[i]`, logits per sequence, the
    /// weights read once for all of them. On the CPU each row is summed as
    /// it would be alone, so every sequence gets the bits a step of its own
    /// gives; the graph pass (a GPU's) runs the rows as one batch, and on a
    /// GPU candle picks its matmul kernels by the number of rows, so a
    /// row's bits there may depend on how many conversations share the step.
    pub fn decode_step_many(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Vec<Vec<f32>>> {
        if tokens.len() != caches.len() || caches.iter().any(|c| c.batch() != 1) {
            return Err(crate::EngineError::setting("caches", "one token for each cache of one sequence"));
        }
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        self.check_tokens(&tokens.iter().map(|&t| vec![t]).collect::<Vec<_>>())?;
        self.passes_run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.graph {
            self.forward_graph_caches(tokens, caches)
        } else {
            self.forward_host_caches(tokens, caches)
        }
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
