//! What distinguishes one decoder-only family from another, read from GGUF metadata.

use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;

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
        match name {
            "llama" | "mistral" => Some(Self::Llama),
            "smollm3" => Some(Self::SmolLm3),
            "mistral3" => Some(Self::Mistral3),
            "phi3" => Some(Self::Phi3),
            "olmo2" => Some(Self::Olmo2),
            "granite" => Some(Self::Granite),
            "granitemoe" => Some(Self::GraniteMoe),
            "glm4moe" => Some(Self::Glm4Moe),
            "deepseek2" => Some(Self::Deepseek2),
            "lfm2" => Some(Self::Lfm2),
            "qwen2" => Some(Self::Qwen2),
            "qwen3" => Some(Self::Qwen3),
            "qwen3moe" => Some(Self::Qwen3Moe),
            "qwen3vl" => Some(Self::Qwen3Vl),
            "qwen3vlmoe" => Some(Self::Qwen3VlMoe),
            "gemma2" => Some(Self::Gemma2),
            "gemma3" => Some(Self::Gemma3),
            "qwen35" => Some(Self::Qwen35),
            "qwen35moe" => Some(Self::Qwen35Moe),
            "gpt-oss" => Some(Self::GptOss),
            "gemma4" => Some(Self::Gemma4),
            _ => None,
        }
    }

    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::SmolLm3 => "smollm3",
            Self::Mistral3 => "mistral3",
            Self::Phi3 => "phi3",
            Self::Olmo2 => "olmo2",
            Self::Granite => "granite",
            Self::GraniteMoe => "granitemoe",
            Self::Glm4Moe => "glm4moe",
            Self::Deepseek2 => "deepseek2",
            Self::Lfm2 => "lfm2",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Qwen3Moe => "qwen3moe",
            Self::Qwen3Vl => "qwen3vl",
            Self::Qwen3VlMoe => "qwen3vlmoe",
            Self::Gemma2 => "gemma2",
            Self::Gemma3 => "gemma3",
            Self::Qwen35 => "qwen35",
            Self::Qwen35Moe => "qwen35moe",
            Self::GptOss => "gpt-oss",
            Self::Gemma4 => "gemma4",
        }
    }

    /// GGUF's llama tensors are permuted so that rotation pairs are adjacent.
    pub(crate) fn interleaved_rope(self) -> bool {
        matches!(
            self,
            Self::Llama | Self::SmolLm3 | Self::Mistral3 | Self::Granite | Self::GraniteMoe | Self::Deepseek2
        )
    }

    /// The family as people name it, for messages.
    pub fn family_name(self) -> &'static str {
        match self {
            Self::Llama => "Llama",
            Self::SmolLm3 => "SmolLM3",
            Self::Mistral3 => "Mistral 3",
            Self::Phi3 => "Phi-3",
            Self::Olmo2 => "OLMo 2",
            Self::Granite => "Granite",
            Self::GraniteMoe => "Granite MoE",
            Self::Glm4Moe => "GLM-4.5",
            Self::Deepseek2 => "DeepSeek V2 (MLA)",
            Self::Lfm2 => "LFM2",
            Self::Qwen2 => "Qwen 2",
            Self::Qwen3 => "Qwen 3",
            Self::Qwen3Moe => "Qwen3-MoE",
            Self::Qwen3Vl => "Qwen3-VL",
            Self::Qwen3VlMoe => "Qwen3-VL MoE",
            Self::Gemma2 => "Gemma 2",
            Self::Gemma3 => "Gemma 3",
            Self::Qwen35 => "Qwen 3.5",
            Self::Qwen35Moe => "Qwen 3.5 MoE",
            Self::GptOss => "gpt-oss",
            Self::Gemma4 => "Gemma 4",
        }
    }

    /// Whether YaRN's betas come from the file (`rope.scaling.yarn_beta_fast`,
    /// `_slow`): llama.cpp's loaders read them for Mistral 3 only (of the
    /// families Hearth runs), else 32 and 1, though its converter writes
    /// them for every YaRN model.
    pub(crate) fn reads_yarn_betas(self) -> bool {
        self == Self::Mistral3
    }

    /// Whether `mscale_all_dim` comes from the file (`rope.scaling.yarn_log_multiplier`).
    pub(crate) fn reads_yarn_log_multiplier(self) -> bool {
        matches!(self, Self::Mistral3 | Self::Deepseek2)
    }

    /// Every how many layers one attends without RoPE (its `n`-th, `2n`-th,
    /// …; llama.cpp's `n_no_rope_layer_step`, fixed per family).
    pub(crate) fn no_rope_interval(self) -> Option<usize> {
        match self {
            Self::SmolLm3 => Some(4),
            _ => None,
        }
    }

    /// Gemma scales the queries by 1/√head_dim before attention rather than
    /// the scores after it; with f16 keys the queries are rounded after the
    /// scaling, so where it happens shows in the last bits.
    pub(crate) fn scales_queries(self) -> bool {
        matches!(self, Self::Gemma2 | Self::Gemma3 | Self::Phi3)
    }

    /// Whether the FFN is a mixture of experts.
    pub(crate) fn has_experts(self) -> bool {
        matches!(
            self,
            Self::Qwen3Moe
                | Self::Qwen3VlMoe
                | Self::Qwen35Moe
                | Self::GptOss
                | Self::GraniteMoe
                | Self::Glm4Moe
                | Self::Deepseek2
        )
    }

    /// Gemma: embeddings scaled by √n_embd, GELU FFNs, and norms after
    /// attention and the FFN as well as before.
    pub(crate) fn is_gemma(self) -> bool {
        matches!(self, Self::Gemma2 | Self::Gemma3 | Self::Gemma4)
    }

    /// OLMo 2: no norm before attention or the FFN, only after them.
    pub(crate) fn post_norms_only(self) -> bool {
        matches!(self, Self::Olmo2)
    }

    /// Qwen 3.5 and gpt-oss store the FFN's norm as `post_attention_norm`.
    pub(crate) fn ffn_norm_is_post_attention(self) -> bool {
        matches!(self, Self::Qwen35 | Self::Qwen35Moe | Self::GptOss | Self::Glm4Moe)
    }

    /// gpt-oss: a learned logit per head joins each attention softmax's
    /// denominator (`attn_sinks`).
    pub(crate) fn has_attention_sinks(self) -> bool {
        matches!(self, Self::GptOss)
    }

    /// Qwen 3.5: recurrent layers beside attention layers, whose query
    /// projection carries a sigmoid output gate per head, and whose FFN
    /// norm is stored as `post_attention_norm`.
    pub(crate) fn is_hybrid(self) -> bool {
        matches!(self, Self::Qwen35 | Self::Qwen35Moe)
    }
}

