//! What every reply shares, whatever its sequences: its prompt (the
//! conversation fitted into the context), its sampler's configuration, what
//! each sequence has written and still has to send, and how its end is
//! recorded in SQLite and told to the UI. `running` runs the turns.

use std::time::{Duration, Instant};

use hearth_engine::sampler_loop::PAD;
use hearth_engine::{FinishReason, SamplingParams, Thinking, ThinkingTracker, TokenEvent};
use hearth_store::{
    ConversationSettings, DraftStats, MessageStatus, ReplayRecord, ReplyStats, TokenChoice, TokenChoices,
};

use crate::error::{AppError, ErrorKind};
use crate::events::GenerationEvent;
use crate::job::ReplyJob;
use crate::panic_message;
use crate::shared::ActiveJob;
use crate::thread::WorkerThread;
use crate::tool_rounds::PendingCalls;
use tokio_util::sync::CancellationToken;

/// Flush a streaming reply to disk at least this often...
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(250);
/// ...or after this many tokens, whichever comes first.
pub(super) const FLUSH_TOKENS: usize = 32;

impl WorkerThread {
    /// Records how a reply (and its variants) ended, then says so to the UI.
    ///
    /// `active` is the reply's hold on its conversation: let go at once (the
    /// cache is saved with the conversation free, and an immediate next
    /// message is not refused as busy), but for a reply whose tool calls may
    /// follow: that one holds it until its calls do (`tool_rounds`), or
    /// until just before its end is told where it made none.
    pub(super) fn end_reply(
        &mut self,
        job: &ReplyJob,
        result: Result<Vec<Finished>, AppError>,
        texts: &[String],
        active: Option<ActiveJob>,
        cancel: &CancellationToken,
    ) {
        let events = &job.events;
        let active = match job.tool_round {
            Some(_) => active,
            None => {
                drop(active);
                None
            }
        };
        match result {
            Ok(done) => {
                let mut saved = Ok(());
                let mut calls = Vec::new();
                for (b, (id, d)) in job.reply_ids().into_iter().zip(&done).enumerate().filter(|_| job.stored()) {
                    let status = if d.reason == FinishReason::Cancelled {
                        MessageStatus::Interrupted
                    } else {
                        MessageStatus::Complete
                    };
                    // A finished reply's calls come out of its text and wait to run.
                    let (text, made) = match (&self.engine, job.tools.offered() && status == MessageStatus::Complete) {
                        (Some(engine), true) => tool_calls_of(engine, id, &d.text),
                        _ => (d.text.clone(), Vec::new()),
                    };
                    saved = saved.and(self.store.update_reply(id, &text, status, Some(&d.stats)));
                    saved = saved.and(self.store.set_tool_calls(id, &made));
                    if b == 0 {
                        calls = made;
                    }
                    // A reply continued from text it has no tokens for
                    // would show choices that do not line up with it.
                    let aligned = job.prefix.is_empty() || job.prefix_ids.is_some();
                    saved = saved.and(if aligned && !d.choices.tokens.is_empty() {
                        self.store.set_token_choices(id, &d.choices)
                    } else {
                        self.store.clear_token_choices(id)
                    });
                }
                // A conversation remembers the model that replied in it.
                if let (true, Some(engine)) = (job.stored(), &self.engine) {
                    saved = saved.and(
                        self.store.set_conversation_model(job.conversation_id, &engine.path().display().to_string()),
                    );
                }
                // Saved before the reply is reported done, so an app closed
                // right after still finds its cache.
                if let Some(engine) = self.engine.clone() {
                    self.caches.save_pending(&engine, &self.drafts);
                }
                let calls_run = match (&job.tool_round, saved.is_ok() && !calls.is_empty()) {
                    (Some(round), true) => Some(PendingCalls::mark_busy(&self.shared, &self.store, job, round, cancel)),
                    _ => None,
                };
                drop(active);
                match saved {
                    Ok(()) => events(GenerationEvent::Finished {
                        reason: if calls.is_empty() {
                            done[0].reason.as_str().to_string()
                        } else {
                            "tool_calls".into()
                        },
                        stats: done[0].stats.clone(),
                        others: done[1..].iter().map(|d| d.stats.clone()).collect(),
                        tool_calls: calls,
                    }),
                    Err(e) => events(GenerationEvent::Error { error: e.into() }),
                }
                match calls_run {
                    Some(Ok(calls)) => calls.spawn(),
                    Some(Err(error)) => events(GenerationEvent::Error { error }),
                    None => {}
                }
            }
            Err(error) => {
                drop(active);
                let stats = ReplyStats {
                    finish_reason: "error".into(),
                    error: Some(error.message.clone()),
                    ..Default::default()
                };
                for (id, text) in job.reply_ids().into_iter().zip(texts).filter(|_| job.stored()) {
                    let status = if text.is_empty() { MessageStatus::Error } else { MessageStatus::Interrupted };
                    if let Err(e) = self
                        .store
                        .update_reply(id, text, status, Some(&stats))
                        .and_then(|()| self.store.clear_token_choices(id))
                    {
                        tracing::error!("cannot record a failed reply: {e}");
                    }
                }
                events(GenerationEvent::Error { error });
            }
        }
    }
}

