//! What a model file is, read from its header alone: no tensor data is read,
//! so a library of large files is listed in milliseconds.

use std::path::Path;

use serde::Serialize;

use crate::error::Result;
use crate::gguf::GgufFile;
use crate::model::Architecture;

/// A model file's header facts, and what it needs in memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelFacts {
    /// `general.architecture`, as the file spells it.
    pub architecture: String,
    /// Whether Hearth runs this architecture.
    pub supported: bool,
    /// `general.name`, if the file has one.
    pub name: Option<String>,
    /// Every tensor's element count, summed (tied embeddings count once).
    pub parameter_count: u64,
    /// The parameters one token runs: all but the experts it does not pick
    /// (equal to `parameter_count` without experts).
    pub active_parameter_count: u64,
    /// Experts per layer and used per token, for a mixture of experts.
    pub experts: Option<ExpertCounts>,
    /// Gemma 4's per-layer token embeddings (`per_layer_token_embd`): a
    /// table read a row per token from the file, never loaded. Google
    /// counts a model's "effective" parameters without it (E2B: 2B of 5B).
    pub per_layer_embedding_parameters: u64,
    pub per_layer_embedding_bytes: u64,
    /// The weight bytes one decode step reads: every matrix but the token
    /// embeddings (one row each), and of the experts only those it picks.
    pub bytes_per_token: u64,
    /// The bytes of every tensor, summed: what the weights take in memory.
    pub tensor_bytes: u64,
    /// Tensor bytes by type, largest first.
    pub quant_types: Vec<QuantShare>,
    /// `<arch>.context_length` (4096 where the file does not say, as the engine assumes).
    pub context_length: u32,
    pub file_size: u64,
    pub n_layers: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub embedding_length: u32,
    /// The KV cache's bytes per position: f16 keys and values of every
    /// attention layer that keeps its own (sliding-window layers keep every
    /// position too; Gemma 4's shared layers none), each at its head size.
    pub kv_bytes_per_token: u64,
    /// A hybrid's (Qwen 3.5's) recurrent state: the bytes of one copy. A
    /// conversation holds it and its checkpoints; 0 for a transformer.
    pub recurrent_state_bytes: u64,
}

/// A mixture of experts' size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpertCounts {
    pub count: u32,
    pub used: u32,
}

/// One tensor type's part of a file's tensor bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuantShare {
    /// GGML's name for the type (`Q4_1`, `F32`, …).
    pub name: String,
    pub bytes: u64,
    /// `bytes` over the file's tensor bytes, 0 to 1.
    pub fraction: f64,
    pub tensors: u32,
}

