//! gpt-oss's real vocabulary: o200k (from the `tiktoken-rs` crate, which
//! ships OpenAI's `o200k_base` ranks) with the Harmony special tokens, as a
//! GGUF vocabulary the way llama.cpp's converter writes gpt-oss's: each
//! token in GPT-2's byte-to-character form, merges derived from the ranks
//! as Hugging Face's tiktoken converter derives them, `gpt-4o` splitting.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;

/// gpt-oss's vocabulary size: o200k's 199,998 ranks, then Harmony's specials.
pub const VOCAB: usize = 201_088;

/// Harmony's named special tokens; every other id from 199,998 up is reserved.
const SPECIALS: &[(u32, &str)] = &[
    (199_998, "<|startoftext|>"),
    (199_999, "<|endoftext|>"),
    (200_002, "<|return|>"),
    (200_003, "<|constrain|>"),
    (200_005, "<|channel|>"),
    (200_006, "<|start|>"),
    (200_007, "<|end|>"),
    (200_008, "<|message|>"),
    (200_012, "<|call|>"),
    (200_018, "<|endofprompt|>"),
];

/// The `tokenizer.*` metadata of gpt-oss's GGUF files, with the real
/// template (`tests/data/templates/gpt-oss.jinja`).
pub fn tokenizer_metadata() -> Vec<(String, Value)> {
    let bpe = tiktoken_rs::o200k_base_singleton();
    let alphabet = hearth_engine::tokenizer::byte_level_alphabet();
    let text = |bytes: &[u8]| bytes.iter().map(|&b| alphabet[b as usize]).collect::<String>();
    // Every id below the specials is one of o200k's ranks.
    let ranked: Vec<Vec<u8>> = (0..199_998u32).map(|r| bpe.decode_bytes(&[r]).expect("a rank o200k has")).collect();
    let rank_of: HashMap<&[u8], usize> = ranked.iter().enumerate().map(|(r, b)| (b.as_slice(), r)).collect();
    let mut tokens: Vec<String> = ranked.iter().map(|b| text(b)).collect();
    let mut types = vec![1i32; tokens.len()];
    for id in 199_998..VOCAB as u32 {
        let name = SPECIALS.iter().find(|(i, _)| *i == id).map_or(format!("<|reserved_{id}|>"), |(_, n)| n.to_string());
        tokens.push(name);
        types.push(3);
    }
    // Hugging Face's TikTokenConverter: each token's splits into two tokens,
    // ordered by the ranks of their halves, then all by the token's rank.
    let mut merges: Vec<(usize, usize, usize)> = Vec::new();
    for (rank, token) in ranked.iter().enumerate() {
        let mut local: Vec<(usize, usize, usize)> = (1..token.len())
            .filter_map(|i| Some((*rank_of.get(&token[..i])?, *rank_of.get(&token[i..])?, rank)))
            .collect();
        local.sort_by_key(|&(l, r, _)| (l, r));
        merges.extend(local);
    }
    merges.sort_by_key(|&(_, _, rank)| rank);
    let merges: Vec<Value> =
        merges.into_iter().map(|(l, r, _)| Value::String(format!("{} {}", tokens[l], tokens[r]))).collect();
    let template =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/templates/gpt-oss.jinja"))
            .unwrap();
    let s = |k: &str, v: &str| (k.to_string(), Value::String(v.to_string()));
    let u = |k: &str, v: u32| (k.to_string(), Value::U32(v));
    vec![
        s("tokenizer.ggml.model", "gpt2"),
        s("tokenizer.ggml.pre", "gpt-4o"),
        ("tokenizer.ggml.tokens".into(), Value::Array(tokens.into_iter().map(Value::String).collect())),
        ("tokenizer.ggml.token_type".into(), Value::Array(types.into_iter().map(Value::I32).collect())),
        ("tokenizer.ggml.merges".into(), Value::Array(merges)),
        u("tokenizer.ggml.bos_token_id", 199_998),
        u("tokenizer.ggml.eos_token_id", 200_002),
        u("tokenizer.ggml.padding_token_id", 199_999),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
        s("tokenizer.chat_template", &template),
    ]
}

/// A GGUF file of gpt-oss's vocabulary and no weights, which both engines
/// read a tokenizer from.
pub fn write_vocabulary_only(path: &Path) {
    let mut md = vec![
        ("general.architecture".to_string(), Value::String("llama".into())),
        ("llama.block_count".to_string(), Value::U32(1)),
        ("llama.context_length".to_string(), Value::U32(4096)),
        ("llama.embedding_length".to_string(), Value::U32(64)),
        ("llama.feed_forward_length".to_string(), Value::U32(128)),
        ("llama.attention.head_count".to_string(), Value::U32(4)),
        ("llama.attention.layer_norm_rms_epsilon".to_string(), Value::F32(1e-5)),
    ];
    md.extend(tokenizer_metadata());
    hearth_engine::gguf_writer::write(path, &md, &[], |_| unreachable!("no tensors")).unwrap();
}
