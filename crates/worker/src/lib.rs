//! The generation worker: one thread that owns the model and every
//! conversation's `Session`, and runs every local reply through one
//! scheduler (`running`): a chat reply, its variants ("Generate N"), an API
//! request with any number of choices, a continuation and a replay are all
//! replies of one or more sequences, whose decode steps share one forward
//! pass. Remote replies stream on threads of their own (`remote`). A chat
//! reply's tool calls run on the binary's async runtime (`tool_rounds`),
//! and the reply that reads them is queued from there.
//!
//! `shared` is what the thread and the command handles share (the queue,
//! the model's status, one policy for a poisoned lock); `job` is what a
//! reply is asked to do; `reply` is what every reply shares (its prompt,
//! what it has written, how its end is recorded); `replay` starts a replay;
//! `caches` keeps every conversation's KV cache within its `budgets`;
//! `config` is what the binary decided (this crate reads no environment).
//! Nothing a job does stops the thread: a panic fails that job alone.
//!
//! The model never runs on the UI thread or on the async runtime: commands
//! only enqueue. Up to `MAX_RUNNING` replies run side by side; more wait in
//! one FIFO queue (each conversation has at most one reply queued or
//! running, so FIFO is fair), and each waiting reply is told its position.
//! The reply is written to SQLite as it streams, from this thread, so a
//! crash loses at most the last quarter second.

pub mod bundle;
pub mod config;
pub mod context;
pub mod error;
pub mod events;
pub mod history;
pub mod priority;

mod budgets;
mod caches;
mod chat_reply;
mod job;
mod remote;
mod replay;
mod reply;
mod running;
mod shared;
pub mod tool_rounds;

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hearth_engine::{Engine, EngineError};
use hearth_store::Store;

pub use budgets::{total_memory_bytes, CacheBudgets};
pub use caches::CacheState;
pub use chat_reply::ChatReply;
pub use config::{TestHooks, WorkerConfig};
pub use job::{CompiledGrammar, RawPrompt, ReplyJob, Request};
pub use remote::RemoteTarget;
pub use reply::{prompt_ids, Prompt};
pub use tokio_util::sync::{CancellationToken, DropGuard};
pub use tool_rounds::{Offer, ToolDecision, ToolHost, ToolRound};

use crate::error::{AppError, AppResult, ErrorKind};
use crate::events::{GenerationEvent, ModelStatus};
use caches::Caches;
use running::RunningReply;
use shared::{lock, Owner, Queued, Shared};

/// Replies that run side by side, taking turns (each with any number of
/// sequences: variants, an API request's choices).
pub const MAX_RUNNING: usize = 4;

/// App setting: which device runs the model (`auto`, `cpu`, `cuda`, `cuda:N`, `metal`).
pub const DEVICE_KEY: &str = "device";

/// Where a reply's events go (a `Channel` in the app, a closure in tests).
pub type EventSink = Box<dyn Fn(GenerationEvent) + Send + Sync>;
/// Where model status changes go.
pub type StatusSink = Box<dyn Fn(&ModelStatus) + Send>;

/// The handle commands hold.
pub struct Worker {
    shared: Arc<Shared>,
    /// Where remote replies' threads take their database connections from.
    remote_store: std::sync::Mutex<Option<Store>>,
    thread: Option<JoinHandle<()>>,
    config: WorkerConfig,
}

impl Worker {
    /// Starts the worker thread with its own database connection.
    pub fn start(store: Store, config: WorkerConfig, on_status: StatusSink) -> Self {
        let shared = Arc::new(Shared::new());
        let remote_store = std::sync::Mutex::new(
            store.reopen().map_err(|e| tracing::error!("remote replies cannot open the database: {e}")).ok(),
        );
        let caches = Caches::new(shared.clone(), &config);
        let thread_shared = shared.clone();
        let thread_config = config.clone();
        let thread = std::thread::Builder::new()
            .name("hearth-worker".into())
            .spawn(move || {
                WorkerThread {
                    shared: thread_shared,
                    store,
                    on_status,
                    engine: None,
                    caches,
                    stop_hashing: Arc::default(),
                    config: thread_config,
                }
                .run()
            })
            .expect("the worker thread starts");
        Self { shared, remote_store, thread: Some(thread), config }
    }

