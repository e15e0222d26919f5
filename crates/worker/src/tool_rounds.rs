//! A chat reply's tool rounds, the rest of its life after its text: when a
//! reply calls tools, each call asks the user first (an event, unless its
//! tool is allowed in this chat for good), runs on its MCP server through
//! `hearth-mcp`, and is recorded with its result; then the reply that reads
//! the results is queued, offered the tools again, up to `MAX_ROUNDS`.
//! Stop ends it all: a waiting approval, a running call, the rounds to
//! come.
//!
//! The conversation is busy from its first reply to its last round, in one
//! place: the queue's `tools` list holds it while calls wait or run, and it
//! moves from there to the next reply's queue entry under one lock. Calls
//! run on the async runtime the binary gives (`Worker::set_tool_host`),
//! never on the worker's thread, so other replies go on meanwhile.

use std::sync::{Arc, Mutex};

use hearth_engine::{ToolChoice, Tools};
use hearth_mcp::McpError;
use hearth_store::{ConversationSettings, MessageStatus, Role, Store, ToolCallRecord, ToolCallStatus};
use tokio_util::sync::CancellationToken;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::events::GenerationEvent;
use crate::history::prompt_messages;
use crate::job::ReplyJob;
use crate::locks::lock;
use crate::shared::Shared;
use crate::tool_offer::{offer, Offer, ToolDecision, ToolHost, ToolRound, MAX_CALLS_PER_REPLY, MAX_ROUNDS};

/// A reply's calls waiting to run: the conversation is marked busy with
/// them (`mark_busy`, before the reply lets go of it), then they run
/// (`spawn`, once the reply's end is told).
pub(crate) struct PendingCalls {
    shared: Arc<Shared>,
    host: ToolHost,
    /// Taken a statement at a time, never across an `await`: the task must
    /// be `Send`, and a connection is not `Sync`.
    store: Mutex<Store>,
    conversation_id: i64,
    reply_id: i64,
    round: ToolRound,
    events: Arc<dyn Fn(GenerationEvent) + Send + Sync>,
    stop: CancellationToken,
}

impl PendingCalls {
    /// Marks `job`'s conversation busy with its reply's calls, stopped
    /// with the reply (`reply_stop`: a Stop as the reply ends reaches its
    /// calls). An error (and nothing marked) where nothing runs calls or
    /// the database cannot be reopened: the calls stay pending, the turn ends.
    pub fn mark_busy(
        shared: &Arc<Shared>,
        store: &Store,
        job: &ReplyJob,
        round: &ToolRound,
        reply_stop: &CancellationToken,
    ) -> AppResult<Self> {
        let host = shared
            .tools
            .host()
            .ok_or_else(|| AppError::new(ErrorKind::Internal, "tool calls cannot run here: no MCP host is set"))?;
        let store = store.reopen()?;
        let stop = reply_stop.child_token();
        lock(&shared.queue).tools.push((job.conversation_id, stop.clone()));
        Ok(Self {
            shared: shared.clone(),
            host,
            store: Mutex::new(store),
            conversation_id: job.conversation_id,
            reply_id: job.reply_id,
            round: round.clone(),
            events: job.events.clone(),
            stop,
        })
    }

    /// Runs the calls on the host's runtime, then queues the reply that
    /// reads them.
    pub fn spawn(self) {
        let runtime = self.host.runtime.clone();
        runtime.spawn(async move {
            if let Err(error) = self.run().await {
                self.end_round();
                (self.events)(GenerationEvent::Error { error });
            }
        });
    }

