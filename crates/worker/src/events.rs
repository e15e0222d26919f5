//! What the worker tells the UI: per-reply generation events, sent over a
//! `tauri::ipc::Channel`, and the model's status, broadcast as an app event.

use hearth_store::{ReplyStats, TokenChoice, ToolCallRecord};
use serde::Serialize;

use crate::error::AppError;

/// One reply's progress, in order: `queued`* `started` `prompt` `prefill`*
/// `token`* then `finished` or `error` (a remote reply sends no `prompt`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(tag = "event", content = "data", rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
#[allow(
    clippy::large_enum_variant,
    reason = "sent a few times a second and serialised at once: boxing the large variants would save nothing worth an allocation"
)]
pub enum GenerationEvent {
    /// Waiting behind other conversations; 1 means next.
    #[serde(rename_all = "camelCase")]
    Queued { position: u32 },
    #[serde(rename_all = "camelCase")]
    Started { reply_id: i64 },
    /// The prompt, once fitted to the context: `tokens` in all, of which
    /// `cached` were already in the conversation's cache (the rest are read
    /// now). An API reports it before the first token, as its usage.
    #[serde(rename_all = "camelCase")]
    Prompt { tokens: u32, cached: u32 },
    /// Reading the prompt: `done` of the `total` tokens not already in the
    /// conversation's cache; sent before each chunk and at the end.
    #[serde(rename_all = "camelCase")]
    Prefill { done: u32, total: u32 },
    /// Text and the tokens that produced it since the last `tokens` event.
    /// Tokens are sent together at most every `TOKEN_BATCH` (the first at
    /// once), so a fast model does not cost the UI one message per token.
    /// `text` may be shorter than the ids suggest while a multi-byte
    /// character or a possible stop string is held back, and `ids` may be
    /// empty when a stop releases held-back text.
    /// `variant`: which of the replies written together (0 unless "Generate N").
    /// `choices`: each token's log-probability and alternatives, for an API
    /// request that asked for them (the app reads them from the database).
    #[serde(rename_all = "camelCase")]
    Tokens {
        text: String,
        ids: Vec<u32>,
        variant: u32,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        #[cfg_attr(feature = "ipc", ts(optional, as = "Option<Vec<TokenChoice>>"))]
        choices: Vec<TokenChoice>,
    },
    /// `stats`: the reply's (variant 0's); `others`: the other variants'.
    #[serde(rename_all = "camelCase")]
    Finished {
        reason: String,
        stats: ReplyStats,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        #[cfg_attr(feature = "ipc", ts(optional, as = "Option<Vec<ReplyStats>>"))]
        others: Vec<ReplyStats>,
        /// The calls the reply made (its `reason` is then `tool_calls`),
        /// pending: the app runs them and replies again with their results.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        #[cfg_attr(feature = "ipc", ts(optional, as = "Option<Vec<ToolCallRecord>>"))]
        tool_calls: Vec<ToolCallRecord>,
    },
    /// One of reply `reply_id`'s tool calls changed: it waits for the
    /// user's approval, runs, or ended (its `status` says how). The calls
    /// come after a `finished` whose reason is `tool_calls`; then the reply
    /// that reads their results follows (`queued`, `started` with its id,
    /// …), or, stopped, a `finished` with reason `cancelled`.
    #[serde(rename_all = "camelCase")]
    ToolCall { reply_id: i64, position: u32, call: ToolCallRecord, awaiting_approval: bool },
    /// Some of the chat's MCP servers could not be started: the reply
    /// runs without their tools. Each error names its server.
    #[serde(rename_all = "camelCase")]
    ToolsUnavailable { errors: Vec<String> },
    /// A replay ended (it ends with this instead of `finished`).
    #[serde(rename_all = "camelCase")]
    Replayed { outcome: ReplayOutcome },
    #[serde(rename_all = "camelCase")]
    Error { error: AppError },
}

/// How a replay of a recorded reply went.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct ReplayOutcome {
    /// Every recorded token came again, in order, and nothing more.
    pub matched: bool,
    /// Tokens the replay produced before it stopped.
    pub compared: u32,
    /// Tokens the reply recorded.
    pub recorded: u32,
    /// Index of the first token that differed, if one did.
    pub first_difference: Option<u32>,
    /// Prompt positions the replay had to run (the rest came from the cache).
    pub processed_tokens: u32,
    /// Stopped by the user before the end.
    pub stopped: bool,
    /// What differs from the recorded run and could explain a mismatch
    /// (another engine build or device).
    pub notes: Vec<String>,
}

/// How the loaded model's chat template marks thinking
/// (`hearth_engine::ReasoningFormat`), for the UI to fold it away.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct ReasoningFormat {
    pub open: String,
    pub close: String,
    /// The template variable that turns thinking on or off, where it reads one.
    pub switch: Option<String>,
    /// The generation prompt opens the block, so replies carry only the close tag.
    pub opened_by_prompt: bool,
    /// Harmony (gpt-oss): the answer is what follows this header, and
    /// `open`/`close` mark each analysis message.
    pub answer_start: Option<String>,
    /// The template variable for the reasoning effort (low, medium, high),
    /// where it reads one: the settings then offer it.
    pub effort: Option<String>,
}

impl From<&hearth_engine::ReasoningFormat> for ReasoningFormat {
    fn from(f: &hearth_engine::ReasoningFormat) -> Self {
        Self {
            open: f.open.clone(),
            close: f.close.clone(),
            switch: f.switch.clone(),
            opened_by_prompt: f.opened_by_prompt,
            answer_start: f.answer_start.clone(),
            effort: f.effort.clone(),
        }
    }
}

/// The app's model, as the UI shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(tag = "state", rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum ModelStatus {
    /// Nothing loaded and nothing to load: the first-run screen.
    #[default]
    None,
    #[serde(rename_all = "camelCase")]
    Loading { path: String },
    #[serde(rename_all = "camelCase")]
    /// `device`: where it runs (`cpu`, `cuda`, `metal`).
    /// `reasoning`: how the model's template marks thinking, if it does.
    Ready {
        path: String,
        name: String,
        architecture: String,
        context_length: u32,
        device: String,
        reasoning: Option<ReasoningFormat>,
    },
    #[serde(rename_all = "camelCase")]
    Failed { path: String, error: AppError },
}

/// The default model's download, as it goes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(tag = "event", content = "data", rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum DownloadEvent {
    #[serde(rename_all = "camelCase")]
    Progress { downloaded: u64, total: Option<u64> },
    /// Downloaded and checked; unpacking the model from its archive.
    Extracting,
    #[serde(rename_all = "camelCase")]
    Done { path: String },
    #[serde(rename_all = "camelCase")]
    Failed { error: AppError },
}
