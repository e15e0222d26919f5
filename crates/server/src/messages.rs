//! Anthropic's Messages API (`POST /v1/messages`, `POST
//! /v1/messages/count_tokens`), as Claude Code and the `anthropic` SDKs
//! call it: the body becomes a `Generation` like a chat completion's, and
//! the reply goes out as content blocks (`thinking`, `text`, `tool_use`)
//! with Anthropic's stream events and error shape.

use axum::response::sse::{Event, KeepAlive};
use hearth_engine::{ChatMessage, Role, ToolCall, ToolChoice};
use hearth_store::{ReplyStats, TokenChoice};
use serde_json::{json, Value};

use crate::choice::ChoiceText;
use crate::fields::{checked_tools, function_tool, Fields};
use crate::response::random_hex;
use crate::run::{named, PromptSize, Shape};
use crate::{ApiError, Generation};

/// A Messages body, read.
pub struct MessagesRequest {
    pub generation: Generation,
}

impl MessagesRequest {
    /// A `/v1/messages` body; `counting`: a `count_tokens` body, which has no `max_tokens`.
    pub fn parse(body: &[u8], counting: bool) -> Result<Self, ApiError> {
        let fields = Fields::parse(body)?;
        if let Some(m) = fields.get("model") {
            if !m.is_string() {
                return Err(ApiError::field("model", "must be a string"));
            }
        }
        let max_tokens = match fields.uint("max_tokens", 1, 1_000_000)? {
            Some(m) => Some(m),
            None if counting => None,
            None => return Err(ApiError::field("max_tokens", "is required")),
        };
        let stop_sequences = match fields.get("stop_sequences") {
            None => Vec::new(),
            Some(Value::Array(a)) if a.iter().all(|s| s.as_str().is_some_and(|s| !s.is_empty())) => {
                a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()
            }
            Some(_) => return Err(ApiError::field("stop_sequences", "must be a list of non-empty strings")),
        };
        if stop_sequences.len() > crate::request::MAX_STOP {
            return Err(ApiError::field("stop_sequences", format!("must be at most {}", crate::request::MAX_STOP)));
        }
        if fields.get("metadata").is_some_and(|m| !m.is_object()) {
            return Err(ApiError::field("metadata", "must be an object"));
        }
        let mut settings = fields.settings(max_tokens, stop_sequences, 1.0)?;
        match fields.get("thinking") {
            None => {}
            Some(Value::Object(t)) => match t.get("type").and_then(Value::as_str) {
                Some("enabled" | "adaptive" | "between_tools") => settings.thinking = true,
                Some("disabled") => settings.thinking = false,
                _ => {
                    return Err(ApiError::field(
                        "thinking.type",
                        "must be enabled, adaptive, between_tools or disabled",
                    ))
                }
            },
            Some(_) => return Err(ApiError::field("thinking", "must be an object")),
        }
        // `output_config`: the effort (for templates that read one) and a
        // JSON schema the reply follows.
        let mut grammar = None;
        match fields.get("output_config") {
            None => {}
            Some(Value::Object(c)) => {
                match c.get("effort") {
                    None | Some(Value::Null) => {}
                    Some(Value::String(e)) => {
                        settings.reasoning_effort = match e.as_str() {
                            "low" => hearth_store::ReasoningEffort::Low,
                            "medium" => hearth_store::ReasoningEffort::Medium,
                            "high" | "xhigh" | "max" => hearth_store::ReasoningEffort::High,
                            _ => {
                                return Err(ApiError::field(
                                    "output_config.effort",
                                    "must be low, medium, high, xhigh or max",
                                ))
                            }
                        }
                    }
                    Some(_) => return Err(ApiError::field("output_config.effort", "must be a string")),
                }
                match c.get("format") {
                    None | Some(Value::Null) => {}
                    Some(f) if f.get("type").and_then(Value::as_str) == Some("json_schema") => match f.get("schema") {
                        Some(schema @ Value::Object(_)) => {
                            grammar = Some(hearth_engine::GrammarSpec::JsonSchema(schema.clone()))
                        }
                        _ => {
                            return Err(ApiError::field(
                                "output_config.format.schema",
                                "is required: a JSON schema object",
                            ))
                        }
                    },
                    Some(_) => return Err(ApiError::field("output_config.format.type", "must be json_schema")),
                }
            }
            Some(_) => return Err(ApiError::field("output_config", "must be an object")),
        }
        let mut messages = system(fields.get("system"))?;
        messages.extend(conversation(fields.get("messages"))?);
        let tools = tools(&fields)?;
        let stream = fields.bool("stream", false)?;
        Ok(Self {
            generation: Generation::conversation(messages, settings, stream, grammar, "output_config.format", tools)?,
        })
    }
}

