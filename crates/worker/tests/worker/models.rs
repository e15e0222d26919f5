//! The model file: a bad one, its hash, and one waiting to load.

use super::*;

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
