//! Per-conversation generation settings, their validation, and named presets.

use serde::{Deserialize, Serialize};

/// Everything the user can set for a conversation's replies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(default, rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct ConversationSettings {
    pub system_prompt: String,
    /// 0 samples greedily.
    pub temperature: f32,
    /// 0 turns top-k off.
    pub top_k: u32,
    pub top_p: f32,
    pub min_p: f32,
    /// 1 turns the penalty off.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub penalty_window: u32,
    pub max_new_tokens: u32,
    /// `None` draws a new seed for every reply.
    pub seed: Option<u32>,
    pub stop_strings: Vec<String>,
    /// 0 uses the model's own context length.
    pub context_length: u32,
    pub overflow: OverflowPolicy,
    /// Think before answering, where the model's template has a switch for
    /// it (Qwen3's `enable_thinking`); other models ignore it.
    pub thinking: bool,
    /// How hard to think, where the model's template reads it (gpt-oss's
    /// `reasoning_effort`); other models ignore it.
    pub reasoning_effort: ReasoningEffort,
    /// The MCP servers (by name) whose tools the model is offered.
    pub tool_servers: Vec<String>,
    /// Whether the model may call those tools.
    pub tool_use: ToolUse,
    /// Whether replies draft tokens for one pass to check several at once
    /// (speculative decoding): never another reply, only a faster one.
    pub speculation: SpeculationMode,
    /// At most this many drafted tokens per pass (1 to 32).
    pub draft_tokens: u32,
    /// The GGUF file `SpeculationMode::Draft` drafts with: a smaller model
    /// with the same vocabulary as the chat's.
    pub draft_model: Option<String>,
}

/// How a chat's replies draft tokens to verify in one pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum SpeculationMode {
    /// One token per pass.
    Off,
    /// Drafts from the conversation's own text, backing off while they
    /// are rejected.
    #[default]
    Auto,
    /// Drafts from the conversation's own text whenever it offers one.
    Ngram,
    /// Drafts with a draft model (`draft_model`).
    Draft,
    /// Drafts with the model's own multi-token-prediction head (Qwen
    /// 3.5/3.6, GLM-4.5 and GLM-4.7-Flash files carry one); a model
    /// without one refuses the reply.
    Mtp,
}

impl SpeculationMode {
    /// The engine's name for it (`Speculation::parse`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Auto => "auto",
            Self::Ngram => "ngram",
            Self::Draft => "draft",
            Self::Mtp => "mtp",
        }
    }
}

/// The most drafted tokens a pass may check.
pub const MAX_DRAFT_TOKENS: u32 = 32;

/// Whether a chat's model may call the tools of its servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum ToolUse {
    /// The model decides.
    #[default]
    Auto,
    /// Each message's first reply calls a tool (constrained to one); the
    /// replies after the results answer freely.
    Always,
    /// Tools are not offered.
    Never,
}

/// At most this many servers per chat.
pub const MAX_TOOL_SERVERS: usize = 32;

/// How hard a model that takes a reasoning effort thinks (gpt-oss).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum ReasoningEffort {
    Low,
    /// The templates' own default.
    #[default]
    Medium,
    High,
}

/// What happens when a conversation no longer fits the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum OverflowPolicy {
    /// Refuse to go on, with the reason "context full".
    StopAtLimit,
    /// Keep the system prompt and first turn, drop the oldest turns after them.
    TruncateMiddle,
    /// Keep the system prompt and the latest turns.
    RollingWindow,
}

impl Default for ConversationSettings {
    fn default() -> Self {
        Self {
            system_prompt: String::new(),
            temperature: 0.7,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            penalty_window: 64,
            max_new_tokens: 512,
            seed: None,
            stop_strings: Vec::new(),
            context_length: 0,
            overflow: OverflowPolicy::StopAtLimit,
            thinking: true,
            reasoning_effort: ReasoningEffort::Medium,
            tool_servers: Vec::new(),
            tool_use: ToolUse::Auto,
            speculation: SpeculationMode::Auto,
            draft_tokens: 8,
            draft_model: None,
        }
    }
}

