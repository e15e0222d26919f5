//! Fitting a conversation into the context: what the overflow policy keeps
//! when the whole history no longer fits.

use hearth_engine::{ChatMessage, Role};
use hearth_store::{ConversationSettings, OverflowPolicy};

/// The context a conversation runs with (its setting, capped by the
/// model's; 0 means the model's) and the tokens reserved for the reply.
pub fn window(settings: &ConversationSettings, model_context: usize) -> (usize, usize) {
    let context = if settings.context_length == 0 {
        model_context
    } else {
        (settings.context_length as usize).min(model_context)
    };
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
///
/// Messages go oldest first after the protected ones, a reply with its
/// question, so the kept list after any number of drops is the protected
/// head plus a tail: the fewest drops that fit are found by bisection, with
/// a few counts rather than one per message (a thousand-message thread
/// would otherwise render and tokenize its history a thousand times).
pub fn fit<E>(
    messages: &[ChatMessage],
    policy: OverflowPolicy,
    context: usize,
    reserve: usize,
    mut count: impl FnMut(&[ChatMessage]) -> Result<usize, E>,
) -> Result<Fitted, E> {
    let tokens = count(messages)?;
    let system = usize::from(messages.first().is_some_and(|m| m.role == Role::System));
    // Keep the first exchange too when truncating the middle.
    let protected = match policy {
        OverflowPolicy::StopAtLimit => return Ok(Fitted { messages: messages.to_vec(), dropped: 0, tokens }),
        OverflowPolicy::TruncateMiddle => system + 2,
        OverflowPolicy::RollingWindow => system,
    };
    if tokens + reserve <= context {
        return Ok(Fitted { messages: messages.to_vec(), dropped: 0, tokens });
    }
    // How many messages each successive drop step has removed in all.
    let n = messages.len();
    let mut steps = vec![0usize];
    let mut d = 0;
    while n - d > protected + 1 {
        d += 1;
        // A reply without its question reads oddly to the model: drop it too.
        if n - d > protected + 1 && messages[protected + d].role == Role::Assistant {
            d += 1;
        }
        steps.push(d);
    }
    let kept = |d: usize| -> Vec<ChatMessage> {
        messages[..protected.min(n)].iter().chain(&messages[(protected + d).min(n)..]).cloned().collect()
    };
    // The fewest steps whose prompt fits, or every step when none does.
    let (mut lo, mut hi) = (1, steps.len() - 1);
    let mut best = None;
    while lo <= hi {
        let mid = (lo + hi) / 2;
        let t = count(&kept(steps[mid]))?;
        if t + reserve <= context {
            best = Some((mid, t));
            if mid == 1 {
                break;
            }
            hi = mid - 1;
        } else {
            lo = mid + 1;
        }
    }
    let (step, tokens) = match best {
        Some(found) => found,
        None => {
            let last = steps.len() - 1;
            (last, if last == 0 { tokens } else { count(&kept(steps[last]))? })
        }
    };
    Ok(Fitted { messages: kept(steps[step]), dropped: steps[step], tokens })
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

    #[test]
    fn a_thousand_message_thread_is_fitted_with_a_few_counts() {
        let long = chat(500);
        let mut calls = 0;
        let f = fit(&long, OverflowPolicy::RollingWindow, 1000, 100, |m| {
            calls += 1;
            count(m)
        })
        .unwrap();
        // 90 messages of 10 tokens fit in 1000 - 100: the system prompt, the
        // latest 44 turns and the new message; whole turns are dropped.
        assert_eq!(f.tokens, 900);
        assert_eq!(texts(&f)[..2], ["sys", "u456"]);
        assert_eq!(f.dropped, 1002 - 90);
        assert!(calls <= 12, "{calls} counts");
    }
}
