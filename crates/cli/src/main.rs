//! hearth-cli: the engine from a terminal. Scripts depend on these subcommands
//! and flags; keep them stable.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

mod device_check;
mod replay;
mod score;
mod serve;

use clap::{Args, Parser, Subcommand};
use hearth_engine::{paths, ChatMessage, Engine, EngineError, SamplingParams};
use serde_json::json;

#[derive(Parser)]
#[command(name = "hearth-cli", about = "Hearth's engine from the command line")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Answers one prompt through the chat template, streaming the text.
    Generate(GenerateArgs),
    /// Prints the token ids of a text as a JSON array.
    Tokenize {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long)]
        text: String,
        /// Parse special-token text such as <|im_start|> as the special token.
        #[arg(long)]
        special: bool,
    },
    /// An interactive multi-turn chat over one session.
    Chat {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        sampling: SamplingArgs,
        #[arg(long)]
        system: Option<String>,
    },
    /// Runs an exported reply record again from a cold cache and prints
    /// whether every token came again (exit status 1 when one did not).
    Replay {
        /// The record, as the app's "Export record" writes it.
        #[arg(long)]
        record: PathBuf,
        /// The model file; defaults to the path in the record.
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Serves the OpenAI-compatible API (`/v1/models`, `/v1/chat/completions`,
    /// `/v1/completions`) on 127.0.0.1 through the app's worker; prints the
    /// base URL once the model is ready.
    Serve {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Every request must bear this key (`Authorization: Bearer KEY`).
        #[arg(long, env = "HEARTH_API_KEY")]
        api_key: Option<String>,
    },
    /// Measures prefill and decode speed.
    Bench {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, default_value_t = 128)]
        prompt_tokens: usize,
        #[arg(long, default_value_t = 64)]
        gen_tokens: usize,
        /// Repeat and keep the best run.
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Also decode this many sequences at once from the one prompt (as
        /// "Generate N" does) and compare the wall time with one sequence.
        #[arg(long, default_value_t = 1)]
        batch: usize,
        /// Also run this many conversations' replies together (as the app's
        /// worker does when several conversations write at once: one decode
        /// pass for all) and compare each one's speed with one alone.
        #[arg(long, default_value_t = 1)]
        concurrent: usize,
        #[arg(long)]
        json: bool,
    },
    /// Measures constrained decoding: a reply under a JSON schema (default:
    /// any JSON object) against the same reply unconstrained, and the time
    /// the grammar's mask takes per token when computed alone (in a reply
    /// it runs beside the forward pass).
    BenchGrammar {
        #[command(flatten)]
        model: ModelArgs,
        /// A JSON schema file (default: any JSON object).
        #[arg(long)]
        schema: Option<PathBuf>,
        #[arg(long, default_value_t = 128)]
        gen_tokens: usize,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
    },
    /// Measures a conversation cache: time to first token of the next turn
    /// cold (full prefill), warm (cache in memory) and restored (a fresh
    /// process reading the saved cache), bytes on disk, and save time.
    BenchCache {
        #[command(flatten)]
        model: ModelArgs,
        /// Tokens of chat history before the next turn.
        #[arg(long, default_value_t = 2000)]
        history_tokens: usize,
        #[arg(long)]
        json: bool,
    },
    /// Writes a llama-family GGUF with random weights and the tokenizer of
    /// another model (default: the default model), for measuring speed at
    /// other sizes. The defaults make about 1.1B parameters. With
    /// `--experts`, a qwen3moe file whose FFNs are experts; with `--gpt-oss`
    /// too, a gpt-oss file (`--experts-dtype mxfp4` as gpt-oss ships). With
    /// `--gemma4`, a Gemma 4 file (with `--experts`, experts beside its MLP).
    WriteRandomModel {
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        tokenizer_from: Option<PathBuf>,
        #[arg(long, default_value_t = 22)]
        layers: usize,
        #[arg(long, default_value_t = 2048)]
        embd: usize,
        #[arg(long, default_value_t = 5632)]
        ffn: usize,
        #[arg(long, default_value_t = 32)]
        heads: usize,
        #[arg(long, default_value_t = 4)]
        kv_heads: usize,
        /// q4_0, q4_1, q8_0, q4_k or q6_k.
        #[arg(long, default_value = "q4_k")]
        dtype: String,
        /// Head size, where it is not embd / heads (Qwen3: 128).
        #[arg(long)]
        head_dim: Option<usize>,
        /// Experts per layer: makes a qwen3moe file.
        #[arg(long)]
        experts: Option<usize>,
        #[arg(long, default_value_t = 8)]
        experts_used: usize,
        /// Each expert's hidden width.
        #[arg(long, default_value_t = 768)]
        expert_ffn: usize,
        /// The experts' type (default: --dtype).
        #[arg(long)]
        experts_dtype: Option<String>,
        /// A Qwen 3.5 hybrid (qwen35, or qwen35moe with --experts): Gated
        /// DeltaNet layers, every --full-attention-interval-th full attention.
        #[arg(long)]
        hybrid: bool,
        #[arg(long, default_value_t = 4)]
        full_attention_interval: usize,
        /// The recurrent layers' head size.
        #[arg(long, default_value_t = 128)]
        ssm_state: usize,
        #[arg(long, default_value_t = 16)]
        ssm_k_heads: usize,
        #[arg(long, default_value_t = 32)]
        ssm_v_heads: usize,
        /// Rotated dimensions of each attention head (Qwen 3.5: 64 of 256).
        #[arg(long, default_value_t = 64)]
        rope_dims: usize,
        /// The shared expert's width (default: --expert-ffn).
        #[arg(long)]
        shared_ffn: Option<usize>,
        /// A gpt-oss file (needs --experts): attention biases and sinks, a
        /// 128-position window on even layers, YaRN, biased experts.
        #[arg(long)]
        gpt_oss: bool,
        /// A Gemma 4 file (gemma4; with --experts, experts beside the dense
        /// MLP): --heads, --kv-heads and --head-dim are its full layers';
        /// four sliding layers to each full one.
        #[arg(long)]
        gemma4: bool,
        /// Gemma 4: values per layer of the per-layer embeddings (E2B: 256; 0: none).
        #[arg(long, default_value_t = 0)]
        per_layer_embd: usize,
        /// Gemma 4: the last layers that read earlier layers' keys and values.
        #[arg(long, default_value_t = 0)]
        shared_kv_layers: usize,
        /// Gemma 4: the sliding layers' head size and KV heads, and their window.
        #[arg(long, default_value_t = 256)]
        head_dim_swa: usize,
        #[arg(long, default_value_t = 1)]
        kv_heads_swa: usize,
        #[arg(long, default_value_t = 512)]
        window: usize,
        /// One of the other families, in its own layout at these sizes:
        /// smollm3, mistral3, phi3, olmo2, granite, granitemoe, gemma2,
        /// qwen3vl, glm4moe, deepseek2 (GLM-4.7-Flash's latent attention),
        /// lfm2 (the MoE ones with --experts).
        #[arg(long)]
        family: Option<String>,
    },
    /// Writes the log-softmax at every position of a token sequence (a JSON
    /// array of ids) as an f32 .npy array of shape [positions, vocab].
    Score {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long)]
        ids_file: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// Perplexity over a text file, as llama.cpp's `perplexity` computes it;
    /// with --kl-base, KL divergence and top-1 agreement against a base.
    Perplexity {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long)]
        file: PathBuf,
        /// Tokens per chunk.
        #[arg(long, default_value_t = 512)]
        ctx: usize,
        /// Log-probabilities at the scored positions, [positions, vocab] f32 .npy.
        #[arg(long)]
        kl_base: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// The checks `bench/device.sh` runs on a GPU machine, one JSON line
    /// per figure: read bandwidth, greedy replies against the CPU's own
    /// pass, prefill and decode against the bandwidth bound, Generate 4
    /// against one, two conversations against one, and a long prefill
    /// stopped mid-way. `--device cpu --graph` runs them against the GPU's
    /// pass on the CPU (how the check itself is tested).
    DeviceCheck(device_check::Args),
    /// Writes a file of a model's tokenizer alone (no weights), from which
    /// `write-random-model --tokenizer-from` writes models elsewhere.
    WriteVocab {
        #[arg(long)]
        from: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// The restored half of bench-cache, run in a fresh process.
    #[command(hide = true)]
    BenchCacheRestored {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long)]
        cache: std::path::PathBuf,
        /// A JSON file with the next turn's prompt ids and the context length.
        #[arg(long)]
        prompt: std::path::PathBuf,
    },
}

