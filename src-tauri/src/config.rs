//! The app's configuration, read from the environment once, in `run`, and
//! managed as state: nothing else in the app, the worker or the engine reads
//! the environment, so tests build the app with values of their own.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use hearth_worker::{config::DEFAULT_DISK_RESERVE, TestHooks, WorkerConfig};

use crate::error::{AppError, AppResult, ErrorKind};

/// What the app was started with. `Default` is the app with no variable set.
#[derive(Debug, Clone)]
pub struct AppConfig {
    /// Where the database and caches live (`HEARTH_DATA_DIR`); `None`: the
    /// platform's data folder for Hearth.
    pub data_dir: Option<PathBuf>,
    /// The model to open at start over the last one opened (`HEARTH_MODEL`).
    pub model: Option<PathBuf>,
    /// Where the default model is downloaded to and looked for
    /// (`HEARTH_MODEL_DIR`, else the platform cache folder's `hearth/models`).
    pub models_dir: PathBuf,
    /// Where the default model is downloaded from, over its pinned address
    /// (`HEARTH_MODEL_URL`; the first-run tests serve it locally).
    pub model_url: Option<String>,
    /// Worker threads for the CPU kernels (`HEARTH_THREADS`; `None`: the
    /// logical CPUs).
    pub threads: Option<usize>,
    /// A cap on the kernels' ISA (`HEARTH_ISA`: `portable`, `avx2`, `avx512`).
    pub isa: Option<hearth_engine::cpu::isa::Isa>,
    /// The Hugging Face Hub or its mirror (`HF_ENDPOINT`), for Get models.
    pub hub_endpoint: String,
    /// A Hub access token from the environment (`HF_TOKEN`), over the one
    /// kept in the keychain.
    pub hub_token: Option<String>,
    /// The Hugging Face cache downloads go to, shared with `huggingface_hub`
    /// and llama.cpp (`HF_HUB_CACHE`, else `HF_HOME/hub`, else
    /// `~/.cache/huggingface/hub`).
    pub hf_cache: PathBuf,
    /// The user's home folder, where other apps keep their models (`HOME`,
    /// `USERPROFILE`), with the variables that move them (`OLLAMA_MODELS`,
    /// `LLAMA_CACHE`, `LOCALAPPDATA`, `APPDATA`).
    pub other_apps: OtherApps,
    /// The nice value the webview's processes are lowered to once the page
    /// has loaded (`HEARTH_WEBVIEW_NICE`, 0 to 19; 0 leaves them alone).
    pub webview_nice: i32,
    /// The worker's: a device over the app setting (`HEARTH_DEVICE`), the
    /// disk reserve (`HEARTH_DISK_RESERVE_MB`) and the test hooks
    /// (`HEARTH_TEST_PANIC`, `HEARTH_TEST_APPEND_PAUSE_MS`). Its caches
    /// folder is set from the data folder when the worker starts.
    pub worker: WorkerConfig,
}

impl Default for AppConfig {
    fn default() -> Self {
        Self::from_vars(|_| None)
    }
}

impl AppConfig {
    /// Reads every variable the app knows from `vars` (`|k| std::env::var_os(k)`
    /// in `run`).
    pub fn from_vars(vars: impl Fn(&str) -> Option<OsString>) -> Self {
        let text = |k: &str| vars(k).and_then(|v| v.into_string().ok()).filter(|v| !v.is_empty());
        let disk_reserve_bytes = text("HEARTH_DISK_RESERVE_MB")
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(DEFAULT_DISK_RESERVE, |mb| mb << 20);
        let append_pause = text("HEARTH_TEST_APPEND_PAUSE_MS").and_then(|v| v.parse().ok()).map(Duration::from_millis);
        Self {
            data_dir: vars("HEARTH_DATA_DIR").map(PathBuf::from),
            model: vars("HEARTH_MODEL").map(PathBuf::from),
            models_dir: hearth_engine::paths::models_dir(&vars),
            model_url: text("HEARTH_MODEL_URL"),
            threads: text("HEARTH_THREADS").and_then(|v| v.parse().ok()).filter(|&n: &usize| n > 0),
            isa: text("HEARTH_ISA").and_then(|v| hearth_engine::cpu::isa::Isa::parse(&v)),
            webview_nice: text("HEARTH_WEBVIEW_NICE")
                .and_then(|v| v.parse::<i32>().ok())
                .filter(|n| (0..=19).contains(n))
                .unwrap_or(hearth_worker::priority::WEBVIEW_NICE),
            hub_endpoint: text("HF_ENDPOINT").unwrap_or_else(|| hearth_hub::DEFAULT_ENDPOINT.to_string()),
            hub_token: text("HF_TOKEN"),
            hf_cache: {
                let home =
                    vars("HOME").or_else(|| vars("USERPROFILE")).map_or_else(|| PathBuf::from("."), PathBuf::from);
                hearth_hub::hf_cache_dir(&home, |k| vars(k).map(PathBuf::from))
            },
            other_apps: OtherApps::from_vars(&vars),
            worker: WorkerConfig {
                caches_dir: None,
                device: text("HEARTH_DEVICE"),
                disk_reserve_bytes,
                test_hooks: TestHooks { panic_on: text("HEARTH_TEST_PANIC"), append_pause },
                ..WorkerConfig::default()
            },
        }
    }

