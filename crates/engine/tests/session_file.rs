//! Saved conversation caches: restored output equals a cold prefill token
//! for token, and anything wrong with the file means a clean re-prefill.

mod common;

use common::{tiny, Family, TinySpec, VOCAB};
use hearth_engine::{session_file, Engine, SamplingParams, Session};

/// An engine whose file hash is known, as the app's is once hashed.
fn hashed(engine: Engine) -> Engine {
    engine.hash_file(&|| false).unwrap();
    engine
}

fn ids(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| 3 + (i * 37 + salt * 11) % (VOCAB as u32 - 3)).collect()
}

/// One greedy turn; returns the generated tokens and how many prompt tokens were run.
fn turn(engine: &Engine, session: &mut Session, prompt: &[u32]) -> (Vec<u32>, usize) {
    let mut config = engine.generation_config(SamplingParams::greedy(), 12);
    config.end_tokens.clear();
    let out = session.start_turn(engine.model(), engine.tokenizer(), prompt, config, 1).unwrap().run().unwrap();
    (out.sequences[0].tokens.clone(), out.stats.processed_tokens)
}

/// Turn 1 from scratch, then the conversation and turn 2's new tokens.
fn conversation(engine: &Engine, context: usize) -> (Session, Vec<u32>) {
    let mut session = engine.new_session(Some(context));
    let first = ids(40, 1);
    let (reply, _) = turn(engine, &mut session, &first);
    let mut second: Vec<u32> = first.iter().chain(&reply).copied().collect();
    second.extend(ids(9, 2));
    (session, second)
}

fn cold(engine: &Engine, context: usize, prompt: &[u32]) -> Vec<u32> {
    turn(engine, &mut engine.new_session(Some(context)), prompt).0
}

#[test]
fn restored_caches_continue_exactly_like_a_cold_prefill() {
    // Gemma 3's sliding-window layers included: the conversation is longer
    // than its window. Qwen 3.5's recurrent state comes back from its chunks.
    // Gemma 4's too: heads of two sizes, shared KV layers, per-layer
    // embeddings, experts.
    let specs = [
        TinySpec::new(Family::Llama),
        TinySpec::new(Family::Gemma3),
        TinySpec::new(Family::Qwen35),
        TinySpec::gemma4(false),
        TinySpec::gemma4(true),
    ];
    for spec in specs {
        let family = spec.family;
        let (dir, path) = tiny(&spec);
        let engine = hashed(Engine::open(&path).unwrap());
        let context = 256;
        let identity = engine.cache_identity(context).unwrap();
        let (session, second) = conversation(&engine, context);
        let file = dir.path().join("c.session");
        session_file::write(&file, &identity, &session).unwrap();

        let restored = session_file::read(&file, &identity, engine.model()).unwrap();
        assert!(restored.complete);
        assert_eq!(restored.session.tokens(), session.tokens());
        let mut restored = restored.session;
        let (warm, processed) = turn(&engine, &mut restored, &second);
        assert_eq!(warm, cold(&engine, context, &second), "{family:?}");
        assert_eq!(processed, second.len() - session.tokens().len(), "{family:?}: only the new tokens are run");

        // Turn 2 appended to the same file, then restored again.
        session_file::append(&file, &restored, session.tokens().len()).unwrap();
        let again = session_file::read(&file, &identity, engine.model()).unwrap();
        assert!(again.complete);
        assert_eq!(again.session.tokens(), restored.tokens());
        let mut third: Vec<u32> = second.iter().chain(&warm).copied().collect();
        third.extend(ids(5, 3));
        let mut s = again.session;
        assert_eq!(turn(&engine, &mut s, &third).0, cold(&engine, context, &third), "{family:?} after append");
    }
}