/// A finished reply's text without its calls, and the calls, pending, in
/// the loaded model's own format. Call ids are the reply's id and the
/// call's place, unique in the conversation.
fn tool_calls_of(
    engine: &hearth_engine::Engine,
    reply_id: i64,
    text: &str,
) -> (String, Vec<hearth_store::ToolCallRecord>) {
    let (content, calls) = engine.tool_format().parse(text, &format!("call_{reply_id}_"));
    if calls.is_empty() {
        return (text.to_string(), Vec::new());
    }
    let records = calls.into_iter().map(|c| hearth_store::ToolCallRecord::pending(c.id, c.name, c.arguments)).collect();
    (content, records)
}

/// The sampler's configuration for a reply under `s`, and the seed it
/// samples with (the settings', or a fresh one).
pub(super) fn generation_config(
    engine: &hearth_engine::Engine,
    s: &ConversationSettings,
) -> (hearth_engine::GenerationConfig, u32) {
    let seed = s.seed.unwrap_or_else(random_seed);
    let sampling = SamplingParams {
        temperature: s.temperature,
        top_k: (s.top_k > 0).then_some(s.top_k as usize),
        top_p: s.top_p,
        min_p: s.min_p,
        repeat_penalty: s.repeat_penalty,
        penalty_window: s.penalty_window as usize,
        seed: seed as u64,
        ..SamplingParams::default()
    };
    let mut config = engine.generation_config(sampling, s.max_new_tokens as usize);
    config.stop_strings = s.stop_strings.clone();
    // Validated settings parse; anything else drafts nothing.
    config.speculation =
        hearth_engine::Speculation::parse(s.speculation.as_str(), s.draft_tokens as usize).unwrap_or_default();
    config.top_logprobs = hearth_store::KEPT_ALTERNATIVES;
    (config, seed)
}

/// `generation_config` for a job: a request computes the alternatives it
/// asks for and no others (nothing keeps them, and each costs a pass over
/// the vocabulary per token).
pub(super) fn job_config(
    engine: &hearth_engine::Engine,
    job: &ReplyJob,
) -> Result<(hearth_engine::GenerationConfig, u32), AppError> {
    let (mut config, seed) = generation_config(engine, &job.settings);
    if let Some(r) = &job.request {
        // At least one, for the chosen token's own log-probability.
        config.top_logprobs = r.logprobs.map_or(0, |k| k.max(1));
        if r.ignore_end_tokens {
            config.end_tokens.clear();
        }
    }
    // A grammar asked for, or a call the tool choice requires: compiled
    // once, where the server already did for this model.
    let compiled = job.request.as_ref().and_then(|r| r.compiled.as_ref()?.for_engine(engine));
    let asked = job.request.as_ref().and_then(|r| r.grammar.clone());
    config.grammar = match compiled {
        Some(grammar) => Some(grammar.clone()),
        None => match asked.or_else(|| job.tools.call_grammar(engine.tool_format())) {
            Some(spec) => Some(engine.compile_grammar(&spec)?),
            None => None,
        },
    };
    Ok((config, seed))
}

