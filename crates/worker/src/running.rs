//! Replies that run side by side: each owns its conversation's session
//! (`OwnedTurn`); the worker runs the decode steps of all that are ready as
//! one forward pass and advances the others a prefill chunk each, so
//! several conversations stream at once and a long prompt holds up the
//! others for a chunk at most.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use hearth_engine::{Advance, Engine, EngineError, OwnedTurn};
use hearth_store::MessageStatus;
use tokio_util::sync::CancellationToken;

use super::queue::{ActiveJob, Queued};
use super::reply::{
    finished_replies, internal_error, job_config, prompt_ids, record_passes, Finished, ReplyJob, RunRecord, Written,
    FLUSH_INTERVAL, FLUSH_TOKENS,
};
use super::{test_panic_hook, WorkerThread};
use crate::error::AppError;
use crate::events::GenerationEvent;

/// Prompt tokens read per turn while other replies are running: about a
/// second of prefill here, so their tokens keep coming. Alone, a reply
/// reads llama.cpp's 512 at a time.
const SHARED_PREFILL_ROWS: usize = 128;

/// One reply of one sequence, between the worker's turns.
pub(super) struct RunningReply {
    job: ReplyJob,
    cancel: CancellationToken,
    /// Frees the conversation when the reply ends, however it ends.
    active: Option<ActiveJob>,
    engine: Arc<Engine>,
    /// Where its session goes back to in `Caches`.
    cache_key: i64,
    turn: Option<OwnedTurn>,
    prompt: Vec<u32>,
    context: usize,
    dropped: usize,
    seed: u32,
    written: Written,
    unsaved: usize,
    last_flush: Instant,
}

