//! The real default model (SmolLM2-135M-Instruct Q4_1): loading, template,
//! greedy answers, stopping on <|im_end|>, multi-turn cache reuse, batches,
//! and the sampler loop's two modes.

mod common;

use candle_core::{Device, Tensor};
use common::{default_model, max_abs_diff, open_default};
use hearth_engine::{ChatMessage, FinishReason, SamplingParams};

#[path = "real_model/turn_sampling.rs"]
mod turn_sampling;

#[test]
fn loads_with_the_expected_shape_and_end_tokens() {
    let engine = open_default();
    let c = engine.model().config();
    assert_eq!((c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.head_dim), (30, 576, 9, 3, 64));
    assert_eq!(c.context_length, 8192);
    assert_eq!(engine.model().vocab_size(), 49152);
    assert_eq!(engine.end_tokens(), &[2], "<|im_end|> is eos");
}

#[test]
fn renders_the_files_chatml_template() {
    let engine = open_default();
    let text = engine.template().render(&[ChatMessage::user("Hi")], true).unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = engine.encode_chat(&[ChatMessage::user("Hi")]).unwrap();
    assert_eq!(ids[0], 1, "<|im_start|> is one special token");
    assert_eq!(*ids.last().unwrap(), 198, "ends with the newline after 'assistant'");
}

fn greedy(engine: &hearth_engine::Engine, prompt: &str, max: usize) -> hearth_engine::SequenceOutput {
    let ids = engine.encode_chat(&[ChatMessage::user(prompt)]).unwrap();
    let mut session = engine.new_session(None);
    let turn = session
        .start_turn(
            engine.model(),
            engine.tokenizer(),
            &ids,
            engine.generation_config(SamplingParams::greedy(), max),
            1,
        )
        .unwrap();
    turn.run().unwrap().sequences.remove(0)
}

#[test]
fn answers_two_plus_two_and_stops_on_im_end() {
    let engine = open_default();
    let out = greedy(&engine, "What is 2 + 2?", 64);
    assert_eq!(out.text, common::two_plus_two());
    assert_eq!(out.finish, FinishReason::EndToken);
    assert_eq!(*out.tokens.last().unwrap(), 2);
}

