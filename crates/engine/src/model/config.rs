//! What distinguishes one decoder-only family from another, read from GGUF metadata.

use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;

/// The model families Hearth can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3, Mistral, SmolLM: GGUF stores Q/K permuted for interleaved RoPE.
    Llama,
    /// Qwen 2 and 2.5: biases on Q/K/V, NeoX RoPE.
    Qwen2,
    /// Qwen 3: per-head RMS norms on Q and K, NeoX RoPE.
    Qwen3,
    /// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder): Qwen 3 with experts in
    /// place of the dense FFN.
    Qwen3Moe,
    /// Gemma 3: sandwich norms, GELU, scaled embeddings, sliding-window layers.
    Gemma3,
}

pub const SUPPORTED_ARCHITECTURES: &str = "llama, qwen2, qwen3, qwen3moe, gemma3";

impl Architecture {
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        match name {
            "llama" | "mistral" => Some(Self::Llama),
            "qwen2" => Some(Self::Qwen2),
            "qwen3" => Some(Self::Qwen3),
            "qwen3moe" => Some(Self::Qwen3Moe),
            "gemma3" => Some(Self::Gemma3),
            _ => None,
        }
    }

    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Qwen3Moe => "qwen3moe",
            Self::Gemma3 => "gemma3",
        }
    }

    /// GGUF's llama tensors are permuted so that rotation pairs are adjacent.
    pub(crate) fn interleaved_rope(self) -> bool {
        matches!(self, Self::Llama)
    }

    /// Gemma scales the queries by 1/√head_dim before attention rather than
    /// the scores after it; with f16 keys the queries are rounded after the
    /// scaling, so where it happens shows in the last bits.
    pub(crate) fn scales_queries(self) -> bool {
        matches!(self, Self::Gemma3)
    }

    /// Whether the FFN is a mixture of experts.
    pub(crate) fn has_experts(self) -> bool {
        matches!(self, Self::Qwen3Moe)
    }
}

/// How a router turns its logits into expert weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    /// A softmax over every expert, then the top k (Qwen, Mixtral).
    Softmax,
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
    /// The k weights are divided by their sum (Qwen3-MoE: always).
    pub normalize_weights: bool,
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
    /// Gemma 3's sliding layers use their own base.
    pub rope_base_local: f32,
    /// Linear position scaling for global layers (Gemma 3 4B+).
    pub rope_linear_scale: f32,
    /// `Some(w)`: layer i attends to the last w positions only, when `is_sliding(i)`.
    pub sliding_window: Option<usize>,
    pub sliding_window_pattern: usize,
    /// `Some` for a family with experts in place of the dense FFN.
    pub experts: Option<ExpertsConfig>,
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
        let n_heads = file.u32(&key("attention.head_count"))? as usize;
        let n_kv_heads = file.u32_opt(&key("attention.head_count_kv"))?.map_or(n_heads, |v| v as usize);
        let n_layers = file.u32(&key("block_count"))? as usize;
        if n_heads == 0 || n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) || n_layers == 0 {
            return Err(
                file.corrupt(format!("bad attention shape: {n_heads} heads, {n_kv_heads} KV heads, {n_layers} layers"))
            );
        }
        let head_dim = match file.u32_opt(&key("attention.key_length"))? {
            Some(d) => d as usize,
            None if n_embd.is_multiple_of(n_heads) => n_embd / n_heads,
            None => return Err(file.corrupt("head size is not given and does not divide the embedding")),
        };
        if head_dim % 2 != 0 {
            return Err(file.corrupt(format!("head size {head_dim} is odd")));
        }
        let context_length = file.u32_opt(&key("context_length"))?.unwrap_or(4096) as usize;
        let rms_eps = file.f32_opt(&key("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-6) as f64;
        let default_base = if architecture == Architecture::Gemma3 { 1_000_000.0 } else { 10_000.0 };
        let rope_base = file.f32_opt(&key("rope.freq_base"))?.unwrap_or(default_base);
        let (sliding_window, sliding_window_pattern, rope_base_local, rope_linear_scale) =
            if architecture == Architecture::Gemma3 {
                let window = file.u32_opt(&key("attention.sliding_window"))?.map(|w| w as usize);
                let pattern = file.u32_opt(&key("attention.sliding_window_type"))?.unwrap_or(6) as usize;
                let local = file.f32_opt(&key("rope.local_freq_base"))?.unwrap_or(10_000.0);
                let scale = file.f32_opt(&key("rope.scaling.factor"))?.unwrap_or(1.0);
                (window, pattern.max(1), local, scale)
            } else {
                (None, 1, rope_base, 1.0)
            };
        let experts = if architecture.has_experts() {
            let count = file.u32(&key("expert_count"))? as usize;
            let used = file.u32(&key("expert_used_count"))? as usize;
            if count == 0 || used == 0 || used > count {
                return Err(file.corrupt(format!(
                    "{}: {used} experts used per token out of {count} ({})",
                    key("expert_used_count"),
                    key("expert_count")
                )));
            }
            let ffn_len = file.u32(&key("expert_feed_forward_length"))? as usize;
            Some(ExpertsConfig { count, used, ffn_len, gating: Gating::Softmax, normalize_weights: true })
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
            sliding_window,
            sliding_window_pattern,
            experts,
        })
    }

    /// Gemma 3 makes every `pattern`-th layer global and the rest local.
    pub fn is_sliding(&self, layer: usize) -> bool {
        self.sliding_window.is_some() && !(layer + 1).is_multiple_of(self.sliding_window_pattern)
    }
}
