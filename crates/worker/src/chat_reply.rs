//! How a chat reply starts: the check that its conversation is free, its
//! rows (the reply and any variants beside it, the first one shown), the
//! job (offered its chat's tools), and the queue or a remote endpoint's
//! thread; likewise a stopped reply continued in place, and a branch from
//! one of a reply's tokens. The commands only say which reply to start.

use hearth_store::{Message, MessageStatus, Role, Store, TokenChoice};

use crate::error::{AppError, AppResult, ErrorKind};
use crate::history::prompt_messages;
use crate::shared;
use crate::tool_offer::{Offer, ToolRound};
use crate::{EventSink, RemoteTarget, ReplyJob, Worker};

/// A chat reply to start.
pub struct ChatReply {
    pub conversation_id: i64,
    /// The message it answers: a user's, or (a reply reading tool results) a reply.
    pub parent: i64,
    /// Replies written together from one prompt ("Generate N"), at least 1.
    pub variants: u32,
    /// The conversation's remote endpoint, where it has one.
    pub target: Option<RemoteTarget>,
    /// The tools it is offered (nothing on a remote endpoint).
    pub offer: Offer,
    pub events: EventSink,
}

impl Worker {
    /// Refuses a conversation with a reply queued, running or calling tools.
    pub fn check_idle(&self, conversation_id: i64) -> AppResult<()> {
        if self.busy_conversations().contains(&conversation_id) {
            return Err(shared::busy());
        }
        Ok(())
    }

    /// Adds the reply's rows under its parent and queues it (or streams it
    /// from its remote endpoint). The rows are marked failed if it cannot
    /// be queued.
    pub fn start_chat_reply(&self, store: &Store, reply: ChatReply) -> AppResult<Vec<Message>> {
        let ChatReply { conversation_id, parent, variants, target, offer, events } = reply;
        self.check_idle(conversation_id)?;
        let (messages, settings) = prompt_messages(store, conversation_id, Some(parent))?;
        let replies = (0..variants.max(1))
            .map(|_| store.add_message(conversation_id, Some(parent), Role::Assistant, "", MessageStatus::Streaming))
            .collect::<Result<Vec<_>, _>>()?;
        store.select_version(conversation_id, replies[0].id)?;
        let round = usize::from(store.message(parent)?.role == Role::Assistant);
        offer.report(&*events);
        let mut job = ReplyJob::new(conversation_id, replies[0].id, messages, settings, events);
        // Calls are run for a single reply; beside others ("Generate N") a
        // reply answers without tools.
        if replies.len() == 1 && offer.tools.offered() {
            job.tools = offer.tools.clone();
            job.tool_round = Some(ToolRound { round, offer });
        }
        job.variant_ids = replies[1..].iter().map(|r| r.id).collect();
        let queued = match target {
            None => self.enqueue(job),
            Some(target) => self.start_remote(job, target),
        };
        if let Err(e) = queued {
            for r in &replies {
                store.update_reply(r.id, "", MessageStatus::Error, None)?;
            }
            return Err(e);
        }
        Ok(replies)
    }

    /// Goes on writing the stopped `reply` (under `parent`) in place: marked
    /// streaming, then queued; put back as it was if it cannot be queued.
    pub fn continue_chat_reply(
        &self,
        store: &Store,
        conversation_id: i64,
        reply: &Message,
        parent: i64,
        events: EventSink,
    ) -> AppResult<Message> {
        if reply.status == MessageStatus::Streaming {
            return Err(AppError::new(ErrorKind::Busy, "this reply is still being written"));
        }
        self.check_idle(conversation_id)?;
        let (messages, settings) = prompt_messages(store, conversation_id, Some(parent))?;
        // The tokens that wrote the text so far, when kept and still what the
        // text says (a failed or cut-off run may have written more): the prompt
        // is then exactly what the cache holds, and the choices stay aligned.
        let mut kept = store.token_choices(reply.id)?.map(|c| c.tokens).unwrap_or_default();
        let ids: Vec<u32> = kept.iter().map(|t| t.id).collect();
        if self.engine().is_none_or(|e| e.tokenizer().decode(&ids) != reply.content) {
            kept.clear();
        }
        store.update_reply(reply.id, &reply.content, MessageStatus::Streaming, None)?;
        let job = ReplyJob {
            prefix: reply.content.clone(),
            prefix_ids: (!kept.is_empty()).then(|| kept.iter().map(|t| t.id).collect()),
            prefix_choices: kept,
            ..ReplyJob::new(conversation_id, reply.id, messages, settings, events)
        };
        if let Err(e) = self.enqueue(job) {
            store.update_reply(reply.id, &reply.content, reply.status, None)?;
            return Err(e);
        }
        Ok(store.message(reply.id)?)
    }

    /// A new version of a reply under `parent` that starts with the tokens
    /// `kept` (the reply's own up to a point, then the one the user picked,
    /// `prefix` their text) and goes on from there.
    pub fn branch_chat_reply(
        &self,
        store: &Store,
        conversation_id: i64,
        parent: i64,
        prefix: String,
        kept: Vec<TokenChoice>,
        events: EventSink,
    ) -> AppResult<Message> {
        self.check_idle(conversation_id)?;
        let (messages, settings) = prompt_messages(store, conversation_id, Some(parent))?;
        let branch =
            store.add_message(conversation_id, Some(parent), Role::Assistant, &prefix, MessageStatus::Streaming)?;
        let job = ReplyJob {
            prefix,
            prefix_ids: Some(kept.iter().map(|t| t.id).collect()),
            prefix_choices: kept,
            ..ReplyJob::new(conversation_id, branch.id, messages, settings, events)
        };
        if let Err(e) = self.enqueue(job) {
            store.update_reply(branch.id, &branch.content, MessageStatus::Error, None)?;
            return Err(e);
        }
        Ok(branch)
    }
}
