//! Fitting a conversation into the context: what the overflow policy keeps
//! when the whole history no longer fits.

use hearth_engine::{ChatMessage, Role};
use hearth_store::{ConversationSettings, OverflowPolicy};

/// The context a conversation runs with (its setting, capped by the
/// model's; 0 means the model's) and the tokens reserved for the reply.
pub fn window(settings: &ConversationSettings, model_context: usize) -> (usize, usize) {
    let context = if settings.context_length == 0 { model_context } else { (settings.context_length as usize).min(model_context) };
    let reserve = (settings.max_new_tokens as usize).min(context / 4);
    (context, reserve)
}

/// The messages to send, and how many earlier ones were left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub messages: Vec<ChatMessage>,
    pub dropped: usize,
    /// Prompt tokens of what is kept.
    pub tokens: usize,
}

/// Drops messages by `policy` until the prompt plus `reserve` tokens for the
/// reply fit `context`. The system prompt and the newest message are always
/// kept; `StopAtLimit` drops nothing. `count` gives a prompt's token count.
pub fn fit<E>(
    messages: &[ChatMessage],
    policy: OverflowPolicy,
    context: usize,
    reserve: usize,
    mut count: impl FnMut(&[ChatMessage]) -> Result<usize, E>,
) -> Result<Fitted, E> {
    let mut kept: Vec<ChatMessage> = messages.to_vec();
    let mut tokens = count(&kept)?;
    let mut dropped = 0;
    let system = usize::from(kept.first().is_some_and(|m| m.role == Role::System));
    // Keep the first exchange too when truncating the middle.
    let protected = match policy {
        OverflowPolicy::StopAtLimit => return Ok(Fitted { messages: kept, dropped, tokens }),
        OverflowPolicy::TruncateMiddle => system + 2,
        OverflowPolicy::RollingWindow => system,
    };
    while tokens + reserve > context && kept.len() > protected + 1 {
        kept.remove(protected);
        dropped += 1;
        // A reply without its question reads oddly to the model: drop it too.
        if kept.len() > protected + 1 && kept[protected].role == Role::Assistant {
            kept.remove(protected);
            dropped += 1;
        }
        tokens = count(&kept)?;
    }
    Ok(Fitted { messages: kept, dropped, tokens })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(turns: usize) -> Vec<ChatMessage> {
        let mut m = vec![ChatMessage::system("sys")];
        for i in 0..turns {
            m.push(ChatMessage::user(format!("u{i}")));
            m.push(ChatMessage::assistant(format!("a{i}")));
        }
        m.push(ChatMessage::user("new"));
        m
    }

    /// Ten tokens a message.
    fn count(m: &[ChatMessage]) -> Result<usize, ()> {
        Ok(m.len() * 10)
    }

    fn texts(f: &Fitted) -> Vec<&str> {
        f.messages.iter().map(|m| m.content.as_str()).collect()
    }

    #[test]
    fn stop_at_limit_keeps_everything() {
        let f = fit(&chat(5), OverflowPolicy::StopAtLimit, 50, 0, count).unwrap();
        assert_eq!((f.dropped, f.tokens), (0, 120));
    }

    #[test]
    fn truncate_middle_keeps_the_system_prompt_and_first_turn() {
        let f = fit(&chat(5), OverflowPolicy::TruncateMiddle, 70, 0, count).unwrap();
        assert_eq!(texts(&f), ["sys", "u0", "a0", "u4", "a4", "new"]);
        assert_eq!(f.dropped, 6);
        assert_eq!(f.tokens, 60);
    }

    #[test]
    fn rolling_window_keeps_the_system_prompt_and_latest_turns() {
        let f = fit(&chat(5), OverflowPolicy::RollingWindow, 50, 10, count).unwrap();
        assert_eq!(texts(&f), ["sys", "u4", "a4", "new"]);
        assert_eq!(f.dropped, 8);
    }

    #[test]
    fn the_newest_message_always_stays() {
        let f = fit(&chat(2), OverflowPolicy::RollingWindow, 5, 0, count).unwrap();
        assert_eq!(texts(&f), ["sys", "new"]);
        let f = fit(&[ChatMessage::user("only")], OverflowPolicy::RollingWindow, 1, 0, count).unwrap();
        assert_eq!(texts(&f), ["only"]);
    }
}
