//! `Reply`: one request's worker events turned into OpenAI's shapes, as
//! stream chunks while they come or as one response at the end.

use std::sync::Arc;

use hearth_engine::{ReasoningFormat, ToolCall, ToolFormat};
use hearth_store::{ReplyStats, TokenChoice};
use hearth_worker::Worker;
use serde_json::{json, Value};

use axum::response::sse::Event;

use crate::choice::ChoiceText;
use crate::run::data;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// What one request has produced so far.
pub struct Reply {
    endpoint: Endpoint,
    id: String,
    created: u64,
    model: String,
    /// For the tokens' text: the engine is asked for when needed, never
    /// held, so a waiting request does not keep a replaced model in memory.
    worker: Arc<Worker>,
    logprobs: Option<usize>,
    include_usage: bool,
    texts: Vec<String>,
    choices: Vec<Vec<TokenChoice>>,
    /// Each choice's text length so far in bytes (completions' `text_offset`).
    offsets: Vec<usize>,
    /// Whether a choice's first chunk (the chat role) went out.
    opened: Vec<bool>,
    /// Each chat choice's text taken apart into reasoning, content and
    /// calls as it streams.
    parts: Vec<ChoiceText>,
    /// Each call's id starts with this.
    call_prefix: String,
}

/// How a request ended: each choice's finish reason and the usage.
pub struct Ended {
    reasons: Vec<&'static str>,
    usage: Value,
    /// As llama.cpp's server reports them: the prompt tokens run and how
    /// long until the first token, and the generation speed (of the first
    /// choice), measured inside the engine.
    timings: Value,
}

