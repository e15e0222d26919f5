//! The client against real peers — Hearth's own API server on the default
//! model (and on a made gpt-oss file, for reasoning), and llama-cpp-python's
//! server where it is installed — and against small servers that misbehave
//! on purpose.

#[path = "../../engine/tests/common/o200k.rs"]
#[allow(dead_code, reason = "this binary uses part of the shared vocabulary helper")]
mod o200k;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_remote::{list_models, stream_chat, ChatRequest, Endpoint, Message, RemoteError, StreamOptions};

struct HearthPeer {
    _dir: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
    server: Option<hearth_server::Server>,
}

impl HearthPeer {
    fn start() -> Self {
        Self::serving(|_| hearth_engine::paths::default_model_path(|k| std::env::var_os(k)))
    }

    /// A peer serving the model `model(dir)` gives (written into `dir` if need be).
    fn serving(model: impl FnOnce(&std::path::Path) -> std::path::PathBuf) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let model = model(dir.path());
        let store = hearth_store::Store::open(dir.path().join("hearth.db")).unwrap();
        let worker =
            Arc::new(hearth_worker::Worker::start(store, hearth_worker::WorkerConfig::in_memory(), Box::new(|_| {})));
        worker.load_model(model);
        assert!(worker.wait_idle(Duration::from_secs(120)));
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let server = runtime.block_on(hearth_server::Server::start(worker, 0, Some("peer-key".into()))).unwrap();
        Self { _dir: dir, runtime, server: Some(server) }
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint { base_url: self.server.as_ref().unwrap().url(), api_key: Some("peer-key".into()) }
    }
}

impl Drop for HearthPeer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            self.runtime.block_on(s.stop());
        }
    }
}

fn request(model: &str, messages: Vec<Message>, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        temperature: 0.0,
        top_p: 1.0,
        max_tokens,
        seed: None,
        stop: Vec::new(),
        messages,
    }
}

fn user(text: &str) -> Message {
    Message { role: "user", content: text.into() }
}

fn never() -> bool {
    false
}

#[test]
fn hearth_as_a_peer_models_streaming_prefix_reuse_stop_and_a_wrong_key() {
    let peer = HearthPeer::start();
    let ep = peer.endpoint();
    let models = list_models(&ep, &never).unwrap();
    assert_eq!(models.len(), 1);
    assert!(models[0].contains("SmolLM2"), "{models:?}");

    // Turn 1, then turn 2: its body begins with turn 1's bytes, and the
    // peer runs only what turn 2 adds.
    let turn1 = request(&models[0], vec![user("Name three rivers.")], 16);
    let mut text = String::new();
    let s1 = stream_chat(&ep, &turn1, &never, &mut |t| text.push_str(t)).unwrap();
    assert!(!text.is_empty());
    assert_eq!(s1.finish_reason, "length");
    assert_eq!(s1.completion_tokens, Some(16));
    let turn2 = request(
        &models[0],
        vec![
            user("Name three rivers."),
            Message { role: "assistant", content: text.clone() },
            user("Which is longest?"),
        ],
        16,
    );
    let (b1, b2) = (turn1.body(), turn2.body());
    assert!(b2.starts_with(&b1[..b1.len() - 2]), "turn 2's request begins with turn 1's exact bytes");
    let s2 = stream_chat(&ep, &turn2, &never, &mut |_| {}).unwrap();
    assert!(s2.cached_tokens.unwrap() >= s1.prompt_tokens.unwrap(), "{s1:?} {s2:?}");

    // Stop returns at once and closes the stream, which stops the peer's generation.
    let stop = AtomicBool::new(false);
    let t = Instant::now();
    let long = request(&models[0], vec![user("Write a very long story about a dragon.")], 2000);
    let mut pieces = 0;
    let stopped = stream_chat(&ep, &long, &|| stop.load(Ordering::Relaxed), &mut |_| {
        pieces += 1;
        if pieces == 3 {
            stop.store(true, Ordering::Relaxed);
        }
    })
    .unwrap();
    assert_eq!(stopped.finish_reason, "cancelled");
    assert!(t.elapsed() < Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(5);
    let health = || {
        let addr = peer.server.as_ref().unwrap().addr();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
        let mut a = String::new();
        s.read_to_string(&mut a).unwrap();
        a
    };
    while !health().contains("\"requests_running\":0") {
        assert!(Instant::now() < deadline, "the peer still generates after Stop: {}", health());
        std::thread::sleep(Duration::from_millis(20));
    }

    let wrong = Endpoint { api_key: Some("nope".into()), ..ep.clone() };
    assert!(matches!(list_models(&wrong, &never), Err(RemoteError::Unauthorized { .. })));
    assert!(matches!(stream_chat(&wrong, &turn1, &never, &mut |_| {}), Err(RemoteError::Unauthorized { .. })));
}

/// A reasoning model's `reasoning_content` arrives first, inside
/// `<think>`…`</think>`, the form the app folds into Thinking.
#[test]
fn reasoning_content_comes_inside_think_tags_before_the_answer() {
    let peer = HearthPeer::serving(|dir| {
        let path = dir.join("scripted-gpt-oss.gguf");
        o200k::write_scripted_gpt_oss(&path, "The user says hi.", "Hello! How can I help?");
        path
    });
    let ep = peer.endpoint();
    let models = list_models(&ep, &never).unwrap();
    let mut text = String::new();
    let done = stream_chat(&ep, &request(&models[0], vec![user("Hi")], 64), &never, &mut |t| text.push_str(t)).unwrap();
    assert_eq!(text, "<think>\nThe user says hi.\n</think>\n\nHello! How can I help?");
    assert_eq!(done.finish_reason, "stop");
}

/// A server that answers each connection with `respond(request)` and closes.
fn fake(respond: impl Fn(&str) -> Vec<u8> + Send + 'static) -> Endpoint {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = vec![0u8; 1 << 16];
            let n = stream.read(&mut buf).unwrap_or(0);
            let _ = stream.write_all(&respond(&String::from_utf8_lossy(&buf[..n])));
        }
    });
    Endpoint { base_url: format!("http://127.0.0.1:{port}/v1"), api_key: None }
}

