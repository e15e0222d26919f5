//! The generation worker on the real default model: streaming, saving as it
//! streams, stopping within a step, queueing, and cache reuse across turns.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hearth_engine::ChatMessage;
use hearth_store::{ConversationSettings, MessageStatus, Role, Store};
use hearth_worker::events::{GenerationEvent, ModelStatus};
use hearth_worker::{CacheState, ReplyJob, TestHooks, Worker, WorkerConfig};

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

#[test]
fn a_reply_streams_is_saved_and_the_next_turn_reuses_the_cache() {
    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let reply = reply_row(&store, c.id, "What is 2 + 2?");
    let (j, rx) = job(c.id, reply, vec![ChatMessage::user("What is 2 + 2?")], greedy(32));
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    assert!(matches!(events[0], GenerationEvent::Started { reply_id } if reply_id == reply));
    let streamed: String = streamed(&events);
    let (reason, stats) = finished(&events);
    assert_eq!(reason, "end_token");
    // The engine's own golden answer for this prompt (see the engine's tests).
    assert_eq!(streamed, two_plus_two());
    let saved = store.message(reply).unwrap();
    assert_eq!(saved.content, streamed);
    assert_eq!(saved.status, MessageStatus::Complete);
    assert_eq!(stats.processed_tokens, stats.prompt_tokens, "the first turn runs the whole prompt");
    // The conversation remembers the model that replied in it.
    let model = hearth_engine::paths::default_model_path(|k| std::env::var_os(k)).display().to_string();
    assert_eq!(store.conversation(c.id).unwrap().model_path.as_deref(), Some(model.as_str()));

    let reply2 = reply_row(&store, c.id, "And 3 + 3?");
    let history =
        vec![ChatMessage::user("What is 2 + 2?"), ChatMessage::assistant(streamed), ChatMessage::user("And 3 + 3?")];
    let (j, rx) = job(c.id, reply2, history, greedy(16));
    worker.enqueue(j).unwrap();
    let (_, stats2) = finished(&collect(&rx));
    assert!(stats2.prompt_tokens > stats.prompt_tokens);
    assert!(
        stats2.processed_tokens < stats2.prompt_tokens - stats.prompt_tokens + 4,
        "turn 2 should run only its new tokens: {stats2:?}"
    );
}

#[test]
fn stop_ends_a_reply_within_a_step_and_keeps_its_text() {
    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let reply = reply_row(&store, c.id, "Write a long story about a dragon.");
    let settings = ConversationSettings { temperature: 0.8, seed: Some(1), max_new_tokens: 2000, ..Default::default() };
    let (j, rx) = job(c.id, reply, vec![ChatMessage::user("Write a long story about a dragon.")], settings);
    worker.enqueue(j).unwrap();
    let mut tokens = 0;
    while tokens < 5 {
        if let GenerationEvent::Tokens { ids, .. } = rx.recv_timeout(Duration::from_secs(60)).unwrap() {
            tokens += ids.len();
        }
    }
    assert!(worker.stop(c.id));
    let rest = collect(&rx);
    // What was generated before the stop may still be on its way, once.
    let after_stop =
        rest.iter().filter(|e| matches!(e, GenerationEvent::Tokens { ids, .. } if !ids.is_empty())).count();
    assert!(after_stop <= 2, "{after_stop} token events came after the stop");
    let (reason, _) = finished(&rest);
    assert_eq!(reason, "cancelled");
    let saved = store.message(reply).unwrap();
    assert_eq!(saved.status, MessageStatus::Interrupted);
    assert!(!saved.content.is_empty());
    assert!(worker.wait_idle(Duration::from_secs(5)));
}

#[test]
fn conversations_stream_side_by_side_and_one_conversation_runs_one_reply() {
    let (_dir, store, worker) = start();
    let a = store.create_conversation().unwrap();
    let b = store.create_conversation().unwrap();
    let ra = reply_row(&store, a.id, "Count from one to twenty.");
    let rb = reply_row(&store, b.id, "Name three colours.");
    let (ja, rxa) = job(a.id, ra, vec![ChatMessage::user("Count from one to twenty.")], greedy(48));
    let (jb, rxb) = job(b.id, rb, vec![ChatMessage::user("Name three colours.")], greedy(8));
    worker.enqueue(ja).unwrap();
    worker.enqueue(jb).unwrap();
    let (again, _rx) = job(a.id, ra, vec![ChatMessage::user("again")], greedy(8));
    let err = worker.enqueue(again).unwrap_err();
    assert_eq!(err.kind, hearth_worker::error::ErrorKind::Busy);
    // b does not wait for a: the short reply ends while the long one streams.
    let eb = collect(&rxb);
    finished(&eb);
    let a_so_far: Vec<GenerationEvent> = rxa.try_iter().collect();
    assert!(a_so_far.iter().any(|e| matches!(e, GenerationEvent::Tokens { .. })), "a streamed while b did");
    assert!(
        !a_so_far.iter().any(|e| matches!(e, GenerationEvent::Finished { .. })),
        "b finished first: it ran beside a, not after it"
    );
    let (_, stats) = finished(&collect(&rxa));
    assert_eq!(stats.generated_tokens, 48);

    // Past MAX_RUNNING at once, the next waits, told its place (1 = next).
    let mut rxs = Vec::new();
    for i in 0..=hearth_worker::MAX_RUNNING {
        let c = store.create_conversation().unwrap();
        let r = reply_row(&store, c.id, "Say hello.");
        let (j, rx) = job(c.id, r, vec![ChatMessage::user(format!("Say hello {i}."))], greedy(12));
        worker.enqueue(j).unwrap();
        rxs.push(rx);
    }
    let last = collect(rxs.last().unwrap());
    let started = last.iter().position(|e| matches!(e, GenerationEvent::Started { .. })).unwrap();
    let positions: Vec<u32> = last[..started]
        .iter()
        .filter_map(|e| if let GenerationEvent::Queued { position } = e { Some(*position) } else { None })
        .collect();
    assert_eq!(positions.last(), Some(&1), "{last:?}");
    for rx in &rxs[..rxs.len() - 1] {
        finished(&collect(rx));
    }
}

