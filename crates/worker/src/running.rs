//! The one scheduler every local reply runs through: a chat reply, its
//! variants ("Generate N"), an API request with any `n`, a continuation and
//! a replay are all `RunningReply`s, each one engine `Turn` of one or more
//! sequences. Each worker turn runs the decode steps of every sequence that
//! is ready, of every reply, as one forward pass, and advances the others a
//! prefill chunk each, so no reply takes the worker alone and a long prompt
//! holds up the others for a chunk at most.
//!
//! A reply of several sequences reads its prompt once and its variants fork
//! from it (`Turn::set_variants`): variant `b` samples with the seed + `b`
//! and is the reply a single run with that seed gives. A replay reads its
//! prompt through the recorded passes, compares each token with the
//! record, and writes nothing to the conversation.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use hearth_engine::{Advance, DecodeInput, Ended, Engine, EngineError, Session, Turn};
use hearth_store::MessageStatus;
use tokio_util::sync::CancellationToken;

use super::job::ReplyJob;
use super::reply::{
    finished_replies, internal_error, job_config, prompt_ids, record_passes, Finished, Prompt, RunRecord, Written,
    FLUSH_INTERVAL, FLUSH_TOKENS,
};
use super::shared::{ActiveJob, Queued};
use crate::error::AppError;
use crate::events::{GenerationEvent, ReplayOutcome};
use crate::locks::lock;
use crate::panic_message;
use crate::thread::{Work, WorkerThread};

/// Prompt tokens read per turn while other replies are running: about a
/// second of prefill here, so their tokens keep coming. Alone, a reply
/// reads llama.cpp's 512 at a time.
const SHARED_PREFILL_ROWS: usize = 128;

/// The logits of a reply's decode steps, where `advance_all` ran them in a
/// pass with others'.
type Given = Option<Result<Vec<Vec<f32>>, AppError>>;

/// One reply between the worker's turns.
pub(super) struct RunningReply {
    job: ReplyJob,
    cancel: CancellationToken,
    /// Frees the conversation when the reply ends, however it ends.
    active: Option<ActiveJob>,
    run: ReplyRun,
    /// Its sequences; `None` once lost to a panic.
    turn: Option<Turn>,
    written: Vec<Written>,
    unsaved: usize,
    last_flush: Instant,
}

/// A replay's own state: the tokens it must give again, and the
/// conversation's cache, kept aside while the replay runs on a copy.
pub(super) struct ReplayRun {
    pub recorded: Vec<u32>,
    pub produced: Vec<u32>,
    pub outcome: ReplayOutcome,
    pub original: Option<Session>,
}

/// What a reply runs from, fixed when it starts (`start`, `start_replay`).
pub(super) struct ReplyRun {
    pub engine: Arc<Engine>,
    /// Where its first sequence's session goes back to in `Caches`.
    pub cache_key: i64,
    pub prompt: Vec<u32>,
    pub context: usize,
    pub dropped: usize,
    pub seed: u32,
    /// Set for a replay.
    pub replay: Option<ReplayRun>,
}

impl RunningReply {
    fn sequences(&self) -> usize {
        self.written.len()
    }
}

impl WorkerThread {
    /// Runs work until shutdown. Nothing a job does stops the loop: a panic
    /// fails that job alone (see `reply`, `RunningReply` and `load`), and
    /// this catch is the last resort for one outside them.
    ///
    /// Replies run side by side, up to `MAX_RUNNING`, each advancing one
    /// prefill chunk or one token of each of its sequences in turn; a model
    /// load or clearing the caches waits until none runs.
    pub(crate) fn run(mut self) {
        let mut running: Vec<RunningReply> = Vec::new();
        loop {
            let work = if running.is_empty() {
                match self.next() {
                    Some(w) => Some(w),
                    None => break,
                }
            } else {
                self.next_beside(running.len())
            };
            if let Some(work) = work {
                let (loading, clearing) = (matches!(work, Work::Load(_)), matches!(work, Work::ClearCaches));
                let outcome = catch_unwind(AssertUnwindSafe(|| match work {
                    Work::Load(path) => self.load(path),
                    Work::ClearCaches => self.caches.clear_all(),
                    Work::Reply(queued) => running.extend(self.admit(*queued)),
                }));
                if let Err(panic) = outcome {
                    tracing::error!("the worker recovered from a panic: {}", panic_message(&*panic));
                }
                // A reply's `ActiveJob` frees its conversation, even on a panic.
                let mut q = lock(&self.shared.queue);
                if loading {
                    q.model.loading = None;
                }
                if clearing {
                    q.clear_caches = false;
                }
            }
            // One step each; decode steps as one pass.
            self.advance_all(&mut running);
        }
    }

