//! The generation worker on the real default model: streaming, saving as it
//! streams, stopping within a step, queueing, and cache reuse across turns.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use hearth_engine::ChatMessage;
use hearth_store::{ConversationSettings, MessageStatus, Role, Store};
use hearth_worker::events::{GenerationEvent, ModelStatus};
use hearth_worker::{ReplyJob, TestHooks, Worker, WorkerConfig};

#[path = "worker/caches.rs"]
mod caches;
#[path = "worker/generate_n.rs"]
mod generate_n;
#[path = "worker/models.rs"]
mod models;
#[path = "worker/panics.rs"]
mod panics;
#[path = "worker/replays.rs"]
mod replays;
#[path = "worker/requests.rs"]
mod requests;
#[path = "worker/side_by_side.rs"]
mod side_by_side;
#[path = "worker/single_reply.rs"]
mod single_reply;
#[path = "worker/speculation.rs"]
mod speculation;
#[path = "worker/tool_use.rs"]
mod tool_use;

fn start() -> (tempfile::TempDir, Store, Worker) {
    start_on(None)
}

/// A worker on `model` (the default model where `None`).
fn start_on(model: Option<PathBuf>) -> (tempfile::TempDir, Store, Worker) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hearth.db")).unwrap();
    // Every test's worker panics on the trigger; only the panic tests send it.
    let config = WorkerConfig {
        test_hooks: TestHooks { panic_on: Some(PANIC_TRIGGER.into()), ..TestHooks::default() },
        ..WorkerConfig::saving_caches_in(dir.path().join("caches"))
    };
    let worker = Worker::start(store.reopen().unwrap(), config, Box::new(|_| {}));
    worker.load_model(model.unwrap_or_else(|| hearth_engine::paths::default_model_path(|k| std::env::var_os(k))));
    assert!(worker.wait_idle(Duration::from_secs(120)));
    assert!(matches!(worker.model_status(), ModelStatus::Ready { .. }), "{:?}", worker.model_status());
    (dir, store, worker)
}

fn greedy(max_new_tokens: u32) -> ConversationSettings {
    ConversationSettings { temperature: 0.0, max_new_tokens, ..Default::default() }
}

/// Adds the user message and an empty reply; returns the reply id.
fn reply_row(store: &Store, conversation: i64, text: &str) -> i64 {
    let parent = store.thread(conversation).unwrap().last().map(|t| t.message.id);
    let u = store.add_message(conversation, parent, Role::User, text, MessageStatus::Complete).unwrap();
    store.add_message(conversation, Some(u.id), Role::Assistant, "", MessageStatus::Streaming).unwrap().id
}

fn job(
    conversation: i64,
    reply: i64,
    messages: Vec<ChatMessage>,
    settings: ConversationSettings,
) -> (ReplyJob, mpsc::Receiver<GenerationEvent>) {
    let (tx, rx) = mpsc::channel();
    let job = ReplyJob::new(
        conversation,
        reply,
        messages,
        settings,
        Box::new(move |e| {
            let _ = tx.send(e);
        }),
    );
    (job, rx)
}

fn collect(rx: &mpsc::Receiver<GenerationEvent>) -> Vec<GenerationEvent> {
    let mut events = Vec::new();
    while let Ok(e) = rx.recv_timeout(Duration::from_secs(120)) {
        let end = matches!(e, GenerationEvent::Finished { .. } | GenerationEvent::Error { .. });
        events.push(e);
        if end {
            break;
        }
    }
    events
}

/// The text the token events carried.
fn streamed(events: &[GenerationEvent]) -> String {
    events
        .iter()
        .filter_map(|e| if let GenerationEvent::Tokens { text, .. } = e { Some(text.as_str()) } else { None })
        .collect()
}

fn finished(events: &[GenerationEvent]) -> (String, hearth_store::ReplyStats) {
    match events.last() {
        Some(GenerationEvent::Finished { reason, stats, .. }) => (reason.clone(), stats.clone()),
        other => panic!("expected finished, got {other:?}"),
    }
}

/// The message (and model file name) that makes the worker panic in tests.
const PANIC_TRIGGER: &str = "__hearth_test_panic__";

/// Queues a replay of `reply` (whose prompt is `history`) and waits for its end.
fn replay(
    worker: &Worker,
    store: &Store,
    conversation: i64,
    reply: i64,
    history: Vec<ChatMessage>,
    settings: ConversationSettings,
) -> Result<hearth_worker::events::ReplayOutcome, hearth_worker::error::AppError> {
    let record = store.message(reply).unwrap().stats.unwrap().replay.expect("a replay record");
    let (mut j, rx) = job(conversation, reply, history, settings);
    j.replay = Some(record);
    worker.enqueue(j).unwrap();
    loop {
        match rx.recv_timeout(Duration::from_secs(120)).expect("the replay ends") {
            GenerationEvent::Replayed { outcome } => return Ok(outcome),
            GenerationEvent::Error { error } => return Err(error),
            GenerationEvent::Finished { .. } => panic!("a replay ends with `replayed`"),
            _ => {}
        }
    }
}

/// The default model's greedy reply to "What is 2 + 2?" as llama.cpp's
/// build for this CPU gives it, which the engine's kernels follow (see the
/// engine's golden tests).
fn two_plus_two() -> &'static str {
    match hearth_engine::cpu::isa::isa() {
        hearth_engine::cpu::isa::Isa::Avx512Vnni => "The answer is 4.",
        _ => "The answer to this classic math problem is 4.",
    }
}
