//! OpenAI's Responses API (`POST /v1/responses`, `GET` and `DELETE
//! /v1/responses/{id}`), as Codex and the `openai` SDK's `responses` call
//! it: the body becomes a `Generation` like a chat completion's, and the
//! reply goes out as output items (`reasoning`, `message`, `function_call`)
//! with the documented stream events, each numbered.
//!
//! A stored response (`store`, on by default) keeps its conversation, so a
//! request with `previous_response_id` sends only what is new; its prompt
//! then extends the one before, and the worker continues that one's cache.

use std::sync::Mutex;
use std::time::Instant;

use hearth_engine::{ChatMessage, GrammarSpec, Role, ToolCall, ToolChoice};
use hearth_store::ReasoningEffort;
use serde_json::{json, Value};

use crate::fields::{checked_tools, function_tool, Fields};
use crate::{ApiError, Generation};

mod reply;
mod store;

pub use reply::ResponseReply;
pub use store::{ResponseStore, MAX_STORED, STORED_FOR};

/// A Responses body, read.
pub struct ResponsesRequest {
    pub generation: Generation,
    /// The conversation without `instructions`, to keep with the response.
    history: Vec<ChatMessage>,
    store: bool,
    /// The request's fields the response object echoes.
    echo: Value,
    /// Functions offered within a namespace, and its name.
    namespaces: Vec<(String, String)>,
}

impl ResponsesRequest {
    /// A `/v1/responses` body; `previous` looks a stored response up.
    pub fn parse(body: &[u8], store: &Mutex<ResponseStore>) -> Result<Self, ApiError> {
        let fields = Fields::parse(body)?;
        if let Some(m) = fields.get("model") {
            if !m.is_string() {
                return Err(ApiError::field("model", "must be a string"));
            }
        }
        let mut history = match fields.get("previous_response_id") {
            None => Vec::new(),
            Some(Value::String(id)) => {
                let mut kept = store.lock().unwrap_or_else(|e| e.into_inner());
                match kept.get(id, Instant::now()) {
                    Some(s) => s.history.clone(),
                    None => {
                        return Err(ApiError::field(
                            "previous_response_id",
                            format!("no stored response \"{id}\" (never stored, deleted, or expired)"),
                        ))
                    }
                }
            }
            Some(_) => return Err(ApiError::field("previous_response_id", "must be a string")),
        };
        let known: Vec<String> =
            history.iter().flat_map(|m| m.tool_calls.iter().flatten()).map(|c| c.id.clone()).collect();
        history.extend(input(fields.get("input"), known)?);
        let mut messages = match fields.get("instructions") {
            None => Vec::new(),
            Some(Value::String(s)) if s.is_empty() => Vec::new(),
            Some(Value::String(s)) => vec![ChatMessage::new(Role::System, s.clone())],
            Some(_) => return Err(ApiError::field("instructions", "must be a string")),
        };
        messages.extend(history.iter().cloned());
        let max_tokens = fields.uint("max_output_tokens", 1, 1_000_000)?;
        let mut settings = fields.settings(max_tokens, Vec::new(), 2.0)?;
        match fields.get("reasoning") {
            None => {}
            Some(Value::Object(r)) => match r.get("effort") {
                None | Some(Value::Null) => {}
                Some(Value::String(e)) => {
                    settings.reasoning_effort = match e.as_str() {
                        "none" | "minimal" | "low" => ReasoningEffort::Low,
                        "medium" => ReasoningEffort::Medium,
                        "high" | "xhigh" => ReasoningEffort::High,
                        _ => return Err(ApiError::field("reasoning.effort", "must be minimal, low, medium or high")),
                    };
                    // Where the template has a thinking switch, "none" is off.
                    settings.thinking = e != "none";
                }
                Some(_) => return Err(ApiError::field("reasoning.effort", "must be a string")),
            },
            Some(_) => return Err(ApiError::field("reasoning", "must be an object")),
        }
        let grammar = format(fields.get("text"))?;
        let mut namespaces = Vec::new();
        let tools = tools(&fields, &mut namespaces)?;
        let store = fields.bool("store", true)?;
        let stream = fields.bool("stream", false)?;
        let echo = json!({
            "instructions": fields.get("instructions"),
            "max_output_tokens": max_tokens,
            "previous_response_id": fields.get("previous_response_id"),
            "parallel_tool_calls": tools.parallel,
            "reasoning": {"effort": fields.get("reasoning").and_then(|r| r.get("effort")), "summary": null},
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "text": fields.get("text").cloned().unwrap_or_else(|| json!({"format": {"type": "text"}})),
            "tool_choice": fields.get("tool_choice").cloned().unwrap_or_else(|| json!("auto")),
            "tools": fields.get("tools").cloned().unwrap_or_else(|| json!([])),
            "metadata": fields.get("metadata").cloned().unwrap_or_else(|| json!({})),
            "store": store,
            "truncation": "disabled",
        });
        Ok(Self {
            generation: Generation::conversation(messages, settings, stream, grammar, "text.format", tools)?,
            history,
            store,
            echo,
            namespaces,
        })
    }
}

