//! Every family's choices, one row each: how its file is read (which
//! metadata keys, with which defaults, as llama.cpp's loader for it reads
//! them) and what its forward pass does differently (norms, RoPE, attention
//! scales, experts, recurrent layers). `ModelConfig::from_gguf` turns a row
//! and a file's metadata into a `ModelConfig`; the load and both passes
//! read the row's choices from there. Adding a family is a row here, its
//! tensors if they are new, its test and its template cases.
//!
//! Each row names the llama.cpp source it follows (`src/models/*.cpp`,
//! `src/llama-model.cpp`'s loader).

/// The model families Hearth can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3, Mistral, SmolLM: GGUF stores Q/K permuted for interleaved RoPE.
    Llama,
    /// SmolLM3: Llama with no RoPE on every fourth layer (`no_rope_interval`).
    SmolLm3,
    /// LFM2 (`lfm2`): a hybrid whose recurrent layers (those with no KV
    /// heads) are short gated convolutions (`RecurrentConfig::short_conv`),
    /// the rest attention with QK norms and NeoX RoPE.
    Lfm2,
    /// DeepSeek V2 and V3's layout (`deepseek2`: GLM-4.7-Flash, Kimi,
    /// DeepSeek-V2-Lite): multi-head latent attention (`MlaConfig`: one
    /// compressed latent and a shared rotated key per position, cached as
    /// llama.cpp caches them), the first layers dense, then experts with a
    /// shared expert.
    Deepseek2,
    /// GLM-4.5 and 4.6 (`glm4moe`): biased QKV, partial NeoX RoPE, the
    /// first layers dense, then sigmoid-routed experts with a selection
    /// bias beside an ungated shared expert.
    Glm4Moe,
    /// Granite 3.x (`granite`): Llama with its four scales (embeddings,
    /// each half's residual, attention, logits) and RoPE switched off by
    /// `rope.scaling.finetuned = false`.
    Granite,
    /// Granite 3.x MoE (`granitemoe`): Granite with experts in place of the
    /// dense FFN, and (Granite MoE Shared) an ungated shared expert.
    GraniteMoe,
    /// OLMo 2 (and OLMo 3, written as `olmo2`): norms after attention and
    /// the FFN only, none before; Q and K RMS-normed across all heads at
    /// once; NeoX RoPE; OLMo 3's every fourth layer full, the rest sliding.
    Olmo2,
    /// Phi-3, Phi-3.5 and Phi-4-mini (`phi3`): queries, keys and values in
    /// one `attn_qkv`, gate and up in one `ffn_up`, NeoX RoPE (partial on
    /// Phi-4-mini) with LongRoPE's factors, queries scaled before attention.
    Phi3,
    /// Ministral 3, Devstral 2, Mistral Small 3.x (`mistral3`): Llama with
    /// YaRN read in full (`rope.scaling.yarn_*`), Llama 4's attention
    /// temperature (`attention.temperature_scale`) and an optional
    /// attention output bias.
    Mistral3,
    /// Qwen 2 and 2.5: biases on Q/K/V, NeoX RoPE.
    Qwen2,
    /// Qwen 3: per-head RMS norms on Q and K, NeoX RoPE.
    Qwen3,
    /// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder): Qwen 3 with experts in
    /// place of the dense FFN.
    Qwen3Moe,
    /// Qwen3-VL's text model (`qwen3vl`, `qwen3vlmoe`): Qwen 3 (or
    /// Qwen3-MoE) with multi-section RoPE, which text positions (the same
    /// in every section) reduce to NeoX's; its deepstack inputs are image
    /// features, zero for text.
    Qwen3Vl,
    Qwen3VlMoe,
    /// Gemma 2: Gemma 3 without QK norms, with attention scores and
    /// logits soft-capped (`tanh(x / cap) · cap`) and every other layer
    /// sliding.
    Gemma2,
    /// Gemma 3: sandwich norms, GELU, scaled embeddings, sliding-window layers.
    Gemma3,
    /// Qwen 3.5 and 3.6, dense: three of every four layers Gated DeltaNet
    /// (recurrent), the rest gated full attention with partial RoPE.
    Qwen35,
    /// Qwen 3.5 and 3.6 with experts and a shared expert in every layer.
    Qwen35Moe,
    /// gpt-oss (20b, 120b): experts with biases behind a clamped SwiGLU
    /// and a softmax over the picked experts only, attention with biases
    /// and a learned sink per head, every other layer a 128-position
    /// window, YaRN positions.
    GptOss,
    /// Gemma 4 (E2B, E4B, 31B, 26B-A4B): Gemma 3's sandwich norms and
    /// GELU with heads of another size (and count) on full layers, the last
    /// layers reading earlier layers' keys and values, V normed without a
    /// weight, attention unscaled, per-layer token embeddings (E models), a
    /// per-layer output scale, a final soft-cap, and (26B-A4B) experts
    /// beside the dense MLP.
    Gemma4,
}