impl ModelFacts {
    /// Reads `path`'s header (never its weights). A damaged or truncated
    /// file gives the loader's own error.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let file = GgufFile::open(path.as_ref())?;
        Self::from_file(&file)
    }

    pub fn from_file(file: &GgufFile) -> Result<Self> {
        // Every part of a split model; what `read_header` was told for a remote one.
        let file_size = file.total_len();
        let architecture = file.string("general.architecture")?.to_string();
        let key = |k: &str| format!("{architecture}.{k}");
        // The same derivation as `ModelConfig::from_gguf`, without refusing
        // architectures Hearth does not run.
        let embedding_length = file.u32(&key("embedding_length"))?;
        let n_layers = file.u32(&key("block_count"))?;
        // A family Hearth runs is read as it runs it (heads per layer,
        // shared and recurrent layers); any other from its plain keys.
        let config = match Architecture::from_gguf_name(&architecture) {
            Some(_) => crate::model::ModelConfig::from_gguf(file).ok(),
            None => None,
        };
        let (n_heads, n_kv_heads, head_dim) = match &config {
            Some(c) => (c.n_heads as u32, c.n_kv_heads as u32, c.head_dim as u32),
            None => {
                let n_heads = file.u32(&key("attention.head_count"))?;
                let n_kv_heads = file.u32_opt(&key("attention.head_count_kv"))?.unwrap_or(n_heads);
                let head_dim = match file.u32_opt(&key("attention.key_length"))? {
                    Some(d) => d,
                    None if n_heads > 0 && embedding_length % n_heads == 0 => embedding_length / n_heads,
                    None => return Err(file.corrupt("head size is not given and does not divide the embedding")),
                };
                (n_heads, n_kv_heads, head_dim)
            }
        };
        let context_length = file.u32_opt(&key("context_length"))?.unwrap_or(4096);

        let experts = match (file.u32_opt(&key("expert_count"))?, file.u32_opt(&key("expert_used_count"))?) {
            (Some(count), Some(used)) if count > 0 && used <= count => Some(ExpertCounts { count, used }),
            _ => None,
        };
        // An expert tensor (`ffn_*_exps`) is read at `used / count` per token.
        let active_share = |name: &str, n: u64| match experts {
            Some(e) if name.contains("_exps") => n / e.count as u64 * e.used as u64,
            _ => n,
        };
        let tied = !file.has_tensor("output.weight");
        let (mut per_layer_embedding_parameters, mut per_layer_embedding_bytes) = (0u64, 0u64);
        let mut parameter_count = 0u64;
        let mut active_parameter_count = 0u64;
        let mut bytes_per_token = 0u64;
        let mut tensor_bytes = 0u64;
        let mut by_type: Vec<QuantShare> = Vec::new();
        for name in file.tensor_names() {
            let info = file.tensor_info(name).expect("a listed tensor");
            // Each dimension and byte count was checked against the file's length.
            // Saturating: a hostile header may point many tensors at the same bytes.
            let elements = info.dims.iter().map(|&d| d as u64).product::<u64>();
            parameter_count = parameter_count.saturating_add(elements);
            if name == "per_layer_token_embd.weight" {
                // A row per token, read from the file; not in memory.
                per_layer_embedding_parameters = elements;
                per_layer_embedding_bytes = info.bytes;
                continue;
            }
            active_parameter_count = active_parameter_count.saturating_add(active_share(name, elements));
            if name != "token_embd.weight" || tied {
                bytes_per_token = bytes_per_token.saturating_add(active_share(name, info.bytes));
            }
            tensor_bytes = tensor_bytes.saturating_add(info.bytes);
            let type_name = info.dtype.name();
            match by_type.iter_mut().find(|s| s.name == type_name) {
                Some(s) => {
                    s.bytes = s.bytes.saturating_add(info.bytes);
                    s.tensors += 1;
                }
                None => by_type.push(QuantShare {
                    name: type_name.to_string(),
                    bytes: info.bytes,
                    fraction: 0.0,
                    tensors: 1,
                }),
            }
        }
        for s in &mut by_type {
            s.fraction = if tensor_bytes == 0 { 0.0 } else { s.bytes as f64 / tensor_bytes as f64 };
        }
        by_type.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));

        // A hybrid's recurrent layers keep a state in place of keys and values.
        let recurrent = config.as_ref().and_then(|c| c.recurrent.clone());
        let recurrent_layers = recurrent.as_ref().map_or(0, |r| r.layers.iter().filter(|&&l| l).count() as u32);
        let recurrent_state_bytes = recurrent.as_ref().map_or(0, |r| {
            (recurrent_layers as u64).saturating_mul(((r.conv_state_len() + r.delta_state_len()) * 4) as u64)
        });
        // A hybrid's multi-token-prediction blocks (after its trunk) keep no
        // cache unless a chat drafts with them.
        let attention_layers = match &recurrent {
            Some(r) => (r.layers.len() as u32).saturating_sub(recurrent_layers),
            None => n_layers,
        };
        let kv_bytes_per_token = match &config {
            Some(c) => (0..c.n_layers).map(|i| 2 * (c.kv_width(i) + c.value_width(i)) as u64).sum(),
            None => {
                [attention_layers, n_kv_heads, head_dim].iter().fold(2 * 2u64, |acc, &n| acc.saturating_mul(n as u64))
            }
        };
        Ok(Self {
            supported: Architecture::from_gguf_name(&architecture).is_some(),
            name: file.string_opt("general.name").map(str::to_string),
            architecture,
            parameter_count,
            active_parameter_count,
            experts,
            per_layer_embedding_parameters,
            per_layer_embedding_bytes,
            bytes_per_token,
            tensor_bytes,
            quant_types: by_type,
            context_length,
            file_size,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            embedding_length,
            kv_bytes_per_token,
            recurrent_state_bytes,
        })
    }

    /// The KV cache's bytes at `context` positions (f16 keys and values).
    pub fn kv_bytes(&self, context: u32) -> u64 {
        self.kv_bytes_per_token.saturating_mul(context as u64)
    }

    /// A hybrid's recurrent state at `context` positions: the state and the
    /// checkpoints a conversation that long keeps (one per prompt chunk, up
    /// to the cap).
    pub fn recurrent_bytes(&self, context: u32) -> u64 {
        let checkpoints =
            (context as usize / crate::model::PREFILL_CHUNK + 1).min(crate::recurrent_state::MAX_CHECKPOINTS);
        self.recurrent_state_bytes.saturating_mul(1 + checkpoints as u64)
    }

    /// An estimate of the memory a conversation of `context` positions
    /// needs: the weights loaded (not Gemma 4's per-layer table, read from
    /// the file) plus a full KV cache (and a hybrid's state and checkpoints).
    pub fn memory_estimate(&self, context: u32) -> u64 {
        self.tensor_bytes
            .saturating_sub(self.per_layer_embedding_bytes)
            .saturating_add(self.kv_bytes(context))
            .saturating_add(self.recurrent_bytes(context))
    }
}
