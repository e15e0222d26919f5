//! Messages as a tree: each has a parent, so an edit or a regeneration is a
//! sibling of what it replaces, and the conversation's active leaf picks
//! which branch is shown.

use std::collections::HashMap;

use rusqlite::{params, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::store::{now_ms, Store};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum Role {
    System,
    User,
    Assistant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum MessageStatus {
    Complete,
    /// Being written now, or the app died while it was.
    Streaming,
    /// Stopped by the user or by a crash; can be continued.
    Interrupted,
    Error,
}

/// How a reply was produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(default, rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct ReplyStats {
    /// Tokens in the whole prompt, history included.
    pub prompt_tokens: u32,
    /// Prompt tokens run through the model this turn; the rest came from the cache.
    pub processed_tokens: u32,
    pub generated_tokens: u32,
    pub ttft_ms: f64,
    pub tokens_per_s: f64,
    /// end_token, max_tokens, cache_full, stop_string, cancelled, interrupted or error.
    pub finish_reason: String,
    /// The stop string that ended the reply, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ipc", ts(optional))]
    pub stop_string: Option<String>,
    pub seed: Option<u32>,
    pub temperature: Option<f32>,
    /// Why the reply failed, in words, when it did.
    pub error: Option<String>,
    /// Earlier messages the overflow policy left out of this turn's prompt.
    pub dropped_messages: u32,
    /// What produced the reply, to run it again and compare token by token.
    pub replay: Option<ReplayRecord>,
    /// Tokens of the reply's thinking block, its close tag included, when
    /// the model thought and the block closed.
    pub thinking_tokens: Option<u32>,
    /// From the first token to the one that closed the thinking block.
    pub thinking_ms: Option<f64>,
    /// What speculative decoding drafted for the reply, where it was on.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ipc", ts(optional))]
    pub drafts: Option<DraftStats>,
}

/// A reply's drafts: how it drafted, and how many drafted tokens its verify
/// passes scored and took (each taken one saved a pass).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(default, rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct DraftStats {
    pub mode: crate::SpeculationMode,
    /// The most drafted tokens a pass could check.
    pub draft_tokens: u32,
    pub drafted: u32,
    pub accepted: u32,
}

/// Everything a reply was computed from, and the tokens it gave.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(default, rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct ReplayRecord {
    /// SHA-256 of the whole model file; `None` if it was still being hashed.
    pub model_sha256: Option<String>,
    pub model_path: String,
    /// The engine's build id: it changes whenever kernels or numerics do.
    pub engine_build: String,
    pub device: String,
    /// SHA-256 of the prompt's token ids, each as 4 little-endian bytes.
    pub prompt_sha256: String,
    pub prompt_tokens: u32,
    /// The forward passes that computed the prompt's cache, each
    /// `[rows, kept, count]` (see `hearth_engine::Passes`): a replay runs
    /// them again, so its logits are the recorded ones from any cache.
    pub passes: Vec<[u32; 3]>,
    /// The context the conversation ran with.
    pub context_length: u32,
    /// Bytes of the reply that were already written when this run
    /// continued it (0 for a fresh reply); they end the prompt.
    pub prefix_bytes: u32,
    /// The token ids of that prefix when the run continued from chosen
    /// tokens ("continue from here with …") rather than from text.
    pub prefix_ids: Vec<u32>,
    /// The sampler chain as it ran: the repeat penalty over the window,
    /// then top-k, top-p and min-p, then temperature (0 is greedy).
    pub temperature: f32,
    pub top_k: u32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub penalty_window: u32,
    /// The seed of the turn; variant `b` of "Generate N" sampled with
    /// `seed + b` (in 64 bits, as the sampler adds it).
    pub seed: u32,
    pub variant: u32,
    pub max_new_tokens: u32,
    pub stop_strings: Vec<String>,
    /// The generated token ids, in order.
    pub tokens: Vec<u32>,
}

/// A reply record as a file, for `hearth-cli replay`: the record and the
/// prompt's token ids it names by hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayExport {
    /// Always `hearth-replay`.
    pub format: String,
    pub version: u32,
    pub record: ReplayRecord,
    pub prompt_ids: Vec<u32>,
}

impl ReplayExport {
    pub const FORMAT: &'static str = "hearth-replay";
    pub const VERSION: u32 = 1;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct Message {
    pub id: i64,
    pub conversation_id: i64,
    pub parent_id: Option<i64>,
    pub role: Role,
    pub content: String,
    pub status: MessageStatus,
    pub stats: Option<ReplyStats>,
    pub created_at: i64,
}

/// A message on the shown branch, with its versions (itself included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct ThreadMessage {
    pub message: Message,
    /// Messages with the same parent, oldest first.
    pub version_ids: Vec<i64>,
    /// The tool calls this reply made, in order, with their results.
    pub tool_calls: Vec<crate::ToolCallRecord>,
}

const COLUMNS: &str = "id, conversation_id, parent_id, role, content, status, stats, created_at";

fn text_enum<T: serde::de::DeserializeOwned>(s: String) -> rusqlite::Result<T> {
    serde_json::from_value(serde_json::Value::String(s))
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e)))
}

pub(crate) fn enum_text<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => unreachable!("unit enums serialise to strings"),
    }
}

fn message_from_row(r: &Row) -> rusqlite::Result<Message> {
    let stats: Option<String> = r.get(6)?;
    Ok(Message {
        id: r.get(0)?,
        conversation_id: r.get(1)?,
        parent_id: r.get(2)?,
        role: text_enum(r.get(3)?)?,
        content: r.get(4)?,
        status: text_enum(r.get(5)?)?,
        // Stats are informational; unreadable ones are dropped, not fatal.
        stats: stats.and_then(|s| serde_json::from_str(&s).ok()),
        created_at: r.get(7)?,
    })
}

