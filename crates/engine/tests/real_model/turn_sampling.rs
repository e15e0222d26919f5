//! One turn's sampling: seeds, variants and forks, forbidden tokens, stop strings and limits, streamed
//! text and log-probabilities.

use super::*;

#[test]
fn streaming_and_run_to_end_give_the_same_tokens_for_a_seed() {
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let ids = engine.encode_chat(&[ChatMessage::user("Write a short poem about the sea.")]).unwrap();
    let sampling = SamplingParams { temperature: 0.9, seed: 42, ..SamplingParams::default() };
    let run = engine
        .new_session(None)
        .start_turn(m, tok, &ids, engine.generation_config(sampling.clone(), 32), 1)
        .unwrap()
        .run()
        .unwrap();
    let mut session = engine.new_session(None);
    let mut turn = session.start_turn(m, tok, &ids, engine.generation_config(sampling.clone(), 32), 1).unwrap();
    let mut streamed = Vec::new();
    let mut text = String::new();
    while let Some(events) = turn.step().unwrap() {
        for e in events {
            streamed.push(e.token);
            text.push_str(&e.text);
        }
    }
    assert_eq!(streamed, run.sequences[0].tokens);
    assert_eq!(text, run.sequences[0].text);
    assert_eq!(text, tok.decode(&streamed), "streamed text is the decode of the tokens");
    let other = engine
        .new_session(None)
        .start_turn(m, tok, &ids, engine.generation_config(SamplingParams { seed: 43, ..sampling }, 32), 1)
        .unwrap()
        .run()
        .unwrap();
    assert_ne!(other.sequences[0].tokens, run.sequences[0].tokens, "another seed, another reply");
}

#[test]
fn regenerating_with_the_same_seed_gives_the_same_reply_from_the_cache() {
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let ids = engine.encode_chat(&[ChatMessage::user("Say something surprising.")]).unwrap();
    let sampling = SamplingParams { temperature: 1.3, seed: 4242, ..SamplingParams::default() };
    let mut session = engine.new_session(None);
    let first =
        session.start_turn(m, tok, &ids, engine.generation_config(sampling.clone(), 48), 1).unwrap().run().unwrap();
    // The cache now holds the prompt and the reply; the same prompt again
    // starts from the prefill's own logits, so nothing is re-run.
    for _ in 0..2 {
        let again =
            session.start_turn(m, tok, &ids, engine.generation_config(sampling.clone(), 48), 1).unwrap().run().unwrap();
        assert_eq!(again.stats.processed_tokens, 0);
        assert_eq!(again.sequences[0].tokens, first.sequences[0].tokens, "the same seed, the same reply");
    }
    // A cold session agrees too: it batches the prompt as the first turn did.
    let cold = engine
        .new_session(None)
        .start_turn(m, tok, &ids, engine.generation_config(sampling, 48), 1)
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(cold.sequences[0].tokens, first.sequences[0].tokens);
}

#[test]
fn a_batch_of_variants_shares_the_prompt_and_matches_single_runs() {
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let ids = engine.encode_chat(&[ChatMessage::user("What is 2 + 2?")]).unwrap();
    let single = greedy(&engine, "What is 2 + 2?", 16);
    let mut session = engine.new_session(None);
    let batch = session
        .start_turn(m, tok, &ids, engine.generation_config(SamplingParams::greedy(), 16), 3)
        .unwrap()
        .finish_after_run();
    for seq in &batch.sequences {
        assert_eq!(seq.tokens, single.tokens);
        assert_eq!(seq.finish, FinishReason::EndToken);
    }
    // The kept variant continues like a batch-1 session.
    assert_eq!(session.tokens().len(), session.cache().len());
    assert_eq!(session.cache().batch(), 1);

    // Sampled variants differ from each other.
    let sampling = SamplingParams { temperature: 1.2, seed: 5, ..SamplingParams::default() };
    let mut session = engine.new_session(None);
    let out =
        session.start_turn(m, tok, &ids, engine.generation_config(sampling.clone(), 12), 3).unwrap().finish_after_run();
    assert!(out.sequences.iter().any(|s| s.tokens != out.sequences[0].tokens), "three samples were identical");
    // Each has its own seed: variant b is the reply a single run with seed 5 + b gives.
    for (b, variant) in out.sequences.iter().enumerate() {
        let mut alone = engine.new_session(None);
        let sampling = SamplingParams { seed: 5 + b as u64, ..sampling.clone() };
        let single =
            alone.start_turn(m, tok, &ids, engine.generation_config(sampling, 12), 1).unwrap().finish_after_run();
        assert_eq!(variant.tokens, single.sequences[0].tokens, "variant {b}");
    }
}

