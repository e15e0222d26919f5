//! Qwen 3.5/3.6's multi-token-prediction head (`model/mtp.rs`) as a
//! drafter: its logits against a reference computed from the file alone
//! (`tests/reference/mtp_head.py`, numpy over the gguf package's tensors),
//! its cache kept through every kind of pass and cut-back, and replies
//! with `Speculation::Mtp` exactly those of plain decoding.

mod common;

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::GgmlDType;
use common::{tiny, Family, TinySpec};
use hearth_engine::{Engine, SamplingParams, Speculation};

/// Deterministic values in [-2, 2).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

#[test]
fn the_heads_logits_match_a_reference_computed_from_the_file_alone() {
    let Some(python) = common::llamacpp_python() else { return };
    // A venv made before the gguf package joined it (bench/setup-llamacpp.sh adds it).
    let has_gguf = std::process::Command::new(&python).args(["-c", "import gguf"]).status().is_ok_and(|s| s.success());
    if !has_gguf {
        assert!(std::env::var_os("HEARTH_REQUIRE_LLAMACPP").is_none(), "no gguf package: run bench/setup-llamacpp.sh");
        eprintln!("skipped: no gguf package in {} (bench/setup-llamacpp.sh adds it)", python.display());
        return;
    }
    // Rotating whole heads of 16, the sections [4, 2, 2, 0] leave one pair
    // of the eight unclaimed, at angle 0; a low base turns even the slowest
    // pairs far within these few positions.
    let spec = TinySpec {
        mtp: true,
        dtype: GgmlDType::F32,
        rope_dims: 16,
        metadata: vec![("rope.freq_base", Value::F32(2.0))],
        ..TinySpec::new(Family::Qwen35)
    };
    let (_dir, path) = tiny(&spec);
    let engine = Engine::open(&path).unwrap();
    let m = engine.model();
    assert!(m.has_mtp_head());
    let e = m.config().n_embd;
    let tokens: Vec<u32> = (0..9).map(|i| (5 + i * 31 % 200) as u32).collect();
    let previous = values(tokens.len() * e, 7);
    // In two calls: the second's positions attend to the first's keys.
    let mut cache = m.new_cache(64);
    let mut ours = m.mtp_logits_at_every_position(&tokens[..5], &previous[..5 * e], &mut cache).unwrap();
    ours.extend(m.mtp_logits_at_every_position(&tokens[5..], &previous[5 * e..], &mut cache).unwrap());

    let dir = path.parent().unwrap();
    let (input, out) = (dir.join("mtp_input.json"), dir.join("mtp_logits.f32"));
    let rows: Vec<&[f32]> = previous.chunks_exact(e).collect();
    std::fs::write(&input, serde_json::json!({ "tokens": tokens, "previous": rows }).to_string()).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/mtp_head.py");
    let run = std::process::Command::new(python).arg(script).arg(&path).arg(&input).arg(&out).output().unwrap();
    assert!(run.status.success(), "the reference failed: {}", String::from_utf8_lossy(&run.stderr));
    let reference: Vec<f32> =
        std::fs::read(&out).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(reference.len(), ours.len());

    let vocab = m.vocab_size();
    for (row, (a, b)) in ours.chunks_exact(vocab).zip(reference.chunks_exact(vocab)).enumerate() {
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        // Keys, values and queries are rounded to f16 here, as llama.cpp rounds them.
        assert!(worst <= 2e-3 * scale, "position {row}: logits differ by {worst} (largest {scale})");
        let argmax = |x: &[f32]| x.iter().enumerate().fold(0, |best, (i, &v)| if v > x[best] { i } else { best });
        assert_eq!(argmax(a), argmax(b), "position {row}");
    }
}

