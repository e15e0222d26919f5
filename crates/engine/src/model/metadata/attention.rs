//! Attention's metadata beyond its heads: the layer whose keys and values
//! each layer reads, the attention temperature, and DeepSeek V2's latent attention.

use crate::error::Result;
use crate::gguf::GgufFile;
use crate::model::config::{AttentionShape, AttentionTemperature, MlaConfig};
use crate::model::families::{Family, TemperatureStep};

/// The layer each layer attends with: itself, except Gemma 4's last
/// `attention.shared_kv_layers`, which read the last earlier layer of their
/// kind (llama.cpp: `n_kv − 2` for a sliding layer, `n_kv − 1` for a full
/// one, where `n_kv` layers keep their own). The layer read must be of the
/// same kind and shape, or the file is refused.
pub(super) fn kv_sources(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
    attention: &[AttentionShape],
    sliding: Option<&[bool]>,
    n_layers: usize,
) -> Result<Vec<usize>> {
    let shared_key = key("attention.shared_kv_layers");
    let shared = file.u32_opt(&shared_key)?.unwrap_or(0) as usize;
    if shared == 0 {
        return Ok((0..n_layers).collect());
    }
    let Some(sliding) = sliding else {
        return Err(file.corrupt(format!("{shared_key} without a per-layer sliding window pattern")));
    };
    if shared + 2 > n_layers {
        return Err(
            file.corrupt(format!("{shared_key} is {shared} of {n_layers} layers; at least 2 must keep their own"))
        );
    }
    let n_kv = n_layers - shared;
    (0..n_layers)
        .map(|i| {
            if i < n_kv {
                return Ok(i);
            }
            let source = n_kv - if sliding[i] { 2 } else { 1 };
            if sliding[source] != sliding[i] || attention[source] != attention[i] {
                return Err(file.corrupt(format!(
                    "layer {i} reads the keys and values of layer {source} ({shared_key}), which is {} and has heads {:?}, not {} with {:?}",
                    if sliding[source] { "sliding" } else { "full" },
                    attention[source],
                    if sliding[i] { "sliding" } else { "full" },
                    attention[i]
                )));
            }
            Ok(source)
        })
        .collect()
}

/// `attention.temperature_scale` (Mistral 3, and Mistral Large 3 in
/// DeepSeek's layout), its step llama.cpp's `n_ctx_orig_yarn`
/// (`original_context`) or, for DeepSeek's, `attention.temperature_length`.
pub(super) fn attention_temperature(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
    family: &Family,
    original_context: usize,
) -> Result<Option<AttentionTemperature>> {
    let Some(step) = family.attention_temperature else { return Ok(None) };
    let scale_key = key("attention.temperature_scale");
    match file.f32_opt(&scale_key)?.filter(|&s| s != 0.0) {
        None => Ok(None),
        Some(s) if !s.is_finite() => Err(file.corrupt(format!("{scale_key} is {s}"))),
        Some(scale) => {
            // DeepSeek's layout (Mistral Large 3) steps by its own key.
            let (floor, step_key) = if step == TemperatureStep::LengthKey {
                let length_key = key("attention.temperature_length");
                (file.u32_opt(&length_key)?.unwrap_or(0) as usize, length_key)
            } else {
                (original_context, key("rope.scaling.original_context_length"))
            };
            if floor == 0 {
                return Err(file.corrupt(format!("{scale_key} with no {step_key} to step by")));
            }
            Ok(Some(AttentionTemperature { scale, floor }))
        }
    }
}

/// DeepSeek V2's attention shape: the latent and the rotated key are the
/// one KV head `key_length` wide; files without `key_length_mla` (the old
/// `attn_kv_b` ones) are refused, as llama.cpp asks them re-converted.
pub(super) fn mla(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
    head_dim: usize,
    rope_dims: usize,
    kv_heads: &[usize],
) -> Result<MlaConfig> {
    let need = |k: &str| -> Result<usize> { Ok(file.u32(&key(k))? as usize) };
    let Some(head_k) = file.u32_opt(&key("attention.key_length_mla"))? else {
        return Err(file.corrupt(format!(
            "{} is missing: a DeepSeek V2 file from before llama.cpp split attn_kv_b; convert it again",
            key("attention.key_length_mla")
        )));
    };
    let config = MlaConfig {
        q_lora_rank: file.u32_opt(&key("attention.q_lora_rank"))?.filter(|&r| r > 0).map(|r| r as usize),
        kv_lora_rank: need("attention.kv_lora_rank")?,
        head_k: head_k as usize,
        head_v: need("attention.value_length_mla")?,
    };
    if config.kv_lora_rank + rope_dims != head_dim || kv_heads.iter().any(|&h| h != 1) || config.head_k <= rope_dims {
        return Err(file.corrupt(format!(
            "latent attention of rank {} with {rope_dims} rotated dimensions needs one KV head of {} (key_length is {head_dim}, KV heads {kv_heads:?}, key_length_mla {})",
            config.kv_lora_rank,
            config.kv_lora_rank + rope_dims,
            config.head_k
        )));
    }
    Ok(config)
}
