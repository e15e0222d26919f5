//! Tool calls in a chat: the tools a reply is offered (its chat's MCP
//! servers), and what happens when a reply calls some: each call asks the
//! user first (unless its tool is allowed in this chat for good), runs on
//! its server, and is recorded with its result; then the reply that reads
//! the results is written, over the same event channel. Stop ends it all:
//! a waiting approval, a running call, the rounds to come.
//!
//! The worker knows nothing of MCP: it offers the tools it is given and
//! records the calls a reply made; this module runs them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hearth_engine::{ToolChoice, Tools};
use hearth_mcp::{McpError, Servers, ToolSet};
use hearth_store::{ConversationSettings, MessageStatus, Role, Store, ToolCallRecord, ToolCallStatus, ToolUse};
use serde::Deserialize;
use tauri::ipc::Channel;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use ts_rs::TS;

use crate::error::{locked, AppError, AppResult, ErrorKind};
use crate::events::GenerationEvent;
use crate::worker::history::prompt_messages;
use crate::worker::{EventSink, ReplyJob, Worker};

/// Replies in a row that may call tools after one message; the one after
/// them is offered none, so a model that keeps calling still answers.
pub const MAX_ROUNDS: usize = 8;

/// Calls one reply may make; the rest fail without running.
pub const MAX_CALLS_PER_REPLY: usize = 8;

/// What the user says to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub enum ToolDecision {
    /// Run this call.
    Once,
    /// Run it, and this tool's calls in this chat from now on.
    Always,
    /// Do not run it; the model reads that the user did not allow it.
    Deny,
}

/// The tools one reply is offered, and where their calls go.
#[derive(Clone, Default)]
pub struct Offer {
    pub set: Arc<ToolSet>,
    pub tools: Tools,
    /// Why some of the chat's servers are left out (each names its server).
    pub unavailable: Vec<String>,
}

impl Offer {
    /// Tells the page which servers were left out, if any.
    pub fn report(&self, channel: &Channel<GenerationEvent>) {
        if !self.unavailable.is_empty() {
            let _ = channel.send(GenerationEvent::ToolsUnavailable { errors: self.unavailable.clone() });
        }
    }
}

/// Conversations whose calls are waiting or running, and the approvals
/// asked for.
#[derive(Default)]
pub struct ToolTurns {
    running: Mutex<HashMap<i64, CancellationToken>>,
    approvals: Mutex<HashMap<(i64, String), oneshot::Sender<ToolDecision>>>,
}

impl ToolTurns {
    /// Conversations running tool calls now.
    pub fn busy(&self) -> Vec<i64> {
        locked(&self.running).keys().copied().collect()
    }

