//! hearth-cli: the engine from a terminal. Scripts depend on these subcommands
//! and flags; keep them stable.

use std::io::{BufRead, Write};
use std::path::PathBuf;

mod bench;
mod bench_speculative;
mod device_check;
mod local;
mod replay;
mod score;
mod serve;

use clap::{Args, Parser, Subcommand};
use hearth_engine::{paths, ChatMessage, Engine, EngineError};
use hearth_store::ConversationSettings;
use serde_json::json;

use local::{Ask, LocalWorker};

/// What a command fails with: the engine's error, the worker's, or one of
/// the CLI's own, each shown as its message.
pub(crate) type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

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
    /// `/v1/completions`, `/v1/responses`) and Anthropic's Messages API
    /// (`/v1/messages`) on 127.0.0.1 through the app's worker; prints the
    /// base URL once the model is ready.
    Serve {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Every request must bear this key (`Authorization: Bearer KEY`
        /// or `x-api-key: KEY`). On the command line it shows in `ps`:
        /// prefer `HEARTH_API_KEY` or `--api-key-file`.
        #[arg(long, env = "HEARTH_API_KEY")]
        api_key: Option<String>,
        /// Reads the key from this file's first line (`-`: standard input),
        /// over `--api-key` and `HEARTH_API_KEY`.
        #[arg(long)]
        api_key_file: Option<std::path::PathBuf>,
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
        /// Also decode greedily with drafts (`auto`, `ngram`, `draft` with
        /// `--draft-model`, or `mtp` with the model's own MTP head) and
        /// without, and compare (the two replies
        /// must be the same tokens).
        #[arg(long, value_parser = ["off", "auto", "ngram", "draft", "mtp"])]
        speculative: Option<String>,
        /// At most this many drafted tokens per pass (1 to 32).
        #[arg(long, default_value_t = 8)]
        draft_tokens: u32,
        /// The draft model `--speculative draft` drafts with.
        #[arg(long)]
        draft_model: Option<PathBuf>,
        /// `--speculative` replies to this file's text as a chat message
        /// (through the model's template), not to the fixed token ids.
        #[arg(long)]
        prompt_file: Option<PathBuf>,
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
    /// Measures a conversation cache on the app's worker: time to first
    /// token of the next turn cold (full prefill), warm (cache in memory),
    /// edited, and restored (a fresh worker reading the saved cache), bytes
    /// on disk, and save time.
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
        /// With --hybrid: a multi-token-prediction block after the layers,
        /// as Qwen 3.5's converter writes by default.
        #[arg(long)]
        mtp: bool,
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
    /// Fetches a model from the Hugging Face Hub (`HF_ENDPOINT`, `HF_TOKEN`)
    /// into its cache (`HF_HUB_CACHE`), every part, each checked against the
    /// Hub's SHA-256, and prints the path that opens it. QUANT defaults to
    /// Q4_K_M, else the smallest.
    Pull {
        /// ORG/NAME[:QUANT]
        spec: String,
        /// No progress bar; print `{"path": ...}`.
        #[arg(long)]
        json: bool,
    },
    /// Writes a file of a model's tokenizer alone (no weights), from which
    /// `write-random-model --tokenizer-from` writes models elsewhere.
    WriteVocab {
        #[arg(long)]
        from: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Args, Clone)]
pub(crate) struct ModelArgs {
    /// A GGUF file (the first part of a split one), or `hf:ORG/NAME[:QUANT]`
    /// from the Hugging Face cache, fetched from the Hub if it is not there;
    /// defaults to the default model fetched by scripts/fetch-model.sh.
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
    seed: Option<u32>,
    #[arg(long, default_value_t = 512)]
    max_tokens: usize,
    /// Stop when the text contains this string (repeatable).
    #[arg(long = "stop")]
    stop: Vec<String>,
    /// Speculative decoding: drafts checked several per step (auto: from
    /// the conversation, while they are taken; ngram: from it always;
    /// draft: by `--draft-model`; mtp: by the model's own MTP head, which
    /// Qwen 3.5/3.6 and GLM files carry; off). The reply is the same either way.
    #[arg(long, default_value = "auto", value_parser = ["off", "auto", "ngram", "draft", "mtp"])]
    speculation: String,
    /// At most this many drafted tokens per step.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=32))]
    draft_tokens: u32,
    /// A smaller model with the same vocabulary that drafts the tokens
    /// (`--speculation draft`, which naming one implies).
    #[arg(long)]
    draft_model: Option<PathBuf>,
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
mod pull;

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

fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Generate(args) => generate(args)?,
        Command::Tokenize { model, text, special } => {
            let engine = open(&model)?;
            let ids = engine.tokenizer().encode(&text, false, special)?;
            println!("{}", serde_json::to_string(&ids).expect("ids serialise"));
        }
        Command::Chat { model, sampling, system } => chat(&model, &sampling, system)?,
        Command::Replay { record, model } => replay::run(&model, &record)?,
        Command::Serve { model, port, api_key, api_key_file } => {
            let api_key = match api_key_file {
                Some(path) => Some(read_key(&path)?),
                None => api_key,
            };
            serve::run(&model, port, api_key)?
        }
        Command::Bench {
            model,
            prompt_tokens,
            gen_tokens,
            repeats,
            batch,
            concurrent,
            speculative,
            draft_tokens,
            draft_model,
            prompt_file,
            json,
        } => {
            let prompt_text = match &prompt_file {
                Some(p) => Some(std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?),
                None => None,
            };
            let mode = match speculative.as_deref() {
                None | Some("off") => None,
                Some("ngram") => Some(hearth_store::SpeculationMode::Ngram),
                Some("draft") if draft_model.is_none() => return Err("--speculative draft needs --draft-model".into()),
                Some("draft") => Some(hearth_store::SpeculationMode::Draft),
                Some("mtp") => Some(hearth_store::SpeculationMode::Mtp),
                Some(_) => Some(hearth_store::SpeculationMode::Auto),
            };
            if !(1..=hearth_store::MAX_DRAFT_TOKENS).contains(&draft_tokens) {
                return Err("--draft-tokens: between 1 and 32".into());
            }
            let draft_model = draft_model
                .map(|p| std::path::absolute(&p).map(|p| p.display().to_string()))
                .transpose()
                .map_err(|e| format!("--draft-model: {e}"))?;
            let speculative = mode.map(|mode| bench_speculative::SpeculativeRun {
                mode,
                draft_tokens,
                draft_model: draft_model.as_deref(),
                prompt_text: prompt_text.as_deref(),
            });
            bench::bench(&model, prompt_tokens, gen_tokens, repeats, batch, concurrent, speculative.as_ref(), json)?
        }
        Command::BenchCache { model, history_tokens, json } => bench_cache::run(&model, history_tokens, json)?,
        Command::Pull { spec, json } => {
            let path = pull::pull(&spec, json)?;
            if json {
                println!("{}", serde_json::json!({ "path": path }));
            } else {
                println!("{}", path.display());
            }
        }
        Command::WriteVocab { from, out } => hearth_engine::random_model::write_vocab(&out, &from)?,
        Command::DeviceCheck(args) => device_check::run(&args)?,
        Command::BenchGrammar { model, schema, gen_tokens, repeats } => {
            bench::bench_grammar(&model, schema.as_deref(), gen_tokens, repeats)?
        }
        Command::Score { model, ids_file, out } => score::score(&open(&model)?, &ids_file, &out)?,
        Command::Perplexity { model, file, ctx, kl_base, json } => {
            score::perplexity(&open(&model)?, &file, ctx, kl_base.as_deref(), json)?
        }
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
            mtp,
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
                mtp,
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
                Some(family) => random_model::write_family(&out, &tokenizer_from, &family, &shape, &dtype)?,
                None => random_model::write(&out, &tokenizer_from, &shape, &dtype)?,
            }
        }
    }
    Ok(())
}

