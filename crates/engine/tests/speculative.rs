//! Speculative decoding (`speculation.rs`): a verify pass gives each row the
//! bits of a one-row step, so replies with drafts are the replies without
//! them, token for token and cache bit for cache bit, greedy or sampled,
//! alone or beside other conversations and variants.

mod common;

use common::{tiny, Family, TinySpec};
use hearth_engine::{
    session_file, Advance, Engine, FinishReason, GenerationConfig, KvCache, Model, SamplingParams, Session,
    Speculation, Turn,
};

/// Every family whose cache is attention only (the recurrent ones draft
/// nothing yet).
const ATTENTION_FAMILIES: [Family; 18] = [
    Family::Llama,
    Family::Deepseek2,
    Family::Glm4Moe,
    Family::Granite,
    Family::GraniteMoe,
    Family::Olmo2,
    Family::Gemma2,
    Family::SmolLm3,
    Family::Mistral3,
    Family::Phi3,
    Family::Qwen2,
    Family::Qwen3,
    Family::Gemma3,
    Family::Qwen3Moe,
    Family::Qwen3Vl,
    Family::Qwen3VlMoe,
    Family::GptOss,
    Family::Gemma4,
];

fn spec(family: Family) -> TinySpec {
    match family {
        Family::Gemma4 => TinySpec::gemma4(false),
        f => TinySpec::new(f),
    }
}

fn tokens(n: usize) -> Vec<u32> {
    (0..n).map(|i| (3 + (i * 37) % 300) as u32).collect()
}

/// A prompt that repeats itself: what prompt lookup drafts from.
fn repetitive(n: usize) -> Vec<u32> {
    (0..n).map(|i| (5 + (i % 23) * 7) as u32).collect()
}

fn step(m: &Model, token: u32, cache: &mut KvCache) -> Vec<f32> {
    m.forward(&[vec![token]], cache).unwrap().to_vec2::<f32>().unwrap().remove(0)
}

fn prefilled(m: &Model, history: &[u32]) -> KvCache {
    let mut cache = m.new_cache(1024);
    m.forward(&[history.to_vec()], &mut cache).unwrap();
    cache
}

/// One pass over three caches of 5, 1 and 9 rows (histories of 5, 40 and
/// `long` positions) gives every row the logits of a one-row step at its
/// position; cut back to what a sampler would keep, each cache then
/// continues as the stepped one does.
fn verify_rows_equal_steps(m: &Model, what: &str, long: usize) {
    let histories = [tokens(5), tokens(40), tokens(long)];
    let drafts: [Vec<u32>; 3] = [vec![11, 12, 13, 14, 15], vec![21], (30..39).collect()];
    let mut stepped: Vec<KvCache> = histories.iter().map(|h| prefilled(m, h)).collect();
    let mut verified = stepped.clone();
    let want: Vec<Vec<f32>> = stepped
        .iter_mut()
        .zip(&drafts)
        .flat_map(|(c, d)| d.iter().map(|&t| step(m, t, c)).collect::<Vec<_>>())
        .collect();
    let rows: Vec<&[u32]> = drafts.iter().map(Vec::as_slice).collect();
    let mut refs: Vec<&mut KvCache> = verified.iter_mut().collect();
    let got = m.decode_rows_many(&rows, &mut refs).unwrap();
    assert_eq!(got.len(), want.len(), "{what}: a row of logits per row");
    for (r, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(g == w, "{what}: row {r} differs from its step");
    }
    // Keep 3 of the first cache's rows, its one, and 6 of the third's: the
    // next steps read the kept keys and see none of the cut ones.
    for ((v, s), (h, keep)) in verified.iter_mut().zip(&mut stepped).zip(histories.iter().zip([3, 1, 6])) {
        v.truncate(h.len() + keep);
        s.truncate(h.len() + keep);
        for t in [40, 41] {
            assert!(step(m, t, v) == step(m, t, s), "{what}: a step after the cut differs");
        }
    }
}