/// `input`: a string (one user message) or items. `known`: call ids of
/// earlier calls, which a `function_call_output` must answer.
fn input(value: Option<&Value>, mut known: Vec<String>) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match value {
        Some(Value::String(s)) => return Ok(vec![ChatMessage::new(Role::User, s.clone())]),
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => return Err(ApiError::field("input", "must hold at least one item")),
        None => return Err(ApiError::field("input", "is required: a string or a list of items")),
        Some(_) => return Err(ApiError::field("input", "must be a string or a list of items")),
    };
    let mut out: Vec<ChatMessage> = Vec::new();
    // Reasoning items go with the assistant message that follows them.
    let mut thinking: Option<String> = None;
    for (i, item) in items.iter().enumerate() {
        let at = |what: &str| format!("input[{i}]{what}");
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
        match kind {
            "message" => {
                let role = match item.get("role").and_then(Value::as_str) {
                    Some("user") => Role::User,
                    Some("system" | "developer") => Role::System,
                    Some("assistant") => Role::Assistant,
                    _ => return Err(ApiError::field(&at(".role"), "must be user, system, developer or assistant")),
                };
                let content = match item.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => {
                        let mut text = String::new();
                        for (j, p) in parts.iter().enumerate() {
                            match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                                (Some("input_text" | "output_text" | "text"), Some(t)) => text.push_str(t),
                                (Some("refusal"), _) => {
                                    text.push_str(p.get("refusal").and_then(Value::as_str).unwrap_or_default())
                                }
                                (Some(other), _) => {
                                    return Err(ApiError::field(
                                        &at(&format!(".content[{j}].type")),
                                        format!("\"{other}\" parts are not supported (input_text and output_text are)"),
                                    ))
                                }
                                (None, _) => return Err(ApiError::field(&at(&format!(".content[{j}].type")), "is required")),
                            }
                        }
                        text
                    }
                    _ => return Err(ApiError::field(&at(".content"), "must be a string or a list of parts")),
                };
                let mut message = ChatMessage::new(role, content);
                if role == Role::Assistant {
                    message.thinking = thinking.take();
                }
                out.push(message);
            }
            "function_call" => {
                let text = |name: &str| item.get(name).and_then(Value::as_str);
                let (Some(call_id), Some(name), Some(arguments)) = (text("call_id"), text("name"), text("arguments"))
                else {
                    return Err(ApiError::field(&at(""), "a function_call item needs call_id, name and arguments"));
                };
                let call = ToolCall { id: call_id.to_string(), name: name.to_string(), arguments: arguments.to_string() };
                known.push(call_id.to_string());
                // Calls of one reply follow its message (or each other).
                match out.last_mut() {
                    Some(m) if m.role == Role::Assistant => m.tool_calls.get_or_insert_with(Vec::new).push(call),
                    _ => {
                        let mut m = ChatMessage::new(Role::Assistant, String::new());
                        m.thinking = thinking.take();
                        m.tool_calls = Some(vec![call]);
                        out.push(m);
                    }
                }
            }
            "function_call_output" => {
                let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
                    return Err(ApiError::field(&at(".call_id"), "is required"));
                };
                if !known.iter().any(|k| k == call_id) {
                    return Err(ApiError::field(
                        &at(".call_id"),
                        format!("\"{call_id}\" answers no function_call of this conversation"),
                    ));
                }
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .map(|p| p.get("text").and_then(Value::as_str).ok_or(()))
                        .collect::<Result<String, _>>()
                        .map_err(|_| ApiError::field(&at(".output"), "only text parts are supported"))?,
                    _ => return Err(ApiError::field(&at(".output"), "must be a string")),
                };
                let mut m = ChatMessage::new(Role::Tool, output);
                m.tool_call_id = Some(call_id.to_string());
                out.push(m);
            }
            "reasoning" => {
                let texts = |name: &str| -> String {
                    item.get(name)
                        .and_then(Value::as_array)
                        .map(|parts| parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect())
                        .unwrap_or_default()
                };
                let text = match texts("content") {
                    t if t.is_empty() => texts("summary"),
                    t => t,
                };
                if !text.is_empty() {
                    thinking.get_or_insert_with(String::new).push_str(&text);
                }
            }
            other => {
                return Err(ApiError::field(
                    &at(".type"),
                    format!("\"{other}\" items are not supported (message, function_call, function_call_output and reasoning are)"),
                ))
            }
        }
    }
    Ok(out)
}

