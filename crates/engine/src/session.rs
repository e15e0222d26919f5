//! A conversation's multi-turn state: its KV cache and the exact tokens in it.
//!
//! Each turn feeds only what is new since the cache: the longest common token
//! prefix with the new prompt is kept, the rest of the cache is truncated
//! (the history was edited or regenerated), and only the remainder is prefilled.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{EngineError, Result};
use crate::kv_cache::KvCache;
use crate::model::{Model, PREFILL_CHUNK};
use crate::passes::{Pass, Passes};

/// One conversation's cache. Clone it to fork a branch: clones share the
/// cache's memory until one of them writes (never the weights, which the
/// `Model` holds).
#[derive(Clone)]
pub struct Session {
    cache: KvCache,
    /// The tokens whose keys and values the cache holds, in order.
    tokens: Vec<u32>,
    /// The forward passes that computed them (what an exact replay re-runs).
    passes: Passes,
    /// The logits after the first `.0` tokens, from the prefill that ran
    /// them. A turn whose prompt is exactly those tokens (a regeneration)
    /// starts from them rather than re-running the last token on its own,
    /// which would batch it differently, move the last bits, and so change
    /// what the same seed samples.
    prefill_logits: Option<(usize, Arc<Vec<f32>>)>,
    /// The draft model's own session for this conversation
    /// (`draft_model.rs`), and the draft model's file: never part of what
    /// this cache computes, only what lets the next turn draft at once.
    draft: Option<(PathBuf, Box<Session>)>,
}

impl Session {
    pub fn new(model: &Model, max_len: usize) -> Self {
        Self {
            cache: model.new_cache(max_len),
            tokens: Vec::new(),
            passes: Passes::default(),
            prefill_logits: None,
            draft: None,
        }
    }

    /// A session around a cache restored from disk, covering `tokens`,
    /// computed by `passes`.
    pub fn from_parts(cache: KvCache, tokens: Vec<u32>, passes: Passes) -> Result<Self> {
        if cache.len() != tokens.len() || cache.batch() != 1 || passes.len() != tokens.len() {
            return Err(EngineError::CorruptCache(format!(
                "cache holds {} positions, computed by passes over {}, but {} tokens were given",
                cache.len(),
                passes.len(),
                tokens.len()
            )));
        }
        Ok(Self { cache, tokens, passes, prefill_logits: None, draft: None })
    }

    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// Tokens the cache covers.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The forward passes that computed the cache.
    pub fn passes(&self) -> &Passes {
        &self.passes
    }

    /// The memory its cache holds, and its draft session's.
    pub fn allocated_bytes(&self) -> usize {
        self.cache.allocated_bytes() + self.draft.as_ref().map_or(0, |(_, d)| d.allocated_bytes())
    }

    /// The draft model's session kept with this one, and the draft model's file.
    pub fn draft(&self) -> Option<(&Path, &Session)> {
        self.draft.as_ref().map(|(path, s)| (path.as_path(), &**s))
    }

    /// Keeps `session`, the draft model `path`'s, with this one (a saved
    /// one restored), in place of any other.
    pub fn set_draft(&mut self, path: &Path, session: Session) {
        self.draft = Some((path.to_path_buf(), Box::new(session)));
    }

    /// The draft session kept with this one, if it is draft model `path`'s;
    /// another model's is dropped.
    pub(crate) fn take_draft(&mut self, path: &Path) -> Option<Session> {
        self.draft.take().filter(|(p, _)| p == path).map(|(_, s)| *s)
    }

    pub fn context_length(&self) -> usize {
        self.cache.max_len()
    }

    /// Starts the model's MTP head for this conversation (`KvCache::start_mtp`).
    /// A cache that has read tokens without it starts over, so the next
    /// turn reads the conversation again, once; its draft session stays.
    pub(crate) fn start_mtp(&mut self, model: &Model) {
        if !self.cache.start_mtp() {
            self.cache = model.new_cache(self.cache.max_len());
            self.cache.start_mtp();
            self.tokens.clear();
            self.passes = Passes::default();
            self.prefill_logits = None;
        }
    }

    /// Forgets everything from token `len` on. A hybrid model's cache goes
    /// back to its latest checkpoint at or before `len`, so the session may
    /// then cover fewer tokens: read `tokens()` after.
    pub fn truncate(&mut self, len: usize) {
        self.cache.truncate(len);
        let len = len.min(self.cache.len());
        self.tokens.truncate(len);
        self.passes.truncate(len);
        if self.prefill_logits.as_ref().is_some_and(|(n, _)| len < *n) {
            self.prefill_logits = None;
        }
    }