#[test]
fn a_verify_pass_gives_each_row_the_bits_of_a_step_for_every_attention_family() {
    for family in ATTENTION_FAMILIES {
        let (_dir, path) = tiny(&spec(family));
        let engine = Engine::open(&path).unwrap();
        verify_rows_equal_steps(engine.model(), &format!("{family:?}"), 60);
    }
    // Real weights and head sizes, past the long-decode threshold.
    verify_rows_equal_steps(common::open_default().model(), "the default model", 700);
    // Every weight type's kernels, and histories past the long-decode
    // threshold (512 positions) and Gemma 3's window.
    use candle_core::quantized::GgmlDType;
    for dtype in [GgmlDType::Q4K, GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q6K, GgmlDType::F16] {
        for family in [Family::Llama, Family::Gemma3] {
            let spec = TinySpec { n_embd: 256, head_dim: 64, ffn: 512, dtype, context: 2048, ..TinySpec::new(family) };
            let (_dir, path) = tiny(&spec);
            let engine = Engine::open(&path).unwrap();
            verify_rows_equal_steps(engine.model(), &format!("{family:?} {dtype:?}"), 600);
        }
    }
}

fn config(engine: &Engine, sampling: SamplingParams, max: usize, speculation: Speculation) -> GenerationConfig {
    let mut c = engine.generation_config(sampling, max);
    c.end_tokens.clear();
    c.speculation = speculation;
    c
}

fn ngram() -> Speculation {
    Speculation::Ngram { max_draft: 6 }
}

/// A whole turn of `prompt` over `session`: the output and the session after.
fn reply(
    engine: &Engine,
    session: Session,
    prompt: &[u32],
    config: GenerationConfig,
) -> (hearth_engine::TurnOutput, Session) {
    let mut turn = session.into_turn(engine.model(), prompt.to_vec(), config).map_err(|(_, e)| e).unwrap();
    common::run_to_end(engine, &mut turn);
    let ended = turn.end();
    (ended.output.unwrap(), ended.session)
}

fn session_bytes(engine: &Engine, session: &Session, dir: &std::path::Path, name: &str) -> Vec<u8> {
    let file = dir.join(name);
    let identity = engine.cache_identity(session.cache().max_len()).unwrap();
    session_file::write(&file, &identity, session).unwrap();
    std::fs::read(file).unwrap()
}

/// Two greedy turns of at most `max` tokens in a context of `context`:
/// `prompt` cold, then the first reply and more of the pattern on the warm
/// cache. Both outputs and the session after them.
fn two_turns(
    engine: &Engine,
    prompt: &[u32],
    (context, max): (usize, usize),
    speculation: Speculation,
) -> (hearth_engine::TurnOutput, hearth_engine::TurnOutput, Session) {
    let greedy = || config(engine, SamplingParams::greedy(), max, speculation);
    let (first, session) = reply(engine, engine.new_session(Some(context)), prompt, greedy());
    let mut next: Vec<u32> = prompt.iter().chain(&first.sequences[0].tokens).copied().collect();
    next.extend(repetitive(30));
    let (second, session) = reply(engine, session, &next, greedy());
    (first, second, session)
}

