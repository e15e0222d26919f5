//! The sampling loop, after Gemma's `_sampler_loop.py`.
//!
//! A [`Sequence`] is one sequence's whole state between two steps, its
//! state one [`SequenceState`]; a [`Sampler`] is a generation's settings,
//! checked once, and does what the seed's `_sample_step` does to each
//! sequence: forbid tokens, sample, store, and finish the sequence on an end
//! token (nothing after it is kept). A sequence stops at `max_new_tokens`,
//! on an end token or a stop string, or when its cache is full. The turn
//! (`turn.rs`) holds a batch of sequences and runs their forward passes.
//!
//! The prompt is prefilled whole, as llama.cpp does, and its last logits seed
//! step 0; every later step forwards the token sampled before it.
//!
//! **Invariant:** a sequence's cache holds every token fed so far and never
//! the last sampled one; the next step feeds it. This is what lets the next
//! chat turn start from the cache without re-reading anything.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::constraint::{Constraint, Grammar, Mask};
use crate::detok::StreamDecoder;
use crate::draft_model::DraftModel;
use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::model::Model;
use crate::sampling::{sample, Rng, SamplingParams};
use crate::session::Session;
use crate::speculation::{Drafter, Speculation};
use crate::tokenizer::Tokenizer;

/// Why a sequence stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// It emitted an end-of-turn token.
    EndToken,
    /// It reached `max_new_tokens`.
    MaxTokens,
    /// The KV cache (the context) has no room for another position.
    CacheFull,
    /// Its text contained one of the stop strings.
    StopString,
    /// The caller stopped the loop.
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EndToken => "end_token",
            Self::MaxTokens => "max_tokens",
            Self::CacheFull => "cache_full",
            Self::StopString => "stop_string",
            Self::Cancelled => "cancelled",
        }
    }
}

/// What a generation may do, fixed for its whole run.
#[derive(Debug, Clone)]
pub struct GenerationConfig {
    pub max_new_tokens: usize,
    pub end_tokens: Vec<u32>,
    pub forbidden_tokens: Vec<u32>,
    pub stop_strings: Vec<String>,
    pub sampling: SamplingParams,
    /// Report each sampled token's log-probability and this many most
    /// likely tokens with theirs (0: none). The model's own distribution:
    /// log-softmax of the logits, forbidden tokens excluded, before
    /// penalties, temperature and truncation.
    pub top_logprobs: usize,
    /// A grammar every sequence's reply must follow (`Grammars::compile`):
    /// tokens it forbids are never sampled, and the end tokens only where
    /// it may end.
    pub grammar: Option<Grammar>,
    /// Whether each step drafts tokens for its pass to verify
    /// (`speculation.rs`): never a different reply, only fewer passes.
    pub speculation: Speculation,
    /// The model `Speculation::Draft` drafts with.
    pub draft_model: Option<DraftModel>,
}

/// Where a sequence is. A turn's sequences exist once its prompt is read
/// (`Turn::prefill_progress` says how far that is); each then samples
/// until it is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceState {
    /// Sampling: its next step runs.
    Decoding,
    /// Finished, and why; its tokens are final.
    Done(FinishReason),
}

/// One sequence's whole state between two steps.
#[derive(Clone)]
pub struct Sequence {
    state: SequenceState,
    /// The prompt's keys and values (shared copy-on-write with the other
    /// variants') and those of each token fed since.
    pub(crate) cache: KvCache,
    /// Its own generator: what it draws never depends on the others, so
    /// variant `b` of a turn is the reply a single run with seed `seed + b`
    /// gives.
    rng: Rng,
    /// Sampled tokens, the end token included; nothing after it.
    generated: Vec<u32>,
    /// The input of the next step: the prompt's last token, then the last sampled.
    last_token: u32,
    /// The rows of its next pass: `last_token`, then a draft (`plan_pass`).
    feed: Vec<u32>,
    /// Tokens a recurrent cache must read again after a verify pass it
    /// was rewound from (`take_pass`).
    refeed: Vec<u32>,
    drafter: Drafter,
    /// The draft model's session (`Speculation::Draft`): its keys and
    /// values of the history, which it drafts after.
    draft: Option<Session>,
    /// Why its draft model stopped drafting, if it failed.
    draft_failure: Option<String>,
    /// Cache length when sampling began: the prompt and earlier turns.
    pub(crate) init_cache_length: usize,
    /// The prompt's last logits, for step 0 (no forward pass).
    pending_logits: Option<Vec<f32>>,
    /// Tokens before the reply that the penalties may see.
    penalty_context: Vec<u32>,
    text: TextState,
    /// Where it is in the grammar, when there is one.
    constraint: Option<Constraint>,
    /// Its next mask, computed beside a pass a scheduler ran (`MaskSlot`).
    precomputed: Option<Mask>,
    /// When it sampled its first token and its last: its own decode time,
    /// whatever its siblings do.
    sampled_at: Option<(Instant, Instant)>,
}

