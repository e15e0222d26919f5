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

/// A Gemma 4 file's tensors after the token embeddings.
fn gemma4_tensors(
    add: &mut dyn FnMut(String, Vec<usize>, GgmlType, Fill),
    shape: &Shape,
    g: &Gemma4,
    vocab: usize,
    dtype: GgmlType,
    experts_dtype: GgmlType,
) {
    let e = shape.embd;
    let scale = 1.0 / (e as f32).sqrt();
    let head_dim = shape.head_dim.unwrap_or(e / shape.heads);
    let sliding = g.sliding(shape.layers);
    let n_kv = shape.layers - g.shared_kv_layers;
    // Proportional RoPE: a quarter of each full head's pairs rotate.
    add("rope_freqs.weight".into(), vec![head_dim / 2], GgmlType::F32, Fill::RopeFactors(head_dim / 8));
    if g.per_layer > 0 {
        let n = g.per_layer * shape.layers;
        add("per_layer_token_embd.weight".into(), vec![vocab, n], dtype, Fill::Random(1.0));
        add("per_layer_model_proj.weight".into(), vec![n, e], dtype, Fill::Random(scale));
        add("per_layer_proj_norm.weight".into(), vec![g.per_layer], GgmlType::F32, Fill::Ones);
    }
    for (i, &swa) in sliding.iter().enumerate() {
        let p = |n: &str| format!("blk.{i}.{n}");
        let (hd, kvh) = if swa { (g.head_dim_swa, g.kv_heads_swa) } else { (head_dim, shape.kv_heads) };
        let (q, kv) = (shape.heads * hd, kvh * hd);
        add(p("attn_q.weight"), vec![q, e], dtype, Fill::Random(scale));
        if i < n_kv {
            add(p("attn_k.weight"), vec![kv, e], dtype, Fill::Random(scale));
            // Full layers' keys serve as their values (no `attn_v`).
            if swa {
                add(p("attn_v.weight"), vec![kv, e], dtype, Fill::Random(scale));
            }
            add(p("attn_k_norm.weight"), vec![hd], GgmlType::F32, Fill::Ones);
        }
        add(p("attn_q_norm.weight"), vec![hd], GgmlType::F32, Fill::Ones);
        add(p("attn_output.weight"), vec![e, q], dtype, Fill::Random(1.0 / (q as f32).sqrt()));
        for norm in ["attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"] {
            add(p(&format!("{norm}.weight")), vec![e], GgmlType::F32, Fill::Ones);
        }
        add(p("ffn_gate.weight"), vec![shape.ffn, e], dtype, Fill::Random(scale));
        add(p("ffn_up.weight"), vec![shape.ffn, e], dtype, Fill::Random(scale));
        add(p("ffn_down.weight"), vec![e, shape.ffn], dtype, Fill::Random(1.0 / (shape.ffn as f32).sqrt()));
        if let Some(x) = &shape.experts {
            add(p("ffn_gate_inp.weight"), vec![x.count, e], GgmlType::F32, Fill::Random(4.0 * scale));
            add(p("ffn_gate_inp.scale"), vec![e], GgmlType::F32, Fill::Ones);
            add(p("ffn_gate_exps.weight"), vec![x.count, x.ffn, e], experts_dtype, Fill::Random(scale));
            add(p("ffn_up_exps.weight"), vec![x.count, x.ffn, e], experts_dtype, Fill::Random(scale));
            add(p("ffn_down_exps.weight"), vec![x.count, e, x.ffn], experts_dtype, Fill::Random(scale));
            add(p("ffn_down_exps.scale"), vec![x.count], GgmlType::F32, Fill::Ones);
            for norm in ["pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"] {
                add(p(&format!("{norm}.weight")), vec![e], GgmlType::F32, Fill::Ones);
            }
        }
        if g.per_layer > 0 {
            add(p("inp_gate.weight"), vec![g.per_layer, e], dtype, Fill::Random(scale));
            add(p("proj.weight"), vec![e, g.per_layer], dtype, Fill::Random(1.0 / (g.per_layer as f32).sqrt()));
            add(p("post_norm.weight"), vec![e], GgmlType::F32, Fill::Ones);
        }
        add(p("layer_output_scale.weight"), vec![1], GgmlType::F32, Fill::Ones);
    }
}

