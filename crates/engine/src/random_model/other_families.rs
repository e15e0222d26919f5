//! The other families `write_family` makes (`FAMILIES`), each in its own
//! tensor layout and metadata.

use std::path::Path;

use super::{dtype_named, tokenizer_of, write_planned, Fill, Planned, Shape};
use crate::error::EngineError;
use crate::ggml_type::GgmlType;
use crate::gguf_writer::TensorEntry;
use candle_core::quantized::gguf_file::Value;

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
