//! Hearth's OpenAI-compatible HTTP API, for editors, scripts and agents:
//! `GET /v1/models`, `POST /v1/chat/completions` and `POST /v1/completions`,
//! streamed over SSE or not.
//!
//! Requests are jobs on the app's own worker (`Worker::submit`), so they
//! wait in the same queue as the app's conversations and run beside them
//! in the same batched decode passes; a request whose prompt extends an
//! earlier one's continues that one's KV cache, as a conversation's turn
//! does (`usage.prompt_tokens_details.cached_tokens` says how much). A
//! client that disconnects cancels its job, which stops within one step.

mod error;
mod request;
mod response;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request as HttpRequest, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hearth_worker::events::{GenerationEvent, ModelStatus};
use hearth_worker::{CompiledGrammar, ReplyJob, Request, Worker};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

pub use error::ApiError;
pub use request::Generation;
use response::{Endpoint, Reply};

/// Request bodies past this are refused with 413: far more than any
/// context's worth of text, far less than would strain the app.
pub const BODY_LIMIT: usize = 8 << 20;

/// A running server on 127.0.0.1; `stop` ends it.
pub struct Server {
    addr: SocketAddr,
    shutdown: hearth_worker::CancellationToken,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Serves `worker` on 127.0.0.1:`port` (0 picks a free port); with
    /// `api_key`, every request must bear it.
    pub async fn start(worker: Arc<Worker>, port: u16, api_key: Option<String>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = hearth_worker::CancellationToken::new();
        let app = router(worker, api_key, Some(addr.port()), shutdown.clone());
        let task = tokio::spawn(async move {
            let serving = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = serving.await {
                tracing::error!("the API server stopped: {e}");
            }
        });
        tracing::info!("OpenAI-compatible API on http://{addr}/v1");
        Ok(Self { addr, shutdown, stop: Some(stop), task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL clients take (`…/v1`).
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Stops taking requests and stops every request's job (each within a
    /// step; a stream then ends with its finish reason), then waits a
    /// moment for the connections to close.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(Duration::from_secs(2), &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

/// A fresh API key: `hearth-` and 48 hex digits from the OS-seeded hasher.
pub fn new_api_key() -> String {
    format!("hearth-{}{}", response::random_hex(), response::random_hex())
}

/// What every handler shares.
struct Api {
    worker: Arc<Worker>,
    api_key: Option<String>,
    /// The port served, when known: requests must name it in `Host`.
    port: Option<u16>,
    /// Cancelled when the server stops: every request's job is its child.
    shutdown: hearth_worker::CancellationToken,
}

/// The API's routes over `worker`, for a server on `port` (`None`: any
/// `Host`), whose jobs stop when `shutdown` is cancelled.
pub fn router(
    worker: Arc<Worker>,
    api_key: Option<String>,
    port: Option<u16>,
    shutdown: hearth_worker::CancellationToken,
) -> Router {
    let api = Arc::new(Api { worker, api_key: api_key.filter(|k| !k.is_empty()), port, shutdown });
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint; Hearth serves /v1/models, /v1/chat/completions and /v1/completions",
            )
        })
        .layer(middleware::from_fn_with_state(api.clone(), authorize))
        .with_state(api)
}

/// Every route but `/health` (which tells nothing but whether the server is
/// up, for scripts that wait for it) needs the key when one is set. Only
/// requests to this machine's loopback name are taken, and none from a web
/// page of another origin: without that, any page the user opens could
/// drive the model (a plain form POST needs no CORS preflight), and with
/// DNS rebinding read its answers.
async fn authorize(State(api): State<Arc<Api>>, request: HttpRequest, next: Next) -> Response {
    if let Some(port) = api.port {
        let local = |value: Option<&str>, scheme: &str| {
            value.is_none_or(|v| {
                ["127.0.0.1", "localhost", "[::1]"]
                    .iter()
                    .any(|h| v.eq_ignore_ascii_case(&format!("{scheme}{h}:{port}")))
            })
        };
        let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok());
        if host.is_none() || !local(host, "") {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                format!("this server answers only requests to 127.0.0.1:{port} or localhost:{port}"),
            )
            .into_response();
        }
        let origin = request.headers().get(header::ORIGIN).and_then(|v| v.to_str().ok());
        if !local(origin, "http://") {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                "requests from web pages of other origins are refused",
            )
            .into_response();
        }
    }
    if let Some(key) = api.api_key.as_ref().filter(|_| request.uri().path() != "/health") {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same_secret(g.trim().as_bytes(), key.as_bytes())) {
            let message = if given.is_some() {
                "the API key is wrong"
            } else {
                "this server needs an API key: send it as \"Authorization: Bearer KEY\""
            };
            return ApiError::new(StatusCode::UNAUTHORIZED, "invalid_api_key", message).into_response();
        }
    }
    next.run(request).await
}

