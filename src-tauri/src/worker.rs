//! The generation worker: one thread that owns the model and every
//! conversation's `Session`, and runs one reply at a time.
//!
//! The model never runs on the UI thread or on the async runtime: commands
//! only enqueue. Replies from different conversations wait in one FIFO queue
//! (each conversation has at most one reply queued or running, so FIFO is
//! fair), and each waiting reply is told its position. The reply is written
//! to SQLite as it streams, from this thread, so a crash loses at most the
//! last quarter second.

use std::any::Any;
use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hearth_engine::sampler_loop::PAD;
use hearth_engine::{ChatMessage, Engine, EngineError, FinishReason, SamplingParams, Session};
use hearth_store::{ConversationSettings, MessageStatus, ReplyStats, Store};
use tokio_util::sync::CancellationToken;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::events::{GenerationEvent, ModelStatus};

/// App setting: which device runs the model (`auto`, `cpu`, `cuda`, `cuda:N`, `metal`).
pub const DEVICE_KEY: &str = "device";

/// Where a reply's events go (a `Channel` in the app, a closure in tests).
pub type EventSink = Box<dyn Fn(GenerationEvent) + Send>;
/// Where model status changes go.
pub type StatusSink = Box<dyn Fn(&ModelStatus) + Send>;

/// A reply to write.
pub struct ReplyJob {
    pub conversation_id: i64,
    pub reply_id: i64,
    /// The conversation up to the reply, system prompt first.
    pub messages: Vec<ChatMessage>,
    /// Text the reply already has (when continuing a stopped reply).
    pub prefix: String,
    pub settings: ConversationSettings,
    pub events: EventSink,
}

/// Flush a streaming reply to disk at least this often...
const FLUSH_INTERVAL: Duration = Duration::from_millis(250);
/// ...or after this many tokens, whichever comes first.
const FLUSH_TOKENS: usize = 32;
/// How much memory and disk conversation caches may take. Past either, the
/// least recently used caches go first (from memory they go only to disk,
/// where every finished turn is already saved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct CacheBudgets {
    pub memory_mb: u32,
    /// 0 saves nothing to disk.
    pub disk_mb: u32,
}

impl Default for CacheBudgets {
    /// An eighth of the machine's memory (512 MB to 8 GB; 2 GB where it
    /// cannot be read), and 8 GB of disk.
    fn default() -> Self {
        let memory_mb = total_memory_mb().map_or(2048, |m| (m / 8).clamp(512, 8192));
        Self { memory_mb, disk_mb: 8192 }
    }
}

/// Physical memory in MB, where the platform tells it cheaply.
fn total_memory_mb() -> Option<u32> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()?;
    u32::try_from(kb / 1024).ok()
}

impl CacheBudgets {
    pub fn validate(&self) -> AppResult<()> {
        if !(64..=1 << 20).contains(&self.memory_mb) {
            return Err(AppError::new(ErrorKind::InvalidSettings, "the memory budget must be between 64 MB and 1 TB"));
        }
        if self.disk_mb > 1 << 24 {
            return Err(AppError::new(ErrorKind::InvalidSettings, "the disk budget must be at most 16 TB"));
        }
        Ok(())
    }
}

struct Queued {
    job: ReplyJob,
    cancel: CancellationToken,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Queued>,
    active: Option<(i64, CancellationToken)>,
    load: Option<PathBuf>,
    /// Forget every conversation's cache, in memory and on disk.
    clear_caches: bool,
    /// A model is being loaded now.
    loading: bool,
    shutdown: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    status: Mutex<ModelStatus>,
    /// Conversations whose cache is in memory now.
    resident: Mutex<HashSet<i64>>,
    budgets: Mutex<CacheBudgets>,
    /// The loaded model, shared for counting tokens off the worker thread.
    engine: Mutex<Option<Arc<Engine>>>,
}

/// Where a conversation's KV cache is: the next turn is instant (warm),
/// reads it from disk (saved), or prefills the whole history (cold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub enum CacheState {
    Warm,
    Saved,
    Cold,
}

/// The handle commands hold.
pub struct Worker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    caches_dir: Option<PathBuf>,
}

