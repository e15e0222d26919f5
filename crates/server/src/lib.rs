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

mod choice;
mod connections;
mod error;
mod fields;
mod messages;
mod request;
mod response;
mod responses;
mod run;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request as HttpRequest, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hearth_worker::events::ModelStatus;
use hearth_worker::Worker;
use serde_json::{json, Value};
use tokio::sync::oneshot;

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
        let closing = hearth_worker::CancellationToken::new();
        let close = closing.clone();
        tokio::spawn(async move {
            let _ = stopped.await;
            close.cancel();
        });
        let task = tokio::spawn(connections::serve(listener, app, closing));
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
    /// Responses kept for `previous_response_id`.
    responses: Arc<Mutex<responses::ResponseStore>>,
}

/// The API's routes over `worker`, for a server on `port` (`None`: any
/// `Host`), whose jobs stop when `shutdown` is cancelled.
pub fn router(
    worker: Arc<Worker>,
    api_key: Option<String>,
    port: Option<u16>,
    shutdown: hearth_worker::CancellationToken,
) -> Router {
    let responses = Arc::new(Mutex::new(responses::ResponseStore::new(responses::MAX_STORED, responses::STORED_FOR)));
    let api = Arc::new(Api { worker, api_key: api_key.filter(|k| !k.is_empty()), port, shutdown, responses });
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/responses", post(create_response))
        .route("/v1/responses/{id}", get(get_response).delete(delete_response))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this endpoint does not take that method")
        })
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint; Hearth serves /v1/models, /v1/chat/completions, /v1/completions, /v1/responses and /v1/messages",
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
    let anthropic = request.uri().path().starts_with("/v1/messages");
    match check(&api, &request) {
        Ok(()) => next.run(request).await,
        Err(e) if anthropic => e.anthropic(),
        Err(e) => e.into_response(),
    }
}

fn check(api: &Api, request: &HttpRequest) -> Result<(), ApiError> {
    if let Some(port) = api.port {
        let local = |value: Option<&str>, scheme: &str| {
            value.is_none_or(|v| {
                ["127.0.0.1", "localhost", "[::1]"]
                    .iter()
                    .any(|h| v.eq_ignore_ascii_case(&format!("{scheme}{h}:{port}")))
            })
        };
        if request.headers().get_all(header::HOST).iter().count() > 1 {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_host",
                "the request has more than one Host header",
            ));
        }
        // An absolute-form target (`POST http://host/v1/…`) names the host
        // that counts (RFC 9112): it is held to the same rule.
        let authority = request.uri().authority().map(|a| a.as_str());
        let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok());
        if host.is_none() || !local(host, "") || !local(authority, "") {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                format!("this server answers only requests to 127.0.0.1:{port} or localhost:{port}"),
            ));
        }
        let origin = request.headers().get(header::ORIGIN).and_then(|v| v.to_str().ok());
        if !local(origin, "http://") {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                "requests from web pages of other origins are refused",
            ));
        }
    }
    if let Some(key) = api.api_key.as_ref().filter(|_| request.uri().path() != "/health") {
        let header = |name| request.headers().get(name).and_then(|v: &header::HeaderValue| v.to_str().ok());
        // `Authorization: Bearer KEY` (the scheme in any case, RFC 7235), or
        // Anthropic's `x-api-key: KEY`.
        let bearer = header(header::AUTHORIZATION.as_str()).and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token)
        });
        let given = bearer.or(header("x-api-key"));
        if !given.is_some_and(|g| same_secret(g.trim().as_bytes(), key.as_bytes())) {
            let message = if given.is_some() {
                "the API key is wrong"
            } else {
                "this server needs an API key: send it as \"Authorization: Bearer KEY\" (or \"x-api-key: KEY\")"
            };
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid_api_key", message));
        }
    }
    Ok(())
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

async fn create_response(State(api): State<Arc<Api>>, body: Body) -> Response {
    let run = async {
        let request = responses::ResponsesRequest::parse(&read_body(body).await?, &api.responses)?;
        let started = run::start(&api, &request.generation, true).await?;
        let reply = responses::ResponseReply::new(&request, &started, &api.responses);
        Ok::<_, ApiError>(run::respond(started, reply, request.generation.stream).await)
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

fn no_response(id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no stored response \"{id}\""))
}

async fn get_response(State(api): State<Arc<Api>>, Path(id): Path<String>) -> Response {
    match api.responses.lock().unwrap_or_else(|e| e.into_inner()).object(&id) {
        Some(object) => Json(object).into_response(),
        None => no_response(&id).into_response(),
    }
}

async fn delete_response(State(api): State<Arc<Api>>, Path(id): Path<String>) -> Response {
    if api.responses.lock().unwrap_or_else(|e| e.into_inner()).delete(&id) {
        Json(json!({"id": id, "object": "response", "deleted": true})).into_response()
    } else {
        no_response(&id).into_response()
    }
}

async fn messages(State(api): State<Arc<Api>>, body: Body) -> Response {
    let run = async {
        let request = messages::MessagesRequest::parse(&read_body(body).await?, false)?;
        let started = run::start(&api, &request.generation, true).await?;
        let reply = messages::MessageReply::new(&started);
        Ok::<_, ApiError>(run::respond(started, reply, request.generation.stream).await)
    };
    run.await.unwrap_or_else(ApiError::anthropic)
}

/// The prompt's tokens for a Messages body, as the reply would read them.
async fn count_tokens(State(api): State<Arc<Api>>, body: Body) -> Response {
    let run = async {
        let request = messages::MessagesRequest::parse(&read_body(body).await?, true)?;
        let (_, engine) = loaded(&api.worker)?;
        let g = request.generation;
        let count = tokio::task::spawn_blocking(move || {
            let mut job = hearth_worker::ReplyJob::for_request(
                g.messages,
                g.settings.clone(),
                1,
                hearth_worker::Request::default(),
                Box::new(|_| {}),
            );
            job.tools = g.tools;
            hearth_worker::prompt_ids(&engine, &job, &g.settings).map(|p| p.ids.len())
        })
        .await
        .map_err(|_| worker_gone())??;
        Ok::<_, ApiError>(Json(json!({"input_tokens": count})).into_response())
    };
    run.await.unwrap_or_else(ApiError::anthropic)
}

async fn generate(api: Arc<Api>, body: Body, endpoint: Endpoint) -> Result<Response, ApiError> {
    let body = read_body(body).await?;
    let g = match endpoint {
        Endpoint::Chat => Generation::chat(&body)?,
        Endpoint::Completion => Generation::completion(&body)?,
    };
    let started = run::start(&api, &g, endpoint == Endpoint::Chat).await?;
    let reply = Reply::new(
        endpoint,
        started.model.clone(),
        api.worker.clone(),
        g.n,
        g.logprobs,
        g.include_usage,
        started.reasoning.clone(),
        started.tools,
    );
    Ok(run::respond(started, reply, g.stream).await)
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
