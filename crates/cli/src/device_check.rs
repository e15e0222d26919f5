//! `hearth-cli device-check`: what `bench/device.sh` checks on a GPU
//! machine, one JSON line per figure, each with `pass` where the issue sets
//! a bar. The same checks run here against the CPU with `--device cpu
//! --graph` (the GPU's pass on the CPU), which is how this logic is tested
//! on a machine without a GPU.
//!
//! - `bandwidth`: the device's read bandwidth, a sum over a large buffer.
//! - `greedy`: a greedy reply on the device against the CPU's own pass,
//!   token for token; where they part, the CPU's two best logits there say
//!   whether it was a near-tie.
//! - `speed`: prefill and decode against the bandwidth bound (weight bytes
//!   a token reads over the measured bandwidth): decode at 60% or more.
//! - `generate_n`: four sequences from one prompt against one: 1.3x the
//!   wall time or less.
//! - `concurrent`: two conversations' replies together against one alone.
//! - `stop_prefill`: a long prefill stopped mid-chunk: how long the stop
//!   took, the cache left at the last whole chunk, and the reply after
//!   going on equal to the reply of a prefill never stopped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hearth_engine::{Advance, ChatMessage, Device, Engine, EngineError, Kernels, SamplingParams, Turn};
use hearth_store::ConversationSettings;
use serde_json::{json, Value};

use crate::local::{Ask, LocalWorker};
use crate::CliResult;

/// What to check, on which device.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// cuda, cuda:N, metal, or cpu.
    #[arg(long, default_value = "cuda")]
    device: String,
    /// With `--device cpu`: the graph pass as a GPU runs it.
    #[arg(long)]
    graph: bool,
    /// Worker threads for the CPU side.
    #[arg(long)]
    threads: Option<usize>,
    /// A file whose greedy reply is compared with the CPU's (repeatable).
    #[arg(long = "greedy-model")]
    greedy_models: Vec<PathBuf>,
    #[arg(long, default_value_t = 64)]
    greedy_tokens: usize,
    /// A file for the speed figures and the stopped prefill.
    #[arg(long)]
    speed_model: Option<PathBuf>,
    #[arg(long, default_value_t = 512)]
    prompt_tokens: usize,
    #[arg(long, default_value_t = 128)]
    gen_tokens: usize,
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    #[arg(long, default_value_t = 4096)]
    stop_prompt_tokens: usize,
    /// The stopped prefill's chunk, in rows (at most 512).
    #[arg(long, default_value_t = 512)]
    stop_chunk: usize,
    /// The bandwidth probe's buffer.
    #[arg(long, default_value_t = 2048)]
    bandwidth_mib: usize,
}

/// Runs every check `plan` asks for, printing each figure as it comes;
/// fails only when a check cannot run (a figure below its bar is `pass: false`).
pub(crate) fn run(plan: &Args) -> CliResult {
    crate::set_threads(&model_args(plan, None, &plan.device))?;
    let device = plan.device.parse::<hearth_engine::DeviceChoice>()?.open()?;
    if plan.graph != device.is_cpu() {
        return Err(EngineError::setting(
            "graph",
            "--graph goes with --device cpu (the GPU's pass on the CPU); a GPU runs it already, and the CPU's own pass against itself checks nothing",
        )
        .into());
    }
    let device = &device;
    let emit = |v: Value| println!("{v}");
    let bandwidth = bandwidth_gb_per_s(device, plan.bandwidth_mib)?;
    emit(json!({"check": "bandwidth", "device": hearth_engine::device::describe(device), "gb_per_s": bandwidth}));
    for path in &plan.greedy_models {
        emit(greedy(plan, path)?);
    }
    if let Some(path) = &plan.speed_model {
        let local = LocalWorker::open(&model_args(plan, Some(path), &plan.device), kernels(plan))?;
        let figures = crate::bench::bench_figures(&local, plan.prompt_tokens, plan.gen_tokens, plan.repeats, 4, 2)?;
        let engine = local.engine();
        let per_token = engine.model().weight_bytes_per_token() as f64;
        let bound = bandwidth * 1e9 / per_token;
        let decode = figures["decode_tokens_per_s"].as_f64().unwrap_or(0.0);
        emit(json!({
            "check": "speed",
            "model": path.display().to_string(),
            "weight_bytes_per_token": per_token,
            "prefill_tokens_per_s": figures["prefill_tokens_per_s"],
            "prompt_tokens": plan.prompt_tokens,
            "decode_tokens_per_s": decode,
            "bound_tokens_per_s": bound,
            "share_of_bound": decode / bound,
            "pass": decode / bound >= 0.6,
        }));
        let b = &figures["batched"];
        let ratio = b["wall_ratio"].as_f64().unwrap_or(f64::MAX);
        emit(
            json!({"check": "generate_n", "batch": 4, "one_sequence_s": b["one_sequence_s"], "batch_s": b["batch_s"], "wall_ratio": ratio, "pass": ratio <= 1.3}),
        );
        let c = &figures["concurrent"];
        emit(
            json!({"check": "concurrent", "conversations": 2, "alone_tokens_per_s": c["alone_tokens_per_s"], "each_tokens_per_s": c["each_tokens_per_s"], "worst_ratio": c["worst_ratio"]}),
        );
        // The engine's own stop inside a layer, on the worker's model while it is idle.
        emit(stop_prefill(engine, plan.stop_prompt_tokens, plan.stop_chunk)?);
    }
    Ok(())
}