/// `system`: a string, or text blocks.
fn system(value: Option<&Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let text = match value {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(i, b)| match (b.get("type").and_then(Value::as_str), b.get("text").and_then(Value::as_str)) {
                (Some("text"), Some(t)) => Ok(t),
                _ => Err(ApiError::field(&format!("system[{i}]"), "must be a text block")),
            })
            .collect::<Result<Vec<_>, _>>()?
            .join("\n"),
        Some(_) => return Err(ApiError::field("system", "must be a string or a list of text blocks")),
    };
    Ok(if text.is_empty() { Vec::new() } else { vec![ChatMessage::new(Role::System, text)] })
}

/// `messages`: user and assistant turns of content blocks. A user turn's
/// `tool_result` blocks become tool messages (before its text, as
/// Anthropic orders them); an assistant turn's `tool_use` blocks its calls
/// and its `thinking` its reasoning.
fn conversation(value: Option<&Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let Some(Value::Array(list)) = value else {
        return Err(ApiError::field("messages", "is required: a list of {role, content}"));
    };
    if list.is_empty() {
        return Err(ApiError::field("messages", "must hold at least one message"));
    }
    let mut out = Vec::new();
    // The calls of the assistant turn before, each answered once.
    let mut call_ids: Vec<String> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = |what: &str| format!("messages[{i}].{what}");
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            // Claude Code sends instructions as system turns between the others.
            Some("system") => Role::System,
            Some(other) => {
                return Err(ApiError::field(&at("role"), format!("\"{other}\" is not user, assistant or system")))
            }
            None => return Err(ApiError::field(&at("role"), "is required")),
        };
        let blocks = match m.get("content") {
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            Some(Value::Array(blocks)) => blocks.clone(),
            _ => return Err(ApiError::field(&at("content"), "must be a string or a list of content blocks")),
        };
        if role == Role::Assistant {
            call_ids.clear();
        }
        let mut text = String::new();
        let mut thinking: Option<String> = None;
        let mut calls = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            let at = |what: &str| at(&format!("content[{j}]{what}"));
            let kind = b.get("type").and_then(Value::as_str).unwrap_or_default();
            match (role, kind) {
                (_, "text") => match b.get("text").and_then(Value::as_str) {
                    Some(t) => text.push_str(t),
                    None => return Err(ApiError::field(&at(".text"), "must be a string")),
                },
                (Role::User, "tool_result") => {
                    let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
                        return Err(ApiError::field(&at(".tool_use_id"), "is required"));
                    };
                    let Some(k) = call_ids.iter().position(|c| c == id) else {
                        return Err(ApiError::field(
                            &at(".tool_use_id"),
                            format!("\"{id}\" answers no unanswered tool_use block of the assistant message before"),
                        ));
                    };
                    call_ids.remove(k);
                    let mut result = match b.get("content") {
                        None | Some(Value::Null) => String::new(),
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Array(parts)) => {
                            let mut t = String::new();
                            for p in parts {
                                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                                    (Some("text"), Some(s)) => t.push_str(s),
                                    _ => {
                                        return Err(ApiError::field(&at(".content"), "only text blocks are supported"))
                                    }
                                }
                            }
                            t
                        }
                        Some(_) => return Err(ApiError::field(&at(".content"), "must be a string or text blocks")),
                    };
                    // The templates have no error flag: the model reads it.
                    if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                        result = format!("Error: {result}");
                    }
                    let mut message = ChatMessage::new(Role::Tool, result);
                    message.tool_call_id = Some(id.to_string());
                    out.push(message);
                }
                (Role::Assistant, "tool_use") => {
                    let (Some(id), Some(name)) =
                        (b.get("id").and_then(Value::as_str), b.get("name").and_then(Value::as_str))
                    else {
                        return Err(ApiError::field(&at(""), "a tool_use block needs id and name"));
                    };
                    let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                    if !input.is_object() {
                        return Err(ApiError::field(&at(".input"), "must be an object"));
                    }
                    call_ids.push(id.to_string());
                    calls.push(ToolCall { id: id.to_string(), name: name.to_string(), arguments: input.to_string() });
                }
                (Role::Assistant, "thinking") => match b.get("thinking").and_then(Value::as_str) {
                    Some(t) => thinking.get_or_insert_with(String::new).push_str(t),
                    None => return Err(ApiError::field(&at(".thinking"), "must be a string")),
                },
                // Another server's encrypted reasoning: nothing a local model can read.
                (Role::Assistant, "redacted_thinking") => {}
                (Role::User, "tool_use" | "thinking" | "redacted_thinking") | (Role::Assistant, "tool_result") => {
                    return Err(ApiError::field(
                        &at(".type"),
                        format!(
                            "a {kind} block cannot be in a {} message",
                            if role == Role::User { "user" } else { "assistant" }
                        ),
                    ))
                }
                _ => {
                    return Err(ApiError::field(
                        &at(".type"),
                        format!("\"{kind}\" blocks are not supported (text, tool_use, tool_result and thinking are)"),
                    ))
                }
            }
        }
        match role {
            Role::System => out.push(ChatMessage::new(Role::System, text)),
            Role::Assistant => {
                let mut message = ChatMessage::new(Role::Assistant, text);
                message.thinking = thinking;
                message.tool_calls = (!calls.is_empty()).then_some(calls);
                out.push(message);
            }
            _ if !text.is_empty()
                || !blocks.iter().any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result")) =>
            {
                out.push(ChatMessage::new(Role::User, text))
            }
            _ => {}
        }
    }
    if out.last().is_some_and(|m| m.role == Role::Assistant) {
        return Err(ApiError::field(
            &format!("messages[{}]", list.len() - 1),
            "a reply cannot be continued from a final assistant message here; end with a user message",
        ));
    }
    Ok(out)
}

