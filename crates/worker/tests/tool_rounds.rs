//! A chat reply's tool rounds in the worker, on the real default model and
//! a real MCP server over stdio (the scripted one in `hearth-mcp`'s tests,
//! offering `echo` alone): the call asks for approval through an event,
//! runs once allowed, is recorded, and the reply that reads its result is
//! queued, the conversation busy from the first reply to the last; Stop
//! ends a call waiting for approval.

use std::collections::BTreeMap;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use hearth_engine::ChatMessage;
use hearth_mcp::{Limits, ServerConfig, Servers, Transport};
use hearth_store::{ConversationSettings, MessageStatus, Role, Store, ToolCallStatus, ToolUse};
use hearth_worker::events::{GenerationEvent, ModelStatus};
use hearth_worker::tool_offer::{offer, ToolDecision, ToolHost, ToolRound};
use hearth_worker::{ReplyJob, Worker, WorkerConfig};

struct Chat {
    _dir: tempfile::TempDir,
    store: Store,
    worker: Worker,
    runtime: tokio::runtime::Runtime,
    servers: Arc<Servers>,
}

fn start() -> Chat {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hearth.db")).unwrap();
    let worker = Worker::start(store.reopen().unwrap(), WorkerConfig::default(), Box::new(|_| {}));
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    assert!(worker.wait_idle(Duration::from_secs(120)));
    assert!(matches!(worker.model_status(), ModelStatus::Ready { .. }), "{:?}", worker.model_status());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../mcp/tests/data/scripted_server.py");
    let transport = Transport::Stdio {
        command: "python3".into(),
        args: vec![script.into(), "--only".into(), "echo".into()],
        env: BTreeMap::new(),
        cwd: None,
    };
    let servers = Arc::new(Servers::new(Limits::default(), vec![ServerConfig { name: "scripted".into(), transport }]));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    worker.set_tool_host(ToolHost { servers: servers.clone(), runtime: runtime.handle().clone() });
    Chat { _dir: dir, store, worker, runtime, servers }
}

/// A message in a new chat that must call a tool (`tool_use: always`):
/// its conversation, reply, and the reply's events.
fn send(chat: &Chat, text: &str) -> (i64, i64, mpsc::Receiver<GenerationEvent>) {
    let settings = ConversationSettings {
        temperature: 0.0,
        max_new_tokens: 48,
        tool_use: ToolUse::Always,
        tool_servers: vec!["scripted".into()],
        ..Default::default()
    };
    let c = chat.store.create_conversation().unwrap().id;
    chat.store.set_conversation_settings(c, &settings).unwrap();
    let user = chat.store.add_message(c, None, Role::User, text, MessageStatus::Complete).unwrap();
    let reply = chat.store.add_message(c, Some(user.id), Role::Assistant, "", MessageStatus::Streaming).unwrap().id;
    let offered = chat.runtime.block_on(offer(&chat.servers, &settings, 0));
    assert!(offered.unavailable.is_empty(), "{:?}", offered.unavailable);
    let (tx, rx) = mpsc::channel();
    let mut job = ReplyJob::new(
        c,
        reply,
        vec![ChatMessage::user(text)],
        settings,
        Box::new(move |e| {
            let _ = tx.send(e);
        }),
    );
    job.tools = offered.tools.clone();
    job.tool_round = Some(ToolRound { round: 0, offer: offered });
    chat.worker.enqueue(job).unwrap();
    (c, reply, rx)
}

fn next(rx: &mpsc::Receiver<GenerationEvent>) -> GenerationEvent {
    rx.recv_timeout(Duration::from_secs(120)).expect("an event")
}

/// Events up to the next `finished`, and that one.
fn until_finished(rx: &mpsc::Receiver<GenerationEvent>) -> (Vec<GenerationEvent>, GenerationEvent) {
    let mut seen = Vec::new();
    loop {
        match next(rx) {
            e @ GenerationEvent::Finished { .. } => return (seen, e),
            GenerationEvent::Error { error } => panic!("the reply failed: {error:?}"),
            e => seen.push(e),
        }
    }
}

