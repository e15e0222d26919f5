//! The worker thread's state: the model and every conversation's cache,
//! the next work from the queue, and a model's load. What it does with a
//! reply is in the files of their concept, each an `impl WorkerThread`:
//! `running` is the loop that runs replies side by side, `reply` records a
//! reply's end, `replay` starts a replay. This module imports none of
//! them.

use std::panic::catch_unwind;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::Instant;

use hearth_engine::{Engine, EngineError};
use hearth_store::Store;

use crate::caches::Caches;
use crate::config::WorkerConfig;
use crate::error::{AppError, AppResult, ErrorKind};
use crate::events::{GenerationEvent, ModelStatus};
use crate::locks::lock;
use crate::shared::{self, Queued, Shared};
use crate::{panic_message, StatusSink, DEVICE_KEY, LAST_MODEL_KEY, MAX_RUNNING};

pub(crate) enum Work {
    Load(PathBuf),
    ClearCaches,
    Reply(Box<Queued>),
}

pub(crate) struct WorkerThread {
    pub(crate) shared: Arc<Shared>,
    pub(crate) store: Store,
    pub(crate) on_status: StatusSink,
    pub(crate) engine: Option<Arc<Engine>>,
    pub(crate) caches: Caches,
    /// The draft model replies draft with, once one names it.
    pub(crate) drafts: crate::draft_models::DraftModels,
    /// Tells the thread hashing the loaded model's file to give up.
    pub(crate) stop_hashing: Arc<AtomicBool>,
    pub(crate) config: WorkerConfig,
}

