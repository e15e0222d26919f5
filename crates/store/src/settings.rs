//! Per-conversation generation settings, their validation, and named presets.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// Everything the user can set for a conversation's replies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(default, rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
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
}

/// What happens when a conversation no longer fits the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
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
        }
    }
}

/// One invalid field, named as the UI names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export, export_to = "bindings/")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// The largest context a conversation may ask for; larger than any model's
/// own, which is the real bound and checked when the model is known.
pub const MAX_CONTEXT: u32 = 1 << 20;

impl ConversationSettings {
    /// Every out-of-range field, each with a message fit to show beside it.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, field: &str, message: &str| {
            if !ok {
                errors.push(FieldError { field: field.into(), message: message.into() });
            }
        };
        check(self.temperature.is_finite() && (0.0..=5.0).contains(&self.temperature), "temperature", "must be between 0 and 5");
        check(self.top_k <= 100_000, "topK", "must be between 0 (off) and 100000");
        check(self.top_p.is_finite() && self.top_p > 0.0 && self.top_p <= 1.0, "topP", "must be above 0 and at most 1");
        check(self.min_p.is_finite() && (0.0..1.0).contains(&self.min_p), "minP", "must be at least 0 and below 1");
        check(
            self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0 && self.repeat_penalty <= 10.0,
            "repeatPenalty",
            "must be above 0 and at most 10 (1 is off)",
        );
        check(self.penalty_window <= 1_000_000, "penaltyWindow", "must be between 0 and 1000000");
        check((1..=1_000_000).contains(&self.max_new_tokens), "maxNewTokens", "must be between 1 and 1000000");
        check(self.stop_strings.iter().all(|s| !s.is_empty()), "stopStrings", "a stop string cannot be empty");
        check(self.stop_strings.len() <= 16, "stopStrings", "at most 16 stop strings");
        check(self.context_length == 0 || (16..=MAX_CONTEXT).contains(&self.context_length), "contextLength", "must be 0 (the model's) or between 16 and 1048576");
        check(self.system_prompt.len() <= 1 << 20, "systemPrompt", "is longer than 1 MiB");
        errors
    }
}

/// A named set of settings the user saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export, export_to = "bindings/")]
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
            ..Default::default()
        };
        let fields: Vec<_> = s.validate().into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["temperature", "topP", "minP", "repeatPenalty", "maxNewTokens", "stopStrings", "contextLength"]);
    }

    #[test]
    fn missing_fields_take_defaults() {
        let s: ConversationSettings = serde_json::from_str(r#"{"temperature": 0}"#).unwrap();
        assert_eq!(s, ConversationSettings { temperature: 0.0, ..Default::default() });
    }
}