/// What a reply's run was computed from, for its records.
pub(super) struct RunRecord<'a> {
    pub prompt: &'a [u32],
    pub passes: Vec<[u32; 3]>,
    pub context: usize,
    pub dropped: usize,
    pub seed: u32,
}

/// Each sequence of a finished reply as a reply to store: its text, stats,
/// replay record (variant b sampled with the seed + b) and token choices.
/// `out`: the turn, its sequences variant 0 first; `written`: each
/// sequence's choices and thinking, as `Written` kept them.
pub(super) fn finished_replies(
    engine: &hearth_engine::Engine,
    job: &ReplyJob,
    run: &RunRecord,
    out: &hearth_engine::TurnOutput,
    written: &mut [Written],
) -> Vec<Finished> {
    let s = &job.settings;
    let st = &out.stats;
    out.sequences
        .iter()
        .enumerate()
        .map(|(b, seq)| {
            if let Some(why) = &seq.draft_failure {
                tracing::warn!("the draft model stopped drafting for reply {}: {why}", job.reply_id);
            }
            let decode_s = seq.decode_time.as_secs_f64();
            let replay = ReplayRecord {
                model_sha256: engine.file_sha256().map(str::to_string),
                model_path: engine.path().display().to_string(),
                engine_build: hearth_engine::BUILD_ID.to_string(),
                device: hearth_engine::device::describe(engine.model().device()),
                prompt_sha256: hearth_engine::file_hash::ids_sha256(run.prompt),
                prompt_tokens: run.prompt.len() as u32,
                passes: run.passes.clone(),
                context_length: run.context as u32,
                prefix_bytes: job.prefix.len() as u32,
                prefix_ids: job.prefix_ids.clone().unwrap_or_default(),
                temperature: s.temperature,
                top_k: s.top_k,
                top_p: s.top_p,
                min_p: s.min_p,
                repeat_penalty: s.repeat_penalty,
                penalty_window: s.penalty_window,
                max_new_tokens: s.max_new_tokens,
                stop_strings: s.stop_strings.clone(),
                tokens: seq.tokens.clone(),
                seed: run.seed,
                variant: b as u32,
            };
            let generated = seq.tokens.len();
            let w = written.get_mut(b);
            let thought = w.as_ref().and_then(|w| w.thought);
            Finished {
                choices: TokenChoices { tokens: w.map(|w| std::mem::take(&mut w.choices)).unwrap_or_default() },
                text: format!("{}{}", job.prefix, seq.text),
                reason: seq.finish,
                stats: ReplyStats {
                    prompt_tokens: st.prompt_tokens as u32,
                    processed_tokens: st.processed_tokens as u32,
                    generated_tokens: generated as u32,
                    ttft_ms: st.time_to_first_token.as_secs_f64() * 1e3,
                    tokens_per_s: if decode_s > 0.0 { generated.saturating_sub(1) as f64 / decode_s } else { 0.0 },
                    finish_reason: seq.finish.as_str().to_string(),
                    stop_string: seq.stop_string.clone(),
                    // Shown as the seed this variant sampled with.
                    seed: Some(run.seed.wrapping_add(b as u32)),
                    temperature: Some(s.temperature),
                    error: None,
                    dropped_messages: run.dropped as u32,
                    replay: Some(replay),
                    thinking_tokens: thought.map(|t| t.0),
                    thinking_ms: thought.map(|t| t.1),
                    // The graph pass (a GPU's) drafts nothing (`Turn::begin_sampling`).
                    drafts: (s.speculation != hearth_store::SpeculationMode::Off && !engine.model().runs_graph())
                        .then_some(DraftStats {
                            mode: s.speculation,
                            draft_tokens: s.draft_tokens,
                            drafted: seq.drafted as u32,
                            accepted: seq.accepted as u32,
                        }),
                },
            }
        })
        .collect()
}

