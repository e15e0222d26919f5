//! Starting a turn on a session: [`Session::into_turn`] for a scheduler
//! that keeps the turn beside others, and [`Session::start_turn`] for a
//! turn run to the end in place over a borrowed session ([`SessionTurn`]),
//! as tests, benchmarks and one-off tools run one. A replay starts the same
//! way through exactly the recorded passes.
//!
//! Kept apart from `session.rs` so that a session knows nothing of turns:
//! a turn owns a session, and this module joins the two.

use crate::error::{EngineError, Result};
use crate::model::Model;
use crate::passes::Passes;
use crate::sampler_loop::{GenerationConfig, Sampler, Sequence, TokenEvent};
use crate::session::{PrefillStart, Session};
use crate::tokenizer::Tokenizer;
use crate::turn::{Advance, Ended, Progress, Reading, Turn, TurnOutput, TurnStats};

impl Session {
    /// Starts a turn: reads what is new in `prompt`, then hands back a
    /// turn to step. `variants > 1` samples that many variants of the reply.
    pub fn start_turn<'a>(
        &'a mut self,
        model: &'a Model,
        tokenizer: &'a Tokenizer,
        prompt: &[u32],
        config: GenerationConfig,
        variants: usize,
    ) -> Result<SessionTurn<'a>> {
        let placeholder = Session::new(model, self.cache().max_len());
        let session = std::mem::replace(self, placeholder);
        let mut turn = match session.into_turn(model, prompt.to_vec(), config) {
            Ok(turn) => turn,
            Err((session, e)) => {
                *self = session;
                return Err(e);
            }
        };
        let read = turn.set_variants(variants).and_then(|()| {
            while turn.is_prefilling() {
                turn.advance(model, tokenizer)?;
            }
            Ok(())
        });
        match read {
            Ok(()) => Ok(SessionTurn::new(self, model, tokenizer, turn)),
            Err(e) => {
                *self = turn.end().session;
                Err(e)
            }
        }
    }

    /// Starts a turn whose prompt is computed exactly as `passes` computed
    /// it: the same forward passes over the same tokens, reusing only the
    /// cache's passes that are those. The logits, and so with the same seed
    /// the tokens, are then the bits of the turn that recorded `passes`,
    /// whether this cache is cold, restored from disk or warm. `progress`
    /// hears before each pass and may stop the reading.
    pub fn start_replay<'a>(
        &'a mut self,
        model: &'a Model,
        tokenizer: &'a Tokenizer,
        prompt: &[u32],
        passes: &Passes,
        config: GenerationConfig,
        progress: &mut dyn FnMut(Progress) -> bool,
    ) -> Result<SessionTurn<'a>> {
        let placeholder = Session::new(model, self.cache().max_len());
        let session = std::mem::replace(self, placeholder);
        let mut turn = match session.into_replay_turn(prompt.to_vec(), passes, config) {
            Ok(turn) => turn,
            Err((session, e)) => {
                *self = session;
                return Err(e);
            }
        };
        let mut read = || {
            let mut last = Progress { done: 0, total: 0 };
            while let Some(p) = turn.prefill_progress() {
                if !progress(p) {
                    return Err(EngineError::Stopped);
                }
                if let Advance::Prefill(p) = turn.advance(model, tokenizer)? {
                    last = p;
                }
            }
            progress(last);
            Ok(())
        };
        match read() {
            Ok(()) => Ok(SessionTurn::new(self, model, tokenizer, turn)),
            Err(e) => {
                *self = turn.end().session;
                Err(e)
            }
        }
    }

    /// A turn that owns this session, for a scheduler that runs several
    /// conversations' turns in turn (`Turn::advance`): it reads what the
    /// cache lacks of `prompt` in chunks. On failure the session comes
    /// back with the error.
    #[allow(clippy::result_large_err, reason = "the session comes back by value on failure, for the caller to keep")]
    pub fn into_turn(
        mut self,
        model: &Model,
        prompt: Vec<u32>,
        config: GenerationConfig,
    ) -> std::result::Result<Turn, (Session, EngineError)> {
        // The sampler's settings are checked before the cache is touched.
        let mtp = matches!(config.speculation, crate::Speculation::Mtp { .. }) && !model.runs_graph();
        let sampler = match Sampler::new(config) {
            Ok(s) => s,
            Err(e) => return Err((self, e)),
        };
        if mtp {
            if let Err(e) = model.check_mtp_head() {
                return Err((self, e));
            }
            self.start_mtp(model);
        }
        match self.prefill_begin(&prompt) {
            Err(e) => Err((self, e)),
            Ok(PrefillStart::From(from)) => Ok(Turn::new(self, sampler, prompt, Some(Reading::Chunks { from }))),
            Ok(PrefillStart::Cached(logits)) => {
                let mut turn = Turn::new(self, sampler, prompt, None);
                turn.begin_sampling(model, logits);
                Ok(turn)
            }
        }
    }

    /// A turn whose prompt is computed exactly as `passes` computed it (see
    /// [`Session::start_replay`]), a pass per `advance`: the logits, and so
    /// with the same seed the tokens, are the bits of the turn that
    /// recorded `passes`, whether this cache is cold, restored or warm.
    #[allow(clippy::result_large_err, reason = "the session comes back by value on failure, for the caller to keep")]
    pub fn into_replay_turn(
        mut self,
        prompt: Vec<u32>,
        passes: &Passes,
        config: GenerationConfig,
    ) -> std::result::Result<Turn, (Session, EngineError)> {
        let sampler = match Sampler::new(config) {
            Ok(s) => s,
            Err(e) => return Err((self, e)),
        };
        match self.plan_passes(&prompt, passes) {
            Err(e) => Err((self, e)),
            Ok((from, planned)) => {
                let reading = Reading::Planned { from, passes: planned.into() };
                Ok(Turn::new(self, sampler, prompt, Some(reading)))
            }
        }
    }
}

