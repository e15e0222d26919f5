//! The app's worker, for the commands that generate (`generate`, `chat`,
//! `serve`, `bench` in every mode, `bench-grammar`'s replies, `bench-cache`,
//! `replay`, and `device-check`'s replies and speed figures): the
//! scheduler, the sampler mapping, the caches and the replay that the app
//! and the API run. Over a throwaway database each reply is an API request,
//! so nothing is stored; `bench-cache` keeps the app's storage in a folder
//! of its own. A fix to the worker reaches the CLI, and the benchmarks
//! measure the app's path.

use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use hearth_engine::{paths, ChatMessage, Engine, Kernels};
use hearth_store::{ConversationSettings, ReplayRecord, ReplyStats};
use hearth_worker::events::{GenerationEvent, ModelStatus, ReplayOutcome};
use hearth_worker::{RawPrompt, ReplyJob, Request, Worker, WorkerConfig};

use crate::{CliResult, ModelArgs};

/// The worker with one model loaded.
pub(crate) struct LocalWorker {
    // Declared first, so dropped (joined, unless a server still holds it)
    // before its database's folder goes.
    worker: Arc<Worker>,
    engine: Arc<Engine>,
    _scratch: Option<tempfile::TempDir>,
}

/// Where a `LocalWorker` keeps conversations and their caches.
pub(crate) enum Storage<'a> {
    /// A throwaway database, caches in memory only: every reply a request.
    Scratch,
    /// The app's storage in this folder: a database (`hearth.db`) whose
    /// conversations' caches are saved in `caches/` after each turn, under
    /// the model file's hash.
    In(&'a std::path::Path),
}

/// What a command asks the worker for: one reply of `sequences` sampled
/// from one prompt ("Generate N"), or a replay.
#[derive(Clone)]
pub(crate) struct Ask {
    pub messages: Vec<ChatMessage>,
    pub settings: ConversationSettings,
    pub request: Request,
    pub sequences: usize,
    pub replay: Option<ReplayRecord>,
}

impl Ask {
    /// A reply to `messages` under `settings`.
    pub fn chat(messages: Vec<ChatMessage>, settings: ConversationSettings) -> Self {
        Self { messages, settings, request: Request::default(), sequences: 1, replay: None }
    }

    /// A reply to `ids` read as they are.
    pub fn ids(ids: Vec<u32>, settings: ConversationSettings) -> Self {
        let request = Request { raw_prompt: Some(RawPrompt::Ids(ids)), ..Request::default() };
        Self { request, ..Self::chat(Vec::new(), settings) }
    }

    /// The worker's job for this ask (`ReplyJob::for_request` bounds its sequences).
    fn into_job(self, events: hearth_worker::EventSink) -> ReplyJob {
        let mut job = ReplyJob::for_request(self.messages, self.settings, self.sequences, self.request, events);
        job.replay = self.replay;
        job
    }
}

/// How a reply ended.
pub(crate) struct Reply {
    /// Each sequence's text, variant 0 first.
    pub texts: Vec<String>,
    /// `end_token`, `max_tokens`, `stop_string`, …; empty for a replay.
    pub reason: String,
    /// Each sequence's figures, variant 0 first; none for a replay.
    pub stats: Vec<ReplyStats>,
    pub replayed: Option<ReplayOutcome>,
}

impl Reply {
    /// Sequence `b`'s tokens as sampled, its end token included (from its record).
    pub fn tokens(&self, b: usize) -> Vec<u32> {
        self.stats.get(b).and_then(|s| s.replay.as_ref()).map(|r| r.tokens.clone()).unwrap_or_default()
    }
}

/// A reply queued or running, whose events wait in a channel.
pub(crate) struct Pending {
    events: mpsc::Receiver<GenerationEvent>,
    sequences: usize,
}

impl LocalWorker {
    /// Starts the worker and loads `model` on it (`kernels`: Hearth's own
    /// but for the device check's graph pass on the CPU).
    pub fn open(model: &ModelArgs, kernels: Kernels) -> CliResult<Self> {
        Self::open_with(model, kernels, Storage::Scratch)
    }

