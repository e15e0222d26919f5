//! A llama-family, Qwen3-MoE or Qwen 3.5 (hybrid, dense or with experts)
//! GGUF with random weights and another model's tokenizer, so that speed
//! can be measured at sizes and proportions the default model does not have
//! (`hearth-cli write-random-model`; llama.cpp loads it too), and tests can
//! run a family no small real file is at hand for.

use std::path::Path;

use crate::error::EngineError;
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

fn dtype_named(dtype: &str) -> Result<GgmlDType, EngineError> {
    Ok(match dtype.to_ascii_lowercase().as_str() {
        "q4_0" => GgmlDType::Q4_0,
        "q4_1" => GgmlDType::Q4_1,
        "q8_0" => GgmlDType::Q8_0,
        "q4_k" => GgmlDType::Q4K,
        "q6_k" => GgmlDType::Q6K,
        other => {
            return Err(EngineError::InvalidSetting {
                field: "dtype",
                reason: format!("{other:?} is not one of q4_0, q4_1, q8_0, q4_k, q6_k"),
            })
        }
    })
}

pub fn write(out: &Path, tokenizer_from: &Path, shape: &Shape, dtype: &str) -> Result<(), EngineError> {
    let dtype = dtype_named(dtype)?;
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
    let arch = match (&shape.recurrent, &shape.experts) {
        (Some(_), Some(_)) => "qwen35moe",
        (Some(_), None) => "qwen35",
        (None, Some(_)) => "qwen3moe",
        (None, None) => "llama",
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
    let io = |e: std::io::Error| EngineError::InvalidSetting { field: "out", reason: e.to_string() };
    let mut src = std::fs::File::open(tokenizer_from).map_err(io)?;
    let content = gguf_file::Content::read(&mut src)?;
    let mut md: Vec<(String, Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let vocab = match content.metadata.get("tokenizer.ggml.tokens") {
        Some(Value::Array(t)) => t.len(),
        _ => {
            return Err(EngineError::InvalidSetting {
                field: "tokenizer",
                reason: "the source model has no tokenizer.ggml.tokens".into(),
            })
        }
    };
    let head_dim = shape.head_dim.unwrap_or(shape.embd / shape.heads);
    let u = |k: &str, v: usize| (format!("{arch}.{k}"), Value::U32(v as u32));
    md.extend([
        ("general.architecture".to_string(), Value::String(arch.into())),
        ("general.name".to_string(), Value::String(format!("hearth random {arch}"))),
        u("block_count", shape.layers),
        u("embedding_length", shape.embd),
        u("feed_forward_length", shape.ffn),
        u("attention.head_count", shape.heads),
        u("attention.head_count_kv", shape.kv_heads),
        u("attention.key_length", head_dim),
        u("attention.value_length", head_dim),
        u("rope.dimension_count", shape.recurrent.as_ref().map_or(head_dim, |r| r.rope_dims)),
        u("context_length", 4096),
        (format!("{arch}.rope.freq_base"), Value::F32(10000.0)),
        (format!("{arch}.attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
    ]);
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
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut random_of = |dims: &[usize], scale: f32| -> candle_core::Result<Tensor> {
        let v: Vec<f32> = (0..dims.iter().product::<usize>())
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect();
        Tensor::from_vec(v, dims, &Device::Cpu)
    };
    let ones = |n: usize| Tensor::ones(n, candle_core::DType::F32, &Device::Cpu);
    let (q, kv) = (shape.heads * head_dim, shape.kv_heads * head_dim);
    let scale = 1.0 / (shape.embd as f32).sqrt();
    let mut tensors: Vec<(String, QTensor)> =
        vec![("token_embd.weight".into(), QTensor::quantize(&random_of(&[vocab, shape.embd], 1.0)?, dtype)?)];
    for i in 0..shape.layers {
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
                ("ffn_gate_inp.weight", vec![e.count, shape.embd], GgmlDType::F32),
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
        for (name, dims, dtype) in matrices {
            // The router's logits spread a few units, so that picks vary.
            let s = if name.starts_with("ffn_gate_inp") { 4.0 * scale } else { scale };
            tensors.push((p(name), QTensor::quantize(&random_of(&dims, s)?, dtype)?));
        }
        tensors.push((p("attn_norm.weight"), QTensor::quantize(&ones(shape.embd)?, GgmlDType::F32)?));
        // Qwen 3.5 names its FFN norm `post_attention_norm`.
        let ffn_norm = if shape.recurrent.is_some() { "post_attention_norm.weight" } else { "ffn_norm.weight" };
        tensors.push((p(ffn_norm), QTensor::quantize(&ones(shape.embd)?, GgmlDType::F32)?));
        if let Some(r) = recurrent {
            let channels = (2 * r.k_heads + r.v_heads) * r.state;
            let f32_of = |t: Tensor| QTensor::quantize(&t, GgmlDType::F32);
            tensors.push((p("ssm_conv1d.weight"), f32_of(random_of(&[channels, 4], 0.5)?)?));
            tensors.push((p("ssm_dt.bias"), f32_of(random_of(&[r.v_heads], 0.5)?)?));
            // −exp(A_log), as the converter stores it.
            tensors.push((p("ssm_a"), f32_of((random_of(&[r.v_heads], 0.5)?.exp()? * -1.0)?)?));
            tensors.push((p("ssm_norm.weight"), f32_of(ones(r.state)?)?));
        }
        if shape.recurrent.is_some() && shape.experts.is_some() {
            tensors.push((
                p("ffn_gate_inp_shexp.weight"),
                QTensor::quantize(&random_of(&[shape.embd], scale)?, GgmlDType::F32)?,
            ));
        }
        if (shape.experts.is_some() || shape.recurrent.is_some()) && recurrent.is_none() {
            tensors.push((p("attn_q_norm.weight"), QTensor::quantize(&ones(head_dim)?, GgmlDType::F32)?));
            tensors.push((p("attn_k_norm.weight"), QTensor::quantize(&ones(head_dim)?, GgmlDType::F32)?));
        }
    }
    tensors.push(("output_norm.weight".into(), QTensor::quantize(&ones(shape.embd)?, GgmlDType::F32)?));
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tmp = out.with_extension("gguf.part");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(io)?);
    gguf_file::write(&mut f, &md_refs, &t_refs)?;
    drop(f);
    std::fs::rename(&tmp, out).map_err(io)?;
    Ok(())
}
