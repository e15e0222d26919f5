use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hearth_store::RecentModel;
use tauri::ipc::Channel;
use tauri::{Manager, Runtime, State};

use crate::error::{AppError, AppResult, ErrorKind};
use crate::events::{DownloadEvent, ModelStatus};
use crate::state::AppState;

#[tauri::command]
pub async fn models_status(state: State<'_, AppState>) -> AppResult<ModelStatus> {
    Ok(state.worker.model_status())
}

/// Starts loading a GGUF file; progress and the result arrive as
/// `model-status` events.
#[tauri::command]
pub async fn models_open(state: State<'_, AppState>, path: String) -> AppResult<()> {
    let path = PathBuf::from(path);
    if !path.is_file() {
        return Err(AppError::new(ErrorKind::BadModel, format!("{} is not a file", path.display())));
    }
    state.worker.load_model(path);
    Ok(())
}

#[tauri::command]
pub async fn models_recent(state: State<'_, AppState>) -> AppResult<Vec<RecentModel>> {
    let store = state.store()?;
    let recent = store.recent_models(20)?;
    // Files that were moved or deleted since are not offered.
    Ok(recent.into_iter().filter(|m| std::path::Path::new(&m.path).is_file()).collect())
}

/// Downloads the default model (resuming an earlier try), checks it against
/// its pinned SHA-256, and opens it. `HEARTH_MODEL_URL` overrides where it
/// comes from.
#[tauri::command]
pub async fn models_download_default<R: Runtime>(app: tauri::AppHandle<R>, state: State<'_, AppState>, on_event: Channel<DownloadEvent>) -> AppResult<()> {
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let mut current = state.download.lock()?;
        if current.is_some() {
            return Err(AppError::new(ErrorKind::Busy, "the model is already downloading"));
        }
        *current = Some(cancel.clone());
    }
    std::thread::Builder::new()
        .name("hearth-download".into())
        .spawn(move || {
            let url = std::env::var("HEARTH_MODEL_URL").ok();
            let dir = hearth_engine::paths::models_dir();
            let events = on_event.clone();
            let mut extracting = false;
            let result = hearth_download::fetch_default_model(&dir, url.as_deref(), &cancel, |p| {
                let _ = events.send(DownloadEvent::Progress { downloaded: p.downloaded, total: p.total });
                if p.total == Some(p.downloaded) && !extracting {
                    extracting = true;
                    let _ = events.send(DownloadEvent::Extracting);
                }
            });
            let state = app.state::<AppState>();
            if let Ok(mut d) = state.download.lock() {
                *d = None;
            }
            let _ = match result {
                Ok(path) => {
                    state.worker.load_model(path.clone());
                    on_event.send(DownloadEvent::Done { path: path.display().to_string() })
                }
                Err(e) => on_event.send(DownloadEvent::Failed { error: e.into() }),
            };
        })
        .map_err(|e| AppError::new(ErrorKind::Internal, format!("cannot start the download: {e}")))?;
    Ok(())
}

/// Stops the download; what arrived is kept, so the next try resumes.
#[tauri::command]
pub async fn models_download_cancel(state: State<'_, AppState>) -> AppResult<bool> {
    Ok(match state.download.lock()?.as_ref() {
        Some(flag) => {
            flag.store(true, Ordering::Relaxed);
            true
        }
        None => false,
    })
}
