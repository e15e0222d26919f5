//! What the worker thread and the command handles share: the queue of
//! replies, the model's status, and the caches' budgets.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

use hearth_engine::Engine;
use tokio_util::sync::CancellationToken;

use super::caches::CacheBudgets;
use super::reply::ReplyJob;
use crate::events::ModelStatus;

/// State shared between the `Worker` handle and its thread.
pub(super) struct Shared {
    pub queue: Mutex<Queue>,
    pub wake: Condvar,
    pub status: Mutex<ModelStatus>,
    /// Conversations whose cache is in memory now.
    pub resident: Mutex<HashSet<i64>>,
    pub budgets: Mutex<CacheBudgets>,
    /// The loaded model, shared for counting tokens off the worker thread.
    pub engine: Mutex<Option<Arc<Engine>>>,
    /// Held while a cache file is written and while one is copied into a
    /// bundle: a reply's cache is saved just after its conversation is free
    /// again, and a copy taken then would end in half a chunk.
    pub cache_files: Mutex<()>,
}

impl Shared {
    pub fn new() -> Self {
        Self {
            queue: Mutex::default(),
            wake: Condvar::new(),
            status: Mutex::new(ModelStatus::None),
            resident: Mutex::default(),
            budgets: Mutex::default(),
            engine: Mutex::default(),
            cache_files: Mutex::default(),
        }
    }

    pub fn budgets(&self) -> CacheBudgets {
        self.budgets.lock().map(|b| *b).unwrap_or_default()
    }
}

/// Work waiting for the thread. Each conversation has at most one reply
/// queued or running, so FIFO order is fair.
#[derive(Default)]
pub(super) struct Queue {
    pub jobs: VecDeque<Queued>,
    /// Replies running now (several take turns), by conversation.
    pub active: Vec<(i64, CancellationToken)>,
    /// Replies streaming from remote endpoints, on threads of their own.
    pub remote: Vec<(i64, CancellationToken)>,
    /// The running job needs the thread alone ("Generate N", a replay).
    pub alone: bool,
    pub load: Option<PathBuf>,
    /// Forget every conversation's cache, in memory and on disk.
    pub clear_caches: bool,
    /// The model file being loaded now (held here from the moment the
    /// worker takes it off `load` until the load ends, so the file is never
    /// out of both while its status still names the one before).
    pub loading: Option<PathBuf>,
    /// Threads hashing a model file (at most one but for a moment after
    /// another model is opened).
    pub hashing: usize,
    pub shutdown: bool,
    /// The queue id the last API request got (they count down from -1, apart
    /// from conversations' positive ids).
    pub last_request_id: i64,
}

impl Queue {
    /// Whether the conversation has a reply queued, running, or streaming
    /// from a remote endpoint.
    pub fn busy(&self, conversation_id: i64) -> bool {
        self.active.iter().chain(&self.remote).any(|(c, _)| *c == conversation_id)
            || self.jobs.iter().any(|j| j.job.conversation_id == conversation_id)
    }
}

pub(super) struct Queued {
    pub job: ReplyJob,
    pub cancel: CancellationToken,
}

/// Marks a conversation free when its reply ends, however it ends.
pub(super) struct ActiveJob {
    pub shared: Arc<Shared>,
    pub conversation_id: i64,
}

impl Drop for ActiveJob {
    fn drop(&mut self) {
        let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.active.retain(|(c, _)| *c != self.conversation_id);
        if q.active.is_empty() {
            q.alone = false;
        }
    }
}
