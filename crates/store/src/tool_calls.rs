//! The tool calls a reply made: each call's name and arguments as the
//! model wrote them, the server and tool it went to, how it ended and the
//! text it gave back (what the model read next). A reply's calls hang off
//! that reply; the reply that reads their results is its child. Also the
//! tools a conversation allowed for good.

use rusqlite::params;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::messages::enum_text;
use crate::store::Store;

/// How a call ended, or that it has not yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum ToolCallStatus {
    /// Waiting for approval, or running.
    Pending,
    /// The tool answered.
    Ok,
    /// The tool answered with an error of its own (`isError`).
    Error,
    /// The user did not allow it.
    Denied,
    /// Stopped by the user, or by Hearth closing.
    Stopped,
    /// It could not run: no such tool, the server failed or timed out.
    Failed,
}

/// One call as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct ToolCallRecord {
    /// The id the model's next prompt answers it by.
    pub call_id: String,
    /// The tool's name as the model called it.
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
    /// Where it went, once known.
    pub server: Option<String>,
    pub tool: Option<String>,
    pub status: ToolCallStatus,
    /// What the model reads back: the result, or why there is none.
    pub result: String,
    pub elapsed_ms: Option<u32>,
    /// The result was cut at the size limit.
    pub truncated: bool,
}

impl ToolCallRecord {
    /// A call the model just made, not yet run.
    pub fn pending(call_id: String, name: String, arguments: String) -> Self {
        Self {
            call_id,
            name,
            arguments,
            server: None,
            tool: None,
            status: ToolCallStatus::Pending,
            result: String::new(),
            elapsed_ms: None,
            truncated: false,
        }
    }
}

/// Writes `calls` as reply `message_id`'s, in order, inside the caller's
/// transaction.
pub(crate) fn insert_tool_calls(conn: &rusqlite::Connection, message_id: i64, calls: &[ToolCallRecord]) -> Result<()> {
    for (i, c) in calls.iter().enumerate() {
        conn.execute(
            "INSERT INTO tool_calls(message_id, position, call_id, name, arguments, server, tool, status, result, elapsed_ms, truncated)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                message_id,
                i as i64,
                c.call_id,
                c.name,
                c.arguments,
                c.server,
                c.tool,
                enum_text(&c.status),
                c.result,
                c.elapsed_ms,
                c.truncated
            ],
        )?;
    }
    Ok(())
}

impl Store {
    /// Records reply `message_id`'s calls, replacing any it had.
    pub fn set_tool_calls(&self, message_id: i64, calls: &[ToolCallRecord]) -> Result<()> {
        let tx = self.conn.unchecked_transaction()?;
        tx.execute("DELETE FROM tool_calls WHERE message_id = ?1", [message_id])?;
        insert_tool_calls(&tx, message_id, calls)?;
        tx.commit()?;
        Ok(())
    }

    /// Rewrites call `position` of `message_id` (where it went, how it ended).
    pub fn update_tool_call(&self, message_id: i64, position: usize, call: &ToolCallRecord) -> Result<()> {
        let n = self.conn.execute(
            "UPDATE tool_calls SET server = ?1, tool = ?2, status = ?3, result = ?4, elapsed_ms = ?5, truncated = ?6
             WHERE message_id = ?7 AND position = ?8",
            params![
                call.server,
                call.tool,
                enum_text(&call.status),
                call.result,
                call.elapsed_ms,
                call.truncated,
                message_id,
                position as i64
            ],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound { what: "tool call of message", id: message_id });
        }
        Ok(())
    }

    /// Reply `message_id`'s calls, in the order it made them.
    pub fn tool_calls(&self, message_id: i64) -> Result<Vec<ToolCallRecord>> {
        let mut stmt = self.conn.prepare(
            "SELECT call_id, name, arguments, server, tool, status, result, elapsed_ms, truncated
             FROM tool_calls WHERE message_id = ?1 ORDER BY position",
        )?;
        let rows = stmt.query_map([message_id], |r| {
            let status: String = r.get(5)?;
            Ok(ToolCallRecord {
                call_id: r.get(0)?,
                name: r.get(1)?,
                arguments: r.get(2)?,
                server: r.get(3)?,
                tool: r.get(4)?,
                status: serde_json::from_value(serde_json::Value::String(status)).unwrap_or(ToolCallStatus::Failed),
                result: r.get(6)?,
                elapsed_ms: r.get(7)?,
                truncated: r.get(8)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Allows `server`'s `tool` in this conversation without asking again.
    pub fn allow_tool(&self, conversation_id: i64, server: &str, tool: &str) -> Result<()> {
        self.conn.execute(
            "INSERT OR IGNORE INTO tool_approvals(conversation_id, server, tool) VALUES (?1, ?2, ?3)",
            params![conversation_id, server, tool],
        )?;
        Ok(())
    }

    pub fn tool_allowed(&self, conversation_id: i64, server: &str, tool: &str) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM tool_approvals WHERE conversation_id = ?1 AND server = ?2 AND tool = ?3)",
            params![conversation_id, server, tool],
            |r| r.get(0),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MessageStatus, Role};

    #[test]
    fn calls_are_kept_in_order_updated_and_stopped_by_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.db");
        let store = Store::open(&path).unwrap();
        let c = store.create_conversation().unwrap();
        let u = store.add_message(c.id, None, Role::User, "time?", MessageStatus::Complete).unwrap();
        let r = store.add_message(c.id, Some(u.id), Role::Assistant, "", MessageStatus::Complete).unwrap();
        let calls = vec![
            ToolCallRecord::pending("call_0".into(), "get_time".into(), r#"{"tz":"UTC"}"#.into()),
            ToolCallRecord::pending("call_1".into(), "echo".into(), "{}".into()),
        ];
        store.set_tool_calls(r.id, &calls).unwrap();
        let mut done = calls[0].clone();
        done.server = Some("time".into());
        done.tool = Some("get_time".into());
        done.status = ToolCallStatus::Ok;
        done.result = "<b>12:00</b>".into();
        done.elapsed_ms = Some(15);
        store.update_tool_call(r.id, 0, &done).unwrap();
        assert_eq!(store.tool_calls(r.id).unwrap(), vec![done.clone(), calls[1].clone()]);
        assert!(store.update_tool_call(r.id, 5, &done).is_err());

        assert!(!store.tool_allowed(c.id, "time", "get_time").unwrap());
        store.allow_tool(c.id, "time", "get_time").unwrap();
        store.allow_tool(c.id, "time", "get_time").unwrap();
        assert!(store.tool_allowed(c.id, "time", "get_time").unwrap());
        assert!(!store.tool_allowed(c.id, "time", "other").unwrap());

        drop(store);
        let store = Store::open(&path).unwrap();
        let after = store.tool_calls(r.id).unwrap();
        assert_eq!(after[0], done);
        assert_eq!(after[1].status, ToolCallStatus::Stopped, "a call pending at the exit was stopped by it");
        assert_eq!(after[1].result, "Hearth closed before the call ended.");
    }
}