/// The kernels under test: the graph pass where `--graph` runs it on the CPU.
fn kernels(plan: &Args) -> Kernels {
    if plan.graph {
        Kernels::Graph
    } else {
        Kernels::Hearth
    }
}

/// `path` on `device`, as the CLI's other commands take a model.
fn model_args(plan: &Args, path: Option<&Path>, device: &str) -> crate::ModelArgs {
    crate::ModelArgs { model: path.map(Path::to_path_buf), threads: plan.threads, device: device.to_string() }
}

/// Read bandwidth in GB/s: the best of six sums over `mib` MiB of f32
/// already on the device, summed as rows of 64 Ki values first so that
/// every multiprocessor reads (candle sums a whole tensor in one block),
/// the result read back ending each.
fn bandwidth_gb_per_s(device: &Device, mib: usize) -> Result<f64, EngineError> {
    const ROW: usize = 1 << 16;
    let rows = (mib.max(1) * (1 << 20) / 4).div_ceil(ROW);
    let data = candle_core::Tensor::ones((rows, ROW), candle_core::DType::F32, device)?;
    let mut best = f64::MAX;
    for _ in 0..6 {
        let t = Instant::now();
        let total: f32 = data.sum(1)?.sum_all()?.to_scalar()?;
        best = best.min(t.elapsed().as_secs_f64());
        if total != (rows * ROW) as f32 {
            return Err(EngineError::setting("device", format!("the bandwidth probe summed {total}")));
        }
    }
    Ok((rows * ROW * 4) as f64 / best / 1e9)
}

/// A greedy reply to a fixed question on the device against the CPU's own
/// pass (Hearth's kernels), each through the app's worker, and where they
/// part, whether it was a near-tie.
fn greedy(plan: &Args, path: &Path) -> CliResult<Value> {
    let messages = vec![ChatMessage::user("Name three rivers of Europe and say where each rises.")];
    let settings = ConversationSettings {
        temperature: 0.0,
        max_new_tokens: plan.greedy_tokens.min(u32::MAX as usize) as u32,
        ..ConversationSettings::default()
    };
    let mut ask = Ask::chat(messages, settings);
    ask.request.ignore_end_tokens = true;
    let reply = |local: &LocalWorker| -> CliResult<Vec<u32>> { Ok(local.reply(ask.clone(), |_, _| {})?.tokens(0)) };
    let on_device = reply(&LocalWorker::open(&model_args(plan, Some(path), &plan.device), kernels(plan))?)?;
    let local_cpu = LocalWorker::open(&model_args(plan, Some(path), "cpu"), Kernels::Hearth)?;
    let on_cpu = reply(&local_cpu)?;
    let cpu = local_cpu.engine();
    let prompt = local_cpu.prompt_ids(ask)?;
    let parted = on_device.iter().zip(&on_cpu).position(|(a, b)| a != b);
    // The CPU's margin between its two best tokens where the replies part.
    let margin = match parted {
        Some(at) => {
            let history: Vec<u32> = prompt.iter().chain(&on_cpu[..at]).copied().collect();
            let mut cache = cpu.model().new_cache(history.len() + 1);
            let mut logits = Vec::new();
            for chunk in history.chunks(hearth_engine::model::PREFILL_CHUNK) {
                logits = cpu.model().forward(&[chunk.to_vec()], &mut cache)?.to_vec2::<f32>()?.remove(0);
            }
            let range = logits.iter().fold(0f32, |m, x| m.max(x.abs()));
            logits.sort_by(|a, b| b.total_cmp(a));
            Some(((logits[0] - logits[1]) as f64, range as f64))
        }
        None => None,
    };
    let near_tie = margin.map(|(m, range)| m < 1e-2 * range);
    Ok(json!({
        "check": "greedy",
        "model": path.display().to_string(),
        "tokens": on_cpu.len(),
        "equal_tokens": parted.unwrap_or(on_cpu.len().min(on_device.len())),
        "first_difference": parted,
        "cpu_margin_there": margin.map(|m| m.0),
        "logit_range_there": margin.map(|m| m.1),
        "near_tie": near_tie,
        "pass": on_device.len() == on_cpu.len() && near_tie.unwrap_or(true),
    }))
}

