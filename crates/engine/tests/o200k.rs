//! gpt-oss's vocabulary (o200k with Harmony's specials, built from the
//! `tiktoken-rs` crate's copy of OpenAI's ranks; `tests/common/o200k.rs`)
//! tokenizes as llama.cpp tokenizes it from the same GGUF: the pre-tokenizer
//! corpus (code, CJK, emoji, numbers, whitespace runs) and Harmony's own
//! markup, with and without special tokens parsed.

mod common;

use hearth_engine::gguf::GgufFile;
use hearth_engine::tokenizer::Tokenizer;

fn corpus() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer_pre.json");
    let golden: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut texts: Vec<String> =
        golden["pre"]["gpt-4o"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap().to_string()).collect();
    texts.extend(
        [
            // Harmony, as a prompt carries it and as a reply streams it.
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nReasoning: high\n\n# Valid channels: analysis, commentary, final.<|end|>",
            "<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant",
            "<|channel|>analysis<|message|>User asks simple math.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>",
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Paris\"}<|call|>",
            "<|reserved_200017|> <|endoftext|><|startoftext|>",
            // Scripts and symbols o200k merges across.
            "日本語の文章と한국어 문장, 中文句子。",
            "Ünïcödé façade — “quotes” and ‘apostrophes’ … ½ ⅓ №",
            "👩‍👩‍👧‍👦🏳️‍🌈 🇫🇷🇯🇵 👍🏽👍🏿",
            "Здравствуйте, как дела? مرحبا بالعالم שלום עולם नमस्ते",
            "3.14159265358979 1,000,000 0x1F 1e-10 -42 2026-12-05T01:40:00Z",
            "fn main() {\n    let x: Vec<u8> = vec![0xFF; 16];\n\tprintln!(\"{x:?}\");\n}\n",
            "def f(a, b):\n        return a**b  # comment\n\n\n    \n",
            "   leading spaces and trailing   \n\n\n\t\t\t  ",
            "CamelCaseWordsAndALLCAPSWords andMixedUPPERlower I'm you're THEY'LL",
        ]
        .map(String::from),
    );
    texts
}

#[test]
fn o200k_tokenizes_as_llama_cpp_does() {
    let Some(python) = common::llamacpp_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("o200k.gguf");
    common::o200k::write_vocabulary_only(&model);
    let texts = corpus();
    let (texts_path, out) = (dir.path().join("texts.json"), dir.path().join("ids.json"));
    std::fs::write(&texts_path, serde_json::to_string(&texts).unwrap()).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/llamacpp/token_ids.py");
    let run = std::process::Command::new(python).arg(script).arg(&model).arg(&texts_path).arg(&out).output().unwrap();
    assert!(run.status.success(), "llama.cpp failed: {}", String::from_utf8_lossy(&run.stderr));
    let want: Vec<[Vec<u32>; 2]> = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();

    let tok = Tokenizer::from_gguf(&GgufFile::open(&model).unwrap()).unwrap();
    assert_eq!(tok.vocab_size(), common::o200k::VOCAB);
    let mut failures = Vec::new();
    for (text, [plain, special]) in texts.iter().zip(&want) {
        for (parse_special, want) in [(false, plain), (true, special)] {
            let got = tok.encode(text, false, parse_special).unwrap();
            if &got != want {
                failures.push(format!("{text:?} (special {parse_special}): llama.cpp {want:?}, hearth {got:?}"));
            }
        }
        assert_eq!(tok.decode(plain), *text, "ids decode to their text");
    }
    assert!(failures.is_empty(), "{} of {} differ:\n{}", failures.len(), 2 * texts.len(), failures.join("\n"));
    // Harmony's structure tokens are one token each even in plain text,
    // and written out when decoded (llama.cpp's rule); its turn ends are
    // control tokens, matched only when asked to and never written.
    let header = "<|start|>assistant<|channel|>final<|message|>";
    let ids = tok.encode(header, false, false).unwrap();
    assert_eq!(ids.len(), 5, "{ids:?}");
    assert_eq!(tok.decode(&ids), header);
    assert_eq!(tok.encode("<|return|>", false, true).unwrap(), [200_002]);
    assert!(tok.encode("<|return|>", false, false).unwrap().len() > 1);
    assert_eq!(tok.decode(&[200_002, 200_012]), "");
    assert_eq!(tok.decode(&[200_007]), "<|end|>");
}
