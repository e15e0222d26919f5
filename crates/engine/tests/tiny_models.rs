//! Every family on tiny random-weight GGUF files written at test time: the
//! forward pass against candle-transformers' reference modules, and the KV
//! cache (incremental decode, chunks after decode steps, sliding windows,
//! truncation, forks, serialisation).

mod common;

use candle_core::{Device, Tensor};
use common::{max_abs_diff, relative_diff, tiny, Family, TinySpec};
use hearth_engine::{Engine, KvCache, Model};

const ALL: [Family; 8] = [
    Family::Llama,
    Family::Qwen2,
    Family::Qwen3,
    Family::Gemma3,
    Family::Qwen3Moe,
    Family::Qwen35,
    Family::Qwen35Moe,
    Family::GptOss,
];

/// Dense families for this file's graph-against-Hearth's-kernels checks;
/// every family's graph pass is tested in `graph_pass.rs`.
const GRAPH: [Family; 4] = [Family::Llama, Family::Qwen2, Family::Qwen3, Family::Gemma3];

fn tokens(n: usize) -> Vec<u32> {
    (0..n).map(|i| (3 + (i * 37) % 300) as u32).collect()
}

fn logits(model: &Model, toks: &[u32], cache: &mut KvCache) -> Vec<f32> {
    model.forward(&[toks.to_vec()], cache).unwrap().to_vec2::<f32>().unwrap().remove(0)
}

fn fresh(model: &Model, toks: &[u32]) -> Vec<f32> {
    let mut cache = model.new_cache(4096);
    logits(model, toks, &mut cache)
}

#[test]
fn cache_steps_and_chunks_match_a_full_prefill_for_every_family() {
    for family in ALL {
        let spec = TinySpec::new(family);
        let (_dir, path) = tiny(&spec);
        let engine = Engine::open(&path).unwrap();
        let m = engine.model();
        let t = tokens(30);
        let mut cache = m.new_cache(4096);
        logits(m, &t[..5], &mut cache);
        // Single steps past the sliding window (8), then a chunk after them.
        for k in 5..14 {
            let inc = logits(m, &t[k..k + 1], &mut cache);
            let full = fresh(m, &t[..k + 1]);
            assert!(max_abs_diff(&inc, &full) < 1e-3, "{family:?}: step {k} differs by {}", max_abs_diff(&inc, &full));
        }
        let inc = logits(m, &t[14..30], &mut cache);
        let full = fresh(m, &t);
        assert!(
            max_abs_diff(&inc, &full) < 1e-3,
            "{family:?}: chunk after steps differs by {}",
            max_abs_diff(&inc, &full)
        );
    }
}

