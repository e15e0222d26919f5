//! Hearth's own decoder-only transformer over candle-core.
//!
//! One `Model` serves every supported family; `ModelConfig` says where they
//! differ. The model holds weights only: all per-conversation state lives in a
//! `KvCache` passed to `forward`, so one loaded model serves many sessions.

mod config;

pub use config::{Architecture, ModelConfig, SUPPORTED_ARCHITECTURES};

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use candle_transformers::quantized_nn::RmsNorm;

use crate::error::Result;
use crate::gguf::GgufFile;
use crate::kv_cache::KvCache;
use crate::quant_matmul::QuantMatrix;

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
}

/// A loaded model's weights and shape.
pub struct Model {
    config: ModelConfig,
    embeddings: Tensor,
    embed_scale: Option<f64>,
    layers: Vec<Block>,
    norm: RmsNorm,
    output: Matrix,
    inv_freq_global: Vec<f32>,
    inv_freq_local: Vec<f32>,
    vocab_size: usize,
    device: Device,
}

struct Block {
    attn_norm: RmsNorm,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Matrix,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    post_attn_norm: Option<RmsNorm>,
    ffn_norm: RmsNorm,
    gate: Matrix,
    up: Matrix,
    down: Matrix,
    post_ffn_norm: Option<RmsNorm>,
    sliding: bool,
}

/// A weight matrix: Hearth's own kernels where it has them (they round like
/// llama.cpp), candle's `QMatMul` for every other format and device.
enum Matrix {
    Own(QuantMatrix),
    Candle(QMatMul),
}

