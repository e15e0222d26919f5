//! Sending, regenerating, editing, continuing and stopping replies. Each
//! command records the messages first, then hands the reply to the worker,
//! whose events stream back over `on_event`.

use hearth_engine::ChatMessage;
use hearth_store::{Message, MessageStatus, Role, Store};
use serde::Serialize;
use tauri::ipc::Channel;
use tauri::State;
use ts_rs::TS;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::events::GenerationEvent;
use crate::state::AppState;
use crate::worker::history::prompt_messages;
use crate::worker::tool_offer::{self, Offer, ToolDecision};
use crate::worker::{ChatReply, ReplyJob};

/// The messages a command added: the user's (or edited) message and, when
/// one is being written, the reply.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct Sent {
    pub message: Message,
    pub reply: Option<Message>,
    /// The other replies written beside `reply` ("Generate N").
    pub variants: Vec<Message>,
}

/// How many replies "Generate N" may write at once.
pub const MAX_VARIANTS: u32 = 8;

fn sink(channel: Channel<GenerationEvent>) -> crate::worker::EventSink {
    Box::new(move |event| {
        // The window may have gone; the reply is still saved.
        let _ = channel.send(event);
    })
}

/// The tools a local reply under `parent` is offered: none on a remote
/// endpoint; a message's first reply is round 0, a reply to tool results
/// (its parent a reply) a later one.
async fn tool_offer(
    state: &AppState,
    conversation_id: i64,
    parent: Option<i64>,
    target: &Option<crate::worker::RemoteTarget>,
) -> AppResult<Offer> {
    if target.is_some() {
        return Ok(Offer::default());
    }
    let (settings, round) = {
        let store = state.store()?;
        let round = match parent {
            Some(p) => usize::from(store.message(p)?.role == Role::Assistant),
            None => 0,
        };
        (store.conversation_settings(conversation_id)?, round)
    };
    Ok(tool_offer::offer(&state.mcp, &settings, round).await)
}

/// Refuses, in a conversation on a remote endpoint, what only the local
/// engine does (several variants at once, continuing a reply's text,
/// replaying it, branching from a token), before anything is recorded.
fn local_only(store: &Store, conversation_id: i64, what: &str) -> AppResult<()> {
    if store.conversation_backend(conversation_id)? != hearth_store::Backend::Local {
        return Err(AppError::new(
            ErrorKind::InvalidSettings,
            format!("{what} runs on the local model only; switch this conversation to it first"),
        ));
    }
    Ok(())
}

/// `variants` as given: 1 when absent, at most `MAX_VARIANTS`.
fn variant_count(variants: Option<u32>) -> AppResult<u32> {
    match variants.unwrap_or(1) {
        n @ 1..=MAX_VARIANTS => Ok(n),
        n => Err(AppError::new(
            ErrorKind::InvalidSettings,
            format!("variants: {n} replies at once is out of range; 1 to {MAX_VARIANTS}"),
        )),
    }
}

/// Refuses a second reply while one is queued or running in the
/// conversation, or its tool calls are.
fn check_idle(state: &AppState, conversation_id: i64) -> AppResult<()> {
    state.worker.check_idle(conversation_id)
}

/// The reply `reply_id` of this conversation, and the message it answers.
fn reply_of(store: &Store, conversation_id: i64, reply_id: i64) -> AppResult<(Message, i64)> {
    let reply = store.message(reply_id)?;
    if reply.conversation_id != conversation_id || reply.role != Role::Assistant {
        return Err(AppError::new(ErrorKind::NotFound, format!("reply {reply_id} is not in this conversation")));
    }
    let parent =
        reply.parent_id.ok_or_else(|| AppError::new(ErrorKind::NotFound, "a reply without a message to answer"))?;
    Ok((reply, parent))
}

fn last_message(store: &Store, conversation_id: i64) -> AppResult<Option<i64>> {
    Ok(store.thread(conversation_id)?.last().map(|t| t.message.id))
}

fn non_empty(text: &str) -> AppResult<()> {
    if text.trim().is_empty() {
        return Err(AppError::new(ErrorKind::InvalidSettings, "the message is empty"));
    }
    Ok(())
}

/// Sends a user message at the end of the shown branch and starts the
/// reply, or `variants` replies written together from one prompt.
#[tauri::command]
pub async fn chat_send(
    state: State<'_, AppState>,
    conversation_id: i64,
    text: String,
    variants: Option<u32>,
    on_event: Channel<GenerationEvent>,
) -> AppResult<Sent> {
    non_empty(&text)?;
    let variants = variant_count(variants)?;
    check_idle(&state, conversation_id)?;
    let target = super::endpoints::remote_target(&state, conversation_id).await?;
    let offer = tool_offer(&state, conversation_id, None, &target).await?;
    let store = state.store()?;
    if variants > 1 {
        local_only(&store, conversation_id, "writing several replies at once")?;
    }
    let parent = last_message(&store, conversation_id)?;
    let message = store.add_message(conversation_id, parent, Role::User, &text, MessageStatus::Complete)?;
    let reply = ChatReply { conversation_id, parent: message.id, variants, target, offer, events: sink(on_event) };
    let mut replies = state.worker.start_chat_reply(&store, reply)?;
    let reply = replies.remove(0);
    Ok(Sent { message, reply: Some(reply), variants: replies })
}

