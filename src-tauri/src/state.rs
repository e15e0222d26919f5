//! What every command can reach: the database and the worker.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use hearth_store::Store;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::worker::{StatusSink, Worker, LAST_MODEL_KEY};

pub struct AppState {
    store: Mutex<Store>,
    pub worker: Worker,
    /// Set to cancel the default model's download in progress, if any.
    pub download: Mutex<Option<Arc<AtomicBool>>>,
}

impl AppState {
    /// Opens the database in `data_dir`, starts the worker, and starts
    /// loading the model the user had last (or the default one).
    pub fn open(data_dir: PathBuf, on_status: StatusSink) -> AppResult<Self> {
        let store = Store::open(data_dir.join("hearth.db"))?;
        // Conversations deleted in an earlier run are past their undo.
        let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        store.purge_deleted(started)?;
        let worker = Worker::start(store.reopen()?, on_status);
        if let Some(path) = initial_model(&store) {
            worker.load_model(path);
        }
        Ok(Self { store: Mutex::new(store), worker, download: Mutex::new(None) })
    }

    pub fn store(&self) -> AppResult<MutexGuard<'_, Store>> {
        Ok(self.store.lock()?)
    }
}

/// `HEARTH_DATA_DIR`, else the platform's data folder for Hearth.
pub fn data_dir() -> AppResult<PathBuf> {
    if let Some(dir) = std::env::var_os("HEARTH_DATA_DIR") {
        return Ok(PathBuf::from(dir));
    }
    directories::ProjectDirs::from("org", "Hearth", "Hearth")
        .map(|d| d.data_dir().to_path_buf())
        .ok_or_else(|| AppError::new(ErrorKind::Storage, "cannot find a home folder to keep conversations in"))
}

/// The model to open at start: `HEARTH_MODEL`, else the last one opened,
/// else the default model if it has been fetched.
fn initial_model(store: &Store) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HEARTH_MODEL") {
        return Some(PathBuf::from(p));
    }
    if let Ok(Some(p)) = store.app_setting(LAST_MODEL_KEY) {
        let p = PathBuf::from(p);
        if p.exists() {
            return Some(p);
        }
    }
    let default = hearth_engine::paths::default_model_path();
    default.exists().then_some(default)
}
