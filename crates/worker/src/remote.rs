//! A conversation's reply from an OpenAI-compatible endpoint instead of the
//! local model: streamed on a thread of its own (the model's thread and
//! queue are not involved), written to SQLite as it streams like a local
//! reply, and reported with the same events, so the UI cannot tell them
//! apart but by the stats.

use std::sync::Arc;
use std::time::Instant;

use hearth_remote::{ChatRequest, Message, RemoteError, StreamOptions};
use hearth_store::{MessageStatus, ReplyStats, Store};

use crate::config::TestHooks;
use crate::error::{AppError, ErrorKind};
use crate::events::GenerationEvent;
use crate::job::ReplyJob;
use crate::reply::{Unsent, FLUSH_INTERVAL};
use crate::shared::Shared;
use crate::CancellationToken;

/// Where a remote reply goes.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTarget {
    pub endpoint: hearth_remote::Endpoint,
    pub model: String,
}

/// The request for a conversation's turn: its settings, then its messages.
/// Nothing in it depends on the turn but the messages (which only grow), so
/// each turn's body begins with the last one's and a server's prefix cache
/// hits.
fn chat_request(job: &ReplyJob, model: &str) -> ChatRequest {
    let s = &job.settings;
    ChatRequest {
        model: model.to_string(),
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        temperature: s.temperature,
        top_p: s.top_p,
        max_tokens: s.max_new_tokens,
        seed: s.seed,
        stop: s.stop_strings.clone(),
        messages: job
            .messages
            .iter()
            .map(|m| Message {
                role: match m.role {
                    hearth_engine::Role::System => "system",
                    hearth_engine::Role::User => "user",
                    hearth_engine::Role::Assistant => "assistant",
                    hearth_engine::Role::Tool => "tool",
                },
                content: match m.role {
                    hearth_engine::Role::Assistant => answer_only(&m.content),
                    _ => m.content.clone(),
                },
            })
            .collect(),
    }
}

/// A reply as the server is sent it back: without the reasoning that
/// `stream_chat` kept in `<think>`…`</think>` before its answer (servers'
/// templates drop earlier reasoning, and OpenAI's API has no field for it).
fn answer_only(content: &str) -> String {
    match content.trim_start().strip_prefix("<think>").and_then(|rest| rest.split_once("</think>")) {
        Some((_, answer)) => answer.trim_start().to_string(),
        None => content.to_string(),
    }
}

/// Frees the conversation when the remote reply ends, however it ends.
struct RemoteActive {
    shared: Arc<Shared>,
    conversation_id: i64,
}

impl Drop for RemoteActive {
    fn drop(&mut self) {
        let mut q = crate::locks::lock(&self.shared.queue);
        q.remote.retain(|(c, _)| *c != self.conversation_id);
    }
}

/// Runs one remote reply to its end on the calling thread. A panic fails
/// this reply alone, as for local ones: it is recorded and reported.
pub(crate) fn run(
    job: ReplyJob,
    target: RemoteTarget,
    store: Store,
    cancel: CancellationToken,
    shared: Arc<Shared>,
    hooks: TestHooks,
) {
    let active = RemoteActive { shared, conversation_id: job.conversation_id };
    let written = std::sync::Mutex::new(String::new());
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stream(&job, &target, &store, &cancel, active, &written, &hooks)
    }));
    if let Err(panic) = outcome {
        let message = crate::panic_message(&*panic);
        tracing::error!("remote reply {} panicked: {message}", job.reply_id);
        let error = AppError::new(
            ErrorKind::Internal,
            format!("this reply stopped on an internal error ({message}); other conversations are unaffected"),
        );
        let text = crate::locks::lock(&written).clone();
        let status = if text.is_empty() { MessageStatus::Error } else { MessageStatus::Interrupted };
        let stats =
            ReplyStats { finish_reason: "error".into(), error: Some(error.message.clone()), ..Default::default() };
        if let Err(e) = store.update_reply(job.reply_id, &text, status, Some(&stats)) {
            tracing::error!("cannot record a failed reply: {e}");
        }
        (job.events)(GenerationEvent::Error { error });
    }
}