#[test]
fn greedy_replies_with_drafts_equal_plain_ones_for_every_attention_family() {
    let (mut drafted, mut accepted) = (0, 0);
    for family in ATTENTION_FAMILIES {
        let (dir, path) = tiny(&spec(family));
        let engine = Engine::open(&path).unwrap();
        engine.hash_file(&|| false).unwrap();
        let prompt = repetitive(60);
        let run = |speculation| two_turns(&engine, &prompt, (512, 40), speculation);
        let (p1, p2, plain) = run(Speculation::Off);
        let passes = engine.model().passes_run();
        let (s1, s2, spec) = run(ngram());
        let spec_passes = engine.model().passes_run() - passes;
        for (p, s, which) in [(&p1, &s1, "cold"), (&p2, &s2, "warm")] {
            assert_eq!(s.sequences[0].tokens, p.sequences[0].tokens, "{family:?}, {which}");
            assert_eq!(s.sequences[0].finish, FinishReason::MaxTokens);
            assert_eq!(p.stats.drafted_tokens, 0);
            assert_eq!(s.stats.drafted_tokens, s.sequences[0].drafted);
            assert!(s.stats.accepted_tokens <= s.stats.drafted_tokens);
            drafted += s.stats.drafted_tokens;
            accepted += s.stats.accepted_tokens;
        }
        assert!(s1.stats.drafted_tokens > 0, "{family:?}: the repeating prompt offers drafts");
        assert_eq!(spec.passes(), plain.passes(), "{family:?}: the same passes recorded");
        assert!(
            session_bytes(&engine, &spec, dir.path(), "spec") == session_bytes(&engine, &plain, dir.path(), "plain"),
            "{family:?}: the caches are the same bits"
        );
        // Each draft token taken saves the pass that would have run it.
        let taken = s1.stats.accepted_tokens + s2.stats.accepted_tokens;
        assert_eq!(spec_passes, passes - taken as u64, "{family:?}: a pass fewer per draft token taken");
    }
    assert!(accepted * 4 > drafted, "drafts are mostly useful on repeating text: {accepted} of {drafted}");
}

#[test]
fn seeded_sampled_replies_with_drafts_equal_plain_ones_from_a_restored_cache() {
    let (dir, path) = tiny(&TinySpec::new(Family::Qwen3));
    let engine = Engine::open(&path).unwrap();
    engine.hash_file(&|| false).unwrap();
    let prompt = repetitive(80);
    let (_, session) = reply(
        &engine,
        engine.new_session(Some(512)),
        &prompt[..50],
        config(&engine, SamplingParams::greedy(), 4, Speculation::Off),
    );
    let file = dir.path().join("saved.session");
    let identity = engine.cache_identity(512).unwrap();
    session_file::write(&file, &identity, &session).unwrap();
    let mut next: Vec<u32> = prompt[..50].to_vec();
    next.extend(&session.tokens()[50..]);
    next.extend(&prompt[50..]);
    for seed in 0..8 {
        let sampling = SamplingParams { temperature: 0.7, top_k: Some(20), seed, ..SamplingParams::default() };
        let restored = || session_file::read(&file, &identity, engine.model()).unwrap().session;
        let (plain, _) = reply(&engine, restored(), &next, config(&engine, sampling.clone(), 48, Speculation::Off));
        let (spec, _) =
            reply(&engine, restored(), &next, config(&engine, sampling, 48, Speculation::Auto { max_draft: 8 }));
        assert_eq!(spec.sequences[0].tokens, plain.sequences[0].tokens, "seed {seed}");
    }
}

/// Turns run as the worker's scheduler runs them: every decode row of every
/// turn (drafts too) in one `decode_rows_many` pass per step.
fn run_together(engine: &Engine, turns: &mut [Turn]) {
    let (m, tk) = (engine.model(), engine.tokenizer());
    let mut done = vec![false; turns.len()];
    while done.iter().any(|d| !d) {
        let (mut rows, mut which, mut caches, mut alone) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, t) in turns.iter_mut().enumerate().filter(|(i, _)| !done[*i]) {
            let inputs = t.decode_inputs(m);
            if inputs.is_empty() {
                alone.push(i);
            }
            for d in inputs {
                which.push((i, d.tokens.len()));
                rows.push(d.tokens);
                caches.push(d.cache);
            }
        }
        let logits = if rows.is_empty() { Vec::new() } else { m.decode_rows_many(&rows, &mut caches).unwrap() };
        drop((rows, caches));
        let mut logits = logits.into_iter();
        let mut given: Vec<Vec<Vec<f32>>> = vec![Vec::new(); turns.len()];
        for (i, n) in which {
            given[i].extend(logits.by_ref().take(n));
        }
        for (i, g) in given.into_iter().enumerate().filter(|(_, g)| !g.is_empty()) {
            done[i] = matches!(turns[i].advance_given(m, tk, g).unwrap(), Advance::Done);
        }
        for i in alone {
            done[i] = matches!(turns[i].advance(m, tk).unwrap(), Advance::Done);
        }
    }
}

