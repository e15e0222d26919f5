//! Conversations: titles, soft deletion (so a delete can be undone), search,
//! and each one's settings; presets and defaults live here too, as they are
//! what a new conversation's settings start from.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::settings::{ConversationSettings, Preset};
use crate::store::{now_ms, Store};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct Conversation {
    pub id: i64,
    /// Empty until the first user message names it.
    pub title: String,
    pub created_at: i64,
    pub updated_at: i64,
    /// The local model file that wrote its last local reply, if any.
    pub model_path: Option<String>,
}

/// A conversation that matches a search, with where it matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct SearchHit {
    pub conversation: Conversation,
    /// Text around the first match in a message, if the title did not match.
    pub snippet: Option<String>,
}

const TITLE_CHARS: usize = 60;

/// A title from the first user message: its first line, cut at a word.
pub(crate) fn title_from(content: &str) -> String {
    let line = content.trim().lines().next().unwrap_or("").trim();
    if line.chars().count() <= TITLE_CHARS {
        return line.to_string();
    }
    let cut: String = line.chars().take(TITLE_CHARS).collect();
    let cut = match cut.rfind(' ') {
        Some(i) if i > TITLE_CHARS / 2 => &cut[..i],
        _ => &cut,
    };
    format!("{}…", cut.trim_end())
}

fn like_pattern(query: &str) -> String {
    let escaped = query.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    format!("%{escaped}%")
}

fn conversation_from_row(r: &rusqlite::Row) -> rusqlite::Result<Conversation> {
    Ok(Conversation {
        id: r.get(0)?,
        title: r.get(1)?,
        created_at: r.get(2)?,
        updated_at: r.get(3)?,
        model_path: r.get(4)?,
    })
}

const DEFAULTS_KEY: &str = "default_settings";

impl Store {
    /// A new, empty conversation with the default settings.
    pub fn create_conversation(&self) -> Result<Conversation> {
        let settings = serde_json::to_string(&self.default_settings()?)?;
        let now = now_ms();
        self.conn.execute(
            "INSERT INTO conversations(title, created_at, updated_at, settings) VALUES ('', ?1, ?1, ?2)",
            params![now, settings],
        )?;
        self.conversation(self.conn.last_insert_rowid())
    }

    pub fn conversation(&self, id: i64) -> Result<Conversation> {
        self.conn
            .query_row(
                "SELECT id, title, created_at, updated_at, model_path FROM conversations WHERE id = ?1 AND deleted_at IS NULL",
                [id],
                conversation_from_row,
            )
            .optional()?
            .ok_or(StoreError::NotFound { what: "conversation", id })
    }