impl Sequence {
    pub fn state(&self) -> SequenceState {
        self.state
    }

    pub fn is_done(&self) -> bool {
        matches!(self.state, SequenceState::Done(_))
    }

    /// Sampled tokens so far, the end token included.
    pub fn tokens(&self) -> &[u32] {
        &self.generated
    }

    /// Tokens fed to the cache after the prompt: each sampled one but the last.
    pub(crate) fn fed(&self) -> usize {
        self.generated.len().saturating_sub(1)
    }

    /// The same sequence, sampling with `seed` from here: a variant of one
    /// that has sampled nothing yet. Its cache is shared copy-on-write.
    pub(crate) fn fork(&self, seed: u64) -> Sequence {
        debug_assert!(self.generated.is_empty(), "only an unstarted sequence forks");
        Sequence { rng: Rng::new(seed), ..self.clone() }
    }

    /// Whether its next step needs a forward pass (not the prompt's pending logits).
    pub(crate) fn needs_pass(&self) -> bool {
        !self.is_done() && self.pending_logits.is_none()
    }

    /// Sets the rows of its next pass: its last token, then up to what
    /// `mode` drafts from `prompt` and its own tokens, as far as its cache
    /// and `max_new_tokens` leave room for.
    /// Planned once per pass: a scheduler's `decode_inputs` plans it, and
    /// the turn's own step then keeps that plan.
    /// A draft model that fails (or panics) drafts no more for this reply,
    /// which goes on as plain decoding; the failure is in its output.
    pub(crate) fn plan_pass(
        &mut self,
        (mode, target): (Speculation, &Model),
        draft_model: Option<&DraftModel>,
        prompt: &[u32],
        max_new_tokens: usize,
    ) {
        if !self.feed.is_empty() {
            return;
        }
        self.feed.push(self.last_token);
        if mode.is_off() {
            return;
        }
        // The pass writes the draft's positions after the last token's; a
        // draft token past `max_new_tokens` could never be taken. A
        // recurrent cache keeps every row's position until `take_pass` is
        // done, so a draft leaves it one position short of full throughout.
        let recurrent = self.cache.is_hybrid();
        let spare = if recurrent { 2 } else { 1 };
        let room = (self.cache.max_len().saturating_sub(self.cache.len() + spare))
            .min(max_new_tokens.saturating_sub(self.generated.len() + 1));
        let draft = match (mode, draft_model, &mut self.draft) {
            (Speculation::Draft { max_draft }, Some(model), Some(session)) => {
                let history = (prompt, self.generated.as_slice());
                let draft_with = |history: &[u32], k| model.propose(session, history, k);
                let cost = (recurrent, model.cost());
                let drafter = &mut self.drafter;
                let drafted = catch_unwind(AssertUnwindSafe(|| {
                    drafter.propose_with_model(history, max_draft.min(room), cost, draft_with)
                }));
                self.drafted_or_stop(drafted)
            }
            (Speculation::Mtp { .. }, ..) if self.draft_failure.is_some() => Vec::new(),
            (Speculation::Mtp { max_draft }, ..) => {
                let history = (prompt, self.generated.as_slice());
                let (cache, next) = (&mut self.cache, self.last_token);
                let draft_with = |_: &[u32], k| target.mtp_draft(cache, next, k, crate::draft_model::P_MIN);
                let cost = (recurrent, target.mtp_cost());
                let drafter = &mut self.drafter;
                let drafted = catch_unwind(AssertUnwindSafe(|| {
                    drafter.propose_with_model(history, max_draft.min(room), cost, draft_with)
                }));
                self.drafted_or_stop(drafted)
            }
            _ => self.drafter.propose(mode, (prompt, &self.generated), room, recurrent),
        };
        self.feed.extend(draft);
    }