    /// Each conversation's cache state.
    pub fn cache_states(&self, conversations: &[i64]) -> Vec<(i64, CacheState)> {
        let resident = lock(&self.shared.resident).clone();
        conversations
            .iter()
            .map(|&c| {
                let state = if resident.contains(&c) {
                    CacheState::Warm
                } else if self.config.caches_dir.as_ref().is_some_and(|d| d.join(format!("{c}.session")).is_file()) {
                    CacheState::Saved
                } else {
                    CacheState::Cold
                };
                (c, state)
            })
            .collect()
    }

    /// Writes conversation `id` as a `.hearth` bundle, its saved cache
    /// included; refused while it is generating, and after a cache save in
    /// progress (the reply has ended, the file is still being appended to).
    pub fn export_bundle(&self, store: &Store, id: i64, out: &std::path::Path) -> AppResult<()> {
        if self.busy_conversations().contains(&id) {
            return Err(AppError::new(
                ErrorKind::Busy,
                "this conversation is writing a reply; export it when the reply ends",
            ));
        }
        bundle::export(store, self.config.caches_dir.as_deref(), &self.shared.cache_files, id, out)
    }

    /// Imports a `.hearth` bundle: its conversation, and its cache where the
    /// loaded model is the one that computed it.
    pub fn import_bundle(&self, store: &Store, path: &std::path::Path) -> AppResult<bundle::BundleImport> {
        bundle::import(
            store,
            self.engine().as_deref(),
            self.config.caches_dir.as_deref(),
            self.budgets(),
            self.config.disk_reserve_bytes,
            path,
        )
    }

    pub fn budgets(&self) -> CacheBudgets {
        self.shared.budgets()
    }

    /// The loaded model, for tokenizing (never for running: that is the worker's).
    pub fn engine(&self) -> Option<Arc<Engine>> {
        lock(&self.shared.queue).model.engine.clone()
    }

    /// Takes effect from the next reply.
    pub fn set_budgets(&self, budgets: CacheBudgets) {
        *lock(&self.shared.budgets) = budgets;
    }

    /// Drops every conversation's cache, in memory and on disk, after the
    /// reply in progress.
    pub fn clear_caches(&self) {
        let mut q = lock(&self.shared.queue);
        q.clear_caches = true;
        self.shared.wake.notify_all();
    }

    pub fn model_status(&self) -> ModelStatus {
        lock(&self.shared.queue).model.status.clone()
    }

    /// The model files loaded, being loaded or waiting to load: a file to
    /// leave alone on disk.
    pub fn models_in_use(&self) -> Vec<PathBuf> {
        lock(&self.shared.queue).model.files()
    }

    /// Loads a model after the reply in progress, replacing the current one.
    pub fn load_model(&self, path: PathBuf) {
        let mut q = lock(&self.shared.queue);
        q.model.requested = Some(path);
        self.shared.wake.notify_all();
    }

    /// Queues a reply; refuses a second one for the same conversation.
    pub fn enqueue(&self, job: ReplyJob) -> AppResult<()> {
        self.submit(job).map(drop)
    }

    /// Queues a reply and returns the token that stops it (within one step
    /// when running). An API request's job gets a queue id of its own here,
    /// so any number of requests may wait beside the conversations.
    pub fn submit(&self, job: ReplyJob) -> AppResult<CancellationToken> {
        self.submit_with(job, CancellationToken::new())
    }

