//! What the worker thread and the command handles share: the queue of
//! replies, the model's status, and the caches' budgets. Every lock here is
//! taken through [`lock`] (see `locks.rs` for why).

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

use hearth_engine::Engine;
use tokio_util::sync::CancellationToken;

use super::budgets::CacheBudgets;
use super::job::ReplyJob;
use super::tool_offer::ToolRounds;
use super::MAX_RUNNING;
use crate::error::{AppError, AppResult, ErrorKind};
use crate::events::{GenerationEvent, ModelStatus};
use crate::locks::lock;

/// The error for a second reply in a conversation that is writing one.
pub(crate) fn busy() -> AppError {
    AppError::new(ErrorKind::Busy, "this conversation is already writing a reply; stop it first")
}

/// Who a reply is for: a conversation, or an API client's request (which
/// has no conversation; each gets an id of its own when it is queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Conversation(i64),
    Request(u64),
}

/// An API client's cache as the Local API server panel lists it: each
/// holds one client's conversation so far, reused by its next request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct RequestCache {
    /// The positions it holds.
    pub tokens: u32,
    /// Its keys and values (and a hybrid's recurrent states) in memory.
    #[cfg_attr(feature = "ipc", ts(type = "number"))]
    pub bytes: u64,
    /// When a request last gave it back, in ms since the Unix epoch.
    #[cfg_attr(feature = "ipc", ts(type = "number"))]
    pub last_used_ms: u64,
}

/// State shared between the `Worker` handle and its thread.
pub(super) struct Shared {
    pub queue: Mutex<Queue>,
    pub wake: Condvar,
    /// Conversations whose cache is in memory now.
    pub resident: Mutex<HashSet<i64>>,
    /// API clients' caches in memory now, most recently used first.
    pub request_caches: Mutex<Vec<RequestCache>>,
    pub budgets: Mutex<CacheBudgets>,
    /// Held while a cache file is written and while one is copied into a
    /// bundle: a reply's cache is saved just after its conversation is free
    /// again, and a copy taken then would end in half a chunk.
    pub cache_files: Mutex<()>,
    /// Chats' tool calls: where they run, and the approvals asked for.
    pub tools: ToolRounds,
}

impl Shared {
    pub fn new() -> Self {
        Self {
            queue: Mutex::default(),
            wake: Condvar::new(),
            resident: Mutex::default(),
            request_caches: Mutex::default(),
            budgets: Mutex::default(),
            cache_files: Mutex::default(),
            tools: ToolRounds::default(),
        }
    }

    /// Queues a reply, stopped by `cancel`; refuses a second one for the
    /// same conversation. An API request's job gets a queue id of its own
    /// here, so any number of requests may wait beside the conversations.
    /// `after_calls`: the conversation whose tool calls this reply reads;
    /// it moves from those calls to this reply under one lock.
    pub fn submit(
        &self,
        job: ReplyJob,
        cancel: CancellationToken,
        after_calls: Option<i64>,
    ) -> AppResult<CancellationToken> {
        let mut q = lock(&self.queue);
        let owner = match job.request {
            Some(_) => {
                q.last_request_id += 1;
                Owner::Request(q.last_request_id)
            }
            None => Owner::Conversation(job.conversation_id),
        };
        if let Some(c) = after_calls {
            // Stopped after its calls: the reply that reads them is recorded as stopped.
            if q.tools.iter().any(|(t, stop)| *t == c && stop.is_cancelled()) {
                cancel.cancel();
            }
            q.tools.retain(|(t, _)| *t != c);
        }
        if q.busy(job.conversation_id) && job.request.is_none() {
            return Err(busy());
        }
        let must_wait = q.active.len() >= MAX_RUNNING;
        let position = (must_wait || q.model.requested.is_some() || q.model.loading.is_some() || !q.jobs.is_empty())
            .then_some(q.jobs.len() as u32 + 1);
        let events = Arc::clone(&job.events);
        q.jobs.push_back(Queued { job, owner, cancel: cancel.clone() });
        self.wake.notify_all();
        drop(q);
        // Told after the lock is released: a sink may take its time.
        if let Some(position) = position {
            events(GenerationEvent::Queued { position });
        }
        Ok(cancel)
    }

    pub fn budgets(&self) -> CacheBudgets {
        *lock(&self.budgets)
    }
}

/// Work waiting for the thread. Each conversation has at most one reply
/// queued or running, so FIFO order is fair.
#[derive(Default)]
pub(super) struct Queue {
    pub jobs: VecDeque<Queued>,
    /// Replies running now (several take turns), by owner.
    pub active: Vec<(Owner, CancellationToken)>,
    /// Replies streaming from remote endpoints, on threads of their own.
    pub remote: Vec<(i64, CancellationToken)>,
    /// Conversations whose reply's tool calls wait for approval or run
    /// (`tool_rounds`), each with what stops them.
    pub tools: Vec<(i64, CancellationToken)>,
    /// The model's lifecycle, under the same lock as the replies waiting for it.
    pub model: ModelLifecycle,
    /// Forget every conversation's cache, in memory and on disk.
    pub clear_caches: bool,
    /// Threads hashing a model file (at most one but for a moment after
    /// another model is opened).
    pub hashing: usize,
    pub shutdown: bool,
    /// The id the last API request got.
    pub last_request_id: u64,
}

/// The model's lifecycle in one place: the file asked for, the file being
/// loaded, what the UI is told, and the model loaded. Read under one lock,
/// a file is never out of all of them while it is in use.
#[derive(Default)]
pub(super) struct ModelLifecycle {
    /// A model file to load once the running replies end.
    pub requested: Option<PathBuf>,
    /// The file being loaded now, from the moment it leaves `requested`
    /// until its load ends (and `status` names it or its failure).
    pub loading: Option<PathBuf>,
    pub status: ModelStatus,
    /// The loaded model, shared for counting tokens off the worker thread.
    pub engine: Option<Arc<Engine>>,
}

impl ModelLifecycle {
    /// The model files loaded, being loaded or waiting to load.
    pub fn files(&self) -> Vec<PathBuf> {
        let shown = match &self.status {
            ModelStatus::Ready { path, .. } | ModelStatus::Loading { path } => Some(PathBuf::from(path)),
            _ => None,
        };
        shown.into_iter().chain(self.requested.iter().cloned()).chain(self.loading.iter().cloned()).collect()
    }
}

impl Queue {
    /// Whether the conversation has a reply queued, running, streaming
    /// from a remote endpoint, or tool calls waiting or running: its one
    /// "busy".
    pub fn busy(&self, conversation_id: i64) -> bool {
        let owner = Owner::Conversation(conversation_id);
        self.active.iter().any(|(o, _)| *o == owner)
            || self.remote.iter().any(|(c, _)| *c == conversation_id)
            || self.tools.iter().any(|(c, _)| *c == conversation_id)
            || self.jobs.iter().any(|j| j.owner == owner)
    }
}

pub(super) struct Queued {
    pub job: ReplyJob,
    pub owner: Owner,
    pub cancel: CancellationToken,
}

/// Marks a reply's owner free when the reply ends, however it ends.
pub(super) struct ActiveJob {
    pub shared: Arc<Shared>,
    pub owner: Owner,
}

impl Drop for ActiveJob {
    fn drop(&mut self) {
        lock(&self.shared.queue).active.retain(|(o, _)| *o != self.owner);
    }
}