impl Matrix {
    fn new(t: QTensor, device: &Device, kernels: Kernels) -> Result<Self> {
        if device.is_cpu() && kernels == Kernels::Hearth {
            if let Some(m) = QuantMatrix::from_qtensor(&t) {
                return Ok(Self::Own(m));
            }
        }
        Ok(Self::Candle(QMatMul::from_qtensor(t)?))
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
    bias: Option<Tensor>,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.weight.forward(x)?;
        match &self.bias {
            Some(b) => y.broadcast_add(b),
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
        file.rewind()?;
        let arch = config.architecture;
        let norm = |file: &mut GgufFile, name: &str| -> Result<RmsNorm> {
            Ok(RmsNorm::from_qtensor(file.tensor(name, device)?, config.rms_eps)?)
        };
        let norm_opt = |file: &mut GgufFile, name: &str| -> Result<Option<RmsNorm>> {
            match file.tensor_opt(name, device)? {
                Some(t) => Ok(Some(RmsNorm::from_qtensor(t, config.rms_eps)?)),
                None => Ok(None),
            }
        };
        let matmul = |file: &mut GgufFile, name: &str, rows: usize, cols: usize| -> Result<Matrix> {
            let t = file.tensor(name, device)?;
            check_shape(file, name, &t, &[rows, cols])?;
            Matrix::new(t, device, kernels)
        };

        let embd_q = file.tensor("token_embd.weight", device)?;
        let (vocab_size, embd_cols) = embd_q.shape().dims2().map_err(|_| file.corrupt("token_embd.weight is not a matrix"))?;
        if embd_cols != config.n_embd {
            return Err(file.corrupt(format!("token_embd.weight has {embd_cols} columns, expected {}", config.n_embd)));
        }
        let embeddings = embd_q.dequantize(device)?;
        let output = match file.tensor_opt("output.weight", device)? {
            Some(t) => {
                check_shape(file, "output.weight", &t, &[vocab_size, config.n_embd])?;
                Matrix::new(t, device, kernels)?
            }
            None => Matrix::new(embd_q, device, kernels)?,
        };
        let q_dim = config.n_heads * config.head_dim;
        let kv_dim = config.n_kv_heads * config.head_dim;
        let mut layers = Vec::with_capacity(config.n_layers);
        for i in 0..config.n_layers {
            let p = format!("blk.{i}");
            let bias = |file: &mut GgufFile, name: &str| -> Result<Option<Tensor>> {
                Ok(match file.tensor_opt(&format!("{p}.{name}.bias"), device)? {
                    Some(t) => Some(t.dequantize(device)?),
                    None => None,
                })
            };
            let linear = |file: &mut GgufFile, name: &str, rows: usize| -> Result<Linear> {
                Ok(Linear {
                    weight: matmul(file, &format!("{p}.{name}.weight"), rows, config.n_embd)?,
                    bias: bias(file, name)?,
                })
            };
            let wq = linear(file, "attn_q", q_dim)?;
            let wk = linear(file, "attn_k", kv_dim)?;
            let wv = linear(file, "attn_v", kv_dim)?;
            let ffn_dim = {
                let t = file.tensor(&format!("{p}.ffn_up.weight"), device)?;
                t.shape().dims2().map_err(|_| file.corrupt(format!("{p}.ffn_up.weight is not a matrix")))?.0
            };
            layers.push(Block {
                attn_norm: norm(file, &format!("{p}.attn_norm.weight"))?,
                wq,
                wk,
                wv,
                wo: matmul(file, &format!("{p}.attn_output.weight"), config.n_embd, q_dim)?,
                q_norm: norm_opt(file, &format!("{p}.attn_q_norm.weight"))?,
                k_norm: norm_opt(file, &format!("{p}.attn_k_norm.weight"))?,
                post_attn_norm: norm_opt(file, &format!("{p}.post_attention_norm.weight"))?,
                ffn_norm: norm(file, &format!("{p}.ffn_norm.weight"))?,
                gate: matmul(file, &format!("{p}.ffn_gate.weight"), ffn_dim, config.n_embd)?,
                up: matmul(file, &format!("{p}.ffn_up.weight"), ffn_dim, config.n_embd)?,
                down: matmul(file, &format!("{p}.ffn_down.weight"), config.n_embd, ffn_dim)?,
                post_ffn_norm: norm_opt(file, &format!("{p}.post_ffw_norm.weight"))?,
                sliding: config.is_sliding(i),
            });
        }
        let norm = norm(file, "output_norm.weight")?;
        let freq_factors: Option<Vec<f32>> = match file.tensor_opt("rope_freqs.weight", device)? {
            Some(t) => Some(t.dequantize(device)?.flatten_all()?.to_vec1()?),
            None => None,
        };
        let mut inv_freq_global = inv_freq(config.head_dim, config.rope_base);
        if let Some(f) = &freq_factors {
            if f.len() != inv_freq_global.len() {
                return Err(file.corrupt("rope_freqs.weight has the wrong length"));
            }
            inv_freq_global.iter_mut().zip(f).for_each(|(x, f)| *x /= f);
        }
        if config.rope_linear_scale != 1.0 {
            inv_freq_global.iter_mut().for_each(|x| *x /= config.rope_linear_scale);
        }
        let inv_freq_local = inv_freq(config.head_dim, config.rope_base_local);
        let embed_scale = (arch == Architecture::Gemma3).then(|| (config.n_embd as f64).sqrt());
        Ok(Self {
            config,
            embeddings,
            embed_scale,
            layers,
            norm,
            output,
            inv_freq_global,
            inv_freq_local,
            vocab_size,
            device: device.clone(),
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
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
        KvCache::new(&self.config, max_len.min(self.config.context_length).max(1), &self.device)
    }

    /// Runs `tokens` (`[batch][n]`, the same length for every sequence) at the
    /// cache's next positions, appends their keys and values, and returns the
    /// logits of the last position of each sequence as `[batch, vocab]`.
    pub fn forward(&self, tokens: &[Vec<u32>], cache: &mut KvCache) -> Result<Tensor> {
        let batch = tokens.len();
        let seq_len = tokens.first().map_or(0, Vec::len);
        assert!(batch > 0 && seq_len > 0 && tokens.iter().all(|t| t.len() == seq_len), "forward needs a non-empty rectangular batch");
        if let Some(bad) = tokens.iter().flatten().find(|&&t| t as usize >= self.vocab_size) {
            return Err(candle_core::Error::Msg(format!("token id {bad} is outside the vocabulary of {}", self.vocab_size)).into());
        }
        cache.reserve(seq_len, batch)?;
        let pos0 = cache.len();
        let flat: Vec<u32> = tokens.iter().flatten().copied().collect();
        let ids = Tensor::from_vec(flat, batch * seq_len, &self.device)?;
        let mut x = self.embeddings.index_select(&ids, 0)?.reshape((batch, seq_len, self.config.n_embd))?;
        if let Some(s) = self.embed_scale {
            x = (x * s)?;
        }
        let rope_global = Rope::new(&self.inv_freq_global, pos0, seq_len, &self.device)?;
        let rope_local = Rope::new(&self.inv_freq_local, pos0, seq_len, &self.device)?;
        let mask_global = causal_mask(seq_len, pos0, 0, None, &self.device)?;
        let mask_local = match self.config.sliding_window {
            Some(w) => causal_mask(seq_len, pos0, window_start(pos0, w), Some(w), &self.device)?,
            None => None,
        };
        for (i, block) in self.layers.iter().enumerate() {
            let (rope, mask, start) = if block.sliding {
                let w = self.config.sliding_window.unwrap_or(usize::MAX);
                (&rope_local, mask_local.as_ref(), window_start(pos0, w))
            } else {
                (&rope_global, mask_global.as_ref(), 0)
            };
            x = self.block_forward(block, i, &x, rope, mask, start, cache)?;
        }
        cache.advance(seq_len);
        let x = self.norm.forward(&x.narrow(1, seq_len - 1, 1)?)?;
        let logits = self.output.forward(&x)?;
        Ok(logits.reshape((batch, self.vocab_size))?)
    }

    #[allow(clippy::too_many_arguments)]
    fn block_forward(
        &self,
        b: &Block,
        layer: usize,
        x: &Tensor,
        rope: &Rope,
        mask: Option<&Tensor>,
        kv_start: usize,
        cache: &KvCache,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (batch, seq_len, _) = x.dims3()?;
        let h = b.attn_norm.forward(x)?;
        let heads = |t: Tensor, n: usize| t.reshape((batch, seq_len, n, c.head_dim))?.transpose(1, 2)?.contiguous();
        let mut q = heads(b.wq.forward(&h)?, c.n_heads)?;
        let mut k = heads(b.wk.forward(&h)?, c.n_kv_heads)?;
        let v = heads(b.wv.forward(&h)?, c.n_kv_heads)?;
        if let Some(n) = &b.q_norm {
            q = n.forward(&q)?;
        }
        if let Some(n) = &b.k_norm {
            k = n.forward(&k)?;
        }
        let interleaved = c.architecture.interleaved_rope();
        let q = rope.apply(&q, interleaved)?;
        let k = rope.apply(&k, interleaved)?;
        cache.write(layer, &k, &v)?;
        let end = cache.len() + seq_len;
        let (k_all, v_all) = cache.view(layer, kv_start, end)?;
        let kv_len = end - kv_start;

        // Grouped-query attention without repeating K/V: fold the query heads
        // that share a KV head into the row dimension.
        let n_rep = c.n_heads / c.n_kv_heads;
        let q = q.reshape((batch, c.n_kv_heads, n_rep * seq_len, c.head_dim))?;
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        let mut scores = (q.matmul(&k_all.t()?)? * scale)?;
        if let Some(m) = mask {
            scores = scores
                .reshape((batch, c.n_kv_heads, n_rep, seq_len, kv_len))?
                .broadcast_add(m)?
                .reshape((batch, c.n_kv_heads, n_rep * seq_len, kv_len))?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let attn = probs
            .matmul(&v_all.contiguous()?)?
            .reshape((batch, c.n_heads, seq_len, c.head_dim))?
            .transpose(1, 2)?
            .reshape((batch, seq_len, c.n_heads * c.head_dim))?;
        let mut attn = b.wo.forward(&attn)?;
        if let Some(n) = &b.post_attn_norm {
            attn = n.forward(&attn)?;
        }
        let x = (x + attn)?;

        let h = b.ffn_norm.forward(&x)?;
        let gate = b.gate.forward(&h)?;
        let act = if c.architecture == Architecture::Gemma3 { gate.gelu()? } else { candle_nn::ops::silu(&gate)? };
        let mut ffn = b.down.forward(&(act * b.up.forward(&h)?)?)?;
        if let Some(n) = &b.post_ffn_norm {
            ffn = n.forward(&ffn)?;
        }
        Ok((x + ffn)?)
    }
}

fn check_shape(file: &GgufFile, name: &str, t: &QTensor, expected: &[usize]) -> Result<()> {
    if t.shape().dims() != expected {
        return Err(file.corrupt(format!("tensor {name} has shape {:?}, expected {expected:?}", t.shape().dims())));
    }
    Ok(())
}

fn inv_freq(head_dim: usize, base: f32) -> Vec<f32> {
    (0..head_dim / 2).map(|i| 1.0 / base.powf(2.0 * i as f32 / head_dim as f32)).collect()
}

/// First cache position a sliding layer can see from the first new token;
/// older positions are skipped outright rather than masked.
fn window_start(pos0: usize, window: usize) -> usize {
    (pos0 + 1).saturating_sub(window)
}

/// cos/sin tables for just the positions of this forward pass.
struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    fn new(inv_freq: &[f32], pos0: usize, seq_len: usize, device: &Device) -> candle_core::Result<Self> {
        let half = inv_freq.len();
        let mut cos = Vec::with_capacity(seq_len * half);
        let mut sin = Vec::with_capacity(seq_len * half);
        for p in pos0..pos0 + seq_len {
            for &f in inv_freq {
                let angle = p as f32 * f;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
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
fn causal_mask(seq_len: usize, pos0: usize, kv_start: usize, window: Option<usize>, device: &Device) -> candle_core::Result<Option<Tensor>> {
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