#[test]
fn first_step_logits_match_candle_quantized_llama() {
    // With candle's kernels the transformer must reproduce candle's module;
    // with Hearth's own (llama.cpp's rounding) it stays close to it.
    let candle_kernels =
        hearth_engine::Engine::open_with(default_model(), &Device::Cpu, hearth_engine::Kernels::Candle).unwrap();
    let engine = open_default();
    let ids = engine.encode_chat(&[ChatMessage::user("What is the capital of France?")]).unwrap();
    let first = |e: &hearth_engine::Engine, graph: bool| -> Vec<f32> {
        let mut cache = e.model().new_cache(8192);
        let m = e.model();
        let logits = if graph {
            m.forward_graph(std::slice::from_ref(&ids), &mut cache)
        } else {
            m.forward(std::slice::from_ref(&ids), &mut cache)
        };
        logits.unwrap().to_vec2::<f32>().unwrap().remove(0)
    };
    let ours = first(&candle_kernels, true);
    let own = first(&engine, false);
    let mut f = std::fs::File::open(default_model()).unwrap();
    let ct = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let mut reference =
        candle_transformers::models::quantized_llama::ModelWeights::from_gguf(ct, &mut f, &Device::Cpu).unwrap();
    let x = Tensor::new(ids.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let theirs: Vec<f32> = reference.forward(&x, 0).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    // Hearth builds RoPE angles as llama.cpp does (repeated f32 products),
    // candle from powers; the 8-bit activation rounding amplifies that
    // last-bit difference, so "the same model" means close logits and the
    // same choice, not equal bits.
    let d = max_abs_diff(&ours, &theirs);
    assert!(d < 2.0, "logits differ by {d}");
    assert_eq!(hearth_engine::sampling::argmax(&ours), hearth_engine::sampling::argmax(&theirs));
    let d = max_abs_diff(&own, &theirs);
    // candle rounds the Q8_1 block sum through f16 twice; llama.cpp and Hearth once.
    assert!(d < 2.0, "Hearth's kernels drift {d} from candle's");
}

#[test]
fn second_turn_through_the_cache_equals_a_cold_prefill() {
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let cfg = || engine.generation_config(SamplingParams::greedy(), 24);
    let mut messages = vec![ChatMessage::user("Name a colour.")];
    let mut session = engine.new_session(None);
    let first = session.start_turn(m, tok, &engine.encode_chat(&messages).unwrap(), cfg(), 1).unwrap().run().unwrap();
    messages.push(ChatMessage::assistant(first.sequences[0].text.clone()));
    messages.push(ChatMessage::user("And another one?"));
    let prompt2 = engine.encode_chat(&messages).unwrap();

    let warm = session.start_turn(m, tok, &prompt2, cfg(), 1).unwrap().run().unwrap();
    let mut cold_session = engine.new_session(None);
    let cold = cold_session.start_turn(m, tok, &prompt2, cfg(), 1).unwrap().run().unwrap();
    assert_eq!(warm.sequences[0].tokens, cold.sequences[0].tokens);
    assert_eq!(cold.stats.processed_tokens, prompt2.len());
    assert!(
        warm.stats.processed_tokens < prompt2.len() / 2,
        "turn 2 processed {} of {} tokens; the cache was not reused",
        warm.stats.processed_tokens,
        prompt2.len()
    );
    assert_eq!(session.tokens().len(), session.cache().len());
}

#[test]
fn edited_history_truncates_the_cache_to_the_common_prefix() {
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let cfg = || engine.generation_config(SamplingParams::greedy(), 8);
    let mut session = engine.new_session(None);
    let a = engine.encode_chat(&[ChatMessage::user("Tell me about cats.")]).unwrap();
    session.start_turn(m, tok, &a, cfg(), 1).unwrap().run().unwrap();
    let b = engine.encode_chat(&[ChatMessage::user("Tell me about dogs.")]).unwrap();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let warm = session.start_turn(m, tok, &b, cfg(), 1).unwrap().run().unwrap();
    assert_eq!(warm.stats.processed_tokens, b.len() - common);
    let cold = engine.new_session(None).start_turn(m, tok, &b, cfg(), 1).unwrap().run().unwrap();
    assert_eq!(warm.sequences[0].tokens, cold.sequences[0].tokens);
}

#[test]
fn owned_turns_run_in_turn_give_what_each_gives_alone() {
    use hearth_engine::Advance;
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let text = include_str!("../../../ARCHITECTURE.md");
    // A long prompt (three prefill chunks) beside a short one.
    let long = engine.tokenizer().encode(text, false, false).unwrap()[..1300].to_vec();
    let short = engine.encode_chat(&[ChatMessage::user("Name a colour.")]).unwrap();
    let config =
        |seed| engine.generation_config(SamplingParams { temperature: 0.9, seed, ..SamplingParams::default() }, 16);
    let alone = |prompt: &[u32], seed| {
        let mut s = engine.new_session(Some(2048));
        let out = s.start_turn(m, tok, prompt, config(seed), 1).unwrap().run().unwrap();
        (out.sequences[0].tokens.clone(), s)
    };
    let (want_long, long_session) = alone(&long, 1);
    let (want_short, short_session) = alone(&short, 2);

    let mut turns = vec![
        engine.new_session(Some(2048)).into_turn(m, long.clone(), config(1)).map_err(|(_, e)| e).unwrap(),
        engine.new_session(Some(2048)).into_turn(m, short.clone(), config(2)).map_err(|(_, e)| e).unwrap(),
    ];
    let mut tokens = [Vec::new(), Vec::new()];
    let mut short_tokens_while_long_prefilled = 0;
    let mut done = [false, false];
    while !done.iter().all(|d| *d) {
        for i in 0..2 {
            if done[i] {
                continue;
            }
            match turns[i].advance(m, tok).unwrap() {
                Advance::Prefill(_) => {}
                Advance::Tokens(events) => {
                    tokens[i].extend(events.iter().map(|e| e.token));
                    if i == 1 && turns[0].is_prefilling() {
                        short_tokens_while_long_prefilled += 1;
                    }
                }
                Advance::Done => done[i] = true,
            }
        }
    }
    assert!(short_tokens_while_long_prefilled > 0, "the short turn sampled while the long prompt was read");
    let mut sessions = Vec::new();
    for t in turns {
        let hearth_engine::Ended { session, output: out, .. } = t.end();
        assert!(out.is_some());
        sessions.push(session);
    }
    assert_eq!(tokens[0], want_long);
    assert_eq!(tokens[1], want_short);
    assert_eq!((sessions[0].tokens(), sessions[0].passes()), (long_session.tokens(), long_session.passes()));
    assert_eq!((sessions[1].tokens(), sessions[1].passes()), (short_session.tokens(), short_session.passes()));
}

#[test]
fn owned_turns_decoding_in_one_pass_give_what_each_gives_alone() {
    use hearth_engine::{Advance, KvCache};
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let config =
        |seed| engine.generation_config(SamplingParams { temperature: 0.9, seed, ..SamplingParams::default() }, 20);
    let prompts: Vec<Vec<u32>> = ["Name a colour.", "What is 2 + 2?", "Write a haiku about the sea."]
        .iter()
        .map(|q| engine.encode_chat(&[ChatMessage::user(*q)]).unwrap())
        .collect();
    let alone: Vec<(Vec<u32>, hearth_engine::Session)> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut s = engine.new_session(Some(1024));
            let out = s.start_turn(m, tok, p, config(i as u64), 1).unwrap().run().unwrap();
            (out.sequences[0].tokens.clone(), s)
        })
        .collect();

    let mut turns: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            engine.new_session(Some(1024)).into_turn(m, p.clone(), config(i as u64)).map_err(|(_, e)| e).unwrap()
        })
        .collect();
    let mut tokens = vec![Vec::new(); turns.len()];
    let mut done = vec![false; turns.len()];
    let mut joint_steps = 0;
    while done.iter().any(|d| !d) {
        // Those ready to decode run in one pass; the others advance alone.
        let mut inputs: Vec<(usize, u32)> = Vec::new();
        let mut caches: Vec<&mut KvCache> = Vec::new();
        let mut alone_now = Vec::new();
        for (i, t) in turns.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            let mut ready = t.decode_inputs(m);
            match ready.pop().filter(|_| ready.is_empty()) {
                Some(hearth_engine::DecodeInput { tokens, cache, .. }) => {
                    inputs.push((i, tokens[0]));
                    caches.push(cache);
                }
                None => alone_now.push(i),
            }
        }
        let logits = if inputs.is_empty() {
            Vec::new()
        } else {
            m.decode_step_many(&inputs.iter().map(|x| x.1).collect::<Vec<_>>(), &mut caches).unwrap()
        };
        drop(caches);
        if inputs.len() > 1 {
            joint_steps += 1;
        }
        let mut outcomes: Vec<(usize, Advance)> = inputs
            .iter()
            .zip(logits)
            .map(|(&(i, _), l)| (i, turns[i].advance_given(m, tok, vec![l]).unwrap()))
            .collect();
        outcomes.extend(alone_now.into_iter().map(|i| (i, turns[i].advance(m, tok).unwrap())));
        for (i, a) in outcomes {
            match a {
                Advance::Tokens(events) => tokens[i].extend(events.iter().map(|e| e.token)),
                Advance::Prefill(_) => {}
                Advance::Done => done[i] = true,
            }
        }
    }
    assert!(joint_steps > 10, "decode steps ran together");
    for (i, t) in turns.into_iter().enumerate() {
        let hearth_engine::Ended { session, output: out, .. } = t.end();
        out.unwrap();
        assert_eq!(tokens[i], alone[i].0, "conversation {i}");
        assert_eq!(
            (session.tokens(), session.passes()),
            (alone[i].1.tokens(), alone[i].1.passes()),
            "conversation {i}"
        );
    }
}