    /// Starts a reply beside the others; `None` if it ended at once (stopped
    /// while queued, no model, a prompt that does not fit, a panic).
    pub(super) fn admit(&mut self, queued: Queued) -> Option<RunningReply> {
        let Queued { job, owner, cancel } = queued;
        let active = ActiveJob { shared: self.shared.clone(), owner };
        let sequences = 1 + job.variant_ids.len();
        if cancel.is_cancelled() && job.replay.is_none() {
            drop(active);
            let stopped = vec![Finished::stopped_before_start(&job.prefix); sequences];
            self.end_reply(&job, Ok(stopped), &vec![job.prefix.clone(); sequences], None, &cancel);
            return None;
        }
        let started = catch_unwind(AssertUnwindSafe(|| match job.replay.is_some() {
            true => self.start_replay(&job, &cancel),
            false => self.start(&job),
        }))
        .unwrap_or_else(|panic| {
            // Its cache may be what failed: this conversation starts cold.
            self.caches.forget_for(&job);
            Err(internal_error(&job, &*panic))
        });
        match started {
            Ok((run, mut turn)) => {
                // Stop reaches a long prefill within a layer, not a chunk.
                let stopped = cancel.clone();
                turn.set_stop(Arc::new(move || stopped.is_cancelled()));
                let written: Vec<Written> = (0..sequences)
                    .map(|_| {
                        let mut w = Written::new(&job);
                        w.watch_thinking(&run.engine, &job);
                        w
                    })
                    .collect();
                Some(RunningReply {
                    written,
                    job,
                    cancel,
                    active: Some(active),
                    run,
                    turn: Some(turn),
                    unsaved: 0,
                    last_flush: Instant::now(),
                })
            }
            Err(error) => {
                drop(active);
                match job.replay {
                    Some(_) => (job.events)(GenerationEvent::Error { error }),
                    None => self.end_reply(&job, Err(error), &vec![job.prefix.clone(); sequences], None, &cancel),
                }
                None
            }
        }
    }

    /// The first sequence's turn over the conversation's cache (or the
    /// request cache sharing most of the prompt).
    fn start(&mut self, job: &ReplyJob) -> Result<(ReplyRun, Turn), AppError> {
        let engine = self.loaded_engine()?;
        (job.events)(GenerationEvent::Started { reply_id: job.reply_id });
        self.config.test_hooks.panic_if(job.messages.last().map_or("", |m| m.content.as_str()));
        let Prompt { ids: prompt, context, dropped, reply_start } = prompt_ids(&engine, job, &job.settings)?;
        let (mut config, seed) = job_config(&engine, job)?;
        // A draft model is opened and checked before any cache is taken:
        // one that cannot draft fails the reply with the reason, and the
        // conversation keeps its cache.
        if let hearth_engine::Speculation::Draft { .. } = config.speculation {
            // The graph pass (a GPU's) drafts nothing (`Turn::begin_sampling`);
            // validated settings name a draft model.
            match (engine.model().runs_graph(), job.settings.draft_model.as_deref()) {
                (false, Some(path)) => {
                    let hashing = self.config.hash_model_files.then_some(&self.store);
                    config.draft_model = Some(self.drafts.get(&engine, path, hashing)?);
                }
                _ => config.speculation = hearth_engine::Speculation::Off,
            }
        }
        let draft_engine = config.draft_model.as_ref().map(|d| &**d.engine());
        let (cache_key, session) = self.caches.take_for(&engine, job, &prompt, context, draft_engine);
        let session = session.unwrap_or_else(|| engine.new_session(Some(context)));
        match session.into_turn(engine.model(), prompt.clone(), config) {
            Ok(mut turn) => {
                turn.set_variants(1 + job.variant_ids.len()).expect("a turn that has not sampled takes variants");
                turn.set_checkpoint_at(reply_start);
                let reading = turn.prefill_progress();
                let tokens = prompt.len() as u32;
                let cached = tokens - reading.map_or(0, |p| p.total as u32);
                (job.events)(GenerationEvent::Prompt { tokens, cached });
                if let Some(p) = reading {
                    (job.events)(GenerationEvent::Prefill { done: p.done as u32, total: p.total as u32 });
                }
                Ok((ReplyRun { engine, cache_key, prompt, context, dropped, seed, replay: None }, turn))
            }
            Err((session, e)) => {
                self.caches.put(cache_key, session, context, false);
                Err(e.into())
            }
        }
    }