/// `tools` (function tools only), `tool_choice` and `parallel_tool_calls`.
/// `namespace` tools (Codex's groups of function tools) offer their
/// functions; `namespaces` gets each one's namespace, for its calls.
fn tools(fields: &Fields, namespaces: &mut Vec<(String, String)>) -> Result<hearth_engine::Tools, ApiError> {
    let mut specs = Vec::new();
    match fields.get("tools") {
        None => {}
        Some(Value::Array(list)) => {
            for (i, t) in list.iter().enumerate() {
                let at = |what: &str| format!("tools[{i}].{what}");
                match t.get("type").and_then(Value::as_str) {
                    Some("function") => {
                        specs.push(function_tool(t.get("name"), t.get("description"), t.get("parameters"), &at)?)
                    }
                    Some("namespace") => {
                        let Some(namespace) = t.get("name").and_then(Value::as_str) else {
                            return Err(ApiError::field(&at("name"), "is required"));
                        };
                        let Some(inner) = t.get("tools").and_then(Value::as_array) else {
                            return Err(ApiError::field(&at("tools"), "must be a list of function tools"));
                        };
                        for (j, f) in inner.iter().enumerate() {
                            let at = |what: &str| format!("tools[{i}].tools[{j}].{what}");
                            if f.get("type").and_then(Value::as_str) != Some("function") {
                                return Err(ApiError::field(&at("type"), "must be \"function\""));
                            }
                            let spec = function_tool(f.get("name"), f.get("description"), f.get("parameters"), &at)?;
                            namespaces.push((spec.name.clone(), namespace.to_string()));
                            specs.push(spec);
                        }
                    }
                    Some(other) => {
                        return Err(ApiError::field(
                            &at("type"),
                            format!(
                            "\"{other}\" tools run on OpenAI's servers, which Hearth is not; it runs function tools \
                                 (in Codex, set web_search = \"disabled\")"
                        ),
                        ))
                    }
                    None => return Err(ApiError::field(&at("type"), "is required")),
                }
            }
        }
        Some(_) => return Err(ApiError::field("tools", "must be a list")),
    }
    let choice = match fields.get("tool_choice") {
        None => ToolChoice::Auto,
        Some(Value::String(c)) => match c.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => return Err(ApiError::field("tool_choice", "must be auto, none, required or a named function")),
        },
        Some(Value::Object(o)) => {
            match (o.get("type").and_then(Value::as_str), o.get("name").and_then(Value::as_str)) {
                (Some("function"), Some(name)) => ToolChoice::Function(name.to_string()),
                _ => return Err(ApiError::field("tool_choice", "must be {\"type\": \"function\", \"name\": …}")),
            }
        }
        Some(_) => return Err(ApiError::field("tool_choice", "must be a string or an object")),
    };
    let parallel = fields.bool("parallel_tool_calls", true)?;
    checked_tools(specs, choice, parallel, "tool_choice")
}

/// `text.format`: `text`, `json_object`, or `json_schema` with its `schema`.
fn format(text: Option<&Value>) -> Result<Option<GrammarSpec>, ApiError> {
    let Some(text) = text else { return Ok(None) };
    let Some(format) = text.get("format").filter(|f| !f.is_null()) else { return Ok(None) };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(GrammarSpec::JsonObject)),
        Some("json_schema") => match format.get("schema") {
            Some(schema @ Value::Object(_)) => Ok(Some(GrammarSpec::JsonSchema(schema.clone()))),
            _ => Err(ApiError::field("text.format.schema", "is required: a JSON schema object")),
        },
        _ => Err(ApiError::field("text.format.type", "must be text, json_object or json_schema")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_become_messages() {
        let input = json!([
            {"role": "developer", "content": "Be brief."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Call it."}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "rain"},
        ]);
        let messages = super::input(Some(&input), Vec::new()).unwrap();
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[0].role, Role::System);
        assert_eq!(messages[2].thinking.as_deref(), Some("Call it."));
        assert_eq!(messages[2].tool_calls.as_ref().unwrap()[0].name, "get_weather");
        assert_eq!((messages[3].role, messages[3].tool_call_id.as_deref()), (Role::Tool, Some("c1")));
        for (bad, param) in [
            (json!([{"type": "function_call_output", "call_id": "nope", "output": "x"}]), "input[0].call_id"),
            (json!([{"type": "web_search_call", "id": "w"}]), "input[0].type"),
            (
                json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
                "input[0].content[0].type",
            ),
            (json!([]), "input"),
        ] {
            let e = super::input(Some(&bad), Vec::new()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{bad}");
        }
    }
}
