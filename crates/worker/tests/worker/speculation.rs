//! Speculative decoding through the worker: two conversations whose
//! replies draft, in passes they share (`advance_all`), write what each
//! writes alone without drafts, and each reply's stats say what its drafts did.

use hearth_store::SpeculationMode;

use super::*;

fn settings(speculation: SpeculationMode) -> ConversationSettings {
    ConversationSettings { speculation, draft_tokens: 6, ..greedy(60) }
}

#[test]
fn two_conversations_drafting_in_shared_passes_write_what_each_writes_alone_without() {
    let (_dir, store, worker) = start();
    let asks = [
        "Repeat exactly, twice: the quick brown fox jumps over the lazy dog near the river bank.",
        "Copy this list: apples, pears, plums, cherries, apples, pears, plums, cherries.",
    ];
    let run_all = |speculation: SpeculationMode| {
        let receivers: Vec<_> = asks
            .iter()
            .map(|ask| {
                let c = store.create_conversation().unwrap();
                let r = reply_row(&store, c.id, ask);
                let (j, rx) = job(c.id, r, vec![ChatMessage::user(*ask)], settings(speculation));
                worker.enqueue(j).unwrap();
                rx
            })
            .collect();
        receivers.iter().map(|rx| finished(&collect(rx))).collect::<Vec<_>>()
    };
    let drafting = run_all(SpeculationMode::Ngram);
    let plain = run_all(SpeculationMode::Off);
    let mut accepted = 0;
    for ((d_reason, d), (p_reason, p)) in drafting.iter().zip(&plain) {
        assert_eq!(d_reason, p_reason);
        let tokens = |s: &hearth_store::ReplyStats| s.replay.as_ref().unwrap().tokens.clone();
        assert_eq!(tokens(d), tokens(p), "the same tokens with drafts as without");
        let drafts = d.drafts.expect("drafting replies report their drafts");
        assert_eq!((drafts.mode, drafts.draft_tokens), (SpeculationMode::Ngram, 6));
        assert!(drafts.accepted <= drafts.drafted);
        accepted += drafts.accepted;
        assert_eq!(p.drafts, None, "no drafts reported with speculation off");
    }
    assert!(accepted > 0, "replies that copy their prompt take drafts");
}

/// The session file a conversation's draft model's keys and values are
/// saved in, read back: the tokens of the pass that began at position 0
/// (how much of the conversation it first read in one go), and how many it holds.
fn draft_file(dir: &std::path::Path, conversation: i64, draft: &std::path::Path, context: usize) -> (u32, u32) {
    let engine = hearth_engine::Engine::open(draft).unwrap();
    engine.hash_file(&|| false).unwrap();
    let file = dir.join("caches").join(format!("{conversation}.draft.session"));
    let identity = engine.cache_identity(context).unwrap();
    let restored = hearth_engine::session_file::read(&file, &identity, engine.model()).unwrap();
    assert!(restored.complete);
    let first = restored.session.passes().each().find(|&(start, _, _)| start == 0);
    (first.map_or(0, |(_, _, kept)| kept), restored.session.tokens().len() as u32)
}

