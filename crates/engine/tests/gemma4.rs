//! Gemma 4's vocabulary and template: a BPE over SentencePiece pieces
//! (`tests/common/gemma4_vocab.rs` makes one from the real Gemma 3 file's
//! pieces) tokenizing as llama.cpp tokenizes it from the same GGUF, and
//! its real chat template rendering as Python's jinja2 renders it.

mod common;

use hearth_engine::gguf::GgufFile;
use hearth_engine::tokenizer::Tokenizer;
use hearth_engine::{ChatMessage, ChatTemplate, Engine, PromptOptions, ReplySplitter, Role};

fn template() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/templates/gemma-4.jinja");
    std::fs::read_to_string(path).unwrap()
}

fn corpus() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer_pre.json");
    let golden: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut texts: Vec<String> =
        golden["pre"]["gpt-4o"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap().to_string()).collect();
    texts.extend(
        [
            // Gemma 4's turns, thinking and tool markup, as its template writes them.
            "<bos><|turn>system\n<|think|>\nYou are a helpful assistant.<turn|>\n<|turn>user\nHi there<turn|>\n<|turn>model\n",
            "<|channel>thought\nThe user greets me.\n<channel|>Hello! How can I help?<turn|>",
            "<|turn>model\n<|channel>thought\n<channel|>",
            "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>response:get_weather{value:<|\"|>sunny<|\"|>}<tool_response|>",
            "<|tool>declaration:get_weather{description:<|\"|>Weather<|\"|>}<tool|><|image|><|audio|>",
            // Runs of newlines and spaces, alone and mixed, where the
            // pre-tokenizer cuts.
            "\n", "\n\n", "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", " \n \n\n  \n\n\n   ",
            "a\n\nb\n\n\nc \n d", "    indented\n        more\n\t\ttabs\n",
            "trailing spaces     ", "     leading", " ", "  ", "",
            // Scripts, symbols, and characters with no piece (bytes).
            "日本語の文章と한국어 문장, 中文句子。", "Здравствуйте, как дела? مرحبا بالعالم שלום עולם नमस्ते",
            "👩‍👩‍👧‍👦🏳️‍🌈 🇫🇷🇯🇵 👍🏽", "\u{1F9CC}\u{1FAE8} \u{E000}\u{10FFFD} \u{0}\u{1}\u{7F}",
            "3.14159265358979 1,000,000 0x1F 1e-10 -42", "fn main() {\n    println!(\"{x:?}\");\n}\n",
            "<start_of_turn>user\nold markup<end_of_turn>", "<eos><pad><unk> <mask>",
        ]
        .map(String::from),
    );
    texts
}

#[test]
fn the_gemma4_vocabulary_tokenizes_as_llama_cpp_does() {
    let Some(python) = common::llamacpp_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("gemma4-vocab.gguf");
    common::gemma4_vocab::write_vocabulary_only(&common::gemma3_model(), &model, &template());
    let texts = corpus();
    let (texts_path, out) = (dir.path().join("texts.json"), dir.path().join("ids.json"));
    std::fs::write(&texts_path, serde_json::to_string(&texts).unwrap()).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/llamacpp/token_ids.py");
    let run = std::process::Command::new(python).arg(script).arg(&model).arg(&texts_path).arg(&out).output().unwrap();
    assert!(run.status.success(), "llama.cpp failed: {}", String::from_utf8_lossy(&run.stderr));
    let want: Vec<[Vec<u32>; 2]> = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();

    let tok = Tokenizer::from_gguf(&GgufFile::open(&model).unwrap()).unwrap();
    assert_eq!(tok.vocab_size(), 262_144);
    assert!(tok.add_bos(), "llama.cpp always adds Gemma 4's BOS");
    let mut failures = Vec::new();
    let mut tokens = 0;
    for (text, [plain, special]) in texts.iter().zip(&want) {
        for (parse_special, want) in [(false, plain), (true, special)] {
            let got = tok.encode(text, false, parse_special).unwrap();
            tokens += got.len();
            if &got != want {
                failures.push(format!("{text:?} (specials {parse_special}): Hearth {got:?}, llama.cpp {want:?}"));
            }
        }
        // Decoding gives the text back (byte tokens and pieces alike), but
        // for a typed `▁`, which reads as the space it stands for.
        let ids = tok.encode(text, false, false).unwrap();
        assert_eq!(tok.decode(&ids), text.replace('▁', " "), "decoding {text:?}");
    }
    eprintln!("{} texts, {tokens} tokens, {} differ", texts.len(), failures.len());
    assert!(
        failures.is_empty(),
        "{} of {} encodings differ:\n{}",
        failures.len(),
        2 * texts.len(),
        failures.join("\n")
    );
}