#[derive(Args, Clone)]
pub(crate) struct ModelArgs {
    /// A GGUF file; defaults to the default model fetched by scripts/fetch-model.sh.
    #[arg(long)]
    pub(crate) model: Option<PathBuf>,
    /// Worker threads for the CPU kernels (default: logical CPUs).
    #[arg(long)]
    threads: Option<usize>,
    /// auto (a GPU when this build and the machine have one), cpu, cuda, cuda:N or metal.
    #[arg(long, default_value = "auto")]
    pub(crate) device: String,
}

#[derive(Args)]
struct SamplingArgs {
    #[arg(long)]
    temperature: Option<f32>,
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long)]
    top_p: Option<f32>,
    #[arg(long)]
    min_p: Option<f32>,
    #[arg(long)]
    repeat_penalty: Option<f32>,
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long, default_value_t = 512)]
    max_tokens: usize,
    /// Stop when the text contains this string (repeatable).
    #[arg(long = "stop")]
    stop: Vec<String>,
}

#[derive(Args)]
struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[arg(long)]
    prompt: String,
    #[arg(long)]
    system: Option<String>,
    /// Print one JSON object at the end instead of streaming text.
    #[arg(long)]
    json: bool,
}

mod bench_cache;

fn main() {
    let cli = Cli::parse();
    // `HEARTH_ISA` caps the kernels' ISA, to compare the paths on one machine.
    if let Some(cap) = std::env::var("HEARTH_ISA").ok().and_then(|s| hearth_engine::cpu::isa::Isa::parse(&s)) {
        hearth_engine::cpu::isa::cap_isa(cap);
    }
    if let Err(e) = run(cli) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<(), EngineError> {
    match cli.command {
        Command::Generate(args) => generate(args),
        Command::Tokenize { model, text, special } => {
            let engine = open(&model)?;
            let ids = engine.tokenizer().encode(&text, false, special)?;
            println!("{}", serde_json::to_string(&ids).expect("ids serialise"));
            Ok(())
        }
        Command::Chat { model, sampling, system } => chat(&model, &sampling, system),
        Command::Replay { record, model } => replay::run(&model, &record),
        Command::Serve { model, port, api_key } => serve::run(&model, port, api_key).map_err(|e| {
            eprintln!("error: {e}");
            std::process::exit(1)
        }),
        Command::Bench { model, prompt_tokens, gen_tokens, repeats, batch, concurrent, json } => {
            bench(&model, prompt_tokens, gen_tokens, repeats, batch, concurrent, json)
        }
        Command::BenchCache { model, history_tokens, json } => bench_cache::run(&model, history_tokens, json),
        Command::WriteVocab { from, out } => hearth_engine::random_model::write_vocab(&out, &from),
        Command::DeviceCheck(args) => device_check::run(&args),
        Command::BenchGrammar { model, schema, gen_tokens, repeats } => {
            bench_grammar(&model, schema.as_deref(), gen_tokens, repeats)
        }
        Command::Score { model, ids_file, out } => score::score(&open(&model)?, &ids_file, &out),
        Command::Perplexity { model, file, ctx, kl_base, json } => {
            score::perplexity(&open(&model)?, &file, ctx, kl_base.as_deref(), json)
        }
        Command::BenchCacheRestored { model, cache, prompt } => bench_cache::restored(&model, &cache, &prompt),
        Command::WriteRandomModel {
            out,
            tokenizer_from,
            layers,
            embd,
            ffn,
            heads,
            kv_heads,
            dtype,
            head_dim,
            experts,
            experts_used,
            expert_ffn,
            experts_dtype,
            hybrid,
            full_attention_interval,
            ssm_state,
            ssm_k_heads,
            ssm_v_heads,
            rope_dims,
            shared_ffn,
            gpt_oss,
            gemma4,
            per_layer_embd,
            shared_kv_layers,
            head_dim_swa,
            kv_heads_swa,
            window,
            family,
        } => {
            use hearth_engine::random_model;
            let experts = experts.map(|count| random_model::Experts {
                count,
                used: experts_used,
                ffn: expert_ffn,
                dtype: experts_dtype.unwrap_or_else(|| dtype.clone()),
            });
            let recurrent = hybrid.then(|| random_model::Recurrent {
                state: ssm_state,
                k_heads: ssm_k_heads,
                v_heads: ssm_v_heads,
                interval: full_attention_interval,
                rope_dims,
                shared_ffn: shared_ffn.unwrap_or(expert_ffn),
            });
            let gemma4 = gemma4.then_some(random_model::Gemma4 {
                per_layer: per_layer_embd,
                shared_kv_layers,
                head_dim_swa,
                kv_heads_swa,
                window,
            });
            let shape = random_model::Shape {
                layers,
                embd,
                ffn,
                heads,
                kv_heads,
                head_dim,
                experts,
                recurrent,
                gpt_oss,
                gemma4,
            };
            let tokenizer_from = tokenizer_from.unwrap_or_else(|| paths::default_model_path(|k| std::env::var_os(k)));
            match family {
                Some(family) => random_model::write_family(&out, &tokenizer_from, &family, &shape, &dtype),
                None => random_model::write(&out, &tokenizer_from, &shape, &dtype),
            }
        }
    }
}

pub(crate) fn open(args: &ModelArgs) -> Result<Engine, EngineError> {
    set_threads(args)?;
    let path = args.model.clone().unwrap_or_else(|| paths::default_model_path(|k| std::env::var_os(k)));
    let device = args.device.parse::<hearth_engine::DeviceChoice>()?.open()?;
    Engine::open_on(&path, &device)
}

/// `--threads`, for the engine's pool and for candle.
pub(crate) fn set_threads(args: &ModelArgs) -> Result<(), EngineError> {
    if let Some(n) = args.threads {
        if n == 0 {
            return Err(EngineError::InvalidSetting { field: "threads", reason: "must be at least 1".into() });
        }
        hearth_engine::worker_pool::set_threads(n);
        // candle reads this once, on first use, for the formats Hearth has no kernel for.
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
    }
    Ok(())
}

fn sampling_params(a: &SamplingArgs) -> SamplingParams {
    let mut p = SamplingParams::default();
    if let Some(t) = a.temperature {
        p.temperature = t;
    }
    if let Some(k) = a.top_k {
        p.top_k = Some(k);
    }
    if let Some(v) = a.top_p {
        p.top_p = v;
    }
    if let Some(v) = a.min_p {
        p.min_p = v;
    }
    if let Some(v) = a.repeat_penalty {
        p.repeat_penalty = v;
    }
    p.seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    p
}

fn generate(args: GenerateArgs) -> Result<(), EngineError> {
    let engine = open(&args.model)?;
    let mut messages = Vec::new();
    if let Some(s) = args.system {
        messages.push(ChatMessage::system(s));
    }
    messages.push(ChatMessage::user(args.prompt));
    let prompt = engine.encode_chat(&messages)?;
    let mut config = engine.generation_config(sampling_params(&args.sampling), args.sampling.max_tokens);
    config.stop_strings = args.sampling.stop.clone();
    let mut session = engine.new_session(None);
    let mut turn = session.start_turn(engine.model(), engine.tokenizer(), &prompt, config, 1)?;
    let mut stdout = std::io::stdout().lock();
    while let Some(events) = turn.step()? {
        if !args.json {
            for e in events {
                let _ = stdout.write_all(e.text.as_bytes());
            }
            let _ = stdout.flush();
        }
    }
    let out = turn.finish(0)?;
    let seq = &out.sequences[0];
    let s = &out.stats;
    if args.json {
        let prefill_ms = s.time_to_first_token.as_secs_f64() * 1e3;
        let decode_ms = s.decode_time.as_secs_f64() * 1e3;
        let decoded = seq.tokens.len().saturating_sub(1);
        let v = json!({
            "prompt_tokens": s.prompt_tokens,
            "prompt_token_ids": prompt,
            "generated_token_ids": seq.tokens,
            "text": seq.text,
            "finish_reason": seq.finish.as_str(),
            "prefill_ms": prefill_ms,
            "decode_ms": decode_ms,
            "prefill_tokens_per_s": per_second(s.processed_tokens, prefill_ms),
            "decode_tokens_per_s": per_second(decoded, decode_ms),
        });
        println!("{v}");
    } else {
        println!();
        eprintln!("[finish: {}]", seq.finish.as_str());
    }
    Ok(())
}

fn per_second(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 / (ms / 1e3)
    } else {
        0.0
    }
}

