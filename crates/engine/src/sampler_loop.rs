//! The sampling loop, after Gemma's `_sampler_loop.py`.
//!
//! State is explicit (`SamplingState`) and one `step` does what the seed's
//! `_sample_step` does: forward the last token of every sequence, forbid
//! tokens, sample, store, and mark sequences done on an end token. The loop
//! stops at `max_new_tokens`, when every sequence is done, or when the cache is
//! full. `SamplerLoop::stream` and `SamplerLoop::run` drive the same `step`, so
//! for one seed they produce the same tokens.
//!
//! The prompt is prefilled whole, as llama.cpp does, and its last logits seed
//! step 0; every later step forwards the token sampled before it.
//!
//! **Invariant:** the cache holds every token fed so far and never the last
//! sampled one; the next step feeds it. This is what lets the next chat turn
//! start from the cache without re-reading anything.

use crate::constraint::{Constraint, Grammar, Mask};
use crate::detok::StreamDecoder;
use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::model::Model;
use crate::sampling::{sample, Rng, SamplingParams};
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
}

/// The loop's whole state between two steps.
#[derive(Clone)]
pub struct SamplingState {
    /// Steps taken, in `0..=max_new_tokens`.
    pub step: usize,
    /// Per sequence: it has finished and its output is final.
    pub done: Vec<bool>,
    pub finish: Vec<Option<FinishReason>>,
    /// Per sequence: the input of the next step.
    pub last_token: Vec<u32>,
    /// Per sequence: the position of `last_token`; it stops advancing once the
    /// sequence is done.
    pub last_token_pos: Vec<usize>,
    /// `batch × max_new_tokens` buffer of sampled tokens; `PAD` after a
    /// sequence's end (the seed's masking of tokens after the end token).
    pub predicted_tokens: Vec<Vec<u32>>,
    pub cache: KvCache,
    /// One generator per sequence, sequence `b` seeded with `seed + b`, so
    /// what a sequence draws never depends on the others: variant `b` of a
    /// batch is the reply a single run with seed `seed + b` gives.
    pub rngs: Vec<Rng>,
    /// Cache length when the loop began: the prompt and earlier turns.
    pub init_cache_length: usize,
    /// The prefill's logits for the prompt's last position, used by step 0.
    pending_logits: Option<Vec<f32>>,
    /// Tokens before the loop that the penalties may see.
    penalty_context: Vec<u32>,
    text: Vec<TextState>,
    /// Per sequence: where it is in the grammar, when there is one.
    constraints: Vec<Option<Constraint>>,
    /// Per sequence: its next mask, computed beside a pass a scheduler ran
    /// (`MaskSlot`), for the step that takes that pass's logits.
    precomputed: Vec<Option<Mask>>,
}

/// A one-sequence state's next mask, to compute on another thread while
/// the forward pass the scheduler runs for it (and others) goes on.
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

impl SamplingState {
    /// The cache a one-sequence state's next step feeds, and where its
    /// mask goes (with a grammar): both borrowed at once.
    pub(crate) fn cache_and_mask(&mut self) -> (&mut KvCache, Option<MaskSlot<'_>>) {
        let slot = match (self.constraints.first_mut(), self.precomputed.first_mut()) {
            (Some(Some(constraint)), Some(out)) => Some(MaskSlot { constraint, out }),
            _ => None,
        };
        (&mut self.cache, slot)
    }
}

impl SamplingState {
    /// The same state, sampling with `seed` from here: a variant of a
    /// one-sequence turn that has sampled nothing yet. Its cache is shared
    /// copy-on-write with this one's.
    pub(crate) fn fork(&self, seed: u64) -> SamplingState {
        debug_assert!(self.step == 0 && self.done.len() == 1, "only an unstarted one-sequence state forks");
        SamplingState { rngs: vec![Rng::new(seed)], ..self.clone() }
    }
}

/// What a state's next step needs (see `SamplerLoop::next_input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextInput {
    /// The loop has stopped.
    Stopped,
    /// No forward pass of the caller's: the step runs as `step` runs it.
    Nothing,
    /// The model run on this token over the state's cache.
    Token(u32),
}

