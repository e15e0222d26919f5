//! A client for OpenAI-compatible servers, for conversations that run on a
//! remote engine (vLLM, SGLang, llama.cpp's server, Ollama, LM Studio, exo,
//! or another Hearth): the endpoint's models, and a chat completion
//! streamed over SSE.
//!
//! Every call runs its HTTP on a thread of its own and hands back what
//! arrives through a channel, so Stop returns within `POLL` even from a
//! server that has gone quiet, and the connection closes as soon as that
//! thread next hears from it.

use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

/// An OpenAI-compatible server.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Up to and including `/v1` (e.g. `http://host:8000/v1`).
    pub base_url: String,
    pub api_key: Option<String>,
}

/// Why a remote call failed, as the user should hear it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RemoteError {
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the endpoint refused the API key (401): {message}")]
    Unauthorized { message: String },
    #[error("the endpoint is rate limiting requests (429): {message}; try again later")]
    RateLimited { message: String },
    #[error("the endpoint answered {status}: {message}")]
    Http { status: u16, message: String },
    #[error("the endpoint sent something that is not an OpenAI response: {0}")]
    Malformed(String),
    #[error("the connection to the endpoint dropped mid-reply: {0}")]
    Dropped(String),
    /// Stop, before the endpoint answered (`stream_chat` reports it as a
    /// reply that finished `cancelled`).
    #[error("stopped")]
    Stopped,
}

/// How long a reply may go without a byte before it counts as dropped.
pub const STALL: Duration = Duration::from_secs(120);
/// How often a waiting call checks for Stop.
pub const POLL: Duration = Duration::from_millis(50);
/// The longest line (one SSE event) taken from an endpoint.
pub const MAX_LINE: usize = 1 << 20;

/// One chat completion request. Serialized with the messages last, and
/// everything before them fixed for a conversation, so turn 2's body begins
/// with turn 1's bytes (less its closing `]}`): the prompt a server renders
/// from it is byte-stable and its own prefix cache hits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatRequest {
    pub model: String,
    pub stream: bool,
    pub stream_options: StreamOptions,
    pub temperature: f32,
    pub top_p: f32,
    pub max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    pub messages: Vec<Message>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamOptions {
    pub include_usage: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub role: &'static str,
    pub content: String,
}

impl ChatRequest {
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a chat request serializes")
    }
}

/// How a streamed reply ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Streamed {
    /// OpenAI's words: `stop`, `length`, …; `cancelled` after Stop.
    pub finish_reason: String,
    /// From the server's usage chunk, when it sent one.
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    pub cached_tokens: Option<u32>,
    /// Content chunks received (a server without usage sends about one per token).
    pub chunks: u32,
    pub time_to_first_token: Duration,
    /// From the first content to the last.
    pub decode_time: Duration,
}

/// The ids of the endpoint's models.
pub fn list_models(endpoint: &Endpoint, cancel: &dyn Fn() -> bool) -> Result<Vec<String>, RemoteError> {
    let url = format!("{}/models", endpoint.base_url.trim_end_matches('/'));
    let (status, body) = call(endpoint, &url, None, cancel)?.collect(cancel)?;
    check(status, &body)?;
    let v: Value = serde_json::from_slice(&body)
        .map_err(|e| RemoteError::Malformed(format!("the model list is not JSON ({e})")))?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| RemoteError::Malformed("the model list has no `data`".into()))?;
    Ok(data.iter().filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_string)).collect())
}

