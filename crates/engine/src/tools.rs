//! Tool calling: the tools a reply may call, how a model's template asks
//! for them and writes its calls, and the calls taken back out of a reply.
//!
//! Templates with a tool syntax of their own (`ToolFormat`: Hermes's
//! `<tool_call>` of Qwen 2.5, 3, 3.5 and Hermes; Llama 3's; Gemma 4's;
//! gpt-oss's Harmony; Mistral's `[TOOL_CALLS]`; GLM's `<arg_key>` tags) get the tools as their
//! `tools` variable and read `tool_calls` and `tool` messages themselves.
//! Any other template gets them in Hearth's fallback: a system message
//! listing the tools and asking for Hermes's `<tool_call>` form, earlier
//! calls written into the reply as that form, and tool results as user
//! messages in `<tool_response>`. Either way a reply's calls are read from
//! the form it was asked for, and where a call is required (`tool_choice:
//! required` or a named function) the reply is constrained to it, each
//! call's arguments to its tool's JSON schema.

use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::{json, Value};

use crate::constraint::GrammarSpec;
use crate::template::{ChatMessage, ChatTemplate, Role};

/// A function a reply may call (OpenAI's `tools[i].function`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    /// A JSON schema of the arguments object.
    pub parameters: Value,
}

impl ToolSpec {
    /// As templates and the fallback list it: OpenAI's tool object.
    pub fn to_json(&self) -> Value {
        let mut function = json!({"name": self.name, "parameters": self.parameters});
        if let Some(d) = &self.description {
            function["description"] = d.clone().into();
        }
        json!({"type": "function", "function": function})
    }
}

/// A call a reply made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

impl Serialize for ToolCall {
    /// OpenAI's shape, the arguments as an object where they parse (what
    /// templates such as Qwen's `tojson` expect), else as the text.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let arguments = serde_json::from_str::<Value>(&self.arguments).unwrap_or(Value::String(self.arguments.clone()));
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("type", "function")?;
        m.serialize_entry("function", &json!({"name": self.name, "arguments": arguments}))?;
        m.end()
    }
}

/// Whether and how a reply calls tools (OpenAI's `tool_choice`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No call: the tools are not offered.
    None,
    /// At least one call, and nothing but calls.
    Required,
    /// A call of this function.
    Function(String),
}

/// The tools offered to one reply.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tools {
    pub specs: Vec<ToolSpec>,
    pub choice: ToolChoice,
    /// Several calls in one reply (OpenAI's `parallel_tool_calls`, on by default).
    pub parallel: bool,
}

impl Tools {
    /// Whether the reply is offered any tool.
    pub fn offered(&self) -> bool {
        !self.specs.is_empty() && self.choice != ToolChoice::None
    }

    /// The grammar of a reply that must call (`Required`, or a named
    /// function) in `format`: calls whose name is one of the tools (or the
    /// named one) and whose arguments follow its schema; in `<tool_call>`
    /// blocks, one or (with parallel calls) several; for Llama 3 one bare
    /// `{"name", "parameters"}` object. `None` where the model may answer
    /// in text.
    pub fn call_grammar(&self, format: ToolFormat) -> Option<GrammarSpec> {
        let picked: Vec<&ToolSpec> = match &self.choice {
            ToolChoice::Auto | ToolChoice::None => return None,
            ToolChoice::Required => self.specs.iter().collect(),
            ToolChoice::Function(name) => self.specs.iter().filter(|t| &t.name == name).collect(),
        };
        if picked.is_empty() {
            // Nothing to call (no tools, or none of that name): no call can be required.
            return None;
        }
        match format {
            ToolFormat::Gemma4 => return Some(GrammarSpec::Lark(gemma4_call_grammar(&picked, self.parallel))),
            ToolFormat::Glm => return Some(GrammarSpec::Lark(glm_call_grammar(&picked, self.parallel))),
            ToolFormat::Harmony => {
                // One commentary message to one of the functions, its
                // arguments following that function's schema.
                let calls = json_calls(&picked, |t| {
                    format!(
                        "\"<|channel|>\" {} \"<|constrain|>\" \"json\" \"<|message|>\"",
                        lark_str(&format!("commentary {HARMONY_TO}{} ", t.name))
                    )
                });
                return Some(GrammarSpec::Lark(format!("start: {calls}\n")));
            }
            ToolFormat::Mistral => {
                // `[TOOL_CALLS]NAME[ARGS]{…}`, once or (with parallel calls) more.
                let calls = json_calls(&picked, |t| {
                    format!("{} {} {}", lark_str(MISTRAL_CALLS), lark_str(&t.name), lark_str(MISTRAL_ARGS))
                });
                let more = if self.parallel { " call*" } else { "" };
                return Some(GrammarSpec::Lark(format!("start: call{more}\ncall: {calls}\n")));
            }
            _ => {}
        }
        let arguments = if format == ToolFormat::Llama3 { "parameters" } else { "arguments" };
        let calls: Vec<Value> = picked
            .iter()
            .map(|t| {
                json!({
                    "type": "object",
                    "properties": {"name": {"const": t.name}, arguments: declared_only(&t.parameters)},
                    "required": ["name", arguments],
                    "additionalProperties": false,
                })
            })
            .collect();
        if format == ToolFormat::MistralNemo {
            // `[TOOL_CALLS]` and one array of calls.
            let mut array = json!({"type": "array", "items": {"anyOf": calls}, "minItems": 1});
            if !self.parallel {
                array["maxItems"] = 1.into();
            }
            return Some(GrammarSpec::Lark(format!("start: {:?} %json {}\n", MISTRAL_CALLS, compact(array))));
        }
        let schema = compact(json!({"anyOf": calls}));
        if format == ToolFormat::Llama3 {
            // One call a reply, as its template allows.
            return Some(GrammarSpec::JsonSchema(schema));
        }
        let more = if self.parallel { " (\"\\n\" block)*" } else { "" };
        Some(GrammarSpec::Lark(format!(
            "start: block{more}\nblock: \"<tool_call>\" \"\\n\" call \"\\n\" \"</tool_call>\"\ncall: %json {schema}\n"
        )))
    }
}