/// A reply's prompt, as `prompt_ids` builds it.
pub struct Prompt {
    pub ids: Vec<u32>,
    /// The context it is read in.
    pub context: usize,
    /// Messages the overflow policy left out.
    pub dropped: usize,
    /// Where the template's opening of the reply starts (see
    /// `Engine::generation_prompt_ids`), when the prompt is a chat.
    pub reply_start: Option<usize>,
}

/// The template variables a conversation's settings set.
pub fn prompt_options(settings: &ConversationSettings) -> hearth_engine::PromptOptions {
    use hearth_engine::ReasoningEffort as Effort;
    use hearth_store::ReasoningEffort;
    hearth_engine::PromptOptions {
        thinking: Some(settings.thinking),
        effort: Some(match settings.reasoning_effort {
            ReasoningEffort::Low => Effort::Low,
            ReasoningEffort::Medium => Effort::Medium,
            ReasoningEffort::High => Effort::High,
        }),
    }
}

/// The prompt's token ids for `job` under `settings`: the conversation
/// fitted into its context by the overflow policy, then the reply's text so
/// far.
pub fn prompt_ids(
    engine: &hearth_engine::Engine,
    job: &ReplyJob,
    settings: &ConversationSettings,
) -> Result<Prompt, AppError> {
    let (context, reserve) = crate::context::window(settings, engine.model().config().context_length);
    let (mut prompt, dropped, reply_start) = match job.request.as_ref().and_then(|r| r.raw_prompt.as_ref()) {
        Some(crate::RawPrompt::Text(text)) => (engine.tokenizer().encode(text, true, false)?, 0, None),
        Some(crate::RawPrompt::Ids(ids)) => (ids.clone(), 0, None),
        None => {
            let options = prompt_options(settings);
            let tools = &job.tools;
            let fitted = crate::context::fit(&job.messages, settings.overflow, context, reserve, |m| {
                engine.encode_chat_tools(m, options, tools).map(|ids| ids.len())
            })?;
            let prompt = engine.encode_chat_tools(&fitted.messages, options, tools)?;
            let opening = engine.generation_prompt_ids(options)?;
            let reply_start = opening.filter(|o| prompt.ends_with(o)).map(|o| prompt.len() - o.len());
            (prompt, fitted.dropped, reply_start)
        }
    };
    match &job.prefix_ids {
        Some(ids) => prompt.extend_from_slice(ids),
        None if !job.prefix.is_empty() => prompt.extend(engine.tokenizer().encode(&job.prefix, false, false)?),
        None => {}
    }
    if prompt.len() >= context {
        return Err(AppError::new(
            ErrorKind::PromptTooLong,
            format!("the conversation is {} tokens long but the context holds {context}; start a new conversation or raise the context length", prompt.len()),
        ));
    }
    Ok(Prompt { ids: prompt, context, dropped, reply_start })
}

/// The passes as a reply record keeps them, `[rows, kept, count]` each.
pub(super) fn record_passes(passes: &hearth_engine::Passes) -> Vec<[u32; 3]> {
    passes.runs().iter().map(|&p| p.into()).collect()
}

/// What one sequence of a reply has written so far: its text, its tokens'
/// choices, and the tokens not yet sent to the UI.
pub(super) struct Written {
    pub text: String,
    pub choices: Vec<TokenChoice>,
    pub unsent: Unsent,
    /// Where the reply is in its thinking, for a reasoning model.
    thinking: Option<ThinkingTracker>,
    /// Tokens generated this run, and when the first came.
    tokens: usize,
    first_token: Option<Instant>,
    /// The thinking block's tokens and duration, once it closed.
    pub thought: Option<(u32, f64)>,
}

