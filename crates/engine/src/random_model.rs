//! A llama-family, Qwen3-MoE, Qwen 3.5 (hybrid, dense or with experts),
//! gpt-oss or Gemma 4 (dense, or with experts beside its MLP) GGUF with random weights and another model's tokenizer, so that
//! speed can be measured at sizes and proportions the default model does
//! not have (`hearth-cli write-random-model`; llama.cpp loads it too), and
//! tests can run a family no small real file is at hand for.
//!
//! Tensors are made and written one at a time (`gguf_writer`), so a file of
//! real proportions never sits in memory whole. MXFP4 tensors are random
//! blocks (exponents in the range trained weights have), not quantized
//! values: no quantizer here writes MXFP4.

use std::path::Path;

use crate::error::EngineError;
use crate::ggml_type::GgmlType;
use crate::gguf_writer::{self, TensorEntry};
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

mod main_families;
mod other_families;

pub use main_families::write;
pub use other_families::{write_family, FAMILIES};

pub struct Shape {
    pub layers: usize,
    pub embd: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// Defaults to `embd / heads`.
    pub head_dim: Option<usize>,
    /// A `qwen3moe` file with these experts in place of the dense FFN
    /// (`qwen35moe` with `recurrent`).
    pub experts: Option<Experts>,
    /// A Qwen 3.5 hybrid (`qwen35`, or `qwen35moe` with experts).
    pub recurrent: Option<Recurrent>,
    /// A `gpt-oss` file (with `experts`): biases, sinks, a 128-position
    /// window on even layers, YaRN, an untied output.
    pub gpt_oss: bool,
    /// A `gemma4` file (`heads`, `kv_heads` and `head_dim` are its full
    /// layers'; with `experts` beside the dense MLP).
    pub gemma4: Option<Gemma4>,
}

impl Shape {
    /// A dense llama file: no experts, recurrence or family of its own.
    pub fn dense(layers: usize, embd: usize, ffn: usize, heads: usize, kv_heads: usize) -> Self {
        Self {
            layers,
            embd,
            ffn,
            heads,
            kv_heads,
            head_dim: None,
            experts: None,
            recurrent: None,
            gpt_oss: false,
            gemma4: None,
        }
    }
}

/// Gemma 4's choices: four sliding layers to each full one (the last
/// layer full), full layers whose keys serve as values, the last
/// `shared_kv_layers` reading the last layers before them of their kind.
pub struct Gemma4 {
    /// `embedding_length_per_layer_input` (0: none).
    pub per_layer: usize,
    pub shared_kv_layers: usize,
    pub head_dim_swa: usize,
    pub kv_heads_swa: usize,
    pub window: usize,
}

impl Gemma4 {
    /// Which layers slide: every fifth and the last are full, and so is the
    /// last layer that keeps its own keys and values, the one before it
    /// sliding (the layers that read them need one of each).
    pub fn sliding(&self, layers: usize) -> Vec<bool> {
        let mut sliding: Vec<bool> = (0..layers).map(|i| (i + 1) % 5 != 0 && i + 1 != layers).collect();
        if self.shared_kv_layers > 0 && layers >= self.shared_kv_layers + 2 {
            let n_kv = layers - self.shared_kv_layers;
            sliding[n_kv - 1] = false;
            sliding[n_kv - 2] = true;
        }
        sliding
    }
}

/// A hybrid's Gated DeltaNet layers, and its attention layers' rotary share.
pub struct Recurrent {
    /// Each head's key and value size (`ssm.state_size`).
    pub state: usize,
    pub k_heads: usize,
    pub v_heads: usize,
    /// Every how many layers one is full attention.
    pub interval: usize,
    /// Rotated dimensions of each attention head.
    pub rope_dims: usize,
    /// The shared expert's width, with experts.
    pub shared_ffn: usize,
    /// A multi-token-prediction block after the layers, as Qwen 3.5's
    /// converter writes it (`model/mtp.rs`).
    pub mtp: bool,
}

/// Experts per layer, used per token, each one's width, and their type.
pub struct Experts {
    pub count: usize,
    pub used: usize,
    pub ffn: usize,
    pub dtype: String,
}

/// The type `--dtype` names.
fn dtype_named(dtype: &str) -> Result<GgmlType, EngineError> {
    Ok(match dtype.to_ascii_lowercase().as_str() {
        "q4_0" => GgmlType::Q4_0,
        "q4_1" => GgmlType::Q4_1,
        "q8_0" => GgmlType::Q8_0,
        "q4_k" => GgmlType::Q4K,
        "q6_k" => GgmlType::Q6K,
        "mxfp4" => GgmlType::Mxfp4,
        other => {
            return Err(EngineError::InvalidSetting {
                field: "dtype",
                reason: format!("{other:?} is not one of q4_0, q4_1, q8_0, q4_k, q6_k, mxfp4"),
            })
        }
    })
}

