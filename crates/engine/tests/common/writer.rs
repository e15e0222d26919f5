//! Writes a tiny random-weight GGUF file of a `TinySpec`.

use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::{
    gemma3_model, gemma4_vocab, o200k, set_template, tokenizer_metadata, Family, TinySpec, MLA_KV_HEADS, MLA_NOPE,
    MLA_Q_RANK, MLA_RANK, MLA_ROPE, MLA_V, VOCAB,
};

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn random(rng: &mut Lcg, dims: &[usize], scale: f32) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.next() * scale).collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

/// Writes a random-weight model of `spec` to `path`.
pub fn write_tiny(path: &Path, spec: &TinySpec) {
    if spec.family == Family::Gemma4 {
        return write_gemma4(path, spec);
    }
    let arch = match spec.family {
        Family::Llama => "llama",
        Family::Gemma2 => "gemma2",
        Family::Olmo2 => "olmo2",
        Family::Granite => "granite",
        Family::Glm4Moe => "glm4moe",
        Family::Deepseek2 => "deepseek2",
        Family::Lfm2 => "lfm2",
        Family::GraniteMoe => "granitemoe",
        Family::SmolLm3 => "smollm3",
        Family::Mistral3 => "mistral3",
        Family::Phi3 => "phi3",
        Family::Qwen2 => "qwen2",
        Family::Qwen3 => "qwen3",
        Family::Gemma3 => "gemma3",
        Family::Qwen3Moe => "qwen3moe",
        Family::Qwen3Vl => "qwen3vl",
        Family::Qwen3VlMoe => "qwen3vlmoe",
        Family::Qwen35 => "qwen35",
        Family::Qwen35Moe => "qwen35moe",
        Family::GptOss => "gpt-oss",
        Family::Gemma4 => unreachable!("written by write_gemma4"),
    };
    let mut rng = Lcg(spec.seed);
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let q = |t: &Tensor, dtype: GgmlDType| QTensor::quantize(t, dtype).unwrap();
    let mut put = |name: String, t: Tensor, dtype: GgmlDType| {
        let dtype = spec.retype.and_then(|f| f(&name)).unwrap_or(dtype);
        tensors.push((name, q(&t, dtype)))
    };
    let e = spec.n_embd;
    let qd = spec.n_heads * spec.head_dim;
    let kvd = spec.n_kv_heads * spec.head_dim;
    let ones_ish = |rng: &mut Lcg, n: usize| (random(rng, &[n], 0.1) + 1.0).unwrap();
    let vocab = if spec.o200k { o200k::VOCAB } else { VOCAB };
    put("token_embd.weight".into(), random(&mut rng, &[vocab, e], 1.0), spec.dtype);
    // LFM2's converter names the final norm `token_embd_norm`.
    let output_norm = if spec.family == Family::Lfm2 { "token_embd_norm.weight" } else { "output_norm.weight" };
    put(output_norm.into(), ones_ish(&mut rng, e), GgmlDType::F32);
    if !matches!(spec.family, Family::Gemma2 | Family::Gemma3) {
        put("output.weight".into(), random(&mut rng, &[vocab, e], 0.2), spec.dtype);
    }
    if spec.family == Family::Phi3 {
        // Divisors of each pair's angle: near 1 for short sessions, up to
        // several for long ones (Phi-3.5's run from 1 to about 60).
        let factors = |rng: &mut Lcg, spread: f64| {
            random(rng, &[spec.rope_dims / 2], 1.0).abs().unwrap().affine(spread, 1.0).unwrap()
        };
        put("rope_factors_short.weight".into(), factors(&mut rng, 0.2), GgmlDType::F32);
        put("rope_factors_long.weight".into(), factors(&mut rng, 6.0), GgmlDType::F32);
    }
    let (sd, hk, hv, interval) = spec.recurrent;
    // The MTP block, where there is one, is a layer more: full attention,
    // then its own projection of the embedding and the hidden state.
    for i in 0..spec.n_layers + usize::from(spec.mtp) {
        let p = format!("blk.{i}");
        if i == spec.n_layers {
            put(format!("{p}.nextn.eh_proj.weight"), random(&mut rng, &[e, 2 * e], 0.2), spec.dtype);
            for norm in ["enorm", "hnorm", "shared_head_norm"] {
                let mut w = ones_ish(&mut rng, e);
                if norm == "shared_head_norm" {
                    w = (w * spec.mtp_sharpness).unwrap();
                }
                put(format!("{p}.nextn.{norm}.weight"), w, GgmlDType::F32);
            }
        }
        let olmo2 = spec.family == Family::Olmo2;
        if !olmo2 {
            put(format!("{p}.attn_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        }
        let recurrent = spec.family.is_hybrid() && (i + 1) % interval != 0 && i < spec.n_layers;
        if recurrent {
            let channels = (2 * hk + hv) * sd;
            put(format!("{p}.attn_qkv.weight"), random(&mut rng, &[channels, e], 0.2), spec.dtype);
            put(format!("{p}.attn_gate.weight"), random(&mut rng, &[hv * sd, e], 0.2), spec.dtype);
            put(format!("{p}.ssm_conv1d.weight"), random(&mut rng, &[channels, 4], 0.5), GgmlDType::F32);
            put(format!("{p}.ssm_dt.bias"), random(&mut rng, &[hv], 0.5), GgmlDType::F32);
            // −exp(A_log), as the converter stores it.
            let a = (random(&mut rng, &[hv], 0.5).exp().unwrap() * -1.0).unwrap();
            put(format!("{p}.ssm_a"), a, GgmlDType::F32);
            put(format!("{p}.ssm_beta.weight"), random(&mut rng, &[hv, e], 0.2), spec.dtype);
            put(format!("{p}.ssm_alpha.weight"), random(&mut rng, &[hv, e], 0.2), spec.dtype);
            put(format!("{p}.ssm_norm.weight"), ones_ish(&mut rng, sd), GgmlDType::F32);
            put(format!("{p}.ssm_out.weight"), random(&mut rng, &[e, hv * sd], 0.2), spec.dtype);
        } else if spec.family == Family::Lfm2 && i % 2 == 0 {
            // A short convolution of three taps.
            put(format!("{p}.shortconv.in_proj.weight"), random(&mut rng, &[3 * e, e], 0.2), spec.dtype);
            put(format!("{p}.shortconv.conv.weight"), random(&mut rng, &[e, 3], 0.5), GgmlDType::F32);
            put(format!("{p}.shortconv.out_proj.weight"), random(&mut rng, &[e, e], 0.2), spec.dtype);
        } else if spec.family == Family::Deepseek2 {
            // Latent attention: MLA_* below; queries through a low rank.
            let nh = spec.n_heads;
            put(format!("{p}.attn_q_a.weight"), random(&mut rng, &[MLA_Q_RANK, e], 0.2), spec.dtype);
            put(format!("{p}.attn_q_a_norm.weight"), ones_ish(&mut rng, MLA_Q_RANK), GgmlDType::F32);
            put(
                format!("{p}.attn_q_b.weight"),
                random(&mut rng, &[nh * (MLA_NOPE + MLA_ROPE), MLA_Q_RANK], 0.2),
                spec.dtype,
            );
            put(format!("{p}.attn_kv_a_mqa.weight"), random(&mut rng, &[MLA_RANK + MLA_ROPE, e], 0.2), spec.dtype);
            put(format!("{p}.attn_kv_a_norm.weight"), ones_ish(&mut rng, MLA_RANK), GgmlDType::F32);
            put(format!("{p}.attn_k_b.weight"), random(&mut rng, &[nh, MLA_RANK, MLA_NOPE], 0.2), spec.dtype);
            put(format!("{p}.attn_v_b.weight"), random(&mut rng, &[nh, MLA_V, MLA_RANK], 0.2), spec.dtype);
            put(format!("{p}.attn_output.weight"), random(&mut rng, &[e, nh * MLA_V], 0.2), spec.dtype);
        } else if spec.family == Family::Phi3 {
            put(format!("{p}.attn_qkv.weight"), random(&mut rng, &[qd + 2 * kvd, e], 0.2), spec.dtype);
            put(format!("{p}.attn_output.weight"), random(&mut rng, &[e, qd], 0.2), spec.dtype);
        } else {
            // Qwen 3.5's queries carry an output gate per head.
            let q_rows = if spec.family.is_hybrid() { 2 * qd } else { qd };
            put(format!("{p}.attn_q.weight"), random(&mut rng, &[q_rows, e], 0.2), spec.dtype);
            put(format!("{p}.attn_k.weight"), random(&mut rng, &[kvd, e], 0.2), spec.dtype);
            put(format!("{p}.attn_v.weight"), random(&mut rng, &[kvd, e], 0.2), spec.dtype);
            put(format!("{p}.attn_output.weight"), random(&mut rng, &[e, qd], 0.2), spec.dtype);
        }
        let gpt_oss = spec.family == Family::GptOss;
        if spec.family == Family::Mistral3 {
            put(format!("{p}.attn_output.bias"), random(&mut rng, &[e], 0.1), GgmlDType::F32);
        }
        if gpt_oss {
            put(format!("{p}.attn_output.bias"), random(&mut rng, &[e], 0.1), GgmlDType::F32);
            // A few units, as trained sinks are: some above the scores, some below.
            put(format!("{p}.attn_sinks.weight"), random(&mut rng, &[spec.n_heads], 3.0), GgmlDType::F32);
        }
        let ffn_norm = if spec.family.is_hybrid() || gpt_oss || spec.family == Family::Glm4Moe {
            "post_attention_norm"
        } else {
            "ffn_norm"
        };
        // GLM-4.5 and DeepSeek V2: the first layer dense.
        let dense_here = matches!(spec.family, Family::Glm4Moe | Family::Deepseek2) && i == 0;
        if olmo2 {
            // After attention and the FFN only; Q and K normed across heads.
            put(format!("{p}.post_attention_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
            put(format!("{p}.post_ffw_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
            put(format!("{p}.attn_q_norm.weight"), ones_ish(&mut rng, qd), GgmlDType::F32);
            put(format!("{p}.attn_k_norm.weight"), ones_ish(&mut rng, kvd), GgmlDType::F32);
        } else {
            put(format!("{p}.{ffn_norm}.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        }
        if matches!(spec.family, Family::Qwen35Moe | Family::GraniteMoe)
            || (matches!(spec.family, Family::Glm4Moe | Family::Deepseek2) && !dense_here)
        {
            if spec.family == Family::Qwen35Moe {
                put(format!("{p}.ffn_gate_inp_shexp.weight"), random(&mut rng, &[e], 0.3), GgmlDType::F32);
            }
            // GLM's one shared expert is as wide as a routed one.
            let w = if matches!(spec.family, Family::Glm4Moe | Family::Deepseek2) { spec.experts.2 } else { spec.ffn };
            put(format!("{p}.ffn_gate_shexp.weight"), random(&mut rng, &[w, e], 0.2), spec.dtype);
            put(format!("{p}.ffn_up_shexp.weight"), random(&mut rng, &[w, e], 0.2), spec.dtype);
            put(format!("{p}.ffn_down_shexp.weight"), random(&mut rng, &[e, w], 0.2), spec.dtype);
        }
        if spec.family.has_experts() && !dense_here {
            let (n, _, ff) = spec.experts;
            if matches!(spec.family, Family::Glm4Moe | Family::Deepseek2) {
                // Selection biases a few tenths apart, as trained ones are.
                put(format!("{p}.exp_probs_b.bias"), random(&mut rng, &[n], 0.3), GgmlDType::F32);
            }
            // Router logits a few units apart, so that picks are clear.
            put(format!("{p}.ffn_gate_inp.weight"), random(&mut rng, &[n, e], 0.5), GgmlDType::F32);
            let (gate, up) = (random(&mut rng, &[n, ff, e], 0.2), random(&mut rng, &[n, ff, e], 0.2));
            if spec.fused_gate_up {
                let both = Tensor::cat(&[&gate, &up], 1).unwrap();
                put(format!("{p}.ffn_gate_up_exps.weight"), both, spec.experts_dtype);
            } else {
                put(format!("{p}.ffn_gate_exps.weight"), gate, spec.experts_dtype);
                put(format!("{p}.ffn_up_exps.weight"), up, spec.experts_dtype);
            }
            put(format!("{p}.ffn_down_exps.weight"), random(&mut rng, &[n, e, ff], 0.2), spec.experts_dtype);
            if gpt_oss {
                put(format!("{p}.ffn_gate_inp.bias"), random(&mut rng, &[n], 0.5), GgmlDType::F32);
                put(format!("{p}.ffn_gate_exps.bias"), random(&mut rng, &[n, ff], 0.3), GgmlDType::F32);
                put(format!("{p}.ffn_up_exps.bias"), random(&mut rng, &[n, ff], 0.3), GgmlDType::F32);
                put(format!("{p}.ffn_down_exps.bias"), random(&mut rng, &[n, e], 0.3), GgmlDType::F32);
            }
        } else if spec.family == Family::Phi3 {
            // Gate and up in one, gate first.
            put(format!("{p}.ffn_up.weight"), random(&mut rng, &[2 * spec.ffn, e], 0.2), spec.dtype);
            put(format!("{p}.ffn_down.weight"), random(&mut rng, &[e, spec.ffn], 0.2), spec.dtype);
        } else {
            put(format!("{p}.ffn_gate.weight"), random(&mut rng, &[spec.ffn, e], 0.2), spec.dtype);
            put(format!("{p}.ffn_up.weight"), random(&mut rng, &[spec.ffn, e], 0.2), spec.dtype);
            put(format!("{p}.ffn_down.weight"), random(&mut rng, &[e, spec.ffn], 0.2), spec.dtype);
        }
        if matches!(spec.family, Family::Qwen2 | Family::GptOss | Family::Glm4Moe) {
            put(format!("{p}.attn_q.bias"), random(&mut rng, &[qd], 0.1), GgmlDType::F32);
            put(format!("{p}.attn_k.bias"), random(&mut rng, &[kvd], 0.1), GgmlDType::F32);
            put(format!("{p}.attn_v.bias"), random(&mut rng, &[kvd], 0.1), GgmlDType::F32);
        }
        if matches!(
            spec.family,
            Family::Qwen3 | Family::Qwen3Moe | Family::Qwen3Vl | Family::Qwen3VlMoe | Family::Gemma3
        ) || (spec.family.is_hybrid() && !recurrent)
            || (spec.family == Family::Lfm2 && i % 2 == 1)
            || (spec.family == Family::Glm4Moe && spec.qk_norm)
        {
            put(format!("{p}.attn_q_norm.weight"), ones_ish(&mut rng, spec.head_dim), GgmlDType::F32);
            put(format!("{p}.attn_k_norm.weight"), ones_ish(&mut rng, spec.head_dim), GgmlDType::F32);
        }
        if matches!(spec.family, Family::Gemma2 | Family::Gemma3) {
            put(format!("{p}.post_attention_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
            put(format!("{p}.post_ffw_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        }
    }

    let k = |s: &str| format!("{arch}.{s}");
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (k("block_count"), Value::U32((spec.n_layers + usize::from(spec.mtp)) as u32)),
        (k("embedding_length"), Value::U32(e as u32)),
        // Granite MoE's experts are `feed_forward_length` wide.
        (
            k("feed_forward_length"),
            Value::U32(if spec.family == Family::GraniteMoe { spec.experts.2 } else { spec.ffn } as u32),
        ),
        (k("attention.head_count"), Value::U32(spec.n_heads as u32)),
        (k("attention.head_count_kv"), Value::U32(spec.n_kv_heads as u32)),
        (k("attention.key_length"), Value::U32(spec.head_dim as u32)),
        (k("attention.value_length"), Value::U32(spec.head_dim as u32)),
        (
            k("rope.dimension_count"),
            Value::U32(if spec.family.is_hybrid() || matches!(spec.family, Family::Phi3 | Family::Glm4Moe) {
                spec.rope_dims
            } else {
                spec.head_dim
            } as u32),
        ),
        (k("context_length"), Value::U32(spec.context as u32)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("rope.freq_base"), Value::F32(if spec.family == Family::GptOss { 150_000.0 } else { 10_000.0 })),
    ];
    if let Some((factor, original)) = spec.yarn {
        md.push((k("rope.scaling.type"), Value::String("yarn".into())));
        md.push((k("rope.scaling.factor"), Value::F32(factor)));
        md.push((k("rope.scaling.original_context_length"), Value::U32(original)));
    }
    if spec.family == Family::GptOss {
        md.push((k("attention.sliding_window"), Value::U32(spec.sliding_window as u32)));
    }
    if spec.mtp {
        md.push((k("nextn_predict_layers"), Value::U32(1)));
    }
    if let Some(n) = spec.original_context {
        md.push((k("rope.scaling.original_context_length"), Value::U32(n)));
    }
    if spec.family == Family::Phi3 {
        // sqrt(1 + ln(scale) / ln(original)), as the converter writes it.
        md.push((k("rope.scaling.attn_factor"), Value::F32(1.19)));
    }
    if spec.family == Family::Mistral3 {
        // Ministral 3's (its betas are llama.cpp's defaults: these are not).
        md.push((k("rope.scaling.yarn_beta_fast"), Value::F32(16.0)));
        md.push((k("rope.scaling.yarn_beta_slow"), Value::F32(2.0)));
        md.push((k("rope.scaling.yarn_log_multiplier"), Value::F32(1.0)));
        md.push((k("attention.temperature_scale"), Value::F32(0.1)));
    }
    if spec.family.is_hybrid() {
        // Pairs shared out as Qwen 3.5's [11, 11, 10, 0] shares 32.
        let pairs = spec.rope_dims / 2;
        let third = pairs / 3;
        let sections = [pairs - 2 * third, third, third, 0];
        md.push((k("rope.dimension_sections"), Value::Array(sections.iter().map(|&s| Value::I32(s as i32)).collect())));
        md.push((k("ssm.conv_kernel"), Value::U32(4)));
        md.push((k("ssm.state_size"), Value::U32(sd as u32)));
        md.push((k("ssm.group_count"), Value::U32(hk as u32)));
        md.push((k("ssm.time_step_rank"), Value::U32(hv as u32)));
        md.push((k("ssm.inner_size"), Value::U32((hv * sd) as u32)));
        md.push((k("full_attention_interval"), Value::U32(interval as u32)));
    }
    if matches!(spec.family, Family::Qwen3Vl | Family::Qwen3VlMoe) {
        // Qwen3-VL's [24, 20, 20, 0] of 64 pairs, at this head size.
        let pairs = spec.head_dim / 2;
        let sections = [pairs - 2 * (pairs * 5 / 16), pairs * 5 / 16, pairs * 5 / 16, 0];
        md.push((k("rope.dimension_sections"), Value::Array(sections.iter().map(|&s| Value::I32(s as i32)).collect())));
        md.push((k("n_deepstack_layers"), Value::U32(0)));
    }
    if matches!(spec.family, Family::Qwen35Moe | Family::GraniteMoe) {
        md.push((k("expert_shared_feed_forward_length"), Value::U32(spec.ffn as u32)));
    }
    if spec.family == Family::Lfm2 {
        // No KV heads marks a convolution layer.
        let kv: Vec<Value> =
            (0..spec.n_layers).map(|i| Value::U32(if i % 2 == 0 { 0 } else { spec.n_kv_heads as u32 })).collect();
        md.retain(|(k2, _)| *k2 != k("attention.head_count_kv"));
        md.push((k("attention.head_count_kv"), Value::Array(kv)));
        md.push((k("shortconv.l_cache"), Value::U32(3)));
    }
    if spec.family == Family::Deepseek2 {
        // One KV head: the latent beside the rotated key (`key_length`),
        // the latent alone as the value.
        for (key, v) in [
            ("attention.head_count_kv", MLA_KV_HEADS),
            ("attention.key_length", MLA_RANK + MLA_ROPE),
            ("attention.value_length", MLA_RANK),
            ("attention.key_length_mla", MLA_NOPE + MLA_ROPE),
            ("attention.value_length_mla", MLA_V),
            ("rope.dimension_count", MLA_ROPE),
            ("attention.q_lora_rank", MLA_Q_RANK),
            ("attention.kv_lora_rank", MLA_RANK),
        ] {
            md.retain(|(k2, _)| *k2 != k(key));
            md.push((k(key), Value::U32(v as u32)));
        }
    }
    if matches!(spec.family, Family::Glm4Moe | Family::Deepseek2) {
        md.push((k("expert_shared_count"), Value::U32(1)));
        md.push((k("leading_dense_block_count"), Value::U32(1)));
        md.push((k("expert_weights_norm"), Value::Bool(true)));
        md.push((k("expert_weights_scale"), Value::F32(1.5)));
        md.push((k("expert_gating_func"), Value::U32(2)));
    }
    if matches!(spec.family, Family::Granite | Family::GraniteMoe) {
        // Granite 3.3 2B's.
        md.push((k("embedding_scale"), Value::F32(12.0)));
        md.push((k("residual_scale"), Value::F32(0.22)));
        md.push((k("attention.scale"), Value::F32(0.015625)));
        md.push((k("logit_scale"), Value::F32(8.0)));
    }
    if spec.family.has_experts() {
        md.push((k("expert_count"), Value::U32(spec.experts.0 as u32)));
        md.push((k("expert_used_count"), Value::U32(spec.experts.1 as u32)));
        md.push((k("expert_feed_forward_length"), Value::U32(spec.experts.2 as u32)));
    }
    if spec.olmo3_window {
        md.push((k("attention.sliding_window"), Value::U32(spec.sliding_window as u32)));
    }
    if spec.family == Family::Gemma2 {
        // Caps that bite at these scores' sizes (the real ones are 50 and 30).
        md.push((k("attention.sliding_window"), Value::U32(spec.sliding_window as u32)));
        md.push((k("attn_logit_softcapping"), Value::F32(2.0)));
        md.push((k("final_logit_softcapping"), Value::F32(3.0)));
    }
    if spec.family == Family::Gemma3 {
        md.push((k("attention.sliding_window"), Value::U32(spec.sliding_window as u32)));
        md.push((k("attention.sliding_window_pattern"), Value::U32(spec.sliding_pattern as u32)));
        md.push((k("rope.freq_base_swa"), Value::F32(10000.0)));
    }
    for (key, value) in &spec.metadata {
        md.retain(|(k2, _)| *k2 != k(key));
        md.push((k(key), value.clone()));
    }
    md.extend(if spec.o200k { o200k::tokenizer_metadata() } else { tokenizer_metadata(spec.family) });
    set_template(&mut md, spec);
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
}

/// A random-weight Gemma 4 file of `spec` (see `TinySpec::gemma4`).
pub fn write_gemma4(path: &Path, spec: &TinySpec) {
    let g = &spec.gemma4;
    let mut rng = Lcg(spec.seed);
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let q = |t: &Tensor, dtype: GgmlDType| QTensor::quantize(t, dtype).unwrap();
    let mut put = |name: String, t: Tensor, dtype: GgmlDType| tensors.push((name, q(&t, dtype)));
    let (e, n) = (spec.n_embd, spec.n_layers);
    let ones_ish = |rng: &mut Lcg, n: usize| (random(rng, &[n], 0.1) + 1.0).unwrap();
    let vocabulary = if g.real_vocab {
        let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/templates/gemma-4.jinja");
        gemma4_vocab::tokenizer_metadata(&gemma3_model(), &std::fs::read_to_string(template).unwrap())
    } else {
        tokenizer_metadata(Family::Gemma3)
    };
    let vocab = match vocabulary.iter().find(|(k, _)| k == "tokenizer.ggml.tokens") {
        Some((_, Value::Array(t))) => t.len(),
        _ => unreachable!("a vocabulary has tokens"),
    };
    // Tied output. Scaled by √n_embd, rows of unit size would drown every
    // layer's (post-normed) output, and the model would copy its input;
    // at 0.3 the layers count and logits still spread a few units.
    put("token_embd.weight".into(), random(&mut rng, &[vocab, e], 0.3), spec.dtype);
    put("output_norm.weight".into(), ones_ish(&mut rng, e), GgmlDType::F32);
    let mut factors = vec![1f32; spec.head_dim / 2];
    factors[g.rotated_pairs_full..].iter_mut().for_each(|f| *f = 1e30);
    put("rope_freqs.weight".into(), Tensor::new(factors, &Device::Cpu).unwrap(), GgmlDType::F32);
    if g.per_layer > 0 {
        put("per_layer_token_embd.weight".into(), random(&mut rng, &[vocab, n * g.per_layer], 1.0), spec.dtype);
        put("per_layer_model_proj.weight".into(), random(&mut rng, &[n * g.per_layer, e], 0.2), spec.dtype);
        put("per_layer_proj_norm.weight".into(), ones_ish(&mut rng, g.per_layer), GgmlDType::F32);
    }
    let n_kv = n - g.shared_kv_layers;
    for i in 0..n {
        let p = format!("blk.{i}");
        let swa = g.sliding[i];
        let (hd, kvh) = if swa { (g.head_dim_swa, g.kv_heads_swa) } else { (spec.head_dim, spec.n_kv_heads) };
        let (qd, kvd) = (spec.n_heads * hd, kvh * hd);
        put(format!("{p}.attn_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        put(format!("{p}.attn_q.weight"), random(&mut rng, &[qd, e], 0.2), spec.dtype);
        put(format!("{p}.attn_q_norm.weight"), ones_ish(&mut rng, hd), GgmlDType::F32);
        if i < n_kv {
            put(format!("{p}.attn_k.weight"), random(&mut rng, &[kvd, e], 0.2), spec.dtype);
            if !g.no_v.contains(&i) {
                put(format!("{p}.attn_v.weight"), random(&mut rng, &[kvd, e], 0.2), spec.dtype);
            }
            put(format!("{p}.attn_k_norm.weight"), ones_ish(&mut rng, hd), GgmlDType::F32);
        }
        put(format!("{p}.attn_output.weight"), random(&mut rng, &[e, qd], 0.2), spec.dtype);
        put(format!("{p}.post_attention_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        put(format!("{p}.ffn_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        put(format!("{p}.ffn_gate.weight"), random(&mut rng, &[spec.ffn, e], 0.2), spec.dtype);
        put(format!("{p}.ffn_up.weight"), random(&mut rng, &[spec.ffn, e], 0.2), spec.dtype);
        put(format!("{p}.ffn_down.weight"), random(&mut rng, &[e, spec.ffn], 0.2), spec.dtype);
        put(format!("{p}.post_ffw_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        let (experts, _, ff) = spec.experts;
        if experts > 0 {
            put(format!("{p}.ffn_gate_inp.weight"), random(&mut rng, &[experts, e], 0.5), GgmlDType::F32);
            put(format!("{p}.ffn_gate_inp.scale"), ones_ish(&mut rng, e), GgmlDType::F32);
            let (gate, up) = (random(&mut rng, &[experts, ff, e], 0.2), random(&mut rng, &[experts, ff, e], 0.2));
            put(format!("{p}.ffn_gate_exps.weight"), gate, spec.experts_dtype);
            put(format!("{p}.ffn_up_exps.weight"), up, spec.experts_dtype);
            put(format!("{p}.ffn_down_exps.weight"), random(&mut rng, &[experts, e, ff], 0.2), spec.experts_dtype);
            put(format!("{p}.ffn_down_exps.scale"), ones_ish(&mut rng, experts), GgmlDType::F32);
            put(format!("{p}.pre_ffw_norm_2.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
            put(format!("{p}.post_ffw_norm_1.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
            put(format!("{p}.post_ffw_norm_2.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        }
        if g.per_layer > 0 {
            put(format!("{p}.inp_gate.weight"), random(&mut rng, &[g.per_layer, e], 0.3), spec.dtype);
            put(format!("{p}.proj.weight"), random(&mut rng, &[e, g.per_layer], 0.3), spec.dtype);
            put(format!("{p}.post_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        }
        put(format!("{p}.layer_output_scale.weight"), (random(&mut rng, &[1], 0.3) + 1.0).unwrap(), GgmlDType::F32);
    }

    let k = |s: &str| format!("gemma4.{s}");
    let per_layer =
        |f: &dyn Fn(bool) -> usize| Value::Array(g.sliding.iter().map(|&s| Value::I32(f(s) as i32)).collect());
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String("gemma4".into())),
        (k("block_count"), Value::U32(n as u32)),
        (k("embedding_length"), Value::U32(e as u32)),
        // Granite MoE's experts are `feed_forward_length` wide.
        (
            k("feed_forward_length"),
            Value::U32(if spec.family == Family::GraniteMoe { spec.experts.2 } else { spec.ffn } as u32),
        ),
        (k("attention.head_count"), Value::U32(spec.n_heads as u32)),
        (k("attention.head_count_kv"), per_layer(&|s| if s { g.kv_heads_swa } else { spec.n_kv_heads })),
        (k("attention.key_length"), Value::U32(spec.head_dim as u32)),
        (k("attention.value_length"), Value::U32(spec.head_dim as u32)),
        (k("attention.key_length_swa"), Value::U32(g.head_dim_swa as u32)),
        (k("attention.value_length_swa"), Value::U32(g.head_dim_swa as u32)),
        (k("rope.dimension_count"), Value::U32(spec.head_dim as u32)),
        (k("rope.dimension_count_swa"), Value::U32(g.rope_dims_swa as u32)),
        (k("context_length"), Value::U32(spec.context as u32)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("rope.freq_base"), Value::F32(1_000_000.0)),
        (k("rope.freq_base_swa"), Value::F32(10_000.0)),
        (k("attention.sliding_window"), Value::U32(spec.sliding_window as u32)),
        (k("attention.sliding_window_pattern"), Value::Array(g.sliding.iter().map(|&s| Value::Bool(s)).collect())),
        (k("attention.shared_kv_layers"), Value::U32(g.shared_kv_layers as u32)),
        (k("embedding_length_per_layer_input"), Value::U32(g.per_layer as u32)),
        (k("final_logit_softcapping"), Value::F32(g.softcap)),
    ];
    if spec.experts.0 > 0 {
        md.push((k("expert_count"), Value::U32(spec.experts.0 as u32)));
        md.push((k("expert_used_count"), Value::U32(spec.experts.1 as u32)));
        md.push((k("expert_feed_forward_length"), Value::U32(spec.experts.2 as u32)));
    }
    md.extend(vocabulary);
    set_template(&mut md, spec);
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
}