/// A prefill of `prompt_tokens` in `chunk`-row chunks, stopped a few
/// layers into its second chunk; then the turn goes on from what was kept.
fn stop_prefill(engine: &Engine, prompt_tokens: usize, chunk: usize) -> Result<Value, EngineError> {
    let (m, tok) = (engine.model(), engine.tokenizer());
    let chunk = chunk.clamp(1, hearth_engine::model::PREFILL_CHUNK);
    let text = "The quick brown fox jumps over the lazy dog while the river runs past the old mill. ";
    let ids = tok.encode(&text.repeat(prompt_tokens / 15 + 2), false, false)?;
    let prompt = ids[..prompt_tokens.max(2 * chunk + 1).min(ids.len())].to_vec();
    let mut config = engine.generation_config(SamplingParams::greedy(), 8);
    config.end_tokens.clear();
    let start = |session: hearth_engine::Session| -> Result<Turn, EngineError> {
        let mut turn = session.into_turn(m, prompt.clone(), config.clone()).map_err(|(_, e)| e)?;
        turn.set_prefill_rows(chunk);
        Ok(turn)
    };
    let context = Some(prompt.len() + 16);
    let want = run_to_end(engine, &mut start(engine.new_session(context))?)?;

    // Stop is asked after each layer but the last: say yes a few layers
    // into the second chunk, and time from that answer to the error.
    let layers = m.config().n_layers;
    let asked = Arc::new(AtomicUsize::new(0));
    let stopped_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let stopping = Arc::new(AtomicBool::new(false));
    let mut turn = start(engine.new_session(context))?;
    {
        let (asked, stopped_at, stopping) = (asked.clone(), stopped_at.clone(), stopping.clone());
        turn.set_stop(Arc::new(move || {
            let n = asked.fetch_add(1, Ordering::Relaxed) + 1;
            if n >= (layers - 1) + layers.div_ceil(2) && !stopping.swap(true, Ordering::Relaxed) {
                *stopped_at.lock().expect("not poisoned") = Some(Instant::now());
            }
            stopping.load(Ordering::Relaxed)
        }));
    }
    let first = turn.advance(m, tok)?;
    let stopped = matches!(turn.advance(m, tok), Err(EngineError::Stopped));
    // On a GPU the layers queued before the stop still run: the stop is
    // done when the device is free.
    m.device().synchronize()?;
    let latency_ms = stopped_at.lock().expect("not poisoned").map(|t| t.elapsed().as_secs_f64() * 1e3);
    let kept_chunk = matches!(first, Advance::Prefill(p) if p.done == chunk);
    turn.cancel();
    let session = turn.end().session;
    let kept = session.cache().len();
    let cache_ok = kept == chunk && session.tokens() == &prompt[..chunk];
    let mut again = start(session)?;
    let resumed_equal = run_to_end(engine, &mut again)? == want;
    Ok(json!({
        "check": "stop_prefill",
        "prompt_tokens": prompt.len(),
        "chunk": chunk,
        "stopped": stopped,
        "stop_latency_ms": latency_ms,
        "kept_positions": kept,
        "resumed_equal": resumed_equal,
        "pass": stopped && kept_chunk && cache_ok && resumed_equal,
    }))
}

fn run_to_end(engine: &Engine, turn: &mut Turn) -> Result<Vec<u32>, EngineError> {
    let mut tokens = Vec::new();
    loop {
        match turn.advance(engine.model(), engine.tokenizer())? {
            Advance::Prefill(_) => {}
            Advance::Tokens(events) => tokens.extend(events.iter().map(|e| e.token)),
            Advance::Done => return Ok(tokens),
        }
    }
}