#[test]
fn the_heads_cache_follows_the_conversation_through_chunks_steps_and_cut_backs() {
    for family in [Family::Qwen35, Family::Qwen35Moe, Family::Glm4Moe, Family::Deepseek2] {
        let (_dir, path) = tiny(&TinySpec { mtp: true, ..TinySpec::new(family) });
        let engine = Engine::open(&path).unwrap();
        let m = engine.model();
        let prompt: Vec<u32> = (0..30).map(|i| (3 + (i * 37) % 300) as u32).collect();
        // The prompt in two chunks, a step, then a verify pass of four rows
        // of which two are kept, as the sampler keeps them: a hybrid's cache
        // goes back to where the pass began and reads the kept rows again.
        let mut stepped = m.new_cache(128);
        assert!(stepped.start_mtp());
        m.forward(&[prompt[..20].to_vec()], &mut stepped).unwrap();
        m.forward(&[prompt[20..].to_vec()], &mut stepped).unwrap();
        m.decode_step_many(&[7], &mut [&mut stepped]).unwrap();
        let start = stepped.len();
        m.decode_rows_many(&[&[8, 9, 10, 11]], &mut [&mut stepped]).unwrap();
        stepped.truncate(start + 2);
        let kept = stepped.len() - start;
        if kept < 2 {
            m.decode_rows_many(&[&[8, 9][kept..]], &mut [&mut stepped]).unwrap();
        }
        // The same tokens read at once.
        let mut read = m.new_cache(128);
        assert!(read.start_mtp());
        let all: Vec<u32> = prompt.iter().copied().chain([7, 8, 9]).collect();
        m.forward(std::slice::from_ref(&all), &mut read).unwrap();
        assert_eq!(stepped.len(), read.len());

        let a = m.mtp_step_logits(&mut stepped, 12).unwrap();
        let b = m.mtp_step_logits(&mut read, 12).unwrap();
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a.iter().zip(&b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(worst <= 1e-4 * scale, "{family:?}: the head's logits differ by {worst} (largest {scale})");
        // Back to a checkpoint (a regeneration, an edit): the hidden state
        // there is kept, so the head reads on as if it had just got there.
        let mut back = m.new_cache(128);
        assert!(back.start_mtp());
        m.forward(std::slice::from_ref(&all), &mut back).unwrap();
        back.checkpoint();
        m.decode_step_many(&[12], &mut [&mut back]).unwrap();
        m.decode_rows_many(&[&[13, 14, 15]], &mut [&mut back]).unwrap();
        back.truncate(all.len());
        assert_eq!(back.len(), all.len());
        assert!(m.mtp_step_logits(&mut back, 12).unwrap() == b, "{family:?}: after going back to a checkpoint");
        // A pass shared with a conversation the head does not run for.
        let (mut shared, mut other) = (m.new_cache(128), m.new_cache(128));
        assert!(shared.start_mtp());
        m.forward(std::slice::from_ref(&prompt), &mut shared).unwrap();
        m.forward(&[vec![4, 5, 6]], &mut other).unwrap();
        m.decode_rows_many(&[&[5], &[7, 8, 9]], &mut [&mut other, &mut shared]).unwrap();
        assert!(!other.mtp_live());
        let d = m.mtp_step_logits(&mut shared, 12).unwrap();
        let apart = d.iter().zip(&b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(apart <= 1e-4 * scale, "{family:?}: beside another cache, the head's logits differ by {apart}");
        // A head that had lost one position's hidden state would be off by
        // more: a restored cache keeps none, and its head reads zeros once.
        let mut saved = Vec::new();
        let mut before = m.new_cache(128);
        before.start_mtp();
        m.forward(std::slice::from_ref(&prompt), &mut before).unwrap();
        before.write_to(&mut saved).unwrap();
        let mut restored =
            hearth_engine::KvCache::read_from(&mut saved.as_slice(), m.config(), 128, m.device()).unwrap();
        assert!(restored.mtp_live(), "{family:?}: the saved cache names the head's layer");
        m.forward(&[vec![7, 8, 9]], &mut restored).unwrap();
        let c = m.mtp_step_logits(&mut restored, 12).unwrap();
        let off = c.iter().zip(&b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(off > 100.0 * worst.max(1e-6 * scale), "{family:?}: {off} against {worst}");
    }
}

fn greedy(engine: &Engine, n: usize, speculation: Speculation) -> hearth_engine::GenerationConfig {
    let mut c = engine.generation_config(SamplingParams { temperature: 0.0, ..SamplingParams::default() }, n);
    c.end_tokens.clear();
    c.speculation = speculation;
    c
}

#[test]
fn mtp_drafts_leave_greedy_replies_as_plain_decoding_gives_them() {
    for family in [Family::Qwen35, Family::Qwen35Moe, Family::Glm4Moe, Family::Deepseek2] {
        // A sharp head is confident enough to draft.
        let (_dir, path) = tiny(&TinySpec { mtp: true, mtp_sharpness: 30.0, ..TinySpec::new(family) });
        let engine = Engine::open(&path).unwrap();
        let (m, tk) = (engine.model(), engine.tokenizer());
        let prompt: Vec<u32> = (0..24).map(|i| (3 + (i * 41) % 300) as u32).collect();
        let run = |speculation| {
            let mut s = engine.new_session(Some(256));
            let mut first = s.start_turn(m, tk, &prompt, greedy(&engine, 30, speculation), 1).unwrap().run().unwrap();
            // A second turn continues the cache, the head's included.
            let mut next = prompt.clone();
            next.extend(&first.sequences[0].tokens);
            next.extend([17, 18, 19]);
            let mut second = s.start_turn(m, tk, &next, greedy(&engine, 30, speculation), 1).unwrap().run().unwrap();
            (first.sequences.remove(0), second.sequences.remove(0))
        };
        let plain = run(Speculation::Off);
        let mtp = run(Speculation::Mtp { max_draft: 4 });
        assert_eq!(mtp.0.tokens, plain.0.tokens, "{family:?}: first turn");
        assert_eq!(mtp.1.tokens, plain.1.tokens, "{family:?}: second turn");
        assert!(
            mtp.0.drafted > 0 && mtp.1.drafted > 0,
            "{family:?}: the head drafted ({}, {})",
            mtp.0.drafted,
            mtp.1.drafted
        );
        assert!(mtp.0.draft_failure.is_none(), "{:?}", mtp.0.draft_failure);
    }
}

#[test]
fn mtp_on_a_model_without_a_head_is_refused_with_the_reason() {
    let (_dir, path) = tiny(&TinySpec::new(Family::Qwen35));
    let engine = Engine::open(&path).unwrap();
    let (m, tk) = (engine.model(), engine.tokenizer());
    assert!(!m.has_mtp_head());
    let mut s = engine.new_session(Some(64));
    let err = s
        .start_turn(m, tk, &[3, 4, 5], greedy(&engine, 4, Speculation::Mtp { max_draft: 4 }), 1)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("no MTP head"), "{err}");
    // The session is as it was, and plain decoding goes on.
    assert!(s.start_turn(m, tk, &[3, 4, 5], greedy(&engine, 4, Speculation::Off), 1).unwrap().run().is_ok());
    assert_eq!(Speculation::parse("mtp", 4).unwrap(), Speculation::Mtp { max_draft: 4 });
}

#[test]
fn the_head_runs_only_for_conversations_that_draft_with_it_and_starts_with_one_reread() {
    let (dir, path) = tiny(&TinySpec { mtp: true, mtp_sharpness: 30.0, ..TinySpec::new(Family::Qwen35) });
    let engine = Engine::open(&path).unwrap();
    let (m, tk) = (engine.model(), engine.tokenizer());
    let prompt: Vec<u32> = (0..24).map(|i| (3 + (i * 41) % 300) as u32).collect();
    let mut s = engine.new_session(Some(256));
    let first = s.start_turn(m, tk, &prompt, greedy(&engine, 8, Speculation::Auto { max_draft: 4 }), 1).unwrap();
    let first = first.run().unwrap();
    assert!(!s.cache().mtp_live(), "no head without MTP drafts");
    let plain_bytes = s.cache().bytes_per_position();
    // The next turn drafts with the head: it reads the conversation again, once.
    let mut next = prompt.clone();
    next.extend(&first.sequences[0].tokens);
    next.extend([21, 22]);
    let mtp = Speculation::Mtp { max_draft: 4 };
    let second = s.start_turn(m, tk, &next, greedy(&engine, 8, mtp), 1).unwrap().run().unwrap();
    assert_eq!(second.stats.processed_tokens, next.len(), "read again from the start");
    assert!(s.cache().mtp_live() && s.cache().bytes_per_position() > plain_bytes);
    // Then only what is new, with the head or without.
    let mut third = next.clone();
    third.extend(&second.sequences[0].tokens);
    third.extend([23]);
    let out = s.start_turn(m, tk, &third, greedy(&engine, 8, Speculation::Off), 1).unwrap().run().unwrap();
    assert!(out.stats.processed_tokens <= 2, "{}", out.stats.processed_tokens);
    assert!(s.cache().mtp_live(), "the head keeps reading once it started");

    // Saved and read back, the cache keeps its head's layer, and a reply
    // drafting with it is the plain one.
    let file = dir.path().join("conversation.session");
    let identity = engine.cache_identity(256).map(|mut i| {
        i.model_sha256 = Some("test".into());
        i
    });
    let identity = identity.unwrap();
    hearth_engine::session_file::write(&file, &identity, &s).unwrap();
    let restored = hearth_engine::session_file::read(&file, &identity, m).unwrap();
    assert!(restored.complete && restored.session.cache().mtp_live());
    let mut restored = restored.session;
    let mut fourth = third.clone();
    fourth.extend(&out.sequences[0].tokens);
    fourth.extend([24, 25]);
    let drafted = restored.start_turn(m, tk, &fourth, greedy(&engine, 12, mtp), 1).unwrap().run().unwrap();
    let plain = s.start_turn(m, tk, &fourth, greedy(&engine, 12, Speculation::Off), 1).unwrap().run().unwrap();
    assert_eq!(drafted.stats.processed_tokens, 3, "only the new tokens");
    assert_eq!(drafted.sequences[0].tokens, plain.sequences[0].tokens);
    let mut without = engine.new_session(Some(256));
    without.prefill(m, &prompt).unwrap();
    hearth_engine::session_file::write(&file, &identity, &without).unwrap();
    // A file saved without the head's layer is written whole rather than
    // appended to with it.
    hearth_engine::session_file::append(&file, &s, prompt.len()).unwrap();
    let again = hearth_engine::session_file::read(&file, &identity, m).unwrap();
    assert!(again.complete && again.session.cache().mtp_live());
    assert_eq!(again.session.tokens(), s.tokens());
}
