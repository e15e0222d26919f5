//! A turn: one assistant reply of one or more sequences over a session, as
//! a state machine a scheduler keeps beside others.
//!
//! A turn reads what the session's cache lacks of its prompt (in chunks,
//! or for a replay through exactly the recorded passes), then samples a
//! batch of [`Sequence`]s, variant 0 first: the prompt is read once, and
//! every variant forks from it and samples with the seed + its index. Each
//! [`Turn::advance`] runs one prefill chunk or one decode step of every
//! sequence still running (as one forward pass), so a long prompt holds up
//! another conversation's tokens for a chunk at most. A scheduler that runs
//! several turns' decode steps as one pass takes each turn's inputs
//! ([`Turn::decode_inputs`]) and hands back the logits
//! ([`Turn::advance_given`]). [`Turn::end`] hands the session back,
//! covering the kept sequence, and each other variant as a session of its
//! own.
//!
//! The turn is built once per reply: its settings are checked when it
//! starts, never per token.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{EngineError, Result};
use crate::kv_cache::KvCache;
use crate::model::{Model, PREFILL_CHUNK};
use crate::passes::Passes;
use crate::sampler_loop::{Choice, MaskSlot, Sampler, Sequence, SequenceOutput, TokenEvent};
use crate::session::Session;
use crate::speculation::Speculation;
use crate::tokenizer::Tokenizer;

/// One assistant reply in progress: its prompt, then its sequences.
pub struct Turn {
    /// The conversation: the prompt's tokens and passes once read. While
    /// the sequences sample, their caches hold the keys and values and this
    /// one's is empty.
    session: Session,
    sampler: Sampler,
    prompt: Vec<u32>,
    /// How the rest of the prompt is read, while it is.
    reading: Option<Reading>,
    /// Once the prompt is read, one per variant, variant 0 first.
    sequences: Vec<Sequence>,
    /// How many variants sample once the prompt is read.
    variants: usize,
    /// Prompt tokens read per `advance` in chunks.
    prefill_rows: usize,
    /// Where a prefill in chunks ends a pass and keeps a checkpoint, for a
    /// hybrid cache (see `set_checkpoint_at`).
    checkpoint_at: Option<usize>,
    /// Asked between the layers of a prefill chunk (see `set_stop`).
    stop: StopFn,
    /// The passes that computed the prompt: with the prompt, the seed and
    /// the sampler's settings, what replays this turn exactly.
    prompt_passes: Passes,
    stats: TurnStats,
    /// How its steps draft: the settings', off where passes run as the
    /// graph (whose bits depend on the rows a pass has).
    speculation: Speculation,
    started: Instant,
    first_token_at: Option<Instant>,
}

/// How a turn reads the prompt its cache lacks.
pub(crate) enum Reading {
    /// Chunks of at most `prefill_rows`, from `from`.
    Chunks { from: usize },
    /// A replay: exactly the recorded passes still to run, `(start, rows,
    /// kept)` each, from `from`.
    Planned { from: usize, passes: VecDeque<(usize, u32, u32)> },
}

impl Reading {
    fn from(&self) -> usize {
        match self {
            Reading::Chunks { from } | Reading::Planned { from, .. } => *from,
        }
    }
}

/// Whether the caller wants a prefill to stop now.
pub type StopFn = Arc<dyn Fn() -> bool + Send + Sync>;

/// What one `Turn::advance` did.
#[derive(Debug)]
pub enum Advance {
    /// Read a chunk of the prompt.
    Prefill(Progress),
    /// Sampled a token of each running sequence (the events of one step).
    Tokens(Vec<TokenEvent>),
    /// Nothing left to do: `end` it.
    Done,
}

/// One decode step a scheduler runs for a turn, in a pass with others':
/// the sequence's last token, then any draft for the pass to verify
/// (`Model::decode_rows_many` takes these rows as they are).
pub struct DecodeInput<'a> {
    pub tokens: &'a [u32],
    pub cache: &'a mut KvCache,
    /// Under a grammar, where the first row's mask goes: compute it beside the pass.
    pub mask: Option<MaskSlot<'a>>,
}

