//! The grammars a reply that must call is held to, in each tool format.

use serde_json::{json, Value};

use super::{ToolChoice, ToolFormat, ToolSpec, Tools, GEMMA_CLOSE, HARMONY_TO, MISTRAL_ARGS, MISTRAL_CALLS};
use crate::constraint::GrammarSpec;

/// The most calls a reply that must call makes at once. Left open, a small
/// model told to call tends to write the same call again and again until
/// its token limit (the reply never ends, and an agent times out).
pub const MAX_PARALLEL_CALLS: usize = 4;

/// After a first call, up to `MAX_PARALLEL_CALLS - 1` more of `unit` (a
/// separator and a call) with parallel calls; none without.
fn more_calls(parallel: bool, unit: &str) -> String {
    let mut more = String::new();
    if parallel {
        for _ in 1..MAX_PARALLEL_CALLS {
            more = format!(" ({unit}{more})?");
        }
    }
    more
}

impl Tools {
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
                let more = more_calls(self.parallel, "call");
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
            array["maxItems"] = if self.parallel { MAX_PARALLEL_CALLS } else { 1 }.into();
            return Some(GrammarSpec::Lark(format!("start: {:?} %json {}\n", MISTRAL_CALLS, compact(array))));
        }
        let schema = compact(json!({"anyOf": calls}));
        if format == ToolFormat::Llama3 {
            // One call a reply, as its template allows.
            return Some(GrammarSpec::JsonSchema(schema));
        }
        let more = more_calls(self.parallel, "\"\\n\" block");
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
    let more = more_calls(parallel, "NL? block");
    format!(
        "start: block{more}\nblock: \"<tool_call>\" ({}) \"</tool_call>\"\n{}\nKEY: /[A-Za-z_][A-Za-z0-9_]*/\nTEXT: /[^<]+/\nNL: \"\\n\"\n",
        calls.join(" | "),
        rules.join("\n")
    )
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
    let more = more_calls(parallel, "block");
    format!(
        "start: block{more}\nblock: {}\n{}\nvalue: STRING | NUMBER | \"true\" | \"false\" | \"null\" | object | array\nobject: \"{{\" (KEY \":\" value (\",\" KEY \":\" value)*)? \"}}\"\narray: \"[\" (value (\",\" value)*)? \"]\"\nKEY: /[A-Za-z_][A-Za-z0-9_]*/\nSTRING: /<\\|\"\\|>[^<]*<\\|\"\\|>/\nNUMBER: /-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][-+]?[0-9]+)?/\n",
        blocks.join(" | "),
        rules.join("\n")
    )
}
