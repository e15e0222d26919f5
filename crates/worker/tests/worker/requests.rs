//! API requests: nothing stored, each client's own cache.

use super::*;

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
    // The prompt's size is told before its first token, as the end tells it.
    let prompt = |events: &[GenerationEvent]| {
        events.iter().find_map(|e| match e {
            GenerationEvent::Prompt { tokens, cached } => Some((*tokens, *cached)),
            _ => None,
        })
    };
    assert_eq!(prompt(&first), Some((s1.prompt_tokens, 0)));
    let a_reply = streamed(&first);
    // The panel's list: this client's cache, holding its prompt and reply.
    let caches = worker.request_caches();
    assert_eq!(caches.len(), 1, "{caches:?}");
    assert!(caches[0].tokens > s1.prompt_tokens && caches[0].bytes > 0, "{caches:?}");

    // Another client, another question: it shares only the template's
    // opening, too little to clone the first client's cache for.
    let b = request(&worker, vec![user("What is a prime number?")], greedy(12), 1);
    let (_, sb) = finished(&b);
    assert_eq!(sb.processed_tokens, sb.prompt_tokens, "{sb:?}");
    let caches = worker.request_caches();
    assert_eq!(caches.len(), 2, "each client its own: {caches:?}");
    assert!(caches[0].last_used_ms >= caches[1].last_used_ms, "most recent first: {caches:?}");
    assert!(caches[0].tokens > sb.prompt_tokens, "{caches:?}");
    // A third shares a long system prompt with the second: it starts from a copy of it.
    let long_system =
        ChatMessage::new(hearth_engine::Role::System, "You answer questions about mathematics. ".repeat(12));
    let (_, s3) = finished(&request(&worker, vec![long_system.clone(), user("What is a prime number?")], greedy(4), 1));
    let (_, s4) = finished(&request(&worker, vec![long_system, user("What is a square number?")], greedy(4), 1));
    assert_eq!(s3.processed_tokens, s3.prompt_tokens);
    assert!(s4.prompt_tokens - s4.processed_tokens >= 64, "{s4:?}");

    // The first client's next turn still finds all of its own cache.
    let a2 = [a1, vec![ChatMessage::new(hearth_engine::Role::Assistant, a_reply), user("And lakes?")]].concat();
    let second = request(&worker, a2, greedy(8), 1);
    let (_, s2) = finished(&second);
    assert!(s2.prompt_tokens - s2.processed_tokens >= s1.prompt_tokens, "{s1:?} {s2:?}");
    assert_eq!(prompt(&second), Some((s2.prompt_tokens, s2.prompt_tokens - s2.processed_tokens)));

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