    /// `open`, keeping conversations and caches as `storage` says.
    pub fn open_with(model: &ModelArgs, kernels: Kernels, storage: Storage) -> CliResult<Self> {
        crate::set_threads(model)?;
        let device = Some(model.device.clone());
        let (scratch, store, config) = match storage {
            // The worker writes conversations to a database; requests write none.
            Storage::Scratch => {
                let scratch = tempfile::tempdir().map_err(|e| format!("cannot make a scratch folder: {e}"))?;
                let store = hearth_store::Store::open(scratch.path().join("hearth.db"))?;
                let config = WorkerConfig { device, kernels, hash_model_files: false, ..WorkerConfig::in_memory() };
                (Some(scratch), store, config)
            }
            Storage::In(dir) => {
                let store = hearth_store::Store::open(dir.join("hearth.db"))?;
                let config = WorkerConfig { device, kernels, ..WorkerConfig::saving_caches_in(dir.join("caches")) };
                (None, store, config)
            }
        };
        let worker = Arc::new(Worker::start(store, config, Box::new(|_| {})));
        worker.load_model(model_path(model)?);
        loop {
            match worker.model_status() {
                ModelStatus::Ready { .. } => break,
                ModelStatus::Failed { error, .. } => return Err(error.into()),
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        let engine = worker.engine().ok_or("the worker lost its model")?;
        Ok(Self { worker, engine, _scratch: scratch })
    }

    /// The worker itself, for the API server to share.
    pub fn worker(&self) -> Arc<Worker> {
        self.worker.clone()
    }

    /// The loaded model, for tokenizing and for what is not a reply
    /// (scores, a grammar's mask alone).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Waits until the worker is idle (nothing queued, running or clearing),
    /// so a measurement has the CPU.
    pub fn settle(&self) -> CliResult<()> {
        if !self.worker.wait_idle(Duration::from_secs(3600)) {
            return Err("the worker did not come to rest within an hour".into());
        }
        Ok(())
    }

    /// Forgets every cache, so the next reply reads its whole prompt.
    pub fn forget_caches(&self) -> CliResult<()> {
        self.worker.clear_caches();
        self.settle()
    }

    /// Queues `ask`'s reply.
    pub fn submit(&self, ask: Ask) -> CliResult<Pending> {
        let (tx, events) = mpsc::channel();
        let job = ask.into_job(Box::new(move |e| {
            let _ = tx.send(e);
        }));
        let sequences = job.reply_ids().len();
        self.worker.submit(job)?;
        Ok(Pending { events, sequences })
    }

    /// The prompt's token ids as the worker builds them for `ask`.
    pub fn prompt_ids(&self, ask: Ask) -> CliResult<Vec<u32>> {
        let job = ask.into_job(Box::new(|_| {}));
        Ok(hearth_worker::prompt_ids(&self.engine, &job, &job.settings)?.ids)
    }

    /// `ask`'s reply, to its end; `on_text` sees each sequence's text as it comes.
    pub fn reply(&self, ask: Ask, on_text: impl FnMut(usize, &str)) -> CliResult<Reply> {
        self.submit(ask)?.wait(on_text)
    }
}

impl Pending {
    /// The reply's events to its end; `on_text` sees each sequence's text as it comes.
    pub fn wait(self, mut on_text: impl FnMut(usize, &str)) -> CliResult<Reply> {
        let mut reply = Reply {
            texts: vec![String::new(); self.sequences],
            reason: String::new(),
            stats: Vec::new(),
            replayed: None,
        };
        for event in self.events {
            match event {
                GenerationEvent::Tokens { text, variant, .. } => {
                    let b = variant as usize;
                    on_text(b, &text);
                    reply.texts[b].push_str(&text);
                }
                GenerationEvent::Finished { reason, stats, others, .. } => {
                    reply.reason = reason;
                    reply.stats = std::iter::once(stats).chain(others).collect();
                    return Ok(reply);
                }
                GenerationEvent::Replayed { outcome } => {
                    reply.replayed = Some(outcome);
                    return Ok(reply);
                }
                GenerationEvent::Error { error } => return Err(error.into()),
                _ => {}
            }
        }
        Err("the worker dropped the reply without ending it".into())
    }
}

/// `--model` (`hf:ORG/NAME[:QUANT]` from the Hugging Face cache, fetched
/// if it is not there), else the default model.
pub(crate) fn model_path(model: &ModelArgs) -> CliResult<PathBuf> {
    match model.model.as_deref().map(|m| (m, m.to_str().and_then(|s| s.strip_prefix("hf:")))) {
        Some((_, Some(spec))) => crate::pull::resolve(spec),
        Some((path, None)) => Ok(path.to_path_buf()),
        None => Ok(paths::default_model_path(|k| std::env::var_os(k))),
    }
}