/// Compares without stopping at the first difference.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Whether a model is ready, and the API requests running and waiting (as
/// llama.cpp's server has it, for scripts that wait for the server).
async fn health(State(api): State<Arc<Api>>) -> Response {
    let (running, queued) = api.worker.requests();
    let (status, code) = match api.worker.model_status() {
        ModelStatus::Ready { .. } => ("ok", StatusCode::OK),
        ModelStatus::Loading { .. } => ("loading", StatusCode::SERVICE_UNAVAILABLE),
        _ => ("no_model", StatusCode::SERVICE_UNAVAILABLE),
    };
    (code, Json(json!({"status": status, "requests_running": running, "requests_queued": queued}))).into_response()
}

async fn models(State(api): State<Arc<Api>>) -> Json<Value> {
    let data: Vec<Value> = match api.worker.model_status() {
        ModelStatus::Ready { name, path, architecture, context_length, .. } => vec![json!({
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "hearth",
            "path": path,
            "architecture": architecture,
            "context_length": context_length,
        })],
        _ => Vec::new(),
    };
    Json(json!({"object": "list", "data": data}))
}

async fn chat_completions(State(api): State<Arc<Api>>, body: Body) -> Response {
    generate(api, body, Endpoint::Chat).await.unwrap_or_else(IntoResponse::into_response)
}

async fn completions(State(api): State<Arc<Api>>, body: Body) -> Response {
    generate(api, body, Endpoint::Completion).await.unwrap_or_else(IntoResponse::into_response)
}

async fn generate(api: Arc<Api>, body: Body, endpoint: Endpoint) -> Result<Response, ApiError> {
    let body = read_body(body).await?;
    let g = match endpoint {
        Endpoint::Chat => Generation::chat(&body)?,
        Endpoint::Completion => Generation::completion(&body)?,
    };
    let (model, engine) = loaded(&api.worker)?;
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
    // Dropped with the response (a client that goes away), it stops the
    // job; so does the server stopping.
    let guard = api.worker.submit_under(job, &api.shutdown)?.drop_guard();
    // A chat reply's reasoning goes out as `reasoning_content`, as
    // llama.cpp's server and vLLM send it.
    let reasoning = match endpoint {
        Endpoint::Chat => engine.reasoning().map(|format| {
            let inside = format.opened_with(g.settings.thinking);
            (format.clone(), inside)
        }),
        Endpoint::Completion => None,
    };
    let tools = match endpoint {
        Endpoint::Chat if g.tools.offered() => Some(engine.tool_format()),
        _ => None,
    };
    let mut reply = Reply::new(endpoint, model, api.worker.clone(), g.n, g.logprobs, g.include_usage, reasoning, tools);

    // Until the prompt is known to fit, a failure is still an HTTP status.
    let mut early = VecDeque::new();
    loop {
        match events.recv().await {
            None => return Err(worker_gone()),
            Some(GenerationEvent::Queued { .. } | GenerationEvent::Started { .. }) => {}
            Some(GenerationEvent::Error { error }) => return Err(error.into()),
            Some(event) => {
                early.push_back(event);
                break;
            }
        }
    }

    if !g.stream {
        let ended = loop {
            let event = match early.pop_front() {
                Some(e) => Some(e),
                None => events.recv().await,
            };
            match event {
                None => return Err(worker_gone()),
                Some(GenerationEvent::Tokens { text, variant, choices, .. }) => {
                    drop(reply.tokens(text, variant as usize, choices))
                }
                Some(GenerationEvent::Finished { stats, others, .. }) => break reply.ended(&stats, &others),
                Some(GenerationEvent::Error { error }) => return Err(error.into()),
                Some(_) => {}
            }
        };
        guard.disarm();
        return Ok(Json(reply.response(&ended)).into_response());
    }

    let stream = Streaming { events, early, reply, out: VecDeque::new(), guard: Some(guard), done: false };
    let chunks = futures_util::stream::unfold(stream, |mut s| async move {
        s.next().await.map(|event| (Ok::<_, Infallible>(event), s))
    });
    Ok(Sse::new(chunks).keep_alive(KeepAlive::default()).into_response())
}