#[test]
fn damaged_or_mismatched_files_never_change_the_output() {
    let (dir, path) = tiny(&TinySpec::new(Family::Llama));
    let engine = hashed(Engine::open(&path).unwrap());
    let context = 256;
    let identity = engine.cache_identity(context).unwrap();
    let (session, second) = conversation(&engine, context);
    let expected = cold(&engine, context, &second);
    let file = dir.path().join("c.session");
    session_file::write(&file, &identity, &session).unwrap();
    let bytes = std::fs::read(&file).unwrap();

    // Whatever survives reading is used; the output must still equal the cold one.
    let check = |name: &str, damaged: &[u8]| {
        std::fs::write(&file, damaged).unwrap();
        match session_file::read(&file, &identity, engine.model()) {
            Err(_) => {}
            Ok(r) => {
                assert!(!r.complete, "{name}: damage must be noticed");
                let mut s = r.session;
                assert_eq!(turn(&engine, &mut s, &second).0, expected, "{name}");
            }
        }
    };
    let mut flipped = bytes.clone();
    let at = bytes.len() - 1000;
    flipped[at] ^= 0x01;
    check("a flipped byte in the keys and values", &flipped);
    let mut flipped = bytes.clone();
    flipped[20] ^= 0x01;
    check("a flipped byte in the header", &flipped);
    check("a truncated file", &bytes[..bytes.len() / 2]);
    check("an empty file", &[]);

    // A second turn appended, then torn in the middle: the first chunk is kept.
    std::fs::write(&file, &bytes).unwrap();
    let mut longer = session.clone();
    turn(&engine, &mut longer, &second);
    session_file::append(&file, &longer, session.tokens().len()).unwrap();
    let full = std::fs::read(&file).unwrap();
    std::fs::write(&file, &full[..bytes.len() + (full.len() - bytes.len()) / 2]).unwrap();
    let r = session_file::read(&file, &identity, engine.model()).unwrap();
    assert!(!r.complete);
    assert_eq!(r.session.tokens(), session.tokens(), "the verified first chunk survives a torn append");

    // Another model or another context length: refused outright.
    std::fs::write(&file, &bytes).unwrap();
    let other_spec = TinySpec { seed: 99, ..TinySpec::new(Family::Llama) };
    let (_d2, other_path) = tiny(&other_spec);
    let other = hashed(Engine::open(&other_path).unwrap());
    assert!(session_file::read(&file, &other.cache_identity(context).unwrap(), other.model()).is_err());
    assert!(session_file::read(&file, &engine.cache_identity(128).unwrap(), engine.model()).is_err());
    let gemma_dir = tiny(&TinySpec::new(Family::Gemma3));
    let gemma = hashed(Engine::open(&gemma_dir.1).unwrap());
    assert!(session_file::read(&file, &gemma.cache_identity(context).unwrap(), gemma.model()).is_err());
}

#[test]
fn a_cache_written_before_the_model_is_hashed_is_never_read() {
    let (_dir, path) = tiny(&TinySpec::new(Family::Llama));
    let unhashed = Engine::open(&path).unwrap();
    let context = 128;
    let (session, _) = conversation(&unhashed, context);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.session");
    let identity = unhashed.cache_identity(context).unwrap();
    assert_eq!(identity.model_sha256, None);
    session_file::write(&file, &identity, &session).unwrap();
    assert!(session_file::read(&file, &identity, unhashed.model()).is_err(), "not even by the process that wrote it");
    let engine = hashed(Engine::open(&path).unwrap());
    assert!(
        session_file::read(&file, &engine.cache_identity(context).unwrap(), engine.model()).is_err(),
        "nor once the hash is known"
    );
    assert_eq!(engine.file_sha256().unwrap().len(), 64);
}

#[test]
fn a_file_spliced_from_two_histories_is_rejected_at_the_splice() {
    let (dir, path) = tiny(&TinySpec::new(Family::Llama));
    let engine = hashed(Engine::open(&path).unwrap());
    let context = 256;
    let identity = engine.cache_identity(context).unwrap();
    // Two conversations with the same first turn, different second turns.
    let (session, second) = conversation(&engine, context);
    let (a, b) = (dir.path().join("a.session"), dir.path().join("b.session"));
    let mut other_second = second.clone();
    *other_second.last_mut().unwrap() ^= 1;
    let mut chunks = Vec::new();
    for (file, prompt) in [(&a, &second), (&b, &other_second)] {
        session_file::write(file, &identity, &session).unwrap();
        let mut longer = session.clone();
        turn(&engine, &mut longer, prompt);
        session_file::append(file, &longer, session.tokens().len()).unwrap();
        let whole = std::fs::read(file).unwrap();
        assert!(session_file::read(file, &identity, engine.model()).unwrap().complete);
        chunks.push(whole);
    }
    // A's header and first chunk, then B's second chunk: each part is intact.
    let first_len = {
        session_file::write(&a, &identity, &session).unwrap();
        std::fs::metadata(&a).unwrap().len() as usize
    };
    assert_eq!(chunks[0][..first_len], chunks[1][..first_len], "the same first turn, byte for byte");
    let mut spliced = chunks[0][..first_len].to_vec();
    spliced.extend_from_slice(&chunks[1][first_len..]);
    std::fs::write(&a, &spliced).unwrap();
    // (Same first chunk, so this splice is B itself: it must read whole.)
    assert!(session_file::read(&a, &identity, engine.model()).unwrap().complete);
    // B's second chunk after A's second chunk: out of place, so rejected there.
    let mut spliced = chunks[0].clone();
    spliced.extend_from_slice(&chunks[1][first_len..]);
    std::fs::write(&a, &spliced).unwrap();
    let r = session_file::read(&a, &identity, engine.model()).unwrap();
    assert!(!r.complete, "a chunk that does not follow is noticed");
    assert_eq!(r.session.tokens().len(), chunks_tokens(&engine, &chunks[0], &identity, dir.path()));
    // Two conversations with different first turns of the same length: B's
    // second chunk claims the right position after A's first, but it chains
    // to B's first chunk, so it is rejected and A's first chunk kept.
    let two_turns = |salt: u32, file: &std::path::Path| -> (Vec<u8>, usize, usize) {
        let mut s = engine.new_session(Some(context));
        let first = ids(40, salt);
        let (reply, _) = turn(&engine, &mut s, &first);
        session_file::write(file, &identity, &s).unwrap();
        let first_len = std::fs::metadata(file).unwrap().len() as usize;
        let mut next: Vec<u32> = first.iter().chain(&reply).copied().collect();
        next.extend(ids(9, salt + 1));
        let at = s.tokens().len();
        let mut longer = s.clone();
        turn(&engine, &mut longer, &next);
        session_file::append(file, &longer, at).unwrap();
        (std::fs::read(file).unwrap(), first_len, at)
    };
    let (x, x_first, x_at) = two_turns(7, &a);
    let (y, y_first, y_at) = two_turns(9, &b);
    assert_eq!(x_at, y_at, "the second chunks start at the same position");
    let mut spliced = x[..x_first].to_vec();
    spliced.extend_from_slice(&y[y_first..]);
    std::fs::write(&a, &spliced).unwrap();
    let r = session_file::read(&a, &identity, engine.model()).unwrap();
    assert!(!r.complete, "a chunk chained to another history is noticed");
    assert_eq!(r.session.tokens().len(), x_at, "only the first chunk is used");
}

