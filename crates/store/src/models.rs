//! Models the user has opened, most recent first.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::Result;
use crate::store::{now_ms, Store};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct RecentModel {
    pub path: String,
    pub name: String,
    pub size_bytes: i64,
    pub last_opened_at: i64,
}

impl Store {
    pub fn record_model(&self, path: &str, name: &str, size_bytes: i64) -> Result<()> {
        self.conn.execute(
            "INSERT INTO models(path, name, size_bytes, last_opened_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(path) DO UPDATE SET name = excluded.name, size_bytes = excluded.size_bytes,
                 last_opened_at = excluded.last_opened_at",
            rusqlite::params![path, name, size_bytes, now_ms()],
        )?;
        Ok(())
    }

    pub fn recent_models(&self, limit: usize) -> Result<Vec<RecentModel>> {
        let mut stmt = self.conn.prepare(
            "SELECT path, name, size_bytes, last_opened_at FROM models ORDER BY last_opened_at DESC, rowid DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map([limit as i64], |r| {
            Ok(RecentModel { path: r.get(0)?, name: r.get(1)?, size_bytes: r.get(2)?, last_opened_at: r.get(3)? })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn forget_model(&self, path: &str) -> Result<()> {
        self.conn.execute("DELETE FROM models WHERE path = ?1", [path])?;
        Ok(())
    }
}
