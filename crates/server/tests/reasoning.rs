//! A reasoning model's replies through the API: gpt-oss's analysis as
//! `reasoning_content` beside `content`, streamed and whole, as llama.cpp's
//! server and vLLM send it; `reasoning_effort`; and a reply's reasoning
//! taken back in the next request. On the made gpt-oss file that writes a
//! known Harmony reply (`crates/engine/tests/common/o200k.rs`).

#[path = "../../engine/tests/common/o200k.rs"]
#[allow(dead_code, reason = "this binary uses part of the shared vocabulary helper")]
mod o200k;

mod common;

use common::Peer;
use serde_json::{json, Value};

const THINKING: &str = "The user says hi.";
const ANSWER: &str = "Hello! How can I help?";

#[test]
fn a_harmony_reply_comes_as_reasoning_content_and_content() {
    let peer = Peer::start(|dir| {
        let model = dir.join("scripted-gpt-oss.gguf");
        o200k::write_scripted_gpt_oss(&model, THINKING, ANSWER);
        model
    });
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