impl Worker {
    /// Starts the worker thread with its own database connection. Caches
    /// are saved in `caches_dir` after every turn, when it is given.
    pub fn start(store: Store, caches_dir: Option<PathBuf>, on_status: StatusSink) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            wake: Condvar::new(),
            status: Mutex::new(ModelStatus::None),
            resident: Mutex::default(),
            budgets: Mutex::default(),
            engine: Mutex::default(),
        });
        let thread_shared = shared.clone();
        let handle_caches = caches_dir.clone();
        let thread = std::thread::Builder::new()
            .name("hearth-worker".into())
            .spawn(move || {
                WorkerThread { shared: thread_shared, store, on_status, engine: None, sessions: HashMap::new(), tick: 0, caches_dir, saved: HashMap::new(), alternates: HashMap::new(), pending_save: None }.run()
            })
            .expect("the worker thread starts");
        Self { shared, thread: Some(thread), caches_dir: handle_caches }
    }

    /// Each conversation's cache state.
    pub fn cache_states(&self, conversations: &[i64]) -> Vec<(i64, CacheState)> {
        let resident = self.shared.resident.lock().map(|r| r.clone()).unwrap_or_default();
        conversations
            .iter()
            .map(|&c| {
                let state = if resident.contains(&c) {
                    CacheState::Warm
                } else if self.caches_dir.as_ref().is_some_and(|d| d.join(format!("{c}.session")).is_file()) {
                    CacheState::Saved
                } else {
                    CacheState::Cold
                };
                (c, state)
            })
            .collect()
    }

    pub fn budgets(&self) -> CacheBudgets {
        self.shared.budgets.lock().map(|b| *b).unwrap_or_default()
    }

    /// The loaded model, for tokenizing (never for running: that is the worker's).
    pub fn engine(&self) -> Option<Arc<Engine>> {
        self.shared.engine.lock().ok().and_then(|e| e.clone())
    }

    /// Takes effect from the next reply.
    pub fn set_budgets(&self, budgets: CacheBudgets) {
        if let Ok(mut b) = self.shared.budgets.lock() {
            *b = budgets;
        }
    }

    /// Drops every conversation's cache, in memory and on disk, after the
    /// reply in progress.
    pub fn clear_caches(&self) {
        let mut q = self.shared.queue.lock().expect("worker queue");
        q.clear_caches = true;
        self.shared.wake.notify_all();
    }

    pub fn model_status(&self) -> ModelStatus {
        self.shared.status.lock().map(|s| s.clone()).unwrap_or(ModelStatus::None)
    }

    /// Loads a model after the reply in progress, replacing the current one.
    pub fn load_model(&self, path: PathBuf) {
        let mut q = self.shared.queue.lock().expect("worker queue");
        q.load = Some(path);
        self.shared.wake.notify_all();
    }

    /// Queues a reply; refuses a second one for the same conversation.
    pub fn enqueue(&self, job: ReplyJob) -> AppResult<()> {
        let mut q = self.shared.queue.lock()?;
        let busy = q.active.as_ref().is_some_and(|(c, _)| *c == job.conversation_id)
            || q.jobs.iter().any(|j| j.job.conversation_id == job.conversation_id);
        if busy {
            return Err(AppError::new(ErrorKind::Busy, "this conversation is already writing a reply; stop it first"));
        }
        if q.active.is_some() || q.load.is_some() || q.loading || !q.jobs.is_empty() {
            (job.events)(GenerationEvent::Queued { position: q.jobs.len() as u32 + 1 });
        }
        q.jobs.push_back(Queued { job, cancel: CancellationToken::new() });
        self.shared.wake.notify_all();
        Ok(())
    }

    /// Stops the conversation's reply: the running one within one step, a
    /// queued one at once. Returns whether there was one.
    pub fn stop(&self, conversation_id: i64) -> bool {
        let mut q = match self.shared.queue.lock() {
            Ok(q) => q,
            Err(_) => return false,
        };
        if let Some((c, cancel)) = &q.active {
            if *c == conversation_id {
                cancel.cancel();
                return true;
            }
        }
        if let Some(i) = q.jobs.iter().position(|j| j.job.conversation_id == conversation_id) {
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
        let Ok(q) = self.shared.queue.lock() else { return Vec::new() };
        q.active.iter().map(|(c, _)| *c).chain(q.jobs.iter().map(|j| j.job.conversation_id)).collect()
    }

    /// Blocks until nothing is queued or running. For tests and shutdown.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let q = self.shared.queue.lock().expect("worker queue");
                if q.active.is_none() && q.jobs.is_empty() && q.load.is_none() && !q.loading && !q.clear_caches {
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
        if let Ok(mut q) = self.shared.queue.lock() {
            q.shutdown = true;
            if let Some((_, c)) = &q.active {
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
    Reply(Queued),
}

struct WorkerThread {
    shared: Arc<Shared>,
    store: Store,
    on_status: StatusSink,
    engine: Option<Arc<Engine>>,
    /// Each conversation's cache, with when it was last used.
    sessions: HashMap<i64, (Session, u64)>,
    tick: u64,
    caches_dir: Option<PathBuf>,
    /// The tokens each conversation's cache file holds, as written by this process.
    saved: HashMap<i64, Vec<u32>>,
    /// Caches of other versions of each conversation (before an edit or a
    /// switch truncated the main one), so switching back is instant.
    alternates: HashMap<i64, Vec<Session>>,
    /// A conversation whose cache to save once its reply has been reported.
    pending_save: Option<(i64, usize)>,
}

impl WorkerThread {
    /// Runs work until shutdown. Nothing a job does stops the loop: a panic
    /// fails that job alone (see `reply` and `load`), and this catch is the
    /// last resort for one outside them.
    fn run(mut self) {
        while let Some(work) = self.next() {
            let (loading, clearing) = (matches!(work, Work::Load(_)), matches!(work, Work::ClearCaches));
            let outcome = catch_unwind(AssertUnwindSafe(|| match work {
                Work::Load(path) => self.load(path),
                Work::ClearCaches => {
                    self.sessions.clear();
                    self.alternates.clear();
                    self.saved.clear();
                    if let Some(dir) = &self.caches_dir {
                        let _ = std::fs::remove_dir_all(dir);
                    }
                    self.publish_resident();
                }
                Work::Reply(queued) => self.reply(queued),
            }));
            if let Err(panic) = outcome {
                tracing::error!("the worker recovered from a panic: {}", panic_message(&*panic));
            }
            // A reply's `ActiveJob` frees its conversation, even on a panic.
            let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            if loading {
                q.loading = false;
            }
            if clearing {
                q.clear_caches = false;
            }
        }
    }

    fn next(&self) -> Option<Work> {
        let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if q.shutdown {
                return None;
            }
            if let Some(path) = q.load.take() {
                q.loading = true;
                return Some(Work::Load(path));
            }
            if q.clear_caches {
                return Some(Work::ClearCaches);
            }
            if let Some(queued) = q.jobs.pop_front() {
                q.active = Some((queued.job.conversation_id, queued.cancel.clone()));
                for (i, waiting) in q.jobs.iter().enumerate() {
                    (waiting.job.events)(GenerationEvent::Queued { position: i as u32 + 1 });
                }
                return Some(Work::Reply(queued));
            }
            q = self.shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn set_status(&self, status: ModelStatus) {
        (self.on_status)(&status);
        if let Ok(mut s) = self.shared.status.lock() {
            *s = status;
        }
    }

    fn load(&mut self, path: PathBuf) {
        let shown = path.display().to_string();
        self.set_status(ModelStatus::Loading { path: shown.clone() });
        // Free the old model first: two in memory at once may not fit.
        self.engine = None;
        if let Ok(mut e) = self.shared.engine.lock() {
            *e = None;
        }
        self.sessions.clear();
        self.alternates.clear();
        self.saved.clear();
        self.publish_resident();
        // HEARTH_DEVICE, else the app setting `device`, else auto.
        let choice = std::env::var("HEARTH_DEVICE").ok().or_else(|| self.store.app_setting(DEVICE_KEY).ok().flatten()).unwrap_or_default();
        let opened = catch_unwind(|| {
            test_panic_hook(path.file_name().and_then(|n| n.to_str()).unwrap_or(""));
            choice.parse::<hearth_engine::DeviceChoice>().and_then(|c| c.open()).and_then(|device| Engine::open_on(&path, &device))
        })
        .unwrap_or_else(|panic| Err(EngineError::CorruptModel { path: path.clone(), reason: format!("opening it failed inside Hearth: {}", panic_message(&*panic)) }));
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
                };
                let size = std::fs::metadata(&path).map(|m| m.len() as i64).unwrap_or(0);
                if let Err(e) = self.store.record_model(&shown, &name, size).and_then(|_| self.store.set_app_setting(LAST_MODEL_KEY, &shown)) {
                    tracing::warn!("cannot record the model as recent: {e}");
                }
                let engine = Arc::new(engine);
                if let Ok(mut e) = self.shared.engine.lock() {
                    *e = Some(engine.clone());
                }
                self.engine = Some(engine);
                self.set_status(status);
            }
            Err(e) => self.set_status(ModelStatus::Failed { path: shown, error: e.into() }),
        }
    }

    fn reply(&mut self, queued: Queued) {
        let Queued { job, cancel } = queued;
        let active = ActiveJob { shared: self.shared.clone(), conversation_id: job.conversation_id };
        let events = &job.events;
        let mut text = job.prefix.clone();
        let result = if cancel.is_cancelled() {
            Ok(Finished::stopped_before_start(&job.prefix))
        } else {
            catch_unwind(AssertUnwindSafe(|| self.generate(&job, &cancel, &mut text))).unwrap_or_else(|panic| {
                let message = panic_message(&*panic);
                tracing::error!("reply {} in conversation {} panicked: {message}", job.reply_id, job.conversation_id);
                // Its cache may be half written: this conversation starts cold.
                self.forget(job.conversation_id);
                Err(AppError::new(ErrorKind::Internal, format!("this reply stopped on an internal error ({message}); other conversations are unaffected")))
            })
        };
        // The conversation is free again before anyone hears the reply ended,
        // so an immediate next message is not refused as busy.
        drop(active);
        match result {
            Ok(done) => {
                let status = if done.reason == FinishReason::Cancelled { MessageStatus::Interrupted } else { MessageStatus::Complete };
                let saved = self.store.update_reply(job.reply_id, &done.text, status, Some(&done.stats));
                // Saved before the reply is reported done, so an app closed
                // right after still finds its cache.
                self.save_pending();
                match saved {
                    Ok(()) => events(GenerationEvent::Finished { reason: done.reason.as_str().to_string(), stats: done.stats }),
                    Err(e) => events(GenerationEvent::Error { error: e.into() }),
                }
            }
            Err(error) => {
                let stats = ReplyStats { finish_reason: "error".into(), error: Some(error.message.clone()), ..Default::default() };
                let status = if text.is_empty() { MessageStatus::Error } else { MessageStatus::Interrupted };
                if let Err(e) = self.store.update_reply(job.reply_id, &text, status, Some(&stats)) {
                    tracing::error!("cannot record a failed reply: {e}");
                }
                events(GenerationEvent::Error { error });
            }
        }
    }

    /// Runs one reply, keeping the text written so far in `text` (which
    /// starts as the job's prefix).
    fn generate(&mut self, job: &ReplyJob, cancel: &CancellationToken, text: &mut String) -> Result<Finished, AppError> {
        let engine = self.engine.as_ref().ok_or_else(|| AppError::new(ErrorKind::NoModel, "no model is loaded; open a GGUF model first"))?;
        (job.events)(GenerationEvent::Started { reply_id: job.reply_id });
        test_panic_hook(job.messages.last().map_or("", |m| m.content.as_str()));
        let s = &job.settings;
        let (context, reserve) = crate::context::window(s, engine.model().config().context_length);
        let fitted = crate::context::fit(&job.messages, s.overflow, context, reserve, |m| engine.encode_chat(m).map(|ids| ids.len()))?;
        let mut prompt = engine.encode_chat(&fitted.messages)?;
        if !job.prefix.is_empty() {
            prompt.extend(engine.tokenizer().encode(&job.prefix, false, false)?);
        }
        if prompt.len() >= context {
            return Err(AppError::new(
                ErrorKind::PromptTooLong,
                format!("the conversation is {} tokens long but the context holds {context}; start a new conversation or raise the context length", prompt.len()),
            ));
        }

        self.tick += 1;
        let tick = self.tick;
        let mut entry = self.sessions.remove(&job.conversation_id).filter(|(s, _)| s.context_length() == context).map(|(s, _)| s);
        if entry.is_none() {
            entry = self.restore(job.conversation_id, context);
        }
        self.pick_branch(job.conversation_id, &mut entry, &prompt, context);
        let engine = self.engine.as_ref().expect("checked above");
        let session = entry.get_or_insert_with(|| engine.new_session(Some(context)));
        let seed = s.seed.unwrap_or_else(random_seed);
        let sampling = SamplingParams {
            temperature: s.temperature,
            top_k: (s.top_k > 0).then_some(s.top_k as usize),
            top_p: s.top_p,
            min_p: s.min_p,
            repeat_penalty: s.repeat_penalty,
            penalty_window: s.penalty_window as usize,
            seed: seed as u64,
            ..SamplingParams::default()
        };
        let mut config = engine.generation_config(sampling, s.max_new_tokens as usize);
        config.stop_strings = s.stop_strings.clone();

        let outcome = (|| -> Result<Finished, AppError> {
            // Stop is checked between the prefill's chunks too.
            let mut progress = |p: hearth_engine::Progress| {
                (job.events)(GenerationEvent::Prefill { done: p.done as u32, total: p.total as u32 });
                !cancel.is_cancelled()
            };
            let mut turn = match session.start_turn_observed(engine.model(), engine.tokenizer(), &prompt, config, 1, &mut progress) {
                Err(EngineError::Stopped) => return Ok(Finished::stopped_before_start(&job.prefix)),
                started => started?,
            };
            let mut unsaved = 0usize;
            let mut last_flush = Instant::now();
            loop {
                let step = if cancel.is_cancelled() { Some(turn.cancel()) } else { turn.step()? };
                let Some(step) = step else { break };
                for e in step.into_iter().filter(|e| e.sequence == 0) {
                    // A stop flushes held-back text with no token of its own.
                    let id = (e.token != PAD).then_some(e.token);
                    if id.is_none() && e.text.is_empty() {
                        continue;
                    }
                    text.push_str(&e.text);
                    unsaved += 1;
                    (job.events)(GenerationEvent::Token { text: e.text, id });
                }
                if cancel.is_cancelled() && turn.state().done[0] {
                    break;
                }
                if unsaved >= FLUSH_TOKENS || last_flush.elapsed() >= FLUSH_INTERVAL {
                    self.store.update_reply(job.reply_id, &text, MessageStatus::Streaming, None)?;
                    unsaved = 0;
                    last_flush = Instant::now();
                }
            }
            let out = turn.finish(0)?;
            let seq = &out.sequences[0];
            let st = &out.stats;
            let decode_s = st.decode_time.as_secs_f64();
            Ok(Finished {
                text: format!("{}{}", job.prefix, seq.text),
                reason: seq.finish,
                stats: ReplyStats {
                    prompt_tokens: st.prompt_tokens as u32,
                    processed_tokens: st.processed_tokens as u32,
                    generated_tokens: st.generated_tokens as u32,
                    ttft_ms: st.time_to_first_token.as_secs_f64() * 1e3,
                    tokens_per_s: if decode_s > 0.0 { st.generated_tokens.saturating_sub(1) as f64 / decode_s } else { 0.0 },
                    finish_reason: seq.finish.as_str().to_string(),
                    seed: Some(seed),
                    temperature: Some(s.temperature),
                    error: None,
                    dropped_messages: fitted.dropped as u32,
                },
            })
        })();
        if let Some(session) = entry {
            if outcome.is_ok() {
                self.pending_save = Some((job.conversation_id, context));
            }
            self.sessions.insert(job.conversation_id, (session, tick));
            self.evict();
        }
        self.publish_resident();
        outcome
    }

    /// Forgets a conversation's caches in memory and on disk.
    fn forget(&mut self, conversation_id: i64) {
        self.sessions.remove(&conversation_id);
        self.alternates.remove(&conversation_id);
        self.saved.remove(&conversation_id);
        if self.pending_save.is_some_and(|(c, _)| c == conversation_id) {
            self.pending_save = None;
        }
        if let Some(path) = self.cache_path(conversation_id) {
            let _ = std::fs::remove_file(path);
        }
        self.publish_resident();
    }

    /// Makes `current` the cache (among the conversation's main one and its
    /// alternates) sharing the longest prefix with `prompt`, and keeps a
    /// copy-on-write clone of a cache this turn would truncate.
    fn pick_branch(&mut self, conversation_id: i64, current: &mut Option<Session>, prompt: &[u32], context: usize) {
        let common = |s: &Session| s.tokens().iter().zip(prompt).take_while(|(a, b)| a == b).count();
        let alts = self.alternates.entry(conversation_id).or_default();
        alts.retain(|s| s.context_length() == context);
        let best_current = current.as_ref().map_or(0, |s| common(s));
        let best_alt = alts.iter().enumerate().map(|(i, s)| (i, common(s))).max_by_key(|(_, n)| *n);
        if let Some((i, n)) = best_alt {
            if n > best_current {
                let alt = alts.remove(i);
                if let Some(old) = current.replace(alt) {
                    alts.push(old);
                }
            }
        }
        if let Some(cur) = current.as_ref() {
            let n = common(cur);
            // Only a real fork is worth keeping: more than the last token differs.
            if n > 0 && n + 1 < cur.tokens().len() {
                alts.push(cur.clone());
            }
        }
        const KEEP: usize = 3;
        if alts.len() > KEEP {
            alts.drain(..alts.len() - KEEP);
        }
    }

    fn save_pending(&mut self) {
        if let Some((conversation, context)) = self.pending_save.take() {
            if let Some((session, tick)) = self.sessions.remove(&conversation) {
                self.save(conversation, &session, context);
                self.sessions.insert(conversation, (session, tick));
            }
        }
    }

    fn publish_resident(&self) {
        if let Ok(mut r) = self.shared.resident.lock() {
            *r = self.sessions.keys().copied().collect();
        }
    }

    fn cache_path(&self, conversation_id: i64) -> Option<PathBuf> {
        self.caches_dir.as_ref().map(|d| d.join(format!("{conversation_id}.session")))
    }

    /// The conversation's saved cache, if there is one made with this model
    /// and context length; anything else is deleted (the history is then
    /// prefilled again, which gives the same output).
    fn restore(&mut self, conversation_id: i64, context: usize) -> Option<Session> {
        let path = self.cache_path(conversation_id)?;
        if !path.exists() {
            return None;
        }
        let engine = self.engine.as_ref()?;
        let restored = engine.cache_identity(context).and_then(|id| hearth_engine::session_file::read(&path, &id, engine.model()));
        match restored {
            Ok(r) => {
                if r.complete {
                    self.saved.insert(conversation_id, r.session.tokens().to_vec());
                } else {
                    // Keep what verified; the next save rewrites the file whole.
                    tracing::warn!("cache for conversation {conversation_id} was damaged; kept {} verified tokens", r.session.tokens().len());
                    self.saved.remove(&conversation_id);
                }
                Some(r.session)
            }
            Err(e) => {
                tracing::info!("discarding cache for conversation {conversation_id}: {e}");
                let _ = std::fs::remove_file(&path);
                self.saved.remove(&conversation_id);
                None
            }
        }
    }

    /// Appends what the turn added to the conversation's cache file, or
    /// rewrites it when the conversation branched to an earlier point.
    fn save(&mut self, conversation_id: i64, session: &Session, context: usize) {
        let (Some(path), Some(engine)) = (self.cache_path(conversation_id), self.engine.as_ref()) else { return };
        if self.budgets().disk_mb == 0 {
            let _ = std::fs::remove_file(&path);
            self.saved.remove(&conversation_id);
            return;
        }
        let tokens = session.tokens();
        let result = match self.saved.get(&conversation_id) {
            Some(prev) if tokens.starts_with(prev) && path.exists() => hearth_engine::session_file::append(&path, session, prev.len()),
            _ => {
                if let Some(dir) = path.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                engine.cache_identity(context).and_then(|id| hearth_engine::session_file::write(&path, &id, session))
            }
        };
        match result {
            Ok(()) => {
                self.saved.insert(conversation_id, tokens.to_vec());
                self.enforce_disk_budget(&path);
            }
            Err(e) => {
                // A full disk costs only the cache, never the conversation.
                tracing::warn!("cannot save the cache of conversation {conversation_id}: {e}");
                let _ = std::fs::remove_file(&path);
                self.saved.remove(&conversation_id);
            }
        }
    }

    fn budgets(&self) -> CacheBudgets {
        self.shared.budgets.lock().map(|b| *b).unwrap_or_default()
    }

    /// Drops least recently used caches from memory until the rest fit the
    /// budget; the most recent one always stays.
    fn evict(&mut self) {
        let budget = self.budgets().memory_mb as usize * (1 << 20);
        let sum = |w: &WorkerThread| -> usize {
            w.sessions.values().map(|(s, _)| s.cache().allocated_bytes()).sum::<usize>()
                + w.alternates.values().flatten().map(|s| s.cache().allocated_bytes()).sum::<usize>()
        };
        // Other versions go first, oldest conversation first.
        while sum(self) > budget {
            let oldest = self
                .alternates
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .min_by_key(|(c, _)| self.sessions.get(c).map_or(0, |(_, t)| *t))
                .map(|(c, _)| *c);
            match oldest.and_then(|c| self.alternates.get_mut(&c)) {
                Some(v) => {
                    v.remove(0);
                }
                None => break,
            }
        }
        loop {
            let used: usize = self.sessions.values().map(|(s, _)| s.cache().allocated_bytes()).sum();
            if used <= budget || self.sessions.len() <= 1 {
                break;
            }
            let oldest = self.sessions.iter().min_by_key(|(_, (_, t))| *t).map(|(c, _)| *c);
            match oldest {
                Some(c) => {
                    self.sessions.remove(&c);
                    self.alternates.remove(&c);
                }
                None => break,
            };
        }
    }

    /// Deletes the least recently written cache files until the rest fit the
    /// disk budget, never `keep`.
    fn enforce_disk_budget(&mut self, keep: &Path) {
        let Some(dir) = &self.caches_dir else { return };
        let budget = self.budgets().disk_mb as u64 * (1 << 20);
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= budget {
                break;
            }
            if path == keep {
                continue;
            }
            let _ = std::fs::remove_file(&path);
            let id = path.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse::<i64>().ok());
            if let Some(id) = id {
                self.saved.remove(&id);
            }
            total -= len;
        }
    }
}

