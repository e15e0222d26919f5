//! The tiny models' specification: the family, its shape and its options.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::GgmlDType;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Family {
    Llama,
    /// LFM2: short gated convolutions on even layers (no KV heads), QK-normed
    /// attention on odd ones.
    Lfm2,
    /// DeepSeek V2's layout (GLM-4.7-Flash): latent attention, a dense
    /// first layer, sigmoid-routed experts beside a shared one.
    Deepseek2,
    /// GLM-4.5: biased QKV, partial RoPE, a dense first layer, then
    /// sigmoid-routed experts with a selection bias beside a shared expert.
    Glm4Moe,
    /// Granite 3: Llama with embedding, residual, attention and logit scales.
    Granite,
    /// Granite MoE Shared: Granite with experts and an ungated shared expert.
    GraniteMoe,
    /// OLMo 2: post-norms only, Q and K normed across heads (with
    /// `olmo3_window`, OLMo 3's sliding layers).
    Olmo2,
    /// Gemma 2: Gemma 3's norms and GELU without QK norms, soft-capped
    /// attention scores and logits, every other layer sliding.
    Gemma2,
    /// SmolLM3: Llama without RoPE on every fourth layer.
    SmolLm3,
    /// Mistral 3: Llama with YaRN's own betas and log multiplier, the
    /// attention temperature and an attention output bias.
    Mistral3,
    /// Phi-3: fused `attn_qkv` and gate-and-up `ffn_up`, partial NeoX RoPE
    /// (`rope_dims`) with LongRoPE's long and short factors and magnitude.
    Phi3,
    Qwen2,
    Qwen3,
    Gemma3,
    /// Qwen 3 with `experts` in place of the dense FFN.
    Qwen3Moe,
    /// Qwen3-VL's text model: Qwen 3 (or Qwen3-MoE) with multi-section RoPE.
    Qwen3Vl,
    Qwen3VlMoe,
    /// Qwen 3.5: Gated DeltaNet layers, every fourth gated attention.
    Qwen35,
    /// Qwen 3.5 with `experts` and a shared expert.
    Qwen35Moe,
    /// gpt-oss: `experts` with biases, attention with biases and sinks,
    /// even layers sliding over `sliding_window`, YaRN.
    GptOss,
    /// Gemma 4: written by `write_gemma4` from `TinySpec::gemma4`.
    Gemma4,
}

impl Family {
    pub fn is_hybrid(self) -> bool {
        matches!(self, Family::Qwen35 | Family::Qwen35Moe)
    }

    pub fn has_experts(self) -> bool {
        matches!(
            self,
            Family::Qwen3Moe
                | Family::Qwen3VlMoe
                | Family::Qwen35Moe
                | Family::GptOss
                | Family::GraniteMoe
                | Family::Glm4Moe
                | Family::Deepseek2
        )
    }
}