    /// The tokens its next pass feeds (`plan_pass`'s, or its last token),
    /// the cache it feeds them to and, under a grammar, the slot of the
    /// first row's mask: all borrowed at once.
    pub(crate) fn pass_input(&mut self) -> (&[u32], &mut KvCache, Option<MaskSlot<'_>>) {
        if self.feed.is_empty() {
            self.feed.push(self.last_token);
        }
        let slot = self.constraint.as_mut().map(|constraint| MaskSlot { constraint, out: &mut self.precomputed });
        (&self.feed, &mut self.cache, slot)
    }

    /// Drafts with `draft`, whose `session` first reads what it lacks of
    /// the prompt (`stop`, asked between its layers, ends that). A prompt
    /// longer than the draft model's context, a stop or a failure leaves
    /// the reply without drafts.
    pub(crate) fn begin_draft(
        &mut self,
        draft: &DraftModel,
        mut session: Session,
        prompt: &[u32],
        stop: &dyn Fn() -> bool,
    ) {
        if prompt.len() > session.context_length() {
            return;
        }
        let model = draft.engine().model();
        let read = catch_unwind(AssertUnwindSafe(|| -> Result<()> {
            if let crate::session::PrefillStart::From(_) = session.prefill_begin(prompt)? {
                while session.prefill_rows(model, prompt, crate::model::PREFILL_CHUNK, stop)?.is_none() {}
            }
            Ok(())
        }));
        match read {
            Ok(Ok(())) => self.draft = Some(session),
            Ok(Err(crate::EngineError::Stopped)) => {}
            Ok(Err(e)) => _ = self.stop_drafting(e.to_string()),
            Err(panic) => _ = self.stop_drafting(format!("it panicked: {}", panic_text(&*panic))),
        }
    }

    /// A draft model's (or MTP head's) draft, or nothing if it failed or
    /// panicked, after which it drafts no more this reply.
    fn drafted_or_stop(&mut self, drafted: std::thread::Result<Result<Vec<u32>>>) -> Vec<u32> {
        match drafted {
            Ok(Ok(draft)) => draft,
            Ok(Err(e)) => self.stop_drafting(e.to_string()),
            Err(panic) => self.stop_drafting(format!("it panicked: {}", panic_text(&*panic))),
        }
    }

    /// Drafts no more with the draft model (or MTP head) this reply: nothing, and why.
    fn stop_drafting(&mut self, why: String) -> Vec<u32> {
        self.draft = None;
        self.draft_failure = Some(why);
        Vec::new()
    }

    /// Its draft model's session, to keep with the conversation's.
    pub(crate) fn take_draft(&mut self) -> Option<Session> {
        self.draft.take()
    }

    /// Tokens its recurrent cache must read again, now (see `take_pass`).
    pub(crate) fn take_refeed(&mut self) -> Option<(Vec<u32>, &mut KvCache)> {
        (!self.refeed.is_empty()).then(|| (std::mem::take(&mut self.refeed), &mut self.cache))
    }

    /// Rows its next pass feeds.
    pub(crate) fn pass_rows(&self) -> usize {
        self.feed.len().max(1)
    }

    /// The prompt's logits, where its next step takes them rather than a pass.
    pub(crate) fn take_pending(&mut self) -> Option<Choice> {
        self.pending_logits.take().map(Choice::Logits)
    }

    /// Its next mask: computed beside the pass, or now.
    fn mask(&mut self) -> Result<Option<Mask>> {
        match (&mut self.constraint, self.precomputed.take()) {
            (Some(_), Some(ready)) => Ok(Some(ready)),
            (Some(c), None) => c.mask().map(Some),
            (None, _) => Ok(None),
        }
    }

    fn finish(&mut self, reason: FinishReason) {
        self.state = SequenceState::Done(reason);
    }
}

