//! `hearth-cli write-random-model`: a llama-family GGUF with random weights
//! and another model's tokenizer, so that speed can be measured at sizes the
//! default model does not have (llama.cpp loads it too).

use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use hearth_engine::EngineError;

pub struct Shape {
    pub layers: usize,
    pub embd: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
}

pub fn write(out: &Path, tokenizer_from: &Path, shape: &Shape, dtype: &str) -> Result<(), EngineError> {
    let dtype = match dtype.to_ascii_lowercase().as_str() {
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
    };
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
    let head_dim = shape.embd / shape.heads;
    let u = |k: &str, v: usize| (format!("llama.{k}"), Value::U32(v as u32));
    md.extend([
        ("general.architecture".to_string(), Value::String("llama".into())),
        ("general.name".to_string(), Value::String("hearth random llama".into())),
        u("block_count", shape.layers),
        u("embedding_length", shape.embd),
        u("feed_forward_length", shape.ffn),
        u("attention.head_count", shape.heads),
        u("attention.head_count_kv", shape.kv_heads),
        u("rope.dimension_count", head_dim),
        u("context_length", 4096),
        ("llama.rope.freq_base".to_string(), Value::F32(10000.0)),
        ("llama.attention.layer_norm_rms_epsilon".to_string(), Value::F32(1e-5)),
    ]);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut random = |rows: usize, cols: usize, scale: f32| -> candle_core::Result<Tensor> {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect();
        Tensor::from_vec(v, (rows, cols), &Device::Cpu)
    };
    let ones = |n: usize| Tensor::ones(n, candle_core::DType::F32, &Device::Cpu);
    let kv = shape.kv_heads * head_dim;
    let scale = 1.0 / (shape.embd as f32).sqrt();
    let mut tensors: Vec<(String, QTensor)> =
        vec![("token_embd.weight".into(), QTensor::quantize(&random(vocab, shape.embd, 1.0)?, dtype)?)];
    for i in 0..shape.layers {
        let p = |n: &str| format!("blk.{i}.{n}");
        for (name, rows, cols) in [
            ("attn_q.weight", shape.embd, shape.embd),
            ("attn_k.weight", kv, shape.embd),
            ("attn_v.weight", kv, shape.embd),
            ("attn_output.weight", shape.embd, shape.embd),
            ("ffn_gate.weight", shape.ffn, shape.embd),
            ("ffn_up.weight", shape.ffn, shape.embd),
            ("ffn_down.weight", shape.embd, shape.ffn),
        ] {
            tensors.push((p(name), QTensor::quantize(&random(rows, cols, scale)?, dtype)?));
        }
        tensors.push((p("attn_norm.weight"), QTensor::quantize(&ones(shape.embd)?, GgmlDType::F32)?));
        tensors.push((p("ffn_norm.weight"), QTensor::quantize(&ones(shape.embd)?, GgmlDType::F32)?));
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
