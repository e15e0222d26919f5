//! A conversation's multi-turn state: its KV cache and the exact tokens in it.
//!
//! Each turn feeds only what is new since the cache: the longest common token
//! prefix with the new prompt is kept, the rest of the cache is truncated
//! (the history was edited or regenerated), and only the remainder is prefilled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{EngineError, Result};
use crate::kv_cache::KvCache;
use crate::model::{Model, PREFILL_CHUNK};
use crate::passes::{Pass, Passes};
use crate::sampler_loop::{
    sequence_tokens, GenerationConfig, MaskSlot, NextInput, SamplerLoop, SamplingState, SequenceOutput, TokenEvent,
};
use crate::tokenizer::Tokenizer;

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
}

impl Session {
    pub fn new(model: &Model, max_len: usize) -> Self {
        Self { cache: model.new_cache(max_len), tokens: Vec::new(), passes: Passes::default(), prefill_logits: None }
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
        Ok(Self { cache, tokens, passes, prefill_logits: None })
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

    pub fn context_length(&self) -> usize {
        self.cache.max_len()
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

    /// Starts a turn: prefills what is new in `prompt`, then hands back a
    /// `Turn` to step. `batch > 1` samples that many variants of the reply.
    pub fn start_turn<'a>(
        &'a mut self,
        model: &'a Model,
        tokenizer: &'a Tokenizer,
        prompt: &[u32],
        config: GenerationConfig,
        batch: usize,
    ) -> Result<Turn<'a>> {
        let sampler = SamplerLoop::new(model, tokenizer, config)?;
        let started = Instant::now();
        let (prefilled, logits) = self.prefill(model, prompt)?;
        self.begin_turn(model, sampler, prompt, logits, prefilled, batch, started)
    }