#[test]
fn four_variants_and_two_conversations_with_drafts_in_shared_passes_are_their_plain_runs_alone() {
    let (_dir, path) = tiny(&TinySpec::new(Family::Llama));
    let engine = Engine::open(&path).unwrap();
    let m = engine.model();
    let sampled = |seed| SamplingParams { temperature: 0.8, seed, ..SamplingParams::default() };
    let prompts = [repetitive(70), tokens(40).into_iter().chain(repetitive(46)).collect::<Vec<_>>()];
    let start = |prompt: &[u32], sampling: SamplingParams, speculation| {
        engine
            .new_session(Some(512))
            .into_turn(m, prompt.to_vec(), config(&engine, sampling, 36, speculation))
            .map_err(|(_, e)| e)
            .unwrap()
    };
    let mut together =
        vec![start(&prompts[0], sampled(5), ngram()), start(&prompts[1], SamplingParams::greedy(), ngram())];
    together[0].set_variants(4).unwrap();
    run_together(&engine, &mut together);
    let outs: Vec<_> = together.into_iter().map(|t| t.end().output.unwrap()).collect();
    for b in 0..4 {
        let mut alone = start(&prompts[0], sampled(5 + b as u64), Speculation::Off);
        let tokens = common::run_to_end(&engine, &mut alone);
        assert_eq!(outs[0].sequences[b].tokens, tokens, "variant {b}");
    }
    let mut alone = start(&prompts[1], SamplingParams::greedy(), Speculation::Off);
    assert_eq!(outs[1].sequences[0].tokens, common::run_to_end(&engine, &mut alone), "the other conversation");
    assert!(outs.iter().map(|o| o.stats.accepted_tokens).sum::<usize>() > 0, "some drafts were taken");
}

#[test]
fn a_reply_stopped_after_a_verify_pass_keeps_what_it_took_and_continues_as_a_plain_one() {
    let (_dir, path) = tiny(&TinySpec::new(Family::Qwen2));
    let engine = Engine::open(&path).unwrap();
    let (m, tk) = (engine.model(), engine.tokenizer());
    let prompt = repetitive(90);
    let mut turn = engine
        .new_session(Some(512))
        .into_turn(m, prompt.clone(), config(&engine, SamplingParams::greedy(), 64, ngram()))
        .map_err(|(_, e)| e)
        .unwrap();
    // Run until a pass takes more than one token, then stop.
    let mut taken = Vec::new();
    loop {
        match turn.advance(m, tk).unwrap() {
            Advance::Tokens(events) => {
                taken.extend(events.iter().map(|e| e.token));
                if events.len() > 1 {
                    break;
                }
            }
            Advance::Prefill(_) => {}
            Advance::Done => panic!("no pass took several tokens"),
        }
    }
    turn.cancel();
    let ended = turn.end();
    let out = ended.output.unwrap();
    assert_eq!(out.sequences[0].tokens, taken);
    assert_eq!(out.sequences[0].finish, FinishReason::Cancelled);
    // The session holds the prompt and every token fed: all but the last.
    let session = ended.session;
    assert_eq!(session.tokens().len(), prompt.len() + taken.len() - 1);
    assert_eq!(session.cache().len(), session.tokens().len());
    // Its next turn is the plain run's from the same tokens.
    let mut plain_prompt = prompt.clone();
    plain_prompt.extend(&taken);
    plain_prompt.extend(repetitive(10));
    let (after, _) =
        reply(&engine, session, &plain_prompt, config(&engine, SamplingParams::greedy(), 20, Speculation::Off));
    let mut plain = engine
        .new_session(Some(512))
        .into_turn(m, prompt, config(&engine, SamplingParams::greedy(), taken.len(), Speculation::Off))
        .map_err(|(_, e)| e)
        .unwrap();
    assert_eq!(common::run_to_end(&engine, &mut plain), taken, "the stopped tokens are the plain ones");
    let (plain_after, _) = reply(
        &engine,
        plain.end().session,
        &plain_prompt,
        config(&engine, SamplingParams::greedy(), 20, Speculation::Off),
    );
    assert_eq!(after.sequences[0].tokens, plain_after.sequences[0].tokens);
}