/// The Gated DeltaNet layers of a hybrid model (Qwen 3.5): their shape,
/// and which layers they are.
#[derive(Debug, Clone, PartialEq)]
pub struct RecurrentConfig {
    /// The causal convolution's width (`ssm.conv_kernel`).
    pub conv_kernel: usize,
    /// Each head's key and value size (`ssm.state_size`).
    pub head_dim: usize,
    /// Query and key heads (`ssm.group_count`).
    pub k_heads: usize,
    /// Value heads (`ssm.time_step_rank`); value head `j` reads query and
    /// key head `j % k_heads`, as llama.cpp's converter orders them.
    pub v_heads: usize,
    /// `layers[i]`: whether layer `i` is recurrent rather than attention.
    pub layers: Vec<bool>,
    /// LFM2: the recurrent layers are short gated convolutions over this
    /// many channels (`n_embd`), their state the convolution's alone; the
    /// delta-rule fields above are 0.
    pub short_conv: Option<usize>,
}

impl RecurrentConfig {
    /// Channels of the convolution: queries, keys and values side by side
    /// (LFM2: the embedding's).
    pub fn conv_channels(&self) -> usize {
        self.short_conv.unwrap_or((2 * self.k_heads + self.v_heads) * self.head_dim)
    }

    /// Floats of one layer's convolution state: the last `conv_kernel − 1`
    /// inputs of every channel.
    pub fn conv_state_len(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_channels()
    }

    /// Floats of one layer's delta-rule state: a `head_dim²` matrix per value head.
    pub fn delta_state_len(&self) -> usize {
        self.v_heads * self.head_dim * self.head_dim
    }
}

/// Multi-head latent attention (DeepSeek V2's, `attn_k_b` and `attn_v_b`
/// given apart): each position keeps one `kv_lora_rank` latent and one
/// `rope_dims` rotated key shared by all heads; a head's query is its
/// unrotated part taken into the latent's space by `attn_k_b` beside its
/// rotated part, and its output, a mix of latents, leaves through
/// `attn_v_b`. The cache holds the latent and the rotated key (`key_length`
/// = `kv_lora_rank` + `rope_dims`, one KV head).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlaConfig {
    /// `attention.q_lora_rank`: queries through a low-rank pair (`attn_q_a`,
    /// its norm, `attn_q_b`); `None`: one `attn_q` (the lite models).
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    /// Each head's key size before absorption (`key_length_mla`): its
    /// unrotated part and `rope_dims`.
    pub head_k: usize,
    /// Each head's value size (`value_length_mla`).
    pub head_v: usize,
}

impl MlaConfig {
    pub fn nope(&self, rope_dims: usize) -> usize {
        self.head_k - rope_dims
    }
}