/// A sequence's next mask, to compute on another thread while the forward
/// pass that feeds it (and others) runs.
pub struct MaskSlot<'a> {
    constraint: &'a mut Constraint,
    out: &'a mut Option<Mask>,
}

impl MaskSlot<'_> {
    /// Computes the mask; an error leaves none, and the step computes it
    /// again and reports it.
    pub fn compute(self) {
        *self.out = self.constraint.mask().ok();
    }
}

/// How a step's token is chosen.
pub(crate) enum Choice {
    /// From these logits, on the host.
    Logits(Vec<f32>),
    /// Already picked on the device (greedy, nothing for the host to apply).
    Picked(u32),
}

/// A generation's settings, checked once; it samples every step of every
/// sequence of a turn.
#[derive(Debug, Clone)]
pub struct Sampler {
    config: GenerationConfig,
}

impl Sampler {
    pub fn new(config: GenerationConfig) -> Result<Self> {
        config.sampling.validate()?;
        if config.stop_strings.iter().any(String::is_empty) {
            return Err(crate::EngineError::setting("stop_strings", "a stop string is empty"));
        }
        if matches!(config.speculation, Speculation::Draft { .. }) && config.draft_model.is_none() {
            return Err(crate::EngineError::setting("draft_model", "drafting with a draft model needs one"));
        }
        Ok(Self { config })
    }

    pub fn config(&self) -> &GenerationConfig {
        &self.config
    }

    /// A sequence that continues from `cache`, which holds the whole prompt
    /// (ending in `last_token`); `prompt_logits` are the model's logits
    /// after it, `penalty_context` the recent history the penalties may
    /// see. It samples with `seed`.
    pub(crate) fn begin(
        &self,
        cache: KvCache,
        last_token: u32,
        prompt_logits: Vec<f32>,
        penalty_context: &[u32],
        seed: u64,
    ) -> Sequence {
        let window = self.config.sampling.penalty_window;
        Sequence {
            state: SequenceState::Decoding,
            init_cache_length: cache.len(),
            cache,
            rng: Rng::new(seed),
            generated: Vec::new(),
            last_token,
            feed: Vec::new(),
            refeed: Vec::new(),
            drafter: Drafter::default(),
            draft: None,
            draft_failure: None,
            pending_logits: Some(prompt_logits),
            penalty_context: penalty_context[penalty_context.len().saturating_sub(window)..].to_vec(),
            text: TextState::default(),
            constraint: self.config.grammar.as_ref().map(Grammar::start),
            precomputed: None,
            sampled_at: None,
        }
    }

    /// Whether `seq` must stop before another step; marks it done
    /// (`max_new_tokens` reached, or no room in its cache to feed its last
    /// token).
    pub(crate) fn check_stop(&self, seq: &mut Sequence) -> bool {
        if seq.is_done() {
            return true;
        }
        if seq.generated.len() >= self.config.max_new_tokens {
            seq.finish(FinishReason::MaxTokens);
        } else if seq.pending_logits.is_none() && seq.cache.is_full() {
            seq.finish(FinishReason::CacheFull);
        }
        seq.is_done()
    }

    /// Whether the device may pick a step's tokens: greedy, with nothing the
    /// host must see or apply.
    pub(crate) fn picks_on_device(&self, model: &Model) -> bool {
        let s = &self.config.sampling;
        model.runs_graph()
            && s.is_greedy()
            && s.penalties_inactive()
            && self.config.top_logprobs == 0
            && self.config.grammar.is_none()
    }