/// Writes another version of a reply (or `variants` of them), beside the old one.
#[tauri::command]
pub async fn chat_regenerate(
    state: State<'_, AppState>,
    conversation_id: i64,
    reply_id: i64,
    variants: Option<u32>,
    on_event: Channel<GenerationEvent>,
) -> AppResult<Vec<Message>> {
    let variants = variant_count(variants)?;
    let target = super::endpoints::remote_target(&state, conversation_id).await?;
    let (_, parent) = reply_of(&*state.store()?, conversation_id, reply_id)?;
    let offer = tool_offer(&state, conversation_id, Some(parent), &target).await?;
    let store = state.store()?;
    if variants > 1 {
        local_only(&store, conversation_id, "writing several replies at once")?;
    }
    state.worker.start_chat_reply(
        &store,
        ChatReply { conversation_id, parent, variants, target, offer, events: sink(on_event) },
    )
}

/// Edits a message as a new version beside it. An edited user message gets
/// a new reply; an edited reply is kept as written.
#[tauri::command]
pub async fn chat_edit(
    state: State<'_, AppState>,
    conversation_id: i64,
    message_id: i64,
    text: String,
    on_event: Channel<GenerationEvent>,
) -> AppResult<Sent> {
    non_empty(&text)?;
    let target = super::endpoints::remote_target(&state, conversation_id).await?;
    let offer = tool_offer(&state, conversation_id, None, &target).await?;
    let store = state.store()?;
    let old = store.message(message_id)?;
    if old.conversation_id != conversation_id {
        return Err(AppError::new(ErrorKind::NotFound, format!("message {message_id} is not in this conversation")));
    }
    if old.role == Role::User {
        check_idle(&state, conversation_id)?;
    }
    let message = store.add_message(conversation_id, old.parent_id, old.role, &text, MessageStatus::Complete)?;
    let reply = match old.role {
        Role::User => {
            let reply =
                ChatReply { conversation_id, parent: message.id, variants: 1, target, offer, events: sink(on_event) };
            Some(state.worker.start_chat_reply(&store, reply)?.remove(0))
        }
        _ => None,
    };
    Ok(Sent { message, reply, variants: Vec::new() })
}

/// Goes on writing a reply that was stopped, in place.
#[tauri::command]
pub async fn chat_continue(
    state: State<'_, AppState>,
    conversation_id: i64,
    reply_id: i64,
    on_event: Channel<GenerationEvent>,
) -> AppResult<Message> {
    let store = state.store()?;
    local_only(&store, conversation_id, "continuing a reply")?;
    let (reply, parent) = reply_of(&store, conversation_id, reply_id)?;
    state.worker.continue_chat_reply(&store, conversation_id, &reply, parent, sink(on_event))
}

/// A reply's record, and the job that runs it again (its conversation up
/// to the reply, and the text the reply had when this run continued it).
fn replay_job(
    store: &Store,
    conversation_id: i64,
    reply_id: i64,
    on_event: Channel<GenerationEvent>,
) -> AppResult<ReplyJob> {
    let (reply, parent) = reply_of(store, conversation_id, reply_id)?;
    let mut record = reply.stats.as_ref().and_then(|s| s.replay.clone()).ok_or_else(|| {
        AppError::new(
            ErrorKind::CannotReplay,
            "this reply has no record of what produced it (it failed, or was written before records were kept)",
        )
    })?;
    if reply.stats.as_ref().is_some_and(|s| s.finish_reason == hearth_engine::FinishReason::Cancelled.as_str()) {
        // Stopped by the user: a replay goes as far as the reply did.
        record.max_new_tokens = record.tokens.len() as u32;
    }
    let prefix = reply.content.get(..record.prefix_bytes as usize).unwrap_or_default().to_string();
    let (messages, settings) = prompt_messages(store, conversation_id, Some(parent))?;
    let prefix_ids = (!record.prefix_ids.is_empty()).then(|| record.prefix_ids.clone());
    Ok(ReplyJob {
        prefix,
        prefix_ids,
        replay: Some(record),
        ..ReplyJob::new(conversation_id, reply_id, messages, settings, sink(on_event))
    })
}

