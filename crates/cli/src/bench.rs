//! `bench` and `bench-grammar`: speeds measured on the app's worker, each
//! reply an API request to it, as the app's own replies run.

use std::time::Instant;

use hearth_engine::{ChatMessage, EngineError};
use hearth_store::ConversationSettings;
use hearth_worker::{RawPrompt, Request};
use serde_json::json;

use crate::local::{self, Ask, LocalWorker};
use crate::{CliResult, ModelArgs};

pub(crate) fn bench_grammar(
    model: &ModelArgs,
    schema: Option<&std::path::Path>,
    gen_tokens: usize,
    repeats: usize,
) -> CliResult {
    use hearth_engine::GrammarSpec;
    let local = LocalWorker::open(model, hearth_engine::Kernels::Hearth)?;
    let engine = local.engine();
    let spec = match schema {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| EngineError::setting("schema", format!("{}: {e}", p.display())))?;
            GrammarSpec::JsonSchema(
                serde_json::from_str(&text).map_err(|e| EngineError::setting("schema", e.to_string()))?,
            )
        }
        None => GrammarSpec::JsonObject,
    };
    let t = Instant::now();
    let grammar = engine.compile_grammar(&spec)?;
    let first_compile = t.elapsed().as_secs_f64();
    let t = Instant::now();
    engine.compile_grammar(&spec)?;
    let compile = t.elapsed().as_secs_f64();
    let messages = vec![ChatMessage::user("Describe a city as a JSON object.")];
    let greedy = ConversationSettings {
        temperature: 0.0,
        max_new_tokens: gen_tokens.min(u32::MAX as usize) as u32,
        ..ConversationSettings::default()
    };
    local.settle()?;
    // A reply's tokens and decode time per token, from a cold cache.
    let run = |constrained: bool| -> CliResult<(local::Reply, f64)> {
        local.forget_caches()?;
        let mut ask = Ask::chat(messages.clone(), greedy.clone());
        ask.request.grammar = constrained.then(|| spec.clone());
        let reply = local.reply(ask, |_, _| {})?;
        let tps = reply.stats[0].tokens_per_s;
        Ok((reply, if tps > 0.0 { 1.0 / tps } else { 0.0 }))
    };
    let (mut free, mut bound) = ((0, f64::MAX), (0, f64::MAX));
    let mut constrained_reply = None;
    for _ in 0..repeats.max(1) {
        let (f, f_s) = run(false)?;
        let (b, b_s) = run(true)?;
        free = (f.stats[0].generated_tokens, free.1.min(f_s));
        bound = (b.stats[0].generated_tokens, bound.1.min(b_s));
        constrained_reply = Some(b);
    }
    let out = constrained_reply.expect("at least one repeat");
    // The mask alone: the constrained reply's tokens fed back one by one.
    let tokens = out.tokens(0);
    let mut constraint = grammar.start();
    let t = Instant::now();
    for &tok in &tokens {
        constraint.mask()?;
        if !engine.end_tokens().contains(&tok) {
            constraint.consume(tok)?;
        }
    }
    let mask = t.elapsed().as_secs_f64() / tokens.len().max(1) as f64;
    println!(
        "{}",
        json!({
            "grammar_compile_first_s": first_compile,
            "grammar_compile_s": compile,
            "unconstrained": {"tokens": free.0, "ms_per_token": free.1 * 1e3},
            "constrained": {"tokens": bound.0, "ms_per_token": bound.1 * 1e3},
            "mask_alone_ms_per_token": mask * 1e3,
            "text": out.texts[0],
        })
    );
    Ok(())
}

