use std::path::PathBuf;

use hearth_store::RecentModel;
use tauri::State;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::events::ModelStatus;
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
