//! Loading a `Model`'s weights from a GGUF file: every layer's tensors
//! checked against the config and held as the pass that runs them wants.

use std::sync::Arc;

use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Tensor};

use super::rope::{RopeFreqs, YarnRamp};
use super::{
    check_shape, delta_net, experts, families, graph_experts, host_vector, mla, mtp, per_layer, short_conv, Attention,
    Block, DenseAndExperts, Embeddings, ExpertsConfig, Ffn, Kernels, LayerExperts, Linear, Matrix, Mixer, Model,
    ModelConfig, Norm, SharedExpert,
};
use crate::cpu::QuantMatrix;
use crate::error::Result;
use crate::gguf::GgufFile;

impl Model {
    /// Loads weights for the architecture named in the file.
    pub fn load(file: &mut GgufFile, device: &Device) -> Result<Self> {
        Self::load_with(file, device, Kernels::Hearth)
    }

    pub fn load_with(file: &mut GgufFile, device: &Device, kernels: Kernels) -> Result<Self> {
        let graph = !device.is_cpu() || kernels == Kernels::Graph;
        // The graph pass (a GPU's) runs no MTP head.
        let config = ModelConfig::from_gguf(file)?;
        let config = if graph { config.without_mtp() } else { config };
        let family = config.architecture.family();
        let loader = Loader {
            config: &config,
            device,
            graph,
            own_kernels: device.is_cpu() && kernels == Kernels::Hearth,
            weight_bytes: std::cell::Cell::new(0),
        };
        let (own_kernels, weight_bytes) = (loader.own_kernels, &loader.weight_bytes);
        let norm = |file: &mut GgufFile, name: &str| loader.norm(file, name);
        let matmul = |file: &mut GgufFile, name: &str, rows: usize, cols: usize| loader.matmul(file, name, rows, cols);
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
        // The MTP head's layer, where the file has one, loads when a
        // conversation first drafts with it (`Model::start_mtp`).
        let layers = (0..config.n_layers).map(|i| loader.block(file, i)).collect::<Result<Vec<_>>>()?;
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
        let mtp_source = (config.mtp_layers > 0).then(|| (file.path().to_path_buf(), kernels));
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
            mtp: Default::default(),
            mtp_source,
            mtp_loading: Default::default(),
            vocab_size,
            device: device.clone(),
            graph,
            passes_run: Default::default(),
        })
    }
}

impl Model {
    /// Loads the MTP head from the model's file (`mtp_source`), which
    /// must still be the file the model was loaded from.
    pub(super) fn load_mtp_head(&self) -> Result<mtp::MtpHead> {
        let Some((path, kernels)) = &self.mtp_source else {
            return Err(crate::EngineError::setting("speculation", "this model has no MTP head"));
        };
        let mut file = GgufFile::open(path)?;
        let config = ModelConfig::from_gguf(&file)?;
        if config != self.config {
            return Err(file.corrupt("the file changed since the model was loaded"));
        }
        let loader = Loader {
            config: &self.config,
            device: &self.device,
            graph: self.graph,
            own_kernels: self.device.is_cpu() && *kernels == Kernels::Hearth,
            weight_bytes: std::cell::Cell::new(0),
        };
        loader.mtp_head(&mut file, self.vocab_size, &self.output)
    }
}

/// What loading a layer needs: the config, the device and kernels, and the
/// bytes of weights loaded so far (what a decode step reads).
struct Loader<'a> {
    config: &'a ModelConfig,
    device: &'a Device,
    graph: bool,
    own_kernels: bool,
    weight_bytes: std::cell::Cell<usize>,
}

impl Loader<'_> {
    fn norm(&self, file: &mut GgufFile, name: &str) -> Result<Norm> {
        Norm::new(file.tensor(name, self.device)?, self.config.rms_eps, self.device)
    }

    fn norm_opt(&self, file: &mut GgufFile, name: &str) -> Result<Option<Norm>> {
        match file.tensor_opt(name, self.device)? {
            Some(t) => Ok(Some(Norm::new(t, self.config.rms_eps, self.device)?)),
            None => Ok(None),
        }
    }

    fn matmul(&self, file: &mut GgufFile, name: &str, rows: usize, cols: usize) -> Result<Matrix> {
        check_shape(file, name, &[rows, cols])?;
        let m = Matrix::load(file, name, self.device, self.own_kernels)?;
        self.weight_bytes.set(self.weight_bytes.get() + m.stored_bytes());
        Ok(m)
    }

    /// The MTP head (`model/mtp.rs`) of a file with one: its layer after
    /// the model's and its `nextn` tensors. `output` is the model's output
    /// matrix, which the head shares unless the file has its own.
    pub(super) fn mtp_head(&self, file: &mut GgufFile, vocab_size: usize, output: &Matrix) -> Result<mtp::MtpHead> {
        let (config, device) = (self.config, self.device);
        let block = self.block(file, config.n_layers)?;
        let p = format!("blk.{}.nextn", config.n_layers);
        let e = config.n_embd;
        let embeddings = match file.has_tensor(&format!("{p}.embed_tokens.weight")) {
            true => {
                let name = format!("{p}.embed_tokens.weight");
                check_shape(file, &name, &[vocab_size, e])?;
                let Matrix::Own(m) = Matrix::load(file, &name, device, true)? else {
                    unreachable!("loaded with Hearth's own kernels")
                };
                Some(m)
            }
            false => None,
        };
        let head_output = match file.has_tensor(&format!("{p}.shared_head_head.weight")) {
            true => Some(self.matmul(file, &format!("{p}.shared_head_head.weight"), vocab_size, e)?),
            false => None,
        };
        let mut head = mtp::MtpHead {
            eh_proj: self.matmul(file, &format!("{p}.eh_proj.weight"), e, 2 * e)?,
            enorm: self.norm(file, &format!("{p}.enorm.weight"))?,
            hnorm: self.norm(file, &format!("{p}.hnorm.weight"))?,
            block,
            norm: self.norm_opt(file, &format!("{p}.shared_head_norm.weight"))?,
            embeddings,
            output: head_output,
            bytes_per_step: 0,
        };
        // A draft step reads the head's layer, its projection and an output matrix.
        let shared_output = if head.output.is_some() { 0 } else { output.stored_bytes() };
        head.bytes_per_step = self.weight_bytes.get() + shared_output;
        Ok(head)
    }

    /// Layer `i`'s weights.
    fn block(&self, file: &mut GgufFile, i: usize) -> Result<Block> {
        let (config, device, graph, own_kernels) = (self.config, self.device, self.graph, self.own_kernels);
        let family = config.architecture.family();
        let weight_bytes = &self.weight_bytes;
        let norm = |file: &mut GgufFile, name: &str| self.norm(file, name);
        let norm_opt = |file: &mut GgufFile, name: &str| self.norm_opt(file, name);
        let matmul = |file: &mut GgufFile, name: &str, rows: usize, cols: usize| self.matmul(file, name, rows, cols);

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
            let mut load = |file: &mut GgufFile, name: &str, rows: usize, cols: usize| matmul(file, name, rows, cols);
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
                let wv = if stores_kv && (!family.values_may_be_keys || file.has_tensor(&format!("{p}.attn_v.weight")))
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
        Ok(Block {
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
        })
    }
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
