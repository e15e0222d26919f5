//! The MTP head (`model/mtp.rs`) on the CPU: over a pass's rows, as the
//! last step of every pass, and alone for a draft.

use super::{Buffers, KvRows};
use crate::cpu::vec_ops;
use crate::error::{EngineError, Result};
use crate::kv_cache::KvCache;
use crate::model::matmul::matmuls;
use crate::model::mtp::MtpHead;
use crate::model::Model;
use crate::worker_pool::WorkerPool;

impl Model {
    /// The head over `tokens` (one per row), each row with the model's
    /// final hidden state at the position before it (`previous`, a row
    /// each): its keys and values go into the head's layer of the caches
    /// `kv` names; the head's residual stream after its layer comes back.
    #[allow(clippy::too_many_arguments, reason = "one layer of the host pass, as `block_host`, and the head's inputs")]
    pub(super) fn mtp_rows(
        &self,
        pool: &WorkerPool,
        head: &MtpHead,
        tokens: &[u32],
        previous: &[f32],
        buf: &mut Buffers,
        rope: &(Vec<f32>, Vec<f32>),
        kv: &mut KvRows,
    ) -> Result<Vec<f32>> {
        let e = self.config.n_embd;
        let rows = tokens.len();
        let embedded = match &head.embeddings {
            Some(m) => {
                let mut x = vec![0f32; rows * e];
                for (row, &id) in x.chunks_exact_mut(e).zip(tokens) {
                    m.dequantize_row(id as usize, row);
                }
                x
            }
            None => self.embed(tokens),
        };
        let mut input = vec![0f32; rows * 2 * e];
        for ((both, emb), h) in
            input.chunks_exact_mut(2 * e).zip(embedded.chunks_exact(e)).zip(previous.chunks_exact(e))
        {
            let (first, second) = both.split_at_mut(e);
            vec_ops::rms_norm(first, emb, &head.enorm.host, head.enorm.eps);
            vec_ops::rms_norm(second, h, &head.hnorm.host, head.hnorm.eps);
        }
        let mut x = vec![0f32; rows * e];
        matmuls(pool, &input, rows, kv.sequence_rows(), &mut [(&head.eh_proj, &mut x)])?;
        self.block_host(pool, &head.block, self.config.n_layers, &mut x, buf, rope, &[], kv)?;
        Ok(x)
    }

    /// The head over a finished pass's rows (`hidden`: the model's final
    /// hidden state of each, normed), each row reading the one before it
    /// in its sequence, or for a sequence's first row the hidden state the
    /// cache kept from the pass before (zeros where it kept none).
    #[allow(clippy::too_many_arguments, reason = "as `mtp_rows`, with the pass's hidden states")]
    pub(super) fn mtp_after_pass(
        &self,
        pool: &WorkerPool,
        head: &MtpHead,
        tokens: &[u32],
        hidden: &[f32],
        buf: &mut Buffers,
        rope: &(Vec<f32>, Vec<f32>),
        kv: &mut KvRows,
    ) -> Result<()> {
        let e = self.config.n_embd;
        let mut previous = vec![0f32; hidden.len()];
        for (r, row) in previous.chunks_exact_mut(e).enumerate() {
            let before: Option<&[f32]> = match &*kv {
                KvRows::Batch { cache, seq, .. } if r % seq == 0 => cache.mtp_hidden(r / seq),
                KvRows::Caches { caches, owners, .. } if r == 0 || owners[r - 1] != owners[r] => {
                    caches[owners[r]].mtp_hidden(0)
                }
                _ => Some(&hidden[(r - 1) * e..r * e]),
            };
            if let Some(h) = before {
                row.copy_from_slice(h);
            }
        }
        self.mtp_rows(pool, head, tokens, &previous, buf, rope, kv)?;
        Ok(())
    }