impl Written {
    /// Starting from what the reply already has.
    pub fn new(job: &ReplyJob) -> Self {
        let unsent = Unsent { top_logprobs: job.request.as_ref().and_then(|r| r.logprobs), ..Unsent::default() };
        Self {
            text: job.prefix.clone(),
            choices: job.prefix_choices.clone(),
            unsent,
            thinking: None,
            tokens: 0,
            first_token: None,
            thought: None,
        }
    }

    /// Follows the reply's thinking, where the model's template marks it.
    /// The block is open at the start where the template's generation
    /// prompt opens it (never because a user's message ends with the tag);
    /// a reply continued after its block closed has nothing left to time.
    pub fn watch_thinking(&mut self, engine: &hearth_engine::Engine, job: &ReplyJob) {
        self.thinking = engine.reasoning().and_then(|format| thinking_tracker(format, job));
    }

    pub fn take(&mut self, e: &TokenEvent) {
        if e.token != PAD {
            self.tokens += 1;
            self.first_token.get_or_insert_with(Instant::now);
        }
        if let (Some(tracker), None) = (self.thinking.as_mut(), self.thought) {
            if let Thinking::Closed { tokens } = tracker.push(&e.text, self.tokens) {
                let ms = self.first_token.map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
                self.thought = Some((tokens as u32, ms));
            }
        }
        if let Some(lp) = &e.logprobs {
            let choice = TokenChoice { id: e.token, logprob: lp.logprob, top: lp.top.clone() };
            if let Some(k) = self.unsent.top_logprobs {
                self.unsent
                    .choices
                    .push(TokenChoice { top: choice.top.iter().take(k).cloned().collect(), ..choice.clone() });
            }
            self.choices.push(choice);
        }
        self.text.push_str(&e.text);
        self.unsent.text.push_str(&e.text);
        // A stop releases held-back text with no token of its own.
        if e.token != PAD {
            self.unsent.ids.push(e.token);
        }
    }
}

/// The tracker for a reply of `job` under `format`, unless what the reply
/// already has (its prefix) ended its thinking or showed it has none.
fn thinking_tracker(format: &hearth_engine::ReasoningFormat, job: &ReplyJob) -> Option<ThinkingTracker> {
    let raw = job.request.as_ref().is_some_and(|r| r.raw_prompt.is_some());
    let mut tracker = ThinkingTracker::new(format.clone(), format.opened_with(job.settings.thinking) && !raw);
    match tracker.push(&job.prefix, 0) {
        Thinking::Closed { .. } | Thinking::None => None,
        _ => Some(tracker),
    }
}

/// A panic inside a reply, as the error its conversation shows.
pub(super) fn internal_error(job: &ReplyJob, panic: &(dyn std::any::Any + Send)) -> AppError {
    let message = panic_message(panic);
    tracing::error!("reply {} in conversation {} panicked: {message}", job.reply_id, job.conversation_id);
    AppError::new(
        ErrorKind::Internal,
        format!("this reply stopped on an internal error ({message}); other conversations are unaffected"),
    )
}

/// How long generated tokens may wait to be sent with the ones after them.
pub const TOKEN_BATCH: Duration = Duration::from_millis(50);

/// Tokens generated but not yet sent to the UI.
#[derive(Default)]
pub(crate) struct Unsent {
    pub text: String,
    pub ids: Vec<u32>,
    /// Each unsent token's log-probability and alternatives, when sent
    /// (`Some(k)`: an API request, which sends k alternatives).
    pub choices: Vec<TokenChoice>,
    top_logprobs: Option<usize>,
    last_sent: Option<Instant>,
}

impl Unsent {
    pub fn send_if_due(&mut self, events: &dyn Fn(GenerationEvent), variant: usize) {
        if self.last_sent.is_none_or(|t| t.elapsed() >= TOKEN_BATCH) {
            self.send(events, variant);
        }
    }

    pub fn send(&mut self, events: &dyn Fn(GenerationEvent), variant: usize) {
        if self.text.is_empty() && self.ids.is_empty() {
            return;
        }
        events(GenerationEvent::Tokens {
            text: std::mem::take(&mut self.text),
            ids: std::mem::take(&mut self.ids),
            variant: variant as u32,
            choices: std::mem::take(&mut self.choices),
        });
        self.last_sent = Some(Instant::now());
    }
}

