//! A draft model: a second, smaller model with the target's vocabulary,
//! which guesses a sequence's next tokens for the target's verify pass
//! (`Speculation::Draft`).
//!
//! It drafts greedily, one point mass per position, so the sampler's rule
//! (take each row as plain decoding would, stop at the first token that
//! differs from the draft) is the standard acceptance rule and the reply is
//! plain decoding's, token for token, whatever the draft model says. Its
//! numerics never matter for exactness, only for how many tokens a pass
//! yields.
//!
//! Its keys and values live in a session of its own, kept in the
//! conversation's session (`Session::draft`) beside the target's cache, so
//! a conversation's next turn drafts after reading only its new tokens. That
//! session is brought up to each step's history by the longest common
//! prefix: drafts that were refused are cut away, and what the target took
//! is read.

use std::path::Path;
use std::sync::Arc;

use crate::engine::Engine;
use crate::error::{EngineError, Result};
use crate::session::Session;
use crate::tokenizer::Tokenizer;

/// The least probability the draft model must give its guess for it to be
/// drafted (llama.cpp's `--draft-p-min` default): a draft stops where the
/// draft model is unsure, which is where the target tends to disagree.
pub const P_MIN: f32 = 0.75;

/// How many more tokens one vocabulary may have than the other (padding
/// and added tokens at the end), as llama.cpp allows.
const MAX_VOCAB_DIFFERENCE: usize = 128;

/// A model checked to draft for a target: same tokens, no recurrent state.
#[derive(Clone)]
pub struct DraftModel {
    engine: Arc<Engine>,
    /// Token ids it may draft: those both vocabularies and both models' logits have.
    vocab: usize,
    /// The least probability it must give a token to draft it.
    min_probability: f32,
    /// What one of its decode steps costs as a share of the target's:
    /// the weights each reads.
    cost: f64,
}

impl std::fmt::Debug for DraftModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DraftModel").field("path", &self.engine.path()).finish()
    }
}

impl DraftModel {
    /// `draft` as a drafter for `target`, or a setting error (field
    /// `draft_model`) saying why it cannot be one: a token that differs,
    /// vocabularies of different sizes, or recurrent layers (whose state
    /// cannot be cut back to a refused draft's start without re-reading).
    pub fn new(target: &Engine, draft: Arc<Engine>) -> Result<Self> {
        let refuse = |why: String| {
            Err(EngineError::setting(
                "draft_model",
                format!(
                    "{} ({}) cannot draft for {} ({}): {why}",
                    file_name(draft.path()),
                    draft.model().config().architecture.family_name(),
                    file_name(target.path()),
                    target.model().config().architecture.family_name(),
                ),
            ))
        };
        if let Err(why) = same_vocabulary(target.tokenizer(), draft.tokenizer()) {
            return refuse(why);
        }
        if draft.model().new_cache(1).is_hybrid() {
            return refuse("draft models with recurrent layers are not supported yet".into());
        }
        let vocab = target
            .tokenizer()
            .vocab_size()
            .min(draft.tokenizer().vocab_size())
            .min(target.model().vocab_size())
            .min(draft.model().vocab_size());
        let cost =
            draft.model().weight_bytes_per_token() as f64 / target.model().weight_bytes_per_token().max(1) as f64;
        Ok(Self { engine: draft, vocab, min_probability: P_MIN, cost })
    }

    /// Drafts a token only where the draft model gives it at least `p`
    /// (0 to 1; [`P_MIN`] unless set): 0 drafts as far as asked.
    pub fn with_min_probability(mut self, p: f32) -> Self {
        self.min_probability = p.clamp(0.0, 1.0);
        self
    }

    /// What one of its decode steps costs as a share of the target's, as
    /// the bytes of weights each reads (decode reads every weight once).
    pub fn cost(&self) -> f64 {
        self.cost
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The file it was opened from: what a kept draft session belongs to.
    pub fn path(&self) -> &Path {
        self.engine.path()
    }

    /// An empty session of the draft model, holding up to `max_len` tokens.
    pub(crate) fn new_session(&self, max_len: usize) -> Session {
        self.engine.new_session(Some(max_len))
    }

    /// Up to `max` tokens the draft model expects after `history` (the
    /// prompt, then what was sampled), each its most likely next token,
    /// stopping before one it gives less than its least probability. `session` holds the
    /// draft model's keys and values; it is cut back to what it shares with
    /// `history`, and then reads the rest and each drafted token but the
    /// last.
    pub(crate) fn propose(&self, session: &mut Session, history: &[u32], max: usize) -> Result<Vec<u32>> {
        let mut history = history.to_vec();
        // The last drafted token is never read, so a full draft needs
        // room for all but one of its tokens.
        let max = max.min((session.context_length() + 1).saturating_sub(history.len()));
        let model = self.engine.model();
        let mut draft = Vec::with_capacity(max);
        while draft.len() < max {
            let (_, logits) = session.prefill(model, &history)?;
            let (token, p) = most_likely(&logits[..self.vocab.min(logits.len())]);
            if p < self.min_probability {
                break;
            }
            draft.push(token);
            history.push(token);
        }
        Ok(draft)
    }
}

/// The likeliest token under `logits` and its probability.
pub(crate) fn most_likely(logits: &[f32]) -> (u32, f32) {
    let (mut best, mut top) = (0, f32::NEG_INFINITY);
    for (i, &l) in logits.iter().enumerate() {
        if l > top {
            (best, top) = (i, l);
        }
    }
    let p = (top - crate::cpu::vec_ops::log_sum_exp(logits)).exp();
    (best as u32, if p.is_nan() { 0.0 } else { p })
}

/// Whether token `i` means the same in both vocabularies for every `i`
/// both have, and neither has many more; else which token differs.
fn same_vocabulary(target: &Tokenizer, draft: &Tokenizer) -> std::result::Result<(), String> {
    let (t, d) = (target.vocab_size(), draft.vocab_size());
    if t.abs_diff(d) > MAX_VOCAB_DIFFERENCE {
        return Err(format!("its vocabulary has {d} tokens and the model's {t}"));
    }
    for id in 0..t.min(d) as u32 {
        let (mine, theirs) = (target.token_text(id), draft.token_text(id));
        if mine != theirs || target.token_bytes(id) != draft.token_bytes(id) {
            return Err(format!(
                "token {id} is {:?} in the draft model and {:?} in the model",
                theirs.unwrap_or(""),
                mine.unwrap_or("")
            ));
        }
    }
    Ok(())
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn most_likely_gives_the_argmax_and_its_probability() {
        let (t, p) = super::most_likely(&[0.0, 2.0f32.ln(), 0.0]);
        assert_eq!(t, 1);
        assert!((p - 0.5).abs() < 1e-6, "{p}");
        assert_eq!(super::most_likely(&[f32::NEG_INFINITY; 3]).1, 0.0);
    }
}