/// `schema` for a required call's arguments: where it says nothing of
/// other properties, only those it declares. JSON Schema allows any others
/// by default, and a small model held to a schema that allows anything can
/// write nested objects until its token limit; a call needs only the
/// arguments the tool names.
fn declared_only(schema: &Value) -> Value {
    let mut out = schema.clone();
    if let Some(o) = out.as_object_mut() {
        let is_object = o.get("type").and_then(Value::as_str) == Some("object") || o.contains_key("properties");
        if is_object && !o.contains_key("additionalProperties") {
            o.insert("additionalProperties".into(), Value::Bool(false));
        }
    }
    out
}

/// `s` as a Lark string literal.
fn lark_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// Lark alternatives, one per tool: `head(tool)` then the tool's arguments
/// as JSON of its schema (declared keys only, written compactly).
fn json_calls(tools: &[&ToolSpec], head: impl Fn(&ToolSpec) -> String) -> String {
    let alternatives: Vec<String> =
        tools.iter().map(|t| format!("{} %json {}", head(t), compact(declared_only(&t.parameters)))).collect();
    alternatives.join(" | ")
}

/// `schema` written as templates' `tojson` writes arguments back: one
/// space after `,` and `:`, none elsewhere.
fn compact(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance")
            .or_insert(json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}));
    }
    schema
}

/// How a template takes tools and how its model writes calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// The template's own: Hermes's `<tool_call>` JSON blocks (Qwen 2.5, 3, 3.5, Hermes).
    Hermes,
    /// Llama 3.1, 3.2, 3.3: the template takes `tools`; the model answers
    /// a call with one `{"name": …, "parameters": {…}}` object, and reads
    /// results as `ipython` turns.
    Llama3,
    /// Gemma 4: the template takes `tools`; a call is
    /// `<|tool_call>call:NAME{key:value,…}<tool_call|>`, its strings
    /// between `<|"|>` marks (`gemma4_args`).
    Gemma4,
    /// gpt-oss's Harmony: the template takes `tools` (as a `functions`
    /// namespace); a call is a commentary message addressed
    /// `to=functions.NAME` holding the arguments as JSON, ended by `<|call|>`;
    /// one call per reply.
    Harmony,
    /// Mistral Small 3.2, Ministral 3, Devstral, Magistral: the template
    /// takes `tools`; each call is `[TOOL_CALLS]NAME[ARGS]{…}` (Small 3.2
    /// may put `[CALL_ID]ID` before `[ARGS]`), after any text.
    Mistral,
    /// Mistral Nemo and the 7B v0.3: the template takes `tools`; the calls
    /// are one JSON array after `[TOOL_CALLS]`, each
    /// `{"name": …, "arguments": {…}}`.
    MistralNemo,
    /// GLM-4.5, 4.6 and 4.7 (and GLM-4.7-Flash): the template takes
    /// `tools`; a call is `<tool_call>NAME` then `<arg_key>K</arg_key>
    /// <arg_value>V</arg_value>` per argument (strings as they are, other
    /// values as JSON) and `</tool_call>`.
    Glm,
    /// Hearth's fallback for any other template (see the module's doc).
    Fallback,
}

const CALL_OPEN: &str = "<tool_call>";
/// What Llama 3's template asks a call to look like.
const LLAMA3_ASK: &str = "\"parameters\": dictionary of argument name and its value";
const CALL_CLOSE: &str = "</tool_call>";
const GEMMA_OPEN: &str = "<|tool_call>call:";
/// Where a Harmony message header names the function it calls.
const HARMONY_TO: &str = "to=functions.";
const GEMMA_CLOSE: &str = "<tool_call|>";
/// Mistral's marker before each call (before all of them, for Nemo).
const MISTRAL_CALLS: &str = "[TOOL_CALLS]";
const MISTRAL_ARGS: &str = "[ARGS]";
const MISTRAL_CALL_ID: &str = "[CALL_ID]";
/// GLM's argument tags.
const GLM_KEY: (&str, &str) = ("<arg_key>", "</arg_key>");
const GLM_VALUE: (&str, &str) = ("<arg_value>", "</arg_value>");

impl ToolFormat {
    pub fn detect(template: &ChatTemplate) -> Self {
        let source = template.source();
        if source.contains(GEMMA_OPEN) && source.contains("tool_calls") {
            Self::Gemma4
        } else if source.contains("functions.") && source.contains("<|call|>") && source.contains("tool_calls") {
            Self::Harmony
        } else if source.contains(GLM_KEY.0) && source.contains(CALL_OPEN) && source.contains("tool_calls") {
            Self::Glm
        } else if source.contains(MISTRAL_CALLS) && source.contains("tool_calls") {
            if source.contains(MISTRAL_ARGS) {
                Self::Mistral
            } else {
                Self::MistralNemo
            }
        } else if source.contains(CALL_OPEN) && source.contains("tools") && source.contains("tool_calls") {
            Self::Hermes
        } else if source.contains(LLAMA3_ASK) && source.contains("tool_calls") {
            Self::Llama3
        } else {
            Self::Fallback
        }
    }

