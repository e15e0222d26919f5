//! Speculative decoding's drafts: tokens guessed for a sequence's next
//! positions, which one verify pass then scores (`Model::decode_rows_many`)
//! beside the step it would run anyway.
//!
//! A draft never changes what is sampled. The sampler takes the verify
//! pass's rows in order, each exactly as a plain step would (same logits,
//! bit for bit, and the same draw from the sequence's generator), and stops
//! at the first token that differs from the draft. With a drafter that
//! proposes one token per position (a point mass), that is the standard
//! acceptance rule — accept `d` with probability `min(1, p(d)/1)`, else
//! sample from the normalised `(p − q)+`, which is `p` without `d` — and
//! more: each token is the one plain decoding gives for that seed. A draft
//! only decides how many of those tokens one pass yields.
//!
//! The drafter here looks the conversation up in itself (prompt lookup):
//! the longest earlier match of the tokens just before the next position,
//! and what followed it.

/// How a reply drafts. Fixed for the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Speculation {
    /// No drafts: one token per pass.
    #[default]
    Off,
    /// Draft up to `max_draft` tokens from the conversation's own tokens
    /// whenever an earlier occurrence of the last one offers a continuation.
    Ngram { max_draft: usize },
    /// As `Ngram`, from a match of at least two tokens, each draft as long
    /// as the recent share of drafted tokens taken makes worth its rows
    /// (`Drafter::auto_len`), and drafting paused (for longer after each
    /// miss) while drafts are rejected outright: text that does not repeat
    /// its context costs next to nothing.
    Auto { max_draft: usize },
    /// Draft up to `max_draft` tokens with a draft model
    /// (`GenerationConfig::draft_model`, `draft_model.rs`), each its most
    /// likely next token while it is confident of it.
    Draft { max_draft: usize },
    /// As `Draft`, with the model's own multi-token-prediction head
    /// (`model/mtp.rs`) in place of a draft model: Qwen 3.5/3.6, GLM-4.5 and
    /// GLM-4.7-Flash files.
    Mtp { max_draft: usize },
}

/// The longest draft a reply may ask for.
pub const MAX_DRAFT: usize = 32;

/// What `Auto` and `Ngram` draft at most unless told.
pub const DEFAULT_DRAFT: usize = 8;

impl Speculation {
    /// The mode a setting names (`off`, `auto`, `ngram`, `draft`, `mtp`), with at most
    /// `max_draft` tokens per draft (1 to [`MAX_DRAFT`]).
    pub fn parse(mode: &str, max_draft: usize) -> crate::Result<Self> {
        if !(1..=MAX_DRAFT).contains(&max_draft) {
            return Err(crate::EngineError::setting(
                "draft_tokens",
                format!("{max_draft} is outside 1 to {MAX_DRAFT}"),
            ));
        }
        match mode {
            "off" => Ok(Self::Off),
            "auto" => Ok(Self::Auto { max_draft }),
            "ngram" => Ok(Self::Ngram { max_draft }),
            "draft" => Ok(Self::Draft { max_draft }),
            "mtp" => Ok(Self::Mtp { max_draft }),
            other => Err(crate::EngineError::setting(
                "speculation",
                format!("'{other}' is not one of off, auto, ngram, draft, mtp"),
            )),
        }
    }

    /// The setting's name: `off`, `auto`, `ngram`, `draft` or `mtp`.
    pub fn mode(&self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Auto { .. } => "auto",
            Self::Ngram { .. } => "ngram",
            Self::Draft { .. } => "draft",
            Self::Mtp { .. } => "mtp",
        }
    }

    pub fn is_off(&self) -> bool {
        matches!(self, Self::Off)
    }
}

/// Matches longer than this count as this long: enough to rank them.
const MAX_MATCH: usize = 32;

/// The shortest earlier match whose continuation `Speculation::Draft`
/// drafts without its draft model: text that copies its context (code
/// edits, quotes) drafts for free.
const LOOKUP_MATCH: usize = 4;

/// `Auto`'s longest pause after drafts rejected outright, in steps.
const MAX_PAUSE: u32 = 64;

