//! `Generation`: a `/v1/chat/completions` or `/v1/completions` body, checked
//! field by field so that a bad one is a 400 naming it (serde's own errors
//! name a line and column, not the field).

use hearth_engine::{ChatMessage, GrammarSpec, Role, ToolCall, ToolChoice, Tools};
use hearth_store::ConversationSettings;
use serde_json::Value;

use crate::error::ApiError;
use crate::fields::{checked_tools, function_tool, Fields};

/// What a request asks the worker for.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The conversation, through the model's chat template (chat).
    pub messages: Vec<ChatMessage>,
    /// Text run as it is (completions).
    pub raw_prompt: Option<String>,
    pub settings: ConversationSettings,
    /// Sequences sampled from the prompt (`n`), as one batch.
    pub n: usize,
    /// `Some(k)`: each token's log-probability and its k likeliest alternatives.
    pub logprobs: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
    /// What the reply must follow: `response_format`'s JSON schema or any
    /// JSON object, or Hearth's `grammar` (llguidance's Lark syntax).
    pub grammar: Option<GrammarSpec>,
    /// The request field the grammar came from, to name in an error.
    pub grammar_field: &'static str,
    /// The tools offered (chat only).
    pub tools: Tools,
}

/// An assistant message's call as OpenAI writes it: `{id, type, function:
/// {name, arguments}}`, the arguments as JSON text (or an object).
fn tool_call(c: &Value) -> Option<ToolCall> {
    let f = c.get("function")?;
    let arguments = match f.get("arguments")? {
        Value::String(s) => s.clone(),
        other @ Value::Object(_) => other.to_string(),
        _ => return None,
    };
    Some(ToolCall {
        id: c.get("id").and_then(Value::as_str).unwrap_or_default().to_string(),
        name: f.get("name")?.as_str()?.to_string(),
        arguments,
    })
}

/// The most sequences one request may sample (the worker's batch).
pub const MAX_N: usize = 8;
/// The most alternatives per token (OpenAI's limit; the sampler's too).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Stop strings per request (OpenAI allows 4; the sampler up to 16).
pub const MAX_STOP: usize = 16;

impl Generation {
    /// A `/v1/chat/completions` body.
    pub fn chat(body: &[u8]) -> Result<Self, ApiError> {
        let fields = Fields::parse(body)?;
        let messages = fields.messages()?;
        let logprobs = if fields.bool("logprobs", false)? {
            Some(fields.uint("top_logprobs", 0, MAX_TOP_LOGPROBS as u64)?.unwrap_or(0) as usize)
        } else if fields.has("top_logprobs") {
            return Err(ApiError::field("top_logprobs", "needs logprobs set to true"));
        } else {
            None
        };
        let max_tokens = match fields.uint("max_completion_tokens", 1, 1_000_000)? {
            Some(m) => Some(m),
            None => fields.uint("max_tokens", 1, 1_000_000)?,
        };
        fields.common(messages, None, logprobs, max_tokens)
    }

    /// A `/v1/completions` body: one prompt, continued as written.
    pub fn completion(body: &[u8]) -> Result<Self, ApiError> {
        let fields = Fields::parse(body)?;
        let prompt = match fields.get("prompt") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => a[0].as_str().unwrap_or_default().to_string(),
            Some(Value::Array(_)) => {
                return Err(ApiError::field("prompt", "must be one string; send one request per prompt"))
            }
            Some(_) => return Err(ApiError::field("prompt", "must be a string")),
            None => return Err(ApiError::field("prompt", "is required")),
        };
        if prompt.is_empty() {
            return Err(ApiError::field("prompt", "must not be empty"));
        }
        for unsupported in ["suffix", "best_of"] {
            if fields.get(unsupported).is_some_and(|v| !v.is_null()) {
                return Err(ApiError::field(unsupported, "is not supported by Hearth"));
            }
        }
        if fields.bool("echo", false)? {
            return Err(ApiError::field("echo", "is not supported by Hearth"));
        }
        // The legacy API's `logprobs` is the number of alternatives.
        let logprobs = fields.uint("logprobs", 0, 5)?.map(|k| k as usize);
        let max_tokens = fields.uint("max_tokens", 1, 1_000_000)?.or(Some(16));
        fields.common(Vec::new(), Some(prompt), logprobs, max_tokens)
    }
}