    /// The template variables and messages that offer `tools`: for the
    /// template's own format its `tools` variable; for the fallback a
    /// system message and the calls and results rewritten as text.
    pub fn prepare(&self, messages: &[ChatMessage], tools: &Tools) -> (Vec<ChatMessage>, Option<Value>) {
        if !tools.offered() {
            return (messages.to_vec(), None);
        }
        let listed: Vec<Value> = tools.specs.iter().map(ToolSpec::to_json).collect();
        if matches!(self, Self::Mistral | Self::MistralNemo) {
            return (mistral_ids(messages), Some(Value::Array(listed)));
        }
        if matches!(self, Self::Hermes | Self::Llama3 | Self::Gemma4 | Self::Harmony | Self::Glm) {
            return (messages.to_vec(), Some(Value::Array(listed)));
        }
        let signatures: Vec<String> = listed.iter().map(|t| t.to_string()).collect();
        let offer = format!(
            "You may call functions to help with the user's request. Their signatures, one JSON object each, are within <tools></tools>:\n<tools>\n{}\n</tools>\n\nTo call one, write only this, one block per call:\n<tool_call>\n{{\"name\": <function name>, \"arguments\": <the arguments as a JSON object>}}\n</tool_call>\nThe results come back within <tool_response></tool_response>.",
            signatures.join("\n")
        );
        let mut out = Vec::with_capacity(messages.len() + 1);
        match messages.first() {
            Some(m) if m.role == Role::System => {
                out.push(ChatMessage::system(format!("{}\n\n{offer}", m.content)));
            }
            _ => out.push(ChatMessage::system(offer)),
        }
        let skip = usize::from(messages.first().is_some_and(|m| m.role == Role::System));
        for m in &messages[skip..] {
            match m.role {
                Role::Assistant if m.tool_calls.is_some() => {
                    let mut text = m.content.clone();
                    for call in m.tool_calls.iter().flatten() {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(&call_block(call));
                    }
                    out.push(ChatMessage { tool_calls: None, ids: None, ..ChatMessage::assistant(text) });
                }
                Role::Tool => out.push(ChatMessage::user(format!("<tool_response>\n{}\n</tool_response>", m.content))),
                _ => out.push(m.clone()),
            }
        }
        (out, None)
    }

    /// A reply taken apart: its text outside the call blocks (trimmed) and
    /// the calls, numbered from `first_id`. A block that does not hold a
    /// call (`{"name": …, "arguments": {…}}`) stays text.
    pub fn parse(&self, text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
        match self {
            Self::Gemma4 => return gemma4_parse(text, id_prefix),
            Self::Harmony => return harmony_parse(text, id_prefix),
            Self::Mistral => return mistral_parse(text, id_prefix),
            Self::MistralNemo => return mistral_nemo_parse(text, id_prefix),
            Self::Glm => return glm_parse(text, id_prefix),
            Self::Hermes | Self::Llama3 | Self::Fallback => {}
        }
        if *self == Self::Llama3 {
            // The whole reply is the call, or there is none.
            let body = text.trim().trim_start_matches("<|python_tag|>").trim();
            return match serde_json::from_str::<Value>(body) {
                Ok(Value::Object(o)) if o.get("name").is_some_and(Value::is_string) => {
                    let arguments = arguments_text(
                        o.get("parameters").or_else(|| o.get("arguments")).cloned().unwrap_or(json!({})),
                    );
                    let name = o["name"].as_str().unwrap_or_default().to_string();
                    (String::new(), vec![ToolCall { id: format!("{id_prefix}0"), name, arguments }])
                }
                _ => (text.trim().to_string(), Vec::new()),
            };
        }
        let mut content = String::new();
        let mut calls = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find(CALL_OPEN) {
            let body_start = at + CALL_OPEN.len();
            let Some(len) = rest[body_start..].find(CALL_CLOSE) else { break };
            let body = rest[body_start..body_start + len].trim();
            match serde_json::from_str::<Value>(body) {
                Ok(Value::Object(o)) if o.get("name").is_some_and(Value::is_string) => {
                    content.push_str(&rest[..at]);
                    let arguments = arguments_text(o.get("arguments").cloned().unwrap_or(json!({})));
                    calls.push(ToolCall {
                        id: format!("{id_prefix}{}", calls.len()),
                        name: o["name"].as_str().unwrap_or_default().to_string(),
                        arguments,
                    });
                }
                _ => content.push_str(&rest[..body_start + len + CALL_CLOSE.len()]),
            }
            rest = &rest[body_start + len + CALL_CLOSE.len()..];
        }
        content.push_str(rest);
        (content.trim().to_string(), calls)
    }

