//! Conversations as files: export one (Markdown, JSON, or a `.hearth`
//! bundle with its cache), back up all, and import any of them.

use std::path::{Path, PathBuf};

use hearth_store::{Import, Store};
use serde::{Deserialize, Serialize};
use tauri::State;
use ts_rs::TS;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::state::AppState;
use crate::worker::bundle::CacheImport;

/// How to export a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub enum ExportFormat {
    /// The shown branch, readable anywhere.
    Markdown,
    /// The whole tree (`docs/export-format.md`).
    Json,
    /// The JSON with the conversation's KV cache, to resume elsewhere without prefill.
    Bundle,
}

/// What an import added.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct ImportResult {
    /// The conversations created, in the file's order.
    pub conversation_ids: Vec<i64>,
    /// Conversations in the file that were already here.
    pub skipped_duplicates: usize,
    /// A bundle's KV cache: installed, skipped (see `cacheNote`), or none in the file.
    #[ts(inline)]
    pub cache: CacheImport,
    /// Why the cache was skipped, in words.
    pub cache_note: Option<String>,
}

/// The largest JSON file an import reads (as the store's parser allows).
const MAX_JSON: u64 = hearth_store::MAX_IMPORT_BYTES as u64;

fn write_file(path: &Path, bytes: &[u8]) -> AppResult<()> {
    // Written beside, then renamed: a failed export never leaves half a file
    // where a good one was.
    let tmp = crate::worker::bundle::part_path(path);
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        AppError::write_failed(path, e)
    })
}

fn json_bytes(value: &impl Serialize) -> AppResult<Vec<u8>> {
    serde_json::to_vec_pretty(value).map_err(|e| AppError::new(ErrorKind::Internal, e.to_string()))
}

/// Writes conversation `id` to `path` in `format`.
#[tauri::command]
pub async fn conversations_export(
    state: State<'_, AppState>,
    id: i64,
    format: ExportFormat,
    path: PathBuf,
) -> AppResult<()> {
    let store = state.store()?.reopen()?;
    let worker = state.worker.clone();
    tauri::async_runtime::spawn_blocking(move || match format {
        ExportFormat::Markdown => write_file(&path, store.export_markdown(id)?.as_bytes()),
        ExportFormat::Json => write_file(&path, &json_bytes(&store.export_conversation(id)?)?),
        ExportFormat::Bundle => worker.export_bundle(&store, id, &path),
    })
    .await
    .map_err(|e| AppError::new(ErrorKind::Internal, format!("exporting failed: {e}")))?
}

/// Writes every conversation to one JSON file; returns how many.
#[tauri::command]
pub async fn conversations_backup(state: State<'_, AppState>, path: PathBuf) -> AppResult<usize> {
    let store = state.store()?.reopen()?;
    tauri::async_runtime::spawn_blocking(move || {
        let backup = store.backup()?;
        write_file(&path, &json_bytes(&backup)?)?;
        Ok(backup.conversations.len())
    })
    .await
    .map_err(|e| AppError::new(ErrorKind::Internal, format!("backing up failed: {e}")))?
}

/// Imports a `.hearth` bundle, a Hearth JSON export or backup, or a plain
/// `[{role, content}]` list. A file that cannot be read whole changes nothing.
#[tauri::command]
pub async fn conversations_import(state: State<'_, AppState>, path: PathBuf) -> AppResult<ImportResult> {
    let store = state.store()?.reopen()?;
    let worker = state.worker.clone();
    tauri::async_runtime::spawn_blocking(move || import_file(&store, &worker, &path))
        .await
        .map_err(|e| AppError::new(ErrorKind::Internal, format!("importing failed: {e}")))?
}

/// A bundle is told by its zip signature, whatever its name.
pub fn import_file(store: &Store, worker: &crate::worker::Worker, path: &Path) -> AppResult<ImportResult> {
    let refused =
        |reason: String| AppError::new(ErrorKind::BadImport, format!("cannot import {}: {reason}", path.display()));
    let mut file = std::fs::File::open(path).map_err(|e| refused(e.to_string()))?;
    let mut magic = [0u8; 4];
    let is_zip = std::io::Read::read_exact(&mut file, &mut magic).is_ok() && &magic == b"PK\x03\x04";
    if is_zip {
        let b = worker.import_bundle(store, path)?;
        return Ok(ImportResult {
            conversation_ids: b.report.imported,
            skipped_duplicates: b.report.skipped_duplicates,
            cache: b.cache,
            cache_note: b.cache_note,
        });
    }
    let size = file.metadata().map_err(|e| refused(e.to_string()))?.len();
    if size > MAX_JSON {
        return Err(refused(format!("it is {} MB; imports are limited to {} MB", size >> 20, MAX_JSON >> 20)));
    }
    let bytes = std::fs::read(path).map_err(|e| refused(e.to_string()))?;
    let import = Import::parse(&bytes).map_err(|e| refused(e.to_string()))?;
    let report = store.import(&import)?;
    Ok(ImportResult {
        conversation_ids: report.imported,
        skipped_duplicates: report.skipped_duplicates,
        cache: CacheImport::None,
        cache_note: None,
    })
}
