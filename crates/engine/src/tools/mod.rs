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

use serde_json::{json, Value};

use crate::template::{ChatMessage, ChatTemplate, Role, ToolCall};

mod grammar;
mod parse;

use parse::{gemma4_parse, glm_parse, harmony_parse, mistral_nemo_parse, mistral_parse};

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
        parse::take_call_blocks(text, id_prefix, |body| match serde_json::from_str::<Value>(body.trim()) {
            Ok(Value::Object(o)) if o.get("name").is_some_and(Value::is_string) => {
                let arguments = arguments_text(o.get("arguments").cloned().unwrap_or(json!({})));
                Some((o["name"].as_str().unwrap_or_default().to_string(), arguments))
            }
            _ => None,
        })
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

/// A call as the fallback asks the model to write it, name first.
fn call_block(call: &ToolCall) -> String {
    let arguments = serde_json::from_str::<Value>(&call.arguments).unwrap_or(Value::String(call.arguments.clone()));
    format!("{CALL_OPEN}\n{{\"name\": {}, \"arguments\": {arguments}}}\n{CALL_CLOSE}", Value::String(call.name.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constraint::GrammarSpec;

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