#[test]
fn a_prefill_stopped_between_layers_keeps_the_chunks_before_and_goes_on_to_the_same_tokens() {
    use hearth_engine::{Advance, EngineError};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let engine = open_default();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let prompt =
        engine.tokenizer().encode(include_str!("../../../ARCHITECTURE.md"), false, false).unwrap()[..200].to_vec();
    let config = engine.generation_config(SamplingParams::greedy(), 8);
    let run = |turn: &mut hearth_engine::Turn| common::run_to_end(&engine, turn);
    let mut whole =
        engine.new_session(Some(1024)).into_turn(m, prompt.clone(), config.clone()).map_err(|(_, e)| e).unwrap();
    whole.set_prefill_rows(64);
    let want = run(&mut whole);
    let want_session = whole.end().session;

    // Asked once after each layer but the last: the second chunk stops
    // after its fifth layer.
    let layers = m.config().n_layers;
    let asked = Arc::new(AtomicUsize::new(0));
    let mut turn =
        engine.new_session(Some(1024)).into_turn(m, prompt.clone(), config.clone()).map_err(|(_, e)| e).unwrap();
    turn.set_prefill_rows(64);
    let counter = asked.clone();
    turn.set_stop(Arc::new(move || counter.fetch_add(1, Ordering::Relaxed) + 1 >= (layers - 1) + 5));
    assert!(matches!(turn.advance(m, tok).unwrap(), Advance::Prefill(p) if p.done == 64));
    assert!(matches!(turn.advance(m, tok), Err(EngineError::Stopped)));
    assert_eq!(asked.load(Ordering::Relaxed), (layers - 1) + 5);
    assert_eq!(turn.prefill_progress().unwrap().done, 64, "the stopped chunk is not read");
    assert!(turn.cancel().is_empty());
    let hearth_engine::Ended { session, output: out, .. } = turn.end();
    assert!(out.is_none());
    assert_eq!(session.tokens(), &prompt[..64]);
    assert_eq!(session.cache().len(), 64);

    // Going on from there reads only the rest, and writes what the whole
    // prefill did, bit for bit (the same passes).
    let mut again = session.into_turn(m, prompt.clone(), config).map_err(|(_, e)| e).unwrap();
    again.set_prefill_rows(64);
    assert_eq!(again.prefill_progress().unwrap().total, 200 - 64);
    assert_eq!(run(&mut again), want);
    let session = again.end().session;
    assert_eq!((session.tokens(), session.passes()), (want_session.tokens(), want_session.passes()));
}

