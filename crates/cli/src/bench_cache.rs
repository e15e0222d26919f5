//! `bench-cache`: what a saved conversation cache buys on the next turn, on
//! the app's own path: stored conversations on the app's worker, each
//! cache kept in memory after a turn and saved to disk (`Storage::In`).
//! Each time is the user's wait, from asking for the next turn to its first
//! token: the cache found (in memory, or read from disk), the prompt
//! rendered, what is new read, one token sampled.
//!
//! Every conversation is the same: filler exchanges, a last user message
//! the model answers ("the previous turn", whose reply goes back into the
//! next prompt as the tokens it was sampled as), then the next message.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use hearth_engine::{ChatMessage, Kernels};
use hearth_store::{ConversationSettings, MessageStatus, ReplyStats, Role, Store};
use hearth_worker::events::GenerationEvent;
use hearth_worker::history::prompt_messages;
use hearth_worker::ReplyJob;
use serde_json::json;

use crate::local::{LocalWorker, Storage};
use crate::{CliResult, ModelArgs};

const FILLER_USER: &str =
    "Tell me more about the history of the old mill by the river, and the farmers who brought their grain there.";
const FILLER_ASSISTANT: &str = "The mill was built of stone in the valley, where the river runs fast. Farmers came each autumn with carts of wheat and barley, and the miller ground it into flour while they traded news, sold eggs and argued about the weather and the price of bread.";
const LAST: &str = "What did the miller charge them?";
const NEXT: &str = "Summarise all of that in one sentence.";
const EDITED: &str = "Now tell me who owned the mill, in two sentences.";

/// The previous turn's reply: long enough to be a reply, short enough to bench quickly.
const PREVIOUS_REPLY_TOKENS: u32 = 32;

/// Measurements of each kind, the best of this many.
const REPEATS: usize = 3;

/// A conversation whose previous turn has run: its cache covers `history`.
struct Chat {
    id: i64,
    /// The previous turn's reply: the next message's parent.
    reply: i64,
    /// The tokens its cache covers: the previous prompt and the reply's
    /// tokens but its last (never fed).
    history: Vec<u32>,
    /// From the previous turn's last token to its end: its cache written
    /// to disk whole for the first time, and the reply recorded.
    save_ms: f64,
}

/// A next turn's figures.
struct NextTurn {
    ttft_ms: f64,
    processed: u32,
    prompt: Vec<u32>,
}

pub fn run(model: &ModelArgs, history_tokens: usize, json_out: bool) -> CliResult<()> {
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a scratch folder: {e}"))?;
    let store = Store::open(dir.path().join("hearth.db"))?;
    let local = LocalWorker::open_with(model, Kernels::Hearth, Storage::In(dir.path()))?;
    // A cache is saved only under the model file's whole hash.
    local.settle()?;
    let fillers = filler_count(&local, history_tokens)?;

    let mut chats = Vec::new();
    for _ in 0..(2 * REPEATS + 1) {
        chats.push(previous_turn(&local, &store, fillers)?);
    }
    let save_ms = chats.iter().map(|c| c.save_ms).fold(f64::MAX, f64::min);
    let cache_file = dir.path().join("caches").join(format!("{}.session", chats[0].id));
    let bytes = std::fs::metadata(&cache_file).map(|m| m.len()).map_err(|e| format!("no saved cache: {e}"))?;
    let history = chats[0].history.clone();

    // Warm: the cache in memory, as the previous turn left it.
    let warm: Vec<NextTurn> =
        chats[..REPEATS].iter().map(|c| next_turn(&local, &store, c, NEXT)).collect::<Result<_, _>>()?;
    // Edited after its first token: back to where the two versions part.
    let edit: Vec<NextTurn> =
        chats[..REPEATS].iter().map(|c| next_turn(&local, &store, c, EDITED)).collect::<Result<_, _>>()?;

    // Restored: a fresh worker (the model loaded again, no cache in
    // memory) reads each conversation's cache from disk.
    drop(local);
    let local = LocalWorker::open_with(model, Kernels::Hearth, Storage::In(dir.path()))?;
    local.settle()?;
    let restored: Vec<NextTurn> =
        chats[REPEATS..2 * REPEATS].iter().map(|c| next_turn(&local, &store, c, NEXT)).collect::<Result<_, _>>()?;

    // Cold: no cache anywhere, the whole prompt read.
    local.forget_caches()?;
    let cold = next_turn(&local, &store, &chats[2 * REPEATS], NEXT)?;

    let best = |turns: &[NextTurn]| turns.iter().map(|t| t.ttft_ms).fold(f64::MAX, f64::min);
    let (cold_ms, warm_ms, restored_ms) = (cold.ttft_ms, best(&warm), best(&restored));
    let result = json!({
        "model": local.engine().path().display().to_string(),
        "threads": std::env::var("RAYON_NUM_THREADS").ok().and_then(|s| s.parse::<usize>().ok()).unwrap_or_else(rayon::current_num_threads),
        "history_tokens": history.len(),
        "prompt_tokens": warm[0].prompt.len(),
        "cold_ttft_ms": cold_ms,
        "cold_processed_tokens": cold.processed,
        "warm_ttft_ms": warm_ms,
        "warm_processed_tokens": warm[0].processed,
        "edit_ttft_ms": best(&edit),
        "edit_processed_tokens": edit[0].processed,
        "edit_prompt_tokens": edit[0].prompt.len(),
        "restored_ttft_ms": restored_ms,
        "restored_processed_tokens": restored[0].processed,
        "save_ms": save_ms,
        "bytes_on_disk": bytes,
        "bytes_per_1k_tokens": bytes as f64 * 1000.0 / history.len() as f64,
        "warm_speedup": cold_ms / warm_ms,
        "restored_speedup": cold_ms / restored_ms,
        "restored_over_warm": restored_ms / warm_ms,
        "history_token_ids": history,
        "prompt_token_ids": warm[0].prompt,
    });
    if json_out {
        println!("{result}");
    } else {
        println!("{}", serde_json::to_string_pretty(&result)?);
    }
    Ok(())
}