    /// One step of sequence `b`: picks its token, stores it, and finishes
    /// it on an end token, a stop string, `max_new_tokens` or a full cache.
    /// The event carries the text the token completed (and, when it
    /// finished the sequence, everything held back).
    pub(crate) fn take(
        &self,
        tokenizer: &Tokenizer,
        seq: &mut Sequence,
        b: usize,
        choice: Choice,
    ) -> Result<TokenEvent> {
        let config = &self.config;
        let mut logprobs = None;
        let token = match choice {
            Choice::Picked(token) => token,
            Choice::Logits(mut row) => {
                for &t in &config.forbidden_tokens {
                    if let Some(l) = row.get_mut(t as usize) {
                        *l = f32::NEG_INFINITY;
                    }
                }
                if let Some(mask) = seq.mask()? {
                    mask.apply(&mut row, &config.end_tokens);
                }
                let recent = recent_tokens(&seq.penalty_context, &seq.generated, config.sampling.penalty_window);
                if config.top_logprobs > 0 {
                    // Sampling rewrites the row; the model's own view is kept first.
                    let model_view = row.clone();
                    let token = sample(&mut row, &recent, &config.sampling, &mut seq.rng);
                    logprobs = Some(Logprobs::of(&model_view, token, config.top_logprobs));
                    token
                } else {
                    sample(&mut row, &recent, &config.sampling, &mut seq.rng)
                }
            }
        };
        let is_end = config.end_tokens.contains(&token);
        if let (Some(c), false) = (&mut seq.constraint, is_end) {
            c.consume(token)?;
        }
        seq.generated.push(token);
        seq.last_token = token;
        let now = Instant::now();
        seq.sampled_at = Some((seq.sampled_at.map_or(now, |(first, _)| first), now));
        let mut finish = None;
        let mut text = String::new();
        if is_end {
            finish = Some(FinishReason::EndToken);
            text = flush(&mut seq.text);
        } else {
            let ts = &mut seq.text;
            let piece = ts.decoder.push(tokenizer.token_bytes(token));
            ts.text.push_str(&piece);
            match find_stop(&ts.text, ts.emitted, &config.stop_strings) {
                Some((at, which)) => {
                    ts.stopped_by = Some(which);
                    ts.text.truncate(at);
                    text = ts.text[ts.emitted.min(at)..].to_string();
                    ts.emitted = at;
                    finish = Some(FinishReason::StopString);
                }
                None => {
                    let safe = ts.text.len() - held_back(&ts.text, &config.stop_strings);
                    if safe > ts.emitted {
                        text = ts.text[ts.emitted..safe].to_string();
                        ts.emitted = safe;
                    }
                }
            }
        }
        match finish {
            Some(f) => seq.finish(f),
            None => {
                if self.check_stop(seq) {
                    finish = match seq.state {
                        SequenceState::Done(f) => Some(f),
                        SequenceState::Decoding => None,
                    };
                    text.push_str(&flush(&mut seq.text));
                }
            }
        }
        Ok(TokenEvent { sequence: b, token, text, finish, logprobs })
    }

    /// The steps one pass of `seq` (sequence `b`) scored: `rows[i]` are the
    /// logits after its feed's row `i` (`plan_pass`). Takes row 0, then
    /// each next row while the token taken equals the draft's next and the
    /// sequence runs on; the cache keeps the rows fed up to there (the
    /// loop's invariant: every token fed, never the last sampled). Each
    /// take is the one a pass of one row would give. One event per token.
    pub(crate) fn take_pass(
        &self,
        tokenizer: &Tokenizer,
        seq: &mut Sequence,
        b: usize,
        rows: Vec<Choice>,
    ) -> Result<Vec<TokenEvent>> {
        let feed = std::mem::take(&mut seq.feed);
        let n = rows.len();
        let start = seq.cache.len().saturating_sub(n);
        // A recurrent state has read every row; keys and values are cut.
        let recurrent = seq.cache.is_hybrid();
        if n > 1 {
            debug_assert_eq!(feed.len(), n, "a pass of several rows is a planned one");
            // The pass stored every row; a draft token counts as fed once
            // the token before it was taken as it.
            if !recurrent {
                seq.cache.truncate(start + 1);
            }
        }
        let mut events = Vec::with_capacity(n);
        let mut accepted = 0;
        for (i, choice) in rows.into_iter().enumerate() {
            if i > 0 && !recurrent {
                seq.cache.advance(1);
            }
            let event = self.take(tokenizer, seq, b, choice)?;
            let kept = feed.get(i + 1) == Some(&event.token);
            accepted += usize::from(kept);
            events.push(event);
            if !kept || seq.is_done() {
                break;
            }
        }
        if n > 1 {
            seq.drafter.record(self.config.speculation, n - 1, accepted);
            let kept = events.len();
            if recurrent && kept < n {
                // Back to the state the pass began from (`begin_verify_pass`);
                // the kept rows are read again, as steps would read them,
                // before the next pass.
                seq.cache.truncate(start);
                debug_assert_eq!(seq.cache.len(), start, "a verify pass keeps the state where it starts");
                seq.refeed = feed[..kept].to_vec();
            } else {
                seq.cache.release_rollback();
            }
        }
        Ok(events)
    }

