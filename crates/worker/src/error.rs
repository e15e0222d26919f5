//! The one error type every command returns. It reaches the UI as
//! `{kind, message}`: `kind` for the code to branch on, `message` in words
//! for the person.

use hearth_engine::EngineError;
use hearth_store::StoreError;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[error("{message}")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct AppError {
    pub kind: ErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum ErrorKind {
    /// No model is loaded yet.
    NoModel,
    /// The model file cannot be read, is damaged or truncated.
    BadModel,
    /// The file is a valid GGUF of an architecture Hearth does not run.
    UnsupportedModel,
    InvalidSettings,
    PromptTooLong,
    /// This conversation is already generating.
    Busy,
    NotFound,
    DiskFull,
    Storage,
    /// Fetching a model failed (network, checksum, archive).
    Download,
    /// A recorded reply cannot be run again as it was: another model file,
    /// or the conversation before it changed.
    CannotReplay,
    /// A remote endpoint failed: unreachable, refused the key, rate
    /// limited, sent something malformed, or dropped the connection.
    Remote,
    /// A file to import is malformed, too large, from a newer Hearth, or
    /// not what it claims to be; nothing was imported.
    BadImport,
    /// An MCP server: its configuration is wrong, it cannot start, or a
    /// call failed, timed out or was stopped.
    Tool,
    Internal,
}

impl AppError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    /// Writing `path` failed: kind `diskFull` when the disk is, else `storage`.
    pub fn write_failed(path: &std::path::Path, e: std::io::Error) -> Self {
        let kind = if e.kind() == std::io::ErrorKind::StorageFull { ErrorKind::DiskFull } else { ErrorKind::Storage };
        Self::new(kind, format!("cannot write {}: {e}", path.display()))
    }
}

pub type AppResult<T> = Result<T, AppError>;

impl From<EngineError> for AppError {
    fn from(e: EngineError) -> Self {
        let kind = match &e {
            // A chat template is part of the model file.
            EngineError::Io { .. }
            | EngineError::CorruptModel { .. }
            | EngineError::TruncatedModel { .. }
            | EngineError::SplitModel { .. }
            | EngineError::Tokenizer { .. }
            | EngineError::Template(_) => ErrorKind::BadModel,
            EngineError::UnsupportedArchitecture { .. } | EngineError::UnsupportedTensorType { .. } => {
                ErrorKind::UnsupportedModel
            }
            EngineError::InvalidSetting { .. } => ErrorKind::InvalidSettings,
            EngineError::PromptTooLong { .. } => ErrorKind::PromptTooLong,
            // Stopped is handled where a prefill is stopped; it is not an error to show.
            EngineError::CorruptCache(_) | EngineError::Compute(_) | EngineError::Stopped => ErrorKind::Internal,
        };
        Self::new(kind, e.to_string())
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        let kind = match &e {
            StoreError::NotFound { .. } => ErrorKind::NotFound,
            StoreError::DiskFull(_) => ErrorKind::DiskFull,
            StoreError::Invalid(_) => ErrorKind::InvalidSettings,
            _ => ErrorKind::Storage,
        };
        Self::new(kind, e.to_string())
    }
}

impl From<hearth_download::DownloadError> for AppError {
    fn from(e: hearth_download::DownloadError) -> Self {
        let kind = match &e {
            hearth_download::DownloadError::Io { source, .. } if source.raw_os_error() == Some(28) => {
                ErrorKind::DiskFull
            }
            _ => ErrorKind::Download,
        };
        Self::new(kind, e.to_string())
    }
}