    /// The head over a pass over several caches (`x`: the model's residual
    /// stream after its last layer), for the rows of the caches it runs for
    /// (`KvCache::mtp_live`); the normed hidden states of every row, where
    /// it ran for any.
    pub(super) fn mtp_after_caches_pass(
        &self,
        pool: &WorkerPool,
        tokens: &[u32],
        x: &[f32],
        rope: &(Vec<f32>, Vec<f32>),
        kv: &mut KvRows,
    ) -> Result<Option<Vec<f32>>> {
        let live: Vec<bool> = match &*kv {
            KvRows::Caches { caches, .. } => caches.iter().map(|c| c.mtp_live()).collect(),
            KvRows::Batch { .. } => unreachable!("a pass over caches"),
        };
        if !live.contains(&true) {
            return Ok(None);
        }
        let head = self.mtp_head()?;
        let hidden = self.final_norm(x);
        let e = self.config.n_embd;
        if !live.contains(&false) {
            let mut buf = Buffers::new(self, tokens.len());
            self.mtp_after_pass(pool, head, tokens, &hidden, &mut buf, rope, kv)?;
            return Ok(Some(hidden));
        }
        // Only the rows of the caches it runs for, with their RoPE rows.
        let KvRows::Caches { caches, positions, owners } = kv else { unreachable!("a pass over caches") };
        let rows: Vec<usize> = (0..owners.len()).filter(|&r| live[owners[r]]).collect();
        let mut index = vec![0; caches.len()];
        let mut running: Vec<&mut KvCache> = Vec::new();
        for (i, cache) in caches.iter_mut().enumerate().filter(|(i, _)| live[*i]) {
            index[i] = running.len();
            running.push(&mut **cache);
        }
        let half = rope.0.len() / owners.len();
        let pick = |v: &[f32], width: usize| -> Vec<f32> {
            rows.iter().flat_map(|&r| v[r * width..(r + 1) * width].iter().copied()).collect()
        };
        let sub_rope = (pick(&rope.0, half), pick(&rope.1, half));
        let sub_owners: Vec<usize> = rows.iter().map(|&r| index[owners[r]]).collect();
        let sub_tokens: Vec<u32> = rows.iter().map(|&r| tokens[r]).collect();
        let mut sub = KvRows::Caches {
            caches: &mut running,
            positions: rows.iter().map(|&r| positions[r]).collect(),
            owners: &sub_owners,
        };
        let mut buf = Buffers::new(self, rows.len());
        self.mtp_after_pass(pool, head, &sub_tokens, &pick(&hidden, e), &mut buf, &sub_rope, &mut sub)?;
        Ok(Some(hidden))
    }

    /// The normed final hidden state of each of `x`'s rows.
    pub(super) fn final_norm(&self, x: &[f32]) -> Vec<f32> {
        let e = self.config.n_embd;
        let mut out = vec![0f32; x.len()];
        for (o, row) in out.chunks_exact_mut(e).zip(x.chunks_exact(e)) {
            vec_ops::rms_norm(o, row, &self.norm.host, self.norm.eps);
        }
        out
    }

    /// Whether the model has an MTP head, which `Speculation::Mtp` drafts with.
    pub fn has_mtp_head(&self) -> bool {
        self.config.mtp_layers > 0
    }

    /// Whether the MTP head is loaded (the first conversation to draft with
    /// it loads it; until then its weights take no memory).
    pub fn mtp_head_loaded(&self) -> bool {
        self.mtp.get().is_some()
    }

    /// What one draft step of the MTP head costs, as a share of a decode
    /// step: the bytes it reads (its layer and the output matrix) over the
    /// model's.
    pub fn mtp_cost(&self) -> f64 {
        self.mtp.get().map_or(0, |h| h.bytes_per_step) as f64 / self.weight_bytes_per_token.max(1) as f64
    }

    /// A draft of up to `max` tokens from the MTP head, after `cache`
    /// (one sequence's) and its next token `token`, which the next pass
    /// will feed: each step's likeliest token while its probability is
    /// at least `min_probability`. The head writes keys and values past
    /// the cache's length only, which stays as it was.
    pub fn mtp_draft(&self, cache: &mut KvCache, token: u32, max: usize, min_probability: f32) -> Result<Vec<u32>> {
        let head = self.mtp_head()?;
        if cache.batch() != 1 || !cache.mtp_live() {
            return Err(EngineError::setting(
                "speculation",
                "an MTP draft is for a cache of one sequence whose head has read it (`KvCache::start_mtp`)",
            ));
        }
        let start = cache.len();
        let n = max.min(cache.max_len().saturating_sub(start));
        if n == 0 || start == 0 {
            return Ok(Vec::new());
        }
        self.check_tokens(&[vec![token]])?;
        cache.reserve(n, 1)?;
        let pool = WorkerPool::global();
        let e = self.config.n_embd;
        let mut hidden = cache.mtp_hidden(0).map_or_else(|| vec![0f32; e], <[f32]>::to_vec);
        let mut buf = Buffers::new(self, 1);
        let mut draft = Vec::with_capacity(n);
        let mut next = token;
        for pos in start..start + n {
            let logits = self.mtp_step(pool, head, cache, pos, next, &mut hidden, &mut buf)?;
            let (best, p) = crate::draft_model::most_likely(&logits);
            if p < min_probability {
                break;
            }
            draft.push(best);
            next = best;
        }
        pool.end_pass();
        Ok(draft)
    }

    /// The head's logits at the position after `cache` (one sequence's)
    /// for its next token `token`: the first step of a draft.
    pub fn mtp_step_logits(&self, cache: &mut KvCache, token: u32) -> Result<Vec<f32>> {
        let head = self.mtp_head()?;
        if cache.batch() != 1 || cache.is_empty() || cache.is_full() || !cache.mtp_live() {
            return Err(EngineError::setting(
                "cache",
                "one sequence's cache, neither empty nor full, its head started",
            ));
        }
        self.check_tokens(&[vec![token]])?;
        cache.reserve(1, 1)?;
        let pool = WorkerPool::global();
        let mut hidden = cache.mtp_hidden(0).map_or_else(|| vec![0f32; self.config.n_embd], <[f32]>::to_vec);
        let logits = self.mtp_step(pool, head, cache, cache.len(), token, &mut hidden, &mut Buffers::new(self, 1));
        pool.end_pass();
        logits
    }