#[test]
fn a_reply_whose_context_fills_mid_draft_ends_as_cache_full_like_a_plain_one() {
    let (_dir, path) = tiny(&TinySpec::new(Family::Llama));
    let engine = Engine::open(&path).unwrap();
    let prompt = repetitive(60);
    let run = |speculation| {
        reply(
            &engine,
            engine.new_session(Some(75)),
            &prompt,
            config(&engine, SamplingParams::greedy(), 64, speculation),
        )
        .0
    };
    let (plain, spec) = (run(Speculation::Off), run(ngram()));
    assert_eq!(plain.sequences[0].finish, FinishReason::CacheFull);
    assert_eq!(spec.sequences[0].finish, FinishReason::CacheFull);
    assert_eq!(spec.sequences[0].tokens, plain.sequences[0].tokens);
}

#[test]
fn hybrids_cut_back_inside_a_verify_pass_and_reply_as_without_drafts() {
    for family in [Family::Qwen35, Family::Qwen35Moe, Family::Lfm2] {
        let (_dir, path) = tiny(&TinySpec { context: 2048, ..TinySpec::new(family) });
        let engine = Engine::open(&path).unwrap();
        engine.hash_file(&|| false).unwrap();
        let prompt = repetitive(60);
        let run = |speculation| two_turns(&engine, &prompt, (1024, 200), speculation);
        let (p1, p2, plain) = run(Speculation::Off);
        let (s1, s2, spec) = run(ngram());
        assert_eq!(s1.sequences[0].tokens, p1.sequences[0].tokens, "{family:?}, cold");
        assert_eq!(s2.sequences[0].tokens, p2.sequences[0].tokens, "{family:?}, warm");
        let (drafted, accepted) =
            (s1.stats.drafted_tokens + s2.stats.drafted_tokens, s1.stats.accepted_tokens + s2.stats.accepted_tokens);
        assert!(
            0 < accepted && accepted < drafted,
            "{family:?}: some drafts kept, some cut back ({accepted} of {drafted})"
        );
        assert_eq!(spec.tokens(), plain.tokens());
        assert_eq!(spec.cache().len(), plain.cache().len());
        // Verify passes cut back to a state of their own, not to checkpoints:
        // the prompts' checkpoints stay, and the replies add no more than
        // plain steps do (at most one per 256 positions, and the turn's end).
        let (spec_at, plain_at) = (spec.cache().checkpoint_positions(), plain.cache().checkpoint_positions());
        let in_prompts = |at: &[usize]| at.iter().filter(|&&p| p <= prompt.len()).count();
        assert_eq!(in_prompts(&spec_at), in_prompts(&plain_at), "{family:?}: {spec_at:?} against {plain_at:?}");
        assert!(spec_at.len() <= plain_at.len() + 1, "{family:?}: {spec_at:?} against {plain_at:?}");
        // The checkpoints kept differ (verify passes take their own), the
        // state does not: the next step's logits are the same bits.
        let next_step = |s: &Session| {
            let mut cache = s.cache().clone();
            engine.model().forward(&[vec![7]], &mut cache).unwrap().to_vec2::<f32>().unwrap()
        };
        assert!(next_step(&spec) == next_step(&plain), "{family:?}: the same keys, values and recurrent state");
    }
}