/// What an ended turn leaves.
pub struct Ended {
    /// The session, covering the prompt and the kept variant's tokens.
    pub session: Session,
    /// Every other variant that sampled, as a session of its own (the
    /// prompt's cache and its own tokens), so that picking it later
    /// continues from its cache.
    pub others: Vec<Session>,
    /// What each sequence wrote; `None` if the turn never sampled.
    pub output: Option<TurnOutput>,
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
    /// Sampled tokens, summed over the sequences.
    pub generated_tokens: usize,
    /// From the start of the turn to the first sampled token.
    pub time_to_first_token: Duration,
    /// From the first sampled token of any sequence to the last (each
    /// sequence's own: `SequenceOutput::decode_time`).
    pub decode_time: Duration,
    /// Draft tokens the verify passes scored, and how many were taken,
    /// summed over the sequences when the turn ends (each sequence's own:
    /// `SequenceOutput::drafted`, `accepted`).
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
}

/// The result of a finished turn.
#[derive(Debug, Clone)]
pub struct TurnOutput {
    pub sequences: Vec<SequenceOutput>,
    pub stats: TurnStats,
}

impl Turn {
    pub(crate) fn new(session: Session, sampler: Sampler, prompt: Vec<u32>, reading: Option<Reading>) -> Self {
        let stats = TurnStats { prompt_tokens: prompt.len(), ..TurnStats::default() };
        Self {
            session,
            sampler,
            prompt,
            reading,
            sequences: Vec::new(),
            variants: 1,
            prefill_rows: PREFILL_CHUNK,
            checkpoint_at: None,
            stop: Arc::new(|| false),
            prompt_passes: Passes::default(),
            stats,
            speculation: Speculation::Off,
            started: Instant::now(),
            first_token_at: None,
        }
    }

    /// Starts sampling: the prompt is read and `logits` follow it. The
    /// session's cache moves into variant 0, and the others fork from it.
    pub(crate) fn begin_sampling(&mut self, model: &Model, logits: Vec<f32>) {
        let max_len = self.session.cache().max_len();
        let cache = self.session.take_cache(model.new_cache(max_len));
        let last = *self.prompt.last().expect("a turn's prompt is not empty");
        let seed = self.sampler.config().sampling.seed;
        self.sequences = vec![self.sampler.begin(cache, last, logits, &self.prompt, seed)];
        self.prompt_passes = self.session.passes().clone();
        self.speculation = if model.runs_graph() { Speculation::Off } else { self.sampler.config().speculation };
        // The draft model's session of this conversation, if it kept one
        // (another draft model's is dropped), else a new one, reads the
        // prompt now, as part of reading it, before the variants fork.
        if let (Speculation::Draft { .. }, Some(draft)) = (self.speculation, &self.sampler.config().draft_model) {
            let kept = self.session.take_draft(draft.path());
            let session = kept.unwrap_or_else(|| draft.new_session(max_len));
            self.sequences[0].begin_draft(draft, session, &self.prompt, self.stop.as_ref());
        }
        self.fork_variants();
    }

    /// Samples `n` variants of the reply once the prompt is read (1 unless
    /// set), variant `b` with the settings' seed + `b`. Only before the
    /// first token.
    pub fn set_variants(&mut self, n: usize) -> Result<()> {
        if self.sequences.iter().any(|s| !s.tokens().is_empty()) {
            return Err(EngineError::setting("n", "variants are set before the first token"));
        }
        self.variants = n.max(1);
        self.sequences.truncate(self.variants);
        self.fork_variants();
        Ok(())
    }

    fn fork_variants(&mut self) {
        let Some(first) = self.sequences.first() else { return };
        let seed = self.sampler.config().sampling.seed;
        let forks: Vec<Sequence> =
            (self.sequences.len()..self.variants).map(|b| first.fork(seed.wrapping_add(b as u64))).collect();
        self.sequences.extend(forks);
    }

    pub fn stats(&self) -> &TurnStats {
        &self.stats
    }

    /// The forward passes that computed the prompt (once it is read).
    pub fn prompt_passes(&self) -> &Passes {
        &self.prompt_passes
    }