/// What each row a verify pass adds costs, as a share of a one-row step:
/// on the 2-core development VM, a pass of 2 to 17 rows on the default
/// model takes about 1 + 0.35 per added row at a few hundred positions of
/// history (more past 1,000, where each row's attention grows): see
/// BENCHMARKS.md. Where rows are cheaper (more cores, larger models) the
/// drafts `Auto` picks are only shorter than they could be.
const ROW_COST: f64 = 0.35;

/// The least gain (tokens per step's cost) for which `Auto` drafts.
const MIN_GAIN: f64 = 1.02;

/// How much of `Auto`'s evidence each verify pass keeps: recent drafts
/// count most, so a reply that starts or stops quoting is followed soon.
const DECAY: f64 = 0.8;

/// `Auto`'s prior: as if one of two drafted positions had been taken.
const PRIOR: (f64, f64) = (1.0, 2.0);

/// One sequence's drafting: where `Auto` stands, and the counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Drafter {
    /// `Auto`: recent drafted positions the sampler reached (each taken
    /// one, and the first refused), and how many of them it took, decayed.
    checked: f64,
    taken: f64,
    /// `Auto`: steps left before the next draft.
    pause: u32,
    /// `Auto`: drafts rejected outright in a row.
    misses: u32,
    /// Whether the sequence's cache has a recurrent state, which reads a
    /// refused draft's kept rows again in a pass of their own.
    recurrent: bool,
    /// What drafting one token costs, as a share of a step: a draft
    /// model's step (`DraftModel::cost`); nothing for a lookup.
    draft_cost: f64,
    /// Tokens drafted, and how many of them the sampler took.
    pub drafted: usize,
    pub accepted: usize,
}

impl Drafter {
    /// A draft of at most `room` tokens to follow `history` (the prompt,
    /// then what was sampled; its last token is the next pass's first row).
    /// `recurrent`: the cache has a recurrent state (see `auto_len`).
    pub(crate) fn propose(
        &mut self,
        mode: Speculation,
        (prompt, generated): (&[u32], &[u32]),
        room: usize,
        recurrent: bool,
    ) -> Vec<u32> {
        self.recurrent = recurrent;
        let (max, min_match) = match mode {
            // A draft model's and an MTP head's drafts are the sequence's
            // (`Sequence::plan_pass`).
            Speculation::Off | Speculation::Draft { .. } | Speculation::Mtp { .. } => return Vec::new(),
            Speculation::Ngram { max_draft } => (max_draft, 1),
            Speculation::Auto { max_draft } => {
                if self.pause > 0 {
                    self.pause -= 1;
                    return Vec::new();
                }
                // A probe after a pause drafts one token.
                (self.auto_len(max_draft).max(1), 2)
            }
        };
        let max = max.min(room);
        if max == 0 {
            return Vec::new();
        }
        let mut history = Vec::with_capacity(prompt.len() + generated.len());
        history.extend_from_slice(prompt);
        history.extend_from_slice(generated);
        lookup(&history, max, min_match)
    }

    /// A draft for `Speculation::Draft` and `Mtp`: the continuation of an earlier
    /// match of at least `LOOKUP_MATCH` tokens, which costs nothing to
    /// draft; else, unless paused as `Auto` pauses, up to `max` tokens
    /// from `draft_model` (given the history and how many to draft at
    /// most), as many as its `draft_cost` a token (a share of a step) and
    /// the recent acceptance make worth it. A draft model that drafts
    /// nothing counts as a draft refused outright: its step cost as much.
    pub(crate) fn propose_with_model(
        &mut self,
        (prompt, generated): (&[u32], &[u32]),
        max: usize,
        (recurrent, draft_cost): (bool, f64),
        draft_model: impl FnOnce(&[u32], usize) -> crate::Result<Vec<u32>>,
    ) -> crate::Result<Vec<u32>> {
        (self.recurrent, self.draft_cost) = (recurrent, draft_cost);
        if max == 0 {
            return Ok(Vec::new());
        }
        let mut history = Vec::with_capacity(prompt.len() + generated.len());
        history.extend_from_slice(prompt);
        history.extend_from_slice(generated);
        let found = lookup(&history, max, LOOKUP_MATCH);
        if found.len() > 1 {
            return Ok(found);
        }
        if self.pause > 0 {
            self.pause -= 1;
            return Ok(Vec::new());
        }
        let k = self.auto_len(max).max(1);
        let draft = draft_model(&history, k)?;
        if draft.is_empty() {
            self.record(Speculation::Draft { max_draft: max }, 0, 0);
        }
        Ok(draft)
    }

