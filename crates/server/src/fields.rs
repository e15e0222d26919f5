//! A request body's fields, read one at a time so that a bad one is a 400
//! naming it: the generic readers, the sampler settings every endpoint
//! shares, and a function tool's checks.

use hearth_engine::{ToolChoice, ToolSpec, Tools};
use hearth_store::{ConversationSettings, OverflowPolicy, ReasoningEffort, SpeculationMode, MAX_DRAFT_TOKENS};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// A body's top-level fields.
pub(crate) struct Fields(pub(crate) Map<String, Value>);

impl Fields {
    pub(crate) fn parse(body: &[u8]) -> Result<Self, ApiError> {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => Ok(Self(map)),
            Ok(_) => Err(ApiError { param: None, ..ApiError::field("body", "must be a JSON object") }),
            Err(e) => Err(ApiError { param: None, ..ApiError::field("body", format!("is not valid JSON ({e})")) }),
        }
    }

    /// A field, `null` counting as absent (as OpenAI's clients send it).
    pub(crate) fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub(crate) fn bool(&self, name: &str, default: bool) -> Result<bool, ApiError> {
        match self.get(name) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ApiError::field(name, "must be true or false")),
        }
    }

    pub(crate) fn number(&self, name: &str, range: std::ops::RangeInclusive<f64>) -> Result<Option<f32>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(x) if range.contains(&x) => Ok(Some(x as f32)),
                _ => Err(ApiError::field(name, format!("must be between {} and {}", range.start(), range.end()))),
            },
            Some(_) => Err(ApiError::field(name, "must be a number")),
        }
    }

    pub(crate) fn uint(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(x) if (min..=max).contains(&x) => Ok(Some(x)),
                _ => Err(ApiError::field(name, format!("must be a whole number between {min} and {max}"))),
            },
            Some(_) => Err(ApiError::field(name, "must be a whole number")),
        }
    }

    /// The sampler's fields every endpoint spells alike (`temperature` up
    /// to `max_temperature`, `top_p`, and `top_k`, `min_p`, `repeat_penalty`,
    /// `seed`, `reasoning_effort`), with the endpoint's token limit (`None`:
    /// until the context is full) and stop strings.
    pub(crate) fn settings(
        &self,
        max_tokens: Option<u64>,
        stop_strings: Vec<String>,
        max_temperature: f64,
    ) -> Result<ConversationSettings, ApiError> {
        let defaults = ConversationSettings::default();
        let seed = match self.get("seed") {
            None => None,
            Some(Value::Number(n)) => match n.as_i64() {
                // OpenAI takes any 64-bit integer; the sampler's seed is 32 bits.
                Some(x) => Some(x as u64 as u32 ^ (x as u64 >> 32) as u32),
                None => return Err(ApiError::field("seed", "must be a whole number")),
            },
            Some(_) => return Err(ApiError::field("seed", "must be a whole number")),
        };
        let mut settings = ConversationSettings {
            system_prompt: String::new(),
            temperature: self.number("temperature", 0.0..=max_temperature)?.unwrap_or(defaults.temperature),
            top_p: match self.number("top_p", 0.0..=1.0)? {
                Some(p) if p <= 0.0 => return Err(ApiError::field("top_p", "must be above 0")),
                Some(p) => p,
                None => defaults.top_p,
            },
            top_k: self.uint("top_k", 0, 100_000)?.map_or(defaults.top_k, |k| k as u32),
            min_p: match self.number("min_p", 0.0..=1.0)? {
                Some(p) if p >= 1.0 => return Err(ApiError::field("min_p", "must be below 1")),
                Some(p) => p,
                None => defaults.min_p,
            },
            repeat_penalty: match self.number("repeat_penalty", 0.0..=10.0)? {
                Some(p) if p <= 0.0 => return Err(ApiError::field("repeat_penalty", "must be above 0")),
                Some(p) => p,
                None => 1.0,
            },
            penalty_window: defaults.penalty_window,
            // Until the context is full when not given.
            max_new_tokens: max_tokens.unwrap_or(1_000_000) as u32,
            seed,
            stop_strings,
            context_length: 0,
            overflow: OverflowPolicy::StopAtLimit,
            thinking: defaults.thinking,
            // OpenAI's values; its "minimal" is the least gpt-oss has.
            reasoning_effort: match self.get("reasoning_effort") {
                None => defaults.reasoning_effort,
                Some(Value::String(e)) => match e.as_str() {
                    "minimal" | "low" => ReasoningEffort::Low,
                    "medium" => ReasoningEffort::Medium,
                    "high" => ReasoningEffort::High,
                    _ => return Err(ApiError::field("reasoning_effort", "must be low, medium or high")),
                },
                Some(_) => return Err(ApiError::field("reasoning_effort", "must be a string")),
            },
            // An API client brings its own tools (`tools`); the app's MCP
            // servers are for its chats.
            tool_servers: Vec::new(),
            tool_use: Default::default(),
            // Hearth's own fields: how replies draft tokens to verify.
            speculation: match self.get("speculation") {
                None => defaults.speculation,
                Some(Value::String(m)) => match m.as_str() {
                    "off" => SpeculationMode::Off,
                    "auto" => SpeculationMode::Auto,
                    "ngram" => SpeculationMode::Ngram,
                    "draft" => SpeculationMode::Draft,
                    "mtp" => SpeculationMode::Mtp,
                    _ => return Err(ApiError::field("speculation", "must be off, auto, ngram, draft or mtp")),
                },
                Some(_) => return Err(ApiError::field("speculation", "must be a string")),
            },
            draft_tokens: self
                .uint("draft_tokens", 1, MAX_DRAFT_TOKENS.into())?
                .map_or(defaults.draft_tokens, |k| k as u32),
            draft_model: defaults.draft_model.clone(),
        };
        // A draft model: the path of a GGUF file on this machine. Naming
        // one drafts with it unless `speculation` says otherwise.
        match self.get("draft_model") {
            None | Some(Value::Null) => {}
            Some(Value::String(path)) if std::path::Path::new(path).is_absolute() => {
                settings.draft_model = Some(path.clone());
                if !self.has("speculation") {
                    settings.speculation = SpeculationMode::Draft;
                }
            }
            Some(_) => return Err(ApiError::field("draft_model", "must be the absolute path of a GGUF file")),
        }
        if let Some(bad) = settings.validate().first() {
            // The settings' names are the UI's (`draftModel`); the API's are snake case.
            let field: String = bad
                .field
                .chars()
                .flat_map(|c| [Some('_').filter(|_| c.is_uppercase()), Some(c.to_ascii_lowercase())])
                .flatten()
                .collect();
            return Err(ApiError::field(&field, bad.message.clone()));
        }
        Ok(settings)
    }
}