    /// Starts a turn whose prompt is computed exactly as `passes` computed
    /// it: the same forward passes over the same tokens, reusing only the
    /// cache's passes that are those. The logits, and so with the same seed
    /// the tokens, are then the bits of the turn that recorded `passes`,
    /// whether this cache is cold, restored from disk or warm.
    pub fn start_replay<'a>(
        &'a mut self,
        model: &'a Model,
        tokenizer: &'a Tokenizer,
        prompt: &[u32],
        passes: &Passes,
        config: GenerationConfig,
        progress: &mut dyn FnMut(Progress) -> bool,
    ) -> Result<Turn<'a>> {
        let sampler = SamplerLoop::new(model, tokenizer, config)?;
        let started = Instant::now();
        let (processed, logits) = self.prefill_as(model, prompt, passes, progress)?;
        self.begin_turn(model, sampler, prompt, logits, processed, 1, started)
    }

    /// Brings the cache to cover `prompt` through exactly `passes`; returns
    /// how many positions were run and the logits after the last.
    fn prefill_as(
        &mut self,
        model: &Model,
        prompt: &[u32],
        passes: &Passes,
        progress: &mut dyn FnMut(Progress) -> bool,
    ) -> Result<(usize, Vec<f32>)> {
        let (from, planned) = self.plan_passes(prompt, passes)?;
        let total = prompt.len() - from;
        let mut logits = None;
        for &pass in &planned {
            if !progress(Progress { done: self.tokens.len() - from, total }) {
                return Err(EngineError::Stopped);
            }
            logits = self.run_planned(model, prompt, pass, &|| false)?;
        }
        let logits = logits.expect("the last planned pass gives the prompt's logits");
        progress(Progress { done: total, total });
        Ok((total, logits))
    }

    /// The passes still to run so that the cache covers `prompt` exactly as
    /// `passes` computed it, and where they start: the cache is cut back to
    /// the last of its own passes that are those (less at least the last,
    /// whose logits the first step needs).
    fn plan_passes(&mut self, prompt: &[u32], passes: &Passes) -> Result<(usize, PlannedPasses)> {
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
    fn run_planned(
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

    /// The sampling loop's state for a turn over the prefilled `prompt`: the
    /// cache moves into it (and back if that fails).
    fn begin_state(
        &mut self,
        model: &Model,
        sampler: &SamplerLoop,
        prompt: &[u32],
        logits: Vec<f32>,
        batch: usize,
    ) -> Result<SamplingState> {
        let max_len = self.cache.max_len();
        let cache = std::mem::replace(&mut self.cache, model.new_cache(max_len));
        let last = *prompt.last().expect("prefill checked the prompt is non-empty");
        sampler.init_state(cache.clone(), last, logits, prompt, batch).inspect_err(|_| self.cache = cache)
    }

    /// A turn that owns this session, for a scheduler that runs several
    /// conversations' turns in turn (`OwnedTurn::advance`): it reads what
    /// the cache lacks of `prompt` in chunks. On failure the session comes
    /// back with the error.
    #[allow(clippy::result_large_err, reason = "the session comes back by value on failure, for the caller to keep")]
    pub fn into_turn(
        mut self,
        model: &Model,
        tokenizer: &Tokenizer,
        prompt: Vec<u32>,
        config: GenerationConfig,
    ) -> std::result::Result<OwnedTurn, (Session, EngineError)> {
        // The sampler's settings are checked before the cache is touched.
        if let Err(e) = SamplerLoop::new(model, tokenizer, config.clone()) {
            return Err((self, e));
        }
        match self.prefill_begin(&prompt) {
            Err(e) => Err((self, e)),
            Ok(PrefillStart::From(from)) => Ok(OwnedTurn::reading(self, prompt, config, Reading::Chunks { from })),
            Ok(PrefillStart::Cached(logits)) => OwnedTurn::sampling(self, model, tokenizer, prompt, config, logits),
        }
    }

    /// A turn whose prompt is computed exactly as `passes` computed it (see
    /// [`Session::start_replay`]), a pass per `advance`: the logits, and so
    /// with the same seed the tokens, are the bits of the turn that
    /// recorded `passes`, whether this cache is cold, restored or warm.
    #[allow(clippy::result_large_err, reason = "the session comes back by value on failure, for the caller to keep")]
    pub fn into_replay_turn(
        mut self,
        model: &Model,
        tokenizer: &Tokenizer,
        prompt: Vec<u32>,
        passes: &Passes,
        config: GenerationConfig,
    ) -> std::result::Result<OwnedTurn, (Session, EngineError)> {
        if let Err(e) = SamplerLoop::new(model, tokenizer, config.clone()) {
            return Err((self, e));
        }
        match self.plan_passes(&prompt, passes) {
            Err(e) => Err((self, e)),
            Ok((from, planned)) => {
                let reading = Reading::Planned { from, passes: planned.into() };
                Ok(OwnedTurn::reading(self, prompt, config, reading))
            }
        }
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "the prefill's results (logits, count, start time) beside the sampler and the prompt; built once per turn"
    )]
    fn begin_turn<'a>(
        &'a mut self,
        model: &'a Model,
        sampler: SamplerLoop<'a>,
        prompt: &[u32],
        logits: Vec<f32>,
        processed: usize,
        batch: usize,
        started: Instant,
    ) -> Result<Turn<'a>> {
        let state = self.begin_state(model, &sampler, prompt, logits, batch)?;
        Ok(Turn {
            parts: TurnParts {
                prompt_passes: self.passes.clone(),
                state: Some(state),
                stats: TurnStats { prompt_tokens: prompt.len(), processed_tokens: processed, ..TurnStats::default() },
                started,
                first_token_at: None,
            },
            session: self,
            sampler,
        })
    }
}

/// Passes to run, `(start, rows, kept)` each.
type PlannedPasses = Vec<(usize, u32, u32)>;

/// A turn that owns its session: one sequence, as a state machine a
/// scheduler keeps beside others. It reads its prompt (`Reading`), then
/// samples (a `SamplingState`), then is done; each `advance` runs one
/// prefill chunk (or one recorded pass, for a replay) or one decode step,
/// so a long prompt never holds up another conversation's tokens for more
/// than a chunk. Variants of one prompt are forks of one turn that read it
/// (`fork`). `finish` hands the session back.
pub struct OwnedTurn {
    session: Session,
    config: GenerationConfig,
    prompt: Vec<u32>,
    /// How the rest of the prompt is read, while it is.
    reading: Option<Reading>,
    /// Prompt tokens read per `advance` in chunks.
    prefill_rows: usize,
    /// Where a prefill in chunks ends a pass and keeps a checkpoint, for a
    /// hybrid cache (see `set_checkpoint_at`).
    checkpoint_at: Option<usize>,
    /// Asked between the layers of a prefill chunk (see `set_stop`).
    stop: StopFn,
    parts: TurnParts,
}

/// How an `OwnedTurn` reads the prompt the cache lacks.
enum Reading {
    /// Chunks of at most `prefill_rows`, from `from`.
    Chunks { from: usize },
    /// A replay: exactly the recorded passes still to run, from `from`.
    Planned { from: usize, passes: std::collections::VecDeque<(usize, u32, u32)> },
}

