//! A hybrid model's cache (Qwen 3.5: recurrent layers beside attention
//! layers; LFM2's short convolutions) keeps every promise a transformer's does: the next turn reads
//! only its new tokens, an edit or a branch reads from the latest
//! checkpoint before it, a saved cache continues exactly, a stopped chunk
//! leaves the cache as it was, and a replay gives the same bits.

mod common;

use common::{tiny, Family, TinySpec, VOCAB};
use hearth_engine::model::PREFILL_CHUNK;
use hearth_engine::recurrent_state::DECODE_CHECKPOINT_INTERVAL;
use hearth_engine::{session_file, Engine, EngineError, SamplingParams, Session};

fn ids(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| 3 + (i * 37 + salt * 11 + i * i / 5) % (VOCAB as u32 - 3)).collect()
}

fn engine(family: Family) -> (tempfile::TempDir, Engine) {
    let (dir, path) = tiny(&TinySpec { context: 4096, ..TinySpec::new(family) });
    let engine = Engine::open(&path).unwrap();
    engine.hash_file(&|| false).unwrap();
    (dir, engine)
}

/// One greedy turn of `max` tokens; the reply and how many prompt tokens were run.
fn turn(engine: &Engine, session: &mut Session, prompt: &[u32], max: usize) -> (Vec<u32>, usize) {
    let mut config = engine.generation_config(SamplingParams::greedy(), max);
    config.end_tokens.clear();
    let out = session.start_turn(engine.model(), engine.tokenizer(), prompt, config, 1).unwrap().run().unwrap();
    (out.sequences[0].tokens.clone(), out.stats.processed_tokens)
}

#[test]
fn an_edit_reads_from_the_latest_checkpoint_before_it_with_the_bits_of_a_fresh_read() {
    for family in [Family::Qwen35, Family::Qwen35Moe, Family::Lfm2] {
        let (_dir, engine) = engine(family);
        let m = engine.model();
        let mut session = engine.new_session(Some(4096));
        let long = ids(1200, 1);
        let (n, _) = session.prefill(m, &long).unwrap();
        assert_eq!(n, 1200);
        assert_eq!(session.cache().checkpoint_positions(), vec![512, 1024, 1200], "{family:?}: each chunk's end");
        // An edit at 700: back to 512, then 208 + 20 new tokens.
        let mut edited = long[..700].to_vec();
        edited.extend(ids(20, 2));
        let (n, logits) = session.prefill(m, &edited).unwrap();
        assert_eq!(n, edited.len() - 512, "{family:?}: from the checkpoint at 512");
        assert_eq!(session.tokens(), &edited[..]);
        // A fresh read cuts the prompt into the same chunks: the same bits.
        let mut fresh = engine.new_session(Some(4096));
        let (_, want) = fresh.prefill(m, &edited).unwrap();
        assert_eq!(logits, want, "{family:?}: bit for bit");
        // Cut back before the first checkpoint: from the start.
        session.truncate(300);
        assert!(session.tokens().is_empty() && session.cache().is_empty(), "{family:?}");
    }
}

#[test]
fn the_next_turn_reads_only_its_new_tokens_and_a_branch_in_a_reply_at_most_an_interval() {
    let (_dir, engine) = engine(Family::Qwen35);
    let mut session = engine.new_session(Some(4096));
    let first = ids(30, 3);
    let reply_len = DECODE_CHECKPOINT_INTERVAL + 40;
    let (reply, n) = turn(&engine, &mut session, &first, reply_len);
    assert_eq!(n, 30);
    let end = session.tokens().len();
    assert_eq!(end, 30 + reply_len - 1, "the last sampled token is not fed");
    let checkpoints = session.cache().checkpoint_positions();
    assert!(
        checkpoints.contains(&30) && checkpoints.contains(&end),
        "the prompt's and the turn's ends: {checkpoints:?}"
    );
    assert!(checkpoints.iter().any(|&p| p > 30 && p < end), "one inside the reply: {checkpoints:?}");

    // The next turn continues from the turn's end.
    let mut second: Vec<u32> = first.iter().chain(&reply).copied().collect();
    second.extend(ids(12, 4));
    let mut branch = session.clone();
    let (_, n) = turn(&engine, &mut session, &second, 4);
    assert_eq!(n, second.len() - end, "only the new tokens");

    // Continuing from a token near the reply's end re-reads at most one interval.
    let at = 30 + reply_len - 10;
    let mut alt = second[..at].to_vec();
    alt.push(7);
    let (_, n) = turn(&engine, &mut branch, &alt, 4);
    assert!(n <= DECODE_CHECKPOINT_INTERVAL + 1, "{n} tokens re-read for a branch at {at}");
}

