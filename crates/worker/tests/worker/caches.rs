//! Cache reuse: across restarts, under budgets, across versions and from a token's alternative.

use hearth_worker::CacheState;

use super::*;

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
