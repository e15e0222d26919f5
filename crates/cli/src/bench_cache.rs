//! `bench-cache`: what a saved conversation cache buys on the next turn.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use hearth_engine::{session_file, ChatMessage, Engine, EngineError, SamplingParams, Session};
use serde_json::json;

use crate::{open, ModelArgs};

const FILLER_USER: &str =
    "Tell me more about the history of the old mill by the river, and the farmers who brought their grain there.";
const FILLER_ASSISTANT: &str = "The mill was built of stone in the valley, where the river runs fast. Farmers came each autumn with carts of wheat and barley, and the miller ground it into flour while they traded news, sold eggs and argued about the weather and the price of bread.";
const NEXT: &str = "Summarise all of that in one sentence.";
const EDITED: &str = "Now tell me who owned the mill, in two sentences.";

/// A chat's token ids: the history, the next turn's full prompt, and that
/// prompt with its last message edited.
struct Conversation {
    history: Vec<u32>,
    prompt: Vec<u32>,
    edited: Vec<u32>,
}

/// A chat history of about `tokens` tokens, with its next turn.
fn conversation(engine: &Engine, tokens: usize) -> Result<Conversation, EngineError> {
    let mut messages = Vec::new();
    loop {
        messages.push(ChatMessage::user(FILLER_USER));
        messages.push(ChatMessage::assistant(FILLER_ASSISTANT));
        let history = engine.tokenizer().encode(&engine.template().render(&messages, false)?, true, true)?;
        if history.len() >= tokens {
            let mut edited = messages.clone();
            messages.push(ChatMessage::user(NEXT));
            edited.push(ChatMessage::user(EDITED));
            return Ok(Conversation {
                history,
                prompt: engine.encode_chat(&messages)?,
                edited: engine.encode_chat(&edited)?,
            });
        }
    }
}

fn greedy_config(engine: &Engine) -> hearth_engine::GenerationConfig {
    engine.generation_config(SamplingParams::greedy(), 1)
}

/// Milliseconds from asking for the next turn to its first token.
fn ttft(engine: &Engine, session: &mut Session, prompt: &[u32]) -> Result<(f64, usize), EngineError> {
    let t = Instant::now();
    let mut turn = session.start_turn(engine.model(), engine.tokenizer(), prompt, greedy_config(engine), 1)?;
    turn.step()?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let processed = turn.stats().processed_tokens;
    drop(turn);
    Ok((ms, processed))
}

