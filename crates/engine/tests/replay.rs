//! Exact replay: a turn re-run from the passes that computed its prompt
//! gives the same tokens bit for bit, from a cold cache, a restored one or
//! the live one, on files whose matmuls sum batches of rows in other orders
//! than lone rows (the real Gemma 3 Q4_K_M file) and on the default model.

mod common;

use hearth_engine::{session_file, Advance, Engine, GenerationConfig, Passes, SamplingParams, Session};

fn config(engine: &Engine) -> GenerationConfig {
    let mut config = engine.generation_config(
        SamplingParams { temperature: 0.9, top_k: Some(40), seed: 17, ..SamplingParams::default() },
        24,
    );
    config.end_tokens.clear();
    config
}

/// One sampled turn: its tokens and the passes that computed its prompt.
fn turn(engine: &Engine, session: &mut Session, prompt: &[u32]) -> (Vec<u32>, Passes) {
    let mut t = session.start_turn(engine.model(), engine.tokenizer(), prompt, config(engine), 1).unwrap();
    let passes = t.prompt_passes().clone();
    while t.step().unwrap().is_some() {}
    (t.finish(0).sequences[0].tokens.clone(), passes)
}

/// A replay of `prompt` through `passes`: its tokens and how many positions it ran.
fn replay(engine: &Engine, session: &mut Session, prompt: &[u32], passes: &Passes) -> (Vec<u32>, usize) {
    let mut t = session
        .start_replay(engine.model(), engine.tokenizer(), prompt, passes, config(engine), &mut |_| true)
        .unwrap();
    while t.step().unwrap().is_some() {}
    let out = t.finish(0);
    (out.sequences[0].tokens.clone(), out.stats.processed_tokens)
}

/// The same replay as a scheduler runs it, a recorded pass per `advance`:
/// its tokens, how many positions it ran, and the session it leaves.
fn replay_owned(engine: &Engine, session: Session, prompt: &[u32], passes: &Passes) -> (Vec<u32>, usize, Session) {
    let (m, tok) = (engine.model(), engine.tokenizer());
    let mut t = session.into_replay_turn(prompt.to_vec(), passes, config(engine)).map_err(|(_, e)| e).unwrap();
    while !matches!(t.advance(m, tok).unwrap(), Advance::Done) {}
    let processed = t.stats().processed_tokens;
    let hearth_engine::Ended { session, output: out, .. } = t.end();
    (out.unwrap().sequences[0].tokens.clone(), processed, session)
}

