//! Reasoning blocks: how a model's chat template marks the thinking that
//! comes before its answer (`<think>…</think>` in Qwen3 and the DeepSeek-R1
//! distills; gpt-oss's Harmony `analysis` channel, before its `final`
//! one), read from the template's own text, and where a reply's thinking
//! ends as it streams.
//!
//! A Harmony reply is kept as gpt-oss writes it, llama.cpp's way: its
//! structure tokens are written out (`Tokenizer`), so the text reads
//! `<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…`
//! and its ids and text stay one to one. `ReasoningFormat::split` takes it
//! apart for the template (which wants the analysis as `thinking`) and for
//! the API (`reasoning_content`).

use serde::Serialize;

use crate::template::{ChatMessage, ChatTemplate};

/// The tags a template uses for thinking, and how it turns thinking on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningFormat {
    pub open: String,
    pub close: String,
    /// The template variable that turns thinking on or off (Qwen3's
    /// `enable_thinking`), where the template reads one.
    pub switch: Option<String>,
    /// The generation prompt itself ends with `open` (the R1 distills), so a
    /// reply begins inside the block and carries only the close tag.
    pub opened_by_prompt: bool,
    /// Harmony: the answer is what follows this header (its `final`
    /// channel), not simply what follows `close`.
    pub answer_start: Option<String>,
    /// The template variable that sets how hard the model thinks
    /// (gpt-oss's `reasoning_effort`: low, medium or high), where it reads one.
    pub effort: Option<String>,
}

/// How hard a model that takes a reasoning effort thinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "low" => Some(Self::Low),
            "medium" => Some(Self::Medium),
            "high" => Some(Self::High),
            _ => None,
        }
    }
}

/// Harmony's markup, as gpt-oss's template writes it.
const HARMONY_ANALYSIS: &str = "<|channel|>analysis<|message|>";
const HARMONY_FINAL: &str = "<|channel|>final<|message|>";
const HARMONY_END: &str = "<|end|>";

/// Variables templates read for the reasoning effort.
const EFFORTS: &[&str] = &["reasoning_effort"];

/// Tag pairs reasoning models use, most common first. A template that
/// names both tags of a pair declares it: templates must strip or keep
/// earlier thinking, so they spell its tags out.
const TAG_PAIRS: &[(&str, &str)] = &[
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("<seed:think>", "</seed:think>"),
    ("<|begin_of_thought|>", "<|end_of_thought|>"),
    // Gemma 4's thought channel.
    ("<|channel>thought", "<channel|>"),
    // Magistral and Ministral 3's reasoning models (tokens Hearth writes out:
    // `tokenizer::mistral_rendered_tokens`).
    ("[THINK]", "[/THINK]"),
];

/// Variables templates read to switch thinking on or off.
const SWITCHES: &[&str] = &["enable_thinking"];

impl ReasoningFormat {
    /// The template's reasoning format, if its text declares one.
    pub fn detect(template: &ChatTemplate) -> Option<Self> {
        let source = template.source();
        let effort = EFFORTS.iter().find(|s| source.contains(*s)).map(|s| s.to_string());
        if source.contains(HARMONY_ANALYSIS) && source.contains(HARMONY_FINAL) {
            return Some(Self {
                open: HARMONY_ANALYSIS.into(),
                close: HARMONY_END.into(),
                switch: None,
                opened_by_prompt: false,
                answer_start: Some(HARMONY_FINAL.into()),
                effort,
            });
        }
        let (open, close) = TAG_PAIRS.iter().find(|(open, close)| source.contains(open) && source.contains(close))?;
        let switch = SWITCHES.iter().find(|s| source.contains(*s)).map(|s| s.to_string());
        let opened_by_prompt =
            template.render(&[ChatMessage::user("Hi")], true).is_ok_and(|prompt| prompt.trim_end().ends_with(open));
        Some(Self {
            open: open.to_string(),
            close: close.to_string(),
            switch,
            opened_by_prompt,
            answer_start: None,
            effort,
        })
    }