fn reference_logits(family: Family, path: &std::path::Path, toks: &[u32]) -> Vec<f32> {
    use candle_core::quantized::gguf_file;
    let mut f = std::fs::File::open(path).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    let dev = Device::Cpu;
    let x = Tensor::new(toks, &dev).unwrap().unsqueeze(0).unwrap();
    let out = match family {
        Family::Llama => {
            let mut m =
                candle_transformers::models::quantized_llama::ModelWeights::from_gguf(ct, &mut f, &dev).unwrap();
            m.forward(&x, 0).unwrap()
        }
        Family::Qwen2 => {
            let mut m =
                candle_transformers::models::quantized_qwen2::ModelWeights::from_gguf(ct, &mut f, &dev).unwrap();
            m.forward(&x, 0).unwrap()
        }
        Family::Qwen3 => {
            let mut m =
                candle_transformers::models::quantized_qwen3::ModelWeights::from_gguf(ct, &mut f, &dev).unwrap();
            m.forward(&x, 0).unwrap()
        }
        Family::Gemma3 => unreachable!("candle's gemma3 is not a valid reference; see ARCHITECTURE.md"),
        Family::Gemma2
        | Family::Lfm2
        | Family::Deepseek2
        | Family::Glm4Moe
        | Family::Qwen3Vl
        | Family::Qwen3VlMoe
        | Family::Granite
        | Family::GraniteMoe
        | Family::Olmo2
        | Family::SmolLm3
        | Family::Mistral3
        | Family::Phi3
        | Family::Qwen3Moe
        | Family::Qwen35
        | Family::Qwen35Moe
        | Family::GptOss
        | Family::Gemma4 => {
            unreachable!("candle has none of these; tests/families_vs_llamacpp.rs holds them to llama.cpp")
        }
    };
    out.flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn first_step_logits_match_candle_reference_modules() {
    for family in [Family::Llama, Family::Qwen2, Family::Qwen3] {
        let spec = TinySpec::new(family);
        let (_dir, path) = tiny(&spec);
        let engine = Engine::open_with(&path, &Device::Cpu, hearth_engine::Kernels::Candle).unwrap();
        let t = tokens(12);
        let ours = fresh(engine.model(), &t);
        let theirs = reference_logits(family, &path, &t);
        // candle-transformers keeps its KV cache in f32; Hearth keeps f16 (as
        // llama.cpp does), and random tiny weights make peaky attention that
        // amplifies f16's 2^-11 rounding to ~1% of the logits' range. A wrong
        // layout or head would be off by the logits' own size. (candle's qwen3
        // also runs its own CPU flash-attention kernel, which rounds differently.)
        let d = relative_diff(&ours, &theirs);
        assert!(
            d < 3e-2,
            "{family:?}: logits differ from candle-transformers by {} ({d} of their range)",
            max_abs_diff(&ours, &theirs)
        );
        let own = fresh(Engine::open(&path).unwrap().model(), &t);
        assert!(max_abs_diff(&own, &theirs) < 0.2, "{family:?}: Hearth's kernels drift from candle's");
    }
}

#[test]
fn gemma_sliding_layers_forget_tokens_outside_the_window() {
    // Two sliding layers with a window of 4: the last position sees at most
    // 2 × 3 positions back, so a change at position 0 of 12 cannot reach it.
    let mut spec = TinySpec::new(Family::Gemma3);
    spec.sliding_window = 4;
    spec.sliding_pattern = 6;
    let (_dir, path) = tiny(&spec);
    let engine = Engine::open(&path).unwrap();
    let m = engine.model();
    assert!(m.config().is_sliding(0) && m.config().is_sliding(1));
    let a = tokens(12);
    let mut b = a.clone();
    b[0] = 300;
    assert_eq!(fresh(m, &a), fresh(m, &b));
    // ...but a change inside the receptive field does reach it.
    let mut c = a.clone();
    c[8] = 300;
    assert_ne!(fresh(m, &a), fresh(m, &c));

    // With global layers the first token matters.
    let mut spec = TinySpec::new(Family::Gemma3);
    spec.sliding_pattern = 1;
    let (_dir2, path2) = tiny(&spec);
    let engine = Engine::open(&path2).unwrap();
    assert!(!engine.model().config().is_sliding(0));
    assert_ne!(fresh(engine.model(), &a), fresh(engine.model(), &b));
}

#[test]
fn truncate_then_refill_equals_a_fresh_cache() {
    for family in ALL {
        let (_dir, path) = tiny(&TinySpec::new(family));
        let engine = Engine::open(&path).unwrap();
        let m = engine.model();
        let t = tokens(24);
        let mut cache = m.new_cache(4096);
        logits(m, &t, &mut cache);
        cache.truncate(10);
        // A hybrid's cache goes back to a checkpoint (here the start).
        let kept = cache.len();
        assert!(kept == 10 || family.is_hybrid() && kept == 0, "{family:?}: kept {kept}");
        let mut other = t[..10].to_vec();
        other.extend([5, 6, 7, 8]);
        let refilled = logits(m, &other[kept..], &mut cache);
        let d = max_abs_diff(&refilled, &fresh(m, &other));
        assert!(d < 1e-3, "{family:?}: {d}");
    }
}

#[test]
fn cache_clones_are_independent() {
    let (_dir, path) = tiny(&TinySpec::new(Family::Llama));
    let engine = Engine::open(&path).unwrap();
    let m = engine.model();
    let t = tokens(16);
    let mut a = m.new_cache(4096);
    logits(m, &t[..10], &mut a);
    let mut b = a.clone();
    // Writing to the clone must not touch the original's positions.
    logits(m, &[9, 9, 9], &mut b);
    b.truncate(10);
    logits(m, &[4, 4, 4], &mut b);
    let from_a = logits(m, &t[10..], &mut a);
    assert!(max_abs_diff(&from_a, &fresh(m, &t)) < 1e-3);
}

#[test]
fn cache_serialisation_round_trips_and_rejects_damage() {
    for family in [Family::Llama, Family::Gemma3, Family::Qwen35] {
        let (_dir, path) = tiny(&TinySpec::new(family));
        let engine = Engine::open(&path).unwrap();
        let m = engine.model();
        let t = tokens(20);
        let mut cache = m.new_cache(4096);
        logits(m, &t[..15], &mut cache);
        let mut bytes = Vec::new();
        cache.write_to(&mut bytes).unwrap();
        let mut restored = KvCache::read_from(&mut bytes.as_slice(), m.config(), 4096, &Device::Cpu).unwrap();
        assert_eq!(restored.len(), 15);
        let a = logits(m, &t[15..], &mut restored);
        assert!(max_abs_diff(&a, &fresh(m, &t)) < 1e-3);

        assert!(KvCache::read_from(&mut &bytes[..bytes.len() - 3], m.config(), 4096, &Device::Cpu).is_err());
        let mut bad = bytes.clone();
        bad[0] ^= 0xff;
        assert!(KvCache::read_from(&mut bad.as_slice(), m.config(), 4096, &Device::Cpu).is_err());
        assert!(
            KvCache::read_from(&mut bytes.as_slice(), m.config(), 10, &Device::Cpu).is_err(),
            "longer than the context"
        );
    }
}

#[test]
fn the_cpu_pass_matches_the_tensor_graph_for_every_family_batch_and_chunk() {
    // The host pass (plain buffers, worker pool, loop-bound masks) against
    // the candle-op graph that GPUs run: long enough prompts for the
    // parallel row paths and Gemma's window, a batch of two, then steps.
    // Both round to f16 at the same points, but their different orders
    // flip some of those roundings: ~1% of the logits' range on random
    // tiny weights.
    for family in GRAPH {
        let (_dir, path) = tiny(&TinySpec::new(family));
        let engine = Engine::open(&path).unwrap();
        let m = engine.model();
        let batch = vec![tokens(45), tokens(46)[1..].to_vec()];
        let (mut host, mut graph) = (m.new_cache(4096), m.new_cache(4096));
        let a = m.forward(&batch, &mut host).unwrap().to_vec2::<f32>().unwrap();
        let b = m.forward_graph(&batch, &mut graph).unwrap().to_vec2::<f32>().unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert!(
                relative_diff(x, y) < 2e-2,
                "{family:?}: prefill differs by {} ({} of the range)",
                max_abs_diff(x, y),
                relative_diff(x, y)
            );
        }
        for step in 0..3u32 {
            let next = vec![vec![10 + step], vec![20 + step]];
            let a = m.forward(&next, &mut host).unwrap().to_vec2::<f32>().unwrap();
            let b = m.forward_graph(&next, &mut graph).unwrap().to_vec2::<f32>().unwrap();
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    relative_diff(x, y) < 2e-2,
                    "{family:?}: step {step} differs by {} ({} of the range)",
                    max_abs_diff(x, y),
                    relative_diff(x, y)
                );
            }
        }
    }
}

