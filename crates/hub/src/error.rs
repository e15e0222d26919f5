//! The hub's one error type, in words a user can act on.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("{repo} is gated: accept its terms on the Hub, then give Hearth an access token")]
    Gated { repo: String },
    #[error("the Hub has no {what}")]
    NotFound { what: String },
    #[error("the Hub answered {status} for {url}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Http { url: String, status: u16, message: Option<String> },
    #[error("cannot reach {url}: {reason}; try again to resume")]
    Network { url: String, reason: String },
    #[error("{url} redirected more than {hops} times (a redirect loop)")]
    RedirectLoop { url: String, hops: u32 },
    #[error("{url} did not send the file: {reason}")]
    NotTheFile { url: String, reason: String },
    #[error("{file} does not match the Hub's SHA-256 (expected {expected}, got {actual}); it was deleted")]
    Checksum { file: String, expected: String, actual: String },
    #[error("{file} needs {needed} bytes but {folder} has {free} free")]
    DiskFull { file: String, needed: u64, free: u64, folder: PathBuf },
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the Hub's answer for {url} is not what its API documents: {reason}")]
    BadAnswer { url: String, reason: String },
    #[error("{0}")]
    Model(#[from] hearth_engine::EngineError),
    #[error("{file} is being downloaded already (by this app or another)")]
    Busy { file: String },
    #[error("the download was paused")]
    Paused,
    #[error("the download was cancelled")]
    Cancelled,
}

pub type Result<T, E = HubError> = std::result::Result<T, E>;

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io { path: path.to_path_buf(), source }
}