fn chat(model: &ModelArgs, sampling: &SamplingArgs, system: Option<String>) -> Result<(), EngineError> {
    let engine = open(model)?;
    let mut messages: Vec<ChatMessage> = system.into_iter().map(ChatMessage::system).collect();
    let mut session = engine.new_session(None);
    let stdin = std::io::stdin();
    eprint!("> ");
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            eprint!("> ");
            continue;
        }
        messages.push(ChatMessage::user(line));
        let prompt = engine.encode_chat(&messages)?;
        let mut config = engine.generation_config(sampling_params(sampling), sampling.max_tokens);
        config.stop_strings = sampling.stop.clone();
        let mut turn = session.start_turn(engine.model(), engine.tokenizer(), &prompt, config, 1)?;
        let mut stdout = std::io::stdout().lock();
        while let Some(events) = turn.step()? {
            for e in events {
                let _ = stdout.write_all(e.text.as_bytes());
            }
            let _ = stdout.flush();
        }
        let out = turn.finish(0)?;
        let s = &out.stats;
        println!();
        eprintln!(
            "[prompt {} tokens, processed {} this turn, ttft {:.0} ms, {:.1} tok/s, {}]",
            s.prompt_tokens,
            s.processed_tokens,
            s.time_to_first_token.as_secs_f64() * 1e3,
            per_second(s.generated_tokens.saturating_sub(1), s.decode_time.as_secs_f64() * 1e3),
            out.sequences[0].finish.as_str()
        );
        messages.push(ChatMessage::assistant(out.sequences[0].text.clone()));
        eprint!("> ");
    }
    Ok(())
}

