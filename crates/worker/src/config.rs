//! What the binary decides for the worker, read once where the program
//! starts (the app from its environment, the CLI from its flags, tests from
//! their own values) and passed in whole: this crate reads no environment.

use std::path::PathBuf;
use std::time::Duration;

/// The worker's configuration.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Where every conversation's cache is saved after each turn; `None`
    /// keeps caches in memory only.
    pub caches_dir: Option<PathBuf>,
    /// A device chosen for this run (`auto`, `cpu`, `cuda`, `cuda:N`,
    /// `metal`), over the app setting `device`.
    pub device: Option<String>,
    /// Disk space cache files never take: a save that would leave less is
    /// skipped (the conversation itself is never at stake).
    pub disk_reserve_bytes: u64,
    /// The kernels models run with: Hearth's own but for the CLI's device
    /// check, which runs a GPU's graph pass on the CPU.
    pub kernels: hearth_engine::Kernels,
    /// Hash each model file after loading it, on a thread of its own, for
    /// saved caches, bundles and reply records to name it. Off for the CLI,
    /// which saves nothing: reading a large file beside the model would
    /// cost its replies memory bandwidth (a replay hashes when it needs to).
    pub hash_model_files: bool,
    pub test_hooks: TestHooks,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            caches_dir: None,
            device: None,
            disk_reserve_bytes: DEFAULT_DISK_RESERVE,
            kernels: hearth_engine::Kernels::default(),
            hash_model_files: true,
            test_hooks: TestHooks::default(),
        }
    }
}

impl WorkerConfig {
    /// In-memory caches only, every other value its default.
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// Caches saved in `dir`, every other value its default.
    pub fn saving_caches_in(dir: impl Into<PathBuf>) -> Self {
        Self { caches_dir: Some(dir.into()), ..Self::default() }
    }
}

/// 1 GB.
pub const DEFAULT_DISK_RESERVE: u64 = 1 << 30;

/// Ways for tests to reach states no user can make on demand. All off by
/// default; the app sets them only from `HEARTH_TEST_*` variables, which
/// its end-to-end tests use.
#[derive(Debug, Clone, Default)]
pub struct TestHooks {
    /// A reply whose last message (or a model file whose name) is exactly
    /// this panics inside the worker, as a bug would; `"TEXT:after"` panics
    /// after the reply's last token instead.
    pub panic_on: Option<String>,
    /// How long each cache append holds the file ending in part of a chunk,
    /// so a test can show that nothing copies a file mid-append.
    pub append_pause: Option<Duration>,
}

impl TestHooks {
    /// Panics when `subject` is the configured trigger.
    pub(crate) fn panic_if(&self, subject: &str) {
        if self.panic_on.as_deref().is_some_and(|p| !p.is_empty() && p == subject) {
            panic!("test panic for {subject:?}");
        }
    }
}