/// One invalid field, named as the UI names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// The largest context a conversation may ask for; larger than any model's
/// own, which is the real bound and checked when the model is known.
pub const MAX_CONTEXT: u32 = 1 << 20;

impl ConversationSettings {
    /// Settings as the UI or a client sends them, as JSON: a missing field
    /// takes its default, unknown fields are ignored, and every field of the
    /// wrong type or out of range (NaN and infinities arrive as `null`,
    /// whole numbers past `u32`) is named with the message `validate` gives.
    pub fn from_json(value: serde_json::Value) -> Result<Self, Vec<FieldError>> {
        let serde_json::Value::Object(fields) = value else {
            return Err(vec![FieldError { field: "settings".into(), message: "must be an object of settings".into() }]);
        };
        let serde_json::Value::Object(defaults) = serde_json::to_value(Self::default()).expect("settings serialise")
        else {
            unreachable!("settings serialise to an object")
        };
        // Each field is tried alone over the defaults, so one bad field
        // cannot hide another.
        let mut merged = defaults.clone();
        let mut errors = Vec::new();
        for (field, value) in fields {
            if !defaults.contains_key(&field) {
                continue;
            }
            let mut alone = defaults.clone();
            alone.insert(field.clone(), value.clone());
            if serde_json::from_value::<Self>(serde_json::Value::Object(alone)).is_ok() {
                merged.insert(field, value);
            } else {
                errors.push(FieldError { message: message(&field).into(), field });
            }
        }
        let settings: Self =
            serde_json::from_value(serde_json::Value::Object(merged)).expect("each field was checked alone");
        errors.extend(settings.validate());
        if errors.is_empty() {
            Ok(settings)
        } else {
            Err(errors)
        }
    }

    /// Every out-of-range field, each with a message fit to show beside it.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, field: &str| {
            if !ok {
                errors.push(FieldError { field: field.into(), message: message(field).into() });
            }
        };
        check(self.temperature.is_finite() && (0.0..=5.0).contains(&self.temperature), "temperature");
        check(self.top_k <= 100_000, "topK");
        check(self.top_p.is_finite() && self.top_p > 0.0 && self.top_p <= 1.0, "topP");
        check(self.min_p.is_finite() && (0.0..1.0).contains(&self.min_p), "minP");
        check(
            self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0 && self.repeat_penalty <= 10.0,
            "repeatPenalty",
        );
        check(self.penalty_window <= 1_000_000, "penaltyWindow");
        check((1..=1_000_000).contains(&self.max_new_tokens), "maxNewTokens");
        check(self.stop_strings.iter().all(|s| !s.is_empty()) && self.stop_strings.len() <= 16, "stopStrings");
        check(self.context_length == 0 || (16..=MAX_CONTEXT).contains(&self.context_length), "contextLength");
        check(self.system_prompt.len() <= 1 << 20, "systemPrompt");
        check((1..=MAX_DRAFT_TOKENS).contains(&self.draft_tokens), "draftTokens");
        let draft_model = self.draft_model.as_deref().map(str::trim);
        check(draft_model.is_none_or(|p| !p.is_empty() && p.len() <= 4096), "draftModel");
        check(self.speculation != SpeculationMode::Draft || draft_model.is_some(), "draftModel");
        let unique: std::collections::HashSet<&String> = self.tool_servers.iter().collect();
        check(
            self.tool_servers.len() <= MAX_TOOL_SERVERS
                && unique.len() == self.tool_servers.len()
                && self.tool_servers.iter().all(|n| !n.trim().is_empty() && n.len() <= 256),
            "toolServers",
        );
        errors
    }
}