    /// `submit`, stopped also when `parent` is (a server shutting down
    /// stops every request it took).
    pub fn submit_under(&self, job: ReplyJob, parent: &CancellationToken) -> AppResult<CancellationToken> {
        self.submit_with(job, parent.child_token())
    }

    fn submit_with(&self, job: ReplyJob, cancel: CancellationToken) -> AppResult<CancellationToken> {
        self.shared.submit(job, cancel, None)
    }

    /// Where chats' tool calls run: the MCP servers, on the binary's async
    /// runtime. Without it a reply's calls are recorded and stay pending.
    pub fn set_tool_host(&self, host: ToolHost) {
        self.shared.tools.set_host(host);
    }

    /// The user's answer to a tool call waiting for approval.
    pub fn decide_tool(&self, conversation_id: i64, call_id: &str, decision: ToolDecision) -> AppResult<()> {
        self.shared.tools.decide(conversation_id, call_id, decision)
    }

    /// Streams a conversation's reply from a remote endpoint, on a thread of
    /// its own with its own database connection; refuses a second reply for
    /// the same conversation, as `enqueue` does. Stop works as for a local
    /// reply (`stop`).
    pub fn start_remote(&self, job: ReplyJob, target: RemoteTarget) -> AppResult<()> {
        let store = match lock(&self.remote_store).as_ref() {
            Some(s) => s.reopen()?,
            None => {
                return Err(AppError::new(
                    ErrorKind::Storage,
                    "remote replies cannot open the database; restart Hearth",
                ))
            }
        };
        let mut q = lock(&self.shared.queue);
        if q.busy(job.conversation_id) {
            return Err(shared::busy());
        }
        let cancel = CancellationToken::new();
        q.remote.push((job.conversation_id, cancel.clone()));
        let shared = self.shared.clone();
        let hooks = self.config.test_hooks.clone();
        let conversation = job.conversation_id;
        let spawned = std::thread::Builder::new()
            .name("hearth-remote-reply".into())
            .spawn(move || remote::run(job, target, store, cancel, shared, hooks));
        if let Err(e) = spawned {
            q.remote.retain(|(c, _)| *c != conversation);
            return Err(AppError::new(ErrorKind::Internal, format!("cannot start the remote reply: {e}")));
        }
        Ok(())
    }

    /// Stops the conversation's reply: the running one within one step, a
    /// queued one at once. Returns whether there was one.
    pub fn stop(&self, conversation_id: i64) -> bool {
        let mut q = lock(&self.shared.queue);
        let owner = Owner::Conversation(conversation_id);
        let running = q.active.iter().find(|(o, _)| *o == owner).map(|(_, c)| c);
        let elsewhere = q.remote.iter().chain(&q.tools).find(|(c, _)| *c == conversation_id).map(|(_, c)| c);
        if let Some(cancel) = running.or(elsewhere) {
            cancel.cancel();
            return true;
        }
        if let Some(i) = q.jobs.iter().position(|j| j.owner == owner) {
            let queued = q.jobs.remove(i).expect("index is in range");
            queued.cancel.cancel();
            // Still handed to the thread, which records the empty reply as stopped.
            q.jobs.push_front(queued);
            self.shared.wake.notify_all();
            return true;
        }
        false
    }

    /// Conversations with a reply queued or running.
    pub fn busy_conversations(&self) -> Vec<i64> {
        let q = lock(&self.shared.queue);
        let conversation = |o: &Owner| match *o {
            Owner::Conversation(c) => Some(c),
            Owner::Request(_) => None,
        };
        q.active
            .iter()
            .filter_map(|(o, _)| conversation(o))
            .chain(q.remote.iter().chain(&q.tools).map(|(c, _)| *c))
            .chain(q.jobs.iter().filter_map(|j| conversation(&j.owner)))
            .collect()
    }

    /// API requests running and waiting now.
    pub fn requests(&self) -> (usize, usize) {
        let q = lock(&self.shared.queue);
        let request = |o: &Owner| matches!(o, Owner::Request(_));
        (q.active.iter().filter(|(o, _)| request(o)).count(), q.jobs.iter().filter(|j| request(&j.owner)).count())
    }