fn stream(
    job: &ReplyJob,
    target: &RemoteTarget,
    store: &Store,
    cancel: &CancellationToken,
    active: RemoteActive,
    written: &std::sync::Mutex<String>,
    hooks: &TestHooks,
) {
    (job.events)(GenerationEvent::Started { reply_id: job.reply_id });
    let request = chat_request(job, &target.model);
    let mut unsent = Unsent::default();
    let mut last_flush = Instant::now();
    let started = Instant::now();
    let result = hearth_remote::stream_chat(&target.endpoint, &request, &|| cancel.is_cancelled(), &mut |piece| {
        let mut text = crate::locks::lock(written);
        text.push_str(piece);
        unsent.text.push_str(piece);
        unsent.send_if_due(&*job.events, 0);
        if last_flush.elapsed() >= FLUSH_INTERVAL {
            if let Err(e) = store.update_reply(job.reply_id, &text, MessageStatus::Streaming, None) {
                tracing::warn!("cannot save a streaming remote reply: {e}");
            }
            last_flush = Instant::now();
        }
    });
    unsent.send(&*job.events, 0);
    let text = crate::locks::lock(written).clone();
    let settings = &job.settings;
    let (status, stats, error) = match result {
        Ok(done) => {
            let generated = done.completion_tokens.unwrap_or(done.chunks);
            let decode_s = done.decode_time.as_secs_f64();
            let stats = ReplyStats {
                prompt_tokens: done.prompt_tokens.unwrap_or(0),
                processed_tokens: done.prompt_tokens.unwrap_or(0).saturating_sub(done.cached_tokens.unwrap_or(0)),
                generated_tokens: generated,
                ttft_ms: done.time_to_first_token.as_secs_f64() * 1e3,
                tokens_per_s: if decode_s > 0.0 { generated.saturating_sub(1) as f64 / decode_s } else { 0.0 },
                finish_reason: finish_reason(&done.finish_reason).to_string(),
                seed: settings.seed,
                temperature: Some(settings.temperature),
                ..Default::default()
            };
            let status =
                if done.finish_reason == "cancelled" { MessageStatus::Interrupted } else { MessageStatus::Complete };
            hooks.panic_if(&text);
            (status, stats, None)
        }
        Err(e) => {
            let error =
                AppError::new(ErrorKind::Remote, format!("{} ({}): {e}", target.model, target.endpoint.base_url));
            // What came before a dropped connection stays, as interrupted.
            let reason = if matches!(e, RemoteError::Dropped(_)) && !text.is_empty() { "interrupted" } else { "error" };
            let stats = ReplyStats {
                finish_reason: reason.into(),
                error: Some(error.message.clone()),
                ttft_ms: started.elapsed().as_secs_f64() * 1e3,
                ..Default::default()
            };
            let status = if text.is_empty() { MessageStatus::Error } else { MessageStatus::Interrupted };
            (status, stats, Some(error))
        }
    };
    let saved = store
        .update_reply(job.reply_id, &text, status, Some(&stats))
        .and_then(|()| store.clear_token_choices(job.reply_id));
    // Free before anyone hears it ended, so a next message is not refused as busy.
    drop(active);
    match (error, saved) {
        (Some(error), _) => (job.events)(GenerationEvent::Error { error }),
        (None, Err(e)) => (job.events)(GenerationEvent::Error { error: e.into() }),
        (None, Ok(())) => (job.events)(GenerationEvent::Finished {
            reason: stats.finish_reason.clone(),
            stats,
            others: Vec::new(),
            tool_calls: Vec::new(),
        }),
    }
}

/// OpenAI's finish reason in the engine's words, which the UI knows.
fn finish_reason(reason: &str) -> &str {
    match reason {
        "stop" => "end_token",
        "length" => "max_tokens",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_reply_goes_back_without_its_reasoning() {
        use super::answer_only;
        assert_eq!(answer_only("<think>\nThe user says hi.\n</think>\n\nHello!"), "Hello!");
        assert_eq!(answer_only("Hello! <think> is a tag."), "Hello! <think> is a tag.");
        assert_eq!(answer_only("<think>\nStill thinking"), "<think>\nStill thinking");
    }
}