    /// A Harmony reply taken apart: its analysis messages (joined by blank
    /// lines; `None` when it has none) and its final message, without
    /// their headers and ends. Text with no Harmony markup (typed or edited
    /// by hand, or from another model) is all answer. For tag formats the
    /// template takes replies apart itself, so this returns the text as it is.
    pub fn split(&self, text: &str) -> (Option<String>, String) {
        let Some(answer_start) = &self.answer_start else { return (None, text.to_string()) };
        let (before, answer) = match text.find(answer_start.as_str()) {
            Some(at) => (&text[..at], Some(&text[at + answer_start.len()..])),
            None => (text, None),
        };
        let mut analysis = Vec::new();
        let mut rest = before;
        while let Some(at) = rest.find(self.open.as_str()) {
            let body = &rest[at + self.open.len()..];
            let end = body.find(self.close.as_str()).unwrap_or(body.len());
            analysis.push(body[..end].trim());
            rest = &body[end..];
        }
        let thinking = (!analysis.is_empty()).then(|| analysis.join("\n\n"));
        let answer = match answer {
            Some(a) => a.split(self.close.as_str()).next().unwrap_or("").trim().to_string(),
            None if thinking.is_some() => String::new(),
            None => text.to_string(),
        };
        (thinking, answer)
    }

    /// Whether a reply begins inside the block, with thinking switched as
    /// `thinking`: where the generation prompt opens it, unless the template
    /// has a switch and it is off (Qwen 3.5's prompt then ends with an empty,
    /// closed block, and the reply is all answer).
    pub fn opened_with(&self, thinking: bool) -> bool {
        self.opened_by_prompt && (thinking || self.switch.is_none())
    }
}

/// Follows a reply as it streams and tells when its thinking ends: at the
/// close tag, when the reply began with the open tag (or the prompt
/// opened the block). A reply that begins with anything else has none.
#[derive(Debug, Clone)]
pub struct ThinkingTracker {
    format: ReasoningFormat,
    text: String,
    state: Thinking,
}

/// Where a reply is in its thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// Not yet known: the reply so far is whitespace or a prefix of the open tag.
    Undecided,
    /// Inside the block.
    Inside,
    /// The block closed with the token this many tokens in.
    Closed { tokens: usize },
    /// The reply does not think.
    None,
}

impl ThinkingTracker {
    /// `inside`: the prompt opened the block.
    pub fn new(format: ReasoningFormat, inside: bool) -> Self {
        Self { format, text: String::new(), state: if inside { Thinking::Inside } else { Thinking::Undecided } }
    }

    pub fn state(&self) -> Thinking {
        self.state
    }

    /// Feeds the text of the reply's `tokens`-th token.
    pub fn push(&mut self, text: &str, tokens: usize) -> Thinking {
        if matches!(self.state, Thinking::Closed { .. } | Thinking::None) {
            return self.state;
        }
        self.text.push_str(text);
        if self.state == Thinking::Undecided {
            let start = self.text.trim_start();
            if start.starts_with(&self.format.open) {
                self.state = Thinking::Inside;
                let skip = self.text.len() - start.len() + self.format.open.len();
                self.text.drain(..skip);
            } else if start.is_empty() || self.format.open.starts_with(start) {
                return self.state;
            } else {
                self.state = Thinking::None;
                self.text = String::new();
                return self.state;
            }
        }
        if self.text.contains(&self.format.close) {
            self.state = Thinking::Closed { tokens };
            self.text = String::new();
        } else {
            // Keep only what could still begin the close tag.
            let keep = self.format.close.len();
            if self.text.len() > 4 * keep {
                let mut cut = self.text.len() - keep;
                while !self.text.is_char_boundary(cut) {
                    cut -= 1;
                }
                self.text.drain(..cut);
            }
        }
        self.state
    }
}

/// Takes a reply apart as it streams: each piece of text goes to the
/// reasoning or to the answer, as `ReasoningFormat::split` would take the
/// whole reply apart (what the API sends as `reasoning_content` and
/// `content`). Markup is dropped; a piece of text that may still become
/// markup waits for the next.
#[derive(Debug, Clone)]
pub struct ReplySplitter {
    format: ReasoningFormat,
    pending: String,
    state: Part,
    /// Reasoning was given out already (a later analysis message is set
    /// apart by a blank line, as `split` joins them).
    reasoned: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Before anything is known (tag formats), or a Harmony message header.
    Start,
    /// `started`: past the blank space a part's start drops.
    Reasoning {
        started: bool,
    },
    Answer {
        started: bool,
    },
    /// A Harmony message to a recipient (`to=functions.NAME`): a tool
    /// call, which goes out as a call, neither reasoning nor answer.
    Call,
}