fn bench_grammar(
    model: &ModelArgs,
    schema: Option<&std::path::Path>,
    gen_tokens: usize,
    repeats: usize,
) -> Result<(), EngineError> {
    use hearth_engine::{ChatMessage, GrammarSpec, SamplingParams};
    let engine = open(model)?;
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
    let prompt = engine.encode_chat(&[ChatMessage::user("Describe a city as a JSON object.")])?;
    let sampling = SamplingParams { temperature: 0.0, ..Default::default() };
    let run = |constrained: bool| -> Result<(usize, f64), EngineError> {
        let mut config = engine.generation_config(sampling.clone(), gen_tokens);
        if constrained {
            config.grammar = Some(grammar.clone());
        }
        let mut session = engine.new_session(Some(prompt.len() + gen_tokens + 8));
        let mut turn = session.start_turn(engine.model(), engine.tokenizer(), &prompt, config, 1)?;
        let t = Instant::now();
        let mut steps = 0;
        while turn.step()?.is_some() {
            steps += 1;
        }
        Ok((steps, t.elapsed().as_secs_f64()))
    };
    let (mut free, mut bound) = ((0, f64::MAX), (0, f64::MAX));
    for _ in 0..repeats.max(1) {
        let f = run(false)?;
        let b = run(true)?;
        free = (f.0, free.1.min(f.1 / f.0.max(1) as f64));
        bound = (b.0, bound.1.min(b.1 / b.0.max(1) as f64));
    }
    // The mask alone: the constrained reply's tokens fed back one by one.
    let mut config = engine.generation_config(sampling, gen_tokens);
    config.grammar = Some(grammar.clone());
    let mut session = engine.new_session(Some(prompt.len() + gen_tokens + 8));
    let out = session.start_turn(engine.model(), engine.tokenizer(), &prompt, config, 1)?.run()?;
    let tokens = &out.sequences[0].tokens;
    let mut constraint = grammar.start();
    let t = Instant::now();
    for &tok in tokens {
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
            "text": out.sequences[0].text,
        })
    );
    Ok(())
}