    /// Stops the conversation's calls: a waiting approval, a running call,
    /// and the reply that would have followed. Whether any was running.
    pub fn stop(&self, conversation_id: i64) -> bool {
        match locked(&self.running).get(&conversation_id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Hands the user's decision to the call waiting for it.
    pub fn decide(&self, conversation_id: i64, call_id: &str, decision: ToolDecision) -> AppResult<()> {
        let waiting = locked(&self.approvals).remove(&(conversation_id, call_id.to_string()));
        match waiting {
            Some(tx) => {
                let _ = tx.send(decision);
                Ok(())
            }
            None => Err(AppError::new(ErrorKind::NotFound, format!("no call {call_id} is waiting for approval"))),
        }
    }

    fn begin(&self, conversation_id: i64) -> CancellationToken {
        let token = CancellationToken::new();
        locked(&self.running).insert(conversation_id, token.clone());
        token
    }

    fn end(&self, conversation_id: i64) {
        locked(&self.running).remove(&conversation_id);
        locked(&self.approvals).retain(|(c, _), _| *c != conversation_id);
    }

    async fn ask(&self, conversation_id: i64, call_id: &str, stop: &CancellationToken) -> Option<ToolDecision> {
        let (tx, rx) = oneshot::channel();
        locked(&self.approvals).insert((conversation_id, call_id.to_string()), tx);
        tokio::select! {
            d = rx => d.ok(),
            () = stop.cancelled() => None,
        }
    }
}

/// What every tool round needs, owned, for tasks that outlive a command.
pub struct ToolContext {
    pub worker: Arc<Worker>,
    pub mcp: Arc<Servers>,
    pub turns: Arc<ToolTurns>,
    /// A connection to reopen per round (a `Store` is one connection).
    pub store: Mutex<Store>,
}

impl ToolContext {
    fn store(&self) -> AppResult<Store> {
        Ok(locked(&self.store).reopen()?)
    }
}

/// The tools a reply in a chat with `settings` is offered: `round` 0 is a
/// message's first reply, later ones read results. Servers that cannot
/// start are left out (Settings shows why); the chat goes on with the rest.
pub async fn offer(mcp: &Servers, settings: &ConversationSettings, round: usize) -> Offer {
    if settings.tool_use == ToolUse::Never || settings.tool_servers.is_empty() || round > MAX_ROUNDS {
        return Offer::default();
    }
    let (set, errors) = mcp.tool_set(&settings.tool_servers, &CancellationToken::new()).await;
    let unavailable: Vec<String> = errors.iter().map(ToString::to_string).collect();
    if set.is_empty() {
        return Offer { unavailable, ..Offer::default() };
    }
    let choice = match (settings.tool_use, round) {
        (_, r) if r == MAX_ROUNDS => ToolChoice::None,
        (ToolUse::Always, 0) => ToolChoice::Required,
        _ => ToolChoice::Auto,
    };
    // A required call is one call: a small model held to the grammar
    // would otherwise write call after call until its token limit.
    let parallel = choice != ToolChoice::Required;
    let tools = Tools { specs: set.specs(), choice, parallel };
    Offer { set: Arc::new(set), tools, unavailable }
}

/// The events of a chat reply that may call tools: passed on to the page,
/// and when the reply made calls, those are run (on the app's runtime)
/// and the next reply started. `round` as in `offer`.
pub fn sink(
    ctx: Arc<ToolContext>,
    conversation_id: i64,
    reply_id: i64,
    round: usize,
    offer: Offer,
    channel: Channel<GenerationEvent>,
) -> EventSink {
    Box::new(move |event| {
        let calls = matches!(&event, GenerationEvent::Finished { tool_calls, .. } if !tool_calls.is_empty());
        // The window may have gone; the reply is still saved.
        let _ = channel.send(event);
        if calls {
            // Marked busy here, on the worker's thread, before the worker
            // lets go of the conversation: no message can slip in between.
            let stop = ctx.turns.begin(conversation_id);
            let (ctx, offer, channel) = (ctx.clone(), offer.clone(), channel.clone());
            tauri::async_runtime::spawn(async move {
                let outcome = run_calls(&ctx, conversation_id, reply_id, round, &offer, &channel, &stop).await;
                if let Err(error) = outcome {
                    ctx.turns.end(conversation_id);
                    let _ = channel.send(GenerationEvent::Error { error });
                }
            });
        }
    })
}

/// Runs reply `reply_id`'s calls in order, each recorded as it ends, then
/// starts the reply that reads them (or, stopped, ends the turn).
async fn run_calls(
    ctx: &Arc<ToolContext>,
    conversation_id: i64,
    reply_id: i64,
    round: usize,
    offer: &Offer,
    channel: &Channel<GenerationEvent>,
    stop: &CancellationToken,
) -> AppResult<()> {
    let store = ctx.store()?;
    let mut calls = store.tool_calls(reply_id)?;
    // More calls than any reply needs are not run; the model reads why.
    for call in calls.iter_mut().skip(MAX_CALLS_PER_REPLY) {
        call.status = ToolCallStatus::Failed;
        call.result = format!("not run: a reply may make at most {MAX_CALLS_PER_REPLY} calls");
    }
    let send = |position: usize, call: &ToolCallRecord, awaiting_approval: bool| {
        let _ = channel.send(GenerationEvent::ToolCall {
            reply_id,
            position: position as u32,
            call: call.clone(),
            awaiting_approval,
        });
    };
    for (i, call) in calls.iter_mut().enumerate() {
        if call.status != ToolCallStatus::Pending {
            store.update_tool_call(reply_id, i, call)?;
            send(i, call, false);
            continue;
        }
        run_one(ctx, conversation_id, offer, stop, call, |c, awaiting| send(i, c, awaiting)).await?;
        store.update_tool_call(reply_id, i, call)?;
        send(i, call, false);
    }
    if stop.is_cancelled() {
        ctx.turns.end(conversation_id);
        let _ = channel.send(GenerationEvent::Finished {
            reason: "cancelled".into(),
            stats: hearth_store::ReplyStats { finish_reason: "cancelled".into(), ..Default::default() },
            others: Vec::new(),
            tool_calls: Vec::new(),
        });
        return Ok(());
    }
    // The next reply is queued before the conversation counts as idle.
    let settings = store.conversation_settings(conversation_id)?;
    let next_offer = offer_again(ctx, &settings, round + 1, offer).await;
    next_offer.report(channel);
    let (messages, settings) = prompt_messages(&store, conversation_id, Some(reply_id))?;
    let reply = store.add_message(conversation_id, Some(reply_id), Role::Assistant, "", MessageStatus::Streaming)?;
    store.select_version(conversation_id, reply.id)?;
    let tools = next_offer.tools.clone();
    let events = sink(ctx.clone(), conversation_id, reply.id, round + 1, next_offer, channel.clone());
    let mut job = ReplyJob::new(conversation_id, reply.id, messages, settings, events);
    job.tools = tools;
    let queued = ctx.worker.enqueue(job);
    ctx.turns.end(conversation_id);
    if let Err(e) = queued {
        store.update_reply(reply.id, "", MessageStatus::Error, None)?;
        return Err(e);
    }
    Ok(())
}

/// The offer for the next round: the same servers' tools (the set is
/// kept, so names stay as the model saw them), with the round's choice.
async fn offer_again(ctx: &ToolContext, settings: &ConversationSettings, round: usize, last: &Offer) -> Offer {
    let fresh = offer(&ctx.mcp, settings, round).await;
    if fresh.tools.specs.is_empty() && round <= MAX_ROUNDS && !last.tools.specs.is_empty() {
        // The servers went away mid-turn: the model still reads its calls'
        // results; it is offered nothing new.
        return Offer {
            set: last.set.clone(),
            tools: Tools { choice: ToolChoice::None, ..last.tools.clone() },
            unavailable: fresh.unavailable,
        };
    }
    fresh
}

/// One call: where it goes, the user's approval, the run. `send` tells the
/// page while it waits (`true`) and once it runs.
async fn run_one(
    ctx: &ToolContext,
    conversation_id: i64,
    offer: &Offer,
    stop: &CancellationToken,
    call: &mut ToolCallRecord,
    send: impl Fn(&ToolCallRecord, bool),
) -> AppResult<()> {
    let end = |call: &mut ToolCallRecord, status: ToolCallStatus, result: String| {
        call.status = status;
        call.result = result;
    };
    if stop.is_cancelled() {
        end(call, ToolCallStatus::Stopped, String::new());
        return Ok(());
    }
    let Some(target) = offer.set.find(&call.name) else {
        end(call, ToolCallStatus::Failed, format!("there is no tool named “{}” in this chat", call.name));
        return Ok(());
    };
    call.server = Some(target.server.clone());
    call.tool = Some(target.tool.clone());
    let arguments = match serde_json::from_str::<serde_json::Value>(&call.arguments) {
        Ok(v @ serde_json::Value::Object(_)) => v,
        Ok(_) => {
            end(call, ToolCallStatus::Failed, "the arguments are not a JSON object".into());
            return Ok(());
        }
        Err(e) => {
            end(call, ToolCallStatus::Failed, format!("the arguments are not JSON: {e}"));
            return Ok(());
        }
    };
    let allowed = ctx.store()?.tool_allowed(conversation_id, &target.server, &target.tool)?;
    if !allowed {
        send(call, true);
        match ctx.turns.ask(conversation_id, &call.call_id, stop).await {
            None => {
                end(call, ToolCallStatus::Stopped, String::new());
                return Ok(());
            }
            Some(ToolDecision::Deny) => {
                end(call, ToolCallStatus::Denied, String::new());
                return Ok(());
            }
            Some(ToolDecision::Always) => ctx.store()?.allow_tool(conversation_id, &target.server, &target.tool)?,
            Some(ToolDecision::Once) => {}
        }
    }
    send(call, false);
    let started = std::time::Instant::now();
    let outcome = ctx.mcp.call(&target.server, &target.tool, arguments, stop).await;
    call.elapsed_ms = Some(started.elapsed().as_millis().min(u32::MAX as u128) as u32);
    match outcome {
        Ok(o) => {
            call.truncated = o.truncated;
            let status = if o.is_error { ToolCallStatus::Error } else { ToolCallStatus::Ok };
            end(call, status, o.text);
        }
        Err(McpError::Cancelled) => end(call, ToolCallStatus::Stopped, String::new()),
        Err(e) => end(call, ToolCallStatus::Failed, e.to_string()),
    }
    Ok(())
}
