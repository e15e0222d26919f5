//! Where the default model lives. `scripts/fetch-model.sh` writes to the same place.
//!
//! The two overrides, `HEARTH_MODEL` and `HEARTH_MODEL_DIR`, are looked up
//! through a function the caller passes (a binary passes its environment,
//! `|k| std::env::var_os(k)`): the engine reads no environment itself.

use std::ffi::OsString;
use std::path::PathBuf;

/// The file name of the default model inside the models folder.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// `HEARTH_MODEL_DIR` as `vars` gives it, else the platform cache folder's
/// `hearth/models` (`~/.cache/hearth/models` on Linux).
pub fn models_dir(vars: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    if let Some(dir) = vars("HEARTH_MODEL_DIR") {
        return PathBuf::from(dir);
    }
    directories::BaseDirs::new()
        .map(|d| d.cache_dir().join("hearth").join("models"))
        .unwrap_or_else(|| PathBuf::from(".hearth-models"))
}

/// `HEARTH_MODEL` as `vars` gives it, else the default model in `models_dir`.
pub fn default_model_path(vars: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    match vars("HEARTH_MODEL") {
        Some(p) => PathBuf::from(p),
        None => models_dir(vars).join(DEFAULT_MODEL_FILE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_the_override_else_the_default_file_in_the_models_folder() {
        let none = |_: &str| None;
        assert_eq!(default_model_path(none).file_name().unwrap(), DEFAULT_MODEL_FILE);
        let dir = |k: &str| (k == "HEARTH_MODEL_DIR").then(|| OsString::from("/m"));
        assert_eq!(default_model_path(dir), PathBuf::from("/m").join(DEFAULT_MODEL_FILE));
        let model = |k: &str| (k == "HEARTH_MODEL").then(|| OsString::from("/x.gguf"));
        assert_eq!(default_model_path(model), PathBuf::from("/x.gguf"));
    }
}