pub fn write(out: &Path, tokenizer_from: &Path, shape: &Shape, dtype: &str) -> Result<(), EngineError> {
    let dtype = dtype_named(dtype)?;
    if dtype == GgmlType::Mxfp4 {
        return Err(EngineError::InvalidSetting {
            field: "dtype",
            reason: "MXFP4 is for experts only here (--experts-dtype mxfp4)".into(),
        });
    }
    let experts_dtype = match &shape.experts {
        Some(e) => {
            if e.used == 0 || e.used > e.count {
                return Err(EngineError::InvalidSetting {
                    field: "experts_used",
                    reason: format!("{} of {} experts", e.used, e.count),
                });
            }
            dtype_named(&e.dtype)?
        }
        None => dtype,
    };
    let arch = match (&shape.recurrent, &shape.experts, shape.gpt_oss) {
        _ if shape.gemma4.is_some() && (shape.recurrent.is_some() || shape.gpt_oss) => {
            return Err(EngineError::InvalidSetting {
                field: "gemma4",
                reason: "a Gemma 4 file has no recurrent layers and is not gpt-oss".into(),
            })
        }
        (None, _, false) if shape.gemma4.is_some() => "gemma4",
        (None, Some(_), true) => "gpt-oss",
        (_, _, true) => {
            return Err(EngineError::InvalidSetting {
                field: "gpt_oss",
                reason: "a gpt-oss file has experts and no recurrent layers".into(),
            })
        }
        (Some(_), Some(_), false) => "qwen35moe",
        (Some(_), None, false) => "qwen35",
        (None, Some(_), false) => "qwen3moe",
        (None, None, false) => "llama",
    };
    if let Some(r) = &shape.recurrent {
        if r.interval == 0 || r.k_heads == 0 || r.v_heads % r.k_heads != 0 || r.rope_dims % 2 != 0 {
            return Err(EngineError::InvalidSetting {
                field: "recurrent",
                reason: format!(
                    "interval {}, {} key heads, {} value heads, {} rotary dimensions",
                    r.interval, r.k_heads, r.v_heads, r.rope_dims
                ),
            });
        }
    }
    let (mut md, vocab) = tokenizer_of(tokenizer_from)?;
    let head_dim = shape.head_dim.unwrap_or(shape.embd / shape.heads);
    let u = |k: &str, v: usize| (format!("{arch}.{k}"), Value::U32(v as u32));
    let f = |k: &str, v: f32| (format!("{arch}.{k}"), Value::F32(v));
    md.extend([
        ("general.architecture".to_string(), Value::String(arch.into())),
        ("general.name".to_string(), Value::String(format!("hearth random {arch}"))),
        u("block_count", shape.layers),
        u("embedding_length", shape.embd),
        u("feed_forward_length", shape.ffn),
        u("attention.head_count", shape.heads),
        u("attention.key_length", head_dim),
        u("attention.value_length", head_dim),
        u("rope.dimension_count", shape.recurrent.as_ref().map_or(head_dim, |r| r.rope_dims)),
        f("attention.layer_norm_rms_epsilon", 1e-5),
    ]);
    if shape.gpt_oss {
        // gpt-oss's own: 128k positions by YaRN from 4k.
        md.extend([
            u("context_length", 131_072),
            f("rope.freq_base", 150_000.0),
            u("attention.sliding_window", 128),
            (format!("{arch}.rope.scaling.type"), Value::String("yarn".into())),
            f("rope.scaling.factor", 32.0),
            u("rope.scaling.original_context_length", 4096),
        ]);
    } else if let Some(g) = &shape.gemma4 {
        let sliding = g.sliding(shape.layers);
        let per_layer = |full: usize, swa: usize| {
            Value::Array(sliding.iter().map(|&s| Value::I32(if s { swa } else { full } as i32)).collect())
        };
        md.extend([
            u("context_length", 32_768),
            f("rope.freq_base", 1_000_000.0),
            f("rope.freq_base_swa", 10_000.0),
            u("attention.key_length_swa", g.head_dim_swa),
            u("attention.value_length_swa", g.head_dim_swa),
            u("rope.dimension_count_swa", g.head_dim_swa),
            u("attention.sliding_window", g.window),
            (format!("{arch}.attention.head_count_kv"), per_layer(shape.kv_heads, g.kv_heads_swa)),
            (
                format!("{arch}.attention.sliding_window_pattern"),
                Value::Array(sliding.iter().map(|&s| Value::Bool(s)).collect()),
            ),
            u("attention.shared_kv_layers", g.shared_kv_layers),
            u("embedding_length_per_layer_input", g.per_layer),
            f("final_logit_softcapping", 30.0),
        ]);
    } else {
        md.extend([u("context_length", 4096), f("rope.freq_base", 10000.0)]);
    }
    if shape.gemma4.is_none() {
        md.push(u("attention.head_count_kv", shape.kv_heads));
    }
    if let Some(e) = &shape.experts {
        md.extend([u("expert_count", e.count), u("expert_used_count", e.used), u("expert_feed_forward_length", e.ffn)]);
    }
    if let Some(r) = &shape.recurrent {
        // Qwen 3.5's sections share the rotated pairs as [11, 11, 10, 0] shares 32.
        let pairs = r.rope_dims / 2;
        let sections = [pairs - 2 * (pairs / 3), pairs / 3, pairs / 3, 0];
        md.extend([
            u("ssm.conv_kernel", 4),
            u("ssm.state_size", r.state),
            u("ssm.group_count", r.k_heads),
            u("ssm.time_step_rank", r.v_heads),
            u("ssm.inner_size", r.state * r.v_heads),
            u("full_attention_interval", r.interval),
            (
                format!("{arch}.rope.dimension_sections"),
                Value::Array(sections.iter().map(|&s| Value::I32(s as i32)).collect()),
            ),
        ]);
        if shape.experts.is_some() {
            md.push(u("expert_shared_feed_forward_length", r.shared_ffn));
        }
    }

    let (q, kv) = (shape.heads * head_dim, shape.kv_heads * head_dim);
    let scale = 1.0 / (shape.embd as f32).sqrt();
    let mut plan: Vec<Planned> = Vec::new();
    let mut add = |name: String, dims: Vec<usize>, dtype: GgmlType, fill: Fill| {
        plan.push(Planned { entry: TensorEntry { name, dims, dtype }, fill })
    };
    // Gemma scales its embeddings by √n_embd: rows of about 2/√n_embd then
    // weigh about as much as a layer's (post-normed) output, and the model
    // does not just copy its input.
    let embd_scale = if shape.gemma4.is_some() { 2.0 / (shape.embd as f32).sqrt() } else { 1.0 };
    add("token_embd.weight".into(), vec![vocab, shape.embd], dtype, Fill::Random(embd_scale));
    if let Some(g) = &shape.gemma4 {
        gemma4_tensors(&mut add, shape, g, vocab, dtype, experts_dtype);
    }
    for i in 0..shape.layers {
        if shape.gemma4.is_some() {
            break;
        }
        let p = |n: &str| format!("blk.{i}.{n}");
        let recurrent = shape.recurrent.as_ref().filter(|r| (i + 1) % r.interval != 0);
        let mut matrices = match recurrent {
            Some(r) => {
                let (channels, inner) = ((2 * r.k_heads + r.v_heads) * r.state, r.v_heads * r.state);
                vec![
                    ("attn_qkv.weight", vec![channels, shape.embd], dtype),
                    ("attn_gate.weight", vec![inner, shape.embd], dtype),
                    ("ssm_alpha.weight", vec![r.v_heads, shape.embd], dtype),
                    ("ssm_beta.weight", vec![r.v_heads, shape.embd], dtype),
                    ("ssm_out.weight", vec![shape.embd, inner], dtype),
                ]
            }
            // Qwen 3.5's queries carry an output gate per head.
            None => vec![
                ("attn_q.weight", vec![if shape.recurrent.is_some() { 2 * q } else { q }, shape.embd], dtype),
                ("attn_k.weight", vec![kv, shape.embd], dtype),
                ("attn_v.weight", vec![kv, shape.embd], dtype),
                ("attn_output.weight", vec![shape.embd, q], dtype),
            ],
        };
        if let (Some(r), Some(_)) = (&shape.recurrent, &shape.experts) {
            matrices.extend([
                ("ffn_gate_shexp.weight", vec![r.shared_ffn, shape.embd], dtype),
                ("ffn_up_shexp.weight", vec![r.shared_ffn, shape.embd], dtype),
                ("ffn_down_shexp.weight", vec![shape.embd, r.shared_ffn], dtype),
            ]);
        }
        match &shape.experts {
            Some(e) => matrices.extend([
                ("ffn_gate_inp.weight", vec![e.count, shape.embd], GgmlType::F32),
                ("ffn_gate_exps.weight", vec![e.count, e.ffn, shape.embd], experts_dtype),
                ("ffn_up_exps.weight", vec![e.count, e.ffn, shape.embd], experts_dtype),
                ("ffn_down_exps.weight", vec![e.count, shape.embd, e.ffn], experts_dtype),
            ]),
            None => matrices.extend([
                ("ffn_gate.weight", vec![shape.ffn, shape.embd], dtype),
                ("ffn_up.weight", vec![shape.ffn, shape.embd], dtype),
                ("ffn_down.weight", vec![shape.embd, shape.ffn], dtype),
            ]),
        }
        for (name, dims, t) in matrices {
            // The router's logits spread a few units, so that picks vary.
            let s = if name.starts_with("ffn_gate_inp") { 4.0 * scale } else { scale };
            add(p(name), dims, t, Fill::Random(s));
        }
        add(p("attn_norm.weight"), vec![shape.embd], GgmlType::F32, Fill::Ones);
        // Qwen 3.5 and gpt-oss name their FFN norm `post_attention_norm`.
        let ffn_norm =
            if shape.recurrent.is_some() || shape.gpt_oss { "post_attention_norm.weight" } else { "ffn_norm.weight" };
        add(p(ffn_norm), vec![shape.embd], GgmlType::F32, Fill::Ones);
        if let Some(r) = recurrent {
            let channels = (2 * r.k_heads + r.v_heads) * r.state;
            add(p("ssm_conv1d.weight"), vec![channels, 4], GgmlType::F32, Fill::Random(0.5));
            add(p("ssm_dt.bias"), vec![r.v_heads], GgmlType::F32, Fill::Random(0.5));
            add(p("ssm_a"), vec![r.v_heads], GgmlType::F32, Fill::NegExp(0.5));
            add(p("ssm_norm.weight"), vec![r.state], GgmlType::F32, Fill::Ones);
        }
        if shape.recurrent.is_some() && shape.experts.is_some() {
            add(p("ffn_gate_inp_shexp.weight"), vec![shape.embd], GgmlType::F32, Fill::Random(scale));
        }
        if (shape.experts.is_some() || shape.recurrent.is_some()) && recurrent.is_none() && !shape.gpt_oss {
            add(p("attn_q_norm.weight"), vec![head_dim], GgmlType::F32, Fill::Ones);
            add(p("attn_k_norm.weight"), vec![head_dim], GgmlType::F32, Fill::Ones);
        }
        if let (true, Some(e)) = (shape.gpt_oss, &shape.experts) {
            for (name, dims, s) in [
                ("attn_q.bias", vec![q], 0.1),
                ("attn_k.bias", vec![kv], 0.1),
                ("attn_v.bias", vec![kv], 0.1),
                ("attn_output.bias", vec![shape.embd], 0.1),
                // A few units, as trained sinks are.
                ("attn_sinks.weight", vec![shape.heads], 3.0),
                ("ffn_gate_inp.bias", vec![e.count], 0.5),
                ("ffn_gate_exps.bias", vec![e.count, e.ffn], 0.1),
                ("ffn_up_exps.bias", vec![e.count, e.ffn], 0.1),
                ("ffn_down_exps.bias", vec![e.count, shape.embd], 0.1),
            ] {
                add(p(name), dims, GgmlType::F32, Fill::Random(s));
            }
        }
    }
    add("output_norm.weight".into(), vec![shape.embd], GgmlType::F32, Fill::Ones);
    if shape.gpt_oss {
        add("output.weight".into(), vec![vocab, shape.embd], dtype, Fill::Random(scale));
    }

    write_planned(out, &md, plan)
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

/// The families `write_family` writes: those of the issue that brought
/// them, each in its own tensor layout and metadata, at the sizes `shape`
/// gives (its `experts` for the families with experts; `recurrent`,
/// `gpt_oss` and `gemma4` unused).
pub const FAMILIES: &[&str] = &[
    "smollm3",
    "mistral3",
    "phi3",
    "olmo2",
    "granite",
    "granitemoe",
    "gemma2",
    "gemma3",
    "qwen3vl",
    "glm4moe",
    "deepseek2",
    "lfm2",
];

/// DeepSeek V2's latent attention as GLM-4.7-Flash has it: the latent's
/// rank, the rotated key, each head's unrotated query part and value, and
/// the queries' rank.
const MLA: (usize, usize, usize, usize, usize) = (512, 64, 192, 256, 768);

/// A random-weight file of `family` (one of [`FAMILIES`]) at `shape`'s
/// sizes, with `tokenizer_from`'s vocabulary, for benchmarks against
/// llama.cpp on the families' own layers. DeepSeek V2's per-head
/// `attn_k_b` and `attn_v_b` are Q8_0 (their rows are not whole K-quant
/// blocks), LFM2's convolution taps and every norm f32.
pub fn write_family(
    out: &Path,
    tokenizer_from: &Path,
    family: &str,
    shape: &Shape,
    dtype: &str,
) -> Result<(), EngineError> {
    if !FAMILIES.contains(&family) {
        return Err(EngineError::InvalidSetting {
            field: "family",
            reason: format!("{family:?} is not one of {}", FAMILIES.join(", ")),
        });
    }
    let dtype = dtype_named(dtype)?;
    let moe = matches!(family, "granitemoe" | "glm4moe" | "deepseek2");
    let experts = match (&shape.experts, moe) {
        (Some(e), true) if e.used > 0 && e.used <= e.count => Some(e),
        (_, true) => {
            return Err(EngineError::InvalidSetting {
                field: "experts",
                reason: format!("a {family} file needs experts (--experts, with 1 to that many used)"),
            })
        }
        (_, false) => None,
    };
    let experts_dtype = match experts {
        Some(e) => dtype_named(&e.dtype)?,
        None => dtype,
    };
    let (mut md, vocab) = tokenizer_of(tokenizer_from)?;
    let (e, layers, ffn, nh) = (shape.embd, shape.layers, shape.ffn, shape.heads);
    let hd = shape.head_dim.unwrap_or(e / nh);
    let nkv = if family == "deepseek2" { 1 } else { shape.kv_heads };
    let (q, kv) = (nh * hd, nkv * hd);
    let (rank, rope, nope, vh, q_rank) = MLA;
    let rope_dims = match family {
        "phi3" => hd * 3 / 4,
        "glm4moe" => hd / 2,
        "deepseek2" => rope,
        _ => hd,
    };
    let conv_layer = |i: usize| family == "lfm2" && i % 3 != 2;
    let dense_lead = usize::from(matches!(family, "glm4moe" | "deepseek2"));
    let u = |k: &str, v: usize| (format!("{family}.{k}"), Value::U32(v as u32));
    let f = |k: &str, v: f32| (format!("{family}.{k}"), Value::F32(v));
    let (key_len, value_len) = if family == "deepseek2" { (rank + rope, rank) } else { (hd, hd) };
    md.extend([
        ("general.architecture".to_string(), Value::String(family.into())),
        // Not the family's name: llama.cpp sets Phi-3's token attributes by
        // `general.name`, for tokens this vocabulary lacks.
        ("general.name".to_string(), Value::String("hearth random model".into())),
        u("block_count", layers),
        u("embedding_length", e),
        u("feed_forward_length", if family == "granitemoe" { experts.map_or(ffn, |x| x.ffn) } else { ffn }),
        u("attention.head_count", nh),
        u("attention.key_length", key_len),
        u("attention.value_length", value_len),
        u("rope.dimension_count", rope_dims),
        u("context_length", 32_768),
        f("rope.freq_base", if family == "gemma3" { 1_000_000.0 } else { 10_000.0 }),
        f("attention.layer_norm_rms_epsilon", 1e-5),
    ]);
    if family == "lfm2" {
        // Two convolution layers to each attention layer, as LFM2 has them.
        let kv_heads = (0..layers).map(|i| Value::U32(if conv_layer(i) { 0 } else { nkv as u32 })).collect();
        md.push((format!("{family}.attention.head_count_kv"), Value::Array(kv_heads)));
        md.push(u("shortconv.l_cache", 3));
    } else {
        md.push(u("attention.head_count_kv", nkv));
    }
    if let Some(x) = experts {
        md.extend([u("expert_count", x.count), u("expert_used_count", x.used), u("expert_feed_forward_length", x.ffn)]);
    }
    match family {
        "mistral3" => md.extend([
            (format!("{family}.rope.scaling.type"), Value::String("yarn".into())),
            f("rope.scaling.factor", 16.0),
            u("rope.scaling.original_context_length", 16_384),
            f("rope.scaling.yarn_beta_fast", 32.0),
            f("rope.scaling.yarn_beta_slow", 1.0),
            f("rope.scaling.yarn_log_multiplier", 1.0),
            f("attention.temperature_scale", 0.1),
        ]),
        "phi3" => md.extend([u("rope.scaling.original_context_length", 4096), f("rope.scaling.attn_factor", 1.19)]),
        "granite" | "granitemoe" => md.extend([
            // Granite MoE Shared's shared expert, `--ffn` wide (ignored by dense Granite).
            u("expert_shared_feed_forward_length", if family == "granitemoe" { ffn } else { 0 }),
            f("embedding_scale", 12.0),
            f("residual_scale", 0.22),
            f("attention.scale", 0.015625),
            f("logit_scale", 8.0),
        ]),
        "gemma2" => md.extend([
            u("attention.sliding_window", 4096),
            f("attn_logit_softcapping", 50.0),
            f("final_logit_softcapping", 30.0),
        ]),
        // Gemma 3 270M's: five sliding layers to each full one (llama.cpp's
        // fixed pattern), a 512 window (the 1M base of its full layers above).
        "gemma3" => md.push(u("attention.sliding_window", 512)),
        "qwen3vl" => {
            // Qwen3-VL's [24, 20, 20, 0] share of 64 pairs, at this head size.
            let pairs = hd / 2;
            let sections = [pairs - 2 * (pairs * 5 / 16), pairs * 5 / 16, pairs * 5 / 16, 0];
            md.push((
                format!("{family}.rope.dimension_sections"),
                Value::Array(sections.iter().map(|&s| Value::I32(s as i32)).collect()),
            ));
        }
        "glm4moe" | "deepseek2" => {
            md.extend([
                u("expert_shared_count", 1),
                u("leading_dense_block_count", dense_lead),
                (format!("{family}.expert_weights_norm"), Value::Bool(true)),
                f("expert_weights_scale", 1.8),
                u("expert_gating_func", 2),
            ]);
            if family == "deepseek2" {
                md.extend([
                    u("attention.key_length_mla", nope + rope),
                    u("attention.value_length_mla", vh),
                    u("attention.q_lora_rank", q_rank),
                    u("attention.kv_lora_rank", rank),
                ]);
            }
        }
        _ => {}
    }

    let scale = 1.0 / (e as f32).sqrt();
    let mut plan: Vec<Planned> = Vec::new();
    let mut add = |name: String, dims: Vec<usize>, dtype: GgmlType, fill: Fill| {
        plan.push(Planned { entry: TensorEntry { name, dims, dtype }, fill })
    };
    add("token_embd.weight".into(), vec![vocab, e], dtype, Fill::Random(1.0));
    if family == "phi3" {
        add("rope_factors_short.weight".into(), vec![rope_dims / 2], GgmlType::F32, Fill::Ones);
        add("rope_factors_long.weight".into(), vec![rope_dims / 2], GgmlType::F32, Fill::Ones);
    }
    for i in 0..layers {
        let p = |n: &str| format!("blk.{i}.{n}");
        let mut m = |name: &str, rows: usize, cols: usize| add(p(name), vec![rows, cols], dtype, Fill::Random(scale));
        if conv_layer(i) {
            m("shortconv.in_proj.weight", 3 * e, e);
            m("shortconv.out_proj.weight", e, e);
        } else if family == "deepseek2" {
            m("attn_q_a.weight", q_rank, e);
            m("attn_q_b.weight", nh * (nope + rope), q_rank);
            m("attn_kv_a_mqa.weight", rank + rope, e);
            m("attn_output.weight", e, nh * vh);
        } else if family == "phi3" {
            m("attn_qkv.weight", q + 2 * kv, e);
            m("attn_output.weight", e, q);
        } else {
            m("attn_q.weight", q, e);
            m("attn_k.weight", kv, e);
            m("attn_v.weight", kv, e);
            m("attn_output.weight", e, q);
        }
        let expert_layer = experts.filter(|_| i >= dense_lead);
        match expert_layer {
            Some(x) => {
                add(p("ffn_gate_inp.weight"), vec![x.count, e], GgmlType::F32, Fill::Random(4.0 * scale));
                for name in ["ffn_gate_exps.weight", "ffn_up_exps.weight"] {
                    add(p(name), vec![x.count, x.ffn, e], experts_dtype, Fill::Random(scale));
                }
                add(p("ffn_down_exps.weight"), vec![x.count, e, x.ffn], experts_dtype, Fill::Random(scale));
                if family != "granitemoe" {
                    add(p("exp_probs_b.bias"), vec![x.count], GgmlType::F32, Fill::Random(0.3));
                }
                let shared = if family == "granitemoe" { ffn } else { x.ffn };
                add(p("ffn_gate_shexp.weight"), vec![shared, e], dtype, Fill::Random(scale));
                add(p("ffn_up_shexp.weight"), vec![shared, e], dtype, Fill::Random(scale));
                add(p("ffn_down_shexp.weight"), vec![e, shared], dtype, Fill::Random(scale));
            }
            None if family == "phi3" => {
                add(p("ffn_up.weight"), vec![2 * ffn, e], dtype, Fill::Random(scale));
                add(p("ffn_down.weight"), vec![e, ffn], dtype, Fill::Random(scale));
            }
            None => {
                add(p("ffn_gate.weight"), vec![ffn, e], dtype, Fill::Random(scale));
                add(p("ffn_up.weight"), vec![ffn, e], dtype, Fill::Random(scale));
                add(p("ffn_down.weight"), vec![e, ffn], dtype, Fill::Random(scale));
            }
        }
        let mut norm = |name: &str, n: usize| add(p(name), vec![n], GgmlType::F32, Fill::Ones);
        match family {
            "olmo2" => {
                norm("post_attention_norm.weight", e);
                norm("post_ffw_norm.weight", e);
                norm("attn_q_norm.weight", q);
                norm("attn_k_norm.weight", kv);
            }
            "gemma2" | "gemma3" => {
                for n in ["attn_norm.weight", "post_attention_norm.weight", "ffn_norm.weight", "post_ffw_norm.weight"] {
                    norm(n, e);
                }
            }
            "glm4moe" => {
                norm("attn_norm.weight", e);
                norm("post_attention_norm.weight", e);
            }
            "deepseek2" => {
                norm("attn_norm.weight", e);
                norm("ffn_norm.weight", e);
                norm("attn_q_a_norm.weight", q_rank);
                norm("attn_kv_a_norm.weight", rank);
            }
            _ => {
                norm("attn_norm.weight", e);
                norm("ffn_norm.weight", e);
            }
        }
        if matches!(family, "qwen3vl" | "gemma3") || (family == "lfm2" && !conv_layer(i)) {
            norm("attn_q_norm.weight", hd);
            norm("attn_k_norm.weight", hd);
        }
        if family == "glm4moe" {
            for (name, n) in [("attn_q.bias", q), ("attn_k.bias", kv), ("attn_v.bias", kv)] {
                add(p(name), vec![n], GgmlType::F32, Fill::Random(0.1));
            }
        }
        if family == "deepseek2" {
            add(p("attn_k_b.weight"), vec![nh, rank, nope], GgmlType::Q8_0, Fill::Random(1.0 / (nope as f32).sqrt()));
            add(p("attn_v_b.weight"), vec![nh, vh, rank], GgmlType::Q8_0, Fill::Random(1.0 / (rank as f32).sqrt()));
        }
        if conv_layer(i) {
            add(p("shortconv.conv.weight"), vec![e, 3], GgmlType::F32, Fill::Random(0.5));
        }
    }
    let final_norm = if family == "lfm2" { "token_embd_norm.weight" } else { "output_norm.weight" };
    add(final_norm.into(), vec![e], GgmlType::F32, Fill::Ones);
    if !matches!(family, "gemma2" | "gemma3") {
        add("output.weight".into(), vec![vocab, e], dtype, Fill::Random(scale));
    }
    write_planned(out, &md, plan)
}
