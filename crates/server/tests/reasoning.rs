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

/// SSE events as (name, data).
fn events(text: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut name = String::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            out.push((name.clone(), serde_json::from_str(d).unwrap()));
        }
    }
    out
}

#[test]
fn the_reasoning_comes_as_thinking_blocks_and_reasoning_items() {
    let peer = Peer::start(|dir| {
        let model = dir.join("scripted-gpt-oss.gguf");
        o200k::write_scripted_gpt_oss(&model, THINKING, ANSWER);
        model
    });
    // Messages, whole: a thinking block, then the text.
    let hi = json!({"max_tokens": 200, "messages": [{"role": "user", "content": "Hi"}], "thinking": {"type": "enabled", "budget_tokens": 100}});
    let (status, text) = peer.post("/messages", hi.clone());
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["content"],
        json!([{"type": "thinking", "thinking": THINKING, "signature": ""}, {"type": "text", "text": ANSWER}])
    );
    assert_eq!(v["stop_reason"], "end_turn");

    // Streamed: thinking deltas in block 0, text deltas in block 1.
    let mut streamed = hi.clone();
    streamed["stream"] = true.into();
    let (status, text) = peer.post("/messages", streamed);
    assert_eq!(status, 200, "{text}");
    let (mut thinking, mut answer) = (String::new(), String::new());
    for (name, data) in events(&text) {
        assert_eq!(data["type"], name.as_str(), "{data}");
        if name == "content_block_delta" {
            match (data["index"].as_u64(), data["delta"]["type"].as_str()) {
                (Some(0), Some("thinking_delta")) => thinking.push_str(data["delta"]["thinking"].as_str().unwrap()),
                (Some(1), Some("text_delta")) => answer.push_str(data["delta"]["text"].as_str().unwrap()),
                other => panic!("unexpected delta {other:?}: {data}"),
            }
        }
    }
    assert_eq!((thinking.as_str(), answer.as_str()), (THINKING, ANSWER));

    // The thinking given back in the next turn is taken.
    let (status, text) = peer.post("/messages", json!({"max_tokens": 200, "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": THINKING, "signature": ""}, {"type": "text", "text": ANSWER}]},
        {"role": "user", "content": "Thanks"},
    ]}));
    assert_eq!(status, 200, "{text}");

    // Responses: a reasoning item, then the message; streamed, numbered events.
    let (status, text) = peer.post("/responses", json!({"input": "Hi", "reasoning": {"effort": "low"}}));
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["output"][0]["type"], "reasoning", "{text}");
    assert_eq!(v["output"][0]["content"][0]["text"], THINKING);
    assert_eq!(v["output"][1]["content"][0]["text"], ANSWER);
    let (status, text) = peer.post("/responses", json!({"input": "Hi", "stream": true}));
    assert_eq!(status, 200, "{text}");
    let events = events(&text);
    let reasoning: String = events
        .iter()
        .filter(|(n, _)| n == "response.reasoning_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(reasoning, THINKING);
    for (i, (_, data)) in events.iter().enumerate() {
        assert_eq!(data["sequence_number"], i as u64);
    }
    assert_eq!(events.last().unwrap().0, "response.completed");
}
