//! Calls taken out of a finished reply, in the formats whose calls are not
//! Hermes's JSON blocks.

use serde_json::{json, Value};

use super::{
    arguments_text, harmony_header_start, json_prefix, CALL_CLOSE, CALL_OPEN, GEMMA_CLOSE, GEMMA_OPEN, GLM_KEY,
    GLM_VALUE, HARMONY_TO, MISTRAL_ARGS, MISTRAL_CALLS, MISTRAL_CALL_ID,
};
use crate::template::ToolCall;

/// GLM's calls taken out of a reply: each `<tool_call>NAME` with its
/// `<arg_key>`/`<arg_value>` pairs and `</tool_call>`; a value reads as JSON
/// where it is JSON (numbers, booleans, objects, arrays, null: how the
/// template writes every value but a string), else as the string it is.
/// A block that does not read as a call stays text.
pub(super) fn glm_parse(text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
    take_call_blocks(text, id_prefix, |body| glm_call(body).map(|(name, args)| (name, args.to_string())))
}

/// Every `<tool_call>…</tool_call>` block of `text` that `call` reads as a
/// call (its name and arguments) taken out, numbered after `id_prefix`; a
/// block it does not read stays text, and so does an unclosed one.
pub(super) fn take_call_blocks(
    text: &str,
    id_prefix: &str,
    call: impl Fn(&str) -> Option<(String, String)>,
) -> (String, Vec<ToolCall>) {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(CALL_OPEN) {
        let body_start = at + CALL_OPEN.len();
        let Some(len) = rest[body_start..].find(CALL_CLOSE) else { break };
        let end = body_start + len + CALL_CLOSE.len();
        match call(&rest[body_start..body_start + len]) {
            Some((name, arguments)) => {
                content.push_str(&rest[..at]);
                calls.push(ToolCall { id: format!("{id_prefix}{}", calls.len()), name, arguments });
            }
            None => content.push_str(&rest[..end]),
        }
        rest = &rest[end..];
    }
    content.push_str(rest);
    (content.trim().to_string(), calls)
}

/// One GLM call's body (between `<tool_call>` and `</tool_call>`): its name
/// and arguments.
pub(super) fn glm_call(body: &str) -> Option<(String, Value)> {
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

/// Mistral's calls taken out of a reply: from its first `[TOOL_CALLS]`,
/// each `[TOOL_CALLS]NAME[ARGS]{…}` (or `NAME[CALL_ID]ID[ARGS]{…}`); the
/// text before the first call is content, and so is anything from a call
/// that does not read as one.
pub(super) fn mistral_parse(text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
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
pub(super) fn mistral_nemo_parse(text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
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
pub(super) fn harmony_parse(text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
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
pub(super) fn gemma4_parse(text: &str, id_prefix: &str) -> (String, Vec<ToolCall>) {
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

/// Gemma 4's string mark, on both sides of a string.
const GEMMA_QUOTE: &str = "<|\"|>";

/// One value in Gemma 4's argument syntax at the start of `s` (as its
/// template's `format_argument` writes it: strings between `<|"|>` marks,
/// objects with bare keys (`quoted_keys`: keys marked as strings), arrays,
/// and bare numbers, `true`, `false` and `null`/`None`), with the bytes it
/// took.
pub(super) fn gemma4_value(s: &str, quoted_keys: bool) -> Option<(Value, usize)> {
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