#[test]
fn a_draft_model_drafts_replies_its_cache_is_saved_and_restored_and_one_that_cannot_draft_is_refused() {
    let (dir, store, worker) = start();
    let default = hearth_engine::paths::default_model_path(|k| std::env::var_os(k));
    // The default model's weights in another file: a draft model that
    // agrees with the model on every token.
    let draft = dir.path().join("draft.gguf");
    std::fs::copy(&default, &draft).unwrap();
    let drafting = ConversationSettings {
        speculation: SpeculationMode::Draft,
        draft_model: Some(draft.display().to_string()),
        context_length: 1024,
        ..settings(SpeculationMode::Draft)
    };
    let plain = ConversationSettings { context_length: 1024, ..settings(SpeculationMode::Off) };
    let ask = "Write the numbers from one to twenty in words, separated by commas.";
    let first_turn = |settings: &ConversationSettings| {
        let c = store.create_conversation().unwrap();
        let r = reply_row(&store, c.id, ask);
        let (j, rx) = job(c.id, r, vec![ChatMessage::user(ask)], settings.clone());
        worker.enqueue(j).unwrap();
        let (reason, stats) = finished(&collect(&rx));
        (c.id, r, reason, stats)
    };
    let tokens = |s: &hearth_store::ReplyStats| s.replay.as_ref().unwrap().tokens.clone();
    let (_, _, plain_reason, plain_stats) = first_turn(&plain);
    let (c, r, reason, stats) = first_turn(&drafting);
    assert_eq!((&reason, tokens(&stats)), (&plain_reason, tokens(&plain_stats)), "the plain reply's tokens");
    let drafts = stats.drafts.expect("a drafting reply reports its drafts");
    assert_eq!(drafts.mode, SpeculationMode::Draft);
    assert!(drafts.accepted > 0 && drafts.accepted <= drafts.drafted, "{drafts:?}");
    assert!(worker.wait_idle(Duration::from_secs(10)));
    let first_prompt = stats.prompt_tokens;
    assert_eq!(draft_file(dir.path(), c, &draft, 1024).0, first_prompt, "the draft cache is saved");

    // As after a restart: the next turn restores both caches, and the draft
    // model reads only what is new (the file keeps the first turn's read).
    drop(worker);
    let worker = Worker::start(
        store.reopen().unwrap(),
        WorkerConfig::saving_caches_in(dir.path().join("caches")),
        Box::new(|_| {}),
    );
    worker.load_model(default.clone());
    let next = "Now from twenty-one to thirty.";
    let r2 = reply_row(&store, c, next);
    let history = vec![
        ChatMessage::user(ask),
        ChatMessage::assistant(store.message(r).unwrap().content),
        ChatMessage::user(next),
    ];
    let (j, rx) = job(c, r2, history.clone(), drafting.clone());
    worker.enqueue(j).unwrap();
    let (_, second) = finished(&collect(&rx));
    assert!(second.processed_tokens < second.prompt_tokens - first_prompt + 4, "restored: {second:?}");
    assert!(second.drafts.is_some_and(|d| d.accepted > 0));
    assert!(worker.wait_idle(Duration::from_secs(10)));
    let (first_read, saved) = draft_file(dir.path(), c, &draft, 1024);
    assert_eq!(first_read, first_prompt, "appended to, not read again");
    assert!(saved > second.prompt_tokens, "the draft model read the second turn and its reply: {saved} tokens");

    // A draft model of another vocabulary, or none at that path: the reply
    // fails saying why, and the chat goes on from its cache once drafting
    // is off.
    let mut history = history;
    history.push(ChatMessage::assistant(store.message(r2).unwrap().content));
    history.push(ChatMessage::user("And thirty-one?"));
    let gemma = default.with_file_name("gemma-3-270m-q4_k_m.gguf");
    let missing = dir.path().join("missing.gguf");
    for (bad, parts) in [
        (&gemma, ["gemma-3-270m-q4_k_m.gguf (Gemma 3) cannot draft for", "its vocabulary has 262144 tokens"]),
        (&missing, ["cannot open the draft model", "missing.gguf"]),
    ] {
        let wrong = ConversationSettings { draft_model: Some(bad.display().to_string()), ..drafting.clone() };
        let r3 = reply_row(&store, c, "And thirty-one?");
        let (j, rx) = job(c, r3, history.clone(), wrong);
        worker.enqueue(j).unwrap();
        match collect(&rx).last() {
            Some(GenerationEvent::Error { error }) => {
                assert_eq!(error.kind, hearth_worker::error::ErrorKind::InvalidSettings, "{error:?}");
                for part in parts {
                    assert!(error.message.contains(part), "{}", error.message);
                }
            }
            other => panic!("expected the draft model refused, got {other:?}"),
        }
    }
    let r4 = reply_row(&store, c, "And thirty-one?");
    let (j, rx) = job(c, r4, history, plain);
    worker.enqueue(j).unwrap();
    let (_, fourth) = finished(&collect(&rx));
    assert!(fourth.processed_tokens < 30, "the conversation's cache was kept: {fourth:?}");
}