#[test]
fn a_saved_hybrid_cache_continues_bit_for_bit_and_a_damaged_chunk_keeps_the_ones_before() {
    // Qwen 3.5's delta-rule state and LFM2's convolution state alike.
    for family in [Family::Qwen35, Family::Lfm2] {
        let (dir, engine) = engine(family);
        let m = engine.model();
        let context = 4096;
        let identity = engine.cache_identity(context).unwrap();
        let mut session = engine.new_session(Some(context));
        let first = ids(700, 5);
        let (reply, _) = turn(&engine, &mut session, &first, 8);
        let file = dir.path().join("c.session");
        session_file::write(&file, &identity, &session).unwrap();
        let saved_one = session.clone();

        let mut second: Vec<u32> = first.iter().chain(&reply).copied().collect();
        second.extend(ids(9, 6));
        let (reply2, _) = turn(&engine, &mut session, &second, 8);
        session_file::append(&file, &session, saved_one.tokens().len()).unwrap();

        let restored = session_file::read(&file, &identity, m).unwrap();
        assert!(restored.complete);
        let mut restored = restored.session;
        assert_eq!(restored.tokens(), session.tokens());
        assert_eq!(restored.passes(), session.passes());
        assert_eq!(
            restored.cache().checkpoint_positions(),
            session.cache().checkpoint_positions(),
            "every checkpoint saved"
        );

        let mut third: Vec<u32> = second.iter().chain(&reply2).copied().collect();
        third.extend(ids(5, 7));
        let mut live = session.clone();
        let (a, na) = turn(&engine, &mut live, &third, 6);
        let (b, nb) = turn(&engine, &mut restored, &third, 6);
        assert_eq!((a.clone(), na), (b, nb), "restored continues as the live cache does");
        assert_eq!(na, third.len() - session.tokens().len());
        // The same bits: both caches written again are the same file.
        let (fa, fb) = (dir.path().join("a.session"), dir.path().join("b.session"));
        session_file::write(&fa, &identity, &live).unwrap();
        session_file::write(&fb, &identity, &restored).unwrap();
        assert!(
            std::fs::read(&fa).unwrap() == std::fs::read(&fb).unwrap(),
            "the recurrent state came back bit for bit"
        );

        // Damage the last byte (turn 2's last chunk): the chunks before remain,
        // each with its state, and continue as the live cache cut back there.
        let mut bytes = std::fs::read(&file).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x55;
        std::fs::write(&file, &bytes).unwrap();
        let partial = session_file::read(&file, &identity, m).unwrap();
        assert!(!partial.complete);
        let mut partial = partial.session;
        let kept = partial.tokens().len();
        assert!(kept >= saved_one.tokens().len() && kept < session.tokens().len(), "kept {kept}");
        let mut cut = session.clone();
        cut.truncate(kept);
        assert_eq!(cut.tokens().len(), kept, "a chunk's end is a checkpoint");
        assert_eq!(turn(&engine, &mut partial, &third, 6), turn(&engine, &mut cut, &third, 6));
    }
}

#[test]
fn a_chunk_stopped_between_layers_leaves_the_recurrent_state_as_it_was() {
    let (_dir, engine) = engine(Family::Qwen35);
    let m = engine.model();
    let prompt = ids(2 * PREFILL_CHUNK + 30, 8);
    let mut stopped = engine.new_session(Some(4096));
    assert!(stopped.prefill_rows(m, &prompt, PREFILL_CHUNK, &|| false).unwrap().is_none());
    let err = stopped.prefill_rows(m, &prompt, PREFILL_CHUNK, &|| true).unwrap_err();
    assert!(matches!(err, EngineError::Stopped), "{err}");
    assert_eq!(stopped.tokens().len(), PREFILL_CHUNK);
    let mut logits = None;
    while logits.is_none() {
        logits = stopped.prefill_rows(m, &prompt, PREFILL_CHUNK, &|| false).unwrap();
    }
    let mut whole = engine.new_session(Some(4096));
    let (_, want) = whole.prefill(m, &prompt).unwrap();
    assert_eq!(logits.unwrap(), want, "the same bits as a prefill never stopped");
}