pub const SUPPORTED_ARCHITECTURES: &str =
    "llama, mistral3, smollm3, phi3, olmo2, granite, granitemoe, glm4moe, deepseek2, lfm2, qwen2, qwen3, qwen3moe, qwen3vl, qwen3vlmoe, qwen35, qwen35moe, gemma2, gemma3, gemma4, gpt-oss";

impl Architecture {
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        FAMILIES.iter().find(|f| f.gguf_names.contains(&name)).map(|f| f.arch)
    }

    /// Its row.
    pub(crate) fn family(self) -> &'static Family {
        FAMILIES.iter().find(|f| f.arch == self).expect("every architecture has a row")
    }

    /// `general.architecture` as llama.cpp's converter writes it.
    pub fn gguf_name(self) -> &'static str {
        self.family().gguf_names[0]
    }

    /// The family as people name it, for messages.
    pub fn family_name(self) -> &'static str {
        self.family().name
    }
}

/// One family's choices.
pub(crate) struct Family {
    pub arch: Architecture,
    /// `general.architecture` values it is read from; the first is the one
    /// llama.cpp writes.
    pub gguf_names: &'static [&'static str],
    pub name: &'static str,

    // Positions.
    /// GGUF's Q and K rows are permuted so that rotation pairs are
    /// adjacent (llama's layout); else NeoX's halves.
    pub interleaved_rope: bool,
    /// `rope.freq_base` where the file gives none.
    pub rope_base: f32,
    /// Every how many layers one attends without RoPE (its `n`-th, `2n`-th,
    /// …; llama.cpp's `n_no_rope_layer_step`).
    pub no_rope_interval: Option<usize>,
    /// `rope.scaling.finetuned = false` switches RoPE off (dense Granite's
    /// loader only).
    pub rope_off_unless_finetuned: bool,
    /// `rope.dimension_sections`: multi-section RoPE, which text positions
    /// reduce to NeoX's but for pairs no section claims.
    pub rope_sections: bool,
    /// YaRN's betas from `rope.scaling.yarn_beta_fast`/`_slow`, else 32
    /// and 1 (llama.cpp's converter writes them for every YaRN model, its
    /// loaders read them for few).
    pub yarn_betas_from_file: bool,
    pub yarn_log_multiplier: YarnLogMultiplier,
    /// YaRN's magnitude with DeepSeek's own `mscale` (`YarnConfig`).
    pub yarn_own_mscale: bool,
    /// Llama 4's attention temperature (`attention.temperature_scale`),
    /// and what its step is.
    pub attention_temperature: Option<TemperatureStep>,
    pub sliding: Sliding,

    // Attention.
    /// Queries scaled by 1/√head_dim before attention rather than the
    /// scores after it: with f16 keys, where it happens shows in the last bits.
    pub scales_queries: bool,
    pub attention_scale: AttentionScaleRule,
    /// `attn_logit_softcapping`'s default: scores soft-capped before the softmax.
    pub attention_softcap: Option<f32>,
    /// A learned logit per head joins each softmax's denominator (`attn_sinks`).
    pub attention_sinks: bool,
    /// Multi-head latent attention (`MlaConfig`).
    pub latent_attention: bool,
    /// A layer without `attn_v` uses its keys as values, normed without a
    /// weight (`v_norm`).
    pub values_may_be_keys: bool,

    // Layers.
    pub mixers: Mixers,
    pub norms: Norms,
    /// GELU FFNs and embeddings scaled by √n_embd (Gemma's).
    pub gemma_style: bool,
    pub experts: Option<ExpertStyle>,
    /// `final_logit_softcapping`'s default: `Some(0)` reads the key with no cap by default.
    pub final_softcap: Option<f32>,
    /// Granite's scales (`embedding_scale`, `residual_scale`, `logit_scale`, `attention.scale`).
    pub granite_scales: bool,
    /// Per-layer token embeddings (`embedding_length_per_layer_input`).
    pub per_layer_embeddings: bool,
    /// The final norm's tensor.
    pub output_norm: &'static str,
}