#[test]
fn a_prompt_longer_than_the_context_is_a_clear_error() {
    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let reply = reply_row(&store, c.id, "long");
    let settings = ConversationSettings { context_length: 16, ..greedy(8) };
    let (j, rx) = job(
        c.id,
        reply,
        vec![ChatMessage::user("this prompt is certainly longer than sixteen tokens once the template wraps it")],
        settings,
    );
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    match events.last() {
        Some(GenerationEvent::Error { error }) => {
            assert_eq!(error.kind, hearth_worker::error::ErrorKind::PromptTooLong);
            assert!(error.message.contains("context holds 16"), "{}", error.message);
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let saved = store.message(reply).unwrap();
    assert_eq!(saved.status, MessageStatus::Error);
    assert!(saved.stats.unwrap().error.unwrap().contains("context"));
}

#[test]
fn a_bad_model_file_is_reported_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hearth.db")).unwrap();
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF but not really").unwrap();
    let (tx, rx) = mpsc::channel();
    let worker = Worker::start(
        store.reopen().unwrap(),
        WorkerConfig::in_memory(),
        Box::new(move |s| {
            let _ = tx.send(s.clone());
        }),
    );
    worker.load_model(bad);
    assert!(matches!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), ModelStatus::Loading { .. }));
    match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
        ModelStatus::Failed { error, .. } => {
            assert_eq!(error.kind, hearth_worker::error::ErrorKind::BadModel);
            assert!(error.message.contains("bad.gguf"), "{}", error.message);
        }
        other => panic!("expected failure, got {other:?}"),
    }
    // Replies without a model fail cleanly too.
    let c = store.create_conversation().unwrap();
    let reply = reply_row(&store, c.id, "hi");
    let (j, rx) = job(c.id, reply, vec![ChatMessage::user("hi")], greedy(4));
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    assert!(
        matches!(events.last(), Some(GenerationEvent::Error { error }) if error.kind == hearth_worker::error::ErrorKind::NoModel)
    );
}