#[test]
fn a_hybrid_turn_replays_bit_for_bit_from_cold_restored_and_live_caches() {
    for family in [Family::Qwen35, Family::Lfm2] {
        let (dir, engine) = engine(family);
        let context = 2048;
        let identity = engine.cache_identity(context).unwrap();
        let mut session = engine.new_session(Some(context));
        let p1 = ids(600, 9);
        let (r1, _) = turn(&engine, &mut session, &p1, 10);
        let mut p2: Vec<u32> = p1.iter().chain(&r1).copied().collect();
        p2.extend(ids(20, 10));
        let config = || {
            let mut c = engine.generation_config(SamplingParams::greedy(), 10);
            c.end_tokens.clear();
            c
        };
        let out = session.start_turn(engine.model(), engine.tokenizer(), &p2, config(), 1).unwrap();
        let passes = out.prompt_passes().clone();
        let r2 = out.run().unwrap().sequences[0].tokens.clone();
        let file = dir.path().join("c.session");
        session_file::write(&file, &identity, &session).unwrap();

        let replay = |s: &mut Session| {
            let turn =
                s.start_replay(engine.model(), engine.tokenizer(), &p2, &passes, config(), &mut |_| true).unwrap();
            let processed = turn.stats().processed_tokens;
            (turn.run().unwrap().sequences[0].tokens.clone(), processed)
        };
        let mut cold = engine.new_session(Some(context));
        assert_eq!(replay(&mut cold).0, r2, "from a cold cache");
        let mut restored = session_file::read(&file, &identity, engine.model()).unwrap().session;
        assert_eq!(replay(&mut restored).0, r2, "from a restored cache");
        assert_eq!(replay(&mut session).0, r2, "from the live cache");
        // Each leaves the live cache's bits.
        for (what, s) in [("cold", &cold), ("restored", &restored)] {
            let (a, b) = (dir.path().join("a.session"), dir.path().join("b.session"));
            session_file::write(&a, &identity, s).unwrap();
            session_file::write(&b, &identity, &session).unwrap();
            assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "{what}");
        }
    }
}

#[test]
fn variants_of_a_hybrid_turn_each_continue_from_their_own_cache() {
    let (_dir, engine) = engine(Family::Qwen35);
    let (m, tk) = (engine.model(), engine.tokenizer());
    let prompt = ids(10, 11);
    let sampling = SamplingParams { temperature: 1.3, seed: 3, ..SamplingParams::default() };
    let config = |seed: u64| {
        let mut c = engine.generation_config(SamplingParams { seed, ..sampling.clone() }, 6);
        c.end_tokens.clear();
        c
    };
    let mut session = engine.new_session(Some(512));
    let turn4 = session.start_turn(m, tk, &prompt, config(3), 4).unwrap();
    let (out, others) = {
        let mut turn4 = turn4;
        while turn4.step().unwrap().is_some() {}
        turn4.finish_variants()
    };
    assert_eq!(others.len(), 3);
    assert!(out.sequences.iter().any(|s| s.tokens != out.sequences[0].tokens), "four samples were identical");
    for (b, seq) in out.sequences.iter().enumerate() {
        let mut alone = engine.new_session(Some(512));
        let single = alone.start_turn(m, tk, &prompt, config(3 + b as u64), 1).unwrap().run().unwrap();
        assert_eq!(seq.tokens, single.sequences[0].tokens, "variant {b}");
        let kept = if b == 0 { &session } else { &others[b - 1] };
        assert_eq!((kept.tokens(), kept.passes()), (alone.tokens(), alone.passes()), "variant {b}");
        // Its recurrent state is its own: the next turn goes on from it.
        let mut next = kept.tokens().to_vec();
        next.extend(ids(3, 40));
        let (mut a, mut c) = (kept.clone(), alone.clone());
        assert_eq!(turn(&engine, &mut a, &next, 3), turn(&engine, &mut c, &next, 3), "variant {b}");
    }
}

/// Runs `turns` to their ends as the worker's scheduler does: every step
/// that runs the model goes into one `decode_step_many` pass. Each turn's tokens.
fn run_together(engine: &Engine, turns: &mut [hearth_engine::Turn]) -> Vec<Vec<u32>> {
    use hearth_engine::{Advance, DecodeInput};
    let (m, tk) = (engine.model(), engine.tokenizer());
    let mut tokens = vec![Vec::new(); turns.len()];
    let mut done = vec![false; turns.len()];
    let mut keep = |i: usize, a: Advance, done: &mut Vec<bool>| match a {
        Advance::Tokens(events) => tokens[i].extend(events.iter().map(|e| e.token)),
        Advance::Done => done[i] = true,
        Advance::Prefill(_) => {}
    };
    while done.iter().any(|d| !d) {
        let (mut ids, mut which, mut caches) = (Vec::new(), Vec::new(), Vec::new());
        let mut others = Vec::new();
        for (i, t) in turns.iter_mut().enumerate().filter(|(i, _)| !done[*i]) {
            let inputs = t.decode_inputs(m);
            if inputs.is_empty() {
                others.push(i);
            }
            for DecodeInput { tokens, cache, .. } in inputs {
                ids.push(tokens[0]);
                which.push(i);
                caches.push(cache);
            }
        }
        let logits = if ids.is_empty() { Vec::new() } else { m.decode_step_many(&ids, &mut caches).unwrap() };
        drop(caches);
        for (i, l) in which.into_iter().zip(logits) {
            let a = turns[i].advance_given(m, tk, vec![l]).unwrap();
            keep(i, a, &mut done);
        }
        for i in others {
            let a = turns[i].advance(m, tk).unwrap();
            keep(i, a, &mut done);
        }
    }
    tokens
}

