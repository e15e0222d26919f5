//! One request's run on the worker, the same for every endpoint: `start`
//! compiles its grammar, queues its job and waits until the prompt is known
//! to fit (until then a failure is still an HTTP status); `respond` turns
//! the job's events into the endpoint's `Shape`, streamed or whole.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{ReasoningFormat, ToolFormat};
use hearth_store::{ReplyStats, TokenChoice};
use hearth_worker::events::GenerationEvent;
use hearth_worker::{CompiledGrammar, ReplyJob, Request};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::{loaded, worker_gone, Api, ApiError, Generation};

/// A queued request whose prompt fits.
pub(crate) struct Started {
    pub model: String,
    /// A chat reply's reasoning format and whether the prompt opened it.
    pub reasoning: Option<(ReasoningFormat, bool)>,
    /// Where tools were offered: the form their calls take.
    pub tools: Option<ToolFormat>,
    /// The prompt's size, once the worker has fitted it.
    prompt: Option<PromptSize>,
    events: mpsc::UnboundedReceiver<GenerationEvent>,
    /// Events read while waiting for the prompt to fit.
    early: VecDeque<GenerationEvent>,
    /// Dropped with the response (a client that goes away), it stops the job.
    guard: hearth_worker::DropGuard,
}

/// A prompt's tokens, and how many of them the cache already held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PromptSize {
    pub tokens: u32,
    pub cached: u32,
}

/// An endpoint's form of a reply.
pub(crate) trait Shape: Send + 'static {
    /// Events before any token; `prompt` is the prompt's size where the
    /// worker told it (a remote reply's is not known).
    fn opening(&mut self, _prompt: Option<PromptSize>) -> Vec<Event> {
        Vec::new()
    }
    /// Takes new text of sequence `variant`; the events to stream for it.
    fn tokens(&mut self, text: String, variant: usize, choices: Vec<TokenChoice>) -> Vec<Event>;
    /// The stream's last events.
    fn finished(&mut self, stats: &ReplyStats, others: &[ReplyStats]) -> Vec<Event>;
    /// The body of a response that did not stream.
    fn whole(&mut self, stats: &ReplyStats, others: &[ReplyStats]) -> Value;
    /// The event that ends a stream that fails after it began.
    fn failed(&mut self, error: ApiError) -> Vec<Event>;
    /// A failure before anything was sent, in the API's error shape.
    fn error_response(&self, error: ApiError) -> Response {
        error.into_response()
    }
    /// What keeps an idle stream open (SSE comments unless the API has its own).
    fn keep_alive(&self) -> KeepAlive {
        KeepAlive::default()
    }
}

/// Queues `g`'s job; returns once the prompt is known to fit. `chat`: the
/// reply is read for reasoning and tool calls.
pub(crate) async fn start(api: &Api, g: &Generation, chat: bool) -> Result<Started, ApiError> {
    let (model, engine) = loaded(&api.worker)?;
    too_long_to_read(g, &engine)?;
    let (tx, mut events) = mpsc::unbounded_channel();
    // A grammar is compiled for the loaded model before the job is queued,
    // so that a bad one is a 400 naming what is wrong; the job keeps it.
    let compile = |spec: &hearth_engine::GrammarSpec, field: &'static str| {
        engine.compile_grammar(spec).map_err(|e| {
            let message = match e {
                hearth_engine::EngineError::InvalidSetting { reason, .. } => reason,
                other => other.to_string(),
            };
            ApiError::field(field, message)
        })
    };
    let asked = g.grammar.as_ref().map(|spec| compile(spec, g.grammar_field)).transpose()?;
    let calls = g.tools.call_grammar(engine.tool_format()).map(|spec| compile(&spec, "tools")).transpose()?;
    // The reply follows the grammar asked for where there is one (`job_config`).
    let grammar = asked.or(calls);
    let request = Request {
        logprobs: g.logprobs,
        raw_prompt: g.raw_prompt.clone().map(hearth_worker::RawPrompt::Text),
        grammar: g.grammar.clone(),
        compiled: grammar.map(|grammar| CompiledGrammar { engine: engine.clone(), grammar }),
        ..Request::default()
    };
    let mut job = ReplyJob::for_request(
        g.messages.clone(),
        g.settings.clone(),
        g.n,
        request,
        Box::new(move |e| drop(tx.send(e))),
    );
    job.tools = g.tools.clone();
    // The job is a child of the server's: stopping the server stops it.
    let guard = api.worker.submit_under(job, &api.shutdown)?.drop_guard();
    // A chat reply's reasoning goes out apart from its answer, as llama.cpp's
    // server and vLLM send it.
    let reasoning = if chat {
        engine.reasoning().map(|format| (format.clone(), format.opened_with(g.settings.thinking)))
    } else {
        None
    };
    // A reply held to a grammar asked for cannot hold a call: read as text.
    let tools = (chat && g.tools.offered() && g.grammar.is_none()).then(|| engine.tool_format());

    let mut early = VecDeque::new();
    let mut prompt = None;
    loop {
        match events.recv().await {
            None => return Err(worker_gone()),
            Some(GenerationEvent::Queued { .. } | GenerationEvent::Started { .. }) => {}
            Some(GenerationEvent::Prompt { tokens, cached }) => prompt = Some(PromptSize { tokens, cached }),
            Some(GenerationEvent::Error { error }) => return Err(error.into()),
            Some(event) => {
                early.push_back(event);
                break;
            }
        }
    }
    Ok(Started { model, reasoning, tools, prompt, events, early, guard })
}

