//! The generation worker: one thread that owns the model and every
//! conversation's `Session`, and runs every local reply through one
//! scheduler (`running`): a chat reply, its variants ("Generate N"), an API
//! request with any number of choices, a continuation and a replay are all
//! replies of one or more sequences, whose decode steps share one forward
//! pass. Remote replies stream on threads of their own (`remote`). A chat
//! reply's tool calls run on the binary's async runtime (`tool_rounds`),
//! and the reply that reads them is queued from there.
//!
//! `thread` is the worker thread's loop; `shared` is what the thread and
//! the command handles share (the queue, the model's status), each lock
//! taken by `locks`' one policy for a poisoned lock; `job` is what a reply
//! is asked to do; `tool_offer` is what a reply's tools are and
//! `tool_rounds` runs their calls; `reply` is what every reply shares (its prompt,
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
mod draft_models;
mod job;
mod locks;
mod remote;
mod replay;
mod reply;
mod running;
mod shared;
mod thread;
pub mod tool_offer;
mod tool_rounds;

use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hearth_engine::Engine;
use hearth_store::Store;

pub use budgets::{total_memory_bytes, CacheBudgets};
pub use caches::CacheState;
pub use chat_reply::ChatReply;
pub use config::{TestHooks, WorkerConfig};
pub use job::{CompiledGrammar, RawPrompt, ReplyJob, Request};
pub use remote::RemoteTarget;
pub use reply::{prompt_ids, Prompt};
pub use shared::RequestCache;
pub use tokio_util::sync::{CancellationToken, DropGuard};
pub use tool_offer::{Offer, ToolDecision, ToolHost, ToolRound};

use crate::error::{AppError, AppResult, ErrorKind};
use crate::events::{GenerationEvent, ModelStatus};
use caches::Caches;
use locks::lock;
use shared::{Owner, Shared};
use thread::WorkerThread;

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
                    drafts: Default::default(),
                    stop_hashing: Arc::default(),
                    config: thread_config,
                }
                .run()
            })
            .expect("the worker thread starts");
        Self { shared, remote_store, thread: Some(thread), config }
    }

    /// The API clients' caches in memory, most recently used first.
    pub fn request_caches(&self) -> Vec<RequestCache> {
        lock(&self.shared.request_caches).clone()
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
