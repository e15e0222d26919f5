//! The replay record every reply keeps, and replaying from it.

use super::*;

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
