//! The conversation as the model sees it, read from the store: what every
//! reply's prompt is built from.

use hearth_engine::ChatMessage;
use hearth_store::{ConversationSettings, Message, Role, Store};

use crate::error::AppResult;

/// The system prompt, then the path from the root to `upto`, with each
/// reply's own tokens where they are known, so the next prompt continues
/// its cache exactly (a reply's text may tokenize otherwise; a hybrid
/// model's cache would then go back to an earlier checkpoint).
pub fn prompt_messages(
    store: &Store,
    conversation_id: i64,
    upto: Option<i64>,
) -> AppResult<(Vec<ChatMessage>, ConversationSettings)> {
    let settings = store.conversation_settings(conversation_id)?;
    let mut messages = Vec::new();
    if !settings.system_prompt.trim().is_empty() {
        messages.push(ChatMessage::system(settings.system_prompt.clone()));
    }
    if let Some(id) = upto {
        for m in store.path_to(id)? {
            let ids = reply_ids(store, &m)?;
            let role = match m.role {
                Role::System => hearth_engine::Role::System,
                Role::User => hearth_engine::Role::User,
                Role::Assistant => hearth_engine::Role::Assistant,
            };
            let calls = if m.role == Role::Assistant { store.tool_calls(m.id)? } else { Vec::new() };
            let mut message = ChatMessage::new(role, m.content);
            if let Some(ids) = ids.filter(|_| calls.is_empty()) {
                message = message.with_ids(ids);
            }
            if calls.is_empty() {
                messages.push(message);
                continue;
            }
            // A reply that called tools, then each call's result as the
            // model reads it: the tool's text, or why there is none.
            message.tool_calls = Some(
                calls
                    .iter()
                    .map(|c| hearth_engine::ToolCall {
                        id: c.call_id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
            );
            messages.push(message);
            for c in calls {
                let mut result = ChatMessage::new(hearth_engine::Role::Tool, tool_result_text(&c));
                result.tool_call_id = Some(c.call_id);
                messages.push(result);
            }
        }
    }
    Ok((messages, settings))
}

/// The tokens reply `m` was sampled as: from its kept token choices, else
/// from its replay record (an imported conversation carries that, not the
/// choices). The engine uses them only where they decode to the text.
fn reply_ids(store: &Store, m: &Message) -> AppResult<Option<Vec<u32>>> {
    if m.role != Role::Assistant {
        return Ok(None);
    }
    if let Some(choices) = store.token_choices(m.id)? {
        return Ok(Some(choices.tokens.iter().map(|c| c.id).collect()));
    }
    Ok(m.stats.as_ref().and_then(|s| s.replay.as_ref()).map(|r| r.tokens.clone()).filter(|t| !t.is_empty()))
}

/// What the model reads back for a call.
fn tool_result_text(c: &hearth_store::ToolCallRecord) -> String {
    use hearth_store::ToolCallStatus as S;
    match c.status {
        S::Ok => c.result.clone(),
        S::Error => format!("The tool reported an error: {}", c.result),
        S::Denied => "The user did not allow this call.".into(),
        S::Stopped => format!("The call was stopped. {}", c.result).trim_end().to_string(),
        S::Failed => format!("The call failed: {}", c.result),
        S::Pending => "The call has not run.".into(),
    }
}
