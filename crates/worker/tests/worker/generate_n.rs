//! Generate N: variants from one prompt, each with its cache.

use super::*;

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