impl WorkerThread {
    /// The next work, waiting for it.
    pub(crate) fn next(&self) -> Option<Work> {
        let mut q = lock(&self.shared.queue);
        loop {
            if q.shutdown {
                return None;
            }
            if let Some(path) = q.model.requested.take() {
                q.model.loading = Some(path.clone());
                return Some(Work::Load(path));
            }
            if q.clear_caches {
                return Some(Work::ClearCaches);
            }
            if !q.jobs.is_empty() {
                return Self::pop(q).map(|queued| Work::Reply(Box::new(queued)));
            }
            q = self.shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A reply that can start beside the `running` ones now, if there is
    /// one: never past a model load or a clearing of the caches, which wait
    /// for the running replies to end.
    pub(crate) fn next_beside(&self, running: usize) -> Option<Work> {
        let q = lock(&self.shared.queue);
        if q.shutdown || q.model.requested.is_some() || q.clear_caches || running >= MAX_RUNNING {
            return None;
        }
        Self::pop(q).map(|queued| Work::Reply(Box::new(queued)))
    }

    /// Takes the next reply off the queue `q` guards, then (the lock
    /// released) tells each reply still waiting its new place.
    fn pop(mut q: MutexGuard<'_, shared::Queue>) -> Option<Queued> {
        let queued = q.jobs.pop_front()?;
        q.active.push((queued.owner, queued.cancel.clone()));
        let waiting: Vec<_> = q.jobs.iter().map(|j| j.job.events.clone()).collect();
        drop(q);
        for (i, events) in waiting.iter().enumerate() {
            events(GenerationEvent::Queued { position: i as u32 + 1 });
        }
        Some(queued)
    }

    /// The model replies run on, or why there is none.
    pub(crate) fn loaded_engine(&self) -> AppResult<Arc<Engine>> {
        self.engine
            .clone()
            .ok_or_else(|| AppError::new(ErrorKind::NoModel, "no model is loaded; open a GGUF model first"))
    }

    /// Records the model's status, then (the lock released) tells the UI.
    fn set_status(&self, status: ModelStatus) {
        lock(&self.shared.queue).model.status = status.clone();
        (self.on_status)(&status);
    }

    pub(crate) fn load(&mut self, path: PathBuf) {
        self.stop_hashing.store(true, Ordering::Relaxed);
        self.stop_hashing = Arc::default();
        let shown = path.display().to_string();
        self.set_status(ModelStatus::Loading { path: shown.clone() });
        // Free the old model first: two in memory at once may not fit.
        self.engine = None;
        lock(&self.shared.queue).model.engine = None;
        self.caches.clear_memory();
        self.drafts.clear();
        // The run's device, else the app setting `device`, else auto.
        let choice = self
            .config
            .device
            .clone()
            .or_else(|| self.store.app_setting(DEVICE_KEY).ok().flatten())
            .unwrap_or_default();
        let hooks = &self.config.test_hooks;
        let opened = catch_unwind(|| {
            hooks.panic_if(path.file_name().and_then(|n| n.to_str()).unwrap_or(""));
            choice
                .parse::<hearth_engine::DeviceChoice>()
                .and_then(|c| c.open())
                .and_then(|device| Engine::open_with(&path, &device, self.config.kernels))
        })
        .unwrap_or_else(|panic| {
            Err(EngineError::CorruptModel {
                path: path.clone(),
                reason: format!("opening it failed inside Hearth: {}", panic_message(&*panic)),
            })
        });
        match opened {
            Ok(engine) => {
                let config = engine.model().config();
                let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| shown.clone());
                let status = ModelStatus::Ready {
                    path: shown.clone(),
                    name: name.clone(),
                    architecture: config.architecture.gguf_name().to_string(),
                    context_length: config.context_length as u32,
                    device: hearth_engine::device::describe(engine.model().device()),
                    reasoning: engine.reasoning().map(Into::into),
                };
                let size = engine.file_fingerprint().map_or(0, |(size, _)| size as i64);
                if let Err(e) = self
                    .store
                    .record_model(&shown, &name, size)
                    .and_then(|_| self.store.set_app_setting(LAST_MODEL_KEY, &shown))
                {
                    tracing::warn!("cannot record the model as recent: {e}");
                }
                let engine = Arc::new(engine);
                lock(&self.shared.queue).model.engine = Some(engine.clone());
                if self.config.hash_model_files {
                    self.hash_file(&engine, &shown);
                }
                self.engine = Some(engine);
                self.set_status(status);
            }
            Err(e) => self.set_status(ModelStatus::Failed { path: shown, error: e.into() }),
        }
    }

    /// Gives the engine its file's whole hash, which saved caches need
    /// before they are reused: remembered from an earlier run while the
    /// file's size and time are the same, else computed on a thread of its
    /// own (below the model in priority, given up if another model is
    /// opened) and remembered if the file did not change meanwhile. Until
    /// then caches are written but not read back.
    fn hash_file(&mut self, engine: &Arc<Engine>, path: &str) {
        let Ok(fingerprint) = engine.file_fingerprint() else { return };
        match self.store.model_sha256(path, fingerprint.0, fingerprint.1) {
            Ok(Some(known)) => return engine.set_file_sha256(known),
            Ok(None) => {}
            Err(e) => tracing::warn!("cannot look up the model's hash: {e}"),
        }
        let store = match self.store.reopen() {
            Ok(s) => s,
            Err(e) => return tracing::warn!("cannot hash the model file: {e}"),
        };
        let (engine, stop, shared, path) =
            (engine.clone(), self.stop_hashing.clone(), self.shared.clone(), path.to_string());
        lock(&shared.queue).hashing += 1;
        let hashing = move || {
            crate::priority::lower_this_thread();
            let t = Instant::now();
            match engine.hash_file(&|| stop.load(Ordering::Relaxed)) {
                Ok(Some(sha256)) if engine.file_fingerprint().ok() == Some(fingerprint) => {
                    tracing::info!("hashed the model file in {:.1} s", t.elapsed().as_secs_f64());
                    if let Err(e) = store.set_model_sha256(&path, fingerprint.0, fingerprint.1, &sha256) {
                        tracing::warn!("cannot remember the model's hash: {e}");
                    }
                }
                Ok(Some(_)) => tracing::warn!("the model file changed while it was hashed; not remembering its hash"),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!("cannot hash the model file (its caches will not be reused after a restart): {e}")
                }
            }
            lock(&shared.queue).hashing -= 1;
        };
        if let Err(e) = std::thread::Builder::new().name("hearth-hash".into()).spawn(hashing) {
            tracing::warn!("cannot start hashing the model file: {e}");
            lock(&self.shared.queue).hashing -= 1;
        }
    }
}