/// How a router turns its logits into expert weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    /// A softmax over every expert, then the top k (Qwen, Mixtral).
    Softmax,
    /// The top k of the raw logits, then a softmax over those k only
    /// (gpt-oss).
    SoftmaxWeight,
    /// A sigmoid of each logit; the top k (by it plus a selection bias,
    /// where the layer has one) weighted by it (GLM-4.5, DeepSeek V3).
    Sigmoid,
}

/// What joins an expert's gate and up projections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExpertActivation {
    /// `SiLU(gate) · up`.
    Silu,
    /// gpt-oss's clamped SwiGLU: `g = min(gate, limit)`,
    /// `u = clamp(up, −limit, limit)`, `g · σ(alpha · g) · (u + 1)`.
    SwigluOai { alpha: f32, limit: f32 },
    /// `GELU(gate) · up` (Gemma 4), GELU looked up as llama.cpp looks it up.
    Gelu,
}

/// A mixture-of-experts FFN's shape and routing, the same in every layer.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertsConfig {
    /// Experts in each layer (`expert_count`).
    pub count: usize,
    /// Experts each token runs (`expert_used_count`).
    pub used: usize,
    /// Each expert's hidden width (`expert_feed_forward_length`).
    pub ffn_len: usize,
    pub gating: Gating,
    pub activation: ExpertActivation,
    /// The k weights are divided by their sum (Qwen3-MoE: always).
    pub normalize_weights: bool,
    /// The shared expert's hidden width, where every token also runs one
    /// (Qwen 3.5: `expert_shared_feed_forward_length`).
    pub shared_ffn_len: Option<usize>,
    /// What the picked weights are multiplied by (`expert_weights_scale`).
    pub weights_scale: Option<f32>,
    /// The first layers, whose FFN is dense (`leading_dense_block_count`).
    pub dense_lead: usize,
}

/// YaRN's parameters as llama.cpp's context derives them (`llama_context`'s
/// constructor, with its defaults for what the file does not say).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct YarnConfig {
    /// `rope.scaling.original_context_length`, else the trained context.
    pub original_context: usize,
    /// The rotations per original context above which a pair keeps its
    /// unscaled angle (32), and below which it is fully scaled (1).
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// How far the fast pairs go back to their unscaled angle (1).
    pub ext_factor: f32,
    /// The magnitude llama.cpp gives its cos/sin tables before `rope_yarn`
    /// multiplies in `1 + 0.1 ln(factor)`: `mscale(factor) / (1 + 0.1 ln
    /// factor)` times `rope.scaling.attn_factor`, in f32.
    pub attn_factor: f32,
    /// `rope.scaling.yarn_log_multiplier` (DeepSeek V2's, over 0.1), 0 for none.
    pub log_mul: f32,
}

impl YarnConfig {
    /// llama.cpp's derivation for a scaling `factor` (`1 / freq_scale`).
    /// `log_mul` is `rope.scaling.yarn_log_multiplier` (`mscale_all_dim`),
    /// 0 where the file has none; `own_mscale`: the model's `mscale` is
    /// `log_mul` too where that is not 1 (llama.cpp's rule for DeepSeek V2).
    fn new(
        original_context: usize,
        factor: f32,
        rope_attn_factor: f32,
        betas: (f32, f32),
        log_mul: f32,
        own_mscale: bool,
    ) -> Self {
        // llama.cpp's get_mscale; libllama is compiled without FMA, so
        // nothing here is fused.
        let mscale = |m: f32| if factor <= 1.0 { 1.0 } else { 0.1f32 * m * factor.ln() + 1.0 };
        let m = if own_mscale && log_mul != 1.0 { log_mul } else { 1.0 };
        let mut attn_factor = if log_mul != 0.0 { mscale(m) / mscale(log_mul) } else { mscale(1.0) };
        attn_factor *= 1.0 / (1.0 + 0.1f32 * factor.ln());
        attn_factor *= rope_attn_factor;
        Self { original_context, beta_fast: betas.0, beta_slow: betas.1, ext_factor: 1.0, attn_factor, log_mul }
    }
}

/// `ModelConfig::attention_temperature`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionTemperature {
    /// `attention.temperature_scale`.
    pub scale: f32,
    /// Positions per step (llama.cpp: YaRN's original context).
    pub floor: usize,
}

impl AttentionTemperature {
    /// The queries' factor at `position`, as llama.cpp's
    /// `llm_graph_input_attn_temp` computes it (the log in f64).
    pub fn factor(&self, position: usize) -> f32 {
        let steps = (position as f32 / self.floor as f32).floor() as f64;
        ((steps + 1.0).ln() * self.scale as f64 + 1.0) as f32
    }
}

/// One attention layer's heads (Gemma 4's full layers have fewer, larger
/// ones than its sliding layers; every other family's are all alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Dimensions of each head that RoPE rotates (0 on SmolLM3's unrotated layers).
    pub rope_dims: usize,
}

