//! DeepSeek V2's multi-head latent attention (`MlaConfig`): a layer's
//! weights, loaded from the tensors llama.cpp's converter writes.
//!
//! Each position keeps a `kv_lora_rank` latent (normed) and one rotated key
//! of `rope_dims` shared by every head, cached as one KV head of their
//! concatenation; the values are the latent itself. A head's query is its
//! unrotated part taken into the latent's space by `attn_k_b` beside its
//! rotated part; its output, a mix of latents, leaves through `attn_v_b`.
//! The passes themselves are `Model::mla_host` (`host.rs`), which shares
//! the cache writes and the attention with every other layer, and
//! `Model::mla_graph` (`graph.rs`).

use super::{check_shape, Linear, Matrix, Norm};
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::model::config::MlaConfig;

/// The model loader's ways to read a norm, a matrix of a given shape, and
/// a tensor cut into matrices of so many rows each.
type LoadNorm<'a> = &'a dyn Fn(&mut GgufFile, &str) -> Result<Norm>;
type LoadMatrix<'a> = &'a dyn Fn(&mut GgufFile, &str, usize, usize) -> Result<Matrix>;
type LoadParts<'a> = &'a dyn Fn(&mut GgufFile, &str, &[usize]) -> Result<Vec<Matrix>>;

/// One layer's latent attention.
pub(super) struct Mla {
    pub query: Query,
    /// `attn_kv_a_mqa`: the latent, then the key to rotate.
    pub kv_a: Matrix,
    /// `attn_kv_a_norm`, over the latent.
    pub kv_a_norm: Norm,
    /// `attn_k_b`, per head: `kv_lora_rank × nope`.
    pub k_b: Vec<Matrix>,
    /// `attn_v_b`, per head: `head_v × kv_lora_rank`.
    pub v_b: Vec<Matrix>,
    pub wo: Linear,
}

/// How a layer makes its queries (`n_heads × head_k` per row).
pub(super) enum Query {
    /// `attn_q` (the lite models).
    Direct(Matrix),
    /// `attn_q_b · norm(attn_q_a · x)`.
    LowRank { a: Matrix, norm: Norm, b: Matrix },
}

impl Mla {
    /// Layer `p`'s latent attention of `n_heads` heads, each matrix through
    /// `matmul` (which checks its shape and counts its bytes) and the
    /// per-head ones through `parts`.
    #[allow(
        clippy::too_many_arguments,
        reason = "a layer loader's shared inputs (file, tensor prefix, loaders) beside the latent's shape"
    )]
    pub(super) fn load(
        file: &mut GgufFile,
        p: &str,
        config: &MlaConfig,
        n_heads: usize,
        n_embd: usize,
        rope_dims: usize,
        norm: LoadNorm,
        matmul: LoadMatrix,
        parts: LoadParts,
    ) -> Result<Self> {
        let (kvr, nope, hv) = (config.kv_lora_rank, config.nope(rope_dims), config.head_v);
        let query = match config.q_lora_rank {
            Some(r) => Query::LowRank {
                a: matmul(file, &format!("{p}.attn_q_a.weight"), r, n_embd)?,
                norm: norm(file, &format!("{p}.attn_q_a_norm.weight"))?,
                b: matmul(file, &format!("{p}.attn_q_b.weight"), n_heads * config.head_k, r)?,
            },
            None => Query::Direct(matmul(file, &format!("{p}.attn_q.weight"), n_heads * config.head_k, n_embd)?),
        };
        let per_head = |file: &mut GgufFile, name: &str, rows: usize, cols: usize| -> Result<Vec<Matrix>> {
            let name = format!("{p}.{name}.weight");
            check_shape(file, &name, &[n_heads, rows, cols])?;
            parts(file, &name, &vec![rows; n_heads])
        };
        Ok(Self {
            query,
            kv_a: matmul(file, &format!("{p}.attn_kv_a_mqa.weight"), kvr + rope_dims, n_embd)?,
            kv_a_norm: norm(file, &format!("{p}.attn_kv_a_norm.weight"))?,
            k_b: per_head(file, "attn_k_b", kvr, nope)?,
            v_b: per_head(file, "attn_v_b", hv, kvr)?,
            wo: Linear { weight: matmul(file, &format!("{p}.attn_output.weight"), n_embd, n_heads * hv)?, bias: None },
        })
    }
}
