//! Schema migrations, applied in order; `PRAGMA user_version` records how
//! many have run. Never edit a released migration: append a new one.

use rusqlite::Connection;

use crate::error::{Result, StoreError};

pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    r#"
    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        deleted_at INTEGER,
        active_leaf INTEGER,
        settings TEXT NOT NULL
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('complete', 'streaming', 'interrupted', 'error')),
        stats TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX messages_by_conversation ON messages(conversation_id, parent_id);
    CREATE TABLE presets (
        name TEXT PRIMARY KEY,
        settings TEXT NOT NULL
    );
    CREATE TABLE models (
        path TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        last_opened_at INTEGER NOT NULL
    );
    CREATE TABLE app_settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    "#,
    // 2: whole-file hashes of model files, valid while size and time match.
    r#"
    CREATE TABLE model_hashes (
        path TEXT PRIMARY KEY,
        size_bytes INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        sha256 TEXT NOT NULL
    );
    "#,
    // 3: each reply's tokens with their log-probabilities and alternatives.
    r#"
    CREATE TABLE token_alternatives (
        message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
        data BLOB NOT NULL
    );
    "#,
    // 4: OpenAI-compatible endpoints, and which one (and which of its
    // models) a conversation runs on; NULL is the local model.
    r#"
    CREATE TABLE endpoints (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        base_url TEXT NOT NULL,
        key_storage TEXT NOT NULL CHECK (key_storage IN ('none', 'keychain', 'session', 'database')),
        api_key TEXT,
        created_at INTEGER NOT NULL
    );
    ALTER TABLE conversations ADD COLUMN endpoint_id INTEGER REFERENCES endpoints(id) ON DELETE SET NULL;
    ALTER TABLE conversations ADD COLUMN remote_model TEXT;
    "#,
    // 5: the local model file a conversation last replied with; NULL until
    // its first local reply.
    r#"
    ALTER TABLE conversations ADD COLUMN model_path TEXT;
    "#,
    // 6: the MCP servers the user added: a name, and how to reach the
    // server (hearth-mcp's `Transport` as JSON), in the order added.
    r#"
    CREATE TABLE mcp_servers (
        name TEXT PRIMARY KEY,
        transport TEXT NOT NULL,
        position INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    "#,
    // 7: the tool calls a reply made, in order, each with where it went,
    // how it ended and what it gave back; and the tools a conversation
    // allowed for good ("always in this chat").
    r#"
    CREATE TABLE tool_calls (
        message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        call_id TEXT NOT NULL,
        name TEXT NOT NULL,
        arguments TEXT NOT NULL,
        server TEXT,
        tool TEXT,
        status TEXT NOT NULL CHECK (status IN ('pending', 'ok', 'error', 'denied', 'stopped', 'failed')),
        result TEXT NOT NULL DEFAULT '',
        elapsed_ms INTEGER,
        truncated INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (message_id, position)
    );
    CREATE TABLE tool_approvals (
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        server TEXT NOT NULL,
        tool TEXT NOT NULL,
        PRIMARY KEY (conversation_id, server, tool)
    );
    "#,
    // Where a model came from when Hearth did not open it from a file the
    // user picked: another app's folder, or a download from the Hub.
    r#"
    ALTER TABLE models ADD COLUMN source TEXT;
    "#,
];

pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database up to `target` migrations (normally all of them).
pub(crate) fn migrate(conn: &mut Connection, target: i64) -> Result<()> {
    let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew { found, known: SCHEMA_VERSION });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize).take((target - found).max(0) as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}