/// Marks buffer slots a sequence never filled.
pub const PAD: u32 = u32::MAX;

#[derive(Clone, Default)]
struct TextState {
    decoder: StreamDecoder,
    text: String,
    emitted: usize,
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
}

/// A configured loop over one model; cheap to build per request.
pub struct SamplerLoop<'a> {
    model: &'a Model,
    tokenizer: &'a Tokenizer,
    config: GenerationConfig,
}

impl<'a> SamplerLoop<'a> {
    pub fn new(model: &'a Model, tokenizer: &'a Tokenizer, config: GenerationConfig) -> Result<Self> {
        config.sampling.validate()?;
        if config.stop_strings.iter().any(String::is_empty) {
            return Err(crate::EngineError::setting("stop_strings", "a stop string is empty"));
        }
        Ok(Self { model, tokenizer, config })
    }

    pub fn config(&self) -> &GenerationConfig {
        &self.config
    }

    /// The state for `batch` sequences that continue from `cache`, which holds
    /// the whole prompt (ending in `last_token`); `prompt_logits` are the
    /// model's logits after it. `penalty_context` is the recent history the
    /// penalties may look at.
    pub fn init_state(
        &self,
        cache: KvCache,
        last_token: u32,
        prompt_logits: Vec<f32>,
        penalty_context: &[u32],
        batch: usize,
    ) -> Result<SamplingState> {
        let batch = batch.max(1);
        let cache = if batch > 1 && cache.batch() == 1 { cache.expand_batch(batch)? } else { cache };
        let pos = cache.len();
        let window = self.config.sampling.penalty_window;
        Ok(SamplingState {
            step: 0,
            done: vec![false; batch],
            finish: vec![None; batch],
            last_token: vec![last_token; batch],
            last_token_pos: vec![pos; batch],
            predicted_tokens: vec![vec![PAD; self.config.max_new_tokens]; batch],
            init_cache_length: pos,
            pending_logits: Some(prompt_logits),
            cache,
            rngs: (0..batch as u64).map(|b| Rng::new(self.config.sampling.seed.wrapping_add(b))).collect(),
            penalty_context: penalty_context[penalty_context.len().saturating_sub(window)..].to_vec(),
            text: vec![TextState::default(); batch],
            constraints: (0..batch).map(|_| self.config.grammar.as_ref().map(Grammar::start)).collect(),
            precomputed: vec![None; batch],
        })
    }

    /// Whether the loop must stop before another step, and why for the
    /// sequences still running. Marks them finished.
    fn check_stop(&self, state: &mut SamplingState) -> bool {
        if state.done.iter().all(|&d| d) {
            return true;
        }
        let reason = if state.step >= self.config.max_new_tokens {
            FinishReason::MaxTokens
        } else if state.pending_logits.is_none() && state.cache.is_full() {
            FinishReason::CacheFull
        } else {
            return false;
        };
        for i in 0..state.done.len() {
            if !state.done[i] {
                state.done[i] = true;
                state.finish[i] = Some(reason);
            }
        }
        true
    }

    /// One step for every running sequence. `None` once the loop has stopped;
    /// after that every sequence has a finish reason. The events include the
    /// text still held back from sequences the stop check just finished.
    pub fn step(&self, state: &mut SamplingState) -> Result<Option<Vec<TokenEvent>>> {
        self.step_given(state, None)
    }

    /// What the next step needs: nothing (the loop has stopped), no forward
    /// pass (the prompt's logits are pending), or the model run on this
    /// token of a one-sequence state (so a scheduler can batch that pass
    /// with other states' and hand the logits to `step_given`).
    pub fn next_input(&self, state: &mut SamplingState) -> NextInput {
        if self.check_stop(state) {
            NextInput::Stopped
        } else if state.pending_logits.is_some() || state.done.len() != 1 {
            NextInput::Nothing
        } else {
            NextInput::Token(state.last_token[0])
        }
    }