/// `tools` (`name`, `description`, `input_schema`) and `tool_choice`.
fn tools(fields: &Fields) -> Result<hearth_engine::Tools, ApiError> {
    let specs = match fields.get("tools") {
        None => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let at = |what: &str| format!("tools[{i}].{}", if what == "parameters" { "input_schema" } else { what });
                match t.get("type").and_then(Value::as_str) {
                    None | Some("custom") => {}
                    Some(other) => {
                        return Err(ApiError::field(
                            &at("type"),
                            format!("\"{other}\" is a server tool, which Hearth does not have; give client tools (name, description, input_schema)"),
                        ))
                    }
                }
                if !t.get("input_schema").is_some_and(Value::is_object) {
                    return Err(ApiError::field(&at("input_schema"), "is required: a JSON schema object"));
                }
                function_tool(t.get("name"), t.get("description"), t.get("input_schema"), &at)
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(ApiError::field("tools", "must be a list")),
    };
    let (choice, parallel) = match fields.get("tool_choice") {
        None => (ToolChoice::Auto, true),
        Some(Value::Object(c)) => {
            let parallel = !c.get("disable_parallel_tool_use").and_then(Value::as_bool).unwrap_or(false);
            let choice = match c.get("type").and_then(Value::as_str) {
                Some("auto") => ToolChoice::Auto,
                Some("any") => ToolChoice::Required,
                Some("none") => ToolChoice::None,
                Some("tool") => match c.get("name").and_then(Value::as_str) {
                    Some(n) => ToolChoice::Function(n.to_string()),
                    None => return Err(ApiError::field("tool_choice.name", "is required with type \"tool\"")),
                },
                _ => return Err(ApiError::field("tool_choice.type", "must be auto, any, tool or none")),
            };
            (choice, parallel)
        }
        Some(_) => return Err(ApiError::field("tool_choice", "must be an object")),
    };
    checked_tools(specs, choice, parallel, "tool_choice")
}

/// The block being streamed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Thinking,
    Text,
}

/// A reply as a Message: content blocks, streamed with Anthropic's events.
pub struct MessageReply {
    id: String,
    model: String,
    text: ChoiceText,
    /// The blocks started so far, and the one open.
    blocks: usize,
    open: Option<Block>,
    tool_prefix: String,
}

impl MessageReply {
    pub fn new(started: &crate::run::Started) -> Self {
        Self {
            id: format!("msg_{}", random_hex()),
            model: started.model.clone(),
            text: ChoiceText::new(started.reasoning.clone(), started.tools),
            blocks: 0,
            open: None,
            tool_prefix: format!("toolu_{}_", random_hex()),
        }
    }

    fn message(&self, content: Vec<Value>, stop: Option<(&str, Option<&str>)>, usage: Value) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop.map(|s| s.0),
            "stop_sequence": stop.and_then(|s| s.1),
            "usage": usage,
        })
    }

    /// Why the reply ended, in Anthropic's words, and the stop sequence met.
    fn stop(stats: &ReplyStats, called: bool) -> (&'static str, Option<&str>) {
        match stats.finish_reason.as_str() {
            "max_tokens" | "cache_full" => ("max_tokens", None),
            "stop_string" => ("stop_sequence", stats.stop_string.as_deref()),
            _ if called => ("tool_use", None),
            _ => ("end_turn", None),
        }
    }

    fn calls(&self) -> Option<(String, Vec<ToolCall>)> {
        self.text.calls(&self.tool_prefix)
    }

    /// Events that put `piece` in the right blocks.
    fn stream_piece(&mut self, piece: crate::choice::Piece, out: &mut Vec<Event>) {
        for (block, text) in [(Block::Thinking, piece.reasoning), (Block::Text, piece.content)] {
            if text.is_empty() {
                continue;
            }
            if self.open != Some(block) {
                self.close(out);
                let start = match block {
                    Block::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
                    Block::Text => json!({"type": "text", "text": ""}),
                };
                out.push(named(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": self.blocks, "content_block": start}),
                ));
                self.open = Some(block);
            }
            let delta = match block {
                Block::Thinking => json!({"type": "thinking_delta", "thinking": text}),
                Block::Text => json!({"type": "text_delta", "text": text}),
            };
            out.push(named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": self.blocks, "delta": delta}),
            ));
        }
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        if self.open.take().is_some() {
            out.push(named("content_block_stop", &json!({"type": "content_block_stop", "index": self.blocks})));
            self.blocks += 1;
        }
    }
}