#[allow(clippy::too_many_arguments, reason = "the bench command's options, each one figure's")]
pub(crate) fn bench(
    model: &ModelArgs,
    prompt_tokens: usize,
    gen_tokens: usize,
    repeats: usize,
    batch: usize,
    concurrent: usize,
    speculative: Option<&crate::bench_speculative::SpeculativeRun>,
    json_out: bool,
) -> CliResult {
    let local = LocalWorker::open(model, hearth_engine::Kernels::Hearth)?;
    let mut figures = bench_figures(&local, prompt_tokens, gen_tokens, repeats, batch, concurrent)?;
    if let Some(run) = speculative {
        let ids: Vec<u32> =
            serde_json::from_value(figures["prompt_token_ids"].clone()).expect("the bench's prompt ids");
        let s = crate::bench_speculative::speculative_figures(&local, run, &ids, gen_tokens, repeats)?;
        if !json_out {
            println!(
                "speculative ({}, drafts of at most {}): {:.1} tok/s against {:.1} plain ({:.2}x), {} of {} drafted tokens taken, the same {} tokens",
                s["mode"].as_str().unwrap_or(""),
                s["draft_tokens"],
                s["decode_tokens_per_s"].as_f64().unwrap_or(0.0),
                s["plain_decode_tokens_per_s"].as_f64().unwrap_or(0.0),
                s["ratio"].as_f64().unwrap_or(0.0),
                s["accepted"],
                s["drafted"],
                s["tokens"],
            );
        }
        figures["speculative"] = s;
    }
    let f = |k: &str| figures[k].as_f64().unwrap_or(0.0);
    if let (false, Some(c)) = (json_out, figures["concurrent"].as_object()) {
        println!(
            "{concurrent} conversations in turn: the slowest at {:.2}x the decode speed of one alone",
            c["worst_ratio"].as_f64().unwrap_or(0.0)
        );
    }
    if let (false, Some(b)) = (json_out, figures["batched"].as_object()) {
        println!(
            "{batch} sequences: {:.2}x the wall time of one ({:.1} tok/s in all)",
            b["wall_ratio"].as_f64().unwrap_or(0.0),
            b["batch_tokens_per_s"].as_f64().unwrap_or(0.0)
        );
    }
    if json_out {
        println!("{figures}");
    } else {
        println!(
            "prefill: {:.1} tok/s ({} tokens), decode: {:.1} tok/s ({gen_tokens} tokens), {} threads",
            f("prefill_tokens_per_s"),
            figures["prompt_tokens"],
            f("decode_tokens_per_s"),
            figures["threads"]
        );
    }
    Ok(())
}

/// At most this many sequences sampled from one prompt, as the app's
/// "Generate N" and the API's `n` allow.
const MAX_SEQUENCES: usize = 8;