#[test]
fn q4_k_weights_run_on_hearths_kernel_and_agree_with_candles() {
    let spec = TinySpec {
        n_embd: 256,
        head_dim: 64,
        ffn: 512,
        dtype: candle_core::quantized::GgmlDType::Q4K,
        ..TinySpec::new(Family::Llama)
    };
    let (_dir, path) = tiny(&spec);
    let own = Engine::open(&path).unwrap();
    let candle = Engine::open_with(&path, &Device::Cpu, hearth_engine::Kernels::Candle).unwrap();
    let t = tokens(40);
    let (a, b) = (fresh(own.model(), &t), fresh(candle.model(), &t));
    // candle rounds Q8_K activations with scale -128/max, llama.cpp (and
    // Hearth) with -127/max: close, not equal. A wrong row or block layout
    // would be off by the logits' own size.
    let d = max_abs_diff(&a, &b);
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.5, "logits are all near zero");
    assert!(d < 0.05 * scale, "Q4_K: Hearth's kernel differs from candle's by {d} (logits up to {scale})");
}

#[test]
fn decode_steps_over_a_long_history_match_the_tensor_graph() {
    // Past 512 cached positions a decode step groups the query heads of a
    // KV head into one attention task. The two passes round differently
    // (llama.cpp's orders vs candle's), and over 600 positions that drifts
    // to a few tenths of a percent of the logits' range; a wrong head,
    // position or window would be far larger.
    for family in [Family::Llama, Family::Gemma3] {
        let (_dir, path) = tiny(&TinySpec { context: 1024, ..TinySpec::new(family) });
        let engine = Engine::open(&path).unwrap();
        let m = engine.model();
        let history = tokens(600);
        let (mut host, mut graph) = (m.new_cache(1024), m.new_cache(1024));
        for chunk in history.chunks(200) {
            m.forward(&[chunk.to_vec()], &mut host).unwrap();
            m.forward_graph(&[chunk.to_vec()], &mut graph).unwrap();
        }
        for step in 0..3u32 {
            let a = logits(m, &[5 + step], &mut host);
            let b = m.forward_graph(&[vec![5 + step]], &mut graph).unwrap().to_vec2::<f32>().unwrap().remove(0);
            assert!(
                relative_diff(&a, &b) < 2e-2,
                "{family:?}: step {step} differs by {} ({} of the range)",
                max_abs_diff(&a, &b),
                relative_diff(&a, &b)
            );
        }
    }
}

