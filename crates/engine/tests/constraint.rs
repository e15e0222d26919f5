//! Constrained decoding on the real default model: a JSON schema, any JSON
//! object, a Lark grammar. Every reply follows its grammar, whatever the
//! sampler settings; a token the grammar forbids is never sampled; the seed
//! reproduces; an unsupported schema feature is an error naming it.

mod common;

use hearth_engine::{ChatMessage, Engine, GrammarSpec, SamplingParams};
use serde_json::{json, Value};

fn reply(
    engine: &Engine,
    ask: &str,
    spec: &GrammarSpec,
    sampling: SamplingParams,
    batch: usize,
) -> Vec<(Vec<u32>, String)> {
    let prompt = engine.encode_chat(&[ChatMessage::user(ask)]).unwrap();
    let mut config = engine.generation_config(sampling, 96);
    config.grammar = Some(engine.compile_grammar(spec).unwrap());
    let mut session = engine.new_session(Some(1024));
    let out = session.start_turn(engine.model(), engine.tokenizer(), &prompt, config, batch).unwrap().run().unwrap();
    out.sequences.iter().map(|s| (s.tokens.clone(), s.text.clone())).collect()
}

fn person() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "colours": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3}
        },
        "required": ["name", "age", "colours"],
        "additionalProperties": false
    })
}

fn check_person(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?} is not JSON: {e}"));
    let obj = v.as_object().unwrap_or_else(|| panic!("{text:?} is not an object"));
    assert_eq!(obj.len(), 3, "{text}");
    assert!(obj["name"].as_str().is_some_and(|n| n.chars().count() <= 20), "{text}");
    assert!(obj["age"].as_i64().is_some_and(|a| (0..=150).contains(&a)), "{text}");
    assert!(
        obj["colours"].as_array().unwrap().iter().all(|c| ["red", "green", "blue"].contains(&c.as_str().unwrap())),
        "{text}"
    );
}

#[test]
fn replies_follow_a_json_schema_greedy_and_sampled_and_the_seed_reproduces() {
    let engine = common::open_default();
    let spec = GrammarSpec::JsonSchema(person());
    let ask = "Describe a person as JSON.";
    let greedy = reply(&engine, ask, &spec, SamplingParams { temperature: 0.0, ..Default::default() }, 1);
    check_person(&greedy[0].1);
    // Hot sampling with wide truncation, four variants: each still valid.
    let hot = SamplingParams { temperature: 1.5, top_k: None, top_p: 1.0, min_p: 0.0, seed: 7, ..Default::default() };
    let variants = reply(&engine, ask, &spec, hot.clone(), 4);
    for (_, text) in &variants {
        check_person(text);
    }
    assert!(variants.iter().any(|v| v.1 != variants[0].1), "four identical samples at temperature 1.5");
    // The seed reproduces, and each variant is its lone run with seed + b.
    assert_eq!(reply(&engine, ask, &spec, hot.clone(), 4), variants);
    let second = reply(&engine, ask, &spec, SamplingParams { seed: 8, ..hot }, 1);
    assert_eq!(second[0], variants[1]);
    // Every reply ends with the model's end token, where the grammar may end.
    assert!(variants.iter().all(|(ids, _)| engine.end_tokens().contains(ids.last().unwrap())));
}

#[test]
fn a_token_the_grammar_forbids_is_never_sampled() {
    let engine = common::open_default();
    let spec = GrammarSpec::Lark("start: (\"yes\" | \"no\") \".\"".into());
    let hot = SamplingParams { temperature: 2.0, top_k: None, top_p: 1.0, min_p: 0.0, seed: 3, ..Default::default() };
    for (ids, text) in reply(&engine, "Is the sea wet?", &spec, hot, 8) {
        assert!(text == "yes." || text == "no.", "{text:?} ({ids:?})");
    }
}

/// Any JSON object: the end is allowed exactly where an object closes,
/// never before, and text that is not an object is refused from its first
/// token; sampled replies that ended (not cut at the limit, as an object
/// nested without end may be) parse as one.
#[test]
fn any_json_object() {
    let engine = common::open_default();
    let (tok, ends) = (engine.tokenizer(), engine.end_tokens());
    let grammar = engine.compile_grammar(&GrammarSpec::JsonObject).unwrap();
    let mut c = grammar.start();
    let ids = tok.encode("{\"a\": [1, 2], \"b\": {\"c\": null}}", false, false).unwrap();
    for (i, &t) in ids.iter().enumerate() {
        let mask = c.mask().unwrap();
        assert!(mask.allows(t, ends), "token {i} of a valid object refused");
        assert!(!mask.allows(ends[0], ends), "the end allowed inside the object, at token {i}");
        c.consume(t).unwrap();
    }
    assert!(c.mask().unwrap().allows(ends[0], ends), "the end refused after the object closed");
    let array = tok.encode("[1]", false, false).unwrap();
    assert!(!grammar.start().mask().unwrap().allows(array[0], ends), "an array is not an object");

    for seed in [11, 12] {
        let hot = SamplingParams { temperature: 0.7, seed, ..Default::default() };
        for (ids, text) in reply(&engine, "Give me a small JSON object.", &GrammarSpec::JsonObject, hot, 4) {
            if ends.contains(ids.last().unwrap()) {
                let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
                assert!(v.is_object(), "{text}");
            } else {
                assert!(text.starts_with('{'), "{text}");
            }
        }
    }
}

#[test]
fn a_schema_feature_the_compiler_lacks_is_an_error_naming_it() {
    let engine = common::open_default();
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}, "dependentSchemas": {"a": {"required": ["b"]}}});
    let err = engine.compile_grammar(&GrammarSpec::JsonSchema(schema)).unwrap_err().to_string();
    assert!(err.contains("dependentSchemas"), "{err}");
    let err = engine.compile_grammar(&GrammarSpec::Lark("start: (".into())).unwrap_err().to_string();
    assert!(err.contains("response_format"), "{err}");
}