/// `bench`'s figures, as the JSON object `--json` prints: every reply runs
/// through the app's worker (`local`), from a cold cache, as an API request
/// of `prompt_tokens` tokens that samples `gen_tokens` decode steps after
/// its first token, past any end token.
pub(crate) fn bench_figures(
    local: &LocalWorker,
    prompt_tokens: usize,
    gen_tokens: usize,
    repeats: usize,
    batch: usize,
    concurrent: usize,
) -> CliResult<serde_json::Value> {
    if batch > MAX_SEQUENCES {
        return Err(format!("--batch: at most {MAX_SEQUENCES} sequences from one prompt, as Generate N").into());
    }
    let engine = local.engine();
    // A fixed, ordinary English text, repeated to the requested length.
    let seed_text = "The quick brown fox jumps over the lazy dog while the river runs past the old mill and the farmers gather the harvest before the rain. ";
    let ids = engine.tokenizer().encode(&seed_text.repeat(prompt_tokens / 20 + 2), false, false)?;
    let prompt: Vec<u32> = ids[..prompt_tokens.max(1)].to_vec();
    let settings = |temperature: f32, seed: u32| ConversationSettings {
        temperature,
        seed: Some(seed),
        // The first token comes from the prompt's pass; `gen_tokens` steps follow.
        max_new_tokens: (gen_tokens + 1).min(u32::MAX as usize) as u32,
        context_length: ((prompt.len() + gen_tokens + 8).max(16)).min(u32::MAX as usize) as u32,
        ..ConversationSettings::default()
    };
    let ask = |ids: Vec<u32>, settings: ConversationSettings, sequences: usize| {
        let request = Request { raw_prompt: Some(RawPrompt::Ids(ids)), ignore_end_tokens: true, ..Request::default() };
        Ask { request, sequences, ..Ask::chat(Vec::new(), settings) }
    };
    // Decode seconds from each sequence's rate (`gen_tokens` steps after its first token).
    let decode_s = |tokens_per_s: f64| if tokens_per_s > 0.0 { gen_tokens as f64 / tokens_per_s } else { f64::MAX };
    local.settle()?;
    let mut best_prefill = f64::MAX;
    let mut best_decode = f64::MAX;
    for _ in 0..repeats.max(1) {
        local.forget_caches()?;
        let reply = local.reply(ask(prompt.clone(), settings(0.0, 0), 1), |_, _| {})?;
        let s = &reply.stats[0];
        if s.processed_tokens as usize != prompt.len() {
            return Err(format!(
                "the prompt was read from a cache ({} of {} tokens run)",
                s.processed_tokens,
                prompt.len()
            )
            .into());
        }
        best_prefill = best_prefill.min(s.ttft_ms / 1e3);
        best_decode = best_decode.min(decode_s(s.tokens_per_s));
    }
    let prefill_tps = prompt.len() as f64 / best_prefill;
    let decode_tps = gen_tokens as f64 / best_decode;
    let threads = hearth_engine::worker_pool::WorkerPool::global().threads();
    // The best wall time of the decode steps of `sequences` sampled
    // (temperature 0.8) from one prompt: the slowest sequence's.
    let batch_decode_seconds = |sequences: usize| -> CliResult<f64> {
        let mut best = f64::MAX;
        for _ in 0..repeats.max(1) {
            local.forget_caches()?;
            let reply = local.reply(ask(prompt.clone(), settings(0.8, 7), sequences), |_, _| {})?;
            let wall = reply.stats.iter().map(|s| decode_s(s.tokens_per_s)).fold(0.0, f64::max);
            best = best.min(wall);
        }
        Ok(best)
    };
    let batched = if batch > 1 {
        let one = batch_decode_seconds(1)?;
        let many = batch_decode_seconds(batch)?;
        Some(
            json!({"batch": batch, "one_sequence_s": one, "batch_s": many, "wall_ratio": many / one, "batch_tokens_per_s": (batch * gen_tokens) as f64 / many}),
        )
    } else {
        None
    };
    // Each of `n` conversations' decode speed when their replies run
    // together, as the worker runs several conversations' replies: their
    // decode steps as one pass, prefill in chunks between them. Each has a
    // prompt of its own, so none shares another's cache.
    let concurrent_decode_rates = |n: usize| -> CliResult<Vec<f64>> {
        local.forget_caches()?;
        let pending = (0..n)
            .map(|i| {
                let mut own = prompt.clone();
                own.rotate_left(i % prompt.len().max(1));
                local.submit(ask(own, settings(0.8, 7 + i as u32), 1))
            })
            .collect::<CliResult<Vec<_>>>()?;
        pending.into_iter().map(|p| Ok(p.wait(|_, _| {})?.stats[0].tokens_per_s)).collect()
    };
    let concurrently = if concurrent > 1 {
        let alone = concurrent_decode_rates(1)?[0];
        let each = concurrent_decode_rates(concurrent)?;
        let worst = each.iter().copied().fold(f64::MAX, f64::min);
        Some(
            json!({"conversations": concurrent, "alone_tokens_per_s": alone, "each_tokens_per_s": each, "worst_ratio": worst / alone}),
        )
    } else {
        None
    };
    Ok(json!({
        "engine": "hearth",
        "model": engine.path().display().to_string(),
        "threads": threads,
        "device": hearth_engine::device::describe(engine.model().device()),
        "weight_bytes_per_token": engine.model().weight_bytes_per_token(),
        "prompt_tokens": prompt.len(),
        "prompt_token_ids": prompt,
        "gen_tokens": gen_tokens,
        "prefill_tokens_per_s": prefill_tps,
        "decode_tokens_per_s": decode_tps,
        "peak_rss_bytes": peak_rss_bytes(),
        "batched": batched,
        "concurrent": concurrently,
    }))
}

/// High-water mark of resident memory, where the OS reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