#[test]
fn generate_four_on_a_hybrid_forks_share_passes_and_each_is_its_lone_run() {
    let (_dir, engine) = engine(Family::Qwen35Moe);
    let (m, tk) = (engine.model(), engine.tokenizer());
    let prompt = ids(40, 12);
    let sampling = SamplingParams { temperature: 1.3, seed: 21, ..SamplingParams::default() };
    let config = |seed: u64| {
        let mut c = engine.generation_config(SamplingParams { seed, ..sampling.clone() }, 16);
        c.end_tokens.clear();
        c
    };
    let mut first = engine.new_session(Some(512)).into_turn(m, prompt.clone(), config(21)).map_err(|(_, e)| e).unwrap();
    while first.is_prefilling() {
        first.advance(m, tk).unwrap();
    }
    let mut turns = vec![first];
    for b in 1..4 {
        let fork = turns[0].fork(m, 21 + b).unwrap();
        turns.push(fork);
    }
    let passes_before = m.passes_run();
    let together = run_together(&engine, &mut turns);
    let passes = m.passes_run() - passes_before;
    assert!(passes <= 16, "{passes} passes for four variants of 16 tokens: they share them");
    assert!(together.iter().any(|t| t != &together[0]), "four samples were identical");
    for (b, tokens) in together.iter().enumerate() {
        let mut alone = engine
            .new_session(Some(512))
            .into_turn(m, prompt.clone(), config(21 + b as u64))
            .map_err(|(_, e)| e)
            .unwrap();
        let single = run_together(&engine, std::slice::from_mut(&mut alone));
        assert_eq!(tokens, &single[0], "variant {b} equals its lone run");
    }
}

/// Qwen 3.5's template writes an earlier reply otherwise than it was
/// sampled (it drops the thinking), so the next turn's history agrees with
/// this turn's prompt only up to where the reply's opening tokens start:
/// the checkpoint kept there (`Turn::set_checkpoint_at`) is where the
/// next turn reads from, not the start of the conversation.
#[test]
fn a_reply_the_template_rewrites_is_read_again_from_its_opening_not_from_the_start() {
    let (_dir, engine) = engine(Family::Qwen35Moe);
    let (m, tk) = (engine.model(), engine.tokenizer());
    let config = || {
        let mut c = engine.generation_config(SamplingParams::greedy(), 6);
        c.end_tokens.clear();
        c
    };
    // The history, then the reply's opening (4 tokens, as `<|im_start|>assistant\n<think>\n`).
    let history = ids(700, 7);
    let opening = ids(4, 8);
    let prompt: Vec<u32> = history.iter().chain(&opening).copied().collect();
    let run = |session: Session, prompt: &[u32], checkpoint_at: Option<usize>| {
        let mut turn = session.into_turn(m, prompt.to_vec(), config()).map_err(|(_, e)| e).unwrap();
        turn.set_checkpoint_at(checkpoint_at);
        while !matches!(turn.advance(m, tk).unwrap(), hearth_engine::Advance::Done) {}
        let processed = turn.stats().processed_tokens;
        let hearth_engine::Ended { session, output: out, .. } = turn.end();
        out.unwrap();
        (session, processed)
    };
    let (session, n) = run(engine.new_session(Some(4096)), &prompt, Some(history.len()));
    assert_eq!(n, prompt.len());
    let checkpoints = session.cache().checkpoint_positions();
    assert!(checkpoints.contains(&700) && checkpoints.contains(&704), "{checkpoints:?}");

    // The next turn: the reply written back without its opening's last
    // tokens (as the template drops `<think>\n`), then a new message.
    let mut next: Vec<u32> = history.iter().chain(&opening[..2]).copied().collect();
    next.extend(ids(30, 9));
    let (_, n) = run(session.clone(), &next, None);
    assert_eq!(n, next.len() - 700, "from the checkpoint at the opening");
    // Without that checkpoint the next one back is the chunk's at 512.
    let (session, _) = run(engine.new_session(Some(4096)), &prompt, None);
    assert!(!session.cache().checkpoint_positions().contains(&700));
    let (_, n) = run(session, &next, None);
    assert_eq!(n, next.len() - 512);

    // The split pass is recorded (a replay follows it), and a fresh read
    // split the same way writes the same reply.
    let (a, _) = run(engine.new_session(Some(4096)), &prompt, Some(700));
    let (b, _) = run(engine.new_session(Some(4096)), &prompt, Some(700));
    assert_eq!(a.tokens(), b.tokens());
    assert_eq!(a.passes(), b.passes());
    assert!(a.passes().each().any(|(start, rows, _)| start == 700 && rows == 4), "{:?}", a.passes());
}