    /// Brings the cache to cover `prompt`, reusing the longest common prefix,
    /// and returns how many tokens were run and the logits after the last one.
    pub fn prefill(&mut self, model: &Model, prompt: &[u32]) -> Result<(usize, Vec<f32>)> {
        let common = match self.prefill_begin(prompt)? {
            PrefillStart::Cached(logits) => return Ok((0, logits)),
            PrefillStart::From(common) => common,
        };
        loop {
            if let Some(logits) = self.prefill_rows(model, prompt, PREFILL_CHUNK, &|| false)? {
                return Ok((prompt.len() - common, logits));
            }
        }
    }

    /// The first step of a prefill in steps: the logits after `prompt` when
    /// the cache already has them (nothing to run), else the position the
    /// prefill starts from, to which the cache is cut back (the longest
    /// common prefix, less at least the last token, whose logits are needed).
    pub fn prefill_begin(&mut self, prompt: &[u32]) -> Result<PrefillStart> {
        if prompt.is_empty() {
            return Err(EngineError::setting("prompt", "the prompt is empty"));
        }
        if prompt.len() > self.cache.max_len() {
            return Err(EngineError::PromptTooLong { tokens: prompt.len(), context: self.cache.max_len() });
        }
        let shared = self.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        if let Some((_, logits)) =
            self.prefill_logits.clone().filter(|(n, _)| shared == prompt.len() && *n == prompt.len())
        {
            self.truncate(prompt.len());
            // A hybrid cache may have had to go back further.
            if self.tokens.len() == prompt.len() {
                return Ok(PrefillStart::Cached(logits.to_vec()));
            }
        }
        let common = shared.min(prompt.len() - 1).min(self.tokens.len());
        self.truncate(common);
        Ok(PrefillStart::From(self.tokens.len()))
    }

