use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hearth_engine::ModelFacts;
use hearth_store::{RecentModel, Store};
use serde::Serialize;
use tauri::ipc::Channel;
use tauri::{Manager, Runtime, State};
use ts_rs::TS;

use crate::error::{locked, AppError, AppResult, ErrorKind};
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

/// How many recent models the library lists (and `models_forget` searches).
pub(crate) const LIBRARY_LIMIT: usize = 200;

/// One model of the library: what the list remembers, and what its file's
/// header says now (or why it cannot be read).
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct LibraryModel {
    pub path: String,
    pub name: String,
    /// The size when it was last opened.
    pub size_bytes: i64,
    pub last_opened_at: i64,
    /// Whether the file is still there.
    pub exists: bool,
    /// Where it came from when not from a picked file (`Ollama`, `Hugging Face`).
    pub source: Option<String>,
    pub facts: Option<LibraryFacts>,
    /// Why the header could not be read (a moved, damaged or truncated file).
    pub error: Option<AppError>,
}

/// A model file's header facts (`hearth_engine::ModelFacts`), for the UI.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct LibraryFacts {
    pub architecture: String,
    /// Whether Hearth runs this architecture.
    pub supported: bool,
    /// `general.name`, if the file has one.
    pub name: Option<String>,
    pub parameter_count: u64,
    /// The parameters one token runs (fewer than `parameter_count` with
    /// experts, or without Gemma 4's per-layer table).
    pub active_parameter_count: u64,
    /// Gemma 4's per-layer embeddings (E2B, E4B): read a row per token from
    /// the file, not loaded; the model's "effective" size leaves them out.
    pub per_layer_embedding_parameters: u64,
    /// Experts per layer, for a mixture of experts.
    pub expert_count: Option<u32>,
    /// Experts each token runs.
    pub experts_used: Option<u32>,
    /// The weight bytes a decode step reads.
    pub bytes_per_token: u64,
    /// The weights' bytes (every tensor).
    pub tensor_bytes: u64,
    /// Tensor bytes by type, largest first.
    pub quant_types: Vec<QuantShare>,
    pub context_length: u32,
    pub file_size: u64,
    pub n_layers: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub embedding_length: u32,
    /// The f16 KV cache's bytes per position: the memory at `n` positions
    /// is `tensorBytes + n * kvBytesPerToken`.
    pub kv_bytes_per_token: u64,
    /// A hybrid's (Qwen 3.5's) recurrent state, one copy (0 for a
    /// transformer). A conversation holds it and a checkpoint per
    /// `checkpointEvery` positions of prompt, at most `maxCheckpoints`.
    pub recurrent_state_bytes: u64,
    pub checkpoint_every: u32,
    pub max_checkpoints: u32,
    /// Weights plus a KV cache (and a hybrid's state and checkpoints) of the
    /// model's own context length.
    pub memory_bytes: u64,
}

#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct QuantShare {
    /// GGML's name for the type (`Q4_1`, `F32`, …).
    pub name: String,
    pub bytes: u64,
    /// Of the tensor bytes, 0 to 1.
    pub fraction: f64,
    pub tensors: u32,
}

impl From<ModelFacts> for LibraryFacts {
    fn from(f: ModelFacts) -> Self {
        Self {
            memory_bytes: f.memory_estimate(f.context_length),
            architecture: f.architecture,
            supported: f.supported,
            name: f.name,
            parameter_count: f.parameter_count,
            active_parameter_count: f.active_parameter_count,
            per_layer_embedding_parameters: f.per_layer_embedding_parameters,
            expert_count: f.experts.map(|e| e.count),
            experts_used: f.experts.map(|e| e.used),
            bytes_per_token: f.bytes_per_token,
            tensor_bytes: f.tensor_bytes,
            quant_types: f
                .quant_types
                .into_iter()
                .map(|q| QuantShare { name: q.name, bytes: q.bytes, fraction: q.fraction, tensors: q.tensors })
                .collect(),
            context_length: f.context_length,
            file_size: f.file_size,
            n_layers: f.n_layers,
            n_heads: f.n_heads,
            n_kv_heads: f.n_kv_heads,
            head_dim: f.head_dim,
            embedding_length: f.embedding_length,
            kv_bytes_per_token: f.kv_bytes_per_token,
            recurrent_state_bytes: f.recurrent_state_bytes,
            checkpoint_every: hearth_engine::model::PREFILL_CHUNK as u32,
            max_checkpoints: hearth_engine::recurrent_state::MAX_CHECKPOINTS as u32,
        }
    }
}