    /// Where in streamed `text` a call may be starting: text before it can
    /// be sent as content, the rest must wait (it may be a call).
    pub fn content_end(&self, text: &str) -> usize {
        if *self == Self::Llama3 {
            // A reply that opens with an object (or the python tag) may be a call.
            let start = text.trim_start();
            let maybe = start.is_empty()
                || start.starts_with('{')
                || "<|python_tag|>".starts_with(start)
                || start.starts_with("<|python_tag|>");
            return if maybe { 0 } else { text.len() };
        }
        if *self == Self::Harmony {
            // A call's header may be anywhere in a message that has not
            // reached its body; the answer comes apart by its channel.
            return text.find(HARMONY_TO).map_or(text.len(), |at| harmony_header_start(text, at));
        }
        let open = match self {
            Self::Gemma4 => GEMMA_OPEN,
            Self::Mistral | Self::MistralNemo => MISTRAL_CALLS,
            _ => CALL_OPEN,
        };
        if let Some(at) = text.find(open) {
            return at;
        }
        // A tail that may still become the opening tag.
        (1..open.len()).rev().find(|&n| text.ends_with(&open[..n])).map_or(text.len(), |n| text.len() - n)
    }
}

/// Where the Harmony message whose header holds `to=functions.` at `at`
/// begins: its `<|start|>`, else the reply's own start (the generation
/// prompt opened it).
fn harmony_header_start(text: &str, at: usize) -> usize {
    let before = &text[..at];
    match (before.rfind("<|start|>"), before.rfind("<|message|>")) {
        (Some(s), m) if m.is_none_or(|m| m < s) => s,
        (_, Some(_)) => at,
        _ => 0,
    }
}

/// `messages` with every call id as Mistral's templates require it: nine
/// letters or digits (Small 3.2's and Nemo's refuse any other). An id that
/// is not one becomes one derived from it, the same each time, so a
/// conversation renders to the same prompt turn after turn (and its cache
/// stays valid), and a call and its result keep matching.
fn mistral_ids(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    fn nine(id: &str) -> String {
        if id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return id.to_string();
        }
        // FNV-1a, written in base 62.
        let mut h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        (0..9)
            .map(|_| {
                let d = DIGITS[(h % 62) as usize] as char;
                h /= 62;
                d
            })
            .collect()
    }
    messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(calls) = &mut m.tool_calls {
                calls.iter_mut().for_each(|c| c.id = nine(&c.id));
            }
            if let Some(id) = &mut m.tool_call_id {
                *id = nine(id);
            }
            m
        })
        .collect()
}

/// The first JSON value in `s` (after whitespace) and the bytes it took.
fn json_prefix(s: &str) -> Option<(Value, usize)> {
    let mut values = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    let value = values.next()?.ok()?;
    Some((value, values.byte_offset()))
}

/// The arguments of a call as JSON text: an object as written, a string
/// (some models write them as one) as its content.
fn arguments_text(arguments: Value) -> String {
    match arguments {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// GLM's calls taken out of a reply: each `<tool_call>NAME` with its
/// `<arg_key>`/`<arg_value>` pairs and `</tool_call>`; a value reads as JSON
/// where it is JSON (numbers, booleans, objects, arrays, null: how the
/// template writes every value but a string), else as the string it is.
/// A block that does not read as a call stays text.
fn glm_parse(text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(CALL_OPEN) {
        let body_start = at + CALL_OPEN.len();
        let Some(len) = rest[body_start..].find(CALL_CLOSE) else { break };
        let body = &rest[body_start..body_start + len];
        match glm_call(body) {
            Some((name, args)) => {
                content.push_str(&rest[..at]);
                calls.push(ToolCall { id: format!("{id_prefix}{}", calls.len()), name, arguments: args.to_string() });
            }
            None => content.push_str(&rest[..body_start + len + CALL_CLOSE.len()]),
        }
        rest = &rest[body_start + len + CALL_CLOSE.len()..];
    }
    content.push_str(rest);
    (content.trim().to_string(), calls)
}

/// One GLM call's body (between `<tool_call>` and `</tool_call>`): its name
/// and arguments.
fn glm_call(body: &str) -> Option<(String, Value)> {
    let name_end = body.find(GLM_KEY.0).unwrap_or(body.len());
    let name = body[..name_end].trim();
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || "_-.".contains(c)) {
        return None;
    }
    let mut args = serde_json::Map::new();
    let mut rest = body[name_end..].trim_start();
    while !rest.is_empty() {
        let key_body = rest.strip_prefix(GLM_KEY.0)?;
        let key_end = key_body.find(GLM_KEY.1)?;
        let key = key_body[..key_end].trim().to_string();
        let after = key_body[key_end + GLM_KEY.1.len()..].trim_start();
        let value_body = after.strip_prefix(GLM_VALUE.0)?;
        let value_end = value_body.find(GLM_VALUE.1)?;
        let raw = &value_body[..value_end];
        let value = match serde_json::from_str::<Value>(raw) {
            Ok(v) if !v.is_string() => v,
            _ => Value::String(raw.to_string()),
        };
        args.insert(key, value);
        rest = value_body[value_end + GLM_VALUE.1.len()..].trim_start();
    }
    Some((name.to_string(), Value::Object(args)))
}

/// The Lark grammar of a required GLM call: one of `tools` by name, then
/// its declared keys (any key where its schema allows others), each value a
/// string's text (no `<`, as long as the schema allows) where the schema
/// says string, else JSON of the property's schema; newlines between the tags allowed, as GLM-4.6 writes
/// them and 4.7 does not. Which keys are required is not held.
fn glm_call_grammar(tools: &[&ToolSpec], parallel: bool) -> String {
    let mut rules = Vec::new();
    let mut calls = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let schema = declared_only(&t.parameters);
        let props: Vec<(String, Value)> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let open = schema.get("additionalProperties") != Some(&Value::Bool(false));
        let mut args = Vec::new();
        for (j, (key, prop)) in props.iter().enumerate() {
            let value = if prop.get("type").and_then(Value::as_str) == Some("string") {
                // Its length held where the schema bounds it.
                match prop.get("maxLength").and_then(Value::as_u64) {
                    Some(n) => {
                        let min = prop.get("minLength").and_then(Value::as_u64).unwrap_or(1).min(n);
                        format!("/[^<]{{{min},{n}}}/")
                    }
                    None => "TEXT".to_string(),
                }
            } else {
                format!("%json {}", compact(prop.clone()))
            };
            rules.push(format!(
                "arg{i}_{j}: \"<arg_key>\" {} \"</arg_key>\" NL? \"<arg_value>\" {value} \"</arg_value>\" NL?",
                lark_str(key)
            ));
            args.push(format!("arg{i}_{j}"));
        }
        if open {
            rules.push(format!(
                "arg{i}_any: \"<arg_key>\" KEY \"</arg_key>\" NL? \"<arg_value>\" TEXT \"</arg_value>\" NL?"
            ));
            args.push(format!("arg{i}_any"));
        }
        let body = if args.is_empty() { String::new() } else { format!("({})*", args.join(" | ")) };
        rules.push(format!("call{i}: {} NL? {body}", lark_str(&t.name)));
        calls.push(format!("call{i}"));
    }
    let more = if parallel { " (NL? block)*" } else { "" };
    format!(
        "start: block{more}\nblock: \"<tool_call>\" ({}) \"</tool_call>\"\n{}\nKEY: /[A-Za-z_][A-Za-z0-9_]*/\nTEXT: /[^<]+/\nNL: \"\\n\"\n",
        calls.join(" | "),
        rules.join("\n")
    )
}

