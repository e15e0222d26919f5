//! Running a recorded reply again and comparing it token by token.
//!
//! The record names the model file by its hash, the prompt by the hash of
//! its token ids, and the forward passes that computed the prompt; running
//! those passes again (`Session::start_replay`) gives the recorded logits
//! bit for bit from any cache, so with the recorded sampler and seed every
//! token must come again. The replay runs on a copy of the conversation's
//! cache and writes nothing to the conversation.

use std::panic::{catch_unwind, AssertUnwindSafe};

use hearth_engine::sampler_loop::PAD;
use hearth_engine::{EngineError, Pass, Passes};
use hearth_store::{ConversationSettings, ReplayRecord};
use tokio_util::sync::CancellationToken;

use super::queue::{ActiveJob, Queued};
use super::reply::{generation_config, prompt_ids, ReplyJob, Unsent};
use super::{panic_message, WorkerThread};
use crate::error::{AppError, ErrorKind};
use crate::events::{GenerationEvent, ReplayOutcome};

impl WorkerThread {
    pub(super) fn replay(&mut self, queued: Queued) {
        let Queued { job, cancel } = queued;
        let active = ActiveJob { shared: self.shared.clone(), conversation_id: job.conversation_id };
        let record = job.replay.clone().expect("a replay job carries its record");
        let result =
            catch_unwind(AssertUnwindSafe(|| self.run_replay(&job, &record, &cancel))).unwrap_or_else(|panic| {
                let message = panic_message(&*panic);
                tracing::error!("replay of reply {} panicked: {message}", job.reply_id);
                self.caches.forget(job.conversation_id);
                Err(AppError::new(ErrorKind::Internal, format!("the replay stopped on an internal error ({message})")))
            });
        drop(active);
        if let Some(engine) = self.engine.clone() {
            self.caches.save_pending(&engine);
        }
        (job.events)(match result {
            Ok(outcome) => GenerationEvent::Replayed { outcome },
            Err(error) => GenerationEvent::Error { error },
        });
    }

    fn run_replay(
        &mut self,
        job: &ReplyJob,
        record: &ReplayRecord,
        cancel: &CancellationToken,
    ) -> Result<ReplayOutcome, AppError> {
        let engine = self.loaded_engine()?;
        (job.events)(GenerationEvent::Started { reply_id: job.reply_id });
        let cannot = |why: String| AppError::new(ErrorKind::CannotReplay, why);
        let Some(recorded_model) = &record.model_sha256 else {
            return Err(cannot(
                "this reply was written before its model file was hashed, so which file wrote it is not known".into(),
            ));
        };
        let model_sha256 = match engine.file_sha256() {
            Some(h) => h.to_string(),
            // Still hashing in the background: hash now rather than guess.
            None => engine
                .hash_file(&|| cancel.is_cancelled())?
                .ok_or_else(|| cannot("stopped while hashing the model file".into()))?,
        };
        if &model_sha256 != recorded_model {
            return Err(cannot(format!(
                "this reply was written by another model file (SHA-256 {}…); open {} to replay it",
                &recorded_model[..12.min(recorded_model.len())],
                record.model_path
            )));
        }
        let mut notes = Vec::new();
        if record.engine_build != hearth_engine::BUILD_ID {
            notes.push(format!(
                "recorded by engine build {}, replayed by {}",
                record.engine_build,
                hearth_engine::BUILD_ID
            ));
        }
        let device = hearth_engine::device::describe(engine.model().device());
        if record.device != device {
            notes.push(format!("recorded on {}, replayed on {device}", record.device));
        }

        // The recorded sampler chain and context; the conversation's own
        // settings only for what shaped the prompt (the overflow policy).
        let settings = ConversationSettings {
            temperature: record.temperature,
            top_k: record.top_k,
            top_p: record.top_p,
            min_p: record.min_p,
            repeat_penalty: record.repeat_penalty,
            penalty_window: record.penalty_window,
            seed: Some(record.seed),
            max_new_tokens: record.max_new_tokens,
            stop_strings: record.stop_strings.clone(),
            context_length: record.context_length,
            ..job.settings.clone()
        };
        let (prompt, context, _) = prompt_ids(&engine, job, &settings)?;
        if hearth_engine::file_hash::ids_sha256(&prompt) != record.prompt_sha256 {
            return Err(cannot(
                "the conversation before this reply is not what it was written from (the system prompt, an earlier message or the overflow policy changed)".into(),
            ));
        }
        if record.passes.is_empty() {
            return Err(cannot("this reply was written before Hearth recorded how its prompt was computed, so it cannot be run again exactly".into()));
        }
        let passes = Passes::try_from(record.passes.iter().map(|&p| Pass::from(p)).collect::<Vec<_>>())
            .map_err(|e| cannot(format!("the record's passes are damaged: {e}")))?;
        let (mut config, _) = generation_config(&engine, &settings);
        config.sampling.seed = record.seed as u64 + record.variant as u64;

        let entry = self.caches.take(&engine, job.conversation_id, &prompt, context);
        // A copy: the conversation's own cache stays as it was.
        let mut session = entry.clone().unwrap_or_else(|| engine.new_session(Some(context)));
        let outcome = (|| -> Result<ReplayOutcome, AppError> {
            let mut progress = |p: hearth_engine::Progress| {
                (job.events)(GenerationEvent::Prefill { done: p.done as u32, total: p.total as u32 });
                !cancel.is_cancelled()
            };
            let mut outcome = ReplayOutcome { recorded: record.tokens.len() as u32, notes, ..ReplayOutcome::default() };
            let mut turn =
                match session.start_replay(engine.model(), engine.tokenizer(), &prompt, &passes, config, &mut progress)
                {
                    Err(EngineError::Stopped) => {
                        outcome.stopped = true;
                        return Ok(outcome);
                    }
                    started => started?,
                };
            outcome.processed_tokens = turn.stats().processed_tokens as u32;
            let mut produced: Vec<u32> = Vec::new();
            let mut unsent = Unsent::default();
            loop {
                if cancel.is_cancelled() {
                    outcome.stopped = true;
                    break;
                }
                let Some(step) = turn.step()? else { break };
                for e in step.into_iter().filter(|e| e.sequence == 0) {
                    unsent.text.push_str(&e.text);
                    if e.token != PAD {
                        produced.push(e.token);
                        unsent.ids.push(e.token);
                    }
                }
                unsent.send_if_due(&job.events, 0);
                if produced.iter().zip(&record.tokens).any(|(a, b)| a != b) || produced.len() > record.tokens.len() {
                    break;
                }
            }
            unsent.send(&job.events, 0);
            drop(turn);
            outcome.compared = produced.len() as u32;
            outcome.first_difference = produced.iter().zip(&record.tokens).position(|(a, b)| a != b).map(|i| i as u32);
            if outcome.first_difference.is_none() && !outcome.stopped && produced.len() != record.tokens.len() {
                outcome.first_difference = Some(produced.len().min(record.tokens.len()) as u32);
            }
            outcome.matched = !outcome.stopped && outcome.first_difference.is_none();
            Ok(outcome)
        })();
        match entry {
            Some(original) => self.caches.put(job.conversation_id, original, context, false),
            // A cold conversation keeps what the replay computed: the same
            // cache its reply was written from.
            None if outcome.as_ref().is_ok_and(|o| o.matched) => {
                self.caches.put(job.conversation_id, session, context, true)
            }
            None => {}
        }
        outcome
    }
}