/// The next call waiting for approval: its id.
fn awaiting(rx: &mpsc::Receiver<GenerationEvent>) -> String {
    loop {
        match next(rx) {
            GenerationEvent::ToolCall { call, awaiting_approval: true, .. } => return call.call_id,
            GenerationEvent::ToolCall { .. } => {}
            other => panic!("expected a call to ask for approval, got {other:?}"),
        }
    }
}

#[test]
fn a_call_asks_runs_once_allowed_and_the_next_reply_reads_it_the_chat_busy_throughout() {
    let chat = start();
    let (c, reply, rx) = send(&chat, "Say hello with the echo tool.");
    let (_, first) = until_finished(&rx);
    let GenerationEvent::Finished { reason, tool_calls, .. } = first else { unreachable!() };
    assert_eq!(reason, "tool_calls");
    assert_eq!(tool_calls.len(), 1);
    assert_eq!(tool_calls[0].name, "echo");
    // Busy from the reply's end on: no message slips in while the call waits.
    assert!(chat.worker.busy_conversations().contains(&c));
    let call_id = awaiting(&rx);
    assert!(chat.worker.busy_conversations().contains(&c));
    assert!(chat.worker.decide_tool(c, "no-such-call", ToolDecision::Once).is_err());
    chat.worker.decide_tool(c, &call_id, ToolDecision::Once).unwrap();
    // Later rounds may call again (`auto`); those are denied, so the turn ends.
    let mut rounds = 1;
    loop {
        let (seen, end) = until_finished(&rx);
        let GenerationEvent::Finished { reason, .. } = end else { unreachable!() };
        if rounds == 1 {
            let started = seen.iter().find_map(|e| match e {
                GenerationEvent::Started { reply_id } => Some(*reply_id),
                _ => None,
            });
            assert!(started.is_some_and(|id| id != reply), "the next reply started: {seen:?}");
        }
        if reason != "tool_calls" {
            break;
        }
        rounds += 1;
        let id = awaiting(&rx);
        chat.worker.decide_tool(c, &id, ToolDecision::Deny).unwrap();
    }
    assert!(chat.worker.wait_idle(Duration::from_secs(60)));
    assert!(!chat.worker.busy_conversations().contains(&c));
    let thread = chat.store.thread(c).unwrap();
    assert_eq!(thread.len(), 2 + rounds, "the user's message and one reply per round");
    let calling = &thread[1];
    assert_eq!(calling.message.id, reply);
    assert_eq!(calling.tool_calls.len(), 1);
    let call = &calling.tool_calls[0];
    assert_eq!(call.status, ToolCallStatus::Ok, "{call:?}");
    assert_eq!(call.server.as_deref(), Some("scripted"));
    let text: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(call.result, text["text"].as_str().unwrap(), "echo says its text back");
    let answer = &thread[2];
    assert_eq!(answer.message.parent_id, Some(reply), "the next reply reads the result");
    assert_eq!(thread.last().unwrap().message.status, MessageStatus::Complete);
}

#[test]
fn stop_ends_a_call_waiting_for_approval_and_frees_the_chat() {
    let chat = start();
    let (c, _, rx) = send(&chat, "Say hello with the echo tool.");
    until_finished(&rx);
    awaiting(&rx);
    // Busy in one place: a second reply is refused while the call waits.
    let again = ReplyJob::new(c, 0, vec![ChatMessage::user("hi")], ConversationSettings::default(), Box::new(|_| {}));
    let refused = chat.worker.enqueue(again).unwrap_err();
    assert_eq!(refused.kind, hearth_worker::error::ErrorKind::Busy);
    assert!(chat.worker.stop(c));
    let (seen, end) = until_finished(&rx);
    let stopped = seen
        .iter()
        .any(|e| matches!(e, GenerationEvent::ToolCall { call, .. } if call.status == ToolCallStatus::Stopped));
    assert!(stopped, "{seen:?}");
    assert!(matches!(end, GenerationEvent::Finished { ref reason, .. } if reason == "cancelled"), "{end:?}");
    assert!(chat.worker.wait_idle(Duration::from_secs(30)));
    assert!(!chat.worker.busy_conversations().contains(&c));
    assert_eq!(chat.store.thread(c).unwrap().len(), 2, "no reply after a stopped call");
}