/// `rope.scaling.yarn_log_multiplier`: llama.cpp's `mscale_all_dim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum YarnLogMultiplier {
    Ignored,
    Read,
    /// Read, and divided by the 0.1 the converter wrote in.
    ReadOverTenth,
}

/// What Llama 4's attention temperature steps by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TemperatureStep {
    /// `rope.scaling.original_context_length`.
    OriginalContext,
    /// `attention.temperature_length` (DeepSeek's layout).
    LengthKey,
}

/// Which layers slide, how far, and how they rotate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sliding {
    pub window: Window,
    /// `attention.sliding_window_pattern`'s default: every how many layers
    /// one is full (0: all slide).
    pub pattern: u32,
    /// The pattern the file may not go below.
    pub min_pattern: u32,
    /// `attention.sliding_window_pattern` is always a flag per layer.
    pub flags: bool,
    pub local_base: LocalBase,
    /// Sliding layers scale positions as full ones do, rather than not at all.
    pub scaled_positions: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Window {
    /// No sliding layers.
    Never,
    /// `attention.sliding_window`, else `default`; none where that is 0.
    Optional { default: Option<u32> },
    /// `attention.sliding_window`, non-zero, must be given.
    Required,
}

/// Sliding layers' RoPE base.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum LocalBase {
    /// `rope.freq_base_swa`, else this (`None`: `rope.freq_base`).
    Key(Option<f32>),
    /// `rope.freq_base`, whatever `rope.freq_base_swa` says.
    Global,
}

/// What attention scores are multiplied by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttentionScaleRule {
    /// 1/√head_dim (latent attention: its own, from YaRN's magnitude).
    HeadDim,
    /// 1: neither queries nor scores scaled.
    One,
    /// `attention.scale` where given.
    FromFile,
    /// 1/√head_dim, but by the width per head for the file of this many
    /// layers (Gemma 2 27B and Gemma 3 27B, after gemma_pytorch).
    WidthPerHeadAt(usize),
}

/// What each layer's mixer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mixers {
    Attention,
    /// Gated DeltaNet layers beside gated full attention (`ssm.*`).
    DeltaNet,
    /// Short gated convolutions in the layers with no KV heads (`shortconv.l_cache`).
    ShortConv,
}

/// Where each layer's norms are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Norms {
    /// Before attention and the FFN; after attention too where the file has one.
    Pre,
    /// Before attention, and the FFN's stored as `post_attention_norm`.
    FfnAsPostAttention,
    /// After attention and the FFN only, none before.
    PostOnly,
}

impl ExpertStyle {
    /// Whether the shared expert has a gate input of its own (`ffn_gate_inp_shexp`).
    pub fn gated_shared_expert(self) -> bool {
        !matches!(self, Self::Granite | Self::Glm { .. })
    }
}

/// How a family's experts are read and routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpertStyle {
    /// Softmax over all, the picked renormalised, SiLU, no shared expert.
    Qwen,
    /// `Qwen` with a gated shared expert of its own width in every layer.
    QwenShared,
    /// `Qwen`, `feed_forward_length` wide, and an ungated shared expert
    /// where the file gives its width.
    Granite,
    /// GLM-4.5's and DeepSeek V2's: the gating function, normalisation,
    /// scale, leading dense layers and ungated shared experts from the
    /// file; sigmoid gating where the file does not say (else softmax, but
    /// for GLM-4.7-Flash, known by its shape as llama.cpp knows it).
    Glm { sigmoid: bool },
    /// A softmax over the picked experts only, a clamped SwiGLU, biases.
    GptOss,
    /// Beside the dense MLP in the layers that have a router, GELU.
    BesideDense,
}

const LLAMA: Family = Family {
    arch: Architecture::Llama,
    gguf_names: &["llama", "mistral"],
    name: "Llama",
    interleaved_rope: true,
    rope_base: 10_000.0,
    no_rope_interval: None,
    rope_off_unless_finetuned: false,
    rope_sections: false,
    yarn_betas_from_file: false,
    yarn_log_multiplier: YarnLogMultiplier::Ignored,
    yarn_own_mscale: false,
    attention_temperature: None,
    sliding: Sliding {
        window: Window::Never,
        pattern: 1,
        min_pattern: 0,
        flags: false,
        local_base: LocalBase::Global,
        scaled_positions: false,
    },
    scales_queries: false,
    attention_scale: AttentionScaleRule::HeadDim,
    attention_softcap: None,
    attention_sinks: false,
    latent_attention: false,
    values_may_be_keys: false,
    mixers: Mixers::Attention,
    norms: Norms::Pre,
    gemma_style: false,
    experts: None,
    final_softcap: None,
    granite_scales: false,
    per_layer_embeddings: false,
    output_norm: "output_norm.weight",
};

