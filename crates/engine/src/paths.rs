//! Where the default model lives. `scripts/fetch-model.sh` writes to the same place.

use std::path::PathBuf;

/// The file name of the default model inside the models folder.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// `$HEARTH_MODEL_DIR`, else the platform cache folder's `hearth/models`
/// (`~/.cache/hearth/models` on Linux).
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HEARTH_MODEL_DIR") {
        return PathBuf::from(dir);
    }
    directories::BaseDirs::new()
        .map(|d| d.cache_dir().join("hearth").join("models"))
        .unwrap_or_else(|| PathBuf::from(".hearth-models"))
}

/// `$HEARTH_MODEL` if set, else the default model in `models_dir()`.
pub fn default_model_path() -> PathBuf {
    match std::env::var_os("HEARTH_MODEL") {
        Some(p) => PathBuf::from(p),
        None => models_dir().join(DEFAULT_MODEL_FILE),
    }
}