/// How many filler exchanges make a history of about `tokens` tokens.
fn filler_count(local: &LocalWorker, tokens: usize) -> CliResult<usize> {
    let engine = local.engine();
    let mut messages = Vec::new();
    loop {
        messages.push(ChatMessage::user(FILLER_USER));
        messages.push(ChatMessage::assistant(FILLER_ASSISTANT));
        if engine.encode_chat(&messages)?.len() >= tokens {
            return Ok(messages.len() / 2);
        }
    }
}

/// A new conversation of `fillers` exchanges and a last message, answered.
fn previous_turn(local: &LocalWorker, store: &Store, fillers: usize) -> CliResult<Chat> {
    let id = store.create_conversation()?.id;
    let mut parent = None;
    for _ in 0..fillers {
        for (role, text) in [(Role::User, FILLER_USER), (Role::Assistant, FILLER_ASSISTANT)] {
            parent = Some(store.add_message(id, parent, role, text, MessageStatus::Complete)?.id);
        }
    }
    let last = store.add_message(id, parent, Role::User, LAST, MessageStatus::Complete)?.id;
    let (prompt, turn) = ask(local, store, id, last, PREVIOUS_REPLY_TOKENS)?;
    let tokens = turn.stats.replay.as_ref().map(|r| r.tokens.clone()).unwrap_or_default();
    let mut history = prompt;
    history.extend_from_slice(&tokens[..tokens.len().saturating_sub(1)]);
    let save_ms = turn.end.duration_since(turn.last_token.unwrap_or(turn.end)).as_secs_f64() * 1e3;
    Ok(Chat { id, reply: turn.reply, history, save_ms })
}

/// The next message `text` after `chat`'s previous turn, answered with one token.
fn next_turn(local: &LocalWorker, store: &Store, chat: &Chat, text: &str) -> CliResult<NextTurn> {
    let message = store.add_message(chat.id, Some(chat.reply), Role::User, text, MessageStatus::Complete)?.id;
    let (prompt, turn) = ask(local, store, chat.id, message, 1)?;
    let first = turn.first_token.ok_or("the next turn sampled nothing")?;
    Ok(NextTurn {
        ttft_ms: first.duration_since(turn.asked).as_secs_f64() * 1e3,
        processed: turn.stats.processed_tokens,
        prompt,
    })
}

/// A stored reply as the app's worker writes it, and when things happened.
struct Answered {
    reply: i64,
    stats: ReplyStats,
    asked: Instant,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    end: Instant,
}

/// Adds a reply to `parent` in conversation `id`, greedy and at most
/// `max_new_tokens` long, and waits for it: its prompt's ids (as the
/// worker builds them) and how it went.
fn ask(
    local: &LocalWorker,
    store: &Store,
    id: i64,
    parent: i64,
    max_new_tokens: u32,
) -> CliResult<(Vec<u32>, Answered)> {
    let settings = ConversationSettings { temperature: 0.0, max_new_tokens, ..store.conversation_settings(id)? };
    store.set_conversation_settings(id, &settings)?;
    let (messages, settings) = prompt_messages(store, id, Some(parent))?;
    let reply = store.add_message(id, Some(parent), Role::Assistant, "", MessageStatus::Streaming)?.id;
    let (tx, events) = mpsc::channel();
    let job = ReplyJob::new(id, reply, messages, settings, Box::new(move |e| drop(tx.send((Instant::now(), e)))));
    let prompt = hearth_worker::prompt_ids(local.engine(), &job, &job.settings)?.ids;
    let asked = Instant::now();
    local.worker().enqueue(job)?;
    let (mut first_token, mut last_token) = (None, None);
    loop {
        let (at, event) = events.recv_timeout(Duration::from_secs(3600)).map_err(|_| "the reply never ended")?;
        match event {
            GenerationEvent::Tokens { .. } => {
                first_token.get_or_insert(at);
                last_token = Some(at);
            }
            GenerationEvent::Finished { stats, .. } => {
                let answered = Answered { reply, stats, asked, first_token, last_token, end: at };
                local.settle()?;
                return Ok((prompt, answered));
            }
            GenerationEvent::Error { error } => return Err(error.into()),
            _ => {}
        }
    }
}
