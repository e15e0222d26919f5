//! Structured output through the API on the default model: a JSON schema
//! (`response_format: json_schema`), any JSON object (`json_object`), and a
//! Lark grammar (Hearth's `grammar`); streamed and whole; a schema feature
//! the compiler lacks is a 400 naming it.

mod common;

use common::Peer;
use serde_json::{json, Value};

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}, "population": {"type": "integer", "minimum": 0}},
        "required": ["city", "population"],
        "additionalProperties": false
    })
}

#[test]
fn replies_follow_response_format_and_grammar() {
    let peer = Peer::on_default_model();
    let ask = json!([{"role": "user", "content": "Name a city and its population."}]);
    // A JSON schema, whole, at a hot temperature, three variants.
    let body = json!({"messages": ask, "temperature": 1.2, "seed": 5, "n": 3, "max_tokens": 60,
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "strict": true, "schema": schema()}}});
    let (status, text) = peer.chat(body);
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    for choice in v["choices"].as_array().unwrap() {
        let content = choice["message"]["content"].as_str().unwrap();
        if choice["finish_reason"] == "stop" {
            let obj: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{content:?}: {e}"));
            assert!(obj["city"].is_string() && obj["population"].as_u64().is_some(), "{content}");
            assert_eq!(obj.as_object().unwrap().len(), 2, "{content}");
        } else {
            assert!(content.starts_with("{\"city\": "), "{content}");
        }
    }
    // Streamed: the deltas join into the same kind of object.
    let body = json!({"messages": ask, "temperature": 0, "stream": true, "max_tokens": 60,
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema()}}});
    let (status, text) = peer.chat(body);
    assert_eq!(status, 200, "{text}");
    let joined: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(String::from))
        .collect();
    let obj: Value = serde_json::from_str(&joined).unwrap_or_else(|e| panic!("{joined:?}: {e}"));
    assert!(obj["city"].is_string(), "{joined}");
    // Any JSON object.
    let body = json!({"messages": ask, "temperature": 0, "max_tokens": 80, "response_format": {"type": "json_object"}});
    let (status, text) = peer.chat(body);
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v["choices"][0]["message"]["content"].as_str().unwrap().starts_with('{'), "{text}");
    // A Lark grammar.
    let body = json!({"messages": [{"role": "user", "content": "Is water wet?"}], "temperature": 1.0, "seed": 2, "n": 4,
        "grammar": "start: (\"Yes\" | \"No\") \", because \" /[a-z ]{1,30}/ \".\""});
    let (status, text) = peer.chat(body);
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    for choice in v["choices"].as_array().unwrap() {
        let content = choice["message"]["content"].as_str().unwrap();
        assert!(content.starts_with("Yes, because ") || content.starts_with("No, because "), "{content}");
        assert!(content.ends_with('.'), "{content}");
    }
}

#[test]
fn a_bad_or_unsupported_grammar_is_a_400_naming_it() {
    let peer = Peer::on_default_model();
    let ask = json!([{"role": "user", "content": "Hi"}]);
    let unsupported = json!({"type": "object", "dependentSchemas": {"a": {"required": ["b"]}}});
    for (format, param, says) in [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": unsupported}}}),
            "response_format",
            "dependentSchemas",
        ),
        (json!({"response_format": {"type": "xml"}}), "response_format.type", "json_schema"),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": 3}}),
            "response_format.json_schema",
            "object",
        ),
        (json!({"grammar": "start: ("}), "grammar", ""),
        (json!({"grammar": 7}), "grammar", "Lark"),
        (json!({"grammar": "start: \"a\"", "response_format": {"type": "json_object"}}), "grammar", "cannot"),
    ] {
        let mut body = format.clone();
        body["messages"] = ask.clone();
        let (status, text) = peer.chat(body);
        assert_eq!(status, 400, "{format}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["param"], param, "{text}");
        assert!(v["error"]["message"].as_str().unwrap().contains(says), "{text}");
    }
}

/// Two constrained requests at once share their decode passes (their masks
/// computed beside the shared pass) and each writes what it writes alone.
#[test]
fn constrained_requests_side_by_side_write_what_they_write_alone() {
    let peer = Peer::on_default_model();
    let body = |city: &str, seed: u64| {
        json!({"messages": [{"role": "user", "content": format!("Describe {city} as JSON.")}], "temperature": 1.0,
            "seed": seed, "max_tokens": 48,
            "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema()}}})
    };
    let content = |text: &str| -> String {
        let v: Value = serde_json::from_str(text).unwrap();
        v["choices"][0]["message"]["content"].as_str().unwrap().to_string()
    };
    let alone = [content(&peer.chat(body("Paris", 1)).1), content(&peer.chat(body("Rome", 2)).1)];
    let together: Vec<String> = std::thread::scope(|s| {
        let a = s.spawn(|| content(&peer.chat(body("Paris", 1)).1));
        let b = s.spawn(|| content(&peer.chat(body("Rome", 2)).1));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    assert_eq!(together, alone);
    for c in &together {
        assert!(c.starts_with("{\"city\": "), "{c}");
    }
}