impl Reading {
    fn from(&self) -> usize {
        match self {
            Reading::Chunks { from } | Reading::Planned { from, .. } => *from,
        }
    }
}

/// Whether the caller wants a prefill to stop now.
pub type StopFn = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// What one `OwnedTurn::advance` did.
#[derive(Debug)]
pub enum Advance {
    /// Read a chunk of the prompt.
    Prefill(Progress),
    /// Sampled a token (the events of one step).
    Tokens(Vec<TokenEvent>),
    /// Nothing left to do: `finish` it.
    Done,
}

impl OwnedTurn {
    fn new(session: Session, prompt: Vec<u32>, config: GenerationConfig, reading: Option<Reading>) -> Self {
        let stats = TurnStats { prompt_tokens: prompt.len(), ..TurnStats::default() };
        let parts = TurnParts {
            prompt_passes: Passes::default(),
            state: None,
            stats,
            started: Instant::now(),
            first_token_at: None,
        };
        let prefill_rows = PREFILL_CHUNK;
        Self { session, config, prompt, reading, prefill_rows, checkpoint_at: None, stop: Arc::new(|| false), parts }
    }

    /// A turn that still has to read its prompt (`reading`).
    fn reading(session: Session, prompt: Vec<u32>, config: GenerationConfig, reading: Reading) -> Self {
        Self::new(session, prompt, config, Some(reading))
    }

    /// A turn whose cache already holds its prompt, with its `logits`.
    #[allow(clippy::result_large_err, reason = "the session comes back by value on failure, for the caller to keep")]
    fn sampling(
        session: Session,
        model: &Model,
        tokenizer: &Tokenizer,
        prompt: Vec<u32>,
        config: GenerationConfig,
        logits: Vec<f32>,
    ) -> std::result::Result<Self, (Session, EngineError)> {
        let mut turn = Self::new(session, prompt, config, None);
        match turn.begin_sampling(model, tokenizer, logits) {
            Ok(()) => Ok(turn),
            Err(e) => Err((turn.session, e)),
        }
    }

    /// Moves the cache into the sampling state, the prompt read.
    fn begin_sampling(&mut self, model: &Model, tokenizer: &Tokenizer, logits: Vec<f32>) -> Result<()> {
        let sampler = SamplerLoop::new(model, tokenizer, self.config.clone())?;
        let state = self.session.begin_state(model, &sampler, &self.prompt, logits, 1)?;
        self.parts.state = Some(state);
        self.parts.prompt_passes = self.session.passes.clone();
        Ok(())
    }

    pub fn stats(&self) -> &TurnStats {
        &self.parts.stats
    }

    /// The forward passes that computed the prompt (once it is read).
    pub fn prompt_passes(&self) -> &Passes {
        &self.parts.prompt_passes
    }

    pub fn is_prefilling(&self) -> bool {
        self.reading.is_some()
    }

    /// How far the prefill has read, while it runs.
    pub fn prefill_progress(&self) -> Option<Progress> {
        let from = self.reading.as_ref()?.from();
        Some(Progress { done: self.session.tokens.len() - from, total: self.prompt.len() - from })
    }

    /// Reads at most `rows` prompt tokens per `advance` from now on
    /// (`PREFILL_CHUNK` unless set): fewer keep other turns' tokens coming.
    /// The passes are recorded either way, so a replay is still exact. A
    /// replay runs its recorded passes whatever this says.
    pub fn set_prefill_rows(&mut self, rows: usize) {
        self.prefill_rows = rows.max(1);
    }

    /// Has a hybrid model's prefill end a pass at prompt position `pos` and
    /// keep its recurrent state there as a checkpoint, beside the one at
    /// the prompt's end: the start of the reply's opening tokens
    /// (`Engine::generation_prompt_ids`), where the next turn's history is
    /// sure to agree with this prompt. A cache without recurrent state, a
    /// replay (its recorded passes decide) and a position outside what is
    /// still to read are unaffected.
    pub fn set_checkpoint_at(&mut self, pos: Option<usize>) {
        self.checkpoint_at = pos.filter(|_| self.session.cache.is_hybrid());
    }

    /// Lets `advance` end a prefill chunk part way with
    /// [`EngineError::Stopped`] once `stop` says so (the chunk is then not
    /// read; `cancel` ends the turn), rather than only between chunks.
    pub fn set_stop(&mut self, stop: StopFn) {
        self.stop = stop;
    }