    /// Sets what is process-wide (the kernels' threads and ISA), before any
    /// model runs.
    pub fn apply_to_process(&self) {
        if let Some(n) = self.threads {
            hearth_engine::worker_pool::set_threads(n);
        }
        if let Some(cap) = self.isa {
            hearth_engine::cpu::isa::cap_isa(cap);
        }
    }

    /// The data folder: the configured one, else the platform's for Hearth.
    pub fn data_dir(&self) -> AppResult<PathBuf> {
        if let Some(dir) = &self.data_dir {
            return Ok(dir.clone());
        }
        directories::ProjectDirs::from("org", "Hearth", "Hearth")
            .map(|d| d.data_dir().to_path_buf())
            .ok_or_else(|| AppError::new(ErrorKind::Storage, "cannot find a home folder to keep conversations in"))
    }

    /// Where each app keeps its models on this computer.
    pub fn other_apps_places(&self) -> Vec<(hearth_hub::FoundIn, PathBuf)> {
        let Some(home) = &self.other_apps.home else { return Vec::new() };
        let vars = &self.other_apps.vars;
        hearth_hub::default_places(hearth_hub::Platform::this(), home, |k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    /// The default model's file.
    pub fn default_model(&self) -> PathBuf {
        self.models_dir.join(hearth_engine::paths::DEFAULT_MODEL_FILE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_become_the_configuration_and_bad_numbers_their_defaults() {
        let vars = |k: &str| {
            let v = match k {
                "HEARTH_DATA_DIR" => "/data",
                "HEARTH_DISK_RESERVE_MB" => "5",
                "HEARTH_TEST_PANIC" => "boom",
                "HEARTH_TEST_APPEND_PAUSE_MS" => "not a number",
                "HEARTH_MODEL_DIR" => "/models",
                _ => return None,
            };
            Some(OsString::from(v))
        };
        let c = AppConfig::from_vars(vars);
        assert_eq!(c.data_dir.as_deref(), Some(std::path::Path::new("/data")));
        assert_eq!(c.worker.disk_reserve_bytes, 5 << 20);
        assert_eq!(c.worker.test_hooks.panic_on.as_deref(), Some("boom"));
        assert_eq!(c.worker.test_hooks.append_pause, None);
        assert_eq!(c.default_model(), PathBuf::from("/models").join(hearth_engine::paths::DEFAULT_MODEL_FILE));
        let none = AppConfig::from_vars(|_| None);
        assert_eq!(none.worker.disk_reserve_bytes, DEFAULT_DISK_RESERVE);
        assert!(none.model.is_none() && none.worker.device.is_none());
    }
}

/// The home folder and the variables that move other apps' model folders.
#[derive(Debug, Clone, Default)]
pub struct OtherApps {
    pub home: Option<PathBuf>,
    pub vars: Vec<(String, PathBuf)>,
}

impl OtherApps {
    fn from_vars(vars: &impl Fn(&str) -> Option<OsString>) -> Self {
        let home = vars("HOME").or_else(|| vars("USERPROFILE")).map(PathBuf::from);
        let vars = ["OLLAMA_MODELS", "LLAMA_CACHE", "HF_HUB_CACHE", "HF_HOME", "LOCALAPPDATA", "APPDATA"]
            .iter()
            .filter_map(|k| vars(k).filter(|v| !v.is_empty()).map(|v| (k.to_string(), PathBuf::from(v))))
            .collect();
        Self { home, vars }
    }
}
