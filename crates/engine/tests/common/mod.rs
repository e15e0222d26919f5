//! Shared test fixtures: the real default model, and tiny random-weight GGUF
//! files written at test time for every supported family.
#![allow(dead_code, reason = "each test binary uses its own part of the shared helpers")]

pub mod gemma4_vocab;
pub mod o200k;
pub mod retype;
mod spec;
mod writer;

pub use spec::*;
pub use writer::*;

use std::path::PathBuf;

use candle_core::quantized::gguf_file::Value;
use hearth_engine::Engine;

/// candle's CPU kernels (the structure tests' reference, and the graph
/// pass on the CPU) run in a pool whose threads are pinned to cores and
/// spin at a barrier: on a 2-core machine running tests side by side, a
/// 64-wide matmul then takes a millisecond of spinning instead of
/// microseconds. One thread, unless the environment says otherwise.
#[ctor::ctor(unsafe)]
fn candle_on_one_thread() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // SAFETY: before main, no other thread reads the environment.
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
}

/// The real SmolLM2 file. Fails loudly rather than skipping: these tests are
/// the proof that the real loading path works.
pub fn default_model() -> PathBuf {
    let p = hearth_engine::paths::default_model_path(|k| std::env::var_os(k));
    assert!(p.is_file(), "default model missing at {}; run scripts/fetch-model.sh first", p.display());
    p
}

/// The real Gemma 3 270M Q4_K_M file, fetched by scripts/fetch-gemma.sh.
pub fn gemma3_model() -> PathBuf {
    let p =
        hearth_engine::paths::default_model_path(|k| std::env::var_os(k)).with_file_name("gemma-3-270m-q4_k_m.gguf");
    assert!(p.is_file(), "the Gemma 3 file is missing at {}; run scripts/fetch-gemma.sh first", p.display());
    p
}

/// Every test binary here runs the kernels `HEARTH_ISA` caps them to, as the
/// CLI and the app do (`./hearth test` runs them under `avx2` and
/// `portable` too); set before any test starts.
#[ctor::ctor(unsafe)]
fn cap_isa_from_env() {
    if let Some(cap) = std::env::var("HEARTH_ISA").ok().and_then(|s| hearth_engine::cpu::isa::Isa::parse(&s)) {
        hearth_engine::cpu::isa::cap_isa(cap);
    }
}

/// The Python of llama-cpp-python's venv (`bench/setup-llamacpp.sh` makes
/// it; `HEARTH_LLAMACPP_PYTHON` names another). Without it a test says so
/// and passes, unless `HEARTH_REQUIRE_LLAMACPP` is set (`./hearth test`
/// sets it).
pub fn llamacpp_python() -> Option<PathBuf> {
    let python = std::env::var_os("HEARTH_LLAMACPP_PYTHON")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/hearth/llama-venv/bin/python")))?;
    if python.is_file() {
        return Some(python);
    }
    assert!(
        std::env::var_os("HEARTH_REQUIRE_LLAMACPP").is_none(),
        "llama.cpp's venv is missing at {}: run bench/setup-llamacpp.sh",
        python.display()
    );
    eprintln!("skipped: no llama.cpp venv at {} (bench/setup-llamacpp.sh makes it)", python.display());
    None
}

pub fn open_default() -> Engine {
    Engine::open(default_model()).expect("the default model opens")
}

/// DeepSeek V2's latent attention here: the latent's rank, the rotated
/// key's size, each head's unrotated query part, value and query rank.
pub const MLA_RANK: usize = 32;
pub const MLA_ROPE: usize = 32;
pub const MLA_NOPE: usize = 32;
pub const MLA_V: usize = 32;
pub const MLA_Q_RANK: usize = 32;
const MLA_KV_HEADS: usize = 1;

/// Tiny vocab: the control tokens, then the 256 GPT-2 byte characters (or
/// SentencePiece byte tokens for Gemma), then filler up to VOCAB.
pub const VOCAB: usize = 320;

/// `spec.chat_template` in place of the vocabulary's template, and
/// `spec.control_tokens` in place of its last tokens.
fn set_template(md: &mut [(String, Value)], spec: &TinySpec) {
    let n = spec.control_tokens.len();
    if n > 0 {
        for (k, v) in md.iter_mut() {
            match (k.as_str(), v) {
                ("tokenizer.ggml.tokens", Value::Array(tokens)) => {
                    let at = tokens.len() - n;
                    for (t, name) in tokens[at..].iter_mut().zip(&spec.control_tokens) {
                        *t = Value::String(name.to_string());
                    }
                }
                ("tokenizer.ggml.token_type", Value::Array(types)) => {
                    let at = types.len() - n;
                    types[at..].iter_mut().for_each(|t| *t = Value::I32(3));
                }
                _ => {}
            }
        }
    }
    if let Some(t) = &spec.chat_template {
        for (k, v) in md.iter_mut() {
            if k == "tokenizer.chat_template" {
                *v = Value::String(t.clone());
            }
        }
    }
}

fn strings(v: Vec<String>) -> Value {
    Value::Array(v.into_iter().map(Value::String).collect())
}

