//! The engine's one error type: every fallible public function returns it.

use std::path::PathBuf;

/// What went wrong, in terms a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot read model file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("model file {path} is not a valid GGUF file: {reason}")]
    CorruptModel { path: PathBuf, reason: String },
    #[error("model file {path} is truncated: {reason}")]
    TruncatedModel { path: PathBuf, reason: String },
    /// A model in parts (`-00001-of-00003.gguf`) whose parts do not make one model.
    #[error("model file {path} is one part of a split model, and {reason}")]
    SplitModel { path: PathBuf, reason: String },
    #[error(
        "model file {path} has architecture {architecture:?}, which Hearth does not support (supported: {supported})"
    )]
    UnsupportedArchitecture { path: PathBuf, architecture: String, supported: &'static str },
    #[error("model file {path}: tensor {tensor} is {dtype}, which Hearth cannot run yet; {hint}")]
    UnsupportedTensorType { path: PathBuf, tensor: String, dtype: &'static str, hint: &'static str },
    #[error("model file {path} has no usable tokenizer: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
    #[error("chat template error: {0}")]
    Template(String),
    #[error("invalid setting {field}: {reason}")]
    InvalidSetting { field: &'static str, reason: String },
    #[error("the prompt has {tokens} tokens but the context holds {context}")]
    PromptTooLong { tokens: usize, context: usize },
    #[error("invalid cache data: {0}")]
    CorruptCache(String),
    /// The caller stopped a prefill, between chunks or between the layers
    /// of one; the cache keeps the chunks read before.
    #[error("stopped while reading the prompt")]
    Stopped,
    #[error("tensor computation failed: {0}")]
    Compute(#[from] candle_core::Error),
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

impl EngineError {
    pub fn setting(field: &'static str, reason: impl Into<String>) -> Self {
        EngineError::InvalidSetting { field, reason: reason.into() }
    }
}