    /// Stops `seq` (sequence `b`) from outside (the user pressed Stop): it
    /// finishes as `Cancelled`; the event carries the text it held back.
    pub(crate) fn cancel(&self, seq: &mut Sequence, b: usize) -> Option<TokenEvent> {
        if seq.is_done() {
            return None;
        }
        seq.finish(FinishReason::Cancelled);
        let text = flush(&mut seq.text);
        Some(TokenEvent { sequence: b, token: PAD, text, finish: Some(FinishReason::Cancelled), logprobs: None })
    }

    /// `seq`'s tokens and text so far.
    pub(crate) fn output(&self, seq: &Sequence) -> SequenceOutput {
        SequenceOutput {
            tokens: seq.generated.clone(),
            text: seq.text.text.clone(),
            stop_string: seq.text.stopped_by.and_then(|i| self.config.stop_strings.get(i).cloned()),
            finish: match seq.state {
                SequenceState::Done(f) => f,
                SequenceState::Decoding => FinishReason::Cancelled,
            },
            decode_time: seq.sampled_at.map_or(Duration::ZERO, |(first, last)| last - first),
            drafted: seq.drafter.drafted,
            accepted: seq.drafter.accepted,
            draft_failure: seq.draft_failure.clone(),
        }
    }
}

/// The token of an event that samples nothing (a cancel).
pub const PAD: u32 = u32::MAX;

#[derive(Clone, Default)]
struct TextState {
    decoder: StreamDecoder,
    text: String,
    emitted: usize,
    /// The stop string that ended it, if one did (of several, the first in the text).
    stopped_by: Option<usize>,
}

/// One token one sequence produced in a step, with the text it completed.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    pub sequence: usize,
    pub token: u32,
    /// New text safe to show; may be empty while a character or a possible
    /// stop string is incomplete.
    pub text: String,
    /// Set when this token finished the sequence.
    pub finish: Option<FinishReason>,
    /// When `top_logprobs` asks for them.
    pub logprobs: Option<Logprobs>,
}

/// How likely the model found a sampled token, and the likeliest tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Logprobs {
    pub logprob: f32,
    /// The `top_logprobs` likeliest tokens, most likely first.
    pub top: Vec<(u32, f32)>,
}

impl Logprobs {
    /// `token`'s log-probability and the `k` likeliest tokens under `logits`.
    pub fn of(logits: &[f32], token: u32, k: usize) -> Self {
        // Once per token over the whole vocabulary, so vectorised: a scalar
        // pass cost about a twentieth of a small model's decode step.
        let log_sum = crate::cpu::vec_ops::log_sum_exp(logits);
        let top = top_k(logits, k);
        let lp = |l: f32| l - log_sum;
        Self {
            logprob: logits.get(token as usize).map_or(f32::NEG_INFINITY, |&l| lp(l)),
            top: top.into_iter().map(|(i, l)| (i, lp(l))).collect(),
        }
    }
}

/// The `k` largest logits with their ids, largest first; ties keep the
/// lower id first. Chunks of eight with nothing above the k-th best so far
/// are skipped whole, which is nearly all of them.
fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    if k == 0 {
        return top;
    }
    let consider = |top: &mut Vec<(u32, f32)>, i: usize, l: f32| {
        if top.len() < k || top.last().is_some_and(|&(_, w)| l > w) {
            let at = top.partition_point(|&(_, w)| w >= l);
            top.insert(at, (i as u32, l));
            top.truncate(k);
        }
    };
    for (c, chunk) in logits.chunks(8).enumerate() {
        let floor = if top.len() < k { f32::NEG_INFINITY } else { top[k - 1].1 };
        if top.len() == k && !chunk.iter().any(|&l| l > floor) {
            continue;
        }
        for (j, &l) in chunk.iter().enumerate() {
            consider(&mut top, c * 8 + j, l);
        }
    }
    top
}