#[test]
fn each_variant_of_a_batch_of_eight_is_the_reply_a_single_run_gives() {
    use candle_core::quantized::GgmlDType;
    use hearth_engine::SamplingParams;
    // Eight sequences decoding together are eight activation rows: llama.cpp
    // would sum them in its tiled (or repacked GEMM) order, not the one a
    // single sequence gets. Each row keeps its single-sequence order.
    for dtype in [GgmlDType::Q4K, GgmlDType::Q6K, GgmlDType::Q8_0] {
        let spec = TinySpec { n_embd: 256, head_dim: 64, ffn: 512, dtype, ..TinySpec::new(Family::Llama) };
        let (_dir, path) = tiny(&spec);
        let engine = Engine::open(&path).unwrap();
        let (m, tok) = (engine.model(), engine.tokenizer());
        let prompt = tokens(20);
        let sampling = SamplingParams { temperature: 1.0, seed: 11, ..SamplingParams::default() };
        let mut session = engine.new_session(Some(256));
        let mut turn = session.start_turn(m, tok, &prompt, engine.generation_config(sampling.clone(), 12), 8).unwrap();
        while turn.step().unwrap().is_some() {}
        let batch = turn.finish(0);
        for (b, variant) in batch.sequences.iter().enumerate() {
            let sampling = SamplingParams { seed: 11 + b as u64, ..sampling.clone() };
            let single = engine
                .new_session(Some(256))
                .start_turn(m, tok, &prompt, engine.generation_config(sampling, 12), 1)
                .unwrap()
                .run()
                .unwrap();
            assert_eq!(variant.tokens, single.sequences[0].tokens, "{dtype:?}: variant {b}");
        }
    }
}

