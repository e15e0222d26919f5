//! Chat templates: the file's `tokenizer.chat_template`, rendered with minijinja
//! the way Hugging Face's Python renders it (trim_blocks, lstrip_blocks,
//! Python string methods).

use minijinja::syntax::SyntaxConfig;
use minijinja::{context, Environment, Error as JinjaError, ErrorKind};
use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{EngineError, Result};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool's result, answering the call named by `tool_call_id`.
    Tool,
}

/// One message of a conversation, as the template sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    /// A reply's reasoning, for templates that take it apart from the
    /// answer (gpt-oss's Harmony: its `analysis` channel). Absent, not
    /// null, when there is none: templates test `"thinking" in message`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// The tokens a reply was sampled as, when they are kept: its prompt
    /// then uses them rather than its text tokenized again, which can give
    /// other tokens for the same text (`Engine::encode_chat_with`), and so
    /// a cache that no longer matches.
    #[serde(skip)]
    pub ids: Option<Vec<u32>>,
    /// The calls a reply made (OpenAI's `tool_calls`), as templates read
    /// them: `{id, type: "function", function: {name, arguments}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// A tool message's answer to this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A call a reply made, as its message carries it (the calls are read out
/// of a reply in `tools`).
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

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self { role, content: content.into(), thinking: None, ids: None, tool_calls: None, tool_call_id: None }
    }

    /// This message, written as the tokens `ids` (which must decode to its
    /// content for them to be used).
    pub fn with_ids(self, ids: Vec<u32>) -> Self {
        Self { ids: Some(ids), ..self }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
}

const NAME: &str = "chat";

/// Instructions one rendering may run: real templates need a few hundred
/// per message, so this allows conversations of many thousands of messages
/// while a template bomb stops within a fraction of a second.
const TEMPLATE_FUEL: u64 = 20_000_000;

/// What `strftime_now` reads: the local time, or a fixed one in tests.
pub type Clock = fn() -> chrono::NaiveDateTime;

fn local_now() -> chrono::NaiveDateTime {
    chrono::Local::now().naive_local()
}

/// A compiled chat template with the special-token strings it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        Self::with_clock(source, bos_token, eos_token, local_now)
    }

    /// `new`, with `strftime_now` reading `clock` (gpt-oss's template
    /// writes the current date into every prompt).
    pub fn with_clock(source: &str, bos_token: &str, eos_token: &str, clock: Clock) -> Result<Self> {
        let mut env = Environment::new();
        env.set_syntax(
            SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| EngineError::Template(e.to_string()))?,
        );
        // A template is code from a downloaded file: bound the work one
        // rendering may do, so a hostile loop is an error, not a hang.
        env.set_fuel(Some(TEMPLATE_FUEL));
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, JinjaError> {
            Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
        });
        // Hugging Face's: Python's `datetime.now().strftime(format)`.
        env.add_function("strftime_now", move |format: String| -> std::result::Result<String, JinjaError> {
            use chrono::format::{Item, StrftimeItems};
            let items: Vec<Item> = StrftimeItems::new(&format).collect();
            if items.contains(&Item::Error) {
                return Err(JinjaError::new(ErrorKind::InvalidOperation, format!("strftime format {format:?}")));
            }
            Ok(clock().format_with_items(items.into_iter()).to_string())
        });
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_string()).map_err(|e| EngineError::Template(describe(&e)))?;
        Ok(Self { env, source: source.to_string(), bos_token: bos_token.into(), eos_token: eos_token.into() })
    }

    /// This template, with `strftime_now` reading `clock`.
    pub fn clocked(&self, clock: Clock) -> Result<Self> {
        Self::with_clock(&self.source, &self.bos_token, &self.eos_token, clock)
    }

    /// ChatML, for files that carry no template of their own.
    pub fn chatml() -> Self {
        Self::new(CHATML, "", "").expect("the built-in template compiles")
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The prompt text for `messages`; with `add_generation_prompt` it ends
    /// where the assistant's reply should begin.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, &[])
    }

    /// `render` with template variables set as well, such as a reasoning
    /// model's `enable_thinking` (`ReasoningFormat::switch`) or gpt-oss's
    /// `reasoning_effort`; a template that does not read a variable is
    /// unaffected by it.
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        vars: &[(&str, serde_json::Value)],
    ) -> Result<String> {
        let tmpl = self.env.get_template(NAME).map_err(|e| EngineError::Template(describe(&e)))?;
        let base = context! {
            messages => minijinja::value::Value::from(minijinja::value::Serde(messages)),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        let extra: std::collections::BTreeMap<&str, &serde_json::Value> = vars.iter().map(|(k, v)| (*k, v)).collect();
        tmpl.render(context! { ..minijinja::value::Value::from(minijinja::value::Serde(&extra)), ..base })
            .map_err(|e| EngineError::Template(describe(&e)))
    }
}

/// `tojson` as Hugging Face's templates call it: minijinja's own, or with
/// `ensure_ascii=False` (GLM's templates) Python's `json.dumps` without
/// escaping: `, ` and `: ` between items, keys sorted (as maps reach
/// templates), every character as it is.
fn tojson(
    value: &minijinja::value::Value,
    indent: Option<minijinja::value::Value>,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<minijinja::value::Value, JinjaError> {
    let ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    if ascii != Some(false) || indent.is_some() {
        return minijinja::filters::tojson(value, indent, kwargs);
    }
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(value)
        .map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, "cannot serialize to JSON").with_source(e))?;
    let mut out = String::new();
    python_json(&json, &mut out);
    Ok(minijinja::value::Value::from_safe_string(out))
}

/// `value` as Python's `json.dumps(value, ensure_ascii=False, sort_keys=True)` writes it.
fn python_json(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value as J;
    match value {
        J::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_json(v, out);
            }
            out.push(']');
        }
        J::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(": ");
                python_json(&map[k], out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn describe(e: &JinjaError) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