/// The final output of one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceOutput {
    /// Sampled tokens, the end token included, nothing after it.
    pub tokens: Vec<u32>,
    /// The text, without end tokens or a matched stop string.
    pub text: String,
    pub finish: FinishReason,
    /// The stop string that ended it (`FinishReason::StopString`).
    pub stop_string: Option<String>,
    /// From its first sampled token to its last.
    pub decode_time: Duration,
    /// Draft tokens its verify passes scored, and how many of them it took
    /// (`speculation.rs`).
    pub drafted: usize,
    pub accepted: usize,
    /// Why the draft model stopped drafting part way, if it failed: the
    /// reply went on without it.
    pub draft_failure: Option<String>,
}

/// A panic's message, as far as it has one.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic.downcast_ref::<&str>().copied().or_else(|| panic.downcast_ref::<String>().map(String::as_str)).unwrap_or("")
}

fn recent_tokens(context: &[u32], generated: &[u32], window: usize) -> Vec<u32> {
    let from_gen = generated.len().min(window);
    let from_ctx = (window - from_gen).min(context.len());
    let mut v = context[context.len() - from_ctx..].to_vec();
    v.extend_from_slice(&generated[generated.len() - from_gen..]);
    v
}

fn flush(ts: &mut TextState) -> String {
    let tail = ts.decoder.finish();
    ts.text.push_str(&tail);
    let out = ts.text[ts.emitted..].to_string();
    ts.emitted = ts.text.len();
    out
}

/// Byte offset of the earliest stop string that ends after `emitted`.
fn find_stop(text: &str, emitted: usize, stops: &[String]) -> Option<(usize, usize)> {
    stops
        .iter()
        .enumerate()
        .filter_map(|(which, s)| {
            let from = floor_char_boundary(text, emitted.saturating_sub(s.len()));
            text[from..].find(s.as_str()).map(|i| (from + i, which))
        })
        .min()
}

/// Length of the longest suffix of `text` that could begin a stop string.
fn held_back(text: &str, stops: &[String]) -> usize {
    let mut hold = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if text.ends_with(&s[..i]) {
                hold = hold.max(i);
            }
        }
    }
    hold
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    #[test]
    fn top_k_is_the_k_largest_in_order_ties_by_id() {
        let logits: Vec<f32> = (0..1000u32).map(|i| ((i.wrapping_mul(2654435761) >> 20) % 97) as f32).collect();
        for k in [0, 1, 5, 20] {
            let mut want: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
            want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            want.truncate(k);
            assert_eq!(super::top_k(&logits, k), want, "k = {k}");
        }
        assert_eq!(
            super::top_k(&[f32::NEG_INFINITY, 1.0, f32::NEG_INFINITY], 2),
            vec![(1, 1.0), (0, f32::NEG_INFINITY)]
        );
    }

    use super::*;

    #[test]
    fn holds_back_possible_stop_prefixes() {
        let stops = vec!["###".to_string(), "User:".to_string()];
        assert_eq!(held_back("hello #", &stops), 1);
        assert_eq!(held_back("hello ##", &stops), 2);
        assert_eq!(held_back("hello Us", &stops), 2);
        assert_eq!(held_back("hello", &stops), 0);
        assert_eq!(find_stop("a ### b", 0, &stops), Some((2, 0)));
        assert_eq!(find_stop("a User: b", 3, &stops), Some((2, 1)));
        // Of several, the one that comes first in the text.
        assert_eq!(find_stop("a User: ### b", 0, &stops), Some((2, 1)));
    }

    #[test]
    fn penalty_window_mixes_context_and_output() {
        assert_eq!(recent_tokens(&[1, 2, 3], &[4, 5], 3), vec![3, 4, 5]);
        assert_eq!(recent_tokens(&[1, 2, 3], &[4, 5], 10), vec![1, 2, 3, 4, 5]);
        assert_eq!(recent_tokens(&[1], &[4, 5, 6], 2), vec![5, 6]);
    }
}