/// Runs a recorded reply again, streaming it, and ends with `replayed`:
/// whether every token came again. Nothing in the conversation changes.
#[tauri::command]
pub async fn chat_replay(
    state: State<'_, AppState>,
    conversation_id: i64,
    reply_id: i64,
    on_event: Channel<GenerationEvent>,
) -> AppResult<()> {
    check_idle(&state, conversation_id)?;
    let store = state.store()?;
    local_only(&store, conversation_id, "replaying a reply")?;
    let job = replay_job(&store, conversation_id, reply_id, on_event)?;
    state.worker.enqueue(job)
}

/// Writes a reply's record, with its prompt's token ids, to `path` as JSON
/// for `hearth-cli replay`.
#[tauri::command]
pub async fn chat_export_replay(
    state: State<'_, AppState>,
    conversation_id: i64,
    reply_id: i64,
    path: std::path::PathBuf,
) -> AppResult<()> {
    let engine = state
        .worker
        .engine()
        .ok_or_else(|| AppError::new(ErrorKind::NoModel, "no model is loaded; the prompt is tokenized with it"))?;
    let job = replay_job(&*state.store()?, conversation_id, reply_id, Channel::new(|_| Ok(())))?;
    tauri::async_runtime::spawn_blocking(move || -> AppResult<()> {
        let record = job.replay.clone().expect("replay_job sets the record");
        let settings = hearth_store::ConversationSettings {
            context_length: record.context_length,
            max_new_tokens: record.max_new_tokens,
            ..job.settings.clone()
        };
        let prompt_ids = crate::worker::prompt_ids(&engine, &job, &settings)?.ids;
        if hearth_engine::file_hash::ids_sha256(&prompt_ids) != record.prompt_sha256 {
            return Err(AppError::new(
                ErrorKind::CannotReplay,
                "the conversation before this reply is not what it was written from, or another model is loaded",
            ));
        }
        let export = hearth_store::ReplayExport {
            format: hearth_store::ReplayExport::FORMAT.into(),
            version: hearth_store::ReplayExport::VERSION,
            record,
            prompt_ids,
        };
        let json = serde_json::to_vec_pretty(&export).map_err(|e| AppError::new(ErrorKind::Internal, e.to_string()))?;
        std::fs::write(&path, json)
            .map_err(|e| AppError::new(ErrorKind::Storage, format!("cannot write {}: {e}", path.display())))
    })
    .await
    .map_err(|e| AppError::new(ErrorKind::Internal, format!("exporting the record failed: {e}")))?
}

/// One token of a reply as the UI shows it: its text, how likely the model
/// found it, and the likeliest tokens at its place.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct TokenView {
    pub id: u32,
    pub text: String,
    pub logprob: f32,
    pub alternatives: Vec<Alternative>,
}

#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct Alternative {
    pub id: u32,
    pub text: String,
    pub logprob: f32,
}

/// The open model, if it is the one that wrote `reply` (its token ids mean
/// nothing to another vocabulary).
fn model_of(state: &AppState, reply: &Message) -> AppResult<std::sync::Arc<hearth_engine::Engine>> {
    let engine = state
        .worker
        .engine()
        .ok_or_else(|| AppError::new(ErrorKind::NoModel, "no model is loaded; open the model that wrote this reply"))?;
    let recorded = reply.stats.as_ref().and_then(|s| s.replay.as_ref()).and_then(|r| r.model_sha256.clone());
    if let (Some(recorded), Some(open)) = (recorded, engine.file_sha256()) {
        if recorded != open {
            return Err(AppError::new(
                ErrorKind::CannotReplay,
                "this reply was written by another model file; open it to see its tokens",
            ));
        }
    }
    Ok(engine)
}

/// A reply's tokens with their alternatives, or an empty list for a reply
/// written before they were kept.
#[tauri::command]
pub async fn chat_token_choices(
    state: State<'_, AppState>,
    conversation_id: i64,
    reply_id: i64,
) -> AppResult<Vec<TokenView>> {
    let (reply, choices) = {
        let store = state.store()?;
        let (reply, _) = reply_of(&store, conversation_id, reply_id)?;
        let choices = store.token_choices(reply_id)?;
        (reply, choices)
    };
    let Some(choices) = choices else { return Ok(Vec::new()) };
    let engine = model_of(&state, &reply)?;
    let piece = |id: u32| String::from_utf8_lossy(engine.tokenizer().token_bytes(id)).into_owned();
    Ok(choices
        .tokens
        .iter()
        .map(|t| TokenView {
            id: t.id,
            text: piece(t.id),
            logprob: t.logprob,
            alternatives: t.top.iter().map(|&(id, logprob)| Alternative { id, text: piece(id), logprob }).collect(),
        })
        .collect())
}

