//! Golden files recorded from the reference implementations (scripts/golden/):
//! token ids from llama.cpp, chat-template renderings from Python jinja2.

mod common;

use hearth_engine::{ChatMessage, ChatTemplate, GgufFile, Role, Tokenizer};
use serde_json::Value;

fn load(name: &str) -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn token_ids_equal_llama_cpp_on_the_corpus() {
    let file = GgufFile::open(common::default_model()).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    let golden = load("tokenizer_smollm2.json");
    let cases = golden["cases"].as_array().unwrap();
    assert!(cases.len() >= 200);
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        for (mode, special) in [("special", true), ("plain", false)] {
            let want = ids(&case[mode]);
            let got = tok.encode(text, false, special).unwrap();
            if got != want {
                failures.push(format!("{mode} {text:?}: llama.cpp {want:?}, hearth {got:?}"));
            }
        }
        // Byte-level BPE is lossless: decoding the plain ids gives the text back.
        assert_eq!(tok.decode(&ids(&case["plain"])), text);
    }
    assert!(failures.is_empty(), "{} of {} mismatches:\n{}", failures.len(), cases.len() * 2, failures.join("\n"));
}

#[test]
fn bos_is_added_only_when_the_model_asks() {
    let file = GgufFile::open(common::default_model()).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    assert!(!tok.add_bos(), "SmolLM2 sets add_bos_token=false");
    assert_eq!(tok.encode("Hi", true, true).unwrap(), tok.encode("Hi", false, true).unwrap());
}

#[test]
fn templates_render_like_python_jinja2() {
    let golden = load("template_golden.json");
    let mut checked = 0;
    for case in golden["cases"].as_array().unwrap() {
        let name = case["template"].as_str().unwrap();
        let t = &golden["templates"][name];
        let tmpl = ChatTemplate::new(t["source"].as_str().unwrap(), t["bos_token"].as_str().unwrap(), t["eos_token"].as_str().unwrap()).unwrap();
        let messages: Vec<ChatMessage> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let role = match m["role"].as_str().unwrap() {
                    "system" => Role::System,
                    "user" => Role::User,
                    _ => Role::Assistant,
                };
                ChatMessage::new(role, m["content"].as_str().unwrap())
            })
            .collect();
        let got = tmpl.render(&messages, case["add_generation_prompt"].as_bool().unwrap());
        match (&case["ok"], got) {
            (Value::String(want), Ok(got)) => assert_eq!(&got, want, "template {name}, messages {}", case["messages"]),
            (Value::Null, Err(e)) => {
                let want = case["error"].as_str().unwrap();
                assert!(e.to_string().contains(want), "template {name}: error {e} does not carry {want:?}");
            }
            (want, got) => panic!("template {name}: jinja2 gave {want}, minijinja gave {got:?}"),
        }
        checked += 1;
    }
    assert!(checked >= 60);
}