/// A streaming response between its chunks.
struct Streaming {
    events: mpsc::UnboundedReceiver<GenerationEvent>,
    early: VecDeque<GenerationEvent>,
    reply: Reply,
    out: VecDeque<Event>,
    guard: Option<hearth_worker::DropGuard>,
    done: bool,
}

impl Streaming {
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
            let data = |v: Value| Event::default().data(v.to_string());
            match event {
                Some(GenerationEvent::Tokens { text, variant, choices, .. }) => {
                    self.out.extend(self.reply.tokens(text, variant as usize, choices).into_iter().map(data));
                }
                Some(GenerationEvent::Finished { stats, others, .. }) => {
                    let ended = self.reply.ended(&stats, &others);
                    self.out.extend(self.reply.final_chunks(&ended).into_iter().map(data));
                    self.out.push_back(Event::default().data("[DONE]"));
                    self.done = true;
                    if let Some(g) = self.guard.take() {
                        g.disarm();
                    }
                }
                Some(GenerationEvent::Error { error }) => {
                    self.out.push_back(data(ApiError::from(error).body()));
                    self.done = true;
                }
                None => {
                    self.out.push_back(data(worker_gone().body()));
                    self.done = true;
                }
                Some(_) => {}
            }
        }
    }
}

/// The body, up to `BODY_LIMIT`. A larger one is read on (and dropped) up
/// to a few times the limit before the 413, because a client still sending
/// would otherwise meet a reset connection rather than the answer.
async fn read_body(body: Body) -> Result<Vec<u8>, ApiError> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let (mut kept, mut total) = (Vec::new(), 0usize);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", format!("cannot read the request body: {e}"))
        })?;
        total += chunk.len();
        if total <= BODY_LIMIT {
            kept.extend_from_slice(&chunk);
        } else if total > 4 * BODY_LIMIT {
            break;
        }
    }
    if total > BODY_LIMIT {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("the request body is over the {} MiB limit", BODY_LIMIT >> 20),
        ));
    }
    Ok(kept)
}

/// The loaded model's name, or 503.
/// The loaded model's name and the model, read once per request.
fn loaded(worker: &Worker) -> Result<(String, Arc<hearth_engine::Engine>), ApiError> {
    match (worker.model_status(), worker.engine()) {
        (ModelStatus::Ready { name, .. }, Some(engine)) => Ok((name, engine)),
        (ModelStatus::Loading { .. }, _) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "model_not_loaded",
            "the model is still loading; try again in a moment",
        )),
        _ => Err(ApiError::no_model()),
    }
}

fn worker_gone() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        "the request ended without a reply (Hearth is shutting down or the model was replaced)",
    )
}