/// A reply under a grammar drafts too: the first row's mask is computed
/// beside the pass, each later row's after the tokens before it, so a
/// drafted token the grammar forbids is never taken. A JSON object that
/// echoes its prompt's keys, greedy and seeded, four variants at once.
#[test]
fn constrained_replies_with_drafts_equal_plain_ones() {
    use hearth_engine::{ChatMessage, GrammarSpec};
    let engine = common::open_default();
    let ask = "Copy this JSON object exactly: {\"name\": \"Ada\", \"city\": \"London\", \"tags\": [\"maths\", \"engines\", \"poetry\"], \"year\": 1843}";
    let prompt = engine.encode_chat(&[ChatMessage::user(ask)]).unwrap();
    let grammar = engine.compile_grammar(&GrammarSpec::JsonObject).unwrap();
    let run = |sampling: SamplingParams, speculation| {
        let mut c = engine.generation_config(sampling, 80);
        c.grammar = Some(grammar.clone());
        c.speculation = speculation;
        let mut session = engine.new_session(Some(1024));
        session.start_turn(engine.model(), engine.tokenizer(), &prompt, c, 4).unwrap().run().unwrap()
    };
    let hot = SamplingParams { temperature: 1.2, top_k: None, top_p: 1.0, min_p: 0.0, seed: 11, ..Default::default() };
    let mut accepted = 0;
    for sampling in [SamplingParams::greedy(), hot] {
        let plain = run(sampling.clone(), Speculation::Off);
        let spec = run(sampling, Speculation::Ngram { max_draft: 8 });
        for (p, s) in plain.sequences.iter().zip(&spec.sequences) {
            assert_eq!(s.tokens, p.tokens);
            assert_eq!(s.text, p.text);
        }
        accepted += spec.stats.accepted_tokens;
    }
    assert!(accepted > 0, "the echoed keys are drafted and taken");
}

/// A speculative reply replays bit for bit, with drafts or without: its
/// tokens and its cache are those of the recorded passes.
#[test]
fn a_speculative_reply_replays_bit_for_bit() {
    let engine = common::open_default();
    engine.hash_file(&|| false).unwrap();
    let text = include_str!("../../../README.md");
    let words = engine.tokenizer().encode(text, false, false).unwrap();
    let mut prompt = words[..300].to_vec();
    prompt.extend_from_slice(&words[..120]);
    let sampling = SamplingParams { temperature: 0.8, seed: 5, ..SamplingParams::default() };
    let make = |speculation| config(&engine, sampling.clone(), 48, speculation);
    let mut session = engine.new_session(Some(1024));
    let mut turn = session.start_turn(engine.model(), engine.tokenizer(), &prompt, make(ngram()), 1).unwrap();
    let passes = turn.prompt_passes().clone();
    while turn.step().unwrap().is_some() {}
    let recorded = turn.finish(0);
    assert!(recorded.stats.accepted_tokens > 0, "the reply took drafts");
    for speculation in [Speculation::Off, ngram()] {
        let mut cold = engine.new_session(Some(1024));
        let mut replay = cold
            .start_replay(engine.model(), engine.tokenizer(), &prompt, &passes, make(speculation), &mut |_| true)
            .unwrap();
        while replay.step().unwrap().is_some() {}
        assert_eq!(replay.finish(0).sequences[0].tokens, recorded.sequences[0].tokens, "{speculation:?}");
    }
}

fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let e: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
}