    /// `step`, with the logits of a one-sequence state's forward pass
    /// already run (over `state.cache`, on the token `next_input` named).
    pub fn step_given(&self, state: &mut SamplingState, given: Option<Vec<f32>>) -> Result<Option<Vec<TokenEvent>>> {
        if self.check_stop(state) {
            return Ok(None);
        }
        let mut chosen_on_device = None;
        // Each constrained sequence's mask: computed while the forward pass
        // runs, where this step runs it; else now.
        let mut masks: Vec<Option<Mask>> = Vec::new();
        let mut logits: Vec<Vec<f32>> = match (state.pending_logits.take(), given) {
            (Some(first), _) => vec![first; state.done.len()],
            (None, Some(given)) => vec![given],
            (None, None) => {
                let inputs: Vec<Vec<u32>> = state.last_token.iter().map(|&t| vec![t]).collect();
                let (cache, constraints, done) = (&mut state.cache, &mut state.constraints, &state.done);
                let (logits, computed) = std::thread::scope(|s| {
                    let pending: Vec<_> = constraints
                        .iter_mut()
                        .zip(done)
                        .map(|(c, &d)| c.as_mut().filter(|_| !d).map(|c| s.spawn(move || c.mask())))
                        .collect();
                    let logits = self.model.forward(&inputs, cache);
                    let computed: Vec<Option<Result<Mask>>> = pending
                        .into_iter()
                        .map(|h| {
                            h.map(|h| {
                                h.join().unwrap_or_else(|_| {
                                    Err(crate::EngineError::setting("response_format", "the grammar's thread panicked"))
                                })
                            })
                        })
                        .collect();
                    (logits, computed)
                });
                masks = computed.into_iter().map(Option::transpose).collect::<Result<_>>()?;
                let logits = logits?;
                let s = &self.config.sampling;
                if self.model.runs_graph()
                    && s.is_greedy()
                    && s.penalties_inactive()
                    && self.config.top_logprobs == 0
                    && self.config.grammar.is_none()
                {
                    chosen_on_device = Some(crate::sampling::greedy_on_device(&logits, &self.config.forbidden_tokens)?);
                    vec![Vec::new(); inputs.len()]
                } else {
                    logits.to_vec2()?
                }
            }
        };
        if masks.is_empty() {
            masks = (0..state.done.len())
                .map(|b| match (&mut state.constraints[b], state.precomputed[b].take()) {
                    (Some(_), Some(ready)) if !state.done[b] => Ok(Some(ready)),
                    (Some(c), _) if !state.done[b] => c.mask().map(Some),
                    _ => Ok(None),
                })
                .collect::<Result<_>>()?;
        }
        let mut events = Vec::new();
        for (b, row) in logits.iter_mut().enumerate() {
            if state.done[b] {
                continue;
            }
            let mut logprobs = None;
            let token = match &chosen_on_device {
                Some(ids) => ids[b],
                None => {
                    for &t in &self.config.forbidden_tokens {
                        if let Some(l) = row.get_mut(t as usize) {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                    if let Some(mask) = &masks[b] {
                        mask.apply(row, &self.config.end_tokens);
                    }
                    let recent = recent_tokens(
                        &state.penalty_context,
                        &state.predicted_tokens[b][..state.step],
                        self.config.sampling.penalty_window,
                    );
                    if self.config.top_logprobs > 0 {
                        // Sampling rewrites the row; the model's own view is kept first.
                        let model_view = row.clone();
                        let token = sample(row, &recent, &self.config.sampling, &mut state.rngs[b]);
                        logprobs = Some(Logprobs::of(&model_view, token, self.config.top_logprobs));
                        token
                    } else {
                        sample(row, &recent, &self.config.sampling, &mut state.rngs[b])
                    }
                }
            };
            if let (Some(c), false) = (&mut state.constraints[b], self.config.end_tokens.contains(&token)) {
                c.consume(token)?;
            }
            state.predicted_tokens[b][state.step] = token;
            state.last_token[b] = token;
            state.last_token_pos[b] += 1;
            let mut finish = None;
            let mut text = String::new();
            if self.config.end_tokens.contains(&token) {
                finish = Some(FinishReason::EndToken);
                text = flush(&mut state.text[b]);
            } else {
                let ts = &mut state.text[b];
                let piece = ts.decoder.push(self.tokenizer.token_bytes(token));
                ts.text.push_str(&piece);
                match find_stop(&ts.text, ts.emitted, &self.config.stop_strings) {
                    Some(at) => {
                        ts.text.truncate(at);
                        text = ts.text[ts.emitted.min(at)..].to_string();
                        ts.emitted = at;
                        finish = Some(FinishReason::StopString);
                    }
                    None => {
                        let safe = ts.text.len() - held_back(&ts.text, &self.config.stop_strings);
                        if safe > ts.emitted {
                            text = ts.text[ts.emitted..safe].to_string();
                            ts.emitted = safe;
                        }
                    }
                }
            }
            if let Some(f) = finish {
                state.done[b] = true;
                state.finish[b] = Some(f);
            }
            events.push(TokenEvent { sequence: b, token, text, finish, logprobs });
        }
        state.step += 1;
        if self.check_stop(state) {
            for ev in events.iter_mut() {
                if ev.finish.is_none() {
                    ev.finish = state.finish[ev.sequence];
                    ev.text.push_str(&flush(&mut state.text[ev.sequence]));
                }
            }
        }
        Ok(Some(events))
    }

    /// Stops the loop from outside (the user pressed Stop). Running sequences
    /// finish as `Cancelled`; returns the text they still held back.
    pub fn cancel(&self, state: &mut SamplingState) -> Vec<TokenEvent> {
        let mut events = Vec::new();
        for b in 0..state.done.len() {
            if !state.done[b] {
                state.done[b] = true;
                state.finish[b] = Some(FinishReason::Cancelled);
                let text = flush(&mut state.text[b]);
                events.push(TokenEvent {
                    sequence: b,
                    token: PAD,
                    text,
                    finish: Some(FinishReason::Cancelled),
                    logprobs: None,
                });
            }
        }
        events
    }

    /// Step by step, as an iterator; drop it (and call `cancel`) to stop early.
    pub fn stream<'s>(&'s self, state: &'s mut SamplingState) -> impl Iterator<Item = Result<Vec<TokenEvent>>> + 's {
        std::iter::from_fn(move || self.step(state).transpose())
    }

    /// The fused loop: runs to the end and returns every sequence's output.
    pub fn run(&self, state: &mut SamplingState) -> Result<Vec<SequenceOutput>> {
        while self.step(state)?.is_some() {}
        Ok(self.outputs(state))
    }

    /// Each sequence's tokens and text so far.
    pub fn outputs(&self, state: &SamplingState) -> Vec<SequenceOutput> {
        (0..state.done.len())
            .map(|b| SequenceOutput {
                tokens: sequence_tokens(state, b).to_vec(),
                text: state.text[b].text.clone(),
                finish: state.finish[b].unwrap_or(FinishReason::Cancelled),
            })
            .collect()
    }
}

/// Sequence `b`'s sampled tokens, up to and including its end token.
pub fn sequence_tokens(state: &SamplingState, b: usize) -> &[u32] {
    let row = &state.predicted_tokens[b];
    let n = row.iter().position(|&t| t == PAD).unwrap_or(row.len());
    &row[..n]
}

fn recent_tokens(context: &[u32], generated: &[u32], window: usize) -> Vec<u32> {
    let generated: Vec<u32> = generated.iter().copied().filter(|&t| t != PAD).collect();
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
fn find_stop(text: &str, emitted: usize, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter_map(|s| {
            let from = floor_char_boundary(text, emitted.saturating_sub(s.len()));
            text[from..].find(s.as_str()).map(|i| from + i)
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
        assert_eq!(find_stop("a ### b", 0, &stops), Some(2));
        assert_eq!(find_stop("a User: b", 3, &stops), Some(2));
    }

    #[test]
    fn penalty_window_mixes_context_and_output() {
        assert_eq!(recent_tokens(&[1, 2, 3], &[4, 5], 3), vec![3, 4, 5]);
        assert_eq!(recent_tokens(&[1, 2, 3], &[4, 5, PAD], 10), vec![1, 2, 3, 4, 5]);
        assert_eq!(recent_tokens(&[1], &[4, 5, 6], 2), vec![5, 6]);
    }
}