    /// One draft step: the head at `pos` (past the cache's length, which
    /// `reserve` made room for) with `token` and the hidden state before
    /// it (`hidden`, which becomes this step's normed output); its logits.
    #[allow(clippy::too_many_arguments, reason = "the pass's pool and buffers beside the step's inputs")]
    fn mtp_step(
        &self,
        pool: &WorkerPool,
        head: &MtpHead,
        cache: &mut KvCache,
        pos: usize,
        token: u32,
        hidden: &mut [f32],
        buf: &mut Buffers,
    ) -> Result<Vec<f32>> {
        let tables = self.rope_for(cache.max_len()).tables(pos, 1);
        let mut caches = [cache];
        let mut kv = KvRows::Caches { caches: &mut caches, positions: vec![pos], owners: &[0] };
        let x = self.mtp_rows(pool, head, &[token], hidden, buf, &tables, &mut kv)?;
        self.mtp_logits(pool, head, &x, hidden)
    }

    /// The head's logits at each of `tokens`' positions after what `cache`
    /// holds of the head's layer, given the model's final hidden state
    /// at the position before each (`previous`, normed, a row each), as
    /// `[rows, vocab]`: how a test checks the head against a reference
    /// computed from the file alone. Only the head runs; the cache's
    /// length moves on as if the model had run too, so `cache` serves
    /// this alone (a hybrid's recurrent state has not moved with it).
    #[doc(hidden)]
    pub fn mtp_logits_at_every_position(
        &self,
        tokens: &[u32],
        previous: &[f32],
        cache: &mut KvCache,
    ) -> Result<Vec<f32>> {
        let head = self.mtp_head()?;
        let e = self.config.n_embd;
        if previous.len() != tokens.len() * e || tokens.is_empty() {
            return Err(EngineError::setting("previous", "one hidden state of the model's width per token"));
        }
        self.check_tokens(&[tokens.to_vec()])?;
        if !cache.start_mtp() {
            return Err(EngineError::setting("cache", "an empty cache, or one whose head has read it"));
        }
        cache.reserve(tokens.len(), 1)?;
        let pool = WorkerPool::global();
        let start = cache.len();
        let tables = self.rope_for(cache.max_len()).tables(start, tokens.len());
        let mut buf = Buffers::new(self, tokens.len());
        let mut kv = KvRows::Batch { cache, batch: 1, seq: tokens.len(), pos0: start };
        let x = self.mtp_rows(pool, head, tokens, previous, &mut buf, &tables, &mut kv)?;
        let mut logits = Vec::with_capacity(tokens.len() * self.vocab_size);
        let mut out = vec![0f32; e];
        for row in x.chunks_exact(e) {
            logits.extend(self.mtp_logits(pool, head, row, &mut out)?);
        }
        cache.advance(tokens.len());
        pool.end_pass();
        Ok(logits)
    }

    /// An error naming why `Speculation::Mtp` cannot draft with this
    /// model, if it cannot.
    pub fn check_mtp_head(&self) -> Result<()> {
        self.mtp_head().map(|_| ())
    }

    /// The MTP head, loaded now if it is not yet.
    pub(super) fn mtp_head(&self) -> Result<&MtpHead> {
        if let Some(head) = self.mtp.get() {
            return Ok(head);
        }
        if self.mtp_source.is_some() {
            // One load at a time: a head can be gigabytes.
            let _loading = self.mtp_loading.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(head) = self.mtp.get() {
                return Ok(head);
            }
            let head = self.load_mtp_head()?;
            return Ok(self.mtp.get_or_init(|| head));
        }
        Err(EngineError::setting(
            "speculation",
            "this model has no MTP head to draft with (Qwen 3.5/3.6, GLM-4.5 and GLM-4.7-Flash files carry one \
             unless converted without it; it runs on the CPU only)",
        ))
    }

    /// The head's logits for one row of its residual stream `x`; `normed`
    /// gets the row after the head's output norm (the next draft step's
    /// hidden state).
    fn mtp_logits(&self, pool: &WorkerPool, head: &MtpHead, x: &[f32], normed: &mut [f32]) -> Result<Vec<f32>> {
        let norm = head.norm.as_ref().unwrap_or(&self.norm);
        vec_ops::rms_norm(normed, x, &norm.host, norm.eps);
        let mut logits = vec![0f32; self.vocab_size];
        matmuls(pool, normed, 1, 1, &mut [(head.output.as_ref().unwrap_or(&self.output), &mut logits)])?;
        self.soft_cap(&mut logits);
        Ok(logits)
    }
}
