//! A reply on its own: streaming and saving it, a prompt too long, and stopping within a step or a prefill.

use super::*;

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