/// Tokens in the verified chunks of a file's bytes.
fn chunks_tokens(
    engine: &Engine,
    bytes: &[u8],
    identity: &hearth_engine::CacheIdentity,
    dir: &std::path::Path,
) -> usize {
    let f = dir.join("count.session");
    std::fs::write(&f, bytes).unwrap();
    session_file::read(&f, identity, engine.model()).unwrap().session.tokens().len()
}

#[test]
fn a_branch_reuses_its_prefix_and_matches_a_cold_prefill() {
    // Edit the last message: the cache is truncated to where the two versions
    // part, and only the edited tail is run. Gemma 3's sliding layers need no
    // checkpoint, since the cache keeps every position and windows are masks.
    for spec in [
        TinySpec::new(Family::Llama),
        TinySpec::new(Family::Gemma3),
        TinySpec::gemma4(false),
        TinySpec::gemma4(true),
        TinySpec::new(Family::Deepseek2),
        TinySpec::new(Family::Phi3),
    ] {
        let family = spec.family;
        let (_dir, path) = tiny(&spec);
        let engine = hashed(Engine::open(&path).unwrap());
        let (mut session, second) = conversation(&engine, 256);
        turn(&engine, &mut session, &second);
        let mut edited = second.clone();
        let cut = edited.len() - 6;
        edited.truncate(cut);
        edited.extend(ids(7, 9));
        let (tokens, processed) = turn(&engine, &mut session, &edited);
        assert_eq!(processed, edited.len() - cut, "{family:?}: only the edited tail runs");
        assert_eq!(tokens, cold(&engine, 256, &edited), "{family:?}");
        // Regenerating the same prompt runs nothing: it starts from the
        // logits its prefill left.
        let (again, processed) = turn(&engine, &mut session, &edited);
        assert_eq!(processed, 0);
        assert_eq!(again, tokens);
        // A restored copy has no such logits: it runs just the last token.
        let mut restored = session_file_roundtrip(&engine, &session);
        let (again, processed) = turn(&engine, &mut restored, &edited);
        assert_eq!(processed, 1);
        assert_eq!(again.len(), tokens.len());
    }
}

#[test]
fn the_real_gemma3_file_restores_exactly_across_its_sliding_window() {
    // The one real sliding-window model: a conversation longer than its 512-position window.
    let engine = hashed(Engine::open(common::gemma3_model()).unwrap());
    let text = include_str!("../../../ARCHITECTURE.md");
    let all = engine.tokenizer().encode(text, true, false).unwrap();
    assert!(all.len() > 700);
    let context = 1024;
    let identity = engine.cache_identity(context).unwrap();
    let mut session = engine.new_session(Some(context));
    let first = &all[..560];
    let (reply, _) = turn(&engine, &mut session, first);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.session");
    session_file::write(&file, &identity, &session).unwrap();
    let mut second: Vec<u32> = first.iter().chain(&reply).copied().collect();
    second.extend_from_slice(&all[560..600]);
    let mut restored = session_file::read(&file, &identity, engine.model()).unwrap().session;
    assert_eq!(restored.tokens(), session.tokens());
    let (from_disk, processed) = turn(&engine, &mut restored, &second);
    assert_eq!(processed, second.len() - session.tokens().len(), "only the new tokens are run");
    // The file holds exactly what memory held, so continuing from it equals
    // continuing the session that was saved. (A cold prefill of the same
    // history batches its rows differently, and this file's Q4_K matrices,
    // like llama.cpp's, sum a batch's rows in fours in another order than a
    // lone row, so its later tokens may differ near ties.)
    let mut in_memory = session;
    let (warm, _) = turn(&engine, &mut in_memory, &second);
    assert_eq!(from_disk, warm);
}

/// `session` written to a file and read back.
fn session_file_roundtrip(engine: &Engine, session: &Session) -> Session {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.session");
    let identity = engine.cache_identity(session.context_length()).unwrap();
    session_file::write(&file, &identity, session).unwrap();
    session_file::read(&file, &identity, engine.model()).unwrap().session
}