impl Reply {
    #[allow(
        clippy::too_many_arguments,
        reason = "the request's choices as the handler read them, each used once to set the stream up"
    )]
    pub fn new(
        endpoint: Endpoint,
        model: String,
        worker: Arc<Worker>,
        n: usize,
        logprobs: Option<usize>,
        include_usage: bool,
        reasoning: Option<(ReasoningFormat, bool)>,
        tools: Option<ToolFormat>,
    ) -> Self {
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let prefix = if endpoint == Endpoint::Chat { "chatcmpl" } else { "cmpl" };
        Self {
            endpoint,
            id: format!("{prefix}-{}", random_hex()),
            created,
            model,
            worker,
            logprobs,
            include_usage,
            texts: vec![String::new(); n],
            choices: vec![Vec::new(); n],
            offsets: vec![0; n],
            opened: vec![false; n],
            parts: vec![ChoiceText::new(reasoning, tools); n],
            call_prefix: format!("call_{}_", random_hex()),
        }
    }

    /// A choice's calls, and its content without them (with tools offered).
    fn calls(&self, variant: usize) -> Option<(String, Vec<ToolCall>)> {
        self.parts[variant].calls(&format!("{}{variant}_", self.call_prefix))
    }

    /// A chat delta for `text`: with a reasoning model, its reasoning and
    /// answer apart (`reasoning_content`, `content`); `None` when all of it
    /// is markup or waits.
    fn delta(&mut self, variant: usize, text: &str, end: bool) -> Option<Value> {
        let part = &mut self.parts[variant];
        let piece = if end { part.push_last(text) } else { part.push(text) };
        if !part.splits() {
            let open = !end && !part.has_tools();
            return (!piece.content.is_empty() || open).then(|| json!({"content": piece.content}));
        }
        let mut delta = serde_json::Map::new();
        if !piece.reasoning.is_empty() {
            delta.insert("reasoning_content".into(), piece.reasoning.into());
        }
        if !piece.content.is_empty() {
            delta.insert("content".into(), piece.content.into());
        }
        (!delta.is_empty()).then_some(Value::Object(delta))
    }

    /// Keeps a `tokens` event's text and choices; returns the chunks to
    /// stream for it.
    pub fn tokens(&mut self, text: String, variant: usize, choices: Vec<TokenChoice>) -> Vec<Value> {
        let Some(slot) = self.texts.get_mut(variant) else { return Vec::new() };
        // The end token is no part of the reply: not among its log-probabilities.
        let mut choices = choices;
        if self.logprobs.is_some() {
            if let Some(engine) = self.worker.engine() {
                choices.retain(|c| !engine.end_tokens().contains(&c.id));
            }
        }
        slot.push_str(&text);
        let logprobs = self.logprobs.map(|_| self.logprobs_json(&choices, self.offsets[variant]));
        self.offsets[variant] += text.len();
        self.choices[variant].extend(choices);
        let mut chunks = Vec::new();
        if self.endpoint == Endpoint::Chat && !self.opened[variant] {
            self.opened[variant] = true;
            chunks.push(self.chunk(json!({"index": variant, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null})));
        }
        let choice = match self.endpoint {
            Endpoint::Chat => match self.delta(variant, &text, false) {
                Some(delta) => json!({"index": variant, "delta": delta, "logprobs": logprobs, "finish_reason": null}),
                None if logprobs.is_some() => {
                    json!({"index": variant, "delta": {}, "logprobs": logprobs, "finish_reason": null})
                }
                None => return chunks,
            },
            Endpoint::Completion => {
                json!({"index": variant, "text": text, "logprobs": logprobs, "finish_reason": null})
            }
        };
        chunks.push(self.chunk(choice));
        chunks
    }

    /// The end, from a `finished` event's stats (variant 0's and the others').
    pub fn ended(&self, stats: &ReplyStats, others: &[ReplyStats]) -> Ended {
        let all: Vec<&ReplyStats> = std::iter::once(stats).chain(others).collect();
        let completion: u32 = all.iter().map(|s| completion_tokens(s)).sum();
        let usage = json!({
            "prompt_tokens": stats.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": stats.prompt_tokens + completion,
            // The prompt's tokens that came from a cache rather than being run.
            "prompt_tokens_details": {"cached_tokens": stats.prompt_tokens.saturating_sub(stats.processed_tokens)},
        });
        let timings = json!({
            "prompt_n": stats.processed_tokens,
            "prompt_ms": stats.ttft_ms,
            "predicted_n": stats.generated_tokens,
            "predicted_per_second": stats.tokens_per_s,
        });
        Ended { reasons: all.iter().map(|s| finish_reason(&s.finish_reason)).collect(), usage, timings }
    }

    /// The stream's last chunks: each choice's finish reason, then the usage
    /// when asked for.
    pub fn final_chunks(&mut self, ended: &Ended) -> Vec<Value> {
        let mut chunks = Vec::new();
        for (i, reason) in ended.reasons.iter().enumerate() {
            if self.endpoint == Endpoint::Chat && !self.opened[i] {
                self.opened[i] = true;
                chunks.push(self.chunk(json!({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null})));
            }
            if self.endpoint == Endpoint::Chat && self.parts[i].splits() {
                // What waited for more text (a tag that never came) goes out.
                if let Some(delta) = self.delta(i, "", true) {
                    chunks
                        .push(self.chunk(json!({"index": i, "delta": delta, "logprobs": null, "finish_reason": null})));
                }
            }
            let mut reason = *reason;
            if self.endpoint == Endpoint::Chat && self.parts[i].has_tools() {
                match self.calls(i) {
                    Some((_, calls)) => {
                        let deltas: Vec<Value> = calls.iter().enumerate().map(|(k, c)| call_json(c, Some(k))).collect();
                        chunks.push(self.chunk(json!({"index": i, "delta": {"tool_calls": deltas}, "logprobs": null, "finish_reason": null})));
                        if reason == "stop" {
                            reason = "tool_calls";
                        }
                    }
                    None => {
                        // No call after all: what waited is content.
                        let rest = self.parts[i].unsent(reason == "length");
                        if !rest.is_empty() {
                            chunks.push(self.chunk(json!({"index": i, "delta": {"content": rest}, "logprobs": null, "finish_reason": null})));
                        }
                    }
                }
            }
            let choice = match self.endpoint {
                Endpoint::Chat => json!({"index": i, "delta": {}, "logprobs": null, "finish_reason": reason}),
                Endpoint::Completion => json!({"index": i, "text": "", "logprobs": null, "finish_reason": reason}),
            };
            let mut chunk = self.chunk(choice);
            chunk["timings"] = ended.timings.clone();
            chunks.push(chunk);
        }
        if self.include_usage {
            let mut usage = self.chunk(Value::Null);
            usage["choices"] = json!([]);
            usage["usage"] = ended.usage.clone();
            chunks.push(usage);
        }
        chunks
    }

    /// The whole response, for a request that did not stream.
    pub fn response(&mut self, ended: &Ended) -> Value {
        if self.endpoint == Endpoint::Chat {
            for part in &mut self.parts {
                part.finish();
            }
        }
        let choices: Vec<Value> = (0..self.texts.len())
            .map(|i| {
                let logprobs = self.logprobs.map(|_| self.logprobs_json(&self.choices[i], 0));
                let mut reason = ended.reasons.get(i).copied().unwrap_or("stop");
                let mut message = json!({"role": "assistant", "content": self.texts[i], "refusal": null});
                if self.parts[i].splits() {
                    message["content"] = self.parts[i].answer().into();
                    if !self.parts[i].reasoning().is_empty() {
                        message["reasoning_content"] = self.parts[i].reasoning().into();
                    }
                }
                if self.endpoint == Endpoint::Chat {
                    if self.parts[i].has_tools() {
                        message["content"] = self.parts[i].content(reason == "length").into();
                    }
                    if let Some((content, calls)) = self.calls(i) {
                        message["content"] = if content.is_empty() { Value::Null } else { content.into() };
                        message["tool_calls"] = calls.iter().map(|c| call_json(c, None)).collect();
                        if reason == "stop" {
                            reason = "tool_calls";
                        }
                    }
                }
                match self.endpoint {
                    Endpoint::Chat => {
                        json!({"index": i, "message": message, "logprobs": logprobs, "finish_reason": reason})
                    }
                    Endpoint::Completion => {
                        json!({"index": i, "text": self.texts[i], "logprobs": logprobs, "finish_reason": reason})
                    }
                }
            })
            .collect();
        json!({
            "id": self.id,
            "object": if self.endpoint == Endpoint::Chat { "chat.completion" } else { "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": hearth_engine::BUILD_ID,
            "choices": choices,
            "usage": ended.usage,
            "timings": ended.timings,
        })
    }

    fn chunk(&self, choice: Value) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": if self.endpoint == Endpoint::Chat { "chat.completion.chunk" } else { "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": hearth_engine::BUILD_ID,
            "choices": [choice],
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// Tokens' log-probabilities in the endpoint's shape; `at` is where
    /// their text begins in the choice's text.
    fn logprobs_json(&self, choices: &[TokenChoice], at: usize) -> Value {
        let Some(engine) = self.worker.engine() else { return Value::Null };
        let tokenizer = engine.tokenizer();
        let bytes = |id: u32| tokenizer.token_bytes(id).to_vec();
        let text = |id: u32| String::from_utf8_lossy(tokenizer.token_bytes(id)).into_owned();
        let k = self.logprobs.unwrap_or(0);
        match self.endpoint {
            Endpoint::Chat => json!({"content": choices
                .iter()
                .map(|c| json!({
                    "token": text(c.id),
                    "logprob": c.logprob,
                    "bytes": bytes(c.id),
                    "top_logprobs": c.top.iter().take(k).map(|&(id, lp)| json!({"token": text(id), "logprob": lp, "bytes": bytes(id)})).collect::<Vec<_>>(),
                }))
                .collect::<Vec<_>>(), "refusal": null}),
            Endpoint::Completion => {
                let mut offset = at;
                let offsets: Vec<usize> = choices
                    .iter()
                    .map(|c| {
                        let at = offset;
                        offset += tokenizer.token_bytes(c.id).len();
                        at
                    })
                    .collect();
                json!({
                    "tokens": choices.iter().map(|c| text(c.id)).collect::<Vec<_>>(),
                    "token_logprobs": choices.iter().map(|c| c.logprob).collect::<Vec<_>>(),
                    "top_logprobs": choices.iter().map(|c| c.top.iter().take(k).map(|&(id, lp)| (text(id), json!(lp))).collect::<serde_json::Map<_, _>>()).collect::<Vec<_>>(),
                    "text_offset": offsets,
                })
            }
        }
    }
}