pub struct TinySpec {
    pub family: Family,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub context: usize,
    pub sliding_window: usize,
    pub sliding_pattern: usize,
    pub seed: u64,
    pub dtype: GgmlDType,
    /// For `Qwen3Moe`: experts per layer, used per token, and each one's width.
    pub experts: (usize, usize, usize),
    /// The experts' type (the rest is `dtype`).
    pub experts_dtype: GgmlDType,
    /// Gate and up in one `ffn_gate_up_exps` tensor (the same values).
    pub fused_gate_up: bool,
    /// Hybrids: the recurrent layers' head size, key heads and value heads,
    /// and every how many layers one is full attention.
    pub recurrent: (usize, usize, usize, usize),
    /// Hybrids: dimensions of each attention head that RoPE rotates.
    pub rope_dims: usize,
    /// YaRN's factor and original context (`rope.scaling.*`), where set.
    pub yarn: Option<(f32, u32)>,
    /// gpt-oss's real vocabulary and template (`o200k.rs`) in place of the
    /// tiny one.
    pub o200k: bool,
    /// Gemma 4's own choices.
    pub gemma4: Gemma4Spec,
    /// A chat template in place of the vocabulary's own.
    pub chat_template: Option<String>,
    /// Control tokens written in place of the tiny vocabulary's last
    /// filler tokens (a family's markup, such as Mistral's `[TOOL_CALLS]`).
    pub control_tokens: Vec<&'static str>,
    /// `rope.scaling.original_context_length` (Phi-3: sessions longer than
    /// this take LongRoPE's long factors).
    pub original_context: Option<u32>,
    /// OLMo 2 written as OLMo 3: `sliding_window` on three of every four layers.
    pub olmo3_window: bool,
    /// Metadata (keys without the architecture's prefix) written over the family's own.
    pub metadata: Vec<(&'static str, Value)>,
    /// Another type for the tensors this names (`None`: the spec's own).
    pub retype: Option<fn(&str) -> Option<GgmlDType>>,
    /// GLM-4.5: Q and K normed per head (`attn_q_norm`, `attn_k_norm`), as
    /// GLM-4.5's converter writes them where the model has `use_qk_norm`.
    pub qk_norm: bool,
    /// Qwen 3.5 and GLM-4.5: one multi-token-prediction block after the
    /// layers (`nextn_predict_layers` = 1), as their converters write it.
    pub mtp: bool,
    /// What the MTP head's output norm is multiplied by: above 1 its
    /// logits are sharper, so it is confident enough to draft.
    pub mtp_sharpness: f64,
}

/// What a Gemma 4 file adds to `TinySpec` (its `head_dim`, `n_kv_heads`
/// and `rope_dims` are the full layers').
#[derive(Clone, Debug)]
pub struct Gemma4Spec {
    /// `attention.sliding_window_pattern`.
    pub sliding: Vec<bool>,
    /// `attention.shared_kv_layers`.
    pub shared_kv_layers: usize,
    /// Layers without `attn_v` (their keys serve as values).
    pub no_v: Vec<usize>,
    pub head_dim_swa: usize,
    pub kv_heads_swa: usize,
    pub rope_dims_swa: usize,
    /// `embedding_length_per_layer_input` (0: none).
    pub per_layer: usize,
    /// Rotated pairs of a full head; the rest get llama.cpp's 1e30
    /// frequency factor (Gemma 4's proportional RoPE).
    pub rotated_pairs_full: usize,
    pub softcap: f32,
    /// Gemma 4's vocabulary (`gemma4_vocab.rs`, from the real Gemma 3
    /// file) and real template in place of the tiny ones.
    pub real_vocab: bool,
}

impl Gemma4Spec {
    /// E2B's structure, small: per-layer embeddings, the last two layers
    /// reading layers 2 and 3, layer 1 without `attn_v`.
    pub fn small() -> Self {
        Self {
            sliding: vec![true, false, true, false, true, false],
            shared_kv_layers: 2,
            no_v: vec![1],
            head_dim_swa: 16,
            kv_heads_swa: 2,
            rope_dims_swa: 16,
            per_layer: 32,
            rotated_pairs_full: 8,
            softcap: 30.0,
            real_vocab: false,
        }
    }
}

impl TinySpec {
    pub fn new(family: Family) -> Self {
        let hybrid = family.is_hybrid();
        Self {
            family,
            // A hybrid's layers alternate recurrent and attention here.
            n_layers: if hybrid { 4 } else { 2 },
            n_embd: 64,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 16,
            ffn: 128,
            context: 256,
            sliding_window: 8,
            sliding_pattern: 2,
            seed: 7,
            dtype: GgmlDType::Q8_0,
            experts: (8, 2, 64),
            experts_dtype: GgmlDType::Q8_0,
            fused_gate_up: false,
            recurrent: (64, 2, 4, if hybrid { 2 } else { 4 }),
            rope_dims: 8,
            // gpt-oss's own; Mistral 3's steps its attention temperature
            // every 32 positions here (16,384 in Ministral 3).
            yarn: match family {
                Family::GptOss => Some((32.0, 4096)),
                Family::Mistral3 => Some((4.0, 32)),
                _ => None,
            },
            o200k: false,
            gemma4: Gemma4Spec::small(),
            chat_template: None,
            control_tokens: Vec::new(),
            original_context: (family == Family::Phi3).then_some(32),
            olmo3_window: false,
            metadata: Vec::new(),
            retype: None,
            qk_norm: false,
            mtp: false,
            mtp_sharpness: 1.0,
        }
    }

    /// A Gemma 4 model like E2B (`moe`: false) or 26B-A4B (experts beside
    /// the dense MLP, all layers their own KV, no per-layer embeddings).
    pub fn gemma4(moe: bool) -> Self {
        let mut spec =
            Self { n_layers: 6, n_heads: 4, n_kv_heads: 1, head_dim: 32, context: 2048, ..Self::new(Family::Gemma4) };
        if moe {
            spec.n_layers = 4;
            spec.experts = (8, 2, 64);
            spec.gemma4 = Gemma4Spec {
                sliding: vec![true, true, false, true],
                shared_kv_layers: 0,
                no_v: vec![2],
                per_layer: 0,
                ..Gemma4Spec::small()
            };
        } else {
            spec.experts = (0, 0, 0);
        }
        spec
    }
}
