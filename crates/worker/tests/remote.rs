//! Conversations whose replies come from an OpenAI-compatible endpoint:
//! streamed and saved like local ones, stopped, and kept as interrupted when
//! the connection drops. The endpoints here are small fakes; the client
//! itself is tested against real servers in `hearth-remote`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hearth_engine::ChatMessage;
use hearth_store::{ConversationSettings, MessageStatus, Role, Store};
use hearth_worker::events::GenerationEvent;
use hearth_worker::{RemoteTarget, ReplyJob, TestHooks, Worker, WorkerConfig};

/// Serves each connection: the SSE head, then `chunks` with `gap` between them, then closes.
fn endpoint(chunks: Vec<String>, gap: Duration) -> hearth_remote::Endpoint {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            read_request(&mut stream);
            let _ =
                stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
            for c in &chunks {
                if stream.write_all(format!("data: {c}\n\n").as_bytes()).is_err() {
                    break;
                }
                std::thread::sleep(gap);
            }
        }
    });
    hearth_remote::Endpoint { base_url: format!("http://127.0.0.1:{port}/v1"), api_key: None }
}

/// Reads a whole request (headers and `Content-Length` body) before the
/// answer: answering and closing while the client still sends would reset
/// the connection under it, which a loaded machine makes likely.
fn read_request(stream: &mut std::net::TcpStream) {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok()))
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return;
            }
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn delta(text: &str) -> String {
    format!(r#"{{"choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}]}}"#)
}

fn setup() -> (tempfile::TempDir, Store, Worker, i64, i64) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hearth.db")).unwrap();
    let worker = Worker::start(
        store.reopen().unwrap(),
        WorkerConfig {
            test_hooks: TestHooks { panic_on: Some("remote boom".into()), ..TestHooks::default() },
            ..WorkerConfig::in_memory()
        },
        Box::new(|_| {}),
    );
    let c = store.create_conversation().unwrap();
    let u = store.add_message(c.id, None, Role::User, "Hello?", MessageStatus::Complete).unwrap();
    let r = store.add_message(c.id, Some(u.id), Role::Assistant, "", MessageStatus::Streaming).unwrap();
    (dir, store, worker, c.id, r.id)
}

fn start(
    worker: &Worker,
    conversation: i64,
    reply: i64,
    endpoint: hearth_remote::Endpoint,
) -> mpsc::Receiver<GenerationEvent> {
    let (tx, rx) = mpsc::channel();
    let job = ReplyJob::new(
        conversation,
        reply,
        vec![ChatMessage::user("Hello?")],
        ConversationSettings::default(),
        Box::new(move |e| drop(tx.send(e))),
    );
    worker.start_remote(job, RemoteTarget { endpoint, model: "m".into() }).unwrap();
    rx
}

fn until_end(rx: &mpsc::Receiver<GenerationEvent>) -> Vec<GenerationEvent> {
    let mut events = Vec::new();
    while let Ok(e) = rx.recv_timeout(Duration::from_secs(30)) {
        let end = matches!(e, GenerationEvent::Finished { .. } | GenerationEvent::Error { .. });
        events.push(e);
        if end {
            break;
        }
    }
    events
}

#[test]
fn a_remote_reply_streams_and_is_saved() {
    let (_dir, store, worker, c, r) = setup();
    let done = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}}"#;
    let ep = endpoint(vec![delta("Hello"), delta(" world"), done.into(), "[DONE]".into()], Duration::from_millis(20));
    let events = until_end(&start(&worker, c, r, ep));
    assert!(matches!(events.first(), Some(GenerationEvent::Started { reply_id }) if *reply_id == r));
    let Some(GenerationEvent::Finished { reason, stats, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(reason, "end_token");
    assert_eq!((stats.prompt_tokens, stats.processed_tokens, stats.generated_tokens), (12, 4, 2));
    let saved = store.message(r).unwrap();
    assert_eq!((saved.content.as_str(), saved.status), ("Hello world", MessageStatus::Complete));
    assert!(worker.busy_conversations().is_empty());
}

#[test]
fn stop_ends_a_remote_reply_at_once_and_keeps_its_text() {
    let (_dir, store, worker, c, r) = setup();
    let ep = endpoint((0..100).map(|i| delta(&format!("w{i} "))).collect(), Duration::from_millis(200));
    let rx = start(&worker, c, r, ep);
    while !matches!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), GenerationEvent::Tokens { .. }) {}
    assert_eq!(worker.busy_conversations(), vec![c]);
    let t = Instant::now();
    assert!(worker.stop(c));
    let events = until_end(&rx);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(
        matches!(events.last(), Some(GenerationEvent::Finished { reason, .. }) if reason == "cancelled"),
        "{events:?}"
    );
    let saved = store.message(r).unwrap();
    assert_eq!(saved.status, MessageStatus::Interrupted);
    assert!(saved.content.starts_with("w0 "));
}

#[test]
fn a_dropped_connection_keeps_the_reply_as_interrupted_and_an_unreachable_one_is_an_error() {
    let (_dir, store, worker, c, r) = setup();
    let ep = endpoint(vec![delta("Half a")], Duration::from_millis(10));
    let events = until_end(&start(&worker, c, r, ep));
    let Some(GenerationEvent::Error { error }) = events.last() else { panic!("{events:?}") };
    assert_eq!(error.kind, hearth_worker::error::ErrorKind::Remote);
    assert!(error.message.contains("dropped"), "{}", error.message);
    let saved = store.message(r).unwrap();
    assert_eq!((saved.content.as_str(), saved.status), ("Half a", MessageStatus::Interrupted));

    let u = store.add_message(c, Some(r), Role::User, "Again?", MessageStatus::Complete).unwrap();
    let r2 = store.add_message(c, Some(u.id), Role::Assistant, "", MessageStatus::Streaming).unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let nobody = hearth_remote::Endpoint { base_url: format!("http://127.0.0.1:{port}/v1"), api_key: None };
    let events = until_end(&start(&worker, c, r2.id, nobody));
    let Some(GenerationEvent::Error { error }) = events.last() else { panic!("{events:?}") };
    assert!(error.message.contains("cannot reach"), "{}", error.message);
    assert_eq!(store.message(r2.id).unwrap().status, MessageStatus::Error);
}

#[test]
fn a_panic_in_a_remote_reply_fails_it_alone_and_frees_the_conversation() {
    // Only this test's reply says exactly this (see `TestHooks::panic_on`).
    let (_dir, store, worker, c, r) = setup();
    let done = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
    let ep = endpoint(vec![delta("remote boom"), done.into(), "[DONE]".into()], Duration::from_millis(5));
    let events = until_end(&start(&worker, c, r, ep));
    let Some(GenerationEvent::Error { error }) = events.last() else { panic!("{events:?}") };
    assert_eq!(error.kind, hearth_worker::error::ErrorKind::Internal);
    let saved = store.message(r).unwrap();
    assert_eq!((saved.content.as_str(), saved.status), ("remote boom", MessageStatus::Interrupted));
    assert!(worker.busy_conversations().is_empty(), "the conversation is free again");
}