#[test]
fn forks_of_a_turn_read_the_prompt_once_and_each_is_the_single_run_of_its_seed() {
    use hearth_engine::Turn;
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let ids = engine.encode_chat(&[ChatMessage::user("Name a colour.")]).unwrap();
    let sampling = SamplingParams { temperature: 1.2, seed: 5, ..SamplingParams::default() };
    let config = engine.generation_config(sampling.clone(), 12);
    let run = |turn: &mut hearth_engine::Turn| common::run_to_end(&engine, turn);
    let mut first = engine.new_session(None).into_turn(m, ids.clone(), config.clone()).map_err(|(_, e)| e).unwrap();
    assert!(!first.can_fork(), "not before the prompt is read");
    assert!(first.fork(m, 6).is_err());
    while first.is_prefilling() {
        first.advance(m, tok).unwrap();
    }
    assert!(first.can_fork());
    let mut forks: Vec<Turn> = (1..3).map(|b| first.fork(m, 5 + b).unwrap()).collect();
    assert_eq!(forks[0].stats().processed_tokens, ids.len(), "a fork reports the prompt its parent read");
    let mut all = vec![run(&mut first)];
    all.extend(forks.iter_mut().map(run));
    assert!(!first.can_fork(), "not after a token");
    assert!(all.iter().any(|t| t != &all[0]), "three samples were identical");
    for (b, tokens) in all.iter().enumerate() {
        let mut alone = engine.new_session(None);
        let sampling = SamplingParams { seed: 5 + b as u64, ..sampling.clone() };
        let single =
            alone.start_turn(m, tok, &ids, engine.generation_config(sampling, 12), 1).unwrap().finish_after_run();
        assert_eq!(tokens, &single.sequences[0].tokens, "fork {b}");
    }
    // Each fork's session continues its own reply: the prompt and its own tokens.
    for (b, f) in forks.into_iter().enumerate() {
        let hearth_engine::Ended { session, output: out, .. } = f.end();
        let mut want = ids.clone();
        let generated = &out.unwrap().sequences[0].tokens;
        want.extend_from_slice(&generated[..generated.len() - 1]);
        assert_eq!(session.tokens(), &want[..], "fork {}", b + 1);
        assert_eq!(session.cache().len(), want.len());
    }
}

trait RunAll {
    fn finish_after_run(self) -> hearth_engine::TurnOutput;
}
impl RunAll for hearth_engine::SessionTurn<'_> {
    fn finish_after_run(mut self) -> hearth_engine::TurnOutput {
        while self.step().unwrap().is_some() {}
        self.finish(1)
    }
}

#[test]
fn forbidden_tokens_are_never_sampled_and_stop_strings_stop() {
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let ids = engine.encode_chat(&[ChatMessage::user("What is 2 + 2?")]).unwrap();
    let baseline = greedy(&engine, "What is 2 + 2?", 16);
    let mut cfg = engine.generation_config(SamplingParams::greedy(), 16);
    cfg.forbidden_tokens = vec![baseline.tokens[0]];
    let out = engine.new_session(None).start_turn(m, tok, &ids, cfg, 1).unwrap().run().unwrap();
    assert_ne!(out.sequences[0].tokens[0], baseline.tokens[0]);

    let mut cfg = engine.generation_config(SamplingParams::greedy(), 16);
    cfg.stop_strings = vec!["is".into()];
    let out = engine.new_session(None).start_turn(m, tok, &ids, cfg, 1).unwrap().run().unwrap();
    assert_eq!(out.sequences[0].finish, FinishReason::StopString);
    assert_eq!(out.sequences[0].text, &baseline.text[..baseline.text.find("is").unwrap()]);
}

#[test]
fn max_tokens_and_cancel_finish_cleanly_and_keep_the_session_consistent() {
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let ids = engine.encode_chat(&[ChatMessage::user("Count from one to fifty.")]).unwrap();
    let out = engine
        .new_session(None)
        .start_turn(m, tok, &ids, engine.generation_config(SamplingParams::greedy(), 5), 1)
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(out.sequences[0].finish, FinishReason::MaxTokens);
    assert_eq!(out.sequences[0].tokens.len(), 5);

    let mut session = engine.new_session(None);
    let mut turn =
        session.start_turn(m, tok, &ids, engine.generation_config(SamplingParams::greedy(), 100), 1).unwrap();
    turn.step().unwrap();
    turn.step().unwrap();
    turn.cancel();
    assert!(turn.step().unwrap().is_none(), "no steps after cancel");
    let out = turn.finish(0);
    assert_eq!(out.sequences[0].finish, FinishReason::Cancelled);
    assert_eq!(out.sequences[0].tokens.len(), 2);
    assert_eq!(session.tokens().len(), session.cache().len());
    assert_eq!(session.tokens().len(), ids.len() + 1);
}

#[test]
fn a_full_cache_stops_with_cache_full() {
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let ids = engine.encode_chat(&[ChatMessage::user("Count from one to fifty.")]).unwrap();
    let mut session = engine.new_session(Some(ids.len() + 3));
    let out = session
        .start_turn(m, tok, &ids, engine.generation_config(SamplingParams::greedy(), 100), 1)
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(out.sequences[0].finish, FinishReason::CacheFull);
    assert_eq!(out.sequences[0].tokens.len(), 4);
}