/// Generate N on Gemma 4 (with and without experts), DeepSeek V2's latent
/// attention and Phi-3's fused projections: each variant of a batch is the
/// reply a single run gives, and a decode pass over several conversations'
/// caches (past Gemma's window) gives each the step it gets alone.
#[test]
fn variants_and_shared_decode_passes_are_each_sequence_alone() {
    use hearth_engine::SamplingParams;
    for spec in [
        TinySpec::gemma4(false),
        TinySpec::gemma4(true),
        TinySpec { n_layers: 2, ..TinySpec::new(Family::Deepseek2) },
        TinySpec { n_layers: 2, ..TinySpec::new(Family::Phi3) },
    ] {
        let (_dir, path) = tiny(&spec);
        let engine = Engine::open(&path).unwrap();
        let (m, tok) = (engine.model(), engine.tokenizer());
        let prompt = tokens(20);
        let sampling = SamplingParams { temperature: 1.0, seed: 11, ..SamplingParams::default() };
        let mut session = engine.new_session(Some(256));
        let mut turn = session.start_turn(m, tok, &prompt, engine.generation_config(sampling.clone(), 12), 4).unwrap();
        while turn.step().unwrap().is_some() {}
        let batch = turn.finish(0);
        let mut distinct = std::collections::HashSet::new();
        for (b, variant) in batch.sequences.iter().enumerate() {
            let sampling = SamplingParams { seed: 11 + b as u64, ..sampling.clone() };
            let single = engine
                .new_session(Some(256))
                .start_turn(m, tok, &prompt, engine.generation_config(sampling, 12), 1)
                .unwrap()
                .run()
                .unwrap();
            assert_eq!(variant.tokens, single.sequences[0].tokens, "variant {b}");
            distinct.insert(variant.tokens.clone());
        }
        assert!(
            distinct.len() > 1,
            "the variants differ from one another: {:?}",
            batch.sequences.iter().map(|s| s.tokens.clone()).collect::<Vec<_>>()
        );

        let histories = [tokens(5), tokens(17), tokens(40)];
        let mut apart: Vec<KvCache> = histories
            .iter()
            .map(|h| {
                let mut c = m.new_cache(256);
                logits(m, h, &mut c);
                c
            })
            .collect();
        let mut together: Vec<KvCache> = apart.clone();
        for step in 0..3u32 {
            let next: Vec<u32> = (0..3).map(|i| 7 + 11 * i + step).collect();
            let want: Vec<Vec<f32>> = apart.iter_mut().zip(&next).map(|(c, &t)| logits(m, &[t], c)).collect();
            let mut refs: Vec<&mut KvCache> = together.iter_mut().collect();
            let got = m.decode_step_many(&next, &mut refs).unwrap();
            assert_eq!(got, want, "step {step}: each row as it is alone");
        }
    }
}

/// Gemma 4's shared layers store nothing: a position costs the keys and
/// values of the layers that keep their own, each at its own head size.
#[test]
fn a_gemma4_cache_stores_shared_layers_once() {
    let spec = TinySpec::gemma4(false);
    let (_dir, path) = tiny(&spec);
    let engine = Engine::open(&path).unwrap();
    let c = engine.model().config();
    assert_eq!(c.kv_source, vec![0, 1, 2, 3, 2, 3], "layers 4 and 5 read layers 2 and 3");
    let g = &spec.gemma4;
    // Layers 0 and 2 slide (2 KV heads of 16), 1 and 3 are full (1 of 32).
    let own = 2 * (g.kv_heads_swa * g.head_dim_swa) + 2 * (spec.n_kv_heads * spec.head_dim);
    let mut cache = engine.model().new_cache(256);
    assert_eq!(cache.bytes_per_position(), 2 * own * 2, "keys and values in f16, four layers");
    logits(engine.model(), &tokens(40), &mut cache);
    assert_eq!(cache.allocated_bytes(), 256 * cache.bytes_per_position(), "the buffers hold four layers");
}

/// Latent attention's values are the cached latent itself: a position
/// costs one KV head of the latent and the rotated key, in f16, as
/// llama.cpp's cache holds it, not a second copy for the values.
#[test]
fn a_latent_attention_cache_stores_the_latent_once() {
    let (_dir, path) = tiny(&TinySpec::new(Family::Deepseek2));
    let engine = Engine::open(&path).unwrap();
    let c = engine.model().config();
    let mla = c.mla.expect("latent attention");
    assert_eq!((c.n_kv_heads, c.head_dim), (1, mla.kv_lora_rank + c.rope_dims));
    let mut cache = engine.model().new_cache(256);
    assert_eq!(cache.bytes_per_position(), c.n_layers * c.head_dim * 2, "keys only, in f16");
    logits(engine.model(), &tokens(40), &mut cache);
    assert_eq!(cache.allocated_bytes(), 256 * cache.bytes_per_position());
    let facts = hearth_engine::ModelFacts::read(&path).unwrap();
    assert_eq!(facts.kv_bytes_per_token, cache.bytes_per_position() as u64, "the memory estimate agrees");
}

