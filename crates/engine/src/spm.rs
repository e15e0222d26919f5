//! SentencePiece-style encoding (`tokenizer.ggml.model = llama`: Llama 2,
//! Mistral, Gemma) as llama.cpp performs it, so ids match the engine users
//! compare against.
//!
//! That is not SentencePiece's Unigram search: llama.cpp splits the text
//! into characters and repeatedly merges the adjacent pair whose merged
//! text is the highest-scoring token (the leftmost on ties), then spells
//! any piece that is not a token as byte tokens. Before that, special and
//! user-defined tokens are cut out of the text, longest first; text runs
//! get a leading space when the vocabulary asks for one, and spaces become
//! `▁`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use ahash::AHashMap;

/// An SPM vocabulary with its scores and the tokens cut out before merging.
pub(crate) struct SpmEncoder {
    ids: AHashMap<String, u32>,
    scores: Vec<f32>,
    bytes: [Option<u32>; 256],
    add_space_prefix: bool,
    /// Longest first: (text, id, parsed only when asked to parse specials).
    specials: Vec<(String, u32, bool)>,
    /// A BPE with merges over SentencePiece-style pieces (Gemma 4's
    /// `gemma4`): each merge's rank, keyed `"left right"`, in place of the
    /// scores; text is split into runs of newlines and runs of the rest
    /// first, as llama.cpp's `gemma4` pre-tokenizer splits it.
    merges: Option<AHashMap<String, u32>>,
}

/// A token's role, by GGUF's token type.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    No,
    /// Cut out of the text always (user-defined).
    Always,
    /// Cut out only when special text is parsed (control, unknown).
    WhenParsing,
}

enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

impl SpmEncoder {
    pub(crate) fn new(tokens: &[String], scores: Vec<f32>, special: &[Special], add_space_prefix: bool) -> Self {
        let mut ids = AHashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            // A later duplicate wins, as in llama.cpp's map.
            ids.insert(t.clone(), i as u32);
        }
        let bytes = std::array::from_fn(|b| {
            ids.get(&format!("<0x{b:02X}>")).copied().or_else(|| ids.get(&(b as u8 as char).to_string()).copied())
        });
        let mut specials: Vec<(String, u32, bool)> = tokens
            .iter()
            .zip(special)
            .enumerate()
            .filter(|(_, (t, s))| **s != Special::No && !t.is_empty())
            .map(|(i, (t, s))| (t.clone(), i as u32, *s == Special::WhenParsing))
            .collect();
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        Self { ids, scores, bytes, add_space_prefix, specials, merges: None }
    }

    /// Gemma 4's vocabulary: `merges` (`"left right"`, by rank) decide the
    /// pairs, lowest rank first, the leftmost on ties (llama.cpp's BPE
    /// queue), and a run of newlines that is a token stays whole.
    pub(crate) fn with_merges(tokens: &[String], special: &[Special], merges: &[String]) -> Self {
        let mut encoder = Self::new(tokens, vec![0.0; tokens.len()], special, false);
        let mut ranks = AHashMap::with_capacity(merges.len());
        for (rank, m) in merges.iter().enumerate() {
            ranks.entry(m.clone()).or_insert(rank as u32);
        }
        encoder.merges = Some(ranks);
        encoder
    }

    pub(crate) fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        let mut prev_special = true;
        for fragment in self.partition(text, parse_special) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(t) => {
                    self.encode_run(t, prev_special, &mut out);
                    prev_special = false;
                }
            }
        }
        out
    }

    /// `text` as one run of text, no special token cut out of it, as a run
    /// that follows a special token (or starts the text) is encoded.
    pub(crate) fn encode_verbatim(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        if !text.is_empty() {
            self.encode_run(text, true, &mut out);
        }
        out
    }

    /// One run of text between special tokens; `after_special`: it starts
    /// the text or follows a special token (where the space prefix goes).
    fn encode_run(&self, t: &str, after_special: bool, out: &mut Vec<u32>) {
        let mut s = String::with_capacity(t.len() + 3);
        if self.add_space_prefix && after_special {
            s.push(' ');
        }
        s.push_str(t);
        let text = s.replace(' ', "▁");
        if self.merges.is_some() {
            for word in newline_runs(&text) {
                match self.ids.get(word) {
                    Some(&id) if word.bytes().all(|b| b == b'\n') => out.push(id),
                    _ => self.merge(word, out),
                }
            }
        } else {
            self.merge(&text, out);
        }
    }

    /// Cuts special tokens out of `text`, longest first.
    fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut fragments = vec![Fragment::Text(text)];
        for (special, id, only_when_parsing) in &self.specials {
            if *only_when_parsing && !parse_special {
                continue;
            }
            if !text.contains(special.as_str()) {
                continue;
            }
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for f in fragments {
                let Fragment::Text(mut rest) = f else {
                    next.push(f);
                    continue;
                };
                while let Some(at) = rest.find(special.as_str()) {
                    if at > 0 {
                        next.push(Fragment::Text(&rest[..at]));
                    }
                    next.push(Fragment::Token(*id));
                    rest = &rest[at + special.len()..];
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            fragments = next;
        }
        fragments
    }

    /// llama.cpp's `llm_tokenizer_spm_session::tokenize` on one text run.
    fn merge(&self, text: &str, out: &mut Vec<u32>) {
        struct Symbol {
            start: usize,
            len: usize,
            prev: Option<usize>,
            next: Option<usize>,
        }
        let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        let mut symbols: Vec<Symbol> = starts
            .iter()
            .enumerate()
            .map(|(i, &s)| Symbol {
                start: s,
                len: starts.get(i + 1).copied().unwrap_or(text.len()) - s,
                prev: i.checked_sub(1),
                next: (i + 1 < starts.len()).then_some(i + 1),
            })
            .collect();
        let mut queue = BinaryHeap::new();
        let try_pair =
            |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: Option<usize>, right: Option<usize>| {
                let (Some(l), Some(r)) = (left, right) else { return };
                let (a, b) = (&symbols[l], &symbols[r]);
                let merged = &text[a.start..a.start + a.len + b.len];
                if let Some(ranks) = &self.merges {
                    let key = format!("{} {}", &text[a.start..a.start + a.len], &text[b.start..b.start + b.len]);
                    if let Some(&rank) = ranks.get(&key) {
                        // Lowest rank first: as a score, its negation
                        // (exact in f32 below 2^24 merges).
                        queue.push(Bigram { score: -(rank as f32), left: l, right: r, size: merged.len() });
                    }
                } else if let Some(&id) = self.ids.get(merged) {
                    queue.push(Bigram {
                        score: self.scores.get(id as usize).copied().unwrap_or(0.0),
                        left: l,
                        right: r,
                        size: merged.len(),
                    });
                }
            };
        for i in 1..symbols.len() {
            try_pair(&symbols, &mut queue, Some(i - 1), Some(i));
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (&symbols[b.left], &symbols[b.right]);
            // A pair whose symbols have since merged elsewhere is stale.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            let next = symbols[b.right].next;
            symbols[b.left].len += symbols[b.right].len;
            symbols[b.right].len = 0;
            symbols[b.left].next = next;
            if let Some(n) = next {
                symbols[n].prev = Some(b.left);
            }
            let prev = symbols[b.left].prev;
            try_pair(&symbols, &mut queue, prev, Some(b.left));
            try_pair(&symbols, &mut queue, Some(b.left), next);
        }
        let mut i = (!symbols.is_empty()).then_some(0);
        while let Some(s) = i {
            let sym = &symbols[s];
            let piece = &text[sym.start..sym.start + sym.len];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                // Pieces that are not tokens are spelled as bytes.
                None => out.extend(piece.bytes().filter_map(|b| self.bytes[b as usize])),
            }
            i = sym.next;
        }
    }
}