impl AttentionShape {
    pub fn q_width(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Keys (and values) of one position.
    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

/// The shape and numerics of one model, independent of its weights.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub context_length: usize,
    pub rms_eps: f64,
    pub rope_base: f32,
    /// Dimensions of each head that RoPE rotates (`rope.dimension_count`;
    /// Qwen 3.5 rotates 64 of 256), NeoX pairs within them.
    pub rope_dims: usize,
    /// Qwen 3.5's multi-section RoPE (`rope.dimension_sections`). Text
    /// positions are the same in every section, so it is plain RoPE except
    /// for pairs no section claims, which stay unrotated.
    pub rope_sections: Option<[usize; 4]>,
    /// Sliding layers' base (Gemma 3's `rope.local_freq_base`, gpt-oss's
    /// `rope.freq_base_swa`; else `rope_base`).
    pub rope_base_local: f32,
    /// `rope.scaling.factor`: positions are divided by it (linear and
    /// YaRN scaling), 1 for none.
    pub rope_linear_scale: f32,
    /// Whether sliding layers scale positions as full ones do (gpt-oss)
    /// rather than not at all (Gemma 3).
    pub rope_scaling_local: bool,
    /// YaRN (`rope.scaling.type = yarn`): the scaled angles are blended
    /// back towards the unscaled ones for the fast-turning pairs.
    pub rope_yarn: Option<YarnConfig>,
    /// What RoPE's cos and sin are multiplied by without YaRN
    /// (`rope.scaling.attn_factor`: Phi-3's LongRoPE; YaRN's own magnitude
    /// includes it).
    pub rope_attn_factor: f32,
    /// The context the model was trained at before any extension
    /// (`rope.scaling.original_context_length`, else `context_length`):
    /// longer sessions take LongRoPE's long factors.
    pub original_context: usize,
    /// `Some(w)`: layer i attends to the last w positions only, when `is_sliding(i)`.
    pub sliding_window: Option<usize>,
    /// Every `pattern`-th layer is full, the rest slide (0: all slide).
    pub sliding_window_pattern: usize,
    /// `Some` for a family with experts in place of the dense FFN.
    pub experts: Option<ExpertsConfig>,
    /// `Some` for a hybrid family: which layers are recurrent, and their shape.
    pub recurrent: Option<RecurrentConfig>,
    /// Each layer's heads. `n_heads`, `n_kv_heads`, `head_dim` and
    /// `rope_dims` above are the full layers' (the first layer's where all
    /// slide).
    pub attention: Vec<AttentionShape>,
    /// `kv_source[i]`: the layer whose keys and values layer `i` attends
    /// to: itself, or for Gemma 4's last `attention.shared_kv_layers`
    /// layers the last earlier layer of their kind (llama.cpp's rule).
    pub kv_source: Vec<usize>,
    /// Gemma 4's `attention.sliding_window_pattern`, a flag per layer, in
    /// place of `sliding_window_pattern`.
    pub sliding_layers: Option<Vec<bool>>,
    /// What attention scores are multiplied by; `None`: 1/√head_dim.
    pub attention_scale: Option<f32>,
    /// DeepSeek V2's multi-head latent attention, in every layer.
    pub mla: Option<MlaConfig>,
    /// Llama 4's attention temperature (Mistral 3): queries at position
    /// `p` are multiplied by `ln(⌊p / floor⌋ + 1) · scale + 1`, so that
    /// attention sharpens past the trained context.
    pub attention_temperature: Option<AttentionTemperature>,
    /// `final_logit_softcapping`: logits become `cap · tanh(logit / cap)`.
    pub final_logit_softcap: Option<f32>,
    /// `attn_logit_softcapping` (Gemma 2): each attention score becomes
    /// `cap · tanh(score / cap)` before the softmax.
    pub attention_softcap: Option<f32>,
    /// Granite's scales: the embeddings are multiplied by the first, each
    /// half's output by the second before it joins the residual, and the
    /// logits divided by the third.
    pub embedding_scale: Option<f32>,
    pub residual_scale: Option<f32>,
    pub logit_scale: Option<f32>,
    /// Gemma 4's per-layer token embeddings: values per layer
    /// (`embedding_length_per_layer_input`), 0 for none.
    pub per_layer_embd: usize,
}

impl ModelConfig {
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let arch_name = file.string("general.architecture")?.to_string();
        let architecture =
            Architecture::from_gguf_name(&arch_name).ok_or_else(|| EngineError::UnsupportedArchitecture {
                path: file.path().to_path_buf(),
                architecture: arch_name.clone(),
                supported: super::config::SUPPORTED_ARCHITECTURES,
            })?;
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
        let gemma4 = architecture == Architecture::Gemma4;
        let granite = matches!(architecture, Architecture::Granite | Architecture::GraniteMoe);
        // `attention.sliding_window_pattern`: every how many layers one is
        // full, or (Gemma 4, OLMo 3 as converted today) a flag per layer,
        // which llama.cpp takes for any family.
        let pattern_key = key("attention.sliding_window_pattern");
        let pattern_flags = gemma4
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
        let lfm2 = architecture == Architecture::Lfm2;
        let conv_layer = |i: usize| lfm2 && kv_counts[i] == 0;
        // The full layers' heads stand for the model where one number must.
        let first_full = sliding_layers
            .as_ref()
            .and_then(|f| f.iter().position(|&s| !s))
            .or_else(|| lfm2.then(|| (0..n_layers).find(|&i| !conv_layer(i))).flatten())
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
            if v as usize != head_dim && gemma4 {
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
        let default_base = if architecture == Architecture::Gemma3 { 1_000_000.0 } else { 10_000.0 };
        let rope_base = file.f32_opt(&key("rope.freq_base"))?.unwrap_or(default_base);
        let (sliding_window, sliding_window_pattern, rope_base_local) = match architecture {
            Architecture::Gemma3 => {
                let window = file.u32_opt(&key("attention.sliding_window"))?.map(|w| w as usize).filter(|&w| w > 0);
                let local = file.f32_opt(&key("rope.freq_base_swa"))?.unwrap_or(10_000.0);
                (window, pattern(6)?.max(1), local)
            }
            Architecture::Gemma2 => {
                // llama.cpp's defaults: a 4,096-position window on every other layer.
                let window = file.u32_opt(&key("attention.sliding_window"))?.unwrap_or(4096) as usize;
                let local = file.f32_opt(&key("rope.freq_base_swa"))?.unwrap_or(rope_base);
                (Some(window).filter(|&w| w > 0), pattern(2)?, local)
            }
            Architecture::Olmo2 => {
                // OLMo 3: a window where the file gives one, every fourth layer full.
                match file.u32_opt(&key("attention.sliding_window"))?.filter(|&w| w > 0) {
                    // llama.cpp's OLMo 2 graph rotates sliding layers with
                    // `rope.freq_base` whatever `rope.freq_base_swa` says.
                    Some(w) => (Some(w as usize), pattern(4)?, rope_base),
                    None => (None, 1, rope_base),
                }
            }
            Architecture::GptOss => {
                let window = file.u32(&key("attention.sliding_window"))? as usize;
                if window == 0 {
                    return Err(file.corrupt(format!("{} is 0", key("attention.sliding_window"))));
                }
                // llama.cpp's set_swa_pattern: every pattern-th layer full, 0 for none.
                let local = file.f32_opt(&key("rope.freq_base_swa"))?.unwrap_or(rope_base);
                (Some(window), pattern(2)?, local)
            }
            Architecture::Gemma4 => {
                let window = file.u32(&key("attention.sliding_window"))? as usize;
                if window == 0 {
                    return Err(file.corrupt(format!("{} is 0", key("attention.sliding_window"))));
                }
                // llama.cpp's default for `rope.freq_base_swa`.
                let local = file.f32_opt(&key("rope.freq_base_swa"))?.unwrap_or(10_000.0);
                (Some(window), 1, local)
            }
            _ => (None, 1, rope_base),
        };
        let (rope_linear_scale, rope_yarn) = rope_scaling(file, &key, context_length, architecture)?;
        let original_context =
            file.u32_opt(&key("rope.scaling.original_context_length"))?.map_or(context_length, |n| n as usize);
        let gemma4_experts = gemma4 && file.u32_opt(&key("expert_count"))?.unwrap_or(0) > 0;
        let experts = if architecture.has_experts() || gemma4_experts {
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
            let width_key = key(if architecture == Architecture::GraniteMoe {
                "feed_forward_length"
            } else {
                "expert_feed_forward_length"
            });
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
            let glm = matches!(architecture, Architecture::Glm4Moe | Architecture::Deepseek2);
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
            } else if architecture == Architecture::GraniteMoe {
                // Granite MoE Shared: an ungated shared expert where the file gives its width.
                file.u32_opt(&key("expert_shared_feed_forward_length"))?.filter(|&n| n > 0).map(|n| n as usize)
            } else if architecture == Architecture::Qwen35Moe {
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
            let gpt_oss = architecture == Architecture::GptOss;
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
                    let default = if architecture == Architecture::Glm4Moe || glm_flash { 2 } else { 1 };
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
                } else if gemma4 {
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
        let no_rope =
            architecture == Architecture::Granite && file.bool_opt(&key("rope.scaling.finetuned")) == Some(false);
        let unrotated =
            |i: usize| no_rope || architecture.no_rope_interval().is_some_and(|n| (i + 1).is_multiple_of(n));
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
        let (rope_sections, recurrent) = if architecture.is_hybrid() {
            (
                Some(rope_sections(file, &key("rope.dimension_sections"), head_dim)?),
                Some(recurrent(file, &key, blocks, n_layers)?),
            )
        } else if lfm2 {
            let kernel = file.u32(&key("shortconv.l_cache"))? as usize;
            if kernel < 2 {
                return Err(file.corrupt(format!("{} is {kernel}", key("shortconv.l_cache"))));
            }
            let layers: Vec<bool> = (0..n_layers).map(conv_layer).collect();
            (
                None,
                Some(RecurrentConfig {
                    conv_kernel: kernel,
                    head_dim: 0,
                    k_heads: 0,
                    v_heads: 0,
                    layers,
                    short_conv: Some(n_embd),
                }),
            )
        } else if matches!(architecture, Architecture::Qwen3Vl | Architecture::Qwen3VlMoe) {
            (Some(rope_sections(file, &key("rope.dimension_sections"), head_dim)?), None)
        } else {
            (None, None)
        };
        let mla = if architecture == Architecture::Deepseek2 {
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
            rope_scaling_local: architecture == Architecture::GptOss,
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
            rope_sections,
            recurrent,
            attention,
            kv_source,
            sliding_layers,
            // Gemma 4 scales neither queries nor scores; Gemma 2 27B (46
            // layers) and Gemma 3 27B (62) by the width per head rather than
            // the head size, as llama.cpp (after gemma_pytorch) does.
            attention_scale: if gemma4 {
                Some(1.0)
            } else if (architecture == Architecture::Gemma2 && n_layers == 46)
                || (architecture == Architecture::Gemma3 && n_layers == 62)
            {
                Some(1.0 / ((n_embd / n_heads) as f32).sqrt())
            } else if granite {
                file.f32_opt(&key("attention.scale"))?.filter(|&s| s != 0.0)
            } else if let Some(m) = &mla {
                // llama.cpp's: YaRN's magnitude undone, then `mscale²` over
                // the head's key size before absorption.
                let attn_factor = rope_yarn.map_or(1.0, |y| y.attn_factor);
                let ln = (rope_linear_scale).ln();
                let original = attn_factor * (1.0 + 0.1 * ln);
                let mscale = original * (1.0 + 0.1 * rope_yarn.map_or(0.0, |y| y.log_mul) * ln);
                Some(mscale * mscale / (m.head_k as f32).sqrt())
            } else {
                None
            },
            attention_temperature: attention_temperature(file, &key, architecture, original_context)?,
            mla,
            final_logit_softcap: match architecture {
                // llama.cpp's defaults: 30 for Gemma 2 and 4, none for Gemma 3.
                Architecture::Gemma2 | Architecture::Gemma4 => softcap(file, &key("final_logit_softcapping"), 30.0)?,
                Architecture::Gemma3 => softcap(file, &key("final_logit_softcapping"), 0.0)?,
                _ => None,
            },
            attention_softcap: match architecture {
                Architecture::Gemma2 => softcap(file, &key("attn_logit_softcapping"), 50.0)?,
                _ => None,
            },
            embedding_scale: if granite { scale(file, &key("embedding_scale"), false)? } else { None },
            residual_scale: if granite { scale(file, &key("residual_scale"), false)? } else { None },
            logit_scale: if granite { scale(file, &key("logit_scale"), true)? } else { None },
            per_layer_embd: if gemma4 { file.u32(&key("embedding_length_per_layer_input"))? as usize } else { 0 },
        })
    }

