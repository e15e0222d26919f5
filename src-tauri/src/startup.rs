//! Starting up when something is wrong: the app still opens its window and
//! says what happened, instead of exiting without a word (on Windows a
//! panic at start shows nothing at all).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;
use tauri::{AppHandle, Manager, Runtime};
use ts_rs::TS;

use crate::error::{locked, AppError, AppResult, ErrorKind};

/// Why the app could not open its data, for the UI's error screen.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct StartupError {
    pub error: AppError,
    /// The database that failed to open, when that is what failed: it can
    /// be moved aside (kept, renamed) to start fresh.
    pub database: Option<String>,
}

/// The start-up failure, if there was one; managed whether or not.
#[derive(Default)]
pub struct StartupFailure(pub Mutex<Option<StartupError>>);

/// Opens the database and starts the worker, or records why it could not.
pub fn start<R: Runtime>(app: &AppHandle<R>) {
    app.manage(StartupFailure::default());
    if let Err(failure) = crate::manage_state(app) {
        tracing::error!("Hearth could not open its data: {}", failure.error.message);
        *locked(&app.state::<StartupFailure>().0) = Some(failure);
    }
}

/// Moves `database` (and its WAL files) aside as `<name>.broken-<time>`,
/// keeping it, so a fresh one can be created. Returns where it went.
pub fn move_aside(database: &Path) -> AppResult<PathBuf> {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut moved = None;
    for suffix in ["", "-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{suffix}", database.display()));
        if !from.exists() {
            continue;
        }
        let to = PathBuf::from(format!("{}.broken-{stamp}{suffix}", database.display()));
        std::fs::rename(&from, &to)
            .map_err(|e| AppError::new(ErrorKind::Storage, format!("cannot move {} aside: {e}", from.display())))?;
        if suffix.is_empty() {
            moved = Some(to);
        }
    }
    moved.ok_or_else(|| AppError::new(ErrorKind::NotFound, format!("{} does not exist", database.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moving_aside_keeps_the_database_and_its_wal_files() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("hearth.db");
        std::fs::write(&db, b"damaged").unwrap();
        std::fs::write(dir.path().join("hearth.db-wal"), b"wal").unwrap();
        let moved = move_aside(&db).unwrap();
        assert!(!db.exists());
        assert_eq!(std::fs::read(&moved).unwrap(), b"damaged");
        assert_eq!(std::fs::read(format!("{}-wal", moved.display())).unwrap(), b"wal");
        assert!(move_aside(&db).is_err(), "nothing left to move");
    }
}
