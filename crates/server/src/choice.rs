//! `ChoiceText`: one sampled sequence's text taken apart as it streams
//! into reasoning, answer and tool calls, the same for every endpoint's
//! shape (chat completions, Responses, Messages).

use hearth_engine::{ReasoningFormat, ReplySplitter, SplitText, ToolCall, ToolFormat};

/// What a piece of new text adds that can go out now.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Piece {
    pub reasoning: String,
    /// Answer text that cannot be part of a tool call.
    pub content: String,
}

impl Piece {
    fn append(&mut self, other: Piece) {
        self.reasoning.push_str(&other.reasoning);
        self.content.push_str(&other.content);
    }
}

#[derive(Debug, Clone)]
pub struct ChoiceText {
    /// A reasoning model's replies: reasoning and answer taken apart.
    splitter: Option<ReplySplitter>,
    /// Reasoning and answer so far (the whole text is answer without a splitter).
    split: SplitText,
    /// Where tools were offered: the form their calls take in a reply.
    tools: Option<ToolFormat>,
    /// How much of the answer went out as content (a call's text never does).
    sent: usize,
    /// The whole text: Harmony's call is a commentary message the splitter
    /// keeps out of the answer.
    text: String,
}

impl ChoiceText {
    /// `reasoning`: the model's format and whether the prompt opened its
    /// thinking block; `tools`: the calls' form, where tools were offered.
    pub fn new(reasoning: Option<(ReasoningFormat, bool)>, tools: Option<ToolFormat>) -> Self {
        Self {
            splitter: reasoning.map(|(format, inside)| ReplySplitter::new(format, inside)),
            split: SplitText::default(),
            tools,
            sent: 0,
            text: String::new(),
        }
    }

    /// Whether reasoning is taken apart from the answer.
    pub fn splits(&self) -> bool {
        self.splitter.is_some()
    }

    /// Whether tools were offered.
    pub fn has_tools(&self) -> bool {
        self.tools.is_some()
    }

    /// Takes new text; returns what of it can go out now. With tools, what
    /// may begin a call waits.
    pub fn push(&mut self, text: &str) -> Piece {
        self.text.push_str(text);
        let out = match self.splitter.as_mut() {
            Some(s) => s.push(text),
            None => SplitText { reasoning: String::new(), answer: text.to_string() },
        };
        self.take(out)
    }

    /// At the end: what waited for more text (a tag that never came). What
    /// waited as a possible call stays for `calls` or `unsent`.
    pub fn finish(&mut self) -> Piece {
        match self.splitter.as_mut() {
            Some(s) => {
                let rest = s.finish();
                self.take(rest)
            }
            None => Piece::default(),
        }
    }

    /// `push` then `finish`.
    pub fn push_last(&mut self, text: &str) -> Piece {
        let mut piece = self.push(text);
        piece.append(self.finish());
        piece
    }

    fn take(&mut self, out: SplitText) -> Piece {
        self.split.reasoning.push_str(&out.reasoning);
        self.split.answer.push_str(&out.answer);
        let content = match self.tools {
            None => {
                self.sent = self.split.answer.len();
                out.answer
            }
            Some(format) => {
                let end = format.content_end(&self.split.answer);
                if end <= self.sent {
                    String::new()
                } else {
                    let content = self.split.answer[self.sent..end].to_string();
                    self.sent = end;
                    content
                }
            }
        };
        Piece { reasoning: out.reasoning, content }
    }

    /// The calls made (ids `PREFIX0`, `PREFIX1`, …) and the answer without
    /// them; `None` when tools were not offered or none was called.
    /// A call made again with the same arguments is made once.
    pub fn calls(&self, id_prefix: &str) -> Option<(String, Vec<ToolCall>)> {
        let format = self.tools?;
        let (content, mut calls) = if format == ToolFormat::Harmony {
            (self.split.answer.trim().to_string(), format.parse(&self.text, id_prefix).1)
        } else {
            format.parse(&self.split.answer, id_prefix)
        };
        let mut seen = Vec::new();
        calls.retain(|c| {
            let key = (c.name.clone(), c.arguments.clone());
            let first = !seen.contains(&key);
            seen.push(key);
            first
        });
        (!calls.is_empty()).then_some((content, calls))
    }

    /// With tools and no call after all: the answer that waited, as
    /// content; nothing when the reply was `cut` at its limit, where what
    /// waited is the start of a call the limit broke off.
    pub fn unsent(&mut self, cut: bool) -> String {
        if cut && self.tools.is_some() {
            return String::new();
        }
        let rest = self.split.answer[self.sent.min(self.split.answer.len())..].to_string();
        self.sent = self.split.answer.len();
        rest
    }

    /// The answer as content: with tools and a reply `cut` at its limit,
    /// without the call it was writing.
    pub fn content(&self, cut: bool) -> &str {
        match self.tools {
            Some(format) if cut => &self.split.answer[..format.content_end(&self.split.answer)],
            _ => &self.split.answer,
        }
    }

    /// The answer so far (all the text but reasoning).
    pub fn answer(&self) -> &str {
        &self.split.answer
    }

    /// The reasoning so far.
    pub fn reasoning(&self) -> &str {
        &self.split.reasoning
    }
}