impl Store {
    /// Adds a message under `parent` and makes it the conversation's active
    /// leaf. The first user message names an untitled conversation.
    pub fn add_message(
        &self,
        conversation_id: i64,
        parent_id: Option<i64>,
        role: Role,
        content: &str,
        status: MessageStatus,
    ) -> Result<Message> {
        let now = now_ms();
        let tx = self.conn.unchecked_transaction()?;
        if let Some(p) = parent_id {
            let owner: Option<i64> =
                tx.query_row("SELECT conversation_id FROM messages WHERE id = ?1", [p], |r| r.get(0)).optional()?;
            if owner != Some(conversation_id) {
                return Err(StoreError::NotFound { what: "parent message", id: p });
            }
        }
        tx.execute(
            "INSERT INTO messages(conversation_id, parent_id, role, content, status, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![conversation_id, parent_id, enum_text(&role), content, enum_text(&status), now],
        )?;
        let id = tx.last_insert_rowid();
        let changed = tx.execute(
            "UPDATE conversations SET active_leaf = ?1, updated_at = ?2 WHERE id = ?3",
            params![id, now, conversation_id],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound { what: "conversation", id: conversation_id });
        }
        if role == Role::User {
            tx.execute(
                "UPDATE conversations SET title = ?1 WHERE id = ?2 AND title = ''",
                params![crate::conversations::title_from(content), conversation_id],
            )?;
        }
        tx.commit()?;
        self.message(id)
    }

    /// Rewrites a reply as it streams and when it ends.
    pub fn update_reply(
        &self,
        id: i64,
        content: &str,
        status: MessageStatus,
        stats: Option<&ReplyStats>,
    ) -> Result<()> {
        let stats = stats.map(serde_json::to_string).transpose()?;
        let n = self.conn.execute(
            "UPDATE messages SET content = ?1, status = ?2, stats = COALESCE(?3, stats) WHERE id = ?4",
            params![content, enum_text(&status), stats, id],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound { what: "message", id });
        }
        Ok(())
    }

    pub fn message(&self, id: i64) -> Result<Message> {
        self.conn
            .query_row(&format!("SELECT {COLUMNS} FROM messages WHERE id = ?1"), [id], message_from_row)
            .optional()?
            .ok_or(StoreError::NotFound { what: "message", id })
    }

    /// Every message of a conversation, every branch, oldest first (so
    /// parents before children).
    pub(crate) fn messages_of(&self, conversation_id: i64) -> Result<Vec<Message>> {
        let mut stmt =
            self.conn.prepare(&format!("SELECT {COLUMNS} FROM messages WHERE conversation_id = ?1 ORDER BY id"))?;
        let all = stmt.query_map([conversation_id], message_from_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(all)
    }

    /// The messages from the root down to `id`, inclusive.
    pub fn path_to(&self, id: i64) -> Result<Vec<Message>> {
        let mut stmt = self.conn.prepare(&format!(
            "WITH RECURSIVE up(id, depth) AS (
                 SELECT id, 0 FROM messages WHERE id = ?1
                 UNION ALL SELECT m.parent_id, up.depth + 1 FROM messages m JOIN up ON m.id = up.id WHERE m.parent_id IS NOT NULL
             )
             SELECT {COLUMNS} FROM messages JOIN up USING (id) ORDER BY up.depth DESC"
        ))?;
        let path: Vec<Message> = stmt.query_map([id], message_from_row)?.collect::<rusqlite::Result<_>>()?;
        if path.is_empty() {
            return Err(StoreError::NotFound { what: "message", id });
        }
        Ok(path)
    }

    /// The shown branch of a conversation, root first, with each message's versions.
    pub fn thread(&self, conversation_id: i64) -> Result<Vec<ThreadMessage>> {
        let leaf: Option<i64> = self
            .conn
            .query_row("SELECT active_leaf FROM conversations WHERE id = ?1", [conversation_id], |r| r.get(0))
            .optional()?
            .ok_or(StoreError::NotFound { what: "conversation", id: conversation_id })?;
        let Some(leaf) = leaf else { return Ok(Vec::new()) };
        let mut siblings: HashMap<Option<i64>, Vec<i64>> = HashMap::new();
        let mut stmt =
            self.conn.prepare("SELECT id, parent_id FROM messages WHERE conversation_id = ?1 ORDER BY id")?;
        for row in stmt.query_map([conversation_id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<i64>>(1)?)))? {
            let (id, parent) = row?;
            siblings.entry(parent).or_default().push(id);
        }
        self.path_to(leaf)?
            .into_iter()
            .map(|m| {
                let tool_calls = if m.role == Role::Assistant { self.tool_calls(m.id)? } else { Vec::new() };
                Ok(ThreadMessage {
                    version_ids: siblings.get(&m.parent_id).cloned().unwrap_or_default(),
                    message: m,
                    tool_calls,
                })
            })
            .collect()
    }

    /// Shows the branch through `message_id`, down its newest replies.
    pub fn select_version(&self, conversation_id: i64, message_id: i64) -> Result<()> {
        let owner = self.message(message_id)?.conversation_id;
        if owner != conversation_id {
            return Err(StoreError::NotFound { what: "message", id: message_id });
        }
        let mut leaf = message_id;
        loop {
            let child: Option<i64> =
                self.conn.query_row("SELECT MAX(id) FROM messages WHERE parent_id = ?1", [leaf], |r| r.get(0))?;
            match child {
                Some(c) => leaf = c,
                None => break,
            }
        }
        self.conn.execute("UPDATE conversations SET active_leaf = ?1 WHERE id = ?2", params![leaf, conversation_id])?;
        Ok(())
    }
}