/// Streams a chat completion, handing each piece of text to `on_text` as it
/// comes; returns how it ended. A reasoning model's reasoning, which
/// llama.cpp's server, vLLM and Hearth send apart as `reasoning_content`
/// (Ollama as `reasoning`), comes first inside `<think>`…`</think>`: the
/// form Hearth keeps such a reply in, and folds into *Thinking*. Stop (`cancel`) ends it within `POLL` with
/// the finish reason `cancelled`. A connection that ends before the
/// server's `[DONE]` (or finish reason) is `Dropped`, after the text that
/// came.
pub fn stream_chat(
    endpoint: &Endpoint,
    request: &ChatRequest,
    cancel: &dyn Fn() -> bool,
    on_text: &mut dyn FnMut(&str),
) -> Result<Streamed, RemoteError> {
    let url = format!("{}/chat/completions", endpoint.base_url.trim_end_matches('/'));
    let started = Instant::now();
    let lines = match call(endpoint, &url, Some(request.body()), cancel) {
        Err(RemoteError::Stopped) => return Ok(Streamed { finish_reason: "cancelled".into(), ..Streamed::default() }),
        other => other?,
    };
    if lines.status != 200 {
        let (status, body) = lines.collect(cancel)?;
        check(status, &body)?;
        return Err(RemoteError::Http { status, message: "unexpected status".into() });
    }
    let mut out = Streamed::default();
    let (mut first, mut last) = (None, None);
    let mut finished = false;
    let mut reasoning_open = false;
    loop {
        let line = match lines.next(cancel)? {
            Next::Line(l) => l,
            Next::Cancelled => {
                out.finish_reason = "cancelled".into();
                break;
            }
            Next::End if finished => break,
            Next::End => {
                return Err(RemoteError::Dropped("the server closed the stream before the end of the reply".into()))
            }
            Next::Failed(e) => return Err(RemoteError::Dropped(e)),
        };
        let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
        if data == "[DONE]" {
            if !finished {
                return Err(RemoteError::Malformed("the stream ended without a finish reason".into()));
            }
            break;
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| RemoteError::Malformed(format!("a stream chunk is not JSON ({e}): {}", clip(data))))?;
        if let Some(error) = chunk.get("error") {
            return Err(RemoteError::Http { status: 200, message: error_message(error) });
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let n = |v: Option<&Value>| v.and_then(Value::as_u64).map(|x| x as u32);
            out.prompt_tokens = n(usage.get("prompt_tokens"));
            out.completion_tokens = n(usage.get("completion_tokens"));
            out.cached_tokens = n(usage.pointer("/prompt_tokens_details/cached_tokens"));
        }
        let choices = chunk
            .get("choices")
            .and_then(Value::as_array)
            .ok_or_else(|| RemoteError::Malformed(format!("a stream chunk has no `choices`: {}", clip(data))))?;
        for choice in choices.iter().filter(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0) {
            let piece = |key: &str| choice.pointer(key).and_then(Value::as_str).filter(|t| !t.is_empty());
            let reasoning = piece("/delta/reasoning_content").or_else(|| piece("/delta/reasoning"));
            let content = piece("/delta/content");
            if reasoning.is_some() || content.is_some() {
                let now = Instant::now();
                first.get_or_insert(now);
                last = Some(now);
                out.chunks += 1;
            }
            if let Some(r) = reasoning {
                if !reasoning_open {
                    on_text("<think>\n");
                    reasoning_open = true;
                }
                on_text(r);
            }
            if let Some(text) = content {
                if reasoning_open {
                    on_text("\n</think>\n\n");
                    reasoning_open = false;
                }
                on_text(text);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                out.finish_reason = reason.to_string();
                finished = true;
            }
        }
    }
    if reasoning_open {
        on_text("\n</think>");
    }
    if let (Some(f), Some(l)) = (first, last) {
        out.time_to_first_token = f - started;
        out.decode_time = l - f;
    }
    Ok(out)
}

/// A status that is not 200 as the error it means.
fn check(status: u16, body: &[u8]) -> Result<(), RemoteError> {
    if status == 200 {
        return Ok(());
    }
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").map(error_message))
        .unwrap_or_else(|| clip(&String::from_utf8_lossy(body)).to_string());
    Err(match status {
        401 | 403 => RemoteError::Unauthorized { message },
        429 => RemoteError::RateLimited { message },
        _ => RemoteError::Http { status, message },
    })
}