    /// Conversations not deleted, most recently used first.
    pub fn conversations(&self) -> Result<Vec<Conversation>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, title, created_at, updated_at, model_path FROM conversations WHERE deleted_at IS NULL ORDER BY updated_at DESC, id DESC",
        )?;
        let rows = stmt.query_map([], conversation_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn rename_conversation(&self, id: i64, title: &str) -> Result<()> {
        let title = title.trim();
        if title.is_empty() {
            return Err(StoreError::Invalid("a title cannot be empty".into()));
        }
        self.expect_one(
            self.conn.execute(
                "UPDATE conversations SET title = ?1 WHERE id = ?2 AND deleted_at IS NULL",
                params![title, id],
            )?,
            id,
        )
    }

    /// Hides a conversation; `restore_conversation` brings it back until
    /// `purge_deleted` removes it for good.
    pub fn delete_conversation(&self, id: i64) -> Result<()> {
        self.expect_one(
            self.conn.execute(
                "UPDATE conversations SET deleted_at = ?1 WHERE id = ?2 AND deleted_at IS NULL",
                params![now_ms(), id],
            )?,
            id,
        )
    }

    pub fn restore_conversation(&self, id: i64) -> Result<()> {
        self.expect_one(self.conn.execute("UPDATE conversations SET deleted_at = NULL WHERE id = ?1", [id])?, id)
    }

    /// Removes conversations deleted before `before_ms`, with their messages.
    pub fn purge_deleted(&self, before_ms: i64) -> Result<usize> {
        Ok(self
            .conn
            .execute("DELETE FROM conversations WHERE deleted_at IS NOT NULL AND deleted_at < ?1", [before_ms])?)
    }

    fn expect_one(&self, changed: usize, id: i64) -> Result<()> {
        if changed == 0 {
            return Err(StoreError::NotFound { what: "conversation", id });
        }
        Ok(())
    }

    /// Conversations whose title or any message contains `query`, case-insensitively.
    pub fn search(&self, query: &str) -> Result<Vec<SearchHit>> {
        let query = query.trim();
        if query.is_empty() {
            return Ok(self
                .conversations()?
                .into_iter()
                .map(|conversation| SearchHit { conversation, snippet: None })
                .collect());
        }
        let pattern = like_pattern(query);
        let mut stmt = self.conn.prepare(
            "SELECT c.id, c.title, c.created_at, c.updated_at, c.model_path,
                    CASE WHEN c.title LIKE ?1 ESCAPE '\\' THEN NULL ELSE
                        (SELECT m.content FROM messages m WHERE m.conversation_id = c.id AND m.content LIKE ?1 ESCAPE '\\' ORDER BY m.id LIMIT 1)
                    END
             FROM conversations c
             WHERE c.deleted_at IS NULL AND (c.title LIKE ?1 ESCAPE '\\'
                   OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.content LIKE ?1 ESCAPE '\\'))
             ORDER BY c.updated_at DESC, c.id DESC",
        )?;
        let rows = stmt.query_map([&pattern], |r| Ok((conversation_from_row(r)?, r.get::<_, Option<String>>(5)?)))?;
        let mut hits = Vec::new();
        for row in rows {
            let (conversation, content) = row?;
            hits.push(SearchHit { conversation, snippet: content.map(|c| snippet(&c, query)) });
        }
        Ok(hits)
    }

    /// Remembers the local model file that replied in a conversation (its
    /// `updated_at` is left alone: this is not the user's activity).
    pub fn set_conversation_model(&self, id: i64, model_path: &str) -> Result<()> {
        self.expect_one(
            self.conn.execute("UPDATE conversations SET model_path = ?1 WHERE id = ?2", params![model_path, id])?,
            id,
        )
    }

    /// The local model file that last replied in a conversation.
    pub fn conversation_model(&self, id: i64) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT model_path FROM conversations WHERE id = ?1", [id], |r| r.get(0))
            .optional()?
            .ok_or(StoreError::NotFound { what: "conversation", id })
    }

    pub fn conversation_settings(&self, id: i64) -> Result<ConversationSettings> {
        let json: String = self
            .conn
            .query_row("SELECT settings FROM conversations WHERE id = ?1", [id], |r| r.get(0))
            .optional()?
            .ok_or(StoreError::NotFound { what: "conversation", id })?;
        Ok(serde_json::from_str(&json)?)
    }

    pub fn set_conversation_settings(&self, id: i64, settings: &ConversationSettings) -> Result<()> {
        let json = serde_json::to_string(settings)?;
        self.expect_one(
            self.conn.execute("UPDATE conversations SET settings = ?1 WHERE id = ?2", params![json, id])?,
            id,
        )
    }

    /// What new conversations start with.
    pub fn default_settings(&self) -> Result<ConversationSettings> {
        match self.app_setting(DEFAULTS_KEY)? {
            Some(json) => Ok(serde_json::from_str(&json).unwrap_or_default()),
            None => Ok(ConversationSettings::default()),
        }
    }

    pub fn set_default_settings(&self, settings: &ConversationSettings) -> Result<()> {
        self.set_app_setting(DEFAULTS_KEY, &serde_json::to_string(settings)?)
    }

    pub fn presets(&self) -> Result<Vec<Preset>> {
        let mut stmt = self.conn.prepare("SELECT name, settings FROM presets ORDER BY name COLLATE NOCASE")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let mut presets = Vec::new();
        for row in rows {
            let (name, json) = row?;
            presets.push(Preset { name, settings: serde_json::from_str(&json)? });
        }
        Ok(presets)
    }

    pub fn save_preset(&self, preset: &Preset) -> Result<()> {
        if preset.name.trim().is_empty() {
            return Err(StoreError::Invalid("a preset needs a name".into()));
        }
        self.conn.execute(
            "INSERT INTO presets(name, settings) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET settings = excluded.settings",
            params![preset.name.trim(), serde_json::to_string(&preset.settings)?],
        )?;
        Ok(())
    }

    pub fn delete_preset(&self, name: &str) -> Result<()> {
        self.conn.execute("DELETE FROM presets WHERE name = ?1", [name])?;
        Ok(())
    }
}

/// Up to ~80 characters around the first case-insensitive match.
fn snippet(content: &str, query: &str) -> String {
    let lower = content.to_lowercase();
    let at = lower.find(&query.to_lowercase()).unwrap_or(0);
    // Lowercasing can change byte lengths; map back by character count.
    let char_at = lower[..at].chars().count();
    let chars: Vec<char> = content.chars().collect();
    let start = char_at.saturating_sub(30);
    let end = (char_at + query.chars().count() + 50).min(chars.len());
    let mut s: String = chars[start..end].iter().collect::<String>().replace('\n', " ");
    if start > 0 {
        s.insert(0, '…');
    }
    if end < chars.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_cut_at_a_word() {
        assert_eq!(title_from("  Hello there\nsecond line"), "Hello there");
        let long = "word ".repeat(30);
        let t = title_from(&long);
        assert!(t.ends_with('…') && t.chars().count() <= TITLE_CHARS + 1, "{t}");
        assert!(!t.contains("wor…"));
    }

    #[test]
    fn snippets_surround_the_match() {
        let text = format!("{}needle{}", "a".repeat(100), "b".repeat(100));
        let s = snippet(&text, "NEEDLE");
        assert!(s.starts_with('…') && s.ends_with('…') && s.contains("needle"));
    }
}