/// `text` cut into runs of newlines and runs of anything else (llama.cpp's
/// `[^\n]+|[\n]+`).
fn newline_runs(text: &str) -> Vec<&str> {
    let mut runs = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for i in 1..=bytes.len() {
        if i == bytes.len() || (bytes[i] == b'\n') != (bytes[i - 1] == b'\n') {
            runs.push(&text[start..i]);
            start = i;
        }
    }
    runs
}

/// A candidate merge: the highest score first, then the leftmost.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> Ordering {
        self.score.total_cmp(&o.score).then(o.left.cmp(&self.left)).then(o.right.cmp(&self.right))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> SpmEncoder {
        let toks =
            ["<unk>", "<s>", "▁", "h", "e", "l", "o", "▁h", "he", "ll", "llo", "▁hello", "<0x21>", "<|x|>", "<ctl>"];
        let scores = vec![0.0, 0.0, -1.0, -2.0, -2.0, -2.0, -2.0, -1.5, -1.2, -1.1, -0.5, -0.1, 0.0, 0.0, 0.0];
        let special = [
            Special::WhenParsing,
            Special::WhenParsing,
            Special::No,
            Special::No,
            Special::No,
            Special::No,
            Special::No,
            Special::No,
            Special::No,
            Special::No,
            Special::No,
            Special::No,
            Special::No,
            Special::Always,
            Special::WhenParsing,
        ];
        SpmEncoder::new(&toks.map(String::from), scores, &special, true)
    }

    #[test]
    fn merges_by_score_and_spells_unknown_pieces_as_bytes() {
        let v = vocab();
        // "▁hello": ll (−1.1) merges first, then llo, then he; ▁h is then
        // stale, so the whole-word token is never reached, as in llama.cpp.
        assert_eq!(v.encode("hello", false), vec![2, 8, 10]);
        // "!" is not a token and is spelled as its byte token.
        assert_eq!(v.encode("hello!", false), vec![2, 8, 10, 12]);
        assert_eq!(v.encode("", false), Vec::<u32>::new());
    }

    #[test]
    fn user_defined_tokens_are_always_cut_out_and_control_tokens_only_when_parsing() {
        let v = vocab();
        // Text after a special token gets its own leading space.
        assert_eq!(v.encode("hello<|x|>hello", false), vec![2, 8, 10, 13, 2, 8, 10]);
        let plain = v.encode("<ctl>", false);
        assert!(!plain.contains(&14));
        assert_eq!(v.encode("<ctl>hello", true), vec![14, 2, 8, 10]);
    }
}