    /// Blocks until nothing is queued or running. For tests and shutdown.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let q = lock(&self.shared.queue);
                if q.active.is_empty()
                    && q.remote.is_empty()
                    && q.tools.is_empty()
                    && q.jobs.is_empty()
                    && q.model.requested.is_none()
                    && q.model.loading.is_none()
                    && !q.clear_caches
                    && q.hashing == 0
                {
                    return true;
                }
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        {
            let mut q = lock(&self.shared.queue);
            q.shutdown = true;
            for (_, c) in &q.active {
                c.cancel();
            }
            self.shared.wake.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum Work {
    Load(PathBuf),
    ClearCaches,
    Reply(Box<Queued>),
}

struct WorkerThread {
    shared: Arc<Shared>,
    store: Store,
    on_status: StatusSink,
    engine: Option<Arc<Engine>>,
    caches: Caches,
    /// Tells the thread hashing the loaded model's file to give up.
    stop_hashing: Arc<AtomicBool>,
    config: WorkerConfig,
}

impl WorkerThread {
    /// Runs work until shutdown. Nothing a job does stops the loop: a panic
    /// fails that job alone (see `reply`, `RunningReply` and `load`), and
    /// this catch is the last resort for one outside them.
    ///
    /// Replies run side by side, up to `MAX_RUNNING`, each advancing one
    /// prefill chunk or one token of each of its sequences in turn; a model
    /// load or clearing the caches waits until none runs.
    fn run(mut self) {
        let mut running: Vec<RunningReply> = Vec::new();
        loop {
            let work = if running.is_empty() {
                match self.next() {
                    Some(w) => Some(w),
                    None => break,
                }
            } else {
                self.next_beside(running.len())
            };
            if let Some(work) = work {
                let (loading, clearing) = (matches!(work, Work::Load(_)), matches!(work, Work::ClearCaches));
                let outcome = catch_unwind(AssertUnwindSafe(|| match work {
                    Work::Load(path) => self.load(path),
                    Work::ClearCaches => self.caches.clear_all(),
                    Work::Reply(queued) => running.extend(self.admit(*queued)),
                }));
                if let Err(panic) = outcome {
                    tracing::error!("the worker recovered from a panic: {}", panic_message(&*panic));
                }
                // A reply's `ActiveJob` frees its conversation, even on a panic.
                let mut q = lock(&self.shared.queue);
                if loading {
                    q.model.loading = None;
                }
                if clearing {
                    q.clear_caches = false;
                }
            }
            // One step each; decode steps as one pass.
            self.advance_all(&mut running);
        }
    }

    /// The next work, waiting for it.
    fn next(&self) -> Option<Work> {
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
    fn next_beside(&self, running: usize) -> Option<Work> {
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
    fn loaded_engine(&self) -> AppResult<Arc<Engine>> {
        self.engine
            .clone()
            .ok_or_else(|| AppError::new(ErrorKind::NoModel, "no model is loaded; open a GGUF model first"))
    }

    /// Records the model's status, then (the lock released) tells the UI.
    fn set_status(&self, status: ModelStatus) {
        lock(&self.shared.queue).model.status = status.clone();
        (self.on_status)(&status);
    }

    fn load(&mut self, path: PathBuf) {
        self.stop_hashing.store(true, Ordering::Relaxed);
        self.stop_hashing = Arc::default();
        let shown = path.display().to_string();
        self.set_status(ModelStatus::Loading { path: shown.clone() });
        // Free the old model first: two in memory at once may not fit.
        self.engine = None;
        lock(&self.shared.queue).model.engine = None;
        self.caches.clear_memory();
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

/// The app-setting key that remembers the last model opened.
pub const LAST_MODEL_KEY: &str = "last_model";

/// The text of a caught panic.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