/// The engine's finish reason in OpenAI's words.
/// A call as OpenAI sends it (with its `index` in a stream's delta).
fn call_json(c: &ToolCall, index: Option<usize>) -> Value {
    let mut v = json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}});
    if let Some(k) = index {
        v["index"] = k.into();
    }
    v
}

/// A reply's tokens as the APIs count them: without the end token that
/// finished it, which is no part of its text.
pub(crate) fn completion_tokens(stats: &ReplyStats) -> u32 {
    stats.generated_tokens.saturating_sub(u32::from(stats.finish_reason == "end_token"))
}

fn finish_reason(reason: &str) -> &'static str {
    match reason {
        "max_tokens" | "cache_full" => "length",
        _ => "stop",
    }
}

/// 24 hex digits for a response id: unique enough, from the OS-seeded hasher.
pub(crate) fn random_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    let word = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.finish()
    };
    format!("{:016x}{:08x}", word(), word() as u32)
}

/// Chat completions and completions stream `data:` chunks and end with `[DONE]`.
impl crate::run::Shape for Reply {
    fn tokens(&mut self, text: String, variant: usize, choices: Vec<TokenChoice>) -> Vec<Event> {
        Reply::tokens(self, text, variant, choices).iter().map(data).collect()
    }

    fn finished(&mut self, stats: &ReplyStats, others: &[ReplyStats]) -> Vec<Event> {
        let ended = self.ended(stats, others);
        let mut events: Vec<Event> = self.final_chunks(&ended).iter().map(data).collect();
        events.push(Event::default().data("[DONE]"));
        events
    }

    fn whole(&mut self, stats: &ReplyStats, others: &[ReplyStats]) -> Value {
        let ended = self.ended(stats, others);
        self.response(&ended)
    }

    fn failed(&mut self, error: crate::ApiError) -> Vec<Event> {
        vec![data(&error.body())]
    }
}
