//! Running a recorded reply again and comparing it token by token.
//!
//! The record names the model file by its hash, the prompt by the hash of
//! its token ids, and the forward passes that computed the prompt; running
//! those passes again (`Session::start_replay`) gives the recorded logits
//! bit for bit from any cache, so with the recorded sampler and seed every
//! token must come again. The replay runs on a copy of the conversation's
//! cache and writes nothing to the conversation. It runs as every reply
//! does (`running`); this is how it starts.

use hearth_engine::{Pass, Passes};
use hearth_store::ConversationSettings;
use tokio_util::sync::CancellationToken;

use super::job::ReplyJob;
use super::reply::{generation_config, prompt_ids, Prompt};
use super::running::{ReplayRun, ReplyRun};
use crate::error::{AppError, ErrorKind};
use crate::events::{GenerationEvent, ReplayOutcome};
use crate::thread::WorkerThread;

impl WorkerThread {
    /// A replay's turn: the record checked against the loaded model and the
    /// conversation, its prompt to be read through the recorded passes on a
    /// copy of the conversation's cache.
    pub(super) fn start_replay(
        &mut self,
        job: &ReplyJob,
        cancel: &CancellationToken,
    ) -> Result<(ReplyRun, hearth_engine::Turn), AppError> {
        let record = job.replay.as_ref().expect("a replay job carries its record");
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
        let Prompt { ids: prompt, context, dropped, .. } = prompt_ids(&engine, job, &settings)?;
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
        // A replay drafts nothing: drafts never change the tokens, and a
        // draft model would only have to be opened for it.
        config.speculation = hearth_engine::Speculation::Off;
        config.sampling.seed = record.seed as u64 + record.variant as u64;

        let original = self.caches.take(&engine, job.conversation_id, &prompt, context, None);
        // A copy: the conversation's own cache stays as it was.
        let session = original.clone().unwrap_or_else(|| engine.new_session(Some(context)));
        let turn = match session.into_replay_turn(prompt.clone(), &passes, config) {
            Ok(turn) => turn,
            Err((_, e)) => {
                if let Some(original) = original {
                    self.caches.put(job.conversation_id, original, context, false);
                }
                return Err(e.into());
            }
        };
        if let Some(p) = turn.prefill_progress() {
            (job.events)(GenerationEvent::Prefill { done: p.done as u32, total: p.total as u32 });
        }
        let outcome = ReplayOutcome { recorded: record.tokens.len() as u32, notes, ..ReplayOutcome::default() };
        let replay = ReplayRun { recorded: record.tokens.clone(), produced: Vec::new(), outcome, original };
        let run = ReplyRun {
            engine,
            cache_key: job.conversation_id,
            prompt,
            context,
            dropped,
            seed: record.seed,
            replay: Some(replay),
        };
        Ok((run, turn))
    }
}
