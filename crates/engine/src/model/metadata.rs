//! Reads a `ModelConfig` from a GGUF file's metadata as llama.cpp's loader
//! reads it for the file's family: which keys, with which defaults, and
//! what a family does with them, all from its row in `families`.

mod attention;
mod recurrent;
mod rope;

use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;

use super::config::{AttentionShape, ExpertActivation, ExpertsConfig, Gating, ModelConfig, RecurrentConfig};
use super::families::{
    Architecture, AttentionScaleRule, ExpertStyle, LocalBase, Mixers, Window, SUPPORTED_ARCHITECTURES,
};
use attention::{attention_temperature, kv_sources, mla};
use recurrent::recurrent;
use rope::{rope_scaling, rope_sections};

impl ModelConfig {
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let arch_name = file.string("general.architecture")?.to_string();
        let architecture =
            Architecture::from_gguf_name(&arch_name).ok_or_else(|| EngineError::UnsupportedArchitecture {
                path: file.path().to_path_buf(),
                architecture: arch_name.clone(),
                supported: SUPPORTED_ARCHITECTURES,
            })?;
        let family = architecture.family();
        let key = |k: &str| format!("{arch_name}.{k}");
        let n_embd = file.u32(&key("embedding_length"))? as usize;
        let blocks = file.u32(&key("block_count"))? as usize;
        // Qwen 3.5's multi-token-prediction blocks come last and do not run.
        let nextn = file.u32_opt(&key("nextn_predict_layers"))?.unwrap_or(0) as usize;
        let n_layers = blocks.saturating_sub(nextn);
        let head_counts = file
            .per_layer_u32(&key("attention.head_count"), blocks)?
            .ok_or_else(|| file.corrupt(format!("missing metadata {}", key("attention.head_count"))))?;
        let kv_counts = file.per_layer_u32(&key("attention.head_count_kv"), blocks)?.unwrap_or(head_counts.clone());
        // `attention.sliding_window_pattern`: every how many layers one is
        // full, or (Gemma 4, OLMo 3 as converted today) a flag per layer,
        // which llama.cpp takes for any family.
        let pattern_key = key("attention.sliding_window_pattern");
        let pattern_flags = family.sliding.flags
            || matches!(file.metadata().get(&pattern_key), Some(candle_core::quantized::gguf_file::Value::Array(_)));
        let pattern = |default: u32| -> Result<usize> {
            Ok(if pattern_flags { default } else { file.u32_opt(&pattern_key)?.unwrap_or(default) } as usize)
        };
        let sliding_layers = if pattern_flags {
            let flags = file.bools(&pattern_key)?;
            if flags.len() != blocks {
                return Err(file.corrupt(format!(
                    "{} has {} entries for {blocks} blocks",
                    key("attention.sliding_window_pattern"),
                    flags.len()
                )));
            }
            Some(flags[..n_layers.min(blocks)].to_vec())
        } else {
            None
        };
        // LFM2's convolution layers have no KV heads.
        let short_conv = family.mixers == Mixers::ShortConv;
        let conv_layer = |i: usize| short_conv && kv_counts[i] == 0;
        // The full layers' heads stand for the model where one number must.
        let first_full = sliding_layers
            .as_ref()
            .and_then(|f| f.iter().position(|&s| !s))
            .or_else(|| short_conv.then(|| (0..n_layers).find(|&i| !conv_layer(i))).flatten())
            .unwrap_or(0);
        let (n_heads, n_kv_heads) =
            (head_counts.get(first_full).copied().unwrap_or(0), kv_counts.get(first_full).copied().unwrap_or(0));
        if n_layers == 0
            || (0..n_layers).any(|i| {
                !conv_layer(i)
                    && (head_counts[i] == 0 || kv_counts[i] == 0 || !head_counts[i].is_multiple_of(kv_counts[i]))
            })
        {
            return Err(file.corrupt(format!(
                "bad attention shape: {head_counts:?} heads, {kv_counts:?} KV heads, {n_layers} layers"
            )));
        }
        let head_dim = match file.u32_opt(&key("attention.key_length"))? {
            Some(d) => d as usize,
            None if n_embd.is_multiple_of(n_heads) => n_embd / n_heads,
            None => return Err(file.corrupt("head size is not given and does not divide the embedding")),
        };
        if head_dim % 2 != 0 {
            return Err(file.corrupt(format!("head size {head_dim} is odd")));
        }
        if let Some(v) = file.u32_opt(&key("attention.value_length"))? {
            // Where a layer may use its keys as values, they must be alike.
            if v as usize != head_dim && family.values_may_be_keys {
                return Err(file.corrupt(format!("keys of {head_dim} and values of {v}: Gemma 4 needs them alike")));
            }
        }
        let head_dim_swa = file.u32_opt(&key("attention.key_length_swa"))?.map_or(head_dim, |d| d as usize);
        if let Some(v) = file.u32_opt(&key("attention.value_length_swa"))? {
            if v as usize != head_dim_swa {
                return Err(file.corrupt(format!(
                    "sliding layers' keys of {head_dim_swa} and values of {v}: Hearth needs them alike"
                )));
            }
        }
        if head_dim_swa == 0 || head_dim_swa % 2 != 0 {
            return Err(file.corrupt(format!("sliding layers' head size {head_dim_swa} is odd")));
        }
        let context_length = file.u32_opt(&key("context_length"))?.unwrap_or(4096) as usize;
        let rms_eps = file.f32_opt(&key("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-6) as f64;
        let rope_base = file.f32_opt(&key("rope.freq_base"))?.unwrap_or(family.rope_base);
        let sliding = &family.sliding;
        let window_key = key("attention.sliding_window");
        let sliding_window = match sliding.window {
            Window::Never => None,
            Window::Optional { default } => file.u32_opt(&window_key)?.or(default).filter(|&w| w > 0),
            Window::Required => match file.u32(&window_key)? {
                0 => return Err(file.corrupt(format!("{window_key} is 0"))),
                w => Some(w),
            },
        }
        .map(|w| w as usize);
        // Every pattern-th layer full (llama.cpp's set_swa_pattern; 0: none).
        let sliding_window_pattern = match sliding_window {
            Some(_) => pattern(sliding.pattern)?.max(sliding.min_pattern as usize),
            None => 1,
        };
        let rope_base_local = match sliding.local_base {
            LocalBase::Key(default) => {
                file.f32_opt(&key("rope.freq_base_swa"))?.unwrap_or(default.unwrap_or(rope_base))
            }
            LocalBase::Global => rope_base,
        };
        let (rope_linear_scale, rope_yarn) = rope_scaling(file, &key, context_length, family)?;
        let original_context =
            file.u32_opt(&key("rope.scaling.original_context_length"))?.map_or(context_length, |n| n as usize);
        // Experts beside the dense MLP are there where the file counts some.
        let counted = file.u32_opt(&key("expert_count"))?.unwrap_or(0) > 0;
        let style = family.experts.filter(|&style| style != ExpertStyle::BesideDense || counted);
        let experts = if let Some(style) = style {
            let count = file.u32(&key("expert_count"))? as usize;
            let used = file.u32(&key("expert_used_count"))? as usize;
            if count == 0 || used == 0 || used > count {
                return Err(file.corrupt(format!(
                    "{}: {used} experts used per token out of {count} ({})",
                    key("expert_used_count"),
                    key("expert_count")
                )));
            }
            // One width for every layer (an array of them, as Gemma 4 may
            // write, must agree).
            // Granite MoE's experts are `feed_forward_length` wide.
            let width_key =
                key(if style == ExpertStyle::Granite { "feed_forward_length" } else { "expert_feed_forward_length" });
            let widths = file
                .per_layer_u32(&width_key, blocks)?
                .ok_or_else(|| file.corrupt(format!("missing metadata {width_key}")))?;
            // Dense leading layers may be listed with width 0.
            let ffn_len = widths.iter().copied().find(|&w| w != 0).unwrap_or(0);
            if widths.iter().any(|&w| w != ffn_len && w != 0) {
                return Err(
                    file.corrupt(format!("{width_key} differs between layers ({widths:?}); Hearth runs one width"))
                );
            }
            // GLM-4.5's and DeepSeek V2's routing, read the same way.
            let glm = matches!(style, ExpertStyle::Glm { .. });
            if file.u32_opt(&key("expert_group_count"))?.unwrap_or(1) > 1 {
                return Err(EngineError::UnsupportedArchitecture {
                    path: file.path().to_path_buf(),
                    architecture: format!("{arch_name} with expert groups (DeepSeek V3)"),
                    supported: SUPPORTED_ARCHITECTURES,
                });
            }
            let shared_ffn_len = if glm {
                // `expert_shared_count` experts' worth, ungated.
                let shared = file.u32_opt(&key("expert_shared_count"))?.unwrap_or(0) as usize;
                (shared > 0).then_some(shared * ffn_len)
            } else if style == ExpertStyle::Granite {
                // Granite MoE Shared: an ungated shared expert where the file gives its width.
                file.u32_opt(&key("expert_shared_feed_forward_length"))?.filter(|&n| n > 0).map(|n| n as usize)
            } else if style == ExpertStyle::QwenShared {
                let dense = file.u32_opt(&key("feed_forward_length"))?;
                match file.u32_opt(&key("expert_shared_feed_forward_length"))?.or(dense) {
                    Some(n) => Some(n as usize),
                    None => {
                        return Err(
                            file.corrupt(format!("missing metadata {}", key("expert_shared_feed_forward_length")))
                        )
                    }
                }
            } else {
                None
            };
            let gpt_oss = style == ExpertStyle::GptOss;
            Some(ExpertsConfig {
                count,
                used,
                ffn_len,
                gating: if gpt_oss {
                    Gating::SoftmaxWeight
                } else if glm {
                    // llama.cpp's numbering: 1 softmax, 2 sigmoid. Unsaid,
                    // GLM-4.5's is sigmoid, and DeepSeek V2's softmax but for
                    // GLM-4.7-Flash (llama.cpp knows it by its shape).
                    let vocab = file.array("tokenizer.ggml.tokens").map_or(0, |t| t.len());
                    let glm_flash = matches!(blocks, 47 | 48) && vocab == 154_880;
                    let sigmoid = matches!(style, ExpertStyle::Glm { sigmoid: true });
                    let default = if sigmoid || glm_flash { 2 } else { 1 };
                    match file.u32_opt(&key("expert_gating_func"))?.unwrap_or(default) {
                        1 => Gating::Softmax,
                        2 => Gating::Sigmoid,
                        n => return Err(file.corrupt(format!("{} is {n}", key("expert_gating_func")))),
                    }
                } else {
                    Gating::Softmax
                },
                activation: if gpt_oss {
                    ExpertActivation::SwigluOai { alpha: 1.702, limit: 7.0 }
                } else if style == ExpertStyle::BesideDense {
                    ExpertActivation::Gelu
                } else {
                    ExpertActivation::Silu
                },
                normalize_weights: if glm {
                    file.bool_opt(&key("expert_weights_norm")).unwrap_or(false)
                } else {
                    !gpt_oss
                },
                shared_ffn_len,
                weights_scale: if glm {
                    file.f32_opt(&key("expert_weights_scale"))?.filter(|&s| s != 0.0 && s != 1.0)
                } else {
                    None
                },
                dense_lead: if glm {
                    file.u32_opt(&key("leading_dense_block_count"))?.unwrap_or(0) as usize
                } else {
                    0
                },
            })
        } else {
            None
        };
        let rope_dims = file.u32_opt(&key("rope.dimension_count"))?.map_or(head_dim, |d| d as usize);
        if rope_dims == 0 || rope_dims % 2 != 0 || rope_dims > head_dim {
            return Err(file.corrupt(format!(
                "{}: {rope_dims} rotary dimensions for heads of {head_dim}",
                key("rope.dimension_count")
            )));
        }
        // As llama.cpp: sliding layers rotate as many as full ones unless told.
        let rope_dims_swa = file.u32_opt(&key("rope.dimension_count_swa"))?.map_or(rope_dims, |d| d as usize);
        if rope_dims_swa == 0 || rope_dims_swa % 2 != 0 || rope_dims_swa > head_dim_swa {
            return Err(file.corrupt(format!(
                "{}: {rope_dims_swa} rotary dimensions for sliding heads of {head_dim_swa}",
                key("rope.dimension_count_swa")
            )));
        }
        let is_swa = |i: usize| sliding_layers.as_ref().is_some_and(|f| f[i]);
        // Granite: `rope.scaling.finetuned = false` switches RoPE off.
        // Only dense Granite's loader reads it; Granite MoE always rotates.
        let no_rope = family.rope_off_unless_finetuned && file.bool_opt(&key("rope.scaling.finetuned")) == Some(false);
        let unrotated = |i: usize| no_rope || family.no_rope_interval.is_some_and(|n| (i + 1).is_multiple_of(n));
        let attention: Vec<AttentionShape> = (0..n_layers)
            .map(|i| AttentionShape {
                n_heads: head_counts[i],
                n_kv_heads: kv_counts[i],
                head_dim: if is_swa(i) { head_dim_swa } else { head_dim },
                rope_dims: if unrotated(i) {
                    0
                } else if is_swa(i) {
                    rope_dims_swa
                } else {
                    rope_dims
                },
            })
            .collect();
        let kv_source = kv_sources(file, &key, &attention, sliding_layers.as_deref(), n_layers)?;
        let sections = match family.rope_sections {
            true => Some(rope_sections(file, &key("rope.dimension_sections"), head_dim)?),
            false => None,
        };
        let recurrent = match family.mixers {
            Mixers::Attention => None,
            Mixers::DeltaNet => Some(recurrent(file, &key, blocks, n_layers)?),
            Mixers::ShortConv => {
                let kernel = file.u32(&key("shortconv.l_cache"))? as usize;
                if kernel < 2 {
                    return Err(file.corrupt(format!("{} is {kernel}", key("shortconv.l_cache"))));
                }
                let layers: Vec<bool> = (0..n_layers).map(conv_layer).collect();
                Some(RecurrentConfig {
                    conv_kernel: kernel,
                    head_dim: 0,
                    k_heads: 0,
                    v_heads: 0,
                    layers,
                    short_conv: Some(n_embd),
                })
            }
        };
        // The MTP head, a layer after the last, where the file has one
        // (`model/mtp.rs`).
        let mut attention = attention;
        let mut kv_source = kv_source;
        let mut recurrent = recurrent;
        // A file whose head lacks its layer or has no heads for it opens
        // without one: the model's own layers do not need it.
        let (heads, kv_heads) = (head_counts.get(n_layers), kv_counts.get(n_layers));
        // Qwen 3.5's (gated attention), GLM-4.5's and DeepSeek's (their
        // own layer: attention or latent attention, then experts).
        let attention_tensors: &[&str] = if family.latent_attention {
            &["attn_kv_a_mqa", "attn_output"]
        } else {
            &["attn_q", "attn_k", "attn_output"]
        };
        let mtp_layers = usize::from(
            matches!(
                architecture,
                Architecture::Qwen35 | Architecture::Qwen35Moe | Architecture::Glm4Moe | Architecture::Deepseek2
            ) && nextn > 0
                && std::iter::once(&"nextn.eh_proj")
                    .chain(attention_tensors)
                    .all(|t| file.has_tensor(&format!("blk.{n_layers}.{t}.weight")))
                && matches!((heads, kv_heads), (Some(&h), Some(&k)) if h > 0 && k > 0 && h.is_multiple_of(k)),
        );
        if mtp_layers > 0 {
            let (heads, kv_heads) = (head_counts[n_layers], kv_counts[n_layers]);
            attention.push(AttentionShape { n_heads: heads, n_kv_heads: kv_heads, head_dim, rope_dims });
            kv_source.push(n_layers);
            if let Some(r) = &mut recurrent {
                r.layers.push(false);
            }
        }
        let mla = if family.latent_attention {
            Some(mla(file, &key, head_dim, rope_dims, &kv_counts[..n_layers])?)
        } else {
            None
        };
        Ok(Self {
            architecture,
            n_layers,
            n_embd,
            n_heads,
            n_kv_heads,
            head_dim,
            context_length,
            rms_eps,
            rope_base,
            rope_base_local,
            rope_linear_scale,
            rope_scaling_local: sliding.scaled_positions,
            rope_yarn,
            rope_attn_factor: if rope_yarn.is_some() {
                1.0
            } else {
                match file.f32_opt(&key("rope.scaling.attn_factor"))? {
                    Some(f) if !f.is_finite() || f <= 0.0 => {
                        return Err(file.corrupt(format!("{} is {f}", key("rope.scaling.attn_factor"))))
                    }
                    f => f.unwrap_or(1.0),
                }
            },
            original_context,
            sliding_window,
            sliding_window_pattern,
            experts,
            rope_dims,
            rope_sections: sections,
            recurrent,
            attention,
            kv_source,
            sliding_layers,
            // Gemma 4 scales neither queries nor scores; Gemma 2 27B (46
            // layers) and Gemma 3 27B (62) by the width per head rather than
            // the head size, as llama.cpp (after gemma_pytorch) does.
            attention_scale: match family.attention_scale {
                AttentionScaleRule::One => Some(1.0),
                AttentionScaleRule::WidthPerHeadAt(layers) if n_layers == layers => {
                    Some(1.0 / ((n_embd / n_heads) as f32).sqrt())
                }
                AttentionScaleRule::FromFile => file.f32_opt(&key("attention.scale"))?.filter(|&s| s != 0.0),
                _ => None,
            }
            .or(if let Some(m) = &mla {
                // llama.cpp's: YaRN's magnitude undone, then `mscale²` over
                // the head's key size before absorption.
                let attn_factor = rope_yarn.map_or(1.0, |y| y.attn_factor);
                let ln = (rope_linear_scale).ln();
                let original = attn_factor * (1.0 + 0.1 * ln);
                let mscale = original * (1.0 + 0.1 * rope_yarn.map_or(0.0, |y| y.log_mul) * ln);
                Some(mscale * mscale / (m.head_k as f32).sqrt())
            } else {
                None
            }),
            attention_temperature: attention_temperature(file, &key, family, original_context)?,
            mla,
            final_logit_softcap: match family.final_softcap {
                Some(default) => softcap(file, &key("final_logit_softcapping"), default)?,
                None => None,
            },
            attention_softcap: match family.attention_softcap {
                Some(default) => softcap(file, &key("attn_logit_softcapping"), default)?,
                None => None,
            },
            embedding_scale: if family.granite_scales { scale(file, &key("embedding_scale"), false)? } else { None },
            residual_scale: if family.granite_scales { scale(file, &key("residual_scale"), false)? } else { None },
            logit_scale: if family.granite_scales { scale(file, &key("logit_scale"), true)? } else { None },
            per_layer_embd: match family.per_layer_embeddings {
                true => file.u32(&key("embedding_length_per_layer_input"))? as usize,
                false => 0,
            },
            mtp_layers,
        })
    }
}

/// A multiplier read from `key` (0 or absent: none; `required`: the
/// file must have it); a non-finite one is refused, and so is a zero
/// divisor where it is required.
fn scale(file: &GgufFile, key: &str, required: bool) -> Result<Option<f32>> {
    match file.f32_opt(key)? {
        None if required => Err(file.corrupt(format!("missing metadata {key}"))),
        Some(s) if !s.is_finite() || (required && s == 0.0) => Err(file.corrupt(format!("{key} is {s}"))),
        s => Ok(s.filter(|&s| s != 0.0)),
    }
}

/// A soft-cap (`key`, else llama.cpp's `default`): 0 for none; a negative
/// or non-finite cap is refused.
fn softcap(file: &GgufFile, key: &str, default: f32) -> Result<Option<f32>> {
    let c = file.f32_opt(key)?.unwrap_or(default);
    if !c.is_finite() || c < 0.0 {
        return Err(file.corrupt(format!("{key} is {c}")));
    }
    Ok((c != 0.0).then_some(c))
}