#[derive(Clone)]
pub(super) struct Finished {
    /// Every token of the reply with its alternatives (the prefix's first).
    choices: TokenChoices,
    text: String,
    reason: FinishReason,
    stats: ReplyStats,
}

impl Finished {
    pub fn stopped_before_start(prefix: &str) -> Self {
        Self {
            choices: TokenChoices::default(),
            text: prefix.to_string(),
            reason: FinishReason::Cancelled,
            stats: ReplyStats { finish_reason: FinishReason::Cancelled.as_str().into(), ..Default::default() },
        }
    }
}

fn random_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS; mixing in the time makes each call differ.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(opened_by_prompt: bool) -> hearth_engine::ReasoningFormat {
        hearth_engine::ReasoningFormat {
            open: "<think>".into(),
            close: "</think>".into(),
            switch: None,
            opened_by_prompt,
            answer_start: None,
            effort: None,
        }
    }

    fn job(prefix: &str) -> ReplyJob {
        ReplyJob {
            prefix: prefix.into(),
            ..ReplyJob::new(1, 2, Vec::new(), ConversationSettings::default(), Box::new(|_| {}))
        }
    }

    fn token(text: &str) -> TokenEvent {
        TokenEvent { sequence: 0, token: 7, text: text.into(), finish: None, logprobs: None }
    }

    fn written(format: &hearth_engine::ReasoningFormat, job: &ReplyJob) -> Written {
        Written { thinking: thinking_tracker(format, job), ..Written::new(job) }
    }

    #[test]
    fn a_prompt_that_opens_thinking_but_switched_off_gives_a_reply_of_answer_only() {
        // Qwen 3.5: the prompt opens the block unless `enable_thinking` is
        // false, when it ends with an empty one.
        let qwen35 = hearth_engine::ReasoningFormat { switch: Some("enable_thinking".into()), ..format(true) };
        let mut off = job("");
        off.settings.thinking = false;
        assert!(thinking_tracker(&qwen35, &off).is_some_and(|t| t.state() == Thinking::Undecided));
        assert!(thinking_tracker(&qwen35, &job("")).is_some_and(|t| t.state() == Thinking::Inside));
        // A template without a switch opens it whatever the setting.
        assert!(thinking_tracker(&format(true), &off).is_some_and(|t| t.state() == Thinking::Inside));
    }

    #[test]
    fn a_reply_records_its_thinking_tokens_up_to_the_close_tag() {
        let j = job("");
        let mut w = written(&format(false), &j);
        for t in ["<think>", "\nTwo", " and two", ".</", "think>", "\n\n4"] {
            w.take(&token(t));
        }
        assert_eq!(w.thought.map(|t| t.0), Some(5));
        assert_eq!(w.text, "<think>\nTwo and two.</think>\n\n4");
    }

    #[test]
    fn only_a_prompt_that_opens_the_block_starts_a_reply_inside_it() {
        let j = job("");
        let mut w = written(&format(true), &j);
        for t in ["Hmm", "</think>", "4"] {
            w.take(&token(t));
        }
        assert_eq!(w.thought.map(|t| t.0), Some(2));
        // Without it, a reply that mentions the tag did not think.
        let mut w = written(&format(false), &j);
        for t in ["Use", " </think>", " to close"] {
            w.take(&token(t));
        }
        assert_eq!(w.thought, None);
    }

    #[test]
    fn a_continued_reply_is_timed_only_while_its_block_is_still_open() {
        assert!(thinking_tracker(&format(false), &job("<think>\ndone</think>\n\nThe answer")).is_none());
        assert!(thinking_tracker(&format(false), &job("The answer")).is_none());
        let j = job("<think>\nstill");
        let mut w = written(&format(false), &j);
        w.take(&token(" going</think>"));
        assert_eq!(w.thought.map(|t| t.0), Some(1));
    }
}