/// A function tool: its name (1 to 64 letters, digits, `_` or `-`), its
/// description and its parameters' JSON schema (none: no parameters);
/// `at` spells a field's name in the endpoint's words.
pub(crate) fn function_tool(
    name: Option<&Value>,
    description: Option<&Value>,
    parameters: Option<&Value>,
    at: &dyn Fn(&str) -> String,
) -> Result<ToolSpec, ApiError> {
    let name = match name.and_then(Value::as_str) {
        Some(n)
            if !n.is_empty()
                && n.len() <= 64
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
        {
            n.to_string()
        }
        _ => return Err(ApiError::field(&at("name"), "must be 1 to 64 letters, digits, underscores or dashes")),
    };
    let parameters = match parameters {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err(ApiError::field(&at("parameters"), "must be a JSON schema object")),
    };
    let description = match description {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => return Err(ApiError::field(&at("description"), "must be a string")),
    };
    Ok(ToolSpec { name, description, parameters })
}

/// The tools offered, their choice checked against them (`field` names the
/// choice in the endpoint's words).
pub(crate) fn checked_tools(
    specs: Vec<ToolSpec>,
    choice: ToolChoice,
    parallel: bool,
    field: &str,
) -> Result<Tools, ApiError> {
    match &choice {
        ToolChoice::Required | ToolChoice::Function(_) if specs.is_empty() => {
            return Err(ApiError::field(field, "needs tools"))
        }
        ToolChoice::Function(n) if !specs.iter().any(|t| &t.name == n) => {
            return Err(ApiError::field(field, format!("names \"{n}\", which is not among the tools")))
        }
        _ => {}
    }
    Ok(Tools { specs, choice, parallel })
}