#[test]
fn a_prompt_longer_than_the_context_is_refused() {
    let engine = open_default();
    let ids = engine.encode_chat(&[ChatMessage::user("word ".repeat(100))]).unwrap();
    let mut session = engine.new_session(Some(50));
    let err = session
        .start_turn(engine.model(), engine.tokenizer(), &ids, engine.generation_config(SamplingParams::greedy(), 4), 1)
        .err()
        .unwrap();
    assert!(matches!(err, hearth_engine::EngineError::PromptTooLong { context: 50, .. }), "{err}");
    // The session is untouched and still usable.
    let short = engine.encode_chat(&[ChatMessage::user("Hi")]).unwrap();
    session
        .start_turn(
            engine.model(),
            engine.tokenizer(),
            &short,
            engine.generation_config(SamplingParams::greedy(), 2),
            1,
        )
        .unwrap()
        .run()
        .unwrap();
}

#[test]
fn streamed_text_never_splits_a_character() {
    let engine = open_default();
    let tok = engine.tokenizer();
    let text = "Émoji: 🦀🔥 and 漢字, ok 👩‍👩‍👧";
    let ids = tok.encode(text, false, false).unwrap();
    let mut dec = hearth_engine::StreamDecoder::new();
    let mut out = String::new();
    let mut split_somewhere = false;
    for &id in &ids {
        let piece = dec.push(tok.token_bytes(id));
        split_somewhere |= piece.is_empty();
        out.push_str(&piece);
    }
    out.push_str(&dec.finish());
    assert_eq!(out, text);
    assert_eq!(tok.decode(&ids), text);
    assert!(split_somewhere, "this text should have a character spread over tokens");
}

#[test]
fn each_variant_of_a_turn_continues_from_its_own_cache() {
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let ids = engine.encode_chat(&[ChatMessage::user("Name a colour.")]).unwrap();
    let sampling = SamplingParams { temperature: 1.0, seed: 9, ..SamplingParams::default() };
    let mut session = engine.new_session(None);
    let mut turn = session.start_turn(m, tok, &ids, engine.generation_config(sampling.clone(), 12), 3).unwrap();
    while turn.step().unwrap().is_some() {}
    let (out, others) = turn.finish_variants();
    assert_eq!(others.len(), 2);
    // Variant b's session is what a single run with seed 9 + b leaves.
    for (b, variant) in others.iter().enumerate().map(|(i, s)| (i + 1, s)) {
        let mut alone = engine.new_session(None);
        let single = SamplingParams { seed: 9 + b as u64, ..sampling.clone() };
        alone.start_turn(m, tok, &ids, engine.generation_config(single, 12), 1).unwrap().run().unwrap();
        assert_eq!(variant.tokens(), alone.tokens(), "variant {b}");
        assert_eq!(variant.passes(), alone.passes(), "variant {b}");
        assert_eq!(variant.cache().len(), variant.tokens().len());
        let seq = &out.sequences[b].tokens;
        assert_eq!(&variant.tokens()[ids.len()..], &seq[..seq.len() - 1]);
    }
    // The next turn after picking variant 2 runs only its new tokens.
    let mut picked = others[1].clone();
    let mut next: Vec<u32> = ids.clone();
    next.extend_from_slice(&out.sequences[2].tokens);
    next.extend(engine.tokenizer().encode("\nAnother?", false, false).unwrap());
    let turn = picked
        .start_turn(m, tok, &next, engine.generation_config(SamplingParams::greedy(), 4), 1)
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(turn.stats.processed_tokens, next.len() - others[1].tokens().len());
}

#[test]
fn each_token_can_come_with_its_log_probability_and_the_likeliest_alternatives() {
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let ids = engine.encode_chat(&[ChatMessage::user("What is 2 + 2?")]).unwrap();
    let mut config = engine.generation_config(SamplingParams::greedy(), 8);
    config.top_logprobs = 5;
    let mut session = engine.new_session(None);
    let mut turn = session.start_turn(m, tok, &ids, config, 1).unwrap();
    let mut seen = Vec::new();
    while let Some(events) = turn.step().unwrap() {
        seen.extend(events.into_iter().filter(|e| e.token != hearth_engine::sampler_loop::PAD));
    }
    drop(turn);
    assert_eq!(seen.len(), greedy(&engine, "What is 2 + 2?", 8).tokens.len());
    for e in &seen {
        let lp = e.logprobs.as_ref().expect("asked for");
        assert_eq!(lp.top.len(), 5);
        // Greedy picks the likeliest token.
        assert_eq!((lp.top[0].0, lp.top[0].1), (e.token, lp.logprob));
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1), "most likely first");
        let mass: f32 = lp.top.iter().map(|(_, l)| l.exp()).sum();
        assert!(mass <= 1.0 + 1e-4 && lp.logprob <= 0.0);
    }
    // The first token's log-probability is the log-softmax of the prompt's logits.
    let logits =
        m.forward(std::slice::from_ref(&ids), &mut m.new_cache(256)).unwrap().to_vec2::<f32>().unwrap().remove(0);
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_sum = max + logits.iter().map(|&l| ((l - max) as f64).exp()).sum::<f64>().ln() as f32;
    assert!((seen[0].logprobs.as_ref().unwrap().logprob - (logits[seen[0].token as usize] - log_sum)).abs() < 1e-5);
}