    /// Runs the reply's calls in order, each recorded as it ends, then
    /// queues the reply that reads them (or, stopped, ends the turn).
    async fn run(&self) -> AppResult<()> {
        let reply_id = self.reply_id;
        let mut calls = self.store().tool_calls(reply_id)?;
        // More calls than any reply needs are not run; the model reads why.
        for call in calls.iter_mut().skip(MAX_CALLS_PER_REPLY) {
            call.status = ToolCallStatus::Failed;
            call.result = format!("not run: a reply may make at most {MAX_CALLS_PER_REPLY} calls");
        }
        let send = |position: usize, call: &ToolCallRecord, awaiting_approval: bool| {
            (self.events)(GenerationEvent::ToolCall {
                reply_id,
                position: position as u32,
                call: call.clone(),
                awaiting_approval,
            });
        };
        for (i, call) in calls.iter_mut().enumerate() {
            if call.status == ToolCallStatus::Pending {
                self.run_one(call, |c, awaiting| send(i, c, awaiting)).await?;
            }
            self.store().update_tool_call(reply_id, i, call)?;
            send(i, call, false);
        }
        if self.stop.is_cancelled() {
            self.end_stopped();
            return Ok(());
        }
        let settings = self.store().conversation_settings(self.conversation_id)?;
        let round = self.round.round + 1;
        let next_offer = self.offer_again(&settings, round).await;
        // Stopped while the tools were offered again: a Stop from here on
        // stops the next reply before it starts (`Shared::submit`).
        if self.stop.is_cancelled() {
            self.end_stopped();
            return Ok(());
        }
        next_offer.report(&*self.events);
        let (messages, settings, reply) = {
            let store = self.store();
            let (messages, settings) = prompt_messages(&store, self.conversation_id, Some(reply_id))?;
            let reply = store.add_message(
                self.conversation_id,
                Some(reply_id),
                Role::Assistant,
                "",
                MessageStatus::Streaming,
            )?;
            store.select_version(self.conversation_id, reply.id)?;
            (messages, settings, reply)
        };
        let events = self.events.clone();
        let mut job = ReplyJob::new(self.conversation_id, reply.id, messages, settings, Box::new(move |e| events(e)));
        job.tools = next_offer.tools.clone();
        job.tool_round = Some(ToolRound { round, offer: next_offer });
        // The conversation moves from its calls to the next reply under one
        // lock: it is never idle in between.
        if let Err(e) = self.shared.submit(job, CancellationToken::new(), Some(self.conversation_id)) {
            self.end_round();
            self.store().update_reply(reply.id, "", MessageStatus::Error, None)?;
            return Err(e);
        }
        self.shared.tools.forget(self.conversation_id);
        Ok(())
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        lock(&self.store)
    }

    /// Ends the turn as stopped: the conversation free, the page told.
    fn end_stopped(&self) {
        self.end_round();
        (self.events)(GenerationEvent::Finished {
            reason: "cancelled".into(),
            stats: hearth_store::ReplyStats { finish_reason: "cancelled".into(), ..Default::default() },
            others: Vec::new(),
            tool_calls: Vec::new(),
        });
    }

    /// The conversation is free again: no calls wait or run.
    fn end_round(&self) {
        lock(&self.shared.queue).tools.retain(|(c, _)| *c != self.conversation_id);
        self.shared.tools.forget(self.conversation_id);
        self.shared.wake.notify_all();
    }

    /// The offer for the next round: the same servers' tools (the set is
    /// kept, so names stay as the model saw them), with the round's choice.
    async fn offer_again(&self, settings: &ConversationSettings, round: usize) -> Offer {
        let last = &self.round.offer;
        let fresh = offer(&self.host.servers, settings, round).await;
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

    /// One call: where it goes, the user's approval, the run. `send` tells
    /// the page while it waits (`true`) and once it runs.
    async fn run_one(&self, call: &mut ToolCallRecord, send: impl Fn(&ToolCallRecord, bool)) -> AppResult<()> {
        let end = |call: &mut ToolCallRecord, status: ToolCallStatus, result: String| {
            call.status = status;
            call.result = result;
        };
        if self.stop.is_cancelled() {
            end(call, ToolCallStatus::Stopped, String::new());
            return Ok(());
        }
        let Some(target) = self.round.offer.set.find(&call.name) else {
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
        let conversation = self.conversation_id;
        let allowed = self.store().tool_allowed(conversation, &target.server, &target.tool)?;
        if !allowed {
            let decision = self.shared.tools.expect(conversation, &call.call_id);
            send(call, true);
            let decided = tokio::select! {
                d = decision => d.ok(),
                () = self.stop.cancelled() => None,
            };
            match decided {
                None => {
                    end(call, ToolCallStatus::Stopped, String::new());
                    return Ok(());
                }
                Some(ToolDecision::Deny) => {
                    end(call, ToolCallStatus::Denied, String::new());
                    return Ok(());
                }
                Some(ToolDecision::Always) => self.store().allow_tool(conversation, &target.server, &target.tool)?,
                Some(ToolDecision::Once) => {}
            }
        }
        send(call, false);
        let started = std::time::Instant::now();
        let outcome = self.host.servers.call(&target.server, &target.tool, arguments, &self.stop).await;
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
}