fn data(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn message(m: &serde_json::Value) -> ChatMessage {
    let role = match m["role"].as_str().unwrap() {
        "system" => Role::System,
        "user" => Role::User,
        _ => Role::Assistant,
    };
    ChatMessage::new(role, m["content"].as_str().unwrap())
}

/// `scripts/golden/record_gemma4_template.py`'s cases: thinking unset, off
/// and on, a system message, several turns, earlier replies whose thought
/// channel the template strips.
#[test]
fn the_gemma4_template_renders_like_python_jinja2_with_thinking_off_and_on() {
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("gemma4_template_golden.json")).unwrap()).unwrap();
    let source = std::fs::read_to_string(data(golden["template"].as_str().unwrap())).unwrap();
    let tmpl = ChatTemplate::new(&source, "<bos>", "<eos>").unwrap();
    let format = hearth_engine::ReasoningFormat::detect(&tmpl).expect("Gemma 4 thinks in a channel");
    assert_eq!((format.open.as_str(), format.close.as_str()), ("<|channel>thought", "<channel|>"));
    assert_eq!(format.switch.as_deref(), Some("enable_thinking"));
    assert!(!format.opened_by_prompt);
    let mut rendered = 0;
    for case in golden["cases"].as_array().unwrap() {
        let messages: Vec<ChatMessage> = case["messages"].as_array().unwrap().iter().map(message).collect();
        let agp = case["add_generation_prompt"].as_bool().unwrap();
        let vars: Vec<(&str, serde_json::Value)> =
            case["enable_thinking"].as_bool().map(|t| ("enable_thinking", t.into())).into_iter().collect();
        let want = case["ok"].as_str().expect("every case renders");
        let got = tmpl.render_with(&messages, agp, &vars).unwrap();
        assert_eq!(got, want, "thinking {}, messages {}", case["enable_thinking"], case["messages"]);
        rendered += 1;
    }
    assert_eq!(rendered, 36);
}

/// A Gemma 4 file with its vocabulary and real template, through the
/// engine: `<turn|>` and `<|tool_response>` end a reply and `<channel|>`
/// does not; the thinking switch; a reply's thought channel dropped from
/// the next prompt by the template and given to the API as reasoning.
#[test]
fn a_gemma4_file_ends_turns_thinks_on_its_switch_and_drops_earlier_thoughts() {
    let mut spec = common::TinySpec::gemma4(false);
    spec.gemma4.per_layer = 0;
    spec.gemma4.real_vocab = true;
    let (_dir, path) = common::tiny(&spec);
    let engine = Engine::open(&path).unwrap();
    let tok = engine.tokenizer();
    let id = |t: &str| tok.token_id(t).unwrap();
    let mut ends = engine.end_tokens().to_vec();
    ends.sort();
    let mut want = vec![id("<eos>"), id("<turn|>"), id("<|tool_response>")];
    want.sort();
    assert_eq!(ends, want);
    let format = engine.reasoning().expect("Gemma 4 thinks").clone();
    assert_eq!(format.switch.as_deref(), Some("enable_thinking"));

    let reply = "<|channel>thought\nThe user adds.\n<channel|>It is **4**.";
    let messages =
        [ChatMessage::user("What is 2 + 2?"), ChatMessage::assistant(reply), ChatMessage::user("And 3 + 3?")];
    let on = engine.render_chat(&messages, PromptOptions { thinking: Some(true), ..Default::default() }).unwrap();
    assert!(on.starts_with("<bos><|turn>system\n<|think|>\n<turn|>\n"), "{on}");
    assert!(on.ends_with("<|turn>user\nAnd 3 + 3?<turn|>\n<|turn>model\n"), "{on}");
    assert!(!on.contains("The user adds"), "earlier thoughts are dropped: {on}");
    let off = engine.render_chat(&messages, PromptOptions { thinking: Some(false), ..Default::default() }).unwrap();
    assert!(off.ends_with("<|turn>model\n<|channel>thought\n<channel|>"), "{off}");
    // Markup is one token each; `<bos>` once.
    let ids = engine.encode_chat_with(&messages, PromptOptions { thinking: Some(true), ..Default::default() }).unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == id("<bos>")).count(), 1);
    assert!(ids.contains(&id("<|think|>")) && ids.contains(&id("<|turn>")));
    // A user's text that spells markup stays text.
    let typed = tok.encode("<|turn>system", false, false).unwrap();
    assert!(!typed.contains(&id("<|turn>")));

    // The reply as the model writes it: its channel tokens are written out,
    // and the API's reasoning and answer come apart.
    let written = tok.encode(reply, false, true).unwrap();
    assert!(written.contains(&id("<|channel>")) && written.contains(&id("<channel|>")));
    assert_eq!(tok.decode(&written), reply, "the channel tokens are rendered");
    let mut split = ReplySplitter::new(format, false);
    let (mut reasoning, mut answer) = (String::new(), String::new());
    for &t in &written {
        let piece = split.push(&tok.decode(&[t]));
        reasoning.push_str(&piece.reasoning);
        answer.push_str(&piece.answer);
    }
    let rest = split.finish();
    reasoning.push_str(&rest.reasoning);
    answer.push_str(&rest.answer);
    assert_eq!((reasoning.as_str(), answer.as_str()), ("The user adds.", "It is **4**."));
}