/// Refuses a prompt too long for the context whatever its tokens, from
/// its size alone: more bytes than the context's worth of the vocabulary's
/// longest token. Tokenizing a prompt of megabytes would hold the worker,
/// and every chat's reply with it, for seconds only to refuse it then.
fn too_long_to_read(g: &Generation, engine: &hearth_engine::Engine) -> Result<(), ApiError> {
    // Not the replies' reasoning, which many templates leave out of earlier turns.
    let text = |m: &hearth_engine::ChatMessage| {
        m.content.len() + m.tool_calls.iter().flatten().map(|c| c.name.len() + c.arguments.len()).sum::<usize>()
    };
    let bytes = g.messages.iter().map(text).sum::<usize>() + g.raw_prompt.as_ref().map_or(0, String::len);
    let context = match g.settings.context_length {
        0 => engine.model().config().context_length,
        n => (n as usize).min(engine.model().config().context_length),
    };
    let tokenizer = engine.tokenizer();
    let longest =
        (0..tokenizer.vocab_size() as u32).map(|id| tokenizer.token_bytes(id).len()).max().unwrap_or(1).max(1);
    if bytes > context.saturating_mul(longest) {
        return Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "context_length_exceeded",
            format!("the prompt is {bytes} bytes, more than the {context} tokens of the context can hold"),
        ));
    }
    Ok(())
}

/// The reply in `shape`: streamed over SSE, or whole once it ends.
pub(crate) async fn respond<S: Shape>(started: Started, mut shape: S, stream: bool) -> Response {
    let Started { mut events, mut early, guard, prompt, .. } = started;
    if !stream {
        loop {
            let event = match early.pop_front() {
                Some(e) => Some(e),
                None => events.recv().await,
            };
            match event {
                None => return shape.error_response(worker_gone()),
                Some(GenerationEvent::Tokens { text, variant, choices, .. }) => {
                    drop(shape.tokens(text, variant as usize, choices))
                }
                Some(GenerationEvent::Finished { stats, others, .. }) => {
                    let body = shape.whole(&stats, &others);
                    guard.disarm();
                    return Json(body).into_response();
                }
                Some(GenerationEvent::Error { error }) => return shape.error_response(error.into()),
                Some(_) => {}
            }
        }
    }
    let keep_alive = shape.keep_alive();
    let out = VecDeque::from(shape.opening(prompt));
    let stream = Streaming { events, early, shape, out, guard: Some(guard), done: false };
    let chunks = futures_util::stream::unfold(stream, |mut s| async move {
        s.next().await.map(|event| (Ok::<_, Infallible>(event), s))
    });
    Sse::new(chunks).keep_alive(keep_alive).into_response()
}

/// A streaming response between its events.
struct Streaming<S> {
    events: mpsc::UnboundedReceiver<GenerationEvent>,
    early: VecDeque<GenerationEvent>,
    shape: S,
    out: VecDeque<Event>,
    guard: Option<hearth_worker::DropGuard>,
    done: bool,
}

impl<S: Shape> Streaming<S> {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.out.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            let event = match self.early.pop_front() {
                Some(e) => Some(e),
                None => self.events.recv().await,
            };
            match event {
                Some(GenerationEvent::Tokens { text, variant, choices, .. }) => {
                    self.out.extend(self.shape.tokens(text, variant as usize, choices));
                }
                Some(GenerationEvent::Finished { stats, others, .. }) => {
                    self.out.extend(self.shape.finished(&stats, &others));
                    self.done = true;
                    if let Some(g) = self.guard.take() {
                        g.disarm();
                    }
                }
                Some(GenerationEvent::Error { error }) => {
                    self.out.extend(self.shape.failed(error.into()));
                    self.done = true;
                }
                None => {
                    self.out.extend(self.shape.failed(worker_gone()));
                    self.done = true;
                }
                Some(_) => {}
            }
        }
    }
}

/// A JSON body as an SSE `data:` line.
pub(crate) fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

/// An SSE event with its name (`event:`) and JSON data, as the Responses
/// and Messages APIs stream them.
pub(crate) fn named(name: &str, v: &Value) -> Event {
    Event::default().event(name).data(v.to_string())
}