impl Generation {
    /// One sequence of a conversation, without log-probabilities: what the
    /// Responses and Messages APIs ask for. A required tool call cannot be
    /// held to a grammar as well (`grammar_field` names the endpoint's).
    pub(crate) fn conversation(
        messages: Vec<ChatMessage>,
        settings: ConversationSettings,
        stream: bool,
        grammar: Option<GrammarSpec>,
        grammar_field: &'static str,
        tools: Tools,
    ) -> Result<Self, ApiError> {
        if grammar.is_some() && tools.call_grammar(hearth_engine::ToolFormat::Fallback).is_some() {
            return Err(ApiError::field(
                "tool_choice",
                format!("a required tool call cannot be given with {grammar_field}"),
            ));
        }
        Ok(Self {
            messages,
            raw_prompt: None,
            settings,
            n: 1,
            logprobs: None,
            stream,
            include_usage: false,
            grammar,
            grammar_field,
            tools,
        })
    }
}

/// The chat and completion bodies' own fields.
impl Fields {
    fn messages(&self) -> Result<Vec<ChatMessage>, ApiError> {
        let Some(Value::Array(list)) = self.get("messages") else {
            return Err(ApiError::field("messages", "is required: a list of {role, content}"));
        };
        if list.is_empty() {
            return Err(ApiError::field("messages", "must hold at least one message"));
        }
        list.iter()
            .enumerate()
            .map(|(i, m)| {
                let at = |what: &str| format!("messages[{i}].{what}");
                let role = match m.get("role").and_then(Value::as_str) {
                    Some("system" | "developer") => Role::System,
                    Some("user") => Role::User,
                    Some("assistant") => Role::Assistant,
                    Some("tool") => Role::Tool,
                    Some(other) => {
                        return Err(ApiError::field(
                            &at("role"),
                            format!("\"{other}\" is not supported; use system, developer, user, assistant or tool"),
                        ))
                    }
                    None => return Err(ApiError::field(&at("role"), "is required")),
                };
                let content = match m.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => {
                        let mut text = String::new();
                        for part in parts {
                            match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                                (Some("text"), Some(t)) => text.push_str(t),
                                _ => return Err(ApiError::field(&at("content"), "only text parts are supported")),
                            }
                        }
                        text
                    }
                    Some(Value::Null) | None if role == Role::Assistant => String::new(),
                    _ => return Err(ApiError::field(&at("content"), "must be a string or a list of text parts")),
                };
                let mut message = ChatMessage::new(role, content);
                // A reply's reasoning as this server sends it back, for
                // templates that take it (gpt-oss's drops earlier ones).
                if role == Role::Assistant {
                    match m.get("reasoning_content") {
                        None | Some(Value::Null) => {}
                        Some(Value::String(r)) => message.thinking = Some(r.clone()),
                        Some(_) => return Err(ApiError::field(&at("reasoning_content"), "must be a string")),
                    }
                    match m.get("tool_calls") {
                        None | Some(Value::Null) => {}
                        Some(Value::Array(calls)) => {
                            let calls = calls
                                .iter()
                                .enumerate()
                                .map(|(j, c)| {
                                    tool_call(c).ok_or_else(|| {
                                        ApiError::field(
                                            &at(&format!("tool_calls[{j}]")),
                                            "must be {id, type: \"function\", function: {name, arguments}}",
                                        )
                                    })
                                })
                                .collect::<Result<Vec<_>, _>>()?;
                            message.tool_calls = Some(calls);
                        }
                        Some(_) => return Err(ApiError::field(&at("tool_calls"), "must be a list")),
                    }
                }
                if role == Role::Tool {
                    match m.get("tool_call_id") {
                        Some(Value::String(id)) => message.tool_call_id = Some(id.clone()),
                        None | Some(Value::Null) => {}
                        Some(_) => return Err(ApiError::field(&at("tool_call_id"), "must be a string")),
                    }
                }
                Ok(message)
            })
            .collect()
    }

    fn stop(&self) -> Result<Vec<String>, ApiError> {
        let stops = match self.get("stop") {
            None => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
                a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()
            }
            Some(_) => return Err(ApiError::field("stop", "must be a string or a list of strings")),
        };
        if stops.len() > MAX_STOP || stops.iter().any(String::is_empty) {
            return Err(ApiError::field("stop", format!("must be at most {MAX_STOP} strings, none of them empty")));
        }
        Ok(stops)
    }

    /// The fields both endpoints share.
    fn common(
        &self,
        messages: Vec<ChatMessage>,
        raw_prompt: Option<String>,
        logprobs: Option<usize>,
        max_tokens: Option<u64>,
    ) -> Result<Generation, ApiError> {
        if let Some(m) = self.get("model") {
            if !m.is_string() {
                return Err(ApiError::field("model", "must be a string"));
            }
        }
        for penalty in ["presence_penalty", "frequency_penalty"] {
            if self.number(penalty, -2.0..=2.0)?.is_some_and(|p| p != 0.0) {
                return Err(ApiError::field(penalty, "is not supported by Hearth; use repeat_penalty"));
            }
        }
        let (grammar, grammar_field) = self.grammar()?;
        let tools = self.tools(raw_prompt.is_some())?;
        if grammar.is_some() && tools.call_grammar(hearth_engine::ToolFormat::Fallback).is_some() {
            return Err(ApiError::field(
                "tool_choice",
                "a required tool call cannot be given with response_format or grammar",
            ));
        }
        let stream = self.bool("stream", false)?;
        let include_usage = match self.get("stream_options") {
            None => false,
            Some(Value::Object(o)) => match o.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(ApiError::field("stream_options.include_usage", "must be true or false")),
            },
            Some(_) => return Err(ApiError::field("stream_options", "must be an object")),
        };
        if include_usage && !stream {
            return Err(ApiError::field("stream_options", "is only allowed when stream is true"));
        }
        let settings = self.settings(max_tokens, self.stop()?, 2.0)?;
        let n = self.uint("n", 1, MAX_N as u64)?.unwrap_or(1) as usize;
        Ok(Generation {
            messages,
            raw_prompt,
            settings,
            n,
            logprobs,
            stream,
            include_usage,
            grammar,
            grammar_field,
            tools,
        })
    }

    /// `tools`, `tool_choice` and `parallel_tool_calls`, as OpenAI takes them.
    fn tools(&self, completion: bool) -> Result<Tools, ApiError> {
        let specs = match self.get("tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(_) if completion => return Err(ApiError::field("tools", "needs /v1/chat/completions")),
            Some(Value::Array(list)) => list
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let at = |what: &str| format!("tools[{i}].{what}");
                    if t.get("type").and_then(Value::as_str) != Some("function") {
                        return Err(ApiError::field(&at("type"), "must be \"function\""));
                    }
                    let Some(f) = t.get("function").and_then(Value::as_object) else {
                        return Err(ApiError::field(&at("function"), "must be an object"));
                    };
                    function_tool(f.get("name"), f.get("description"), f.get("parameters"), &|w| {
                        at(&format!("function.{w}"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err(ApiError::field("tools", "must be a list")),
        };
        let choice = match self.get("tool_choice") {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(c)) => match c.as_str() {
                "auto" => ToolChoice::Auto,
                "none" => ToolChoice::None,
                "required" => ToolChoice::Required,
                _ => return Err(ApiError::field("tool_choice", "must be auto, none, required or a named function")),
            },
            Some(Value::Object(o)) => match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
                Some(n) => ToolChoice::Function(n.to_string()),
                None => {
                    return Err(ApiError::field(
                        "tool_choice",
                        "must name {\"type\": \"function\", \"function\": {\"name\": …}}",
                    ))
                }
            },
            Some(_) => return Err(ApiError::field("tool_choice", "must be a string or an object")),
        };
        let parallel = self.bool("parallel_tool_calls", true)?;
        checked_tools(specs, choice, parallel, "tool_choice")
    }

    /// `response_format` (OpenAI's `text`, `json_object`, and `json_schema`
    /// with its `schema`; llama.cpp's `json_object` with a `schema` too) or
    /// `grammar` (a Lark grammar, Hearth's extension); not both.
    fn grammar(&self) -> Result<(Option<GrammarSpec>, &'static str), ApiError> {
        let field = "response_format";
        let format = match self.get(field) {
            None | Some(Value::Null) => None,
            Some(Value::Object(f)) => {
                let kind = f.get("type").and_then(Value::as_str);
                match kind {
                    Some("text") => None,
                    Some("json_object") => Some(match f.get("schema") {
                        Some(schema @ Value::Object(_)) => GrammarSpec::JsonSchema(schema.clone()),
                        None | Some(Value::Null) => GrammarSpec::JsonObject,
                        Some(_) => return Err(ApiError::field("response_format.schema", "must be an object")),
                    }),
                    Some("json_schema") => {
                        let Some(Value::Object(js)) = f.get("json_schema") else {
                            return Err(ApiError::field("response_format.json_schema", "must be an object"));
                        };
                        match js.get("schema") {
                            Some(schema @ Value::Object(_)) => Some(GrammarSpec::JsonSchema(schema.clone())),
                            // OpenAI: no schema is any JSON.
                            None | Some(Value::Null) => Some(GrammarSpec::JsonObject),
                            Some(_) => {
                                return Err(ApiError::field("response_format.json_schema.schema", "must be an object"))
                            }
                        }
                    }
                    _ => {
                        return Err(ApiError::field("response_format.type", "must be text, json_object or json_schema"))
                    }
                }
            }
            Some(_) => return Err(ApiError::field(field, "must be an object")),
        };
        let grammar = match self.get("grammar") {
            None | Some(Value::Null) => None,
            Some(Value::String(g)) if !g.trim().is_empty() => Some(GrammarSpec::Lark(g.clone())),
            Some(_) => return Err(ApiError::field("grammar", "must be a grammar in Lark syntax (a string)")),
        };
        match (format, grammar) {
            (Some(_), Some(_)) => Err(ApiError::field("grammar", "cannot be given with a JSON response_format")),
            (Some(f), None) => Ok((Some(f), field)),
            (None, Some(g)) => Ok((Some(g), "grammar")),
            (None, None) => Ok((None, field)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: &str) -> Result<Generation, ApiError> {
        Generation::chat(body.as_bytes())
    }

    #[test]
    fn a_bad_field_is_named() {
        for (body, param) in [
            (r#"{"messages":[{"role":"user","content":"hi"}],"temperature":3}"#, "temperature"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}"#, "temperature"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"n":9}"#, "n"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}"#, "max_tokens"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"top_logprobs":2}"#, "top_logprobs"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21}"#, "top_logprobs"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"stop":[1]}"#, "stop"),
            (
                r#"{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}"#,
                "stream_options",
            ),
            (r#"{"messages":[{"role":"user","content":"hi"}],"presence_penalty":0.5}"#, "presence_penalty"),
            (r#"{"messages":[{"role":"function","content":"hi"}]}"#, "messages[0].role"),
            (r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#, "messages[0].content"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"speculation":"fast"}"#, "speculation"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"draft_tokens":0}"#, "draft_tokens"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"draft_model":"small.gguf"}"#, "draft_model"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"draft_model":7}"#, "draft_model"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"speculation":"draft"}"#, "draft_model"),
            (r#"{"messages":[]}"#, "messages"),
            (r#"{"model":"m"}"#, "messages"),
        ] {
            let e = chat(body).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e:?}");
        }
        let e = chat("{not json").unwrap_err();
        assert_eq!((e.status.as_u16(), e.param), (400, None));
    }

    #[test]
    fn fields_become_settings() {
        let g = chat(
            r#"{"model":"x","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
                "temperature":0,"top_p":0.5,"top_k":7,"min_p":0.1,"repeat_penalty":1.1,"max_completion_tokens":12,"stop":"\n","seed":42,
                "n":3,"logprobs":true,"top_logprobs":4,"stream":true,"stream_options":{"include_usage":true},"frequency_penalty":0,"user":"ignored",
                "speculation":"ngram","draft_tokens":12}"#,
        )
        .unwrap();
        assert_eq!(g.messages, vec![ChatMessage::new(Role::System, "s"), ChatMessage::new(Role::User, "ab")]);
        let s = &g.settings;
        assert_eq!(
            (s.temperature, s.top_p, s.top_k, s.min_p, s.repeat_penalty, s.max_new_tokens, s.seed),
            (0.0, 0.5, 7, 0.1, 1.1, 12, Some(42))
        );
        assert_eq!(s.stop_strings, vec!["\n".to_string()]);
        assert_eq!((s.speculation, s.draft_tokens), (hearth_store::SpeculationMode::Ngram, 12));
        assert_eq!((g.n, g.logprobs, g.stream, g.include_usage), (3, Some(4), true, true));
        // Naming a draft model drafts with it.
        let d = chat(r#"{"messages":[{"role":"user","content":"hi"}],"draft_model":"/models/small.gguf"}"#).unwrap();
        let s = &d.settings;
        assert_eq!(
            (s.speculation, s.draft_model.as_deref()),
            (hearth_store::SpeculationMode::Draft, Some("/models/small.gguf"))
        );
        let m = chat(r#"{"messages":[{"role":"user","content":"hi"}],"speculation":"mtp"}"#).unwrap();
        assert_eq!(m.settings.speculation, hearth_store::SpeculationMode::Mtp);
        let c = Generation::completion(br#"{"prompt":"Once","max_tokens":5,"logprobs":2}"#).unwrap();
        assert_eq!((c.raw_prompt.as_deref(), c.settings.max_new_tokens, c.logprobs), (Some("Once"), 5, Some(2)));
    }
}