/// Mistral's calls taken out of a reply: from its first `[TOOL_CALLS]`,
/// each `[TOOL_CALLS]NAME[ARGS]{…}` (or `NAME[CALL_ID]ID[ARGS]{…}`); the
/// text before the first call is content, and so is anything from a call
/// that does not read as one.
fn mistral_parse(text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
    let Some(first) = text.find(MISTRAL_CALLS) else { return (text.trim().to_string(), Vec::new()) };
    let mut calls = Vec::new();
    let mut rest = &text[first..];
    while let Some(body) = rest.strip_prefix(MISTRAL_CALLS) {
        let call = body.find(MISTRAL_ARGS).and_then(|args_at| {
            let head = &body[..args_at];
            let name = head.split(MISTRAL_CALL_ID).next().unwrap_or_default().trim();
            let valid = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || "_-.".contains(c));
            let (args, used) = json_prefix(&body[args_at + MISTRAL_ARGS.len()..])?;
            (valid && (args.is_object() || args.is_string()))
                .then(|| (name.to_string(), args, args_at + MISTRAL_ARGS.len() + used))
        });
        let Some((name, args, used)) = call else { break };
        calls.push(ToolCall { id: format!("{id_prefix}{}", calls.len()), name, arguments: arguments_text(args) });
        rest = body[used..].trim_start();
    }
    let mut content = text[..first].to_string();
    content.push_str(rest);
    (content.trim().to_string(), calls)
}

/// Mistral Nemo's calls: one JSON array of `{"name", "arguments"}` after
/// `[TOOL_CALLS]`. An array that does not read as calls stays text.
fn mistral_nemo_parse(text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
    let Some(at) = text.find(MISTRAL_CALLS) else { return (text.trim().to_string(), Vec::new()) };
    let body = &text[at + MISTRAL_CALLS.len()..];
    let calls = json_prefix(body).and_then(|(value, used)| {
        let calls: Option<Vec<ToolCall>> = value
            .as_array()
            .filter(|a| !a.is_empty())?
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let name = c.get("name")?.as_str()?.to_string();
                let args = c.get("arguments").cloned().unwrap_or(json!({}));
                (args.is_object() || args.is_string()).then(|| ToolCall {
                    id: format!("{id_prefix}{i}"),
                    name,
                    arguments: arguments_text(args),
                })
            })
            .collect();
        Some((calls?, used))
    });
    match calls {
        Some((calls, used)) => {
            let mut content = text[..at].to_string();
            content.push_str(&body[used..]);
            (content.trim().to_string(), calls)
        }
        None => (text.trim().to_string(), Vec::new()),
    }
}

/// gpt-oss's call taken out of a reply: the message whose header says
/// `to=functions.NAME`, its body the arguments as JSON (the reply ends at
/// its `<|call|>`, which ends generation). The messages before it (its
/// analysis) stay content; a header without a JSON body stays text.
fn harmony_parse(text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
    let Some(at) = text.find(HARMONY_TO) else { return (text.trim().to_string(), Vec::new()) };
    let start = harmony_header_start(text, at);
    let after = &text[at + HARMONY_TO.len()..];
    let name_end = after.find(|c: char| c.is_whitespace() || c == '<').unwrap_or(after.len());
    let name = &after[..name_end];
    let parsed = after.find("<|message|>").and_then(|m| {
        let body = &after[m + "<|message|>".len()..];
        let (value, used) = json_prefix(body)?;
        let rest = body[used..].trim();
        (value.is_object() && (rest.is_empty() || rest.starts_with("<|"))).then_some(value)
    });
    match parsed {
        Some(args) if !name.is_empty() => (
            text[..start].trim().to_string(),
            vec![ToolCall { id: format!("{id_prefix}0"), name: name.to_string(), arguments: args.to_string() }],
        ),
        _ => (text.trim().to_string(), Vec::new()),
    }
}