#[test]
fn one_decode_pass_over_several_caches_equals_a_step_each_for_every_family() {
    // Histories of different lengths, past Gemma's sliding window for one.
    for family in ALL {
        for dtype in [candle_core::quantized::GgmlDType::Q8_0, candle_core::quantized::GgmlDType::Q4K] {
            let spec = TinySpec { n_embd: 256, head_dim: 64, ffn: 512, dtype, ..TinySpec::new(family) };
            let (_dir, path) = tiny(&spec);
            let model = Engine::open(&path).unwrap();
            let m = model.model();
            let histories = [tokens(5), tokens(17), tokens(40)];
            let mut apart: Vec<KvCache> = histories
                .iter()
                .map(|h| {
                    let mut c = m.new_cache(256);
                    logits(m, h, &mut c);
                    c
                })
                .collect();
            let mut together: Vec<KvCache> = apart.clone();
            for step in 0..3u32 {
                let next: Vec<u32> = (0..3).map(|i| 7 + 11 * i + step).collect();
                let want: Vec<Vec<f32>> = apart.iter_mut().zip(&next).map(|(c, &t)| logits(m, &[t], c)).collect();
                let mut refs: Vec<&mut KvCache> = together.iter_mut().collect();
                let got = m.decode_step_many(&next, &mut refs).unwrap();
                assert_eq!(got, want, "{family:?} {dtype:?} step {step}: bit for bit");
            }
        }
    }
}

#[test]
fn fused_gate_and_up_experts_equal_separate_ones() {
    for experts_dtype in [candle_core::quantized::GgmlDType::Q8_0, candle_core::quantized::GgmlDType::Q4_0] {
        let spec = TinySpec { experts_dtype, ..TinySpec::new(Family::Qwen3Moe) };
        let (_d1, apart) = tiny(&spec);
        let (_d2, fused) = tiny(&TinySpec { fused_gate_up: true, ..spec });
        let (apart, fused) = (Engine::open(&apart).unwrap(), Engine::open(&fused).unwrap());
        let t = tokens(40);
        for n in [1, 40] {
            assert_eq!(fresh(apart.model(), &t[..n]), fresh(fused.model(), &t[..n]), "{experts_dtype:?}, {n} tokens");
        }
    }
}

/// Variants whose context fills during a pass they share, as the worker
/// runs them (`decode_inputs`, one `decode_step_many`, `advance_given`):
/// each samples from that pass's logits and ends `CacheFull`, as one run
/// alone does, rather than the turn failing.
#[test]
fn variants_that_fill_the_context_in_a_shared_pass_end_as_cache_full() {
    use hearth_engine::{Advance, FinishReason, SamplingParams};
    let (_dir, path) = tiny(&TinySpec::new(Family::Llama));
    let engine = Engine::open(&path).unwrap();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let prompt = tokens(20);
    let config = |seed: u64| {
        let mut c =
            engine.generation_config(SamplingParams { temperature: 1.0, seed, ..SamplingParams::default() }, 64);
        c.end_tokens.clear();
        c
    };
    let start = |seed: u64| engine.new_session(Some(26)).into_turn(m, prompt.clone(), config(seed)).map_err(|(_, e)| e);
    let mut turn = start(3).unwrap();
    turn.set_variants(2).unwrap();
    let mut shared_passes = 0;
    loop {
        let inputs = turn.decode_inputs(m);
        let advance = if inputs.is_empty() {
            turn.advance(m, tok).unwrap()
        } else {
            let (ids, mut caches): (Vec<u32>, Vec<&mut KvCache>) =
                inputs.into_iter().map(|d| (d.tokens[0], d.cache)).unzip();
            let logits = m.decode_step_many(&ids, &mut caches).unwrap();
            shared_passes += 1;
            turn.advance_given(m, tok, logits).unwrap()
        };
        if matches!(advance, Advance::Done) {
            break;
        }
    }
    assert_eq!(shared_passes, 6, "a pass per token fed");
    let out = turn.end().output.unwrap();
    for (b, seq) in out.sequences.iter().enumerate() {
        assert_eq!(seq.finish, FinishReason::CacheFull, "variant {b}");
        // The cache holds 26: the prompt and 6 fed; the 7th is never fed.
        assert_eq!(seq.tokens.len(), 7, "variant {b}");
        let mut alone = start(3 + b as u64).unwrap();
        let single = common::run_to_end(&engine, &mut alone);
        assert_eq!(seq.tokens, single, "variant {b} is its run alone");
    }
}
