//! A `.hearth` bundle exported in the moment a reply's cache is being saved
//! (its conversation already free again) holds the cache from before the
//! save or after it, never a file that ends in half a chunk. The worker's
//! test hook holds every cache append open for a while.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use hearth_engine::ChatMessage;
use hearth_store::{ConversationSettings, MessageStatus, Role, Store};
use hearth_worker::events::GenerationEvent;
use hearth_worker::{ReplyJob, TestHooks, Worker, WorkerConfig};

/// One greedy turn of conversation `c` after its shown branch.
fn turn(store: &Store, worker: &Worker, c: i64, text: &str) {
    let thread = store.thread(c).unwrap();
    let mut history: Vec<ChatMessage> = thread
        .iter()
        .map(|t| match t.message.role {
            Role::User => ChatMessage::user(t.message.content.clone()),
            _ => ChatMessage::assistant(t.message.content.clone()),
        })
        .collect();
    history.push(ChatMessage::user(text));
    let u =
        store.add_message(c, thread.last().map(|t| t.message.id), Role::User, text, MessageStatus::Complete).unwrap();
    let reply = store.add_message(c, Some(u.id), Role::Assistant, "", MessageStatus::Streaming).unwrap().id;
    let (tx, rx) = mpsc::channel();
    let settings = ConversationSettings { temperature: 0.0, max_new_tokens: 16, ..Default::default() };
    worker.enqueue(ReplyJob::new(c, reply, history, settings, Box::new(move |e| drop(tx.send(e))))).unwrap();
    loop {
        match rx.recv_timeout(Duration::from_secs(120)).expect("the reply ends") {
            GenerationEvent::Finished { .. } => break,
            GenerationEvent::Error { error } => panic!("reply failed: {error:?}"),
            _ => {}
        }
    }
    assert!(worker.wait_idle(Duration::from_secs(30)));
}

/// The cache member of a bundle, if it has one.
fn cache_member(bundle: &Path) -> Option<Vec<u8>> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(bundle).unwrap()).unwrap();
    let mut m = zip.by_name(hearth_worker::bundle::CACHE).ok()?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut m, &mut bytes).unwrap();
    Some(bytes)
}

#[test]
fn a_bundle_exported_while_a_cache_is_saved_holds_it_before_or_after_never_half() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hearth.db")).unwrap();
    // Every append holds the file ending in half a chunk for 400 ms.
    let config = WorkerConfig {
        test_hooks: TestHooks { append_pause: Some(Duration::from_millis(400)), ..TestHooks::default() },
        ..WorkerConfig::saving_caches_in(dir.path().join("caches"))
    };
    let worker = Worker::start(store.reopen().unwrap(), config, Box::new(|_| {}));
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    assert!(worker.wait_idle(Duration::from_secs(180)));
    let c = store.create_conversation().unwrap().id;
    turn(&store, &worker, c, "What is 2 + 2?");
    let saved = dir.path().join("caches").join(format!("{c}.session"));
    let out = dir.path().join("racing.hearth");
    for text in ["And 3 + 3?", "And 4 + 4?"] {
        let before = std::fs::read(&saved).unwrap();
        let stop = AtomicBool::new(false);
        // Exports as fast as they go while the turn runs and its cache is
        // appended; one refused as busy is fine, a copy of half a chunk is not.
        let (copies, longest) = std::thread::scope(|s| {
            let (exporting, worker, stop, out) = (store.reopen().unwrap(), &worker, &stop, &out);
            let exporter = s.spawn(move || {
                let (mut copies, mut longest) = (Vec::new(), Duration::ZERO);
                while !stop.load(Ordering::Relaxed) {
                    let started = std::time::Instant::now();
                    if worker.export_bundle(&exporting, c, out).is_ok() {
                        longest = longest.max(started.elapsed());
                        copies.extend(cache_member(out));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                (copies, longest)
            });
            turn(&store, worker, c, text);
            stop.store(true, Ordering::Relaxed);
            exporter.join().unwrap()
        });
        let after = std::fs::read(&saved).unwrap();
        assert!(after.len() > before.len() && after.starts_with(&before), "the turn appended to the file");
        // One export came while the append was held open, and waited for it.
        assert!(longest >= Duration::from_millis(200), "the longest export took {longest:?}");
        for copy in &copies {
            assert!(
                copy == &before || copy == &after,
                "a bundle held {} bytes of a cache that was {} bytes, then {}",
                copy.len(),
                before.len(),
                after.len()
            );
        }
        worker.export_bundle(&store, c, &out).unwrap();
        assert_eq!(cache_member(&out).as_ref(), Some(&after));
    }
}
