//! Cache files and the disk: a disk that is (as good as) full gets no cache
//! files and loses no conversation, and the disk budget holds even against
//! the file just written.

use std::sync::mpsc;
use std::time::Duration;

use hearth_app::events::{GenerationEvent, ModelStatus};
use hearth_app::worker::{CacheBudgets, ReplyJob, Worker, WorkerConfig};
use hearth_engine::ChatMessage;
use hearth_store::{ConversationSettings, MessageStatus, Role, Store};

fn reply(
    store: &Store,
    worker: &Worker,
    conversation: i64,
    text: &str,
    max_new_tokens: u32,
) -> (String, MessageStatus) {
    let parent = store.thread(conversation).unwrap().last().map(|t| t.message.id);
    let u = store.add_message(conversation, parent, Role::User, text, MessageStatus::Complete).unwrap();
    let r = store.add_message(conversation, Some(u.id), Role::Assistant, "", MessageStatus::Streaming).unwrap().id;
    let (tx, rx) = mpsc::channel();
    let settings = ConversationSettings { temperature: 0.0, max_new_tokens, ..Default::default() };
    let events = Box::new(move |e| {
        let _ = tx.send(e);
    });
    worker.enqueue(ReplyJob::new(conversation, r, vec![ChatMessage::user(text)], settings, events)).unwrap();
    loop {
        match rx.recv_timeout(Duration::from_secs(120)).unwrap() {
            GenerationEvent::Finished { reason, .. } => break (reason, store.message(r).unwrap().status),
            GenerationEvent::Error { error } => panic!("{error:?}"),
            _ => {}
        }
    }
}

fn cache_files(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default()
}

#[test]
fn a_full_disk_gets_no_cache_files_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hearth.db")).unwrap();
    let caches = dir.path().join("caches");
    let worker =
        Worker::start(store.reopen().unwrap(), WorkerConfig::saving_caches_in(caches.clone()), Box::new(|_| {}));
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    assert!(worker.wait_idle(Duration::from_secs(120)));
    assert!(matches!(worker.model_status(), ModelStatus::Ready { .. }));

    // A budget smaller than one reply's cache: even the file just written goes.
    worker.set_budgets(CacheBudgets { memory_mb: 512, disk_mb: 1 });
    let c = store.create_conversation().unwrap();
    let (reason, status) = reply(&store, &worker, c.id, "Write a long story about a dragon.", 96);
    assert_eq!((reason.as_str(), status), ("max_tokens", MessageStatus::Complete));
    assert!(worker.wait_idle(Duration::from_secs(10)));
    assert!(
        cache_files(&caches).is_empty(),
        "a ~2.5 MB cache cannot stay under a 1 MB budget: {:?}",
        cache_files(&caches)
    );

    // Room for it: the file stays.
    worker.set_budgets(CacheBudgets { memory_mb: 512, disk_mb: 64 });
    let (reason, _) = reply(&store, &worker, c.id, "And another?", 8);
    assert_eq!(reason, "max_tokens");
    assert!(worker.wait_idle(Duration::from_secs(10)));
    assert_eq!(cache_files(&caches).len(), 1);

    // A disk with less free space than the reserve (the app started again
    // with a 1 TB reserve): no cache is written, the old one is dropped, and
    // the replies are all there.
    drop(worker);
    let config = WorkerConfig { disk_reserve_bytes: 1 << 40, ..WorkerConfig::saving_caches_in(caches.clone()) };
    let worker = Worker::start(store.reopen().unwrap(), config, Box::new(|_| {}));
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    assert!(worker.wait_idle(Duration::from_secs(120)));
    worker.set_budgets(CacheBudgets { memory_mb: 512, disk_mb: 64 });
    let d = store.create_conversation().unwrap();
    let (reason, status) = reply(&store, &worker, d.id, "What is 2 + 2?", 32);
    assert_eq!((reason.as_str(), status), ("end_token", MessageStatus::Complete));
    let (_, status) = reply(&store, &worker, c.id, "One more?", 8);
    assert_eq!(status, MessageStatus::Complete);
    assert!(worker.wait_idle(Duration::from_secs(10)));
    assert!(cache_files(&caches).is_empty(), "{:?}", cache_files(&caches));
    assert_eq!(store.thread(c.id).unwrap().len(), 6, "every message of the conversation is kept");
}
