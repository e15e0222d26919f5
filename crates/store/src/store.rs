use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags};

use crate::error::Result;
use crate::migrations::{migrate, SCHEMA_VERSION};

/// One connection to Hearth's database. Open one per thread that writes:
/// WAL lets a reader and a writer work at once.
pub struct Store {
    pub(crate) conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the database at `path`, migrates it, and
    /// marks replies left streaming by a crash as interrupted.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_at_version(path, SCHEMA_VERSION)
    }

    /// Like `open`, but migrates only up to `version`. For migration tests.
    pub fn open_at_version(path: impl AsRef<Path>, version: i64) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut conn = connect(&path)?;
        migrate(&mut conn, version)?;
        let store = Self { conn, path };
        if version == SCHEMA_VERSION {
            store.recover_interrupted()?;
        }
        Ok(store)
    }

    /// Another connection to the same database, for another thread. It does
    /// not recover interrupted replies: that is for the first opening, and
    /// would mark the replies streaming now.
    pub fn reopen(&self) -> Result<Self> {
        Ok(Self { conn: connect(&self.path)?, path: self.path.clone() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn schema_version(&self) -> Result<i64> {
        Ok(self.conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    /// A reply that was streaming when the app died is kept as interrupted.
    fn recover_interrupted(&self) -> Result<usize> {
        // A tool call that was waiting or running was stopped by the exit.
        self.conn.execute(
            "UPDATE tool_calls SET status = 'stopped', result = 'Hearth closed before the call ended.' WHERE status = 'pending'",
            [],
        )?;
        Ok(self.conn.execute(
            "UPDATE messages SET status = 'interrupted',
                 stats = COALESCE(stats, '{\"finishReason\":\"interrupted\"}')
             WHERE status = 'streaming'",
            [],
        )?)
    }

    /// A value from the app's own key-value settings.
    pub fn app_setting(&self, key: &str) -> Result<Option<String>> {
        use rusqlite::OptionalExtension;
        Ok(self.conn.query_row("SELECT value FROM app_settings WHERE key = ?1", [key], |r| r.get(0)).optional()?)
    }

    pub fn set_app_setting(&self, key: &str, value: &str) -> Result<()> {
        self.conn.execute(
            "INSERT INTO app_settings(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [key, value],
        )?;
        Ok(())
    }
}

/// Milliseconds since the Unix epoch.
/// A connection in WAL mode with Hearth's settings.
fn connect(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    // A damaged file fails here, before anything is written to it.
    conn.query_row("PRAGMA schema_version", [], |_| Ok(()))?;
    conn.pragma_update_and_check(None, "journal_mode", "wal", |_| Ok(()))?;
    // NORMAL in WAL mode survives a process crash; only power loss may
    // drop the last transactions.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    Ok(conn)
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