/// What a field must be, as shown beside it.
fn message(field: &str) -> &'static str {
    match field {
        "systemPrompt" => "must be text of at most 1 MiB",
        "temperature" => "must be between 0 and 5",
        "topK" => "must be a whole number between 0 (off) and 100000",
        "topP" => "must be above 0 and at most 1",
        "draftTokens" => "must be a whole number between 1 and 32",
        "speculation" => "must be off, auto, ngram, draft or mtp",
        "draftModel" => "must be the path of a model file when drafting with a draft model",
        "minP" => "must be at least 0 and below 1",
        "repeatPenalty" => "must be above 0 and at most 10 (1 is off)",
        "penaltyWindow" => "must be a whole number between 0 and 1000000",
        "maxNewTokens" => "must be a whole number between 1 and 1000000",
        "seed" => "must be empty (random) or a whole number between 0 and 4294967295",
        "stopStrings" => "must be at most 16 stop strings, none of them empty",
        "contextLength" => "must be 0 (the model's) or a whole number between 16 and 1048576",
        "overflow" => "must be stopAtLimit, truncateMiddle or rollingWindow",
        "thinking" => "must be true or false",
        "reasoningEffort" => "must be low, medium or high",
        "toolServers" => "must be at most 32 server names, each once, none empty",
        "toolUse" => "must be auto, always or never",
        _ => "is not valid",
    }
}

/// A named set of settings the user saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct Preset {
    pub name: String,
    pub settings: ConversationSettings,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert!(ConversationSettings::default().validate().is_empty());
    }

    #[test]
    fn each_bad_field_is_named() {
        let s = ConversationSettings {
            temperature: -1.0,
            top_p: 0.0,
            min_p: 1.5,
            repeat_penalty: f32::NAN,
            max_new_tokens: 0,
            stop_strings: vec![String::new()],
            context_length: 3,
            draft_tokens: 33,
            ..Default::default()
        };
        let fields: Vec<_> = s.validate().into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "temperature",
                "topP",
                "minP",
                "repeatPenalty",
                "maxNewTokens",
                "stopStrings",
                "contextLength",
                "draftTokens"
            ]
        );
        // Drafting with a draft model needs one; a path, if given, is not blank.
        let draft = |speculation, draft_model: Option<&str>| {
            let s =
                ConversationSettings { speculation, draft_model: draft_model.map(Into::into), ..Default::default() };
            s.validate().into_iter().map(|e| e.field).collect::<Vec<_>>()
        };
        assert_eq!(draft(SpeculationMode::Draft, None), ["draftModel"]);
        assert_eq!(draft(SpeculationMode::Auto, Some("  ")), ["draftModel"]);
        assert!(draft(SpeculationMode::Draft, Some("/models/small.gguf")).is_empty());
        assert!(draft(SpeculationMode::Off, None).is_empty());
    }

    #[test]
    fn json_of_the_wrong_type_or_range_names_each_field() {
        use serde_json::json;
        let errors = ConversationSettings::from_json(json!({
            "temperature": null,          // NaN from the UI
            "topK": 10_000_000_000u64,    // past u32
            "topP": -0.5,
            "penaltyWindow": -1,
            "maxNewTokens": 1.5,
            "seed": 4_294_967_296u64,
            "stopStrings": "stop",
            "contextLength": 1e300,
            "overflow": "sideways",
            "systemPrompt": 7,
            "speculation": "fast",
            "draftTokens": 0,
            "minP": 0.1,
            "unknown": true,
        }))
        .unwrap_err();
        let mut fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "contextLength",
                "draftTokens",
                "maxNewTokens",
                "overflow",
                "penaltyWindow",
                "seed",
                "speculation",
                "stopStrings",
                "systemPrompt",
                "temperature",
                "topK",
                "topP"
            ]
        );
        assert!(
            errors.iter().all(|e| !e.message.contains("invalid type") && !e.message.contains("expected")),
            "{errors:?}"
        );

        let ok =
            ConversationSettings::from_json(json!({"temperature": 0, "seed": 4_294_967_295u64, "minP": 0.1})).unwrap();
        assert_eq!(
            ok,
            ConversationSettings { temperature: 0.0, seed: Some(u32::MAX), min_p: 0.1, ..Default::default() }
        );
        assert_eq!(ConversationSettings::from_json(json!([1])).unwrap_err()[0].field, "settings");
    }

    #[test]
    fn missing_fields_take_defaults() {
        let s: ConversationSettings = serde_json::from_str(r#"{"temperature": 0}"#).unwrap();
        assert_eq!(s, ConversationSettings { temperature: 0.0, ..Default::default() });
    }
}
