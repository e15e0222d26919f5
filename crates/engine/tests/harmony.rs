//! gpt-oss's Harmony format from its real template (`tests/data/templates/
//! gpt-oss.jinja`): rendering against Python jinja2 (`scripts/golden/
//! record_harmony_template.py`) with the reasoning effort unset, low,
//! medium and high; and a gpt-oss file with the real vocabulary and template:
//! its end tokens, its reasoning format, and replies given back to the
//! template as it wants them.

mod common;

use common::{tiny, Family, TinySpec};
use hearth_engine::{ChatMessage, ChatTemplate, Engine, PromptOptions, ReasoningEffort, Role};

fn data(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// The recorder's `strftime_now`.
fn recorded_now() -> chrono::NaiveDateTime {
    chrono::NaiveDate::from_ymd_opt(2026, 12, 5).unwrap().and_hms_opt(1, 40, 0).unwrap()
}

fn message(m: &serde_json::Value) -> ChatMessage {
    let role = match m["role"].as_str().unwrap() {
        "system" => Role::System,
        "user" => Role::User,
        _ => Role::Assistant,
    };
    let mut message = ChatMessage::new(role, m["content"].as_str().unwrap());
    message.thinking = m["thinking"].as_str().map(str::to_string);
    message
}

#[test]
fn the_gpt_oss_template_renders_like_python_jinja2_at_every_reasoning_effort() {
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("harmony_template_golden.json")).unwrap()).unwrap();
    let source = std::fs::read_to_string(data(golden["template"].as_str().unwrap())).unwrap();
    let tmpl = ChatTemplate::with_clock(&source, "<|startoftext|>", "<|return|>", recorded_now).unwrap();
    let format = hearth_engine::ReasoningFormat::detect(&tmpl).expect("Harmony is a reasoning format");
    assert_eq!(format.answer_start.as_deref(), Some("<|channel|>final<|message|>"));
    assert_eq!(format.effort.as_deref(), Some("reasoning_effort"));
    let (mut rendered, mut refused) = (0, 0);
    for case in golden["cases"].as_array().unwrap() {
        let messages: Vec<ChatMessage> = case["messages"].as_array().unwrap().iter().map(message).collect();
        let agp = case["add_generation_prompt"].as_bool().unwrap();
        let vars: Vec<(&str, serde_json::Value)> =
            case["reasoning_effort"].as_str().map(|e| ("reasoning_effort", e.into())).into_iter().collect();
        let got = tmpl.render_with(&messages, agp, &vars);
        match case["ok"].as_str() {
            Some(want) => {
                assert_eq!(got.unwrap(), want, "effort {}, messages {}", case["reasoning_effort"], case["messages"]);
                rendered += 1;
            }
            None => {
                let err = got.expect_err("jinja2 refused this").to_string();
                assert!(err.contains("<|channel|> tags in the content field"), "{err}");
                refused += 1;
            }
        }
    }
    assert_eq!((rendered, refused), (40, 8));
}

fn gpt_oss_engine() -> (tempfile::TempDir, Engine) {
    let (dir, path) = tiny(&TinySpec { o200k: true, ..TinySpec::new(Family::GptOss) });
    // The template writes the day into the prompt: fixed, so what is sampled does not depend on the date.
    let engine = Engine::open(&path).unwrap().with_template_clock(recorded_now).unwrap();
    (dir, engine)
}