/// Gemma 4's calls taken out of a reply: each
/// `<|tool_call>call:NAME{…}<tool_call|>` whose body reads as arguments;
/// anything else stays text.
fn gemma4_parse(text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(GEMMA_OPEN) {
        let after = &rest[at + GEMMA_OPEN.len()..];
        let parsed = after.find('{').and_then(|brace| {
            let name = after[..brace].trim();
            let valid = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || "_-.".contains(c));
            let (args, used) = gemma4_value(&after[brace..], false).filter(|(v, _)| v.is_object() && valid)?;
            let tail = after[brace + used..].trim_start();
            tail.starts_with(GEMMA_CLOSE)
                .then(|| (name.to_string(), args, after.len() - tail.len() + GEMMA_CLOSE.len()))
        });
        match parsed {
            Some((name, args, used)) => {
                content.push_str(&rest[..at]);
                calls.push(ToolCall { id: format!("{id_prefix}{}", calls.len()), name, arguments: args.to_string() });
                rest = &after[used..];
            }
            None => {
                content.push_str(&rest[..at + GEMMA_OPEN.len()]);
                rest = after;
            }
        }
    }
    content.push_str(rest);
    (content.trim().to_string(), calls)
}

/// The Lark grammar of a required Gemma 4 call: one of `tools` by name,
/// its top-level keys those its schema declares (any, where it allows
/// others), values in Gemma 4's syntax. The values' types are not held to
/// the schema (its syntax is not JSON, which llguidance's schema compiler
/// writes); strings hold no `<`.
fn gemma4_call_grammar(tools: &[&ToolSpec], parallel: bool) -> String {
    let mut rules = Vec::new();
    let mut blocks = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let schema = declared_only(&t.parameters);
        let declared: Vec<String> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let open = schema.get("additionalProperties") != Some(&Value::Bool(false));
        let key = if open {
            "KEY".to_string()
        } else if declared.is_empty() {
            String::new()
        } else {
            format!("({})", declared.iter().map(|k| lark_str(k)).collect::<Vec<_>>().join(" | "))
        };
        let members =
            if key.is_empty() { String::new() } else { format!("(key{i} \":\" value (\",\" key{i} \":\" value)*)?") };
        if !key.is_empty() {
            rules.push(format!("key{i}: {key}"));
        }
        rules.push(format!(
            "block{i}: \"<|tool_call>\" \"call:\" {} \"{{\" {members} \"}}\" {}",
            lark_str(&t.name),
            lark_str(GEMMA_CLOSE)
        ));
        blocks.push(format!("block{i}"));
    }
    let more = if parallel { " block*" } else { "" };
    format!(
        "start: block{more}\nblock: {}\n{}\nvalue: STRING | NUMBER | \"true\" | \"false\" | \"null\" | object | array\nobject: \"{{\" (KEY \":\" value (\",\" KEY \":\" value)*)? \"}}\"\narray: \"[\" (value (\",\" value)*)? \"]\"\nKEY: /[A-Za-z_][A-Za-z0-9_]*/\nSTRING: /<\\|\"\\|>[^<]*<\\|\"\\|>/\nNUMBER: /-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][-+]?[0-9]+)?/\n",
        blocks.join(" | "),
        rules.join("\n")
    )
}

/// Gemma 4's string mark, on both sides of a string.
const GEMMA_QUOTE: &str = "<|\"|>";

/// One value in Gemma 4's argument syntax at the start of `s` (as its
/// template's `format_argument` writes it: strings between `<|"|>` marks,
/// objects with bare keys (`quoted_keys`: keys marked as strings), arrays,
/// and bare numbers, `true`, `false` and `null`/`None`), with the bytes it
/// took.
fn gemma4_value(s: &str, quoted_keys: bool) -> Option<(Value, usize)> {
    if let Some(body) = s.strip_prefix(GEMMA_QUOTE) {
        let end = body.find(GEMMA_QUOTE)?;
        return Some((Value::String(body[..end].to_string()), GEMMA_QUOTE.len() * 2 + end));
    }
    let (open, close) = match s.as_bytes().first()? {
        b'{' => (b'{', b'}'),
        b'[' => (b'[', b']'),
        _ => {
            let end = s.find([',', '}', ']']).unwrap_or(s.len());
            let word = s[..end].trim();
            let value = match word {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                "null" | "None" | "none" => Value::Null,
                w => serde_json::from_str::<serde_json::Number>(w).map(Value::Number).ok()?,
            };
            return Some((value, end));
        }
    };
    let mut i = 1;
    let mut object = serde_json::Map::new();
    let mut array = Vec::new();
    loop {
        let skip = s[i..].len() - s[i..].trim_start().len();
        i += skip;
        if s.as_bytes().get(i) == Some(&close) && (object.is_empty() && array.is_empty()) {
            i += 1;
            break;
        }
        if open == b'{' {
            let (key, used) = if quoted_keys || s[i..].starts_with(GEMMA_QUOTE) {
                let (k, used) = gemma4_value(&s[i..], quoted_keys)?;
                (k.as_str()?.to_string(), used)
            } else {
                let end = s[i..].find(':')?;
                (s[i..i + end].trim().to_string(), end)
            };
            i += used;
            i += s[i..].find(':').filter(|&n| s[i..i + n].trim().is_empty())? + 1;
            let skip = s[i..].len() - s[i..].trim_start().len();
            let (v, used) = gemma4_value(&s[i + skip..], quoted_keys)?;
            object.insert(key, v);
            i += skip + used;
        } else {
            let (v, used) = gemma4_value(&s[i..], quoted_keys)?;
            array.push(v);
            i += used;
        }
        let skip = s[i..].len() - s[i..].trim_start().len();
        i += skip;
        match s.as_bytes().get(i)? {
            b',' => i += 1,
            c if *c == close => {
                i += 1;
                break;
            }
            _ => return None,
        }
    }
    let value = if open == b'{' { Value::Object(object) } else { Value::Array(array) };
    Some((value, i))
}

