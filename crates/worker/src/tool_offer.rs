//! What a chat reply's tools are: the tools one reply is offered (from
//! the chat's MCP servers, in a round of at most `MAX_ROUNDS`), where their
//! calls run, and the approvals the user is asked for. The running of the
//! calls is `tool_rounds.rs`'s; this module holds what the queue, a job and
//! the shell name without running anything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hearth_engine::{ToolChoice, Tools};
use hearth_mcp::{Servers, ToolSet};
use hearth_store::{ConversationSettings, ToolUse};
use serde::Deserialize;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::events::GenerationEvent;
use crate::locks::lock;

/// Replies in a row that may call tools after one message; the one after
/// them is offered none, so a model that keeps calling still answers.
pub const MAX_ROUNDS: usize = 8;

/// Calls one reply may make; the rest fail without running.
pub const MAX_CALLS_PER_REPLY: usize = 8;

/// What the user says to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
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
    pub fn report(&self, events: &dyn Fn(GenerationEvent)) {
        if !self.unavailable.is_empty() {
            events(GenerationEvent::ToolsUnavailable { errors: self.unavailable.clone() });
        }
    }
}

/// A chat reply that may call tools: which round it is (0: a message's
/// first reply; later ones read results) and what it is offered.
#[derive(Clone)]
pub struct ToolRound {
    pub round: usize,
    pub offer: Offer,
}

/// Where calls run: the MCP servers and the async runtime they run on.
#[derive(Clone)]
pub struct ToolHost {
    pub servers: Arc<Servers>,
    pub runtime: tokio::runtime::Handle,
}

/// The approvals asked for, and where calls run.
#[derive(Default)]
pub(crate) struct ToolRounds {
    host: Mutex<Option<ToolHost>>,
    approvals: Mutex<HashMap<(i64, String), oneshot::Sender<ToolDecision>>>,
}

impl ToolRounds {
    pub fn set_host(&self, host: ToolHost) {
        *lock(&self.host) = Some(host);
    }

    pub(crate) fn host(&self) -> Option<ToolHost> {
        lock(&self.host).clone()
    }

    /// Hands the user's decision to the call waiting for it.
    pub fn decide(&self, conversation_id: i64, call_id: &str, decision: ToolDecision) -> AppResult<()> {
        let waiting = lock(&self.approvals).remove(&(conversation_id, call_id.to_string()));
        match waiting {
            Some(tx) => {
                let _ = tx.send(decision);
                Ok(())
            }
            None => Err(AppError::new(ErrorKind::NotFound, format!("no call {call_id} is waiting for approval"))),
        }
    }

    /// Where the decision on a call will come: registered before the
    /// call is shown as waiting, so an answer at once finds it.
    pub(crate) fn expect(&self, conversation_id: i64, call_id: &str) -> oneshot::Receiver<ToolDecision> {
        let (tx, rx) = oneshot::channel();
        lock(&self.approvals).insert((conversation_id, call_id.to_string()), tx);
        rx
    }

    pub(crate) fn forget(&self, conversation_id: i64) {
        lock(&self.approvals).retain(|(c, _), _| *c != conversation_id);
    }
}

/// The tools a reply in a chat with `settings` is offered in `round`.
/// Servers that cannot start are left out (Settings shows why); the chat
/// goes on with the rest.
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