fn bench(
    model: &ModelArgs,
    prompt_tokens: usize,
    gen_tokens: usize,
    repeats: usize,
    batch: usize,
    concurrent: usize,
    json_out: bool,
) -> Result<(), EngineError> {
    let engine = open(model)?;
    let figures = bench_figures(&engine, prompt_tokens, gen_tokens, repeats, batch, concurrent)?;
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

/// `bench`'s figures for `engine`, as the JSON object `--json` prints.
pub(crate) fn bench_figures(
    engine: &Engine,
    prompt_tokens: usize,
    gen_tokens: usize,
    repeats: usize,
    batch: usize,
    concurrent: usize,
) -> Result<serde_json::Value, EngineError> {
    let m = engine.model();
    // A fixed, ordinary English text, repeated to the requested length.
    let seed_text = "The quick brown fox jumps over the lazy dog while the river runs past the old mill and the farmers gather the harvest before the rain. ";
    let ids = engine.tokenizer().encode(&seed_text.repeat(prompt_tokens / 20 + 2), false, false)?;
    let prompt: Vec<u32> = ids[..prompt_tokens.max(1)].to_vec();
    let mut best_prefill = f64::MAX;
    let mut best_decode = f64::MAX;
    for _ in 0..repeats.max(1) {
        let mut cache = m.new_cache(prompt.len() + gen_tokens + 1);
        let t = Instant::now();
        let mut logits = None;
        for chunk in prompt.chunks(hearth_engine::model::PREFILL_CHUNK) {
            logits = Some(m.forward(&[chunk.to_vec()], &mut cache)?);
        }
        let mut next = hearth_engine::sampling::argmax(&logits.expect("non-empty prompt").to_vec2::<f32>()?[0]);
        best_prefill = best_prefill.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..gen_tokens {
            let l = m.forward(&[vec![next]], &mut cache)?;
            next = hearth_engine::sampling::argmax(&l.to_vec2::<f32>()?[0]);
        }
        best_decode = best_decode.min(t.elapsed().as_secs_f64());
    }
    let prefill_tps = prompt.len() as f64 / best_prefill;
    let decode_tps = gen_tokens as f64 / best_decode;
    let threads = hearth_engine::worker_pool::WorkerPool::global().threads();
    let batched = if batch > 1 {
        let one = batch_decode_seconds(engine, &prompt, gen_tokens, 1, repeats)?;
        let many = batch_decode_seconds(engine, &prompt, gen_tokens, batch, repeats)?;
        Some(
            json!({"batch": batch, "one_sequence_s": one, "batch_s": many, "wall_ratio": many / one, "batch_tokens_per_s": (batch * gen_tokens) as f64 / many}),
        )
    } else {
        None
    };
    let concurrently = if concurrent > 1 {
        let alone = concurrent_decode_rates(engine, &prompt, gen_tokens, 1)?[0];
        let each = concurrent_decode_rates(engine, &prompt, gen_tokens, concurrent)?;
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

/// The best decode time of `gen_tokens` steps for `batch` sequences sampled
/// (temperature 0.8, no end token) from one prefilled prompt.
fn batch_decode_seconds(
    engine: &Engine,
    prompt: &[u32],
    gen_tokens: usize,
    batch: usize,
    repeats: usize,
) -> Result<f64, EngineError> {
    let mut best = f64::MAX;
    for _ in 0..repeats.max(1) {
        let mut session = engine.new_session(Some(prompt.len() + gen_tokens + 8));
        let mut config = engine
            .generation_config(SamplingParams { temperature: 0.8, seed: 7, ..SamplingParams::default() }, gen_tokens);
        config.end_tokens.clear();
        let mut turn = session.start_turn(engine.model(), engine.tokenizer(), prompt, config, batch)?;
        let t = Instant::now();
        while turn.step()?.is_some() {}
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// Each of `n` conversations' decode speed (tokens after its first, per
/// second from its first to its last) when their replies run as the app's
/// worker runs them: their decode steps as one pass, prefill in 128-token
/// chunks between them while others are running.
fn concurrent_decode_rates(
    engine: &Engine,
    prompt: &[u32],
    gen_tokens: usize,
    n: usize,
) -> Result<Vec<f64>, EngineError> {
    use hearth_engine::Advance;
    let (m, tok) = (engine.model(), engine.tokenizer());
    let mut turns = Vec::new();
    for i in 0..n {
        let mut config = engine.generation_config(
            SamplingParams { temperature: 0.8, seed: 7 + i as u64, ..SamplingParams::default() },
            gen_tokens,
        );
        config.end_tokens.clear();
        // Each conversation its own prompt, so no cache is shared.
        let mut own = prompt.to_vec();
        own.rotate_left(i % prompt.len().max(1));
        let turn = engine
            .new_session(Some(prompt.len() + gen_tokens + 8))
            .into_turn(m, tok, own, config)
            .map_err(|(_, e)| e)?;
        turns.push(turn);
    }
    let mut first: Vec<Option<Instant>> = vec![None; n];
    let mut last: Vec<Option<Instant>> = vec![None; n];
    let mut count = vec![0usize; n];
    let mut done = vec![false; n];
    while done.iter().any(|d| !d) {
        let running = done.iter().filter(|d| !**d).count();
        // Those ready to decode run one pass together, as the worker runs them.
        let mut ready = Vec::new();
        let mut inputs = Vec::new();
        let mut caches = Vec::new();
        for (i, t) in turns.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            if let Some((token, cache)) = t.decode_input(m, tok) {
                ready.push(i);
                inputs.push(token);
                caches.push(cache);
            }
        }
        let mut given: Vec<Option<Vec<f32>>> = vec![None; n];
        if ready.len() > 1 {
            for (&i, l) in ready.iter().zip(m.decode_step_many(&inputs, &mut caches)?) {
                given[i] = Some(l);
            }
        }
        drop(caches);
        for i in 0..n {
            if done[i] {
                continue;
            }
            turns[i].set_prefill_rows(if running > 1 { 128 } else { hearth_engine::model::PREFILL_CHUNK });
            let advanced = match given[i].take() {
                Some(logits) => turns[i].advance_given(m, tok, logits)?,
                None => turns[i].advance(m, tok)?,
            };
            match advanced {
                Advance::Tokens(events) => {
                    let now = Instant::now();
                    first[i].get_or_insert(now);
                    last[i] = Some(now);
                    count[i] += events.len();
                }
                Advance::Prefill(_) => {}
                Advance::Done => done[i] = true,
            }
        }
    }
    Ok((0..n)
        .map(|i| match (first[i], last[i]) {
            (Some(a), Some(b)) if count[i] > 1 => (count[i] - 1) as f64 / (b - a).as_secs_f64(),
            _ => 0.0,
        })
        .collect())
}

/// High-water mark of resident memory, where the OS reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