/// Reads each recent model's header (never its weights).
pub fn library(recent: Vec<RecentModel>) -> Vec<LibraryModel> {
    recent
        .into_iter()
        .map(|m| {
            let exists = std::path::Path::new(&m.path).is_file();
            let (facts, error) = match ModelFacts::read(&m.path) {
                Ok(f) => (Some(f.into()), None),
                Err(e) => (None, Some(AppError::from(e))),
            };
            LibraryModel {
                path: m.path,
                name: m.name,
                size_bytes: m.size_bytes,
                last_opened_at: m.last_opened_at,
                exists,
                source: m.source,
                facts,
                error,
            }
        })
        .collect()
}

/// The models opened before, with their header facts; a file that is gone
/// or unreadable carries its error rather than failing the list.
#[tauri::command]
pub async fn models_library(state: State<'_, AppState>) -> AppResult<Vec<LibraryModel>> {
    let recent = state.store()?.recent_models(LIBRARY_LIMIT)?;
    tauri::async_runtime::spawn_blocking(move || library(recent))
        .await
        .map_err(|e| AppError::new(ErrorKind::Internal, e.to_string()))
}

/// Removes `path` from the list, and deletes the file too only when
/// `delete_file` is set: never a file the list does not hold, and never the
/// model loaded, loading or waiting to load. `in_use` holds those paths.
pub fn forget(store: &Store, in_use: &[PathBuf], path: &str, delete_file: bool) -> AppResult<()> {
    if !store.recent_models(LIBRARY_LIMIT)?.iter().any(|m| m.path == path) {
        return Err(AppError::new(ErrorKind::NotFound, format!("{path} is not in the model list")));
    }
    if delete_file {
        let same = |a: &PathBuf| {
            a.as_path() == Path::new(path)
                || matches!((std::fs::canonicalize(a), std::fs::canonicalize(path)), (Ok(x), Ok(y)) if x == y)
        };
        if in_use.iter().any(same) {
            return Err(AppError::new(
                ErrorKind::Busy,
                format!("{path} is the model in use; open another model before deleting it"),
            ));
        }
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_file() => std::fs::remove_file(path)
                .map_err(|e| AppError::new(ErrorKind::Storage, format!("cannot delete {path}: {e}")))?,
            Ok(_) => {
                return Err(AppError::new(
                    ErrorKind::InvalidSettings,
                    format!("{path} is not a plain file; nothing was deleted"),
                ))
            }
            // Already gone: removing it from the list is all that is left.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(AppError::new(ErrorKind::Storage, format!("cannot delete {path}: {e}"))),
        }
    }
    store.forget_model(path)?;
    Ok(())
}

/// Removes a model from the list; deletes its file only if asked.
#[tauri::command]
pub async fn models_forget(state: State<'_, AppState>, path: String, delete_file: bool) -> AppResult<()> {
    let store = state.store()?;
    forget(&store, &state.worker.models_in_use(), &path, delete_file)
}

/// Downloads the default model (resuming an earlier try), checks it against
/// its pinned SHA-256, and opens it. The configuration may say where it
/// comes from (`AppConfig::model_url`).
#[tauri::command]
pub async fn models_download_default<R: Runtime>(
    app: tauri::AppHandle<R>,
    state: State<'_, AppState>,
    on_event: Channel<DownloadEvent>,
) -> AppResult<()> {
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let mut current = locked(&state.download);
        if current.is_some() {
            return Err(AppError::new(ErrorKind::Busy, "the model is already downloading"));
        }
        *current = Some(cancel.clone());
    }
    let config = app.state::<crate::config::AppConfig>();
    let (url, dir) = (config.model_url.clone(), config.models_dir.clone());
    std::thread::Builder::new()
        .name("hearth-download".into())
        .spawn(move || {
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
            *locked(&state.download) = None;
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
    Ok(match locked(&state.download).as_ref() {
        Some(flag) => {
            flag.store(true, Ordering::Relaxed);
            true
        }
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_in_use_is_never_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("hearth.db")).unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        let path = model.display().to_string();
        store.record_model(&path, "m", 4).unwrap();
        // Through another spelling of the same file, too.
        let other = dir.path().join(".").join("m.gguf").display().to_string();
        for in_use in [vec![model.clone()], vec![dir.path().join("n.gguf"), PathBuf::from(&other)]] {
            let err = forget(&store, &in_use, &path, true).unwrap_err();
            assert_eq!(err.kind, ErrorKind::Busy);
            assert!(model.exists());
            assert_eq!(store.recent_models(10).unwrap().len(), 1, "a refusal changes nothing");
        }
        // Removing it from the list is fine; the file stays.
        forget(&store, std::slice::from_ref(&model), &path, false).unwrap();
        assert!(model.exists());
        assert!(store.recent_models(10).unwrap().is_empty());
        assert_eq!(forget(&store, &[], &path, true).unwrap_err().kind, ErrorKind::NotFound);
        assert!(model.exists());
    }
}
