//! Models the user has opened, most recent first.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::store::{now_ms, Store};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct RecentModel {
    pub path: String,
    pub name: String,
    pub size_bytes: i64,
    pub last_opened_at: i64,
    /// Where it came from, when not from a file the user picked: the app
    /// whose folder it was found in (`Ollama`), or `Hugging Face`.
    pub source: Option<String>,
}

impl Store {
    /// Records that `path` was opened. A model added with a source keeps
    /// the name it was added under (`qwen3:8b`, not its blob's file name).
    pub fn record_model(&self, path: &str, name: &str, size_bytes: i64) -> Result<()> {
        self.conn.execute(
            "INSERT INTO models(path, name, size_bytes, last_opened_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(path) DO UPDATE SET
                 name = CASE WHEN models.source IS NULL THEN excluded.name ELSE models.name END,
                 size_bytes = excluded.size_bytes, last_opened_at = excluded.last_opened_at",
            rusqlite::params![path, name, size_bytes, now_ms()],
        )?;
        Ok(())
    }

    /// Adds a model Hearth did not open from a picked file, under its
    /// `name` and `source` (another app's, or the Hub's).
    pub fn add_model(&self, path: &str, name: &str, size_bytes: i64, source: &str) -> Result<()> {
        self.conn.execute(
            "INSERT INTO models(path, name, size_bytes, last_opened_at, source) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(path) DO UPDATE SET name = excluded.name, size_bytes = excluded.size_bytes,
                 source = excluded.source, last_opened_at = excluded.last_opened_at",
            rusqlite::params![path, name, size_bytes, now_ms(), source],
        )?;
        Ok(())
    }

    pub fn recent_models(&self, limit: usize) -> Result<Vec<RecentModel>> {
        let mut stmt = self.conn.prepare(
            "SELECT path, name, size_bytes, last_opened_at, source FROM models
             ORDER BY last_opened_at DESC, rowid DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map([limit as i64], |r| {
            Ok(RecentModel {
                path: r.get(0)?,
                name: r.get(1)?,
                size_bytes: r.get(2)?,
                last_opened_at: r.get(3)?,
                source: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The SHA-256 remembered for the file at `path`, if it was taken when
    /// the file had this size and modification time.
    pub fn model_sha256(&self, path: &str, size_bytes: u64, mtime_ns: u64) -> Result<Option<String>> {
        let found = self.conn.query_row(
            "SELECT sha256 FROM model_hashes WHERE path = ?1 AND size_bytes = ?2 AND mtime_ns = ?3",
            rusqlite::params![path, size_bytes as i64, mtime_ns as i64],
            |r| r.get(0),
        );
        match found {
            Ok(h) => Ok(Some(h)),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Remembers the SHA-256 of the file at `path` as it is now.
    pub fn set_model_sha256(&self, path: &str, size_bytes: u64, mtime_ns: u64, sha256: &str) -> Result<()> {
        self.conn.execute(
            "INSERT INTO model_hashes(path, size_bytes, mtime_ns, sha256) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(path) DO UPDATE SET size_bytes = excluded.size_bytes, mtime_ns = excluded.mtime_ns, sha256 = excluded.sha256",
            rusqlite::params![path, size_bytes as i64, mtime_ns as i64, sha256],
        )?;
        Ok(())
    }

    /// The file name a model with this SHA-256 was last seen under.
    pub fn model_name_by_sha256(&self, sha256: &str) -> Result<Option<String>> {
        let found = self.conn.query_row(
            "SELECT path FROM model_hashes WHERE sha256 = ?1 ORDER BY rowid DESC LIMIT 1",
            [sha256],
            |r| r.get::<_, String>(0),
        );
        match found {
            Ok(path) => Ok(std::path::Path::new(&path).file_name().map(|n| n.to_string_lossy().into_owned())),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub fn forget_model(&self, path: &str) -> Result<()> {
        self.conn.execute("DELETE FROM models WHERE path = ?1", [path])?;
        Ok(())
    }
}