    /// Runs the next chunk (at most `rows` tokens; `PREFILL_CHUNK`,
    /// llama.cpp's batch, unless a scheduler asks for fewer) of `prompt`
    /// after what the cache covers, which must be a prefix of it
    /// (`prefill_begin` made it one). The logits after the prompt once it is
    /// all covered. `stop`, asked between the chunk's layers, ends it with
    /// [`EngineError::Stopped`], the cache as it was before the chunk (see
    /// [`Model::forward_stoppable`]).
    pub fn prefill_rows(
        &mut self,
        model: &Model,
        prompt: &[u32],
        rows: usize,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<Vec<f32>>> {
        let from = self.tokens.len();
        debug_assert!(prompt.starts_with(&self.tokens));
        let chunk = &prompt[from..(from + rows.max(1)).min(prompt.len())];
        if chunk.is_empty() {
            return Err(EngineError::setting("prompt", "the prompt is already in the cache"));
        }
        let logits = self.run_pass(model, chunk.to_vec(), chunk.len(), stop)?;
        if self.tokens.len() < prompt.len() {
            return Ok(None);
        }
        // The end of a prompt (a user's message) is where an edit or a
        // regeneration starts from, however short its last chunk.
        self.cache.checkpoint();
        let logits = logits.to_vec2::<f32>()?.remove(0);
        self.prefill_logits = Some((prompt.len(), Arc::new(logits.clone())));
        Ok(Some(logits))
    }

    /// One forward pass of `ids` after the cache, keeping the first `kept`
    /// rows (the tokens, their keys and values, and the pass) and returning
    /// the logits after the last row run. On failure the cache is cut back
    /// to the tokens: they always agree.
    fn run_pass(
        &mut self,
        model: &Model,
        ids: Vec<u32>,
        kept: usize,
        stop: &dyn Fn() -> bool,
    ) -> Result<candle_core::Tensor> {
        let rows = ids.len();
        let logits = match model.forward_stoppable(std::slice::from_ref(&ids), &mut self.cache, stop) {
            Ok(l) => l,
            Err(e) => {
                self.truncate(self.tokens.len());
                return Err(e);
            }
        };
        self.cache.truncate(self.tokens.len() + kept);
        if self.cache.len() != self.tokens.len() + kept {
            // A hybrid cache cannot keep part of a pass.
            self.truncate(self.cache.len());
            return Err(EngineError::setting("passes", "a hybrid model's cache keeps only whole passes"));
        }
        self.tokens.extend_from_slice(&ids[..kept]);
        self.passes.push_pass(Pass { rows: rows as u32, kept: kept as u32, count: 1 });
        Ok(logits)
    }

    /// The passes still to run so that the cache covers `prompt` exactly as
    /// `passes` computed it, and where they start: the cache is cut back to
    /// the last of its own passes that are those (less at least the last,
    /// whose logits the first step needs).
    pub(crate) fn plan_passes(&mut self, prompt: &[u32], passes: &Passes) -> Result<(usize, PlannedPasses)> {
        if passes.len() != prompt.len() {
            return Err(EngineError::setting(
                "passes",
                format!("the recorded passes cover {} positions, not the prompt's {}", passes.len(), prompt.len()),
            ));
        }
        if passes.runs().last().is_some_and(|p| p.kept != p.rows) {
            return Err(EngineError::setting("passes", "the recorded passes end in a pass that a later edit cut, so they did not compute this prompt's last logits"));
        }
        if prompt.len() > self.cache.max_len() {
            return Err(EngineError::PromptTooLong { tokens: prompt.len(), context: self.cache.max_len() });
        }
        if let Some((start, rows, _)) =
            passes.each().find(|&(start, rows, _)| start + rows as usize > self.cache.max_len())
        {
            return Err(EngineError::setting(
                "passes",
                format!(
                    "a recorded pass of {rows} rows at position {start} does not fit the context of {}",
                    self.cache.max_len()
                ),
            ));
        }
        let wanted: Vec<(usize, u32, u32)> = passes.each().collect();
        let same = self
            .passes
            .each()
            .zip(&wanted)
            .take_while(|(have, want)| {
                have == *want
                    && self.tokens[have.0..have.0 + have.2 as usize] == prompt[have.0..have.0 + have.2 as usize]
            })
            .count();
        // The last pass runs again: its logits seed the first step.
        let reuse = same.min(wanted.len() - 1);
        self.truncate(wanted[reuse].0);
        // A hybrid cache goes back to a checkpoint, which is where one of
        // its passes, and so one of the wanted ones, starts.
        let from = self.tokens.len();
        let reuse = wanted
            .iter()
            .position(|w| w.0 == from)
            .ok_or_else(|| EngineError::setting("passes", format!("no recorded pass starts at position {from}")))?;
        Ok((from, wanted[reuse..].to_vec()))
    }

    /// Runs one planned pass `(start, rows, kept)` of `prompt` (which must
    /// start where the cache ends); the logits after the prompt once the
    /// pass covers it.
    pub(crate) fn run_planned(
        &mut self,
        model: &Model,
        prompt: &[u32],
        (start, rows, kept): (usize, u32, u32),
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<Vec<f32>>> {
        debug_assert_eq!(start, self.tokens.len());
        // Rows a later truncation dropped: any tokens give the kept rows
        // the same bits (attention is causal, each matmul row its own sum).
        let mut ids = prompt[start..start + kept as usize].to_vec();
        ids.resize(rows as usize, ids[ids.len() - 1]);
        let logits = self.run_pass(model, ids, kept as usize, stop)?;
        if self.tokens.len() < prompt.len() {
            return Ok(None);
        }
        self.cache.checkpoint();
        let logits = logits.to_vec2::<f32>()?.remove(0);
        self.prefill_logits = Some((prompt.len(), Arc::new(logits.clone())));
        Ok(Some(logits))
    }

    /// Swaps in `cache` and returns the one it replaces: a turn's sequences
    /// hold the keys and values while they sample.
    pub(crate) fn take_cache(&mut self, cache: KvCache) -> KvCache {
        std::mem::replace(&mut self.cache, cache)
    }

    /// Keeps the recurrent state here as a checkpoint (a hybrid cache).
    pub(crate) fn checkpoint(&mut self) {
        self.cache.checkpoint();
    }

    /// Records `tokens` as fed one decode step each after what the session
    /// covers (the cache already holds them).
    pub(crate) fn extend_decoded(&mut self, tokens: &[u32]) {
        self.tokens.extend_from_slice(tokens);
        self.passes.push_steps(tokens.len());
        // A hybrid cache whose last step failed went back to a checkpoint.
        self.truncate(self.cache.len());
        debug_assert_eq!(self.tokens.len(), self.cache.len());
    }
}

/// Passes to run, `(start, rows, kept)` each.
pub(crate) type PlannedPasses = Vec<(usize, u32, u32)>;

/// Where a prefill in steps begins.
#[derive(Debug, Clone, PartialEq)]
pub enum PrefillStart {
    /// The cache already holds the prompt and its logits: nothing runs.
    Cached(Vec<f32>),
    /// The prefill runs from this position.
    From(usize),
}
