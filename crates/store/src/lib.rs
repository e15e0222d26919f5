//! Hearth's storage: conversations as message trees, their settings, presets
//! and the models seen, in one SQLite database in WAL mode.
//!
//! Every write is its own short transaction, so a crash (even SIGKILL in the
//! middle of a reply) loses at most the tokens since the last flush. Opening
//! the database marks replies that were still streaming as interrupted.

mod alternatives;
mod conversations;
mod endpoints;
mod error;
mod export;
mod mcp_servers;
mod messages;
mod migrations;
mod models;
mod settings;
mod store;
mod tool_calls;

pub use alternatives::{TokenChoice, TokenChoices, KEPT_ALTERNATIVES};
pub use conversations::{Conversation, SearchHit};
pub use endpoints::{Backend, Endpoint, KeyStorage};
pub use error::{Result, StoreError};
pub use export::{
    Backup, ConversationExport, ExportedMessage, Import, ImportReport, MAX_IMPORT_BYTES, MAX_IMPORT_MESSAGES,
};
pub use mcp_servers::StoredMcpServer;
pub use messages::{DraftStats, Message, MessageStatus, ReplayExport, ReplayRecord, ReplyStats, Role, ThreadMessage};
pub use migrations::SCHEMA_VERSION;
pub use models::RecentModel;
pub use settings::{
    ConversationSettings, FieldError, OverflowPolicy, Preset, ReasoningEffort, SpeculationMode, ToolUse,
    MAX_DRAFT_TOKENS,
};
pub use store::Store;
pub use tool_calls::{ToolCallRecord, ToolCallStatus};