impl WorkerThread {
    /// Starts a reply beside the others; `None` if it ended at once (stopped
    /// while queued, no model, a prompt that does not fit, a panic).
    pub(super) fn admit(&mut self, queued: Queued) -> Option<RunningReply> {
        let Queued { job, cancel } = queued;
        let active = ActiveJob { shared: self.shared.clone(), conversation_id: job.conversation_id };
        if cancel.is_cancelled() {
            drop(active);
            let stopped = Finished::stopped_before_start(&job.prefix);
            self.end_reply(&job, Ok(vec![stopped]), std::slice::from_ref(&job.prefix));
            return None;
        }
        let started = catch_unwind(AssertUnwindSafe(|| self.start(&job))).unwrap_or_else(|panic| {
            // Its cache may be what failed: this conversation starts cold.
            self.caches.forget_for(&job);
            Err(internal_error(&job, &*panic))
        });
        match started {
            Ok(parts) => {
                let (engine, cache_key, mut turn, prompt, context, dropped, seed) = parts;
                // Stop reaches a long prefill within a layer, not a chunk.
                let stopped = cancel.clone();
                turn.set_stop(Arc::new(move || stopped.is_cancelled()));
                let mut written = Written::new(&job);
                written.watch_thinking(&engine, &job);
                Some(RunningReply {
                    written,
                    job,
                    cancel,
                    active: Some(active),
                    engine,
                    cache_key,
                    turn: Some(turn),
                    prompt,
                    context,
                    dropped,
                    seed,
                    unsaved: 0,
                    last_flush: Instant::now(),
                })
            }
            Err(error) => {
                drop(active);
                self.end_reply(&job, Err(error), std::slice::from_ref(&job.prefix));
                None
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn start(
        &mut self,
        job: &ReplyJob,
    ) -> Result<(Arc<Engine>, i64, OwnedTurn, Vec<u32>, usize, usize, u32), AppError> {
        let engine = self.loaded_engine()?;
        (job.events)(GenerationEvent::Started { reply_id: job.reply_id });
        test_panic_hook(job.messages.last().map_or("", |m| m.content.as_str()));
        let (prompt, context, dropped) = prompt_ids(&engine, job, &job.settings)?;
        let (cache_key, session) = self.caches.take_for(&engine, job, &prompt, context);
        let session = session.unwrap_or_else(|| engine.new_session(Some(context)));
        let (config, seed) = job_config(&engine, job);
        match session.into_turn(engine.model(), engine.tokenizer(), prompt.clone(), config) {
            Ok(turn) => {
                if let Some(p) = turn.prefill_progress() {
                    (job.events)(GenerationEvent::Prefill { done: p.done as u32, total: p.total as u32 });
                }
                Ok((engine, cache_key, turn, prompt, context, dropped, seed))
            }
            Err((session, e)) => {
                self.caches.put(cache_key, session, context, false);
                Err(e.into())
            }
        }
    }

    /// One turn of every running reply: those ready for a decode step run
    /// it as one forward pass (the weights read once for all), the others
    /// (reading their prompt, stopping, ending) a step each. Ended replies
    /// are recorded and dropped.
    pub(super) fn advance_all(&mut self, running: &mut Vec<RunningReply>) {
        let sharing = running.len();
        let mut given: Vec<Option<Result<Vec<f32>, AppError>>> = (0..sharing).map(|_| None).collect();
        if let Some(engine) = running.first().map(|r| r.engine.clone()) {
            let (model, tokenizer) = (engine.model(), engine.tokenizer());
            let mut ready = Vec::new();
            let mut tokens = Vec::new();
            let mut caches = Vec::new();
            for (i, r) in running.iter_mut().enumerate() {
                if r.cancel.is_cancelled() {
                    continue;
                }
                if let Some((token, cache)) = r.turn.as_mut().and_then(|t| t.decode_input(model, tokenizer)) {
                    ready.push(i);
                    tokens.push(token);
                    caches.push(cache);
                }
            }
            if ready.len() > 1 {
                let pass = catch_unwind(AssertUnwindSafe(|| model.decode_step_many(&tokens, &mut caches)));
                drop(caches);
                match pass {
                    Ok(Ok(logits)) => ready.iter().zip(logits).for_each(|(&i, l)| given[i] = Some(Ok(l))),
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
    /// logits of its decode step when `advance_all` ran it with others;
    /// false once it has ended and been recorded.
    fn advance(&mut self, r: &mut RunningReply, sharing: usize, given: Option<Result<Vec<f32>, AppError>>) -> bool {
        let step = match given {
            Some(Err(e)) => Ok(Err(e)),
            Some(Ok(logits)) => catch_unwind(AssertUnwindSafe(|| self.step(r, sharing, Some(logits)))),
            None => catch_unwind(AssertUnwindSafe(|| self.step(r, sharing, None))),
        };
        let result = match step {
            Ok(Ok(true)) => return true,
            Ok(Ok(false)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(panic) => {
                // Its session went with the turn: this conversation starts cold.
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

    /// Runs one prefill chunk or one token (from `given` logits when its
    /// forward pass ran with others'); true while there is more.
    fn step(&mut self, r: &mut RunningReply, sharing: usize, given: Option<Vec<f32>>) -> Result<bool, AppError> {
        let Some(turn) = r.turn.as_mut() else { return Ok(false) };
        let (model, tokenizer) = (r.engine.model(), r.engine.tokenizer());
        if r.cancel.is_cancelled() {
            for e in &turn.cancel(model, tokenizer) {
                r.written.take(e);
            }
            return Ok(false);
        }
        turn.set_prefill_rows(if sharing > 1 { SHARED_PREFILL_ROWS } else { hearth_engine::model::PREFILL_CHUNK });
        let advanced = match given {
            Some(logits) => turn.advance_given(model, tokenizer, logits),
            None => turn.advance(model, tokenizer),
        };
        let advanced = match advanced {
            // Stopped part way through a prefill chunk: as if before it.
            Err(EngineError::Stopped) => {
                for e in &turn.cancel(model, tokenizer) {
                    r.written.take(e);
                }
                return Ok(false);
            }
            other => other?,
        };
        match advanced {
            Advance::Prefill(p) => {
                (r.job.events)(GenerationEvent::Prefill { done: p.done as u32, total: p.total as u32 })
            }
            Advance::Tokens(events) => {
                r.unsaved += events.len();
                for e in &events {
                    r.written.take(e);
                }
                r.written.unsent.send_if_due(&r.job.events, 0);
                if r.job.stored() && (r.unsaved >= FLUSH_TOKENS || r.last_flush.elapsed() >= FLUSH_INTERVAL) {
                    self.store.update_reply(r.job.reply_id, &r.written.text, MessageStatus::Streaming, None)?;
                    r.unsaved = 0;
                    r.last_flush = Instant::now();
                }
            }
            Advance::Done => return Ok(false),
        }
        Ok(true)
    }

    /// Hands the session back to the caches and records how the reply ended.
    fn end(&mut self, r: &mut RunningReply, result: Result<(), AppError>) {
        r.written.unsent.send(&r.job.events, 0);
        let finished = match (r.turn.take(), result) {
            (Some(turn), result) => {
                let passes = record_passes(turn.prompt_passes());
                let (session, out) = turn.finish(r.engine.model(), r.engine.tokenizer());
                let ok = result.is_ok() && out.is_ok();
                self.caches.put(r.cache_key, session, r.context, ok && r.job.stored());
                match (result, out) {
                    (Err(e), _) => Err(e),
                    (Ok(()), Err(e)) => Err(e.into()),
                    (Ok(()), Ok(None)) => Ok(vec![Finished::stopped_before_start(&r.job.prefix)]),
                    (Ok(()), Ok(Some(out))) => {
                        let run = RunRecord {
                            prompt: &r.prompt,
                            passes,
                            context: r.context,
                            dropped: r.dropped,
                            seed: r.seed,
                        };
                        Ok(finished_replies(&r.engine, &r.job, &run, &out, std::slice::from_mut(&mut r.written)))
                    }
                }
            }
            (None, result) => result.map(|()| vec![Finished::stopped_before_start(&r.job.prefix)]),
        };
        // The conversation is free again before anyone hears the reply ended,
        // so an immediate next message is not refused as busy.
        r.active = None;
        let last_message = r.job.messages.last().map_or("", |m| m.content.as_str());
        test_panic_hook(last_message.strip_suffix(":after").unwrap_or(""));
        let text = r.written.text.clone();
        self.end_reply(&r.job, finished, &[text]);
    }
}