pub(crate) fn open(args: &ModelArgs) -> CliResult<Engine> {
    set_threads(args)?;
    let path = local::model_path(args)?;
    let device = args.device.parse::<hearth_engine::DeviceChoice>()?.open()?;
    Ok(Engine::open_on(&path, &device)?)
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

/// The app's settings for a reply as the flags set them, the app's
/// defaults elsewhere: the sampler's mapping from them is the worker's, as
/// for the app's replies and the API's.
fn settings(a: &SamplingArgs) -> CliResult<ConversationSettings> {
    if a.speculation == "draft" && a.draft_model.is_none() {
        return Err("--speculation draft needs --draft-model".into());
    }
    let d = ConversationSettings::default();
    Ok(ConversationSettings {
        temperature: a.temperature.unwrap_or(d.temperature),
        top_k: a.top_k.map_or(d.top_k, |k| k.min(u32::MAX as usize) as u32),
        top_p: a.top_p.unwrap_or(d.top_p),
        min_p: a.min_p.unwrap_or(d.min_p),
        repeat_penalty: a.repeat_penalty.unwrap_or(d.repeat_penalty),
        seed: a.seed,
        max_new_tokens: a.max_tokens.min(u32::MAX as usize) as u32,
        stop_strings: a.stop.clone(),
        // Naming a draft model drafts with it unless another mode is asked for.
        speculation: match a.speculation.as_str() {
            "off" => hearth_store::SpeculationMode::Off,
            "ngram" => hearth_store::SpeculationMode::Ngram,
            "draft" => hearth_store::SpeculationMode::Draft,
            "mtp" => hearth_store::SpeculationMode::Mtp,
            _ if a.draft_model.is_some() => hearth_store::SpeculationMode::Draft,
            _ => hearth_store::SpeculationMode::Auto,
        },
        draft_tokens: a.draft_tokens,
        draft_model: a
            .draft_model
            .as_ref()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()).display().to_string()),
        ..d
    })
}