#[test]
fn a_reply_goes_back_into_the_prompt_as_the_tokens_it_was_sampled_as() {
    let engine = open_default();
    let tok = engine.tokenizer();
    let user = ChatMessage::user("Say hello.");
    // "Hello there" one character a token: the same text as encoding it
    // gives, in other tokens (as a sampled reply sometimes is).
    let text = "Hello there";
    let ids: Vec<u32> = text.chars().map(|c| tok.encode(&c.to_string(), false, false).unwrap()[0]).collect();
    assert_eq!(tok.decode(&ids), text);
    assert_ne!(tok.encode(text, false, false).unwrap(), ids);
    let end = tok.eos().unwrap();
    let asked = engine.encode_chat(std::slice::from_ref(&user)).unwrap();
    let next = |reply: ChatMessage| engine.encode_chat(&[user.clone(), reply, ChatMessage::user("Again.")]).unwrap();
    // The turn's cache holds its prompt and the reply's tokens but the end
    // token (never fed): the next prompt starts with all of it.
    let spliced = next(ChatMessage::assistant(text).with_ids([ids.clone(), vec![end]].concat()));
    assert!(spliced.starts_with(&[asked.clone(), ids.clone()].concat()), "{spliced:?}");
    let plain = next(ChatMessage::assistant(text));
    assert_ne!(spliced, plain);
    // After the reply, the template's text tokenizes as it does whole.
    let tail = |p: &[u32]| p[p.len() - 8..].to_vec();
    assert_eq!(tail(&spliced), tail(&plain));
    // Tokens that are not the content's are not used.
    assert_eq!(next(ChatMessage::assistant("Goodbye").with_ids(ids)), next(ChatMessage::assistant("Goodbye")));
}

#[test]
fn the_reply_opening_is_the_templates_generation_prompt_and_ends_the_chat_prompt() {
    let engine = open_default();
    let opening =
        engine.generation_prompt_ids(Default::default()).unwrap().expect("ChatML opens the reply with a special token");
    assert_eq!(opening, engine.tokenizer().encode("<|im_start|>assistant\n", false, true).unwrap());
    let prompt = engine
        .encode_chat(&[ChatMessage::user("Say hello."), ChatMessage::assistant("Hello!"), ChatMessage::user("Again.")])
        .unwrap();
    assert!(prompt.ends_with(&opening));
}