    /// `Auto`'s draft length: with `a` the recent share of drafted
    /// positions taken, a draft of `k` gives `E = (1 − a^(k+1)) / (1 − a)`
    /// tokens for a pass that costs `1 + ROW_COST · k` steps (plus a draft
    /// model's `k` steps at `draft_cost` each), and on a
    /// recurrent cache, when a drafted token is refused (`1 − a^k`), a pass
    /// more for the kept rows (`1 + ROW_COST · (E − 1)`); the `k` up to
    /// `max` that gives the most per step, or 0 where none gains `MIN_GAIN`.
    fn auto_len(&self, max: usize) -> usize {
        let a = ((self.taken + PRIOR.0) / (self.checked + PRIOR.1)).min(0.999);
        let gain = |k: usize| {
            let tokens = (1.0 - a.powi(k as i32 + 1)) / (1.0 - a);
            let refeed =
                if self.recurrent { (1.0 - a.powi(k as i32)) * (1.0 + ROW_COST * (tokens - 1.0)) } else { 0.0 };
            tokens / (1.0 + (ROW_COST + self.draft_cost) * k as f64 + refeed)
        };
        let best = (1..=max).max_by(|&x, &y| gain(x).total_cmp(&gain(y))).unwrap_or(0);
        if best > 0 && gain(best) >= MIN_GAIN {
            best
        } else {
            0
        }
    }

    /// After a verify pass: `drafted` tokens were proposed and the first
    /// `accepted` of them sampled.
    pub(crate) fn record(&mut self, mode: Speculation, drafted: usize, accepted: usize) {
        self.drafted += drafted;
        self.accepted += accepted;
        let (Speculation::Auto { max_draft } | Speculation::Draft { max_draft } | Speculation::Mtp { max_draft }) =
            mode
        else {
            return;
        };
        let reached = accepted + usize::from(accepted < drafted);
        self.checked = self.checked * DECAY + reached as f64;
        self.taken = self.taken * DECAY + accepted as f64;
        if accepted > 0 && self.auto_len(max_draft) > 0 {
            self.misses = 0;
        } else {
            // Rejected outright, or taken too rarely to pay: pause, longer
            // each time, and probe again with one token.
            self.misses += 1;
            self.pause = (1u32 << self.misses.min(6)).min(MAX_PAUSE) - 1;
        }
    }
}