struct Finished {
    text: String,
    reason: FinishReason,
    stats: ReplyStats,
}

impl Finished {
    fn stopped_before_start(prefix: &str) -> Self {
        Self {
            text: prefix.to_string(),
            reason: FinishReason::Cancelled,
            stats: ReplyStats { finish_reason: FinishReason::Cancelled.as_str().into(), ..Default::default() },
        }
    }
}

/// The app-setting key that remembers the last model opened.
pub const LAST_MODEL_KEY: &str = "last_model";

/// Marks a conversation free when its reply ends, however it ends.
struct ActiveJob {
    shared: Arc<Shared>,
    conversation_id: i64,
}

impl Drop for ActiveJob {
    fn drop(&mut self) {
        let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.active.as_ref().is_some_and(|(c, _)| *c == self.conversation_id) {
            q.active = None;
        }
    }
}

/// The text of a caught panic.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_else(|| "unknown panic".into())
}

/// Test-only: with `HEARTH_TEST_PANIC` set, a reply whose last message is
/// exactly its value, or a model file of that name, panics here, so the
/// tests can show that a panic fails that job alone.
fn test_panic_hook(subject: &str) {
    if std::env::var("HEARTH_TEST_PANIC").is_ok_and(|v| !v.is_empty() && v == subject) {
        panic!("injected by HEARTH_TEST_PANIC");
    }
}

fn random_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS; mixing in the time makes each call differ.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish() as u32
}
