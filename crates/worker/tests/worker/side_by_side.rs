//! Conversations and requests side by side: queueing, shared decode passes, streaming beside Generate N.

use std::time::Instant;

use super::*;

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
        recurrent: Some(Recurrent {
            state: 64,
            k_heads: 2,
            v_heads: 4,
            interval: 2,
            rope_dims: 16,
            shared_ffn: 128,
            mtp: false,
        }),
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
    // Without drafts, which would save passes of their own.
    let settings = ConversationSettings {
        temperature: 1.0,
        seed: Some(5),
        max_new_tokens: 40,
        speculation: hearth_store::SpeculationMode::Off,
        ..Default::default()
    };
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