/// A call as the fallback asks the model to write it, name first.
fn call_block(call: &ToolCall) -> String {
    let arguments = serde_json::from_str::<Value>(&call.arguments).unwrap_or(Value::String(call.arguments.clone()));
    format!("{CALL_OPEN}\n{{\"name\": {}, \"arguments\": {arguments}}}\n{CALL_CLOSE}", Value::String(call.name.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_come_out_of_a_reply_and_bad_blocks_stay_text() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": \"{}\"}\n</tool_call>";
        let (content, calls) = ToolFormat::Hermes.parse(text, "call_");
        assert_eq!(content, "Let me look.");
        assert_eq!(calls.len(), 2);
        assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("weather", "{\"city\":\"Paris\"}"));
        assert_eq!((calls[1].id.as_str(), calls[1].arguments.as_str()), ("call_1", "{}"));
        let (content, calls) = ToolFormat::Hermes.parse("<tool_call>not json</tool_call> ok", "c");
        assert_eq!((content.as_str(), calls.len()), ("<tool_call>not json</tool_call> ok", 0));
        assert_eq!(ToolFormat::Hermes.content_end("Hello <tool_"), 6);
        assert_eq!(ToolFormat::Hermes.content_end("Hello"), 5);
        assert_eq!(ToolFormat::Hermes.content_end("a<tool_call>{"), 1);
    }

    #[test]
    fn a_required_call_names_only_the_arguments_its_schema_declares() {
        let spec = |parameters: Value| ToolSpec { name: "t".into(), description: None, parameters };
        let tools = Tools {
            specs: vec![
                spec(json!({"type": "object", "properties": {}})),
                spec(json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": true})),
            ],
            choice: ToolChoice::Required,
            parallel: false,
        };
        let Some(GrammarSpec::JsonSchema(schema)) = tools.call_grammar(ToolFormat::Llama3) else { panic!() };
        let calls = schema["anyOf"].as_array().unwrap();
        assert_eq!(calls[0]["properties"]["parameters"]["additionalProperties"], json!(false));
        assert_eq!(
            calls[1]["properties"]["parameters"]["additionalProperties"],
            json!(true),
            "a schema's own choice stands"
        );
    }

    #[test]
    fn gemma4_calls_come_out_of_a_reply_in_its_own_syntax() {
        let text = "Checking.<|tool_call>call:get_weather{city:<|\"|>Paris, {France}<|\"|>,days:3,hourly:false,\
            opts:{units:<|\"|>metric<|\"|>,tags:[<|\"|>a<|\"|>,2.5,null]}}<tool_call|><|tool_call>call:get_time{}<tool_call|>";
        let (content, calls) = ToolFormat::Gemma4.parse(text, "c");
        assert_eq!(content, "Checking.");
        assert_eq!(calls.len(), 2);
        assert_eq!((calls[0].id.as_str(), calls[0].name.as_str()), ("c0", "get_weather"));
        let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
        assert_eq!(
            args,
            json!({"city": "Paris, {France}", "days": 3, "hourly": false, "opts": {"units": "metric", "tags": ["a", 2.5, null]}})
        );
        assert_eq!((calls[1].name.as_str(), calls[1].arguments.as_str()), ("get_time", "{}"));
        // Broken calls stay text.
        for bad in [
            "<|tool_call>call:get_weather{city:<|\"|>Paris}<tool_call|>",
            "<|tool_call>call:{a:1}<tool_call|>",
            "<|tool_call>call:f{a:1}",
            "<|tool_call>call:f{a 1}<tool_call|>",
        ] {
            let (content, calls) = ToolFormat::Gemma4.parse(bad, "c");
            assert!(calls.is_empty(), "{bad}");
            assert_eq!(content, bad);
        }
        assert_eq!(ToolFormat::Gemma4.content_end("Hi <|tool_ca"), 3);
        assert_eq!(ToolFormat::Gemma4.content_end("Hi <|tool_call>call:f{"), 3);
    }

    #[test]
    fn a_harmony_call_comes_out_of_a_reply_with_its_analysis_left() {
        let reply = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary \
            to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
        let (content, calls) = ToolFormat::Harmony.parse(reply, "c");
        assert_eq!(content, "<|channel|>analysis<|message|>Need weather.<|end|>");
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("get_weather", r#"{"city":"Paris"}"#));
        // Addressed before the channel, as the template writes it; the reply's own first message.
        let (content, calls) = ToolFormat::Harmony.parse(" to=functions.f<|channel|>commentary json<|message|>{}", "c");
        assert_eq!((content.as_str(), calls[0].name.as_str()), ("", "f"));
        // No JSON body: text.
        let half = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":";
        assert!(ToolFormat::Harmony.parse(half, "c").1.is_empty());
        assert_eq!(ToolFormat::Harmony.content_end(half), 0);
        assert_eq!(ToolFormat::Harmony.content_end("<|channel|>final<|message|>Hi"), 29);
    }

    #[test]
    fn mistral_calls_come_out_of_a_reply_after_its_text() {
        let reply = "Checking both.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}";
        let (content, calls) = ToolFormat::Mistral.parse(reply, "c");
        assert_eq!(content, "Checking both.");
        assert_eq!(calls.len(), 2);
        assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("get_weather", r#"{"city":"Paris"}"#));
        assert_eq!(
            (calls[1].id.as_str(), calls[1].name.as_str(), calls[1].arguments.as_str()),
            ("c1", "get_time", "{}")
        );
        // A call that does not read as one stays text, from where it starts.
        let (content, calls) = ToolFormat::Mistral.parse("[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{\"a\":", "c");
        assert_eq!((content.as_str(), calls.len()), ("[TOOL_CALLS]g[ARGS]{\"a\":", 1));
        assert!(ToolFormat::Mistral.parse("[TOOL_CALLS][ARGS]{}", "c").1.is_empty());
        assert_eq!(ToolFormat::Mistral.content_end("Hi [TOOL_CA"), 3);
        assert_eq!(ToolFormat::Mistral.content_end("Hi [TOOL_CALLS]f"), 3);
        assert_eq!(ToolFormat::Mistral.content_end("Hi [x]"), 6);

        let nemo = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123def\"}, {\"name\": \"get_time\", \"arguments\": {}}]";
        let (content, calls) = ToolFormat::MistralNemo.parse(nemo, "c");
        assert_eq!((content.as_str(), calls.len()), ("", 2));
        assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("get_weather", r#"{"city":"Paris"}"#));
        for bad in [
            "[TOOL_CALLS][]",
            "[TOOL_CALLS][{\"arguments\": {}}]",
            "[TOOL_CALLS]{\"name\": \"f\"}",
            "[TOOL_CALLS][{\"name\"",
        ] {
            let (content, calls) = ToolFormat::MistralNemo.parse(bad, "c");
            assert_eq!((content.as_str(), calls.len()), (bad, 0));
        }
    }

    #[test]
    fn mistral_templates_get_call_ids_of_nine_letters_and_digits_the_same_each_time() {
        let call = |id: &str| ToolCall { id: id.into(), name: "f".into(), arguments: "{}".into() };
        let mut reply = ChatMessage::assistant("");
        reply.tool_calls = Some(vec![call("call_12_0"), call("abc123XYZ"), call("call_12_1")]);
        let mut result = ChatMessage::new(Role::Tool, "ok");
        result.tool_call_id = Some("call_12_0".into());
        let tools = Tools {
            specs: vec![ToolSpec { name: "f".into(), description: None, parameters: json!({}) }],
            ..Default::default()
        };
        let (once, listed) =
            ToolFormat::Mistral.prepare(&[ChatMessage::user("Hi"), reply.clone(), result.clone()], &tools);
        assert!(listed.is_some());
        let ids: Vec<&str> = once[1].tool_calls.as_ref().unwrap().iter().map(|c| c.id.as_str()).collect();
        assert!(ids.iter().all(|id| id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric())), "{ids:?}");
        assert_eq!(ids[1], "abc123XYZ", "an id that is one already stays");
        assert_ne!(ids[0], ids[2]);
        assert_eq!(once[2].tool_call_id.as_deref(), Some(ids[0]), "a result still names its call");
        let (again, _) = ToolFormat::MistralNemo.prepare(&[ChatMessage::user("Hi"), reply, result], &tools);
        assert_eq!(again, once);
    }

    #[test]
    fn glm_calls_come_out_of_a_reply_in_its_tags() {
        let reply = "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"units\": \"metric\"}</arg_value>\n</tool_call><tool_call>get_time</tool_call>";
        let (content, calls) = ToolFormat::Glm.parse(reply, "c");
        assert_eq!(content, "Checking.");
        assert_eq!(calls.len(), 2);
        let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
        assert_eq!(args, json!({"city": "Paris", "days": 3, "opts": {"units": "metric"}}));
        assert_eq!((calls[1].name.as_str(), calls[1].arguments.as_str()), ("get_time", "{}"));
        // GLM-4.7's form, with no newlines between the tags.
        let (_, calls) =
            ToolFormat::Glm.parse("<tool_call>f<arg_key>a</arg_key><arg_value>x y</arg_value></tool_call>", "c");
        assert_eq!(calls[0].arguments, r#"{"a":"x y"}"#);
        for bad in
            ["<tool_call>f<arg_key>a</arg_key></tool_call>", "<tool_call></tool_call>", "<tool_call>f junk</tool_call>"]
        {
            let (content, calls) = ToolFormat::Glm.parse(bad, "c");
            assert_eq!((content.as_str(), calls.len()), (bad, 0), "{bad}");
        }
    }
}