    /// The sequences, once the prompt is read; variant 0 first.
    pub fn sequences(&self) -> &[Sequence] {
        &self.sequences
    }

    pub fn is_prefilling(&self) -> bool {
        self.reading.is_some()
    }

    /// How far the prefill has read, while it runs.
    pub fn prefill_progress(&self) -> Option<Progress> {
        let from = self.reading.as_ref()?.from();
        Some(Progress { done: self.session.tokens().len() - from, total: self.prompt.len() - from })
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
        self.checkpoint_at = pos.filter(|_| self.session.cache().is_hybrid());
    }

    /// Lets `advance` end a prefill chunk part way with
    /// [`EngineError::Stopped`] once `stop` says so (the chunk is then not
    /// read; `cancel` ends the turn), rather than only between chunks.
    pub fn set_stop(&mut self, stop: StopFn) {
        self.stop = stop;
    }

    /// The next prefill chunk, or the next decode step of every running
    /// sequence (one forward pass for them all).
    pub fn advance(&mut self, model: &Model, tokenizer: &Tokenizer) -> Result<Advance> {
        if self.reading.is_some() {
            return self.read(model);
        }
        self.decode(model, tokenizer, None)
    }

    /// One prefill chunk, or one recorded pass for a replay.
    fn read(&mut self, model: &Model) -> Result<Advance> {
        let reading = self.reading.as_mut().expect("reading");
        let from = reading.from();
        let total = self.prompt.len() - from;
        let logits = match reading {
            Reading::Chunks { .. } => {
                let at = self.session.tokens().len();
                let rows = match self.checkpoint_at {
                    Some(pos) if at < pos && pos < at + self.prefill_rows => pos - at,
                    _ => self.prefill_rows,
                };
                let logits = self.session.prefill_rows(model, &self.prompt, rows, self.stop.as_ref())?;
                if self.checkpoint_at == Some(self.session.tokens().len()) {
                    self.session.checkpoint();
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
            return Ok(Advance::Prefill(Progress { done: self.session.tokens().len() - from, total }));
        };
        self.reading = None;
        self.stats.processed_tokens = total;
        self.begin_sampling(model, logits);
        Ok(Advance::Prefill(Progress { done: total, total }))
    }

    /// The decode steps of this turn's next `advance` that run the model:
    /// a scheduler runs them with other turns' as one pass
    /// (`Model::decode_step_many`) and gives the logits back, in this
    /// order, to `advance_given`. Empty while the prompt is read, and for
    /// a step that takes the prompt's own logits.
    pub fn decode_inputs(&mut self, model: &Model) -> Vec<DecodeInput<'_>> {
        if self.reading.is_some() {
            return Vec::new();
        }
        self.plan_passes(model);
        self.sequences
            .iter_mut()
            .filter(|s| s.needs_pass())
            .map(|s| {
                let (tokens, cache, mask) = s.pass_input();
                DecodeInput { tokens, cache, mask }
            })
            .collect()
    }

    /// Marks the sequences that must stop done, and sets the rows of each
    /// running one's next pass (its last token, then any draft).
    fn plan_passes(&mut self, model: &Model) {
        let (sampler, prompt) = (&self.sampler, &self.prompt);
        let (max_new, draft_model) = (sampler.config().max_new_tokens, sampler.config().draft_model.as_ref());
        for s in &mut self.sequences {
            if !sampler.check_stop(s) && s.needs_pass() {
                s.plan_pass((self.speculation, model), draft_model, prompt, max_new);
            }
        }
    }

    /// The decode step `decode_inputs` asked for, with the logits of its
    /// rows in that order.
    pub fn advance_given(&mut self, model: &Model, tokenizer: &Tokenizer, logits: Vec<Vec<f32>>) -> Result<Advance> {
        self.decode(model, tokenizer, Some(logits))
    }

    /// One decode step of every running sequence: those that need a pass
    /// take theirs from `given` or run one together, the others take the
    /// prompt's logits.
    fn decode(&mut self, model: &Model, tokenizer: &Tokenizer, given: Option<Vec<Vec<f32>>>) -> Result<Advance> {
        // Given logits are for the sequences `decode_inputs` found running
        // and planned, before their pass filled any cache: those are the
        // ones to step.
        if given.is_none() {
            self.plan_passes(model);
        }
        let live: Vec<usize> = (0..self.sequences.len()).filter(|&b| !self.sequences[b].is_done()).collect();
        if live.is_empty() {
            return Ok(Advance::Done);
        }
        let passed: Vec<usize> = live.iter().copied().filter(|&b| self.sequences[b].needs_pass()).collect();
        let mut choices: Vec<Vec<Choice>> = (0..self.sequences.len()).map(|_| Vec::new()).collect();
        for &b in &live {
            choices[b].extend(self.sequences[b].take_pending());
        }
        let rows: usize = passed.iter().map(|&b| self.sequences[b].pass_rows()).sum();
        let mut ran = match given {
            Some(given) if given.len() == rows => given.into_iter().map(Choice::Logits).collect(),
            Some(given) => {
                return Err(EngineError::setting(
                    "logits",
                    format!("{} rows of logits for {rows} decode rows", given.len()),
                ))
            }
            None => self.run_passes(model, &passed)?,
        }
        .into_iter();
        for &b in &passed {
            choices[b].extend(ran.by_ref().take(self.sequences[b].pass_rows()));
        }
        let mut events = Vec::with_capacity(rows.max(live.len()));
        for b in live {
            let rows = std::mem::take(&mut choices[b]);
            events.extend(self.sampler.take_pass(tokenizer, &mut self.sequences[b], b, rows)?);
        }
        self.refeed(model)?;
        let now = Instant::now();
        let first = *self.first_token_at.get_or_insert_with(|| {
            self.stats.time_to_first_token = now - self.started;
            now
        });
        self.stats.decode_time = now - first;
        self.stats.generated_tokens += events.len();
        Ok(Advance::Tokens(events))
    }

    /// Brings every recurrent cache that a verify pass ran past its kept
    /// rows back to them: one pass of those rows for them all.
    fn refeed(&mut self, model: &Model) -> Result<()> {
        let (rows, mut caches): (Vec<Vec<u32>>, Vec<&mut KvCache>) =
            self.sequences.iter_mut().filter_map(Sequence::take_refeed).unzip();
        if rows.is_empty() {
            return Ok(());
        }
        let rows: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
        model.decode_rows_many(&rows, &mut caches)?;
        caches.iter_mut().for_each(|c| c.release_rollback());
        Ok(())
    }

    /// The forward pass of sequences `passed`, logits per row: one
    /// `forward` for one row (its token picked on the device where nothing
    /// needs the host), one `decode_rows_many` for several. A grammar's
    /// masks are computed beside it, a thread each.
    fn run_passes(&mut self, model: &Model, passed: &[usize]) -> Result<Vec<Choice>> {
        if passed.is_empty() {
            return Ok(Vec::new());
        }
        let mut tokens: Vec<&[u32]> = Vec::with_capacity(passed.len());
        let mut caches = Vec::with_capacity(passed.len());
        let mut masks = Vec::new();
        for (b, s) in self.sequences.iter_mut().enumerate() {
            if passed.contains(&b) {
                let (feed, cache, mask) = s.pass_input();
                tokens.push(feed);
                caches.push(cache);
                masks.extend(mask);
            }
        }
        let on_device = tokens.len() == 1 && tokens[0].len() == 1 && self.sampler.picks_on_device(model);
        let forbidden = &self.sampler.config().forbidden_tokens;
        std::thread::scope(|s| {
            for mask in masks {
                // A panic leaves no mask; the step computes it again.
                s.spawn(move || drop(catch_unwind(AssertUnwindSafe(|| mask.compute()))));
            }
            match caches.as_mut_slice() {
                [cache] if tokens[0].len() == 1 => {
                    let logits = model.forward(&[vec![tokens[0][0]]], cache)?;
                    if on_device {
                        let picked = crate::sampling::greedy_on_device(&logits, forbidden)?;
                        return Ok(picked.into_iter().map(Choice::Picked).collect());
                    }
                    Ok(logits.to_vec2::<f32>()?.into_iter().map(Choice::Logits).collect())
                }
                caches => Ok(model.decode_rows_many(&tokens, caches)?.into_iter().map(Choice::Logits).collect()),
            }
        })
    }

    /// Whether the prompt is read and no token sampled yet: the moment a
    /// one-sequence turn can `fork`.
    pub fn can_fork(&self) -> bool {
        self.reading.is_none() && self.sequences.len() == 1 && self.sequences[0].tokens().is_empty()
    }

    /// A turn of its own for a variant of this one: the same prompt, read
    /// once, sampled with `seed`. Its cache is this one's, shared
    /// copy-on-write until either writes, so it is the reply a turn of its
    /// own with that seed gives. Only when `can_fork`.
    pub fn fork(&self, model: &Model, seed: u64) -> Result<Turn> {
        if !self.can_fork() {
            return Err(EngineError::setting(
                "fork",
                "a turn forks once its prompt is read and before its first token",
            ));
        }
        let mut config = self.sampler.config().clone();
        config.sampling.seed = seed;
        let mut session = self.session.clone();
        session.take_cache(model.new_cache(self.session.cache().max_len()));
        let mut turn = Turn::new(session, Sampler::new(config)?, self.prompt.clone(), None);
        turn.sequences = vec![self.sequences[0].fork(seed)];
        turn.prompt_passes = self.prompt_passes.clone();
        turn.stats = self.stats.clone();
        turn.speculation = self.speculation;
        turn.started = self.started;
        turn.prefill_rows = self.prefill_rows;
        turn.stop = self.stop.clone();
        Ok(turn)
    }

    /// Stops the turn between two steps; returns the text the running
    /// sequences held back.
    pub fn cancel(&mut self) -> Vec<TokenEvent> {
        self.reading = None;
        let sampler = &self.sampler;
        self.sequences.iter_mut().enumerate().filter_map(|(b, s)| sampler.cancel(s, b)).collect()
    }

    /// Ends the turn: the session back, covering what was read and
    /// variant 0's tokens; the other variants' sessions; what each wrote.
    pub fn end(self) -> Ended {
        self.end_keeping(0)
    }

    /// `end`, with variant `keep` as the conversation's continuation.
    pub fn end_keeping(mut self, keep: usize) -> Ended {
        if self.sequences.is_empty() {
            return Ended { session: self.session, others: Vec::new(), output: None };
        }
        let sequences: Vec<SequenceOutput> = self.sequences.iter().map(|s| self.sampler.output(s)).collect();
        let stats = TurnStats {
            drafted_tokens: sequences.iter().map(|s| s.drafted).sum(),
            accepted_tokens: sequences.iter().map(|s| s.accepted).sum(),
            ..self.stats.clone()
        };
        let output = TurnOutput { sequences, stats };
        let keep = keep.min(self.sequences.len() - 1);
        let mut session = None;
        let mut others = Vec::new();
        for (b, seq) in std::mem::take(&mut self.sequences).into_iter().enumerate() {
            let s = self.sequence_session(seq);
            match b == keep {
                true => session = Some(s),
                false => others.push(s),
            }
        }
        Ended { session: session.expect("the kept variant"), others, output: Some(output) }
    }

    /// A sequence's session: the prompt's tokens and passes, and each token
    /// it fed.
    fn sequence_session(&self, mut seq: Sequence) -> Session {
        let draft = seq.take_draft();
        let fed = seq.fed();
        let generated = seq.tokens()[..fed].to_vec();
        let mut cache = seq.cache;
        cache.truncate(seq.init_cache_length + fed);
        // A turn's end is where the next turn continues from.
        cache.checkpoint();
        let mut session = self.session.clone();
        session.take_cache(cache);
        // Each sequence decodes in its own order (see `matmul_cols`).
        session.extend_decoded(&generated);
        if let (Some(mut draft), Some(model)) = (draft, &self.sampler.config().draft_model) {
            // Only what it shares with the conversation: refused drafts are
            // dropped, so its saved copy grows as the conversation's does.
            let shared = draft.tokens().iter().zip(session.tokens()).take_while(|(a, b)| a == b).count();
            draft.truncate(shared);
            session.set_draft(model.path(), draft);
        }
        session
    }
}