    /// The next prefill chunk or decode step.
    pub fn advance(&mut self, model: &Model, tokenizer: &Tokenizer) -> Result<Advance> {
        if let Some(reading) = self.reading.as_mut() {
            let from = reading.from();
            let total = self.prompt.len() - from;
            let logits = match reading {
                Reading::Chunks { .. } => {
                    let at = self.session.tokens.len();
                    let rows = match self.checkpoint_at {
                        Some(pos) if at < pos && pos < at + self.prefill_rows => pos - at,
                        _ => self.prefill_rows,
                    };
                    let logits = self.session.prefill_rows(model, &self.prompt, rows, self.stop.as_ref())?;
                    if self.checkpoint_at == Some(self.session.tokens.len()) {
                        self.session.cache.checkpoint();
                    }
                    logits
                }
                Reading::Planned { passes, .. } => {
                    let pass = *passes.front().expect("a planned reading has a pass left");
                    let logits = self.session.run_planned(model, &self.prompt, pass, self.stop.as_ref())?;
                    passes.pop_front();
                    logits
                }
            };
            let Some(logits) = logits else {
                return Ok(Advance::Prefill(Progress { done: self.session.tokens.len() - from, total }));
            };
            self.begin_sampling(model, tokenizer, logits)?;
            self.parts.stats.processed_tokens = total;
            self.reading = None;
            return Ok(Advance::Prefill(Progress { done: total, total }));
        }
        if self.parts.state.as_ref().is_none_or(|s| s.done.iter().all(|d| *d)) {
            return Ok(Advance::Done);
        }
        Ok(match self.with_turn(model, tokenizer, |t| t.step())? {
            Some(events) => Advance::Tokens(events),
            None => Advance::Done,
        })
    }

    /// Whether the prompt is read and no token sampled yet: the moment a
    /// turn can `fork`.
    pub fn can_fork(&self) -> bool {
        self.reading.is_none() && self.parts.state.as_ref().is_some_and(|s| s.step == 0 && s.done.len() == 1)
    }

    /// A variant of this turn: the same prompt, read once, sampled with
    /// `seed` (the settings' seed otherwise). Its cache is this one's,
    /// shared copy-on-write until either writes, so each variant is the
    /// reply a turn of its own with that seed gives. Only when `can_fork`.
    pub fn fork(&self, model: &Model, seed: u64) -> Result<OwnedTurn> {
        let state = self.parts.state.as_ref().filter(|_| self.can_fork()).ok_or_else(|| {
            EngineError::setting("fork", "a turn forks once its prompt is read and before its first token")
        })?;
        let mut config = self.config.clone();
        config.sampling.seed = seed;
        let session = Session {
            // The cache is in the sampling state until the turn commits.
            cache: model.new_cache(self.session.cache.max_len()),
            tokens: self.session.tokens.clone(),
            passes: self.session.passes.clone(),
            prefill_logits: self.session.prefill_logits.clone(),
        };
        let parts = TurnParts {
            prompt_passes: self.parts.prompt_passes.clone(),
            state: Some(state.fork(seed)),
            stats: self.parts.stats.clone(),
            started: self.parts.started,
            first_token_at: None,
        };
        Ok(OwnedTurn {
            session,
            config,
            prompt: self.prompt.clone(),
            reading: None,
            prefill_rows: self.prefill_rows,
            checkpoint_at: None,
            stop: self.stop.clone(),
            parts,
        })
    }

    /// When the next `advance` is a decode step that runs the model: the
    /// token it feeds and the cache it feeds it to. A scheduler runs these
    /// for several turns as one pass (`Model::decode_step_many`) and gives
    /// each its logits with `advance_given`.
    pub fn decode_input(&mut self, model: &Model, tokenizer: &Tokenizer) -> Option<(u32, &mut KvCache)> {
        self.decode_input_masked(model, tokenizer).map(|(t, cache, _)| (t, cache))
    }

    /// `decode_input`, and under a grammar the slot of the step's mask, for
    /// the scheduler to compute beside the pass (`MaskSlot::compute`).
    pub fn decode_input_masked(
        &mut self,
        model: &Model,
        tokenizer: &Tokenizer,
    ) -> Option<(u32, &mut KvCache, Option<MaskSlot<'_>>)> {
        if self.reading.is_some() {
            return None;
        }
        let sampler = SamplerLoop::new(model, tokenizer, self.config.clone()).ok()?;
        let state = self.parts.state.as_mut()?;
        match sampler.next_input(state) {
            NextInput::Token(t) => {
                let (cache, slot) = state.cache_and_mask();
                Some((t, cache, slot))
            }
            NextInput::Stopped | NextInput::Nothing => None,
        }
    }