    /// Layer `layer`'s heads.
    pub fn attention_shape(&self, layer: usize) -> AttentionShape {
        self.attention[layer]
    }

    /// Whether layer `layer` writes keys and values of its own (not a
    /// recurrent layer, nor one that reads an earlier layer's).
    pub fn stores_kv(&self, layer: usize) -> bool {
        !self.is_recurrent(layer) && self.kv_source[layer] == layer
    }

    /// Keys one position of `layer` stores; 0 for a layer that stores none.
    pub fn kv_width(&self, layer: usize) -> usize {
        if self.stores_kv(layer) {
            self.attention[layer].kv_width()
        } else {
            0
        }
    }

    /// Values one position of `layer` stores: as many as keys, but none
    /// where the values are the keys' leading dimensions.
    pub fn value_width(&self, layer: usize) -> usize {
        if self.values_in_keys() {
            0
        } else {
            self.kv_width(layer)
        }
    }

    /// Whether attention's values are the first dimensions of its keys
    /// rather than values of their own: latent attention's are the latent
    /// (`MlaConfig::kv_lora_rank`), which the key holds beside the rotated
    /// part, so the cache keeps it once, as llama.cpp's does.
    pub fn values_in_keys(&self) -> bool {
        self.mla.is_some()
    }

    /// Whether layer `layer` is recurrent (a hybrid's Gated DeltaNet layer)
    /// rather than attention.
    pub fn is_recurrent(&self, layer: usize) -> bool {
        self.recurrent.as_ref().is_some_and(|r| r.layers[layer])
    }