/// Sampled tokens with drafts follow the model's own distribution. Over
/// 6,000 seeds, replies of three tokens from four allowed ones (the rest
/// forbidden): the second pass verifies a drafted token (the prompt holds
/// every allowed token, so lookup always drafts), and where the second
/// token is the draft, the third comes from the draft's row. The counts of
/// each (t₀, t₁, t₂) match by a chi-square test the exact probabilities
/// `p(t₀) · p(t₁ | t₀) · p(t₂ | t₀, t₁)` computed from the model's logits.
/// (Each seed's reply is also the plain one, token for token: above.)
#[test]
fn sampled_tokens_with_drafts_follow_the_models_distribution_by_a_chi_square_test() {
    let (_dir, path) = tiny(&TinySpec::new(Family::Llama));
    let engine = Engine::open(&path).unwrap();
    let m = engine.model();
    let allowed: [u32; 4] = [11, 57, 123, 201];
    let prompt: Vec<u32> = (0..120u64).map(|i| allowed[((i * 2_654_435_761) >> 7) as usize % 4]).collect();
    let temperature = 1.0f32;
    // The sampler's distribution: softmax over the allowed tokens.
    let p = |logits: &[f32]| -> Vec<f64> {
        let l: Vec<f64> = allowed.iter().map(|&t| (logits[t as usize] / temperature) as f64).collect();
        softmax(&l.iter().map(|&x| x as f32).collect::<Vec<_>>())
    };
    let mut cache = m.new_cache(256);
    let p0 = p(&m.forward(std::slice::from_ref(&prompt), &mut cache).unwrap().to_vec2::<f32>().unwrap()[0]);
    let mut expected = vec![0f64; 64];
    for (a, &ta) in allowed.iter().enumerate() {
        let mut after_a = cache.clone();
        let p1 = p(&step(m, ta, &mut after_a));
        for (b, &tb) in allowed.iter().enumerate() {
            let p2 = p(&step(m, tb, &mut after_a.clone()));
            for c in 0..4 {
                expected[a * 16 + b * 4 + c] = p0[a] * p1[b] * p2[c];
            }
        }
    }

    let mut session = engine.new_session(Some(256));
    session.prefill(m, &prompt).unwrap();
    let samples = 6000;
    let (mut counts, mut drafted, mut accepted) = (vec![0usize; 64], 0, 0);
    for seed in 0..samples as u64 {
        let sampling =
            SamplingParams { temperature, top_k: None, top_p: 1.0, min_p: 0.0, seed, ..SamplingParams::default() };
        let mut c = config(&engine, sampling, 3, ngram());
        c.forbidden_tokens = (0..m.vocab_size() as u32).filter(|t| !allowed.contains(t)).collect();
        let (out, _) = reply(&engine, session.clone(), &prompt, c);
        let at = |t: u32| allowed.iter().position(|&x| x == t).unwrap();
        let t = &out.sequences[0].tokens;
        counts[at(t[0]) * 16 + at(t[1]) * 4 + at(t[2])] += 1;
        drafted += out.sequences[0].drafted;
        accepted += out.sequences[0].accepted;
    }
    assert!(drafted >= samples, "every reply's second pass verifies a draft: {drafted} drafted");
    assert!(accepted >= samples / 20, "a third token from a draft's row often enough to tell: {accepted}");

    // Outcomes in bins expecting at least 10 samples each.
    let mut bins: Vec<(f64, usize)> = Vec::new();
    let mut open = (0f64, 0usize);
    for (e, &o) in expected.iter().zip(&counts) {
        open = (open.0 + e * samples as f64, open.1 + o);
        if open.0 >= 10.0 {
            bins.push(std::mem::take(&mut open));
        }
    }
    let last = bins.last_mut().unwrap();
    (last.0, last.1) = (last.0 + open.0, last.1 + open.1);
    let statistic: f64 = bins.iter().map(|&(e, o)| (o as f64 - e).powi(2) / e).sum();
    // The chi-square quantile at 1 − 0.001 (Wilson–Hilferty).
    let df = (bins.len() - 1) as f64;
    let critical = df * (1.0 - 2.0 / (9.0 * df) + 3.09 * (2.0 / (9.0 * df)).sqrt()).powi(3);
    assert!(bins.len() >= 16, "{} bins", bins.len());
    assert!(statistic < critical, "chi-square {statistic:.1} over {df} degrees of freedom (critical {critical:.1})");
}