fn sse(chunks: &[&str]) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n".to_vec();
    for c in chunks {
        out.extend_from_slice(format!("data: {c}\n\n").as_bytes());
    }
    out
}

#[test]
fn each_failure_is_named() {
    let req = request("m", vec![user("hi")], 4);
    let limited = fake(|_| {
        b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"error\":{\"message\":\"slow down\"}}".to_vec()
    });
    assert!(
        matches!(stream_chat(&limited, &req, &never, &mut |_| {}), Err(RemoteError::RateLimited { message }) if message == "slow down")
    );

    let garbled = fake(|_| sse(&[r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#, "{not json"]));
    let mut got = String::new();
    assert!(matches!(stream_chat(&garbled, &req, &never, &mut |t| got.push_str(t)), Err(RemoteError::Malformed(_))));
    assert_eq!(got, "Hel", "what came before the bad chunk was handed on");

    let dropped = fake(|_| sse(&[r#"{"choices":[{"index":0,"delta":{"content":"Hello"}}]}"#]));
    let mut got = String::new();
    assert!(matches!(stream_chat(&dropped, &req, &never, &mut |t| got.push_str(t)), Err(RemoteError::Dropped(_))));
    assert_eq!(got, "Hello");

    let complete = fake(|_| {
        sse(&[
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ])
    });
    let done = stream_chat(&complete, &req, &never, &mut |_| {}).unwrap();
    assert_eq!((done.finish_reason.as_str(), done.chunks, done.completion_tokens), ("stop", 1, None));

    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let nobody = Endpoint { base_url: format!("http://127.0.0.1:{port}/v1"), api_key: None };
    assert!(matches!(list_models(&nobody, &never), Err(RemoteError::Unreachable { .. })));

    let not_openai =
        fake(|_| b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html>hello</html>".to_vec());
    assert!(matches!(list_models(&not_openai, &never), Err(RemoteError::Malformed(_))));
}

/// llama.cpp's server through llama-cpp-python, where `bench/setup-llamacpp.sh` installed it.
#[test]
fn llama_cpp_as_a_peer() {
    let python =
        std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/hearth/llama-venv/bin/python");
    let installed = std::process::Command::new(&python)
        .args(["-c", "import llama_cpp.server.app"])
        .status()
        .is_ok_and(|s| s.success());
    if !installed {
        // `./hearth test` installs it and sets this, so there it cannot be skipped.
        assert!(
            std::env::var("HEARTH_REQUIRE_LLAMACPP").is_err(),
            "llama-cpp-python's server is required: run bench/setup-llamacpp.sh"
        );
        eprintln!("llama-cpp-python's server is not installed (bench/setup-llamacpp.sh): skipped");
        return;
    }
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let model = hearth_engine::paths::default_model_path(|k| std::env::var_os(k));
    let mut child = std::process::Command::new(&python)
        .args([
            "-m",
            "llama_cpp.server",
            "--model",
            model.to_str().unwrap(),
            "--n_threads",
            "2",
            "--n_ctx",
            "2048",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--api_key",
            "llama-key",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ep = Endpoint { base_url: format!("http://127.0.0.1:{port}/v1"), api_key: Some("llama-key".into()) };
    let deadline = Instant::now() + Duration::from_secs(60);
    let models = loop {
        match list_models(&ep, &never) {
            Ok(m) => break m,
            Err(e) if Instant::now() > deadline => panic!("llama.cpp's server did not start: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let mut text = String::new();
    let done =
        stream_chat(&ep, &request(&models[0], vec![user("What is 2 + 2?")], 12), &never, &mut |t| text.push_str(t));
    let wrong = list_models(&Endpoint { api_key: Some("nope".into()), ..ep.clone() }, &never);
    let _ = child.kill();
    let _ = child.wait();
    let done = done.unwrap();
    assert!(!text.is_empty() && !done.finish_reason.is_empty(), "{done:?}");
    assert!(matches!(wrong, Err(RemoteError::Unauthorized { .. })), "{wrong:?}");
}
