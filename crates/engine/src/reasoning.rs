//! Reasoning blocks: how a model's chat template marks the thinking that
//! comes before its answer (`<think>…</think>` in Qwen3 and the DeepSeek-R1
//! distills), read from the template's own text, and where a reply's
//! thinking ends as it streams.

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
}

/// Tag pairs reasoning models use, most common first. A template that
/// names both tags of a pair declares it: templates must strip or keep
/// earlier thinking, so they spell its tags out.
const TAG_PAIRS: &[(&str, &str)] = &[
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("<seed:think>", "</seed:think>"),
    ("<|begin_of_thought|>", "<|end_of_thought|>"),
];

/// Variables templates read to switch thinking on or off.
const SWITCHES: &[&str] = &["enable_thinking"];

impl ReasoningFormat {
    /// The template's reasoning format, if its text declares one.
    pub fn detect(template: &ChatTemplate) -> Option<Self> {
        let source = template.source();
        let (open, close) = TAG_PAIRS.iter().find(|(open, close)| source.contains(open) && source.contains(close))?;
        let switch = SWITCHES.iter().find(|s| source.contains(*s)).map(|s| s.to_string());
        let opened_by_prompt =
            template.render(&[ChatMessage::user("Hi")], true).is_ok_and(|prompt| prompt.trim_end().ends_with(open));
        Some(Self { open: open.to_string(), close: close.to_string(), switch, opened_by_prompt })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn think() -> ReasoningFormat {
        ReasoningFormat { open: "<think>".into(), close: "</think>".into(), switch: None, opened_by_prompt: false }
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