#[test]
fn a_gpt_oss_file_ends_turns_on_return_and_call_and_takes_replies_apart_for_its_template() {
    let (_dir, engine) = gpt_oss_engine();
    // <|return|> (its EOS) and <|call|>; <|end|> ends only a message.
    let mut ends = engine.end_tokens().to_vec();
    ends.sort();
    assert_eq!(ends, [200_002, 200_012]);
    let format = engine.reasoning().expect("Harmony");
    assert_eq!((format.open.as_str(), format.close.as_str()), ("<|channel|>analysis<|message|>", "<|end|>"));

    // A reply as gpt-oss writes it goes back with its analysis dropped, as
    // the template's own text says, and its final message as content.
    let reply =
        "<|channel|>analysis<|message|>User asks simple math.<|end|><|start|>assistant<|channel|>final<|message|>**4**";
    let messages =
        [ChatMessage::user("What is 2 + 2?"), ChatMessage::assistant(reply), ChatMessage::user("And 3 + 3?")];
    for effort in [ReasoningEffort::Low, ReasoningEffort::Medium, ReasoningEffort::High] {
        let prompt =
            engine.render_chat(&messages, PromptOptions { effort: Some(effort), ..Default::default() }).unwrap();
        assert!(prompt.contains(&format!("\nReasoning: {}\n", effort.as_str())), "{prompt}");
        assert!(
            prompt.ends_with(
                "<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant<|channel|>final<|message|>**4**<|end|>\
                 <|start|>user<|message|>And 3 + 3?<|end|><|start|>assistant"
            ),
            "{prompt}"
        );
        assert!(!prompt.contains("simple math"), "{prompt}");
    }
    // The template's own default: medium.
    assert!(engine.render_chat(&messages, PromptOptions::default()).unwrap().contains("\nReasoning: medium\n"));

    // The prompt's ids: Harmony's structure tokens are single tokens, and
    // the generation prompt `<|start|>assistant` opens the reply.
    let ids = engine.encode_chat(&messages).unwrap();
    assert_eq!(&ids[ids.len() - 2..], &[200_006, 173_781]);
    let opening = engine.generation_prompt_ids(PromptOptions::default()).unwrap().expect("a special token opens it");
    assert_eq!(opening, [200_006, 173_781]);
}

#[test]
fn a_gpt_oss_reply_streams_its_analysis_apart_from_its_answer() {
    let (_dir, engine) = gpt_oss_engine();
    let format = engine.reasoning().unwrap().clone();
    let tok = engine.tokenizer();
    let reply = "<|channel|>analysis<|message|>The user greets; reply in kind.<|end|>\
                 <|start|>assistant<|channel|>final<|message|>Hello! 👋 How can I help?";
    // The reply as the model samples it, token by token, through the
    // streaming decoder: Harmony's structure tokens are written out.
    let mut ids = tok.encode(reply, false, true).unwrap();
    ids.push(200_002);
    let mut decoder = hearth_engine::StreamDecoder::new();
    let mut splitter = hearth_engine::ReplySplitter::new(format.clone(), false);
    let mut tracker = hearth_engine::ThinkingTracker::new(format.clone(), false);
    let (mut text, mut reasoning, mut answer) = (String::new(), String::new(), String::new());
    let mut closed_at = None;
    for (n, &id) in ids.iter().enumerate() {
        let piece = decoder.push(tok.token_bytes(id));
        if let hearth_engine::Thinking::Closed { tokens } = tracker.push(&piece, n + 1) {
            closed_at.get_or_insert(tokens);
        }
        let out = splitter.push(&piece);
        reasoning.push_str(&out.reasoning);
        answer.push_str(&out.answer);
        text.push_str(&piece);
    }
    let out = splitter.finish();
    reasoning.push_str(&out.reasoning);
    answer.push_str(&out.answer);
    assert_eq!(text, reply, "the stream's text is the reply, <|return|> unwritten");
    assert_eq!(reasoning, "The user greets; reply in kind.");
    assert_eq!(answer, "Hello! 👋 How can I help?");
    assert_eq!(format.split(&text), (Some(reasoning), answer));
    let end = ids.iter().position(|&id| id == 200_007).unwrap();
    assert_eq!(closed_at, Some(end + 1), "thinking ends with the analysis' <|end|>");
}