/// candle's quantizer for a type this writer fills with values; `None`
/// for MXFP4, which it fills with random blocks.
fn candle_type(t: GgmlType) -> Option<GgmlDType> {
    Some(match t {
        GgmlType::F32 => GgmlDType::F32,
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q4_1 => GgmlDType::Q4_1,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q4K => GgmlDType::Q4K,
        GgmlType::Q6K => GgmlDType::Q6K,
        _ => return None,
    })
}

/// How one tensor's values are made.
#[derive(Clone, Copy)]
enum Fill {
    /// Uniform in ±scale.
    Random(f32),
    Ones,
    /// −exp of uniform in ±scale (a DeltaNet's `ssm_a`, as the converter stores it).
    NegExp(f32),
    /// Gemma 4's `rope_freqs`: 1 for the first `n` pairs, 1e30 (no
    /// rotation) for the rest, as its converter writes them.
    RopeFactors(usize),
}

/// A tensor to write: its entry, and how it is filled.
struct Planned {
    entry: TensorEntry,
    fill: Fill,
}

/// An LCG over the whole file, so the same shape writes the same bytes.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0
    }

    fn uniform(&mut self, scale: f32) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }

    /// Random MXFP4 blocks for `elems` values: exponents 2^-15 … 2^-9
    /// (halved), so values of a few hundredths, as trained experts have.
    fn mxfp4(&mut self, elems: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(elems / 32 * 17);
        for _ in 0..elems / 32 {
            out.push(113 + (self.next() >> 33) as u8 % 7);
            out.extend((0..16).map(|_| (self.next() >> 33) as u8));
        }
        out
    }
}

/// A file of `from`'s tokenizer metadata alone, no tensors: a vocabulary
/// small enough to carry where the model is not (a few MB), from which
/// `write` and `write_family` make random-weight files there.
pub fn write_vocab(out: &Path, from: &Path) -> Result<(), EngineError> {
    let (md, _) = tokenizer_of(from)?;
    gguf_writer::write(out, &md, &[], |_| unreachable!("no tensors"))
}

/// `tokenizer_from`'s tokenizer metadata and vocabulary size.
fn tokenizer_of(tokenizer_from: &Path) -> Result<(Vec<(String, Value)>, usize), EngineError> {
    let io = |e: std::io::Error| EngineError::InvalidSetting { field: "out", reason: e.to_string() };
    let mut src = std::fs::File::open(tokenizer_from).map_err(io)?;
    let content = gguf_file::Content::read(&mut src)?;
    let md: Vec<(String, Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    match content.metadata.get("tokenizer.ggml.tokens") {
        Some(Value::Array(t)) => Ok((md, t.len())),
        _ => Err(EngineError::InvalidSetting {
            field: "tokenizer",
            reason: "the source model has no tokenizer.ggml.tokens".into(),
        }),
    }
}

/// Writes `md` and the `plan`ned tensors, one at a time, to `out`.
fn write_planned(out: &Path, md: &[(String, Value)], plan: Vec<Planned>) -> Result<(), EngineError> {
    let entries: Vec<TensorEntry> = plan.iter().map(|p| p.entry.clone()).collect();
    if entries.iter().any(|e| e.dims.last().is_some_and(|&k| k % e.dtype.block_size() != 0)) {
        return Err(EngineError::InvalidSetting {
            field: "dtype",
            reason: "a tensor's rows are not whole blocks of its type; choose sizes that are multiples of 256".into(),
        });
    }
    let mut rng = Lcg(0x9E37_79B9_7F4A_7C15);
    gguf_writer::write(out, md, &entries, |i| {
        let p = &plan[i];
        let elems = p.entry.dims.iter().product::<usize>();
        let Some(candle) = candle_type(p.entry.dtype) else { return Ok(rng.mxfp4(elems)) };
        let t = match p.fill {
            Fill::Ones => Tensor::ones(elems, candle_core::DType::F32, &Device::Cpu)?,
            Fill::Random(s) => Tensor::from_vec((0..elems).map(|_| rng.uniform(s)).collect(), elems, &Device::Cpu)?,
            Fill::RopeFactors(n) => {
                let v = (0..elems).map(|i| if i < n { 1.0 } else { 1e30 }).collect();
                Tensor::from_vec(v, elems, &Device::Cpu)?
            }
            Fill::NegExp(s) => {
                let v = (0..elems).map(|_| -rng.uniform(s).exp()).collect();
                Tensor::from_vec(v, elems, &Device::Cpu)?
            }
        };
        let t = t.reshape(p.entry.dims.as_slice())?;
        Ok(QTensor::quantize(&t, candle)?.data()?.into_owned())
    })
}