/// Prompt lookup: the earlier position whose tokens match the longest
/// suffix of `history` (at least `min_match` of them; of equal matches the
/// latest), and up to `max` of the tokens that followed it.
pub(crate) fn lookup(history: &[u32], max: usize, min_match: usize) -> Vec<u32> {
    let n = history.len();
    if n < 2 || max == 0 {
        return Vec::new();
    }
    let last = history[n - 1];
    let (mut best, mut best_len) = (None, 0);
    for j in 0..n - 1 {
        if history[j] != last {
            continue;
        }
        let len = (0..=j.min(MAX_MATCH - 1)).take_while(|&i| history[j - i] == history[n - 1 - i]).count();
        if len >= best_len {
            (best, best_len) = (Some(j), len);
        }
    }
    match best {
        Some(j) if best_len >= min_match => history[j + 1..(j + 1 + max).min(n)].to_vec(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_takes_the_longest_match_then_the_latest() {
        // "1 2 3" is followed by 4 once and by 9 later; the tail "1 2 3"
        // matches both by three: the latest wins.
        assert_eq!(lookup(&[1, 2, 3, 4, 5, 1, 2, 3, 9, 7, 1, 2, 3], 2, 1), vec![9, 7]);
        // A longer match wins over a later one.
        assert_eq!(lookup(&[0, 1, 2, 3, 4, 5, 8, 2, 3, 9, 0, 1, 2, 3], 3, 1), vec![4, 5, 8]);
        // Too short a match, or none.
        assert_eq!(lookup(&[5, 1, 6, 7, 1], 4, 2), Vec::<u32>::new());
        assert_eq!(lookup(&[5, 1, 6, 7, 1], 4, 1), vec![6, 7, 1]);
        assert_eq!(lookup(&[1, 2, 3], 4, 1), Vec::<u32>::new());
        // A continuation runs at most to the end of the history.
        assert_eq!(lookup(&[7, 7, 7], 5, 1), vec![7]);
    }

    #[test]
    fn a_draft_model_drafts_where_no_long_match_does_and_pauses_after_drafting_nothing() {
        let mut d = Drafter::default();
        let asked = std::cell::Cell::new(0);
        let model = |tokens: Vec<u32>| {
            let asked = &asked;
            move |_: &[u32], k: usize| {
                asked.set(asked.get() + 1);
                Ok(tokens.into_iter().take(k).collect::<Vec<u32>>())
            }
        };
        // A match of four tokens drafts its continuation, without the model.
        let copying = [1, 2, 3, 4, 5, 6, 9, 1, 2, 3, 4];
        assert_eq!(d.propose_with_model((&copying, &[]), 2, (false, 0.3), model(vec![7])).unwrap(), vec![5, 6]);
        assert_eq!(asked.get(), 0);
        // A shorter match asks the model, for as many as pay.
        let fresh = [1, 2, 3, 4, 5, 6, 9, 3, 4];
        assert_eq!(d.propose_with_model((&fresh, &[]), 8, (false, 0.3), model(vec![7, 8])).unwrap(), vec![7]);
        assert_eq!(asked.get(), 1);
        // A model that drafts nothing is a miss: the next step pauses.
        assert!(d.propose_with_model((&fresh, &[]), 8, (false, 0.3), model(vec![])).unwrap().is_empty());
        assert!(d.propose_with_model((&fresh, &[]), 8, (false, 0.3), model(vec![7])).unwrap().is_empty());
        assert_eq!(asked.get(), 2, "paused: the model is not asked");
        assert_eq!(d.propose_with_model((&fresh, &[]), 8, (false, 0.3), model(vec![7])).unwrap(), vec![7]);
    }

    #[test]
    fn auto_drafts_as_long_as_recent_acceptance_pays_and_pauses_longer_after_each_miss() {
        let mode = Speculation::Auto { max_draft: 8 };
        let mut d = Drafter::default();
        let history = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2];
        // No evidence yet: half taken, one token pays best.
        assert_eq!(d.propose(mode, (&history, &[]), 16, false), vec![3]);
        d.record(mode, 1, 0);
        assert_eq!(d.propose(mode, (&history, &[]), 16, false), Vec::<u32>::new(), "paused one step");
        assert_eq!(d.propose(mode, (&history, &[]), 16, false), vec![3], "then a probe of one token");
        d.record(mode, 1, 0);
        for _ in 0..3 {
            assert!(d.propose(mode, (&history, &[]), 16, false).is_empty(), "paused three steps");
        }
        // Drafts taken whole: longer ones pay, up to the most.
        let mut lens = Vec::new();
        for _ in 0..20 {
            let draft = d.propose(mode, (&history, &[]), 16, false);
            lens.push(draft.len());
            d.record(mode, draft.len(), draft.len());
        }
        assert_eq!(lens.first(), Some(&1));
        assert!(lens.windows(2).all(|w| w[0] <= w[1]), "lengths grow with the evidence: {lens:?}");
        assert!(lens.last().is_some_and(|&n| n >= 6), "{lens:?}");
        assert_eq!(d.propose(mode, (&history, &[]), 3, false), vec![3, 4, 5], "the room bounds it");
        // A run of half-taken drafts shortens them again.
        for _ in 0..6 {
            d.record(mode, 4, 1);
        }
        assert!(d.auto_len(8) <= 2, "{}", d.auto_len(8));
        // A recurrent cache pays a pass more for each refused draft: at the
        // same evidence, its drafts are no longer, and at 70% it drafts less.
        let mut r = Drafter { taken: 7.0, checked: 10.0, ..Drafter::default() };
        let attention = r.auto_len(8);
        r.recurrent = true;
        assert!(r.auto_len(8) < attention, "{} against {attention}", r.auto_len(8));
        assert!(Speculation::parse("auto", 0).unwrap_err().to_string().contains("draft_tokens"));
        // A draft model's steps cost: at the same evidence, its drafts are shorter.
        let mut m = Drafter { taken: 7.0, checked: 10.0, ..Drafter::default() };
        m.draft_cost = 0.4;
        assert!(m.auto_len(8) < attention, "{} against {attention}", m.auto_len(8));
        assert!(Speculation::parse("fast", 4).is_err());
    }
}