pub fn run(model: &ModelArgs, history_tokens: usize, json_out: bool) -> Result<(), EngineError> {
    let engine = open(model)?;
    let Conversation { history, prompt, edited } = conversation(&engine, history_tokens)?;
    let context = engine.model().config().context_length.min(prompt.len() + 64).max(prompt.len() + 1);
    // A cache is written and read only under the model file's whole hash.
    engine.hash_file(&|| false)?;
    let identity = engine.cache_identity(context)?;

    let (cold_ms, cold_processed) = ttft(&engine, &mut engine.new_session(Some(context)), &prompt)?;

    // The history as the previous turn left it.
    let mut base = engine.new_session(Some(context));
    base.prefill(engine.model(), &history)?;
    let dir = std::env::temp_dir().join(format!("hearth-bench-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| EngineError::Io { path: dir.clone(), source })?;
    let file = dir.join("bench.session");
    let mut save_ms = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        session_file::write(&file, &identity, &base)?;
        save_ms = save_ms.min(t.elapsed().as_secs_f64() * 1e3);
    }
    let bytes = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);

    let mut warm_ms = f64::MAX;
    let mut warm_processed = 0;
    for _ in 0..3 {
        let mut s = base.clone();
        let (ms, p) = ttft(&engine, &mut s, &prompt)?;
        warm_ms = warm_ms.min(ms);
        warm_processed = p;
    }

    // The next turn's message edited after its first token: back to where
    // the two versions part (a hybrid: to its checkpoint at or before it).
    let mut edit_ms = f64::MAX;
    let mut edit_processed = 0;
    for _ in 0..3 {
        let mut s = base.clone();
        ttft(&engine, &mut s, &prompt)?;
        let (ms, p) = ttft(&engine, &mut s, &edited)?;
        edit_ms = edit_ms.min(ms);
        edit_processed = p;
    }

    // A fresh process: nothing in memory but the model it loads first.
    let prompt_file = dir.join("prompt.json");
    std::fs::write(&prompt_file, json!({"ids": prompt, "context": context}).to_string())
        .map_err(|source| EngineError::Io { path: prompt_file.clone(), source })?;
    let mut cmd =
        Command::new(std::env::current_exe().map_err(|source| EngineError::Io { path: "hearth-cli".into(), source })?);
    cmd.arg("bench-cache-restored")
        .arg("--cache")
        .arg(&file)
        .arg("--prompt")
        .arg(&prompt_file)
        .arg("--model")
        .arg(engine.path());
    if let Some(t) = model.threads {
        cmd.arg("--threads").arg(t.to_string());
    }
    let (mut restored_ms, mut restored_read_ms) = (f64::MAX, f64::MAX);
    let mut restored_processed = 0;
    for _ in 0..3 {
        let out = cmd.output().map_err(|source| EngineError::Io { path: "hearth-cli".into(), source })?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|_| {
            EngineError::CorruptCache(format!("restored run failed: {}", String::from_utf8_lossy(&out.stderr)))
        })?;
        restored_ms = restored_ms.min(v["ttft_ms"].as_f64().unwrap_or(f64::MAX));
        restored_read_ms = restored_read_ms.min(v["read_ms"].as_f64().unwrap_or(f64::MAX));
        restored_processed = v["processed_tokens"].as_u64().unwrap_or(0) as usize;
    }
    let _ = std::fs::remove_dir_all(&dir);

    let result = json!({
        "model": engine.path().display().to_string(),
        "threads": std::env::var("RAYON_NUM_THREADS").ok().and_then(|s| s.parse::<usize>().ok()).unwrap_or_else(rayon::current_num_threads),
        "history_tokens": history.len(),
        "prompt_tokens": prompt.len(),
        "cold_ttft_ms": cold_ms,
        "cold_processed_tokens": cold_processed,
        "warm_ttft_ms": warm_ms,
        "warm_processed_tokens": warm_processed,
        "edit_ttft_ms": edit_ms,
        "edit_processed_tokens": edit_processed,
        "edit_prompt_tokens": edited.len(),
        "checkpoints": base.cache().checkpoint_positions().len(),
        "state_bytes_per_checkpoint": base.cache().state_bytes(),
        "restored_ttft_ms": restored_ms,
        "restored_processed_tokens": restored_processed,
        "restored_read_ms": restored_read_ms,
        "save_ms": save_ms,
        "bytes_on_disk": bytes,
        "bytes_per_1k_tokens": bytes as f64 * 1000.0 / history.len() as f64,
        "warm_speedup": cold_ms / warm_ms,
        "restored_speedup": cold_ms / restored_ms,
        "restored_over_warm": restored_ms / warm_ms,
        "history_token_ids": history,
        "prompt_token_ids": prompt,
    });
    if json_out {
        println!("{result}");
    } else {
        println!("{}", serde_json::to_string_pretty(&result).expect("JSON"));
    }
    Ok(())
}

/// Reads the saved cache and answers the next turn's first token.
pub fn restored(model: &ModelArgs, cache: &Path, prompt: &Path) -> Result<(), EngineError> {
    let engine = open(model)?;
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(prompt).map_err(|source| EngineError::Io { path: prompt.to_path_buf(), source })?,
    )
    .map_err(|e| EngineError::CorruptCache(e.to_string()))?;
    let ids: Vec<u32> =
        serde_json::from_value(spec["ids"].clone()).map_err(|e| EngineError::CorruptCache(e.to_string()))?;
    let context = spec["context"].as_u64().unwrap_or(0) as usize;
    // A cache is written and read only under the model file's whole hash.
    engine.hash_file(&|| false)?;
    let identity = engine.cache_identity(context)?;
    let t = Instant::now();
    let mut session = session_file::read(cache, &identity, engine.model())?.session;
    let read_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut turn = session.start_turn(engine.model(), engine.tokenizer(), &ids, greedy_config(&engine), 1)?;
    turn.step()?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    println!("{}", json!({"ttft_ms": ms, "read_ms": read_ms, "processed_tokens": turn.stats().processed_tokens}));
    Ok(())
}
