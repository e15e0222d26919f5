//! The families `write` makes from a `Shape`: llama, Qwen3-MoE, Qwen 3.5
//! (hybrid, dense or with experts), gpt-oss and Gemma 4.

use std::path::Path;

use super::{dtype_named, tokenizer_of, write_planned, Fill, Gemma4, Planned, Shape};
use crate::error::EngineError;
use crate::ggml_type::GgmlType;
use crate::gguf_writer::TensorEntry;
use candle_core::quantized::gguf_file::Value;

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
    let mtp = usize::from(shape.recurrent.as_ref().is_some_and(|r| r.mtp));
    let u = |k: &str, v: usize| (format!("{arch}.{k}"), Value::U32(v as u32));
    let f = |k: &str, v: f32| (format!("{arch}.{k}"), Value::F32(v));
    md.extend([
        ("general.architecture".to_string(), Value::String(arch.into())),
        ("general.name".to_string(), Value::String(format!("hearth random {arch}"))),
        u("block_count", shape.layers + mtp),
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
            u("nextn_predict_layers", mtp),
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
    // The MTP block, where there is one, is a full-attention layer more,
    // with its own projection of the embedding and the hidden state.
    for i in 0..shape.layers + mtp {
        if shape.gemma4.is_some() {
            break;
        }
        let p = |n: &str| format!("blk.{i}.{n}");
        if i == shape.layers {
            add(p("nextn.eh_proj.weight"), vec![shape.embd, 2 * shape.embd], dtype, Fill::Random(scale));
            for norm in ["enorm", "hnorm", "shared_head_norm"] {
                add(p(&format!("nextn.{norm}.weight")), vec![shape.embd], GgmlType::F32, Fill::Ones);
            }
        }
        let recurrent = shape.recurrent.as_ref().filter(|r| (i + 1) % r.interval != 0 && i < shape.layers);
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
