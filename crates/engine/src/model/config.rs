//! The shapes every family shares: what one model's forward pass needs to
//! know (`ModelConfig`), read from its file's metadata in `metadata.rs`
//! by its family's row in `families.rs`.

pub use super::families::{Architecture, SUPPORTED_ARCHITECTURES};

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
    pub(super) fn new(
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
    /// Qwen 3.5's multi-token-prediction head (`model/mtp.rs`): 1 where it
    /// runs, as layer `n_layers` of the per-layer fields above and of the
    /// KV cache (a full-attention layer after the last), 0 where it does
    /// not (no head in the file, another family, or the graph pass).
    pub mtp_layers: usize,
}

impl ModelConfig {
    /// Layers the KV cache keeps: the model's, then the MTP head's.
    pub fn cache_layers(&self) -> usize {
        self.n_layers + self.mtp_layers
    }

    /// This config without its MTP head, for a pass that does not run it.
    pub(crate) fn without_mtp(mut self) -> Self {
        let n = self.n_layers;
        if self.mtp_layers > 0 {
            self.attention.truncate(n);
            self.kv_source.truncate(n);
            if let Some(r) = &mut self.recurrent {
                r.layers.truncate(n);
            }
            self.mtp_layers = 0;
        }
        self
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
