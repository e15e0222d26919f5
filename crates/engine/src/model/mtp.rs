//! The multi-token-prediction (MTP) head that Qwen 3.5/3.6's, GLM-4.5's
//! and GLM-4.7-Flash's converters write after the last layer
//! (`blk.{n_layer}.nextn.*`; what the files carry and how llama.cpp runs
//! it: `docs/research/mtp.md`), run as a drafter for speculative decoding
//! (`Speculation::Mtp`). Its weights load when a conversation first
//! drafts with it (`Model::mtp_head`): until then they take no memory.
//!
//! The head guesses the token after the next one. At position `p` it reads
//! the token there, `x_p`, and the model's final hidden state (after the
//! output norm) at `p − 1`:
//! `eh_proj · [enorm(embed(x_p)); hnorm(h_{p−1})]` goes through one
//! full-attention layer of its own, then the output norm
//! (`shared_head_norm`) and the output matrix give its logits.
//!
//! Its keys and values are layer `n_layers` of the conversation's cache
//! (`ModelConfig::mtp_layers`), kept once the cache starts the head
//! (`KvCache::start_mtp`, on an empty cache); from then on every pass of
//! the CPU's forward runs the head over that cache's rows after the
//! model's layers, reading the
//! hidden states one row behind (the previous pass's last one from the
//! cache, `KvCache::mtp_hidden`). So the head's cache covers the
//! conversation exactly as the model's does, and is cut back, branched,
//! saved and restored with it, with no pass of its own. A draft then runs
//! the head alone at the positions after the cache's end
//! (`Model::mtp_draft`), each step's normed output standing in for the
//! next step's hidden state; those positions are past the cache's length,
//! so the verify pass that follows writes them again.

use std::sync::Arc;

use super::{Block, Matrix, Norm};
use crate::cpu::QuantMatrix;

pub(super) struct MtpHead {
    /// `[n_embd, 2 · n_embd]`: the normed embedding's half first.
    pub(super) eh_proj: Matrix,
    pub(super) enorm: Norm,
    pub(super) hnorm: Norm,
    /// A layer as the model's attention layers are (Qwen 3.5's gated one,
    /// GLM's, DeepSeek's latent attention; a dense FFN or experts).
    pub(super) block: Block,
    /// `shared_head_norm`, else the model's output norm.
    pub(super) norm: Option<Norm>,
    /// `embed_tokens` and `shared_head_head` where the file has its own
    /// (Qwen's converters write neither: the head shares the model's).
    pub(super) embeddings: Option<Arc<QuantMatrix>>,
    pub(super) output: Option<Matrix>,
    /// Bytes one draft step reads: the layer, `eh_proj`, an output matrix.
    pub(super) bytes_per_step: usize,
}