/// A call's input: its arguments as the object they spell.
fn input(call: &ToolCall) -> Value {
    serde_json::from_str::<Value>(&call.arguments).ok().filter(Value::is_object).unwrap_or_else(|| json!({}))
}

/// Anthropic's usage: `input_tokens` are those run, `cache_read_input_tokens`
/// those a cache served (Hearth caches every prefix; nothing is "created").
fn usage(stats: &ReplyStats) -> Value {
    json!({
        "input_tokens": stats.processed_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": stats.prompt_tokens.saturating_sub(stats.processed_tokens),
        "output_tokens": crate::response::completion_tokens(stats),
    })
}

impl Shape for MessageReply {
    fn opening(&mut self, prompt: Option<PromptSize>) -> Vec<Event> {
        // As Anthropic's: the prompt's tokens are known before the first
        // token (those read now, and those the cache served).
        let PromptSize { tokens, cached } = prompt.unwrap_or_default();
        let usage = json!({
            "input_tokens": tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": 0,
        });
        vec![named(
            "message_start",
            &json!({"type": "message_start", "message": self.message(Vec::new(), None, usage)}),
        )]
    }

    fn tokens(&mut self, text: String, _variant: usize, _choices: Vec<TokenChoice>) -> Vec<Event> {
        let piece = self.text.push(&text);
        let mut out = Vec::new();
        self.stream_piece(piece, &mut out);
        out
    }

    fn finished(&mut self, stats: &ReplyStats, _others: &[ReplyStats]) -> Vec<Event> {
        let mut out = Vec::new();
        let piece = self.text.finish();
        self.stream_piece(piece, &mut out);
        let calls = self.calls();
        match &calls {
            Some((_, calls)) => {
                self.close(&mut out);
                for call in calls {
                    let start = json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}});
                    out.push(named(
                        "content_block_start",
                        &json!({"type": "content_block_start", "index": self.blocks, "content_block": start}),
                    ));
                    let delta = json!({"type": "input_json_delta", "partial_json": input(call).to_string()});
                    out.push(named(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": self.blocks, "delta": delta}),
                    ));
                    out.push(named("content_block_stop", &json!({"type": "content_block_stop", "index": self.blocks})));
                    self.blocks += 1;
                }
            }
            None => {
                let cut = matches!(stats.finish_reason.as_str(), "max_tokens" | "cache_full");
                let rest = self.text.unsent(cut);
                self.stream_piece(crate::choice::Piece { reasoning: String::new(), content: rest }, &mut out);
                self.close(&mut out);
            }
        }
        let (reason, sequence) = Self::stop(stats, calls.is_some());
        out.push(named(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage(stats)}),
        ));
        out.push(named("message_stop", &json!({"type": "message_stop"})));
        out
    }

    fn whole(&mut self, stats: &ReplyStats, _others: &[ReplyStats]) -> Value {
        self.text.finish();
        let mut content = Vec::new();
        if !self.text.reasoning().is_empty() {
            content.push(json!({"type": "thinking", "thinking": self.text.reasoning(), "signature": ""}));
        }
        let calls = self.calls();
        let answer = match &calls {
            Some((content, _)) => content.clone(),
            None => self.text.content(matches!(stats.finish_reason.as_str(), "max_tokens" | "cache_full")).to_string(),
        };
        if !answer.is_empty() {
            content.push(json!({"type": "text", "text": answer}));
        }
        for call in calls.iter().flat_map(|(_, c)| c) {
            content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input(call)}));
        }
        let stop = Self::stop(stats, calls.is_some());
        self.message(content, Some(stop), usage(stats))
    }

    fn failed(&mut self, error: ApiError) -> Vec<Event> {
        vec![named("error", &error.anthropic_body())]
    }

    fn error_response(&self, error: ApiError) -> axum::response::Response {
        error.anthropic()
    }

    fn keep_alive(&self) -> KeepAlive {
        KeepAlive::new().event(Event::default().event("ping").data(r#"{"type": "ping"}"#))
    }
}