/// Text that goes to a reply's reasoning and to its answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SplitText {
    pub reasoning: String,
    pub answer: String,
}

impl ReplySplitter {
    /// `inside`: the prompt opened the reasoning block
    /// (`ReasoningFormat::opened_with`).
    pub fn new(format: ReasoningFormat, inside: bool) -> Self {
        let state = if inside { Part::Reasoning { started: false } } else { Part::Start };
        Self { format, pending: String::new(), state, reasoned: false }
    }

    fn harmony(&self) -> bool {
        self.format.answer_start.is_some()
    }

    /// The next piece of the reply.
    pub fn push(&mut self, text: &str) -> SplitText {
        self.pending.push_str(text);
        let mut out = SplitText::default();
        loop {
            let before = (self.state, self.pending.len());
            self.step(&mut out, false);
            if (self.state, self.pending.len()) == before {
                return out;
            }
        }
    }

    /// The end of the reply: whatever waited is given out as it stands.
    pub fn finish(&mut self) -> SplitText {
        let mut out = SplitText::default();
        if self.state == Part::Start && !self.harmony() {
            self.step(&mut out, true);
        }
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            Part::Reasoning { .. } => out.reasoning.push_str(rest.trim_end()),
            Part::Answer { .. } if self.harmony() => out.answer.push_str(rest.trim_end()),
            Part::Answer { .. } => out.answer.push_str(&rest),
            // A header that never finished, or a call.
            Part::Start | Part::Call => {}
        }
        out
    }

    fn step(&mut self, out: &mut SplitText, end: bool) {
        let close = self.format.close.clone();
        match self.state {
            Part::Start if self.harmony() => {
                // A header: `<|start|>assistant<|channel|>NAME<|message|>`
                // or its tail. Anything else is no Harmony at all.
                if let Some(at) = self.pending.find("<|message|>") {
                    let header = &self.pending[..at];
                    let channel = header.rsplit("<|channel|>").next().unwrap_or("").trim();
                    let is_final = header.contains("<|channel|>") && channel.starts_with("final");
                    let is_call = header.contains("to=");
                    self.pending.drain(..at + "<|message|>".len());
                    self.state = if is_call {
                        Part::Call
                    } else if is_final {
                        Part::Answer { started: false }
                    } else {
                        Part::Reasoning { started: false }
                    };
                } else {
                    // A call may be written in the role's header instead:
                    // ` to=functions.NAME<|channel|>commentary json<|message|>`.
                    let start = self.pending.trim_start();
                    let header = start.starts_with("<|")
                        || "<|".starts_with(start)
                        || start.starts_with("to=")
                        || "to=".starts_with(start);
                    if !header {
                        self.state = Part::Answer { started: true };
                    }
                }
            }
            Part::Start => {
                let start = self.pending.trim_start();
                if let Some(rest) = start.strip_prefix(self.format.open.as_str()) {
                    self.pending = rest.to_string();
                    self.state = Part::Reasoning { started: false };
                } else if end || !(start.is_empty() || self.format.open.starts_with(start)) {
                    self.state = Part::Answer { started: true };
                }
            }
            Part::Reasoning { started: false } | Part::Answer { started: false } => {
                let trimmed = self.pending.trim_start().len();
                self.pending.drain(..self.pending.len() - trimmed);
                if !self.pending.is_empty() {
                    self.state = match self.state {
                        Part::Reasoning { .. } => {
                            if self.reasoned {
                                // A later analysis message, set apart as `split` joins them.
                                out.reasoning.push_str("\n\n");
                            }
                            Part::Reasoning { started: true }
                        }
                        _ => Part::Answer { started: true },
                    };
                }
            }
            Part::Reasoning { started: true } => {
                let reasoning = &mut out.reasoning;
                let done = give_until(&mut self.pending, &close, reasoning);
                self.reasoned = true;
                if done {
                    self.state = if self.harmony() { Part::Start } else { Part::Answer { started: false } };
                }
            }
            Part::Answer { started: true } if self.harmony() => {
                if give_until(&mut self.pending, &close, &mut out.answer) {
                    self.state = Part::Start;
                }
            }
            Part::Answer { started: true } => out.answer.push_str(&std::mem::take(&mut self.pending)),
            // It ends the reply (`<|call|>` is an end token).
            Part::Call => self.pending.clear(),
        }
    }
}