/// "Continue from here with …": a new version of `reply_id` that keeps its
/// first `index` tokens, puts `token` at `index`, and goes on writing from
/// there. The conversation's cache already holds everything before the
/// branch point, so only the chosen token and what follows run.
#[tauri::command]
pub async fn chat_continue_with(
    state: State<'_, AppState>,
    conversation_id: i64,
    reply_id: i64,
    index: u32,
    token: u32,
    on_event: Channel<GenerationEvent>,
) -> AppResult<Message> {
    let store = state.store()?;
    local_only(&store, conversation_id, "branching from a token")?;
    let (reply, parent) = reply_of(&store, conversation_id, reply_id)?;
    let choices = store
        .token_choices(reply_id)?
        .ok_or_else(|| AppError::new(ErrorKind::NotFound, "this reply kept no token alternatives"))?;
    let at = choices.tokens.get(index as usize).ok_or_else(|| {
        AppError::new(ErrorKind::InvalidSettings, format!("index: the reply has {} tokens", choices.tokens.len()))
    })?;
    let logprob =
        at.top.iter().find(|(id, _)| *id == token).map(|&(_, lp)| lp).or((at.id == token).then_some(at.logprob));
    let Some(logprob) = logprob else {
        return Err(AppError::new(
            ErrorKind::InvalidSettings,
            format!("token: {token} is not among the alternatives at token {index}"),
        ));
    };
    let engine = model_of(&state, &reply)?;
    let mut kept = choices.tokens[..index as usize].to_vec();
    kept.push(hearth_store::TokenChoice { id: token, logprob, top: at.top.clone() });
    let ids: Vec<u32> = kept.iter().map(|t| t.id).collect();
    let prefix = engine.tokenizer().decode(&ids);
    state.worker.branch_chat_reply(&store, conversation_id, parent, prefix, kept, sink(on_event))
}

/// Stops the conversation's reply within one step. False if none was running.
#[tauri::command]
pub async fn chat_stop(state: State<'_, AppState>, conversation_id: i64) -> AppResult<bool> {
    Ok(state.worker.stop(conversation_id))
}

/// The user's answer to a tool call waiting for approval: run it once,
/// allow its tool in this chat from now on, or deny it.
#[tauri::command]
pub async fn chat_tool_decide(
    state: State<'_, AppState>,
    conversation_id: i64,
    call_id: String,
    decision: ToolDecision,
) -> AppResult<()> {
    state.worker.decide_tool(conversation_id, &call_id, decision)
}

/// Conversations with a reply queued or being written.
#[tauri::command]
pub async fn chat_busy(state: State<'_, AppState>) -> AppResult<Vec<i64>> {
    Ok(state.worker.busy_conversations())
}

/// How full the context would be if `draft` were sent now.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct ContextUsage {
    /// Prompt tokens of what would be sent (system prompt, kept history, draft).
    pub prompt_tokens: u32,
    pub draft_tokens: u32,
    /// Tokens kept free for the reply.
    pub reserved_tokens: u32,
    pub context: u32,
    /// Earlier messages the overflow policy would leave out.
    pub dropped_messages: u32,
    /// True when the prompt does not fit even after the policy.
    pub overflows: bool,
}

/// Counts, with the model's own tokenizer, what sending `draft` would use.
#[tauri::command]
pub async fn chat_context_usage(
    state: State<'_, AppState>,
    conversation_id: i64,
    draft: String,
) -> AppResult<ContextUsage> {
    let engine = state.worker.engine().ok_or_else(|| AppError::new(ErrorKind::NoModel, "no model is loaded"))?;
    let (mut messages, settings) = {
        let store = state.store()?;
        let last = last_message(&store, conversation_id)?;
        prompt_messages(&store, conversation_id, last)?
    };
    // Rendering and tokenizing a long thread is CPU work: off the runtime.
    tauri::async_runtime::spawn_blocking(move || -> AppResult<ContextUsage> {
        let draft_tokens = if draft.is_empty() { 0 } else { engine.tokenizer().encode(&draft, false, false)?.len() };
        messages.push(ChatMessage::user(draft));
        let (context, reserve) = crate::context::window(&settings, engine.model().config().context_length);
        let fitted = crate::context::fit(&messages, settings.overflow, context, reserve, |m| {
            engine.encode_chat(m).map(|ids| ids.len())
        })?;
        Ok(ContextUsage {
            prompt_tokens: fitted.tokens as u32,
            draft_tokens: draft_tokens as u32,
            reserved_tokens: reserve as u32,
            context: context as u32,
            dropped_messages: fitted.dropped as u32,
            overflows: fitted.tokens >= context,
        })
    })
    .await
    .map_err(|e| AppError::new(ErrorKind::Internal, format!("counting tokens failed: {e}")))?
}
