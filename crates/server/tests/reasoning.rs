//! A reasoning model's replies through the API: gpt-oss's analysis as
//! `reasoning_content` beside `content`, streamed and whole, as llama.cpp's
//! server and vLLM send it; `reasoning_effort`; and a reply's reasoning
//! taken back in the next request. On the made gpt-oss file that writes a
//! known Harmony reply (`crates/engine/tests/common/o200k.rs`).

#[path = "../../engine/tests/common/o200k.rs"]
#[allow(dead_code)]
mod o200k;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

const THINKING: &str = "The user says hi.";
const ANSWER: &str = "Hello! How can I help?";

struct Peer {
    _dir: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
    server: Option<hearth_server::Server>,
}

impl Peer {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("scripted-gpt-oss.gguf");
        o200k::write_scripted_gpt_oss(&model, THINKING, ANSWER);
        let store = hearth_store::Store::open(dir.path().join("hearth.db")).unwrap();
        let worker =
            Arc::new(hearth_worker::Worker::start(store, hearth_worker::WorkerConfig::in_memory(), Box::new(|_| {})));
        worker.load_model(model);
        assert!(worker.wait_idle(Duration::from_secs(120)));
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let server = runtime.block_on(hearth_server::Server::start(worker, 0, Some("key".into()))).unwrap();
        Self { _dir: dir, runtime, server: Some(server) }
    }

    /// `POST /v1/chat/completions`: the status and the body's text.
    fn chat(&self, body: Value) -> (u16, String) {
        let url = format!("{}/chat/completions", self.server.as_ref().unwrap().url());
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut r = agent
            .post(&url)
            .header("Authorization", "Bearer key")
            .header("Content-Type", "application/json")
            .send(body.to_string().as_bytes())
            .unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            self.runtime.block_on(s.stop());
        }
    }
}

#[test]
fn a_harmony_reply_comes_as_reasoning_content_and_content() {
    let peer = Peer::start();
    let hi = json!([{"role": "user", "content": "Hi"}]);

    // Whole, at each effort the request may name.
    for effort in [None, Some("low"), Some("medium"), Some("high"), Some("minimal")] {
        let mut body = json!({"messages": hi, "temperature": 0.7, "seed": 1});
        if let Some(e) = effort {
            body["reasoning_effort"] = e.into();
        }
        let (status, text) = peer.chat(body);
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let message = &v["choices"][0]["message"];
        assert_eq!(message["content"], ANSWER, "{text}");
        assert_eq!(message["reasoning_content"], THINKING, "{text}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    }

    // Streamed: the deltas add up to the same, and none carries markup.
    let (status, text) = peer.chat(json!({"messages": hi, "stream": true}));
    assert_eq!(status, 200, "{text}");
    let (mut reasoning, mut content) = (String::new(), String::new());
    let mut reasoning_first = None;
    for line in text.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|l| *l != "[DONE]") {
        let chunk: Value = serde_json::from_str(line).unwrap();
        let delta = &chunk["choices"][0]["delta"];
        if let Some(r) = delta["reasoning_content"].as_str() {
            reasoning.push_str(r);
            reasoning_first.get_or_insert(true);
        }
        if let Some(c) = delta["content"].as_str() {
            content.push_str(c);
            reasoning_first.get_or_insert(c.is_empty());
        }
        for part in [&delta["reasoning_content"], &delta["content"]] {
            assert!(!part.as_str().unwrap_or("").contains("<|"), "markup in a delta: {line}");
        }
    }
    assert_eq!((reasoning.as_str(), content.as_str()), (THINKING, ANSWER));

    // The reply given back with its reasoning, as clients send it: the
    // template drops the analysis, and the next reply comes as the first.
    let (status, text) = peer.chat(json!({"messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": ANSWER, "reasoning_content": THINKING},
        {"role": "user", "content": "Thanks"},
    ]}));
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], ANSWER);

    // A reasoning effort the model does not have names the field.
    let (status, text) = peer.chat(json!({"messages": hi, "reasoning_effort": "extreme"}));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("reasoning_effort"), "{text}");
}
