//! What every command can reach: the database and the worker.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use hearth_store::Store;

use crate::config::AppConfig;
use crate::error::{locked, AppError, AppResult, ErrorKind};
use crate::worker::{CacheBudgets, StatusSink, Worker, WorkerConfig, LAST_MODEL_KEY};

/// The app-setting key that keeps the cache budgets.
pub const BUDGETS_KEY: &str = "cache_budgets";

/// The database's file name in the data folder.
pub const DATABASE_FILE: &str = "hearth.db";

/// The file whose lock says the data folder is in use.
const LOCK_FILE: &str = "hearth.lock";

pub struct AppState {
    store: Mutex<Store>,
    pub worker: Arc<Worker>,
    /// The local API server, when the user turned it on.
    pub api_server: crate::api_server::ApiServer,
    /// Remote endpoints' keys read or entered this session.
    pub keys: Arc<crate::endpoints::Keys>,
    /// The MCP servers the user added, each started on first use.
    pub mcp: Arc<hearth_mcp::Servers>,
    /// Set to cancel the default model's download in progress, if any.
    pub download: Mutex<Option<Arc<AtomicBool>>>,
    /// Held for as long as the app runs: one process per data folder.
    _lock: std::fs::File,
}

impl AppState {
    /// Opens the database in `data_dir`, starts the worker, and starts
    /// loading `requested` (a model file the app was launched with), else
    /// the configured one, else the model the user had last (or the default one).
    /// `lock` is the data folder's, from [`lock_data_dir`]: taken apart,
    /// so that any error here is the database's or the worker's.
    pub fn open(
        data_dir: PathBuf,
        lock: std::fs::File,
        on_status: StatusSink,
        requested: Option<PathBuf>,
        config: &AppConfig,
    ) -> AppResult<Self> {
        let store = Store::open(data_dir.join(DATABASE_FILE))?;
        // Conversations deleted in an earlier run are past their undo.
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        store.purge_deleted(started)?;
        let caches = data_dir.join("caches");
        forget_orphan_caches(&store, &caches);
        let worker_config = WorkerConfig { caches_dir: Some(caches), ..config.worker.clone() };
        let worker = Arc::new(Worker::start(store.reopen()?, worker_config, on_status));
        if let Some(b) = store.app_setting(BUDGETS_KEY)?.and_then(|j| serde_json::from_str::<CacheBudgets>(&j).ok()) {
            worker.set_budgets(b);
        }
        if let Some(path) = requested.or_else(|| initial_model(&store, config)) {
            worker.load_model(path);
        }
        let mcp = Arc::new(hearth_mcp::Servers::new(hearth_mcp::Limits::default(), stored_mcp_servers(&store)?));
        // Chats' tool calls run on the app's async runtime, never on the worker's thread.
        let runtime = tauri::async_runtime::handle().inner().clone();
        worker.set_tool_host(crate::worker::ToolHost { servers: mcp.clone(), runtime });
        Ok(Self {
            store: Mutex::new(store),
            worker,
            mcp,
            api_server: Default::default(),
            keys: Default::default(),
            download: Mutex::new(None),
            _lock: lock,
        })
    }

    pub fn store(&self) -> AppResult<MutexGuard<'_, Store>> {
        Ok(locked(&self.store))
    }
}

/// The MCP servers in the database. One whose stored transport no longer
/// reads (written by a newer Hearth, say) is left out, not fatal.
pub fn stored_mcp_servers(store: &Store) -> AppResult<Vec<hearth_mcp::ServerConfig>> {
    Ok(store
        .mcp_servers()?
        .into_iter()
        .filter_map(|s| match serde_json::from_str(&s.transport) {
            Ok(transport) => Some(hearth_mcp::ServerConfig { name: s.name, transport }),
            Err(e) => {
                tracing::warn!("MCP server “{}” is not readable: {e}", s.name);
                None
            }
        })
        .collect())
}

/// Locks the data folder for this process, or says who holds it. Two
/// processes on one folder would purge each other's deleted conversations,
/// mark each other's replies interrupted and write the same cache files.
pub fn lock_data_dir(dir: &std::path::Path) -> AppResult<std::fs::File> {
    std::fs::create_dir_all(dir)
        .map_err(|e| AppError::new(ErrorKind::Storage, format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| AppError::new(ErrorKind::Storage, format!("cannot open {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(AppError::new(
            ErrorKind::Busy,
            format!("Hearth is already running with the data folder {}; switch to its window, or close it and start Hearth again", dir.display()),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(AppError::new(ErrorKind::Storage, format!("cannot lock {}: {e}", path.display()))),
    }
}

/// Deletes saved caches whose conversation is gone.
fn forget_orphan_caches(store: &Store, dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let id = path.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse::<i64>().ok());
        let orphan = match id {
            Some(id) => matches!(store.conversation(id), Err(hearth_store::StoreError::NotFound { .. })),
            None => path.extension().is_some_and(|e| e == "tmp"),
        };
        if orphan {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The model to open at start: the configured one, else the last one
/// opened, else the default model if it has been fetched.
fn initial_model(store: &Store, config: &AppConfig) -> Option<PathBuf> {
    if let Some(p) = &config.model {
        return Some(p.clone());
    }
    if let Ok(Some(p)) = store.app_setting(LAST_MODEL_KEY) {
        let p = PathBuf::from(p);
        if p.exists() {
            return Some(p);
        }
    }
    let default = config.default_model();
    default.exists().then_some(default)
}