#[test]
fn a_new_worker_continues_from_the_saved_cache() {
    let (dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let reply = reply_row(&store, c.id, "What is 2 + 2?");
    let (j, rx) = job(c.id, reply, vec![ChatMessage::user("What is 2 + 2?")], greedy(32));
    worker.enqueue(j).unwrap();
    let (_, first) = finished(&collect(&rx));
    assert!(worker.wait_idle(Duration::from_secs(10)));
    drop(worker);
    assert!(dir.path().join("caches").join(format!("{}.session", c.id)).is_file());

    // As after a restart: a new worker, nothing in memory.
    let worker = Worker::start(
        store.reopen().unwrap(),
        WorkerConfig::saving_caches_in(dir.path().join("caches")),
        Box::new(|_| {}),
    );
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    assert_eq!(worker.cache_states(&[c.id]), [(c.id, CacheState::Saved)]);
    let reply2 = reply_row(&store, c.id, "And 3 + 3?");
    let history = vec![
        ChatMessage::user("What is 2 + 2?"),
        ChatMessage::assistant(store.message(reply).unwrap().content),
        ChatMessage::user("And 3 + 3?"),
    ];
    let (j, rx) = job(c.id, reply2, history.clone(), greedy(16));
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    let (_, second) = finished(&events);
    assert!(second.processed_tokens < second.prompt_tokens - first.prompt_tokens + 4, "restored: {second:?}");
    assert_eq!(worker.cache_states(&[c.id, 999]), [(c.id, CacheState::Warm), (999, CacheState::Cold)]);
    worker.clear_caches();
    assert!(worker.wait_idle(Duration::from_secs(10)));
    assert_eq!(worker.cache_states(&[c.id]), [(c.id, CacheState::Cold)]);
    let warm: String = streamed(&events);

    // The same turn from a cold cache gives the same reply.
    let _ = std::fs::remove_dir_all(dir.path().join("caches"));
    let worker = Worker::start(store.reopen().unwrap(), WorkerConfig::in_memory(), Box::new(|_| {}));
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    let reply3 = reply_row(&store, c.id, "And 3 + 3?");
    let (j, rx) = job(c.id, reply3, history, greedy(16));
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    let (_, cold) = finished(&events);
    assert_eq!(cold.processed_tokens, cold.prompt_tokens);
    let cold_text: String = streamed(&events);
    assert_eq!(warm, cold_text);
}

#[test]
fn caches_past_their_budgets_leave_memory_then_disk() {
    let (dir, store, worker) = start();
    // A short chat's cache holds 256 positions of this model in f16: 5.6 MiB.
    worker.set_budgets(hearth_worker::CacheBudgets { memory_mb: 32, disk_mb: 1 });
    let mut ids = Vec::new();
    for text in
        ["What is 2 + 2?", "Name a colour.", "Name a fruit.", "Name an animal.", "Name a city.", "Name a river."]
    {
        let c = store.create_conversation().unwrap();
        let reply = reply_row(&store, c.id, text);
        let (j, rx) = job(c.id, reply, vec![ChatMessage::user(text)], greedy(4));
        worker.enqueue(j).unwrap();
        finished(&collect(&rx));
        ids.push(c.id);
    }
    assert!(worker.wait_idle(Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(200));
    let states = worker.cache_states(&ids);
    // 5.6 MiB each: five fit in 32 MiB, the oldest left memory.
    assert_eq!(states[0].1, CacheState::Cold, "{states:?}");
    assert_eq!(states.last().unwrap().1, CacheState::Warm, "{states:?}");
    // 1 MB of disk holds only the newest file (each is ~1 MB, kept because it is the newest).
    let files: Vec<_> =
        std::fs::read_dir(dir.path().join("caches")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(files, [std::ffi::OsString::from(format!("{}.session", ids.last().unwrap()))]);
}

#[test]
fn switching_back_to_another_version_reuses_its_cache() {
    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let run = |messages: Vec<ChatMessage>| {
        let last = messages.last().unwrap().content.clone();
        let reply = reply_row(&store, c.id, &last);
        let (j, rx) = job(c.id, reply, messages, greedy(12));
        worker.enqueue(j).unwrap();
        let events = collect(&rx);
        let text: String = streamed(&events);
        (text, finished(&events).1)
    };
    let u1 = ChatMessage::user("What is 2 + 2?");
    let (r1, _) = run(vec![u1.clone()]);
    let v1 = vec![u1.clone(), ChatMessage::assistant(r1.clone()), ChatMessage::user("And 3 + 3?")];
    let (r2, s2) = run(v1.clone());
    // Edit the second question: a new version from the first reply on.
    let (_, s3) = run(vec![u1.clone(), ChatMessage::assistant(r1.clone()), ChatMessage::user("And 10 + 10?")]);
    assert!(s3.processed_tokens < s3.prompt_tokens / 2, "{s3:?}");
    // Back on version 1, the next turn starts from version 1's cache.
    let mut back = v1;
    back.push(ChatMessage::assistant(r2));
    back.push(ChatMessage::user("And 4 + 4?"));
    let (_, s4) = run(back);
    assert!(
        s4.processed_tokens <= s4.prompt_tokens - s2.prompt_tokens,
        "version 1's turn is not run again: {s4:?} after {s2:?}"
    );
}

/// The message (and model file name) that makes the worker panic in tests.
const PANIC_TRIGGER: &str = "__hearth_test_panic__";

#[test]
fn a_panicking_reply_fails_alone_and_the_next_conversation_streams() {
    let (_dir, store, worker) = start();
    let (a, b) = (store.create_conversation().unwrap(), store.create_conversation().unwrap());
    let reply_a = reply_row(&store, a.id, PANIC_TRIGGER);
    let (ja, rxa) = job(a.id, reply_a, vec![ChatMessage::user(PANIC_TRIGGER)], greedy(8));
    worker.enqueue(ja).unwrap();
    let reply_b = reply_row(&store, b.id, "What is 2 + 2?");
    let (jb, rxb) = job(b.id, reply_b, vec![ChatMessage::user("What is 2 + 2?")], greedy(32));
    worker.enqueue(jb).unwrap();

    let events = collect(&rxa);
    match events.last() {
        Some(GenerationEvent::Error { error }) => {
            assert!(error.message.contains("internal error"), "{}", error.message)
        }
        other => panic!("expected an error, got {other:?}"),
    }
    assert_eq!(store.message(reply_a).unwrap().status, MessageStatus::Error);
    let events = collect(&rxb);
    assert_eq!(finished(&events).0, "end_token");
    assert_eq!(streamed(&events), two_plus_two());
    // The conversation that panicked is free again.
    let again = reply_row(&store, a.id, "What is 2 + 2?");
    let (j, rx) = job(a.id, again, vec![ChatMessage::user("What is 2 + 2?")], greedy(32));
    worker.enqueue(j).unwrap();
    assert_eq!(finished(&collect(&rx)).0, "end_token");
}

#[test]
fn a_panic_while_a_reply_ends_still_ends_it_in_the_ui() {
    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let trigger = format!("{PANIC_TRIGGER}:after");
    let reply = reply_row(&store, c.id, &trigger);
    let (j, rx) = job(c.id, reply, vec![ChatMessage::user(trigger.clone())], greedy(4));
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    match events.last() {
        Some(GenerationEvent::Error { error }) => {
            assert!(error.message.contains("internal error"), "{}", error.message)
        }
        other => panic!("expected an error, got {other:?}"),
    }
    // The worker goes on.
    let again = reply_row(&store, c.id, "What is 2 + 2?");
    let (j, rx) = job(c.id, again, vec![ChatMessage::user("What is 2 + 2?")], greedy(32));
    worker.enqueue(j).unwrap();
    assert_eq!(finished(&collect(&rx)).0, "end_token");
}

#[test]
fn a_panic_while_loading_fails_that_model_and_the_next_one_opens() {
    let (dir, _store, worker) = start();
    let bad = dir.path().join(PANIC_TRIGGER);
    std::fs::copy(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)), &bad).unwrap();
    worker.load_model(bad);
    assert!(worker.wait_idle(Duration::from_secs(120)));
    match worker.model_status() {
        ModelStatus::Failed { error, .. } => assert!(error.message.contains("inside Hearth"), "{}", error.message),
        other => panic!("expected failed, got {other:?}"),
    }
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    assert!(worker.wait_idle(Duration::from_secs(120)));
    assert!(matches!(worker.model_status(), ModelStatus::Ready { .. }), "{:?}", worker.model_status());
}

#[test]
fn stop_during_a_long_prefill_ends_the_reply_within_a_layer_and_keeps_the_chunks_read() {
    stop_a_quarter_into_the_second_prefill_chunk(0);
}

/// "Generate N" runs alone, through the fused loop's prefill.
#[test]
fn stop_during_the_long_prefill_of_generate_n_ends_it_within_a_layer() {
    stop_a_quarter_into_the_second_prefill_chunk(2);
}

/// A reply (with `variants` more) to a ~4,000-token message, stopped a
/// quarter of the way into its second prefill chunk.
fn stop_a_quarter_into_the_second_prefill_chunk(variants: usize) {
    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    // About 4,000 tokens: eight chunks of the prefill.
    let long = "The quick brown fox jumps over the lazy dog near the river bank. ".repeat(280);
    let reply = reply_row(&store, c.id, &long);
    let (mut j, rx) = job(c.id, reply, vec![ChatMessage::user(long.clone())], greedy(16));
    let parent = store.message(reply).unwrap().parent_id;
    j.variant_ids = (0..variants)
        .map(|_| store.add_message(c.id, parent, Role::Assistant, "", MessageStatus::Streaming).unwrap().id)
        .collect();
    worker.enqueue(j).unwrap();
    let mut progress = Vec::new();
    let mut began = std::time::Instant::now();
    let (stopped_at, chunk) = loop {
        match rx.recv_timeout(Duration::from_secs(120)).expect("prefill progress") {
            GenerationEvent::Prefill { done, total } => {
                progress.push((done, total));
                if done == 0 {
                    began = std::time::Instant::now();
                }
                if done > 0 {
                    // Into the next chunk, a quarter of one in.
                    let chunk = began.elapsed();
                    std::thread::sleep(chunk / 4);
                    assert!(worker.stop(c.id));
                    break (std::time::Instant::now(), chunk);
                }
            }
            GenerationEvent::Tokens { .. } => panic!("a token before any prefill progress"),
            _ => {}
        }
    };
    let events = collect(&rx);
    let waited = stopped_at.elapsed();
    assert_eq!(finished(&events).0, "cancelled");
    assert!(!events.iter().any(|e| matches!(e, GenerationEvent::Tokens { .. })), "no token after Stop in the prefill");
    let (first_done, total) = progress[progress.len() - 1];
    assert!(total > 3000 && first_done == 512, "{progress:?}");
    assert_eq!(progress[0], (0, total));
    // Stop is asked after every layer of the chunk running (30 of them),
    // so it comes in a small part of the time a chunk takes, not the rest
    // of the chunk (three quarters of one).
    assert!(waited < chunk / 4, "stop took {waited:?}; the first chunk {chunk:?}");
    assert_eq!(store.message(reply).unwrap().status, MessageStatus::Interrupted);
    assert!(worker.busy_conversations().is_empty());
    // The cache kept the chunk read before the stop, whole: asking again
    // reads only the rest.
    let again = reply_row(&store, c.id, &long);
    let (j, rx) = job(c.id, again, vec![ChatMessage::user(long)], greedy(4));
    worker.enqueue(j).unwrap();
    let (_, stats) = finished(&collect(&rx));
    assert_eq!(stats.processed_tokens, stats.prompt_tokens - 512, "{stats:?}");
}

#[test]
fn the_model_file_is_hashed_once_and_remembered() {
    let (dir, store, worker) = start();
    let model = hearth_engine::paths::default_model_path(|k| std::env::var_os(k));
    let engine = worker.engine().unwrap();
    // `start` waited for the hashing too.
    let (size, mtime) = engine.file_fingerprint().unwrap();
    let path = model.display().to_string();
    let remembered = store.model_sha256(&path, size, mtime).unwrap().expect("remembered");
    let out = std::process::Command::new("sha256sum").arg(&model).output().unwrap();
    assert_eq!(remembered, String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap());
    assert_eq!(engine.file_sha256(), Some(remembered.as_str()));
    drop(worker);

    // The next start takes it from the database instead of reading the file again.
    store.set_model_sha256(&path, size, mtime, "remembered-not-recomputed").unwrap();
    let worker = Worker::start(
        store.reopen().unwrap(),
        WorkerConfig::saving_caches_in(dir.path().join("caches")),
        Box::new(|_| {}),
    );
    worker.load_model(model);
    assert!(worker.wait_idle(Duration::from_secs(120)));
    assert_eq!(worker.engine().unwrap().file_sha256(), Some("remembered-not-recomputed"));
}

#[test]
fn every_reply_records_what_produced_it() {
    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let reply = reply_row(&store, c.id, "What is 2 + 2?");
    let settings = ConversationSettings {
        temperature: 0.9,
        seed: Some(11),
        max_new_tokens: 24,
        stop_strings: vec!["zzz".into()],
        ..Default::default()
    };
    let (j, rx) = job(c.id, reply, vec![ChatMessage::user("What is 2 + 2?")], settings);
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    let (_, stats) = finished(&events);
    let r = store.message(reply).unwrap().stats.unwrap().replay.expect("a replay record");
    let engine = worker.engine().unwrap();
    assert_eq!(r.model_sha256.as_deref(), engine.file_sha256());
    assert_eq!(r.engine_build, hearth_engine::BUILD_ID);
    assert_eq!(r.device, format!("cpu ({})", hearth_engine::cpu::isa::isa().name()));
    let prompt = engine.encode_chat(&[ChatMessage::user("What is 2 + 2?")]).unwrap();
    let bytes: Vec<u8> = prompt.iter().flat_map(|t| t.to_le_bytes()).collect();
    assert_eq!(r.prompt_sha256, hearth_engine::file_hash::sha256_hex(&bytes));
    assert_eq!(r.prompt_tokens, stats.prompt_tokens);
    assert_eq!((r.temperature, r.seed, r.max_new_tokens, r.top_k), (0.9, 11, 24, 40));
    assert_eq!(r.stop_strings, ["zzz"]);
    assert_eq!(r.tokens.len() as u32, stats.generated_tokens);
    assert_eq!(engine.tokenizer().decode(&r.tokens).trim_end(), streamed(&events).trim_end());
}

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

#[test]
fn a_reply_replays_exactly_from_a_warm_a_restored_and_a_cold_cache() {
    let (dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    // Sampled, with the seed the worker picks: the record keeps it.
    let settings = ConversationSettings { temperature: 0.9, max_new_tokens: 24, ..Default::default() };
    let first = reply_row(&store, c.id, "Name a colour.");
    let (j, rx) = job(c.id, first, vec![ChatMessage::user("Name a colour.")], settings.clone());
    worker.enqueue(j).unwrap();
    finished(&collect(&rx));
    let second = reply_row(&store, c.id, "And a fruit?");
    let history = vec![
        ChatMessage::user("Name a colour."),
        ChatMessage::assistant(store.message(first).unwrap().content),
        ChatMessage::user("And a fruit?"),
    ];
    let (j, rx) = job(c.id, second, history.clone(), settings.clone());
    worker.enqueue(j).unwrap();
    let (_, stats) = finished(&collect(&rx));
    let recorded = stats.replay.unwrap().tokens.len() as u32;
    let before = store.message(second).unwrap();

    let warm = replay(&worker, &store, c.id, second, history.clone(), settings.clone()).unwrap();
    assert!(warm.matched, "warm: {warm:?}");
    assert_eq!((warm.compared, warm.recorded, warm.first_difference), (recorded, recorded, None));
    assert_eq!(store.message(second).unwrap(), before, "a replay changes nothing in the conversation");

    // After a restart the cache comes from disk: only the prompt's last pass runs.
    assert!(worker.wait_idle(Duration::from_secs(10)));
    drop(worker);
    let worker = Worker::start(
        store.reopen().unwrap(),
        WorkerConfig::saving_caches_in(dir.path().join("caches")),
        Box::new(|_| {}),
    );
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    let restored = replay(&worker, &store, c.id, second, history.clone(), settings.clone()).unwrap();
    assert!(restored.matched, "restored: {restored:?}");
    assert!(
        restored.processed_tokens < stats.prompt_tokens / 2,
        "restored ran {} of {}",
        restored.processed_tokens,
        stats.prompt_tokens
    );

    // With no cache at all, every pass of the prompt runs again.
    drop(worker);
    std::fs::remove_dir_all(dir.path().join("caches")).unwrap();
    let worker = Worker::start(store.reopen().unwrap(), WorkerConfig::in_memory(), Box::new(|_| {}));
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    let cold = replay(&worker, &store, c.id, second, history.clone(), settings.clone()).unwrap();
    assert!(cold.matched, "cold: {cold:?}");
    assert_eq!(cold.processed_tokens, stats.prompt_tokens);

    // A conversation that changed before the reply cannot be replayed: said, not guessed.
    let mut changed = history;
    changed.insert(0, ChatMessage::system("Be brief."));
    let err = replay(&worker, &store, c.id, second, changed, settings).unwrap_err();
    assert_eq!(err.kind, hearth_worker::error::ErrorKind::CannotReplay, "{err:?}");
}

#[test]
fn generate_n_writes_variants_from_one_prompt_each_with_its_cache() {
    generate_n_on(None);
}

/// Gemma 4's cache through Generate N: heads of two sizes, shared layers,
/// per-layer embeddings.
#[test]
fn generate_n_on_gemma4_writes_variants_from_one_prompt_each_with_its_cache() {
    use hearth_engine::random_model::{write, Gemma4, Shape};
    let files = tempfile::tempdir().unwrap();
    let path = files.path().join("gemma4-random.gguf");
    let shape = Shape {
        layers: 7,
        embd: 256,
        ffn: 512,
        heads: 4,
        kv_heads: 1,
        head_dim: Some(128),
        experts: None,
        recurrent: None,
        gpt_oss: false,
        gemma4: Some(Gemma4 { per_layer: 64, shared_kv_layers: 3, head_dim_swa: 64, kv_heads_swa: 2, window: 16 }),
    };
    write(&path, &hearth_engine::paths::default_model_path(|k| std::env::var_os(k)), &shape, "q8_0").unwrap();
    generate_n_on(Some(path));
}

fn generate_n_on(model: Option<PathBuf>) {
    let (_dir, store, worker) = start_on(model);
    let c = store.create_conversation().unwrap();
    let first = reply_row(&store, c.id, "Name a colour.");
    let parent = store.message(first).unwrap().parent_id;
    let others: Vec<i64> = (0..2)
        .map(|_| store.add_message(c.id, parent, Role::Assistant, "", MessageStatus::Streaming).unwrap().id)
        .collect();
    let settings = ConversationSettings { temperature: 1.0, seed: Some(21), max_new_tokens: 16, ..Default::default() };
    let history = vec![ChatMessage::user("Name a colour.")];
    let (mut j, rx) = job(c.id, first, history.clone(), settings.clone());
    j.variant_ids = others.clone();
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    finished(&events);
    // Tokens of all three streamed, each marked with its variant.
    let mut streamed_by = [String::new(), String::new(), String::new()];
    for e in &events {
        if let GenerationEvent::Tokens { text, variant, .. } = e {
            streamed_by[*variant as usize].push_str(text);
        }
    }
    let ids = [first, others[0], others[1]];
    let replies: Vec<_> = ids.iter().map(|&id| store.message(id).unwrap()).collect();
    for (b, r) in replies.iter().enumerate() {
        assert_eq!(r.status, MessageStatus::Complete);
        assert_eq!(r.content.trim_end(), streamed_by[b].trim_end(), "variant {b}");
        let stats = r.stats.as_ref().unwrap();
        assert_eq!(stats.seed, Some(21 + b as u32), "variant {b} samples with seed + b");
        assert_eq!(stats.replay.as_ref().unwrap().tokens.len() as u32, stats.generated_tokens);
    }
    assert!(replies.iter().any(|r| r.content != replies[0].content), "three identical samples");

    // Generating again from the same message (a regeneration) starts from
    // the cached prompt and its logits: the variants still fork, all finish.
    let again: Vec<i64> = (0..3)
        .map(|_| store.add_message(c.id, parent, Role::Assistant, "", MessageStatus::Streaming).unwrap().id)
        .collect();
    let (mut j, rx) = job(c.id, again[0], history.clone(), settings.clone());
    j.variant_ids = again[1..].to_vec();
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    let Some(GenerationEvent::Finished { others: more, stats, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!((more.len(), stats.processed_tokens), (2, 0), "read nothing again: {stats:?}");
    for &id in &again {
        assert_eq!(store.message(id).unwrap().status, MessageStatus::Complete, "reply {id}");
    }
    store.select_version(c.id, first).unwrap();

    // Each variant is what a single reply with its seed writes.
    let solo = reply_row(&store, store.create_conversation().unwrap().id, "Name a colour.");
    let solo_conv = store.message(solo).unwrap().conversation_id;
    let (j, rx) = job(solo_conv, solo, history.clone(), ConversationSettings { seed: Some(23), ..settings.clone() });
    worker.enqueue(j).unwrap();
    finished(&collect(&rx));
    assert_eq!(store.message(solo).unwrap().content, replies[2].content);

    // A variant replays exactly.
    let outcome = replay(&worker, &store, c.id, others[1], history.clone(), settings.clone()).unwrap();
    assert!(outcome.matched, "{outcome:?}");

    // Picking variant 1 and going on runs only the new tokens: its cache was kept.
    store.select_version(c.id, others[0]).unwrap();
    let next = reply_row(&store, c.id, "Why?");
    let mut more = history;
    // As the app's history carries a reply: with the tokens it was sampled
    // as (a random model's text need not tokenize back to them).
    let sampled = replies[1].stats.as_ref().unwrap().replay.as_ref().unwrap().tokens.clone();
    more.push(ChatMessage::assistant(replies[1].content.clone()).with_ids(sampled));
    more.push(ChatMessage::user("Why?"));
    let (j, rx) = job(c.id, next, more, settings);
    worker.enqueue(j).unwrap();
    let (_, stats) = finished(&collect(&rx));
    assert!(
        stats.processed_tokens < 16,
        "picked variant: ran {} of {} prompt tokens",
        stats.processed_tokens,
        stats.prompt_tokens
    );
}

#[test]
fn each_token_keeps_its_alternatives_and_a_branch_from_one_runs_only_what_follows() {
    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let reply = reply_row(&store, c.id, "Name a colour.");
    let history = vec![ChatMessage::user("Name a colour.")];
    let (j, rx) = job(c.id, reply, history.clone(), greedy(12));
    worker.enqueue(j).unwrap();
    let (_, stats) = finished(&collect(&rx));
    let choices = store.token_choices(reply).unwrap().expect("kept with the reply");
    let record = stats.replay.unwrap();
    assert_eq!(choices.tokens.iter().map(|t| t.id).collect::<Vec<_>>(), record.tokens);
    for t in &choices.tokens {
        assert_eq!(t.top.len(), 5);
        assert_eq!(t.top[0], (t.id, t.logprob), "greedy takes the likeliest");
    }

    // Continue from token 3 with its second likeliest alternative.
    let mut kept = choices.tokens[..3].to_vec();
    let (alt, lp) = choices.tokens[3].top[1];
    kept.push(hearth_store::TokenChoice { id: alt, logprob: lp, top: choices.tokens[3].top.clone() });
    let ids: Vec<u32> = kept.iter().map(|t| t.id).collect();
    let engine = worker.engine().unwrap();
    let prefix = engine.tokenizer().decode(&ids);
    let parent = store.message(reply).unwrap().parent_id;
    let branch = store.add_message(c.id, parent, Role::Assistant, &prefix, MessageStatus::Streaming).unwrap().id;
    let (mut j, rx) = job(c.id, branch, history, greedy(12));
    j.prefix = prefix.clone();
    j.prefix_ids = Some(ids.clone());
    j.prefix_choices = kept;
    worker.enqueue(j).unwrap();
    let (_, stats) = finished(&collect(&rx));
    assert_eq!(stats.processed_tokens, 1, "only the chosen token runs: the cache held everything before it");
    let text = store.message(branch).unwrap().content;
    assert!(text.starts_with(&prefix) && text.len() > prefix.len(), "{text:?} after {prefix:?}");
    let branch_choices = store.token_choices(branch).unwrap().unwrap();
    assert_eq!(&branch_choices.tokens.iter().map(|t| t.id).collect::<Vec<_>>()[..4], &ids[..]);
    assert_eq!(branch_choices.tokens.len(), 4 + stats.generated_tokens as usize);
}

/// Submits an API request and waits for its events.
fn request(
    worker: &Worker,
    messages: Vec<ChatMessage>,
    settings: ConversationSettings,
    sequences: usize,
) -> Vec<GenerationEvent> {
    let (tx, rx) = mpsc::channel();
    let job = ReplyJob::for_request(
        messages,
        settings,
        sequences,
        hearth_worker::Request::default(),
        Box::new(move |e| drop(tx.send(e))),
    );
    worker.submit(job).unwrap();
    collect(&rx)
}

#[test]
fn api_requests_store_nothing_and_each_client_keeps_its_own_cache() {
    let (_dir, store, worker) = start();
    let user = |t: &str| ChatMessage::new(hearth_engine::Role::User, t);
    let a1 = vec![user("Tell me about rivers.")];
    let first = request(&worker, a1.clone(), greedy(12), 1);
    let (_, s1) = finished(&first);
    assert_eq!(s1.processed_tokens, s1.prompt_tokens, "a cold cache runs the whole prompt");
    let a_reply = streamed(&first);

    // Another client, another question: it shares only the template's
    // opening, too little to clone the first client's cache for.
    let b = request(&worker, vec![user("What is a prime number?")], greedy(12), 1);
    let (_, sb) = finished(&b);
    assert_eq!(sb.processed_tokens, sb.prompt_tokens, "{sb:?}");
    // A third shares a long system prompt with the second: it starts from a copy of it.
    let long_system =
        ChatMessage::new(hearth_engine::Role::System, "You answer questions about mathematics. ".repeat(12));
    let (_, s3) = finished(&request(&worker, vec![long_system.clone(), user("What is a prime number?")], greedy(4), 1));
    let (_, s4) = finished(&request(&worker, vec![long_system, user("What is a square number?")], greedy(4), 1));
    assert_eq!(s3.processed_tokens, s3.prompt_tokens);
    assert!(s4.prompt_tokens - s4.processed_tokens >= 64, "{s4:?}");

    // The first client's next turn still finds all of its own cache.
    let a2 = [a1, vec![ChatMessage::new(hearth_engine::Role::Assistant, a_reply), user("And lakes?")]].concat();
    let (_, s2) = finished(&request(&worker, a2, greedy(8), 1));
    assert!(s2.prompt_tokens - s2.processed_tokens >= s1.prompt_tokens, "{s1:?} {s2:?}");

    // Two sequences at once: both finish, with their stats.
    let both = request(
        &worker,
        vec![user("Name a colour.")],
        ConversationSettings { temperature: 1.0, seed: Some(3), max_new_tokens: 6, ..Default::default() },
        2,
    );
    let Some(GenerationEvent::Finished { others, .. }) = both.last() else { panic!("{both:?}") };
    assert_eq!(others.len(), 1);
    assert!(both.iter().any(|e| matches!(e, GenerationEvent::Tokens { variant: 1, .. })));

    assert!(worker.busy_conversations().is_empty());
    assert_eq!(worker.requests(), (0, 0));
    let conversations = store.conversations().unwrap();
    assert!(conversations.is_empty(), "requests write no conversations: {conversations:?}");
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

#[test]
fn a_model_waiting_to_load_is_in_use_until_its_load_ends() {
    let (dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let reply = reply_row(&store, c.id, "Write a long story about a dragon.");
    let (j, rx) = job(c.id, reply, vec![ChatMessage::user("Write a long story about a dragon.")], greedy(400));
    worker.enqueue(j).unwrap();
    while !matches!(rx.recv_timeout(Duration::from_secs(60)).unwrap(), GenerationEvent::Tokens { .. }) {}
    // Opened while a reply runs: it waits for the reply, and the status
    // still names the model before it.
    let next = dir.path().join("next.gguf");
    std::fs::write(&next, b"GGUF but not really").unwrap();
    worker.load_model(next.clone());
    let loaded = hearth_engine::paths::default_model_path(|k| std::env::var_os(k));
    assert!(matches!(worker.model_status(), ModelStatus::Ready { .. }));
    assert_eq!(worker.models_in_use(), [PathBuf::from(loaded.display().to_string()), next.clone()]);
    worker.stop(c.id);
    collect(&rx);
    assert!(worker.wait_idle(Duration::from_secs(30)));
    // The load failed: nothing is in use now.
    assert!(matches!(worker.model_status(), ModelStatus::Failed { .. }), "{:?}", worker.model_status());
    assert_eq!(worker.models_in_use(), Vec::<PathBuf>::new());
}

/// Tokens a reply's events carried per second, from its first token event
/// to its last, and when each of those came.
fn token_rate(events: &[(Instant, GenerationEvent)]) -> (f64, Instant, Instant) {
    let times: Vec<(Instant, usize)> = events
        .iter()
        .filter_map(|(t, e)| match e {
            GenerationEvent::Tokens { ids, variant: 0, .. } => Some((*t, ids.len())),
            _ => None,
        })
        .collect();
    let (first, last) = (times.first().unwrap().0, times.last().unwrap().0);
    let tokens: usize = times[1..].iter().map(|(_, n)| n).sum();
    (tokens as f64 / (last - first).as_secs_f64().max(1e-3), first, last)
}

/// Events with the time each arrived, until the reply ends.
fn collect_timed(rx: &mpsc::Receiver<GenerationEvent>) -> Vec<(Instant, GenerationEvent)> {
    let mut events = Vec::new();
    while let Ok(e) = rx.recv_timeout(Duration::from_secs(120)) {
        let end = matches!(e, GenerationEvent::Finished { .. } | GenerationEvent::Error { .. });
        events.push((Instant::now(), e));
        if end {
            break;
        }
    }
    events
}

#[test]
fn a_chat_keeps_streaming_while_another_conversation_generates_four_variants() {
    let (_dir, store, worker) = start();
    let story = "Write a long story about a lighthouse keeper and a storm.";
    let sampled = ConversationSettings { temperature: 1.0, seed: Some(3), max_new_tokens: 160, ..Default::default() };
    // Alone first: the chat's own rate.
    let (a, b) = (store.create_conversation().unwrap().id, store.create_conversation().unwrap().id);
    let alone = reply_row(&store, b, story);
    let (j, rx) = job(b, alone, vec![ChatMessage::user(story)], greedy(64));
    worker.enqueue(j).unwrap();
    let (alone_rate, _, _) = token_rate(&collect_timed(&rx));

    // Generate 4 in conversation A, then a chat in B while it runs.
    let first = reply_row(&store, a, story);
    let parent = store.message(first).unwrap().parent_id;
    let others: Vec<i64> = (0..3)
        .map(|_| store.add_message(a, parent, Role::Assistant, "", MessageStatus::Streaming).unwrap().id)
        .collect();
    let (mut j, rx_n) = job(a, first, vec![ChatMessage::user(story)], sampled);
    j.variant_ids = others;
    worker.enqueue(j).unwrap();
    let streaming = rx_n.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(matches!(streaming, GenerationEvent::Started { .. }), "{streaming:?}");
    while !matches!(rx_n.recv_timeout(Duration::from_secs(60)).unwrap(), GenerationEvent::Tokens { .. }) {}
    let chat = reply_row(&store, b, "And a short poem?");
    let history = vec![
        ChatMessage::user(story),
        ChatMessage::assistant(store.message(alone).unwrap().content),
        ChatMessage::user("And a short poem?"),
    ];
    let (j, rx_chat) = job(b, chat, history, greedy(64));
    worker.enqueue(j).unwrap();
    let chat_events = collect_timed(&rx_chat);
    let variants = collect_timed(&rx_n);
    assert!(matches!(chat_events.last(), Some((_, GenerationEvent::Finished { .. }))), "{:?}", chat_events.last());
    assert!(chat_events.iter().all(|(_, e)| !matches!(e, GenerationEvent::Queued { .. })), "the chat never waited");
    let Some((n_end, GenerationEvent::Finished { others, .. })) = variants.last() else { panic!("{variants:?}") };
    assert_eq!(others.len(), 3, "all four variants finished");
    let (beside_rate, chat_first, _) = token_rate(&chat_events);
    assert!(chat_first < *n_end, "the chat's tokens came while Generate 4 was still writing");
    println!(
        "chat alone {alone_rate:.1} tok/s, beside Generate 4 {beside_rate:.1} tok/s ({:.2}x)",
        beside_rate / alone_rate
    );
}

#[test]
fn an_api_request_with_three_choices_and_a_chat_reply_share_decode_passes() {
    let (_dir, store, worker) = start();
    let passes = |w: &Worker| w.engine().unwrap().model().passes_run();
    let user = |t: &str| ChatMessage::new(hearth_engine::Role::User, t);
    let sampled = ConversationSettings { temperature: 1.0, seed: Some(9), max_new_tokens: 48, ..Default::default() };
    let long = greedy(48);
    let story = "Write a long story about a lighthouse keeper and a storm.";

    // Each alone: how many passes it takes.
    let before = passes(&worker);
    let (tx, rx_api) = mpsc::channel();
    let api = |events: hearth_worker::EventSink| {
        ReplyJob::for_request(vec![user(story)], sampled.clone(), 3, hearth_worker::Request::default(), events)
    };
    worker.submit(api(Box::new(move |e| drop(tx.send(e))))).unwrap();
    let alone_api = collect(&rx_api);
    let api_passes = passes(&worker) - before;
    let c = store.create_conversation().unwrap().id;
    let before = passes(&worker);
    let r = reply_row(&store, c, story);
    let (j, rx) = job(c, r, vec![ChatMessage::user(story)], long.clone());
    worker.enqueue(j).unwrap();
    let (_, chat_stats) = finished(&collect(&rx));
    let chat_passes = passes(&worker) - before;

    // Together: the chat's decode steps ride in the request's passes.
    let before = passes(&worker);
    let (tx, rx_api) = mpsc::channel();
    worker.submit(api(Box::new(move |e| drop(tx.send(e))))).unwrap();
    let c2 = store.create_conversation().unwrap().id;
    let r2 = reply_row(&store, c2, story);
    let (j, rx) = job(c2, r2, vec![ChatMessage::user(story)], long);
    worker.enqueue(j).unwrap();
    let together_api = collect(&rx_api);
    let (_, together_chat) = finished(&collect(&rx));
    let together = passes(&worker) - before;
    let by_variant = |events: &[GenerationEvent]| {
        let mut texts = vec![String::new(); 3];
        for e in events {
            if let GenerationEvent::Tokens { text, variant, .. } = e {
                texts[*variant as usize].push_str(text);
            }
        }
        texts
    };
    assert_eq!(by_variant(&together_api), by_variant(&alone_api), "the request writes what it wrote alone");
    assert_eq!(together_chat.generated_tokens, chat_stats.generated_tokens);
    // Apart, each decode step is a pass; together, the shorter reply's
    // steps (all but a few) cost none of their own.
    assert!(
        together + chat_passes.min(api_passes) - 4 <= api_passes + chat_passes,
        "{together} passes together, {api_passes} + {chat_passes} apart: the decode steps were not shared"
    );
}

#[test]
fn a_replay_beside_a_streaming_chat_is_still_bit_for_bit() {
    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    // Short, so that it ends while the other chat is still reading its prompt.
    let settings = ConversationSettings { temperature: 0.9, max_new_tokens: 8, ..Default::default() };
    let history = vec![ChatMessage::user("Name a colour.")];
    let reply = reply_row(&store, c.id, "Name a colour.");
    let (j, rx) = job(c.id, reply, history.clone(), settings.clone());
    worker.enqueue(j).unwrap();
    let (_, stats) = finished(&collect(&rx));

    // A chat in another conversation with a long prompt, reading it when
    // the replay starts and still at it when the replay ends.
    let other = store.create_conversation().unwrap().id;
    let story = "The keeper climbed the stairs of the lighthouse as the storm came in. ".repeat(150);
    let long = reply_row(&store, other, &story);
    let (j, rx_long) = job(other, long, vec![ChatMessage::user(story)], greedy(16));
    worker.enqueue(j).unwrap();
    while !matches!(rx_long.recv_timeout(Duration::from_secs(60)).unwrap(), GenerationEvent::Prefill { .. }) {}
    let outcome = replay(&worker, &store, c.id, reply, history, settings).unwrap();
    assert!(
        worker.busy_conversations().contains(&other),
        "the chat was still streaming when the replay ended: they ran side by side"
    );
    let long_events = collect(&rx_long);
    assert!(outcome.matched, "{outcome:?}");
    assert_eq!(outcome.compared, stats.generated_tokens);
    assert!(matches!(long_events.last(), Some(GenerationEvent::Finished { .. })), "{:?}", long_events.last());
}

/// A random-weight Qwen 3.5 hybrid with experts and a shared expert, with
/// the default model's tokenizer and template.
fn hybrid_moe_file(dir: &std::path::Path) -> PathBuf {
    use hearth_engine::random_model::{write, Experts, Recurrent, Shape};
    let path = dir.join("qwen35moe-random.gguf");
    let shape = Shape {
        layers: 4,
        embd: 256,
        ffn: 256,
        heads: 4,
        kv_heads: 2,
        head_dim: Some(64),
        experts: Some(Experts { count: 8, used: 2, ffn: 128, dtype: "q8_0".into() }),
        recurrent: Some(Recurrent { state: 64, k_heads: 2, v_heads: 4, interval: 2, rope_dims: 16, shared_ffn: 128 }),
        gpt_oss: false,
        gemma4: None,
    };
    write(&path, &hearth_engine::paths::default_model_path(|k| std::env::var_os(k)), &shape, "q8_0").unwrap();
    path
}

#[test]
fn two_conversations_on_a_hybrid_moe_share_decode_passes_and_each_writes_what_it_wrote_alone() {
    let files = tempfile::tempdir().unwrap();
    let (_dir, store, worker) = start_on(Some(hybrid_moe_file(files.path())));
    let passes = |w: &Worker| w.engine().unwrap().model().passes_run();
    let settings = ConversationSettings { temperature: 1.0, seed: Some(5), max_new_tokens: 40, ..Default::default() };
    let prompts = ["Tell me about the sea.", "And about the mountains, at length?"];
    let run = |text: &str| {
        let c = store.create_conversation().unwrap().id;
        let r = reply_row(&store, c, text);
        let (j, rx) = job(c, r, vec![ChatMessage::user(text)], settings.clone());
        worker.enqueue(j).unwrap();
        rx
    };
    let ids = |events: &[GenerationEvent]| -> Vec<u32> {
        events
            .iter()
            .filter_map(|e| match e {
                GenerationEvent::Tokens { ids, .. } => Some(ids.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    };
    // Each alone.
    let mut alone = Vec::new();
    let mut apart = 0;
    for p in prompts {
        let before = passes(&worker);
        alone.push(ids(&collect(&run(p))));
        apart += passes(&worker) - before;
    }
    // Together: both decode in the same passes.
    let before = passes(&worker);
    let (a, b) = (run(prompts[0]), run(prompts[1]));
    let together = [ids(&collect(&a)), ids(&collect(&b))];
    let shared = passes(&worker) - before;
    assert_eq!(together[0], alone[0], "the first writes what it wrote alone");
    assert_eq!(together[1], alone[1], "the second too");
    assert!(alone.iter().all(|t| t.len() >= 30), "{:?}", alone.iter().map(Vec::len).collect::<Vec<_>>());
    assert!(shared + 20 <= apart, "{shared} passes together, {apart} apart: the decode steps were not shared");
}

/// A chat reply offered tools and required to call one (the chat's tool use
/// "always"): its call is taken out of its text and recorded, pending; the
/// `finished` event carries it. With the result recorded, the next prompt
/// holds the call and its result as the template renders them, and the
/// reply reading them continues the cache.
#[test]
fn a_reply_that_calls_a_tool_records_the_call_and_the_next_reply_reads_its_result() {
    use hearth_engine::{ToolChoice, ToolSpec, Tools};
    use hearth_store::{ToolCallRecord, ToolCallStatus};

    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let question = "What time is it in Paris?";
    let reply = reply_row(&store, c.id, question);
    let spec = ToolSpec {
        name: "get_current_time".into(),
        description: Some("The current time in a timezone.".into()),
        parameters: serde_json::json!({"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}),
    };
    let tools = Tools { specs: vec![spec], choice: ToolChoice::Required, parallel: false };
    let (messages, _) = hearth_worker::history::prompt_messages(&store, c.id, Some(reply)).unwrap();
    let (mut j, rx) = job(c.id, reply, messages, greedy(96));
    j.tools = tools.clone();
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    let Some(GenerationEvent::Finished { reason, tool_calls, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(reason, "tool_calls");
    assert_eq!(tool_calls.len(), 1, "{tool_calls:?}");
    let call = &tool_calls[0];
    assert_eq!((call.name.as_str(), call.status), ("get_current_time", ToolCallStatus::Pending));
    assert_eq!(call.call_id, format!("call_{reply}_0"));
    let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
    assert!(args["timezone"].is_string(), "{args}");
    assert_eq!(store.tool_calls(reply).unwrap(), tool_calls.clone());
    let shown = store.thread(c.id).unwrap();
    assert_eq!(shown.last().unwrap().tool_calls, tool_calls.clone());
    assert!(!shown.last().unwrap().message.content.contains("get_current_time"), "the call is not left in the text");

    // The app ran it.
    let done = ToolCallRecord {
        server: Some("time".into()),
        tool: Some("get_current_time".into()),
        status: ToolCallStatus::Ok,
        result: "<b>It is 12:00 in Paris.</b>".into(),
        elapsed_ms: Some(12),
        ..call.clone()
    };
    store.update_tool_call(reply, 0, &done).unwrap();
    let next = store.add_message(c.id, Some(reply), Role::Assistant, "", MessageStatus::Streaming).unwrap().id;
    let (messages, _) = hearth_worker::history::prompt_messages(&store, c.id, Some(reply)).unwrap();
    let roles: Vec<_> = messages.iter().map(|m| m.role).collect();
    use hearth_engine::Role as R;
    assert_eq!(roles, [R::User, R::Assistant, R::Tool]);
    assert_eq!(messages[1].tool_calls.as_ref().unwrap()[0].id, call.call_id);
    assert_eq!(messages[2].tool_call_id.as_deref(), Some(call.call_id.as_str()));
    assert_eq!(messages[2].content, done.result);

    let (mut j, rx) = job(c.id, next, messages, greedy(24));
    j.tools = Tools { choice: ToolChoice::Auto, ..tools };
    worker.enqueue(j).unwrap();
    let (_, stats) = finished(&collect(&rx));
    assert!(
        stats.processed_tokens < stats.prompt_tokens / 2,
        "the reply after the call reads its result, not the conversation again: {} of {}",
        stats.processed_tokens,
        stats.prompt_tokens
    );
}