    /// One worker turn of every running reply: every sequence ready for a
    /// decode step runs it in one forward pass (the weights read once for
    /// all), the others (reading their prompt, stopping, ending) a step
    /// each. Ended replies are recorded and dropped.
    pub(super) fn advance_all(&mut self, running: &mut Vec<RunningReply>) {
        let sharing = running.len();
        let mut given: Vec<Given> = running.iter().map(|_| None).collect();
        if let Some(engine) = running.first().map(|r| r.run.engine.clone()) {
            let model = engine.model();
            // Per step: the reply it is of, and its rows (the last token,
            // then any draft to verify).
            let mut ready = Vec::new();
            let mut tokens: Vec<&[u32]> = Vec::new();
            let mut caches = Vec::new();
            let mut masks = Vec::new();
            for (i, r) in running.iter_mut().enumerate() {
                let Some(turn) = r.turn.as_mut().filter(|_| !r.cancel.is_cancelled()) else { continue };
                for DecodeInput { tokens: rows, cache, mask } in turn.decode_inputs(model) {
                    ready.push(i);
                    tokens.push(rows);
                    caches.push(cache);
                    masks.extend(mask);
                }
            }
            if ready.len() > 1 {
                // Grammars' masks are computed beside the pass (a thread
                // each), so a constrained reply costs little more.
                let pass = std::thread::scope(|s| {
                    for mask in masks.drain(..) {
                        // A panic leaves no mask; the step computes it again.
                        s.spawn(move || drop(catch_unwind(AssertUnwindSafe(|| mask.compute()))));
                    }
                    catch_unwind(AssertUnwindSafe(|| model.decode_rows_many(&tokens, &mut caches)))
                });
                let rows: Vec<usize> = tokens.iter().map(|t| t.len()).collect();
                drop((tokens, caches));
                match pass {
                    Ok(Ok(logits)) => {
                        let mut logits = logits.into_iter();
                        for (&i, &n) in ready.iter().zip(&rows) {
                            given[i]
                                .get_or_insert_with(|| Ok(Vec::new()))
                                .as_mut()
                                .expect("only logits so far")
                                .extend(logits.by_ref().take(n));
                        }
                    }
                    Ok(Err(e)) => {
                        let error: AppError = e.into();
                        ready.iter().for_each(|&i| given[i] = Some(Err(error.clone())));
                    }
                    Err(panic) => {
                        for &i in &ready {
                            // Their caches may be half written: these conversations start cold.
                            running[i].turn = None;
                            self.caches.forget_for(&running[i].job);
                            given[i] = Some(Err(internal_error(&running[i].job, &*panic)));
                        }
                    }
                }
            }
        }
        let mut still = Vec::with_capacity(sharing);
        for (mut r, given) in running.drain(..).zip(given) {
            if self.advance(&mut r, sharing, given) {
                still.push(r);
            }
        }
        *running = still;
    }