fn generate(args: GenerateArgs) -> CliResult {
    let local = LocalWorker::open(&args.model, hearth_engine::Kernels::Hearth)?;
    let mut messages = Vec::new();
    if let Some(s) = args.system {
        messages.push(ChatMessage::system(s));
    }
    messages.push(ChatMessage::user(args.prompt));
    let ask = Ask::chat(messages, settings(&args.sampling)?);
    // The prompt as the worker builds it, for the JSON.
    let prompt = local.prompt_ids(ask.clone())?;
    let mut stdout = std::io::stdout().lock();
    let reply = local.reply(ask, |_, text| {
        if !args.json {
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
        }
    })?;
    let s = &reply.stats[0];
    if args.json {
        let decoded = s.generated_tokens.saturating_sub(1) as f64;
        let decode_ms = if s.tokens_per_s > 0.0 { decoded / s.tokens_per_s * 1e3 } else { 0.0 };
        let v = json!({
            "prompt_tokens": s.prompt_tokens,
            "prompt_token_ids": prompt,
            "generated_token_ids": reply.tokens(0),
            "text": reply.texts[0],
            "finish_reason": reply.reason,
            "prefill_ms": s.ttft_ms,
            "decode_ms": decode_ms,
            "prefill_tokens_per_s": per_second(s.processed_tokens as usize, s.ttft_ms),
            "decode_tokens_per_s": s.tokens_per_s,
        });
        println!("{v}");
    } else {
        println!();
        eprintln!("[finish: {}]", reply.reason);
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

/// Each turn an API request with the whole conversation, as a chat client
/// sends it: the worker's request cache gives the last turn's back, so a
/// turn reads only its new tokens.
fn chat(model: &ModelArgs, sampling: &SamplingArgs, system: Option<String>) -> CliResult {
    let settings = settings(sampling)?;
    let local = LocalWorker::open(model, hearth_engine::Kernels::Hearth)?;
    let mut messages: Vec<ChatMessage> = system.into_iter().map(ChatMessage::system).collect();
    let stdin = std::io::stdin();
    eprint!("> ");
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            eprint!("> ");
            continue;
        }
        messages.push(ChatMessage::user(line));
        let mut stdout = std::io::stdout().lock();
        let reply = local.reply(Ask::chat(messages.clone(), settings.clone()), |_, text| {
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
        })?;
        let s = &reply.stats[0];
        println!();
        eprintln!(
            "[prompt {} tokens, processed {} this turn, ttft {:.0} ms, {:.1} tok/s, {}]",
            s.prompt_tokens, s.processed_tokens, s.ttft_ms, s.tokens_per_s, reply.reason
        );
        messages.push(ChatMessage::assistant(reply.texts[0].clone()));
        eprint!("> ");
    }
    Ok(())
}

/// An API key from the first line of `path` (`-`: standard input).
fn read_key(path: &std::path::Path) -> CliResult<String> {
    let text = if path.as_os_str() == "-" {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read the key file {}: {e}", path.display()))?
    };
    let key = text.lines().next().unwrap_or_default().trim().to_string();
    if key.is_empty() {
        return Err(format!("the key file {} is empty", path.display()).into());
    }
    Ok(key)
}