fn tokenizer_metadata(family: Family) -> Vec<(String, Value)> {
    let s = |k: &str, v: &str| (k.to_string(), Value::String(v.to_string()));
    let u = |k: &str, v: u32| (k.to_string(), Value::U32(v));
    if matches!(family, Family::Gemma2 | Family::Gemma3) {
        let mut tokens: Vec<String> =
            ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"].map(String::from).to_vec();
        let mut types = vec![3, 3, 3, 2, 3, 3];
        for b in 0..256 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        for w in ["▁", "▁the", "▁a", "he", "llo", "▁hello", "user", "model", "\n"] {
            tokens.push(w.to_string());
            types.push(1);
        }
        while tokens.len() < VOCAB {
            tokens.push(format!("▁w{}", tokens.len()));
            types.push(1);
        }
        let scores: Vec<Value> = (0..VOCAB).map(|i| Value::F32(-(i as f32))).collect();
        vec![
            s("tokenizer.ggml.model", "llama"),
            ("tokenizer.ggml.tokens".into(), strings(tokens)),
            ("tokenizer.ggml.token_type".into(), Value::Array(types.into_iter().map(Value::I32).collect())),
            ("tokenizer.ggml.scores".into(), Value::Array(scores)),
            u("tokenizer.ggml.bos_token_id", 2),
            u("tokenizer.ggml.eos_token_id", 1),
            u("tokenizer.ggml.unknown_token_id", 3),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
            ("tokenizer.ggml.add_space_prefix".into(), Value::Bool(false)),
            s("tokenizer.chat_template", "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"),
        ]
    } else {
        let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from).to_vec();
        let mut types = vec![3, 3, 3];
        for c in hearth_engine::tokenizer::byte_level_alphabet() {
            tokens.push(c.to_string());
            types.push(1);
        }
        let merges = vec!["Ġ t", "h e", "Ġt he", "l l", "he ll", "hell o"];
        for m in &merges {
            tokens.push(m.replace(' ', ""));
            types.push(1);
        }
        while tokens.len() < VOCAB {
            tokens.push(format!("<filler{}>", tokens.len()));
            types.push(4);
        }
        let pre = match family {
            Family::Llama | Family::SmolLm3 => "smollm",
            Family::Mistral3 => "tekken",
            Family::Phi3 => "gpt-4o",
            Family::Granite | Family::GraniteMoe => "refact",
            Family::Glm4Moe | Family::Deepseek2 => "glm4",
            Family::Lfm2 => "lfm2",
            Family::Qwen35 | Family::Qwen35Moe => "qwen35",
            Family::GptOss => "gpt-4o",
            _ => "qwen2",
        };
        vec![
            s("tokenizer.ggml.model", "gpt2"),
            s("tokenizer.ggml.pre", pre),
            ("tokenizer.ggml.tokens".into(), strings(tokens)),
            ("tokenizer.ggml.token_type".into(), Value::Array(types.into_iter().map(Value::I32).collect())),
            ("tokenizer.ggml.merges".into(), strings(merges.into_iter().map(String::from).collect())),
            u("tokenizer.ggml.bos_token_id", 1),
            u("tokenizer.ggml.eos_token_id", 2),
            u("tokenizer.ggml.unknown_token_id", 0),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
            s("tokenizer.chat_template", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
        ]
    }
}

/// Writes a tiny model into a fresh temp dir and returns both (keep the dir alive).
pub fn tiny(spec: &TinySpec) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("tiny-{:?}.gguf", spec.family).to_lowercase());
    write_tiny(&path, spec);
    (dir, path)
}

/// The largest difference as a fraction of `b`'s largest magnitude.
pub fn relative_diff(a: &[f32], b: &[f32]) -> f32 {
    max_abs_diff(a, b) / b.iter().fold(f32::MIN_POSITIVE, |m, v| m.max(v.abs()))
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The default model's greedy reply to "What is 2 + 2?" as llama.cpp's
/// build for this CPU gives it, which the kernels follow: the AVX-512 one
/// where they run AVX-512, else the AVX2 one (`golden.rs` holds the ids).
pub fn two_plus_two() -> &'static str {
    match hearth_engine::cpu::isa::isa() {
        hearth_engine::cpu::isa::Isa::Avx512Vnni => "The answer is 4.",
        _ => "The answer to this classic math problem is 4.",
    }
}

/// Advances `turn` to its end; the tokens it wrote (padding left out).
pub fn run_to_end(engine: &Engine, turn: &mut hearth_engine::Turn) -> Vec<u32> {
    let mut tokens = Vec::new();
    loop {
        match turn.advance(engine.model(), engine.tokenizer()).unwrap() {
            hearth_engine::Advance::Prefill(_) => {}
            hearth_engine::Advance::Tokens(events) => tokens.extend(events.iter().map(|e| e.token)),
            hearth_engine::Advance::Done => return tokens,
        }
    }
}

/// A small gpt-oss file with MXFP4 experts, written by Hearth's own GGUF
/// writer (`hearth-cli write-random-model --gpt-oss`) with the default
/// model's vocabulary.
pub fn written_gpt_oss() -> (tempfile::TempDir, PathBuf) {
    use hearth_engine::random_model::{write, Experts, Shape};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpt-oss.gguf");
    let shape = Shape {
        layers: 2,
        embd: 128,
        ffn: 128,
        heads: 4,
        kv_heads: 2,
        head_dim: Some(64),
        experts: Some(Experts { count: 8, used: 4, ffn: 64, dtype: "mxfp4".into() }),
        recurrent: None,
        gpt_oss: true,
        gemma4: None,
    };
    write(&path, &default_model(), &shape, "q8_0").unwrap();
    (dir, path)
}