    /// Every `pattern`-th layer is global and the rest local (Gemma 3:
    /// five of six local; gpt-oss: even layers local).
    pub fn is_sliding(&self, layer: usize) -> bool {
        if let Some(flags) = &self.sliding_layers {
            return self.sliding_window.is_some() && flags[layer];
        }
        self.sliding_window.is_some()
            && (self.sliding_window_pattern == 0 || !(layer + 1).is_multiple_of(self.sliding_window_pattern))
    }
}

/// The layer each layer attends with: itself, except Gemma 4's last
/// `attention.shared_kv_layers`, which read the last earlier layer of their
/// kind (llama.cpp: `n_kv − 2` for a sliding layer, `n_kv − 1` for a full
/// one, where `n_kv` layers keep their own). The layer read must be of the
/// same kind and shape, or the file is refused.
fn kv_sources(
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

/// `rope.scaling.*`: the factor positions are divided by, and YaRN's
/// parameters where the type is `yarn`, as llama.cpp reads them (the type
/// defaults to linear; a factor of 0 or none is no scaling).
fn rope_scaling(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
    context_length: usize,
    architecture: Architecture,
) -> Result<(f32, Option<YarnConfig>)> {
    let kind = file.string_opt(&key("rope.scaling.type")).unwrap_or("linear").to_string();
    let factor_key = key("rope.scaling.factor");
    let factor = match file.f32_opt(&factor_key)? {
        Some(f) => Some(f),
        None => file.f32_opt(&key("rope.scale_linear"))?,
    };
    let yarn = kind == "yarn";
    match factor {
        Some(f) if !f.is_finite() || f < 0.0 || (yarn && f == 0.0) => {
            return Err(file.corrupt(format!(
                "{factor_key} is {f}; {} scaling needs a positive factor",
                if yarn { "YaRN" } else { "RoPE" }
            )))
        }
        _ => {}
    }
    let factor = factor.filter(|&f| f != 0.0).unwrap_or(1.0);
    match kind.as_str() {
        "none" => Ok((1.0, None)),
        "linear" => Ok((factor, None)),
        "yarn" => {
            let original =
                file.u32_opt(&key("rope.scaling.original_context_length"))?.map_or(context_length, |n| n as usize);
            if original == 0 {
                return Err(file.corrupt(format!("{} is 0", key("rope.scaling.original_context_length"))));
            }
            let attn = file.f32_opt(&key("rope.scaling.attn_factor"))?.unwrap_or(1.0);
            let (mut betas, mut log_mul) = ((32.0, 1.0), 0.0);
            if architecture.reads_yarn_betas() {
                betas.0 = file.f32_opt(&key("rope.scaling.yarn_beta_fast"))?.unwrap_or(betas.0);
                betas.1 = file.f32_opt(&key("rope.scaling.yarn_beta_slow"))?.unwrap_or(betas.1);
            }
            if architecture.reads_yarn_log_multiplier() {
                log_mul = file.f32_opt(&key("rope.scaling.yarn_log_multiplier"))?.unwrap_or(0.0);
                if architecture == Architecture::Deepseek2 {
                    // llama.cpp cancels the 0.1 its converter wrote in.
                    log_mul /= 0.1;
                }
            }
            if !(betas.0.is_finite() && betas.1.is_finite() && log_mul.is_finite()) {
                return Err(file.corrupt(format!(
                    "YaRN's betas ({}, {}) or log multiplier ({log_mul}) are not finite",
                    betas.0, betas.1
                )));
            }
            // As llama.cpp: the factor it divides by is 1 / (1 / factor).
            let freq_scale = 1.0 / factor;
            let own_mscale = architecture == Architecture::Deepseek2;
            Ok((factor, Some(YarnConfig::new(original, 1.0 / freq_scale, attn, betas, log_mul, own_mscale))))
        }
        other => {
            Err(file.corrupt(format!("{} is {other:?}; Hearth knows none, linear and yarn", key("rope.scaling.type"))))
        }
    }
}

/// `attention.temperature_scale` (Mistral 3, and Mistral Large 3 in
/// DeepSeek's layout), its step llama.cpp's `n_ctx_orig_yarn`
/// (`original_context`) or, for DeepSeek's, `attention.temperature_length`.
fn attention_temperature(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
    architecture: Architecture,
    original_context: usize,
) -> Result<Option<AttentionTemperature>> {
    if !matches!(architecture, Architecture::Mistral3 | Architecture::Deepseek2) {
        return Ok(None);
    }
    let scale_key = key("attention.temperature_scale");
    match file.f32_opt(&scale_key)?.filter(|&s| s != 0.0) {
        None => Ok(None),
        Some(s) if !s.is_finite() => Err(file.corrupt(format!("{scale_key} is {s}"))),
        Some(scale) => {
            // DeepSeek's layout (Mistral Large 3) steps by its own key.
            let (floor, step_key) = if architecture == Architecture::Deepseek2 {
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

/// DeepSeek V2's attention shape: the latent and the rotated key are the
/// one KV head `key_length` wide; files without `key_length_mla` (the old
/// `attn_kv_b` ones) are refused, as llama.cpp asks them re-converted.
fn mla(
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

/// `rope.dimension_sections`: four counts of rotation pairs, the rotated
/// pairs taking them in turn.
fn rope_sections(file: &GgufFile, key: &str, head_dim: usize) -> Result<[usize; 4]> {
    let values = file.array(key)?;
    let counts: Vec<usize> = values
        .iter()
        .map(|v| match v {
            candle_core::quantized::gguf_file::Value::I32(x) if *x >= 0 => Some(*x as usize),
            candle_core::quantized::gguf_file::Value::U32(x) => Some(*x as usize),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(|| file.corrupt(format!("{key} holds something other than non-negative integers")))?;
    let Ok(sections) = <[usize; 4]>::try_from(counts.as_slice()) else {
        return Err(file.corrupt(format!("{key} has {} sections, expected 4", counts.len())));
    };
    // llama.cpp takes any sum from 1 to the head size: pair `i` belongs to
    // section `i % sum`, so sections shorter than the rotated pairs repeat.
    let sum = sections.iter().sum::<usize>();
    if sum == 0 || sum > head_dim {
        return Err(file.corrupt(format!(
            "{key} {sections:?} adds up to {sum} rotation pairs; heads of {head_dim} take 1 to {head_dim}"
        )));
    }
    if sections[..3].iter().all(|&s| s == 0) {
        // ggml's multi-section RoPE asserts on these.
        return Err(file.corrupt(format!("{key} {sections:?} gives no pair to time, height or width")));
    }
    Ok(sections)
}

/// A hybrid's recurrent layers: `attention.recurrent_layers` where the file
/// has it, else every layer but each `full_attention_interval`-th.
fn recurrent(file: &GgufFile, key: &dyn Fn(&str) -> String, blocks: usize, n_layers: usize) -> Result<RecurrentConfig> {
    let need = |k: &str| -> Result<usize> { Ok(file.u32(&key(k))? as usize) };
    let (conv_kernel, head_dim, k_heads, v_heads) =
        (need("ssm.conv_kernel")?, need("ssm.state_size")?, need("ssm.group_count")?, need("ssm.time_step_rank")?);
    let inner = need("ssm.inner_size")?;
    if conv_kernel < 2 || head_dim == 0 || k_heads == 0 || v_heads == 0 || v_heads % k_heads != 0 {
        return Err(file.corrupt(format!(
            "recurrent layers of kernel {conv_kernel}, heads of {head_dim}, {k_heads} key heads and {v_heads} value heads"
        )));
    }
    if inner != head_dim * v_heads {
        return Err(file.corrupt(format!(
            "{} is {inner}, but {} × {} is {}",
            key("ssm.inner_size"),
            key("ssm.state_size"),
            key("ssm.time_step_rank"),
            head_dim * v_heads
        )));
    }
    let layers = match file.metadata().get(&key("attention.recurrent_layers")) {
        Some(candle_core::quantized::gguf_file::Value::Array(flags)) => {
            let flags: Vec<bool> = flags
                .iter()
                .map(|v| match v {
                    candle_core::quantized::gguf_file::Value::Bool(b) => Some(*b),
                    _ => None,
                })
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    file.corrupt(format!("{} is not a list of booleans", key("attention.recurrent_layers")))
                })?;
            if flags.len() != blocks {
                return Err(file.corrupt(format!(
                    "{} has {} entries for {blocks} blocks",
                    key("attention.recurrent_layers"),
                    flags.len()
                )));
            }
            flags[..n_layers].to_vec()
        }
        _ => {
            let interval = file.u32_opt(&key("full_attention_interval"))?.unwrap_or(4) as usize;
            if interval == 0 {
                return Err(file.corrupt(format!("{} is 0", key("full_attention_interval"))));
            }
            (0..n_layers).map(|i| (i + 1) % interval != 0).collect()
        }
    };
    Ok(RecurrentConfig { conv_kernel, head_dim, k_heads, v_heads, layers, short_conv: None })
}