    /// One turn of `r` (`sharing`: how many replies are running), with the
    /// logits of the decode steps `advance_all` ran with others; false once
    /// it has ended and been recorded.
    fn advance(&mut self, r: &mut RunningReply, sharing: usize, given: Given) -> bool {
        let step = catch_unwind(AssertUnwindSafe(|| self.step(r, sharing, given)));
        let result = match step {
            Ok(Ok(true)) => return true,
            Ok(Ok(false)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(panic) => {
                // Its sessions went with the turn: this conversation starts cold.
                r.turn = None;
                self.caches.forget_for(&r.job);
                Err(internal_error(&r.job, &*panic))
            }
        };
        let ended = catch_unwind(AssertUnwindSafe(|| self.end(r, result)));
        if let Err(panic) = ended {
            r.active = None;
            (r.job.events)(GenerationEvent::Error { error: internal_error(&r.job, &*panic) });
        }
        false
    }

    /// Runs one prefill chunk, or one token of each sequence (from `given`
    /// logits where its forward pass ran with others'); true while there is
    /// more.
    fn step(&mut self, r: &mut RunningReply, sharing: usize, given: Given) -> Result<bool, AppError> {
        let engine = r.run.engine.clone();
        let (model, tokenizer) = (engine.model(), engine.tokenizer());
        // A shared pass that failed (or panicked, taking the turn) fails the reply.
        let given = given.transpose()?;
        if r.turn.is_none() {
            return Ok(false);
        }
        if r.cancel.is_cancelled() {
            cancel_all(r);
            return Ok(false);
        }
        let turn = r.turn.as_mut().expect("checked above");
        if turn.is_prefilling() {
            turn.set_prefill_rows(if sharing > 1 { SHARED_PREFILL_ROWS } else { hearth_engine::model::PREFILL_CHUNK });
            let p = match turn.advance(model, tokenizer) {
                Ok(Advance::Prefill(p)) => p,
                Ok(_) => unreachable!("a turn reading its prompt advances by a prefill"),
                // Stopped part way through a prefill chunk: as if before it.
                Err(EngineError::Stopped) => {
                    cancel_all(r);
                    return Ok(false);
                }
                Err(e) => return Err(e.into()),
            };
            (r.job.events)(GenerationEvent::Prefill { done: p.done as u32, total: p.total as u32 });
            if let (Some(replay), false) = (&mut r.run.replay, turn.is_prefilling()) {
                replay.outcome.processed_tokens = turn.stats().processed_tokens as u32;
            }
            return Ok(true);
        }
        let events = match given {
            Some(logits) => turn.advance_given(model, tokenizer, logits)?,
            None => turn.advance(model, tokenizer)?,
        };
        let events = match events {
            Advance::Tokens(events) => events,
            Advance::Done => return Ok(false),
            Advance::Prefill(_) => unreachable!("the prompt is read"),
        };
        r.unsaved += events.len();
        for e in &events {
            r.written[e.sequence].take(e);
        }
        for (b, w) in r.written.iter_mut().enumerate() {
            w.unsent.send_if_due(&*r.job.events, b);
        }
        let mut more = !turn.sequences().iter().all(|s| s.is_done());
        // A replay ends at its first difference.
        if let Some(replay) = &mut r.run.replay {
            replay.produced.extend(events.iter().map(|e| e.token));
            let differs = replay.produced.iter().zip(&replay.recorded).any(|(a, b)| a != b)
                || replay.produced.len() > replay.recorded.len();
            more &= !differs;
        }
        if r.job.stored()
            && r.run.replay.is_none()
            && (r.unsaved >= FLUSH_TOKENS || r.last_flush.elapsed() >= FLUSH_INTERVAL)
        {
            for (id, w) in r.job.reply_ids().into_iter().zip(&r.written) {
                self.store.update_reply(id, &w.text, MessageStatus::Streaming, None)?;
            }
            r.unsaved = 0;
            r.last_flush = Instant::now();
        }
        Ok(more)
    }

    /// Hands the sessions back to the caches and records how the reply ended.
    fn end(&mut self, r: &mut RunningReply, result: Result<(), AppError>) {
        for (b, w) in r.written.iter_mut().enumerate() {
            w.unsent.send(&*r.job.events, b);
        }
        if r.run.replay.is_some() {
            return self.end_replay(r, result);
        }
        let n = r.sequences();
        let passes = r.turn.as_ref().map(|t| record_passes(t.prompt_passes()));
        let failed = result.err();
        let output = match r.turn.take().map(Turn::end) {
            Some(Ended { session, others, output }) => {
                let kept = failed.is_none() && r.job.stored();
                self.caches.put(r.run.cache_key, session, r.run.context, kept);
                // The other variants' caches, so that picking one continues from it.
                if kept {
                    self.caches.add_alternates(r.job.conversation_id, others);
                }
                output
            }
            None => None,
        };
        let finished = match (failed, output) {
            (Some(e), _) => Err(e),
            // Stopped before its first token, or lost before it: nothing sampled.
            (None, None) => Ok(vec![Finished::stopped_before_start(&r.job.prefix); n]),
            (None, Some(out)) => {
                let run = RunRecord {
                    prompt: &r.run.prompt,
                    passes: passes.unwrap_or_default(),
                    context: r.run.context,
                    dropped: r.run.dropped,
                    seed: r.run.seed,
                };
                let mut done = finished_replies(&r.run.engine, &r.job, &run, &out, &mut r.written);
                done.resize_with(n, || Finished::stopped_before_start(&r.job.prefix));
                Ok(done)
            }
        };
        // Let go of in `end_reply`, as soon as no tool calls can follow.
        let active = r.active.take();
        let last_message = r.job.messages.last().map_or("", |m| m.content.as_str());
        self.config.test_hooks.panic_if(last_message.strip_suffix(":after").unwrap_or(""));
        let texts: Vec<String> = r.written.iter().map(|w| w.text.clone()).collect();
        self.end_reply(&r.job, finished, &texts, active, &r.cancel);
    }

    /// A replay's end: the conversation's own cache back (or, for a cold
    /// one, what a matching replay computed), and the outcome.
    fn end_replay(&mut self, r: &mut RunningReply, result: Result<(), AppError>) {
        let mut replay = r.run.replay.take().expect("a replay");
        let session = r.turn.take().map(|t| t.end().session);
        let o = &mut replay.outcome;
        o.stopped = r.cancel.is_cancelled();
        let produced = &replay.produced;
        o.compared = produced.len() as u32;
        o.first_difference = produced.iter().zip(&replay.recorded).position(|(a, b)| a != b).map(|i| i as u32);
        if o.first_difference.is_none() && !o.stopped && produced.len() != replay.recorded.len() {
            o.first_difference = Some(produced.len().min(replay.recorded.len()) as u32);
        }
        o.matched = !o.stopped && o.first_difference.is_none();
        let conversation = r.job.conversation_id;
        match (replay.original.take(), session) {
            (Some(original), _) => self.caches.put(conversation, original, r.run.context, false),
            // A cold conversation keeps what the replay computed: the same
            // cache its reply was written from.
            (None, Some(session)) if result.is_ok() && o.matched => {
                self.caches.put(conversation, session, r.run.context, true)
            }
            _ => {}
        }
        r.active = None;
        if let Some(engine) = self.engine.clone() {
            self.caches.save_pending(&engine, &self.drafts);
        }
        (r.job.events)(match result {
            Ok(()) => GenerationEvent::Replayed { outcome: replay.outcome },
            Err(error) => GenerationEvent::Error { error },
        });
    }
}

/// Stops every sequence of `r` between two steps, keeping the text they held back.
fn cancel_all(r: &mut RunningReply) {
    if let Some(turn) = &mut r.turn {
        for e in &turn.cancel() {
            r.written[e.sequence].take(e);
        }
    }
}