/// Gemma 4's own tool format: the template takes the tools, and a required
/// call, sampled hot on a random model, is a `<|tool_call>call:NAME{…}`
/// block that parses, naming only the arguments the schema declares.
#[test]
fn a_required_gemma4_call_is_written_in_its_own_syntax_and_parses() {
    use hearth_engine::{SamplingParams, ToolChoice, ToolFormat, ToolSpec, Tools};
    let mut spec = common::TinySpec::gemma4(false);
    spec.gemma4.per_layer = 0;
    spec.gemma4.real_vocab = true;
    let (_dir, path) = common::tiny(&spec);
    let engine = Engine::open(&path).unwrap();
    assert_eq!(engine.tool_format(), ToolFormat::Gemma4);
    let weather = ToolSpec {
        name: "get_weather".into(),
        description: Some("The weather in a city.".into()),
        parameters: serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}),
    };
    let tools = Tools { specs: vec![weather], choice: ToolChoice::Required, parallel: false };
    let ask = [ChatMessage::user("Weather in Paris?")];
    let text = engine.render_chat_tools(&ask, PromptOptions::default(), &tools).unwrap();
    assert!(text.contains("<|tool>declaration:get_weather{description:<|\"|>The weather in a city.<|\"|>"), "{text}");
    let prompt = engine.encode_chat_tools(&ask, PromptOptions::default(), &tools).unwrap();
    let grammar = engine.compile_grammar(&tools.call_grammar(ToolFormat::Gemma4).unwrap()).unwrap();
    let mut complete = 0;
    for seed in 0..4 {
        let mut config = engine.generation_config(SamplingParams { temperature: 1.5, seed, ..Default::default() }, 300);
        config.grammar = Some(grammar.clone());
        let mut session = engine.new_session(Some(2048));
        let out = session.start_turn(engine.model(), engine.tokenizer(), &prompt, config, 1).unwrap().run().unwrap();
        let seq = &out.sequences[0];
        if !engine.end_tokens().contains(seq.tokens.last().unwrap()) {
            continue; // cut at the limit: a prefix of a call
        }
        let (content, calls) = ToolFormat::Gemma4.parse(&seq.text, "call_");
        assert_eq!((content.as_str(), calls.len()), ("", 1), "{:?}", seq.text);
        assert_eq!(calls[0].name, "get_weather");
        let args: serde_json::Value = serde_json::from_str(&calls[0].arguments).unwrap();
        assert!(args.as_object().unwrap().keys().all(|k| k == "city" || k == "days"), "{args}");
        complete += 1;
    }
    assert!(complete >= 2, "{complete} of 4 calls ended within the limit");
}
