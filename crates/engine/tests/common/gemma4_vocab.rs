//! A Gemma 4 vocabulary (`tokenizer.ggml.model = gemma4`: SentencePiece
//! pieces merged as a BPE by rank) made at test time from the real Gemma 3
//! file's 262,144 pieces, the vocabulary Gemma 4's grew from: merges
//! derived as Hugging Face's SentencePiece converter derives them (every
//! split of a piece into two pieces, by the piece's score), and Gemma 4's
//! turn, channel and tool tokens in place of unused ones, typed as its
//! converter types them. No hub is reached, and the pieces, byte tokens
//! and merges are of real size and shape.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use hearth_engine::gguf::GgufFile;

/// Gemma 4's own tokens and their GGUF types: control (3) for turns and
/// thinking, user-defined (4) for what its converter keeps visible.
pub const SPECIALS: &[(&str, i32)] = &[
    ("<|turn>", 3),
    ("<turn|>", 3),
    ("<|think|>", 3),
    ("<|tool>", 3),
    ("<tool|>", 3),
    ("<|channel>", 4),
    ("<channel|>", 4),
    ("<|tool_call>", 4),
    ("<tool_call|>", 4),
    ("<|tool_response>", 4),
    ("<tool_response|>", 4),
    ("<|\"|>", 4),
    ("<|image|>", 3),
    ("<|audio|>", 3),
];

/// The vocabulary's metadata, with `template` as its chat template.
pub fn tokenizer_metadata(gemma3: &Path, template: &str) -> Vec<(String, Value)> {
    let file = GgufFile::open(gemma3).unwrap();
    let mut tokens: Vec<String> = file
        .array("tokenizer.ggml.tokens")
        .unwrap()
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            _ => panic!("a non-string token"),
        })
        .collect();
    let scores: Vec<f32> = file.array("tokenizer.ggml.scores").unwrap().iter().map(|v| v.to_f32().unwrap()).collect();
    let mut types: Vec<i32> =
        file.array("tokenizer.ggml.token_type").unwrap().iter().map(|v| v.to_i32().unwrap()).collect();
    let unused: Vec<usize> = (0..tokens.len()).filter(|&i| tokens[i].starts_with("<unused")).collect();
    let mut unused = unused.into_iter();
    for (text, ty) in SPECIALS {
        let i = unused.next().expect("an unused token to replace");
        tokens[i] = text.to_string();
        types[i] = *ty;
    }
    let merges = derive_merges(&tokens, &scores, &types);
    let id = |t: &str| tokens.iter().position(|x| x == t).unwrap() as u32;
    let (bos, eos, unk, pad) = (id("<bos>"), id("<eos>"), id("<unk>"), id("<pad>"));
    let strings = |v: Vec<String>| Value::Array(v.into_iter().map(Value::String).collect());
    vec![
        ("tokenizer.ggml.model".into(), Value::String("gemma4".into())),
        ("tokenizer.ggml.pre".into(), Value::String("gemma4".into())),
        ("tokenizer.ggml.tokens".into(), strings(tokens)),
        ("tokenizer.ggml.scores".into(), Value::Array(scores.into_iter().map(Value::F32).collect())),
        ("tokenizer.ggml.token_type".into(), Value::Array(types.into_iter().map(Value::I32).collect())),
        ("tokenizer.ggml.merges".into(), strings(merges)),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(bos)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(eos)),
        ("tokenizer.ggml.unknown_token_id".into(), Value::U32(unk)),
        ("tokenizer.ggml.padding_token_id".into(), Value::U32(pad)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
        ("tokenizer.ggml.add_space_prefix".into(), Value::Bool(false)),
        ("tokenizer.chat_template".into(), Value::String(template.into())),
    ]
}

/// Every split of a normal piece into two normal pieces, the pieces taken
/// by falling score (then id), each one's splits by the ids of their
/// halves: Hugging Face's `SentencePieceExtractor` order.
fn derive_merges(tokens: &[String], scores: &[f32], types: &[i32]) -> Vec<String> {
    let normal: HashMap<&str, usize> =
        tokens.iter().enumerate().filter(|(i, _)| types[*i] == 1).map(|(i, t)| (t.as_str(), i)).collect();
    let mut order: Vec<usize> = (0..tokens.len()).filter(|&i| types[i] == 1).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut merges = Vec::new();
    for i in order {
        let piece = tokens[i].as_str();
        let mut splits: Vec<(usize, usize, usize)> = piece
            .char_indices()
            .skip(1)
            .filter_map(|(at, _)| {
                let (l, r) = piece.split_at(at);
                Some((*normal.get(l)?, *normal.get(r)?, at))
            })
            .collect();
        splits.sort();
        merges.extend(splits.into_iter().map(|(_, _, at)| format!("{} {}", &piece[..at], &piece[at..])));
    }
    merges
}

/// A vocabulary-only file (llama.cpp opens it with `vocab_only`).
pub fn write_vocabulary_only(gemma3: &Path, path: &Path, template: &str) {
    let mut md = vec![
        ("general.architecture".to_string(), Value::String("llama".into())),
        ("llama.block_count".to_string(), Value::U32(1)),
        ("llama.context_length".to_string(), Value::U32(4096)),
        ("llama.embedding_length".to_string(), Value::U32(64)),
        ("llama.feed_forward_length".to_string(), Value::U32(128)),
        ("llama.attention.head_count".to_string(), Value::U32(4)),
        ("llama.attention.layer_norm_rms_epsilon".to_string(), Value::F32(1e-5)),
    ];
    md.extend(tokenizer_metadata(gemma3, template));
    hearth_engine::gguf_writer::write(path, &md, &[], |_| unreachable!("no tensors")).unwrap();
}