/// The made gpt-oss file (`common::o200k::write_scripted_gpt_oss`) writes
/// its Harmony reply through the real engine: greedy and sampled at the
/// app's default settings, with a reasoning effort and without, and again
/// as the second turn of a conversation whose first reply goes back
/// through the template.
#[test]
fn a_gpt_oss_file_writes_a_whole_harmony_reply_through_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scripted-gpt-oss.gguf");
    common::o200k::write_scripted_gpt_oss(&path, "The user says hi.", "Hello! How can I help?");
    let engine = Engine::open(&path).unwrap();
    let (m, tok) = (engine.model(), engine.tokenizer());
    let want = "<|channel|>analysis<|message|>The user says hi.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?";
    let reply = |messages: &[ChatMessage], options: PromptOptions, sampling: hearth_engine::SamplingParams| {
        let ids = engine.encode_chat_with(messages, options).unwrap();
        let out = engine
            .new_session(None)
            .start_turn(m, tok, &ids, engine.generation_config(sampling, 64), 1)
            .unwrap()
            .run()
            .unwrap();
        let s = &out.sequences[0];
        assert_eq!(s.finish, hearth_engine::FinishReason::EndToken, "{:?}", s.text);
        assert_eq!(s.tokens.last(), Some(&200_002), "ends on <|return|>");
        s.text.clone()
    };
    let ask = [ChatMessage::user("Hi")];
    let default = hearth_engine::SamplingParams { temperature: 0.7, seed: 3, ..Default::default() };
    for effort in [None, Some(ReasoningEffort::Low), Some(ReasoningEffort::High)] {
        let options = PromptOptions { effort, ..Default::default() };
        assert_eq!(reply(&ask, options, hearth_engine::SamplingParams::greedy()), want);
        assert_eq!(reply(&ask, options, default.clone()), want);
    }
    let format = engine.reasoning().unwrap();
    assert_eq!(format.split(want), (Some("The user says hi.".into()), "Hello! How can I help?".into()));
    let second = [ChatMessage::user("Hi"), ChatMessage::assistant(want), ChatMessage::user("Thanks")];
    assert_eq!(reply(&second, PromptOptions::default(), default), want);
}

/// gpt-oss's own tool format: the template takes the tools as its
/// `functions` namespace and renders an earlier call and its result as
/// Harmony messages; a required call, sampled hot on a random model, is a
/// commentary message to one function whose JSON body parses.
#[test]
fn a_required_gpt_oss_call_is_a_commentary_message_to_the_function() {
    use hearth_engine::{SamplingParams, ToolCall, ToolChoice, ToolFormat, ToolSpec, Tools};
    let (_dir, engine) = gpt_oss_engine();
    assert_eq!(engine.tool_format(), ToolFormat::Harmony);
    let weather = ToolSpec {
        name: "get_weather".into(),
        description: Some("The weather in a city.".into()),
        parameters: serde_json::json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}),
    };
    let tools = Tools { specs: vec![weather], choice: ToolChoice::Required, parallel: false };
    let mut call = ChatMessage::assistant("");
    call.tool_calls = Some(vec![ToolCall {
        id: "call_0".into(),
        name: "get_weather".into(),
        arguments: r#"{"city":"Paris"}"#.into(),
    }]);
    let mut result = ChatMessage::new(Role::Tool, "sunny");
    result.tool_call_id = Some("call_0".into());
    let history = [ChatMessage::user("Weather in Paris?"), call, result];
    let text = engine.render_chat_tools(&history, PromptOptions::default(), &tools).unwrap();
    assert!(text.contains("namespace functions {") && text.contains("type get_weather = (_: {"), "{text}");
    assert!(
        text.contains(
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>\
             <|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"sunny\"<|end|>"
        ),
        "{text}"
    );

    let ask = [ChatMessage::user("Weather in Paris?")];
    let prompt = engine.encode_chat_tools(&ask, PromptOptions::default(), &tools).unwrap();
    let grammar = engine.compile_grammar(&tools.call_grammar(ToolFormat::Harmony).unwrap()).unwrap();
    // The city's length is bounded, so every call ends within the 200
    // tokens whatever is sampled: all four must end and parse.
    for seed in 0..4 {
        let mut config = engine.generation_config(SamplingParams { temperature: 1.5, seed, ..Default::default() }, 200);
        config.grammar = Some(grammar.clone());
        let mut session = engine.new_session(Some(4096));
        let out = session.start_turn(engine.model(), engine.tokenizer(), &prompt, config, 1).unwrap().run().unwrap();
        let seq = &out.sequences[0];
        assert!(
            engine.end_tokens().contains(seq.tokens.last().unwrap()),
            "seed {seed}: cut at the limit: {:?}",
            seq.text
        );
        let (_, calls) = ToolFormat::Harmony.parse(&seq.text, "call_");
        assert_eq!(calls.len(), 1, "{:?}", seq.text);
        assert_eq!(calls[0].name, "get_weather");
        let args: serde_json::Value = serde_json::from_str(&calls[0].arguments).unwrap();
        assert!(args["city"].is_string(), "{args}");
    }
}