fn error_message(error: &Value) -> String {
    error.get("message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| error.to_string())
}

fn clip(s: &str) -> &str {
    match s.char_indices().nth(200) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A call in progress on its own thread.
struct Lines {
    status: u16,
    rx: mpsc::Receiver<Result<String, String>>,
}

enum Next {
    Line(String),
    End,
    Cancelled,
    Failed(String),
}

/// Starts a GET (or a POST of `body`) and waits for the status.
fn call(
    endpoint: &Endpoint,
    url: &str,
    body: Option<Vec<u8>>,
    cancel: &dyn Fn() -> bool,
) -> Result<Lines, RemoteError> {
    let (tx, rx) = mpsc::sync_channel::<Result<String, String>>(64);
    let (status_tx, status_rx) = mpsc::sync_channel::<Result<u16, String>>(1);
    let (url_owned, key) = (url.to_string(), endpoint.api_key.clone());
    std::thread::Builder::new()
        .name("hearth-remote".into())
        .spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .timeout_connect(Some(Duration::from_secs(10)))
                .timeout_recv_response(Some(STALL))
                .http_status_as_error(false)
                .build()
                .into();
            let auth = key.filter(|k| !k.is_empty()).map(|k| format!("Bearer {k}"));
            let response = match body {
                Some(body) => {
                    let mut r = agent
                        .post(&url_owned)
                        .header("Content-Type", "application/json")
                        .header("Accept", "text/event-stream");
                    if let Some(a) = &auth {
                        r = r.header("Authorization", a);
                    }
                    r.send(&body[..])
                }
                None => {
                    let mut r = agent.get(&url_owned);
                    if let Some(a) = &auth {
                        r = r.header("Authorization", a);
                    }
                    r.call()
                }
            };
            let response = match response {
                Ok(r) => r,
                Err(e) => {
                    let _ = status_tx.send(Err(e.to_string()));
                    return;
                }
            };
            if status_tx.send(Ok(response.status().as_u16())).is_err() {
                return;
            }
            let mut reader = BufReader::new(response.into_body().into_reader());
            loop {
                let mut line = Vec::new();
                let read = (&mut reader).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line);
                let sent = match read {
                    Ok(0) => return,
                    Ok(_) if line.len() > MAX_LINE => {
                        let _ = tx.send(Err(format!("a line of the answer is over {} MiB", MAX_LINE >> 20)));
                        return;
                    }
                    Ok(_) => {
                        while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                            line.pop();
                        }
                        tx.send(Ok(String::from_utf8_lossy(&line).into_owned()))
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                // Stop dropped the receiver: this drops the connection.
                if sent.is_err() {
                    return;
                }
            }
        })
        .map_err(|e| RemoteError::Unreachable { url: url.to_string(), reason: e.to_string() })?;
    let waiting = Instant::now();
    loop {
        match status_rx.recv_timeout(POLL) {
            Ok(Ok(status)) => return Ok(Lines { status, rx }),
            Ok(Err(reason)) => return Err(RemoteError::Unreachable { url: url.to_string(), reason }),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(RemoteError::Unreachable { url: url.to_string(), reason: "the request failed".into() })
            }
            Err(mpsc::RecvTimeoutError::Timeout) if cancel() => return Err(RemoteError::Stopped),
            Err(mpsc::RecvTimeoutError::Timeout) if waiting.elapsed() > STALL => {
                return Err(RemoteError::Unreachable {
                    url: url.to_string(),
                    reason: format!("no answer in {} s", STALL.as_secs()),
                })
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
}

impl Lines {
    fn next(&self, cancel: &dyn Fn() -> bool) -> Result<Next, RemoteError> {
        let waiting = Instant::now();
        loop {
            if cancel() {
                return Ok(Next::Cancelled);
            }
            match self.rx.recv_timeout(POLL) {
                Ok(Ok(line)) => return Ok(Next::Line(line)),
                Ok(Err(e)) => return Ok(Next::Failed(e)),
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(Next::End),
                Err(mpsc::RecvTimeoutError::Timeout) if waiting.elapsed() > STALL => {
                    return Ok(Next::Failed(format!("nothing for {} s", STALL.as_secs())))
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// The whole body (for an error or a model list), up to 4 MiB.
    fn collect(self, cancel: &dyn Fn() -> bool) -> Result<(u16, Vec<u8>), RemoteError> {
        let mut body = Vec::new();
        loop {
            match self.next(cancel)? {
                Next::Line(l) => {
                    body.extend_from_slice(l.as_bytes());
                    body.push(b'\n');
                    if body.len() > 4 << 20 {
                        return Err(RemoteError::Malformed("the answer is over 4 MiB".into()));
                    }
                }
                Next::End => return Ok((self.status, body)),
                Next::Cancelled => return Err(RemoteError::Stopped),
                Next::Failed(e) => return Err(RemoteError::Dropped(e)),
            }
        }
    }
}