/// A turn over a borrowed session, run to the end in place: what tests,
/// benchmarks and one-off tools use. `Session::start_turn` has read the
/// prompt; each `step` samples a token of every running sequence. Ending
/// (or dropping) it writes the kept variant back into the session, so even
/// a cancelled turn leaves a cache that matches its tokens.
pub struct SessionTurn<'a> {
    session: &'a mut Session,
    model: &'a Model,
    tokenizer: &'a Tokenizer,
    turn: Option<Turn>,
}

impl<'a> SessionTurn<'a> {
    pub(crate) fn new(session: &'a mut Session, model: &'a Model, tokenizer: &'a Tokenizer, turn: Turn) -> Self {
        Self { session, model, tokenizer, turn: Some(turn) }
    }

    fn turn(&self) -> &Turn {
        self.turn.as_ref().expect("present until the turn ends")
    }

    pub fn stats(&self) -> &TurnStats {
        self.turn().stats()
    }

    /// The forward passes that computed this turn's prompt.
    pub fn prompt_passes(&self) -> &Passes {
        self.turn().prompt_passes()
    }

    pub fn sequences(&self) -> &[Sequence] {
        self.turn().sequences()
    }

    /// One step of every running sequence; `None` once every one has finished.
    pub fn step(&mut self) -> Result<Option<Vec<TokenEvent>>> {
        let turn = self.turn.as_mut().expect("present until the turn ends");
        match turn.advance(self.model, self.tokenizer)? {
            Advance::Tokens(events) => Ok(Some(events)),
            Advance::Done => Ok(None),
            Advance::Prefill(_) => unreachable!("start_turn read the prompt"),
        }
    }

    /// Stops the turn between two steps; returns any text held back.
    pub fn cancel(&mut self) -> Vec<TokenEvent> {
        self.turn.as_mut().expect("present until the turn ends").cancel()
    }

    /// Runs to the end and keeps variant 0.
    pub fn run(mut self) -> Result<TurnOutput> {
        while self.step()?.is_some() {}
        Ok(self.finish(0))
    }

    /// Ends the turn, keeping variant `keep` as the conversation's continuation.
    pub fn finish(mut self, keep: usize) -> TurnOutput {
        let ended = self.end(keep);
        ended.output.expect("start_turn began sampling")
    }

    /// Ends a turn of several variants: variant 0 continues this session,
    /// and every other comes back as a session of its own.
    pub fn finish_variants(mut self) -> (TurnOutput, Vec<Session>) {
        let ended = self.end(0);
        (ended.output.expect("start_turn began sampling"), ended.others)
    }

    fn end(&mut self, keep: usize) -> Ended {
        let mut turn = self.turn.take().expect("present until the turn ends");
        turn.cancel();
        let mut ended = turn.end_keeping(keep);
        std::mem::swap(self.session, &mut ended.session);
        ended
    }
}

impl Drop for SessionTurn<'_> {
    fn drop(&mut self) {
        if self.turn.is_some() {
            self.end(0);
        }
    }
}