    /// The decode step `decode_input` asked for, with the logits of its pass.
    pub fn advance_given(&mut self, model: &Model, tokenizer: &Tokenizer, logits: Vec<f32>) -> Result<Advance> {
        Ok(match self.with_turn(model, tokenizer, |t| t.step_given(Some(logits)))? {
            Some(events) => Advance::Tokens(events),
            None => Advance::Done,
        })
    }

    /// Stops the turn between two steps; returns any text held back.
    pub fn cancel(&mut self, model: &Model, tokenizer: &Tokenizer) -> Vec<TokenEvent> {
        if self.reading.take().is_some() {
            return Vec::new();
        }
        if self.parts.state.is_none() {
            return Vec::new();
        }
        self.with_turn(model, tokenizer, |t| t.cancel())
    }

    /// Ends the turn: the session back (covering what was read and
    /// sampled), and what the sequence wrote, if it got as far as sampling.
    pub fn finish(mut self, model: &Model, tokenizer: &Tokenizer) -> (Session, Result<Option<TurnOutput>>) {
        if self.parts.state.is_none() {
            return (self.session, Ok(None));
        }
        let out = match SamplerLoop::new(model, tokenizer, self.config.clone()) {
            Ok(sampler) => {
                let parts = std::mem::replace(&mut self.parts, TurnParts::spent());
                Turn { session: &mut self.session, sampler, parts }.finish(0).map(Some)
            }
            Err(e) => Err(e),
        };
        (self.session, out)
    }

    /// Runs `f` on this turn as a borrowed `Turn`, keeping its state after.
    fn with_turn<R>(&mut self, model: &Model, tokenizer: &Tokenizer, f: impl FnOnce(&mut Turn) -> R) -> R {
        let sampler = SamplerLoop::new(model, tokenizer, self.config.clone())
            .expect("the config was validated when the turn began");
        let parts = std::mem::replace(&mut self.parts, TurnParts::spent());
        let mut turn = Turn { session: &mut self.session, sampler, parts };
        let r = f(&mut turn);
        self.parts = std::mem::replace(&mut turn.parts, TurnParts::spent());
        r
    }
}

/// Where a prefill in steps begins.
#[derive(Debug, Clone, PartialEq)]
pub enum PrefillStart {
    /// The cache already holds the prompt and its logits: nothing runs.
    Cached(Vec<f32>),
    /// The prefill runs from this position.
    From(usize),
}

/// How far a prefill has read: `done` of the `total` tokens it has to run
/// (the prompt less what the cache already held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
}

/// Timings and counts for one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnStats {
    /// Tokens in the whole prompt (history included).
    pub prompt_tokens: usize,
    /// Prompt tokens this turn had to run through the model; the rest came
    /// from the cache.
    pub processed_tokens: usize,
    /// Sampled tokens, summed over the batch.
    pub generated_tokens: usize,
    /// From the start of the turn to the first sampled token.
    pub time_to_first_token: Duration,
    /// From the first sampled token to the last.
    pub decode_time: Duration,
}

/// One assistant turn in progress. Finishing (or dropping) it writes the kept
/// sequence back into the session, so even a cancelled turn leaves a cache
/// that matches its tokens.
pub struct Turn<'a> {
    session: &'a mut Session,
    sampler: SamplerLoop<'a>,
    parts: TurnParts,
}

/// A turn's own state, apart from the session and the model it runs on
/// (so an `OwnedTurn` can keep it between steps).
struct TurnParts {
    /// The passes that computed the prompt: with the prompt, the seed and
    /// the sampler's settings, what replays this turn exactly.
    prompt_passes: Passes,
    state: Option<SamplingState>,
    stats: TurnStats,
    started: Instant,
    first_token_at: Option<Instant>,
}

impl TurnParts {
    /// Parts whose turn has nothing left to write back.
    fn spent() -> Self {
        Self {
            prompt_passes: Passes::default(),
            state: None,
            stats: TurnStats::default(),
            started: Instant::now(),
            first_token_at: None,
        }
    }
}

/// The result of a finished turn.
#[derive(Debug, Clone)]
pub struct TurnOutput {
    pub sequences: Vec<SequenceOutput>,
    pub stats: TurnStats,
}