/// Moves `pending`'s text up to `close` into `out`, without the blank
/// space before `close`; true when `close` came (and is dropped). Until
/// then, an end that may begin `close` or be blank space before it waits.
fn give_until(pending: &mut String, close: &str, out: &mut String) -> bool {
    if let Some(at) = pending.find(close) {
        out.push_str(pending[..at].trim_end());
        pending.drain(..at + close.len());
        return true;
    }
    let partial = partial_suffix(pending, close);
    let give = pending[..pending.len() - partial].trim_end().len();
    out.push_str(&pending[..give]);
    pending.drain(..give);
    false
}

/// The length of the longest end of `text` that begins `tag` (a tag still
/// arriving), on a character boundary.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn think() -> ReasoningFormat {
        ReasoningFormat {
            open: "<think>".into(),
            close: "</think>".into(),
            switch: None,
            opened_by_prompt: false,
            answer_start: None,
            effort: None,
        }
    }

    fn harmony() -> ReasoningFormat {
        ReasoningFormat {
            open: HARMONY_ANALYSIS.into(),
            close: HARMONY_END.into(),
            switch: None,
            opened_by_prompt: false,
            answer_start: Some(HARMONY_FINAL.into()),
            effort: Some("reasoning_effort".into()),
        }
    }

    #[test]
    fn a_harmony_call_is_neither_reasoning_nor_answer() {
        // A call written in the role's header, as the reply's first message.
        let mut s = ReplySplitter::new(harmony(), false);
        let mut out = s.push(" to=functions.f<|channel|>commentary json<|message|>{\"a\": 1}");
        let rest = s.finish();
        out.answer.push_str(&rest.answer);
        assert_eq!((out.reasoning.as_str(), out.answer.as_str()), ("", ""));
        let mut s = ReplySplitter::new(harmony(), false);
        let mut out = s.push("<|channel|>analysis<|message|>Need the file.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}");
        let rest = s.finish();
        out.reasoning.push_str(&rest.reasoning);
        out.answer.push_str(&rest.answer);
        assert_eq!((out.reasoning.as_str(), out.answer.as_str()), ("Need the file.", ""));
    }

    #[test]
    fn a_harmony_reply_splits_into_its_analysis_and_its_final_message() {
        let h = harmony();
        let reply = "<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|><|start|>assistant<|channel|>final<|message|>**4**";
        assert_eq!(h.split(reply), (Some("User asks 2+2. Simple.".into()), "**4**".into()));
        // Two analysis messages, and a final one that ended with <|end|>.
        let two =
            "<|channel|>analysis<|message|>One.<|end|><|start|>assistant<|channel|>analysis<|message|>Two.<|end|>\
                   <|start|>assistant<|channel|>final<|message|>Done.<|end|>";
        assert_eq!(h.split(two), (Some("One.\n\nTwo.".into()), "Done.".into()));
        // Straight to the answer; still thinking; no markup at all.
        assert_eq!(h.split("<|channel|>final<|message|>Hi"), (None, "Hi".into()));
        assert_eq!(h.split("<|channel|>analysis<|message|>Hmm, the us"), (Some("Hmm, the us".into()), String::new()));
        assert_eq!(h.split("Typed by hand."), (None, "Typed by hand.".into()));
        // Tag formats are the template's to take apart.
        assert_eq!(think().split("<think>a</think>b"), (None, "<think>a</think>b".into()));
    }

    /// Feeds `reply` in pieces of `n` characters; the reasoning and answer.
    fn stream(format: ReasoningFormat, inside: bool, reply: &str, n: usize) -> (String, String) {
        let mut s = ReplySplitter::new(format, inside);
        let (mut r, mut a) = (String::new(), String::new());
        let chars: Vec<char> = reply.chars().collect();
        for piece in chars.chunks(n) {
            let out = s.push(&piece.iter().collect::<String>());
            r.push_str(&out.reasoning);
            a.push_str(&out.answer);
        }
        let out = s.finish();
        (r + &out.reasoning, a + &out.answer)
    }

    #[test]
    fn a_streamed_reply_splits_as_the_whole_reply_does_in_pieces_of_any_size() {
        let two =
            "<|channel|>analysis<|message|>One.<|end|><|start|>assistant<|channel|>analysis<|message|>Two.<|end|>\
                   <|start|>assistant<|channel|>final<|message|>Done, naïve 日本.";
        let cases = [
            (
                harmony(),
                false,
                "<|channel|>analysis<|message|>User asks 2+2.<|end|><|start|>assistant<|channel|>final<|message|>**4**",
            ),
            (harmony(), false, two),
            (harmony(), false, "<|channel|>final<|message|>Straight away.<|end|>"),
            (harmony(), false, "<|channel|>analysis<|message|>Cut off while thin"),
            (harmony(), false, "Plain text, no markup."),
            (think(), false, "\n<think>\nHmm.\n</think>\n\nThe answer </think> is 4."),
            (think(), false, "No thinking here."),
            (think(), true, "Opened by the prompt.</think>\n\nAnswer."),
        ];
        for (format, inside, reply) in cases {
            let (thinking, answer) = format.split(reply);
            let whole = if format.answer_start.is_some() {
                (thinking.unwrap_or_default(), answer)
            } else {
                // Tag formats: what the UI shows.
                match (inside, reply.trim_start().strip_prefix("<think>")) {
                    (true, _) => {
                        let (t, a) = reply.split_once("</think>").unwrap();
                        (t.trim().to_string(), a.trim_start().to_string())
                    }
                    (false, Some(rest)) => {
                        let (t, a) = rest.split_once("</think>").unwrap();
                        (t.trim().to_string(), a.trim_start().to_string())
                    }
                    (false, None) => (String::new(), reply.to_string()),
                }
            };
            for n in [1, 2, 3, 7, 1000] {
                assert_eq!(stream(format.clone(), inside, reply, n), whole, "{reply:?} in pieces of {n}");
            }
        }
    }

    #[test]
    fn a_harmony_reply_thinks_until_its_analysis_ends() {
        let mut t = ThinkingTracker::new(harmony(), false);
        assert_eq!(t.push("<|channel|>", 1), Thinking::Undecided);
        assert_eq!(t.push("analysis", 2), Thinking::Undecided);
        assert_eq!(t.push("<|message|>", 3), Thinking::Inside);
        assert_eq!(t.push("Simple math.", 4), Thinking::Inside);
        assert_eq!(t.push("<|end|>", 5), Thinking::Closed { tokens: 5 });
        let mut t = ThinkingTracker::new(harmony(), false);
        assert_eq!(t.push("<|channel|>", 1), Thinking::Undecided);
        assert_eq!(t.push("final", 2), Thinking::None);
    }

    #[test]
    fn a_reply_that_opens_with_the_tag_thinks_until_the_close_tag() {
        let mut t = ThinkingTracker::new(think(), false);
        assert_eq!(t.push("\n", 1), Thinking::Undecided);
        assert_eq!(t.push("<th", 2), Thinking::Undecided);
        assert_eq!(t.push("ink>\nHmm", 3), Thinking::Inside);
        assert_eq!(t.push(" let me see ".repeat(20).as_str(), 4), Thinking::Inside);
        assert_eq!(t.push("</th", 5), Thinking::Inside);
        assert_eq!(t.push("ink>\n\n4", 6), Thinking::Closed { tokens: 6 });
        assert_eq!(t.push("<think>", 7), Thinking::Closed { tokens: 6 });
    }

    #[test]
    fn a_reply_that_begins_otherwise_has_no_thinking() {
        let mut t = ThinkingTracker::new(think(), false);
        assert_eq!(t.push("The answer", 1), Thinking::None);
        assert_eq!(t.push(" </think>", 2), Thinking::None);
        let mut t = ThinkingTracker::new(think(), false);
        assert_eq!(t.push("<b>", 1), Thinking::None);
    }

    #[test]
    fn a_block_the_prompt_opened_closes_at_the_first_close_tag() {
        let mut t = ThinkingTracker::new(think(), true);
        assert_eq!(t.push("First, ", 1), Thinking::Inside);
        assert_eq!(t.push("naïve 日本 </think>", 2), Thinking::Closed { tokens: 2 });
    }
}