/// NeoX-rotated families start from here.
const NEOX: Family = Family { interleaved_rope: false, ..LLAMA };

const QWEN3: Family = Family { arch: Architecture::Qwen3, gguf_names: &["qwen3"], name: "Qwen 3", ..NEOX };

const GEMMA: Family = Family { gemma_style: true, scales_queries: true, ..NEOX };

const QWEN35: Family = Family {
    arch: Architecture::Qwen35,
    gguf_names: &["qwen35"],
    name: "Qwen 3.5",
    rope_sections: true,
    mixers: Mixers::DeltaNet,
    norms: Norms::FfnAsPostAttention,
    ..NEOX
};

const GLM: Family =
    Family { yarn_log_multiplier: YarnLogMultiplier::Read, experts: Some(ExpertStyle::Glm { sigmoid: false }), ..NEOX };

/// The rows, in no order.
const FAMILIES: &[Family] = &[
    // llama.cpp: src/models/llama.cpp.
    LLAMA,
    // smollm3.cpp: no RoPE on every fourth layer.
    Family {
        arch: Architecture::SmolLm3,
        gguf_names: &["smollm3"],
        name: "SmolLM3",
        no_rope_interval: Some(4),
        ..LLAMA
    },
    // mistral3.cpp: YaRN read in full, Llama 4's temperature.
    Family {
        arch: Architecture::Mistral3,
        gguf_names: &["mistral3"],
        name: "Mistral 3",
        yarn_betas_from_file: true,
        yarn_log_multiplier: YarnLogMultiplier::Read,
        attention_temperature: Some(TemperatureStep::OriginalContext),
        ..LLAMA
    },
    // granite.cpp: four scales, RoPE off unless fine-tuned.
    Family {
        arch: Architecture::Granite,
        gguf_names: &["granite"],
        name: "Granite",
        rope_off_unless_finetuned: true,
        attention_scale: AttentionScaleRule::FromFile,
        granite_scales: true,
        ..LLAMA
    },
    // granite.cpp (MoE): experts in place of the dense FFN; always rotates.
    Family {
        arch: Architecture::GraniteMoe,
        gguf_names: &["granitemoe"],
        name: "Granite MoE",
        attention_scale: AttentionScaleRule::FromFile,
        granite_scales: true,
        experts: Some(ExpertStyle::Granite),
        ..LLAMA
    },
    // deepseek2.cpp: latent attention, experts after dense leading layers.
    Family {
        arch: Architecture::Deepseek2,
        gguf_names: &["deepseek2"],
        name: "DeepSeek V2 (MLA)",
        interleaved_rope: true,
        yarn_log_multiplier: YarnLogMultiplier::ReadOverTenth,
        yarn_own_mscale: true,
        attention_temperature: Some(TemperatureStep::LengthKey),
        latent_attention: true,
        ..GLM
    },
    // glm4-moe.cpp: biased QKV, partial NeoX RoPE, sigmoid-routed experts.
    Family {
        arch: Architecture::Glm4Moe,
        gguf_names: &["glm4moe"],
        name: "GLM-4.5",
        yarn_log_multiplier: YarnLogMultiplier::Ignored,
        norms: Norms::FfnAsPostAttention,
        experts: Some(ExpertStyle::Glm { sigmoid: true }),
        ..GLM
    },
    // lfm2.cpp: short convolutions where a layer has no KV heads.
    Family {
        arch: Architecture::Lfm2,
        gguf_names: &["lfm2"],
        name: "LFM2",
        mixers: Mixers::ShortConv,
        output_norm: "token_embd_norm.weight",
        ..NEOX
    },
    // olmo2.cpp: post-norms only; OLMo 3's windows rotate with the global base.
    Family {
        arch: Architecture::Olmo2,
        gguf_names: &["olmo2"],
        name: "OLMo 2",
        sliding: Sliding { window: Window::Optional { default: None }, pattern: 4, ..LLAMA.sliding },
        norms: Norms::PostOnly,
        ..NEOX
    },
    // phi3.cpp: fused QKV and gate-up, queries scaled first, LongRoPE.
    Family { arch: Architecture::Phi3, gguf_names: &["phi3"], name: "Phi-3", scales_queries: true, ..NEOX },
    // qwen2.cpp.
    Family { arch: Architecture::Qwen2, gguf_names: &["qwen2"], name: "Qwen 2", ..NEOX },
    // qwen3.cpp.
    QWEN3,
    // qwen3moe.cpp.
    Family {
        arch: Architecture::Qwen3Moe,
        gguf_names: &["qwen3moe"],
        name: "Qwen3-MoE",
        experts: Some(ExpertStyle::Qwen),
        ..QWEN3
    },
    // qwen3vl.cpp: multi-section RoPE.
    Family { arch: Architecture::Qwen3Vl, gguf_names: &["qwen3vl"], name: "Qwen3-VL", rope_sections: true, ..QWEN3 },
    // qwen3vl-moe.cpp.
    Family {
        arch: Architecture::Qwen3VlMoe,
        gguf_names: &["qwen3vlmoe"],
        name: "Qwen3-VL MoE",
        rope_sections: true,
        experts: Some(ExpertStyle::Qwen),
        ..QWEN3
    },
    // gemma2-iswa.cpp: soft-capped scores and logits, every other layer sliding.
    Family {
        arch: Architecture::Gemma2,
        gguf_names: &["gemma2"],
        name: "Gemma 2",
        sliding: Sliding {
            window: Window::Optional { default: Some(4096) },
            pattern: 2,
            local_base: LocalBase::Key(None),
            ..LLAMA.sliding
        },
        attention_scale: AttentionScaleRule::WidthPerHeadAt(46),
        attention_softcap: Some(50.0),
        final_softcap: Some(30.0),
        ..GEMMA
    },
    // gemma3-iswa.cpp: five of six layers sliding, at their own base.
    Family {
        arch: Architecture::Gemma3,
        gguf_names: &["gemma3"],
        name: "Gemma 3",
        rope_base: 1_000_000.0,
        sliding: Sliding {
            window: Window::Optional { default: None },
            pattern: 6,
            min_pattern: 1,
            local_base: LocalBase::Key(Some(10_000.0)),
            ..LLAMA.sliding
        },
        attention_scale: AttentionScaleRule::WidthPerHeadAt(62),
        final_softcap: Some(0.0),
        ..GEMMA
    },
    // gemma4-iswa.cpp: a flag per layer, shared KV, unscaled attention.
    Family {
        arch: Architecture::Gemma4,
        gguf_names: &["gemma4"],
        name: "Gemma 4",
        sliding: Sliding {
            window: Window::Required,
            pattern: 1,
            flags: true,
            local_base: LocalBase::Key(Some(10_000.0)),
            ..LLAMA.sliding
        },
        scales_queries: false,
        attention_scale: AttentionScaleRule::One,
        values_may_be_keys: true,
        experts: Some(ExpertStyle::BesideDense),
        final_softcap: Some(30.0),
        per_layer_embeddings: true,
        ..GEMMA
    },
    // qwen35.cpp: three of four layers Gated DeltaNet.
    QWEN35,
    // qwen35moe.cpp.
    Family {
        arch: Architecture::Qwen35Moe,
        gguf_names: &["qwen35moe"],
        name: "Qwen 3.5 MoE",
        experts: Some(ExpertStyle::QwenShared),
        ..QWEN35
    },
    // openai-moe-iswa.cpp: sinks, every other layer a window, YaRN everywhere.
    Family {
        arch: Architecture::GptOss,
        gguf_names: &["gpt-oss"],
        name: "gpt-oss",
        sliding: Sliding {
            window: Window::Required,
            pattern: 2,
            local_base: LocalBase::Key(None),
            scaled_positions: true,
            ..LLAMA.sliding
        },
        attention_sinks: true,
        norms: Norms::FfnAsPostAttention,
        experts: Some(ExpertStyle::GptOss),
        ..NEOX
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_architecture_has_one_row_and_its_names_are_its_own() {
        for f in FAMILIES {
            assert_eq!(FAMILIES.iter().filter(|g| g.arch == f.arch).count(), 1, "{:?}", f.arch);
            for name in f.gguf_names {
                assert_eq!(Architecture::from_gguf_name(name), Some(f.arch));
                assert!(SUPPORTED_ARCHITECTURES.contains(name) || *name == "mistral", "{name}");
            }
        }
        assert_eq!(FAMILIES.len(), SUPPORTED_ARCHITECTURES.split(", ").count());
    }
}