impl Turn<'_> {
    pub fn stats(&self) -> &TurnStats {
        &self.parts.stats
    }

    /// The forward passes that computed this turn's prompt.
    pub fn prompt_passes(&self) -> &Passes {
        &self.parts.prompt_passes
    }

    pub fn state(&self) -> &SamplingState {
        self.parts.state.as_ref().expect("state is present until the turn ends")
    }

    /// One step of the sampling loop; `None` once every sequence has finished.
    pub fn step(&mut self) -> Result<Option<Vec<TokenEvent>>> {
        self.step_given(None)
    }

    /// `step` with the logits of a forward pass the caller ran (see
    /// `SamplerLoop::step_given`).
    fn step_given(&mut self, given: Option<Vec<f32>>) -> Result<Option<Vec<TokenEvent>>> {
        let state = self.parts.state.as_mut().expect("state is present until the turn ends");
        let out = self.sampler.step_given(state, given)?;
        if let Some(events) = &out {
            let now = Instant::now();
            let first = *self.parts.first_token_at.get_or_insert_with(|| {
                self.parts.stats.time_to_first_token = now - self.parts.started;
                now
            });
            self.parts.stats.decode_time = now - first;
            self.parts.stats.generated_tokens += events.iter().filter(|e| e.token != crate::sampler_loop::PAD).count();
        }
        Ok(out)
    }

    /// Stops the turn between two steps; returns any text held back.
    pub fn cancel(&mut self) -> Vec<TokenEvent> {
        let state = self.parts.state.as_mut().expect("state is present until the turn ends");
        self.sampler.cancel(state)
    }

    /// Runs to the end and keeps sequence 0.
    pub fn run(mut self) -> Result<TurnOutput> {
        while self.step()?.is_some() {}
        self.finish(0)
    }

    /// Ends the turn, keeping sequence `keep` as the conversation's continuation.
    pub fn finish(mut self, keep: usize) -> Result<TurnOutput> {
        let sequences = self.sampler.outputs(self.state());
        self.commit(keep)?;
        Ok(TurnOutput { sequences, stats: self.parts.stats.clone() })
    }

    /// Ends a turn of several variants: sequence 0 continues this session,
    /// and every other sequence comes back as a session of its own (the
    /// prompt's cache and its own tokens), so that picking any variant later
    /// continues from its cache.
    pub fn finish_variants(mut self) -> Result<(TurnOutput, Vec<Session>)> {
        let sequences = self.sampler.outputs(self.state());
        let state = self.state();
        let mut others = Vec::new();
        for b in 1..state.done.len() {
            let generated = sequence_tokens(state, b);
            let fed = generated.len().saturating_sub(1);
            // Until the turn commits, the session's tokens are the prompt's.
            let mut tokens = self.session.tokens.clone();
            tokens.extend_from_slice(&generated[..fed]);
            let mut passes = self.parts.prompt_passes.clone();
            passes.push_steps(fed);
            let cache = state.cache.select_row(b, state.init_cache_length + fed)?;
            others.push(Session { cache, tokens, passes, prefill_logits: self.session.prefill_logits.clone() });
        }
        self.commit(0)?;
        Ok((TurnOutput { sequences, stats: self.parts.stats.clone() }, others))
    }

    fn commit(&mut self, keep: usize) -> Result<()> {
        let Some(state) = self.parts.state.take() else { return Ok(()) };
        let generated = sequence_tokens(&state, keep.min(state.done.len() - 1)).to_vec();
        // Fed after the prompt: each sampled token but the last.
        let fed = generated.len().saturating_sub(1);
        let len = state.init_cache_length + fed;
        let mut cache = if state.cache.batch() == 1 {
            let mut c = state.cache;
            c.truncate(len);
            c
        } else {
            state.cache.select_row(keep, len)?
        };
        // A turn's end is where the next turn continues from.
        cache.checkpoint();
        self.session.cache = cache;
        self.session.tokens.extend_from_slice(&generated[..fed]);
        // Each sequence of a batch decodes in its own order (see `matmul_cols`).
        self.session.passes.push_steps(fed);
        // A hybrid cache whose last step failed went back to a checkpoint.
        self.session.truncate(self.session.cache.len());
        debug_assert_eq!(self.session.tokens.len(), self.session.cache.len());
        Ok(())
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let Some(state) = self.parts.state.as_mut() else { return };
        self.sampler.cancel(state);
        if self.commit(0).is_err() {
            // The cache cannot be trusted; fall back to an empty one.
            self.session.truncate(0);
        }
    }
}