fn replays_exactly(engine: Engine) {
    engine.hash_file(&|| false).unwrap();
    let text = include_str!("../../../ARCHITECTURE.md");
    let words = engine.tokenizer().encode(text, false, false).unwrap();
    let context = 1024;
    let mut session = engine.new_session(Some(context));
    // Turn 1, turn 2 on top of it, then an edit that cuts turn 2's prefill
    // pass: turn 3's prompt is computed by a prefill pass, 24 decode steps,
    // six rows of a 30-row pass (which summed them in the order of a long
    // pass, not of six rows), and a last pass.
    let p1 = words[..40].to_vec();
    let (r1, _) = turn(&engine, &mut session, &p1);
    let mut p2: Vec<u32> = p1.iter().chain(&r1).copied().collect();
    p2.extend_from_slice(&words[40..70]);
    turn(&engine, &mut session, &p2);
    let mut p3 = p2[..p2.len() - 24].to_vec();
    p3.extend_from_slice(&words[100..108]);
    let (r3, passes) = turn(&engine, &mut session, &p3);
    assert!(passes.runs().iter().any(|p| p.kept < p.rows), "the edit cut a pass: {:?}", passes.runs());
    assert_eq!(passes.len(), p3.len());

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.session");
    let identity = engine.cache_identity(context).unwrap();
    session_file::write(&file, &identity, &session).unwrap();

    // The same bits, not just the same tokens: the cache a replay leaves,
    // written the same way, is the same file byte for byte.
    let same_file = |s: &Session, what: &str| {
        let other = dir.path().join("other.session");
        session_file::write(&other, &identity, s).unwrap();
        assert!(
            std::fs::read(&other).unwrap() == std::fs::read(&file).unwrap(),
            "{what}: the cache differs from the recorded turn's"
        );
    };
    let mut cold_session = engine.new_session(Some(context));
    let (cold, processed) = replay(&engine, &mut cold_session, &p3, &passes);
    assert_eq!(cold, r3, "from a cold cache");
    assert_eq!(processed, p3.len());
    same_file(&cold_session, "cold");

    let mut restored = session_file::read(&file, &identity, engine.model()).unwrap().session;
    assert_eq!(restored.passes(), session.passes(), "the file keeps the passes");
    let (from_disk, processed) = replay(&engine, &mut restored, &p3, &passes);
    assert_eq!(from_disk, r3, "from a restored cache");
    assert_eq!(processed, 8, "only the last pass runs again");
    same_file(&restored, "restored");

    // As the worker runs it: the same tokens and bits, from cold and from disk.
    let (cold, processed, cold_session) = replay_owned(&engine, engine.new_session(Some(context)), &p3, &passes);
    assert_eq!((cold, processed), (r3.clone(), p3.len()), "owned, from a cold cache");
    same_file(&cold_session, "owned, cold");
    let restored = session_file::read(&file, &identity, engine.model()).unwrap().session;
    let (from_disk, processed, restored) = replay_owned(&engine, restored, &p3, &passes);
    assert_eq!((from_disk, processed), (r3.clone(), 8), "owned, from a restored cache");
    same_file(&restored, "owned, restored");

    let (warm, _) = replay(&engine, &mut session, &p3, &passes);
    assert_eq!(warm, r3, "from the live cache");
    same_file(&session, "live");

    // A plain cold prefill batches turn 3's prompt its own way: other bits.
    let mut plain = engine.new_session(Some(context));
    turn(&engine, &mut plain, &p3);
    let other = dir.path().join("plain.session");
    session_file::write(&other, &identity, &plain).unwrap();
    assert!(std::fs::read(&other).unwrap() != std::fs::read(&file).unwrap(), "a plain prefill is not a replay");

    // Passes that are not the prompt's are refused, not guessed at.
    let mut short = passes.clone();
    short.truncate(p3.len() - 1);
    let err = engine
        .new_session(Some(context))
        .start_replay(engine.model(), engine.tokenizer(), &p3, &short, config(&engine), &mut |_| true)
        .err()
        .unwrap();
    assert!(err.to_string().contains("passes"), "{err}");
}

#[test]
fn a_turn_replays_bit_for_bit_on_the_default_model() {
    replays_exactly(common::open_default());
}

/// Gemma 4's structure (per-layer embeddings, shared KV layers, heads of
/// two sizes, a window shorter than the turns), with the default model's
/// vocabulary.
#[test]
fn a_turn_replays_bit_for_bit_on_a_gemma4_file() {
    use hearth_engine::random_model::{write, Gemma4, Shape};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gemma4.gguf");
    let shape = Shape {
        layers: 7,
        embd: 128,
        ffn: 256,
        heads: 4,
        kv_heads: 1,
        head_dim: Some(64),
        experts: None,
        recurrent: None,
        gpt_oss: false,
        gemma4: Some(Gemma4 { per_layer: 32, shared_kv_layers: 3, head_dim_swa: 32, kv_heads_swa: 2, window: 16 }),
    };
    write(&path, &common::default_model(), &shape, "q8_0").unwrap();
    replays_exactly(Engine::open(&path).unwrap());
}

#[test]
fn a_turn_replays_bit_for_bit_on_the_real_gemma3_file() {
    replays_exactly(Engine::open(common::gemma3_model()).unwrap());
}

/// DeepSeek V2's latent attention and Phi-3's fused projections (LFM2's
/// convolution state replays as Qwen 3.5's does: `hybrid_cache.rs`).
#[test]
fn a_turn_replays_bit_for_bit_on_latent_attention_and_fused_projections() {
    use common::{tiny, Family, TinySpec};
    for family in [Family::Deepseek2, Family::Phi3] {
        let (_dir, path) = tiny(&TinySpec { context: 2048, ..TinySpec::new(family) });
        replays_exactly(Engine::open(&path).unwrap());
    }
}
