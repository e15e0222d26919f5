//! Byte-level BPE vocabularies (`gpt2`) built for the `tokenizers` crate
//! from the GGUF's merges, with llama.cpp's pre-tokenizer regexes.

use candle_core::quantized::gguf_file::Value;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{DecoderWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::gguf::GgufFile;

/// Pre-tokenizer regexes from llama.cpp's `llama-vocab.cpp`, keyed by `tokenizer.ggml.pre`.
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// o200k's (gpt-oss; `gpt-4o` and `llama4` in llama.cpp), as llama.cpp
/// rewrites it for its own regex engine: a word's leading capitals are any
/// letters but ASCII `a`–`z`, its tail any letters but `A`–`Z`, with an
/// optional contraction; digits in threes; `/` joins the newlines after
/// punctuation.
const GPT4O_REGEX: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// OLMo's (and GPT-2's own): contractions, letters, digits and other
/// runs, each with one leading space.
const OLMO_REGEX: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Mistral's Tekken (Mistral Nemo, Small 3.x, Ministral 3, Devstral): GPT-4o's
/// without its contractions and with digits one at a time.
const TEKKEN_REGEX: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 3.5's: Qwen 2's, with combining marks (`\p{M}`) kept in letter runs.
const QWEN35_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

pub(super) fn build_bpe(
    file: &GgufFile,
    tokens: &[String],
    pre: &str,
) -> std::result::Result<tokenizers::Tokenizer, String> {
    let merges: Vec<(String, String)> = file
        .array("tokenizer.ggml.merges")
        .map_err(|e| e.to_string())?
        .iter()
        .map(|v| match v {
            Value::String(s) => {
                s.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())).ok_or_else(|| format!("bad merge {s:?}"))
            }
            _ => Err("tokenizer.ggml.merges holds a non-string".to_string()),
        })
        .collect::<std::result::Result<_, _>>()?;
    let vocab: ahash::AHashMap<String, u32> = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    // These take a piece that is a whole token as that token before any
    // merge, as llama.cpp's `ignore_merges` does for them.
    let ignore_merges =
        matches!(pre, "tekken" | "glm4" | "glm5" | "llama3" | "llama-v3" | "llama-bpe" | "pixtral" | "lfm2");
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| e.to_string())?;
    let byte_level = ByteLevel::new(false, true, false);
    let split = |re: &str| -> std::result::Result<PreTokenizerWrapper, String> {
        Ok(Split::new(SplitPattern::Regex(re.into()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| e.to_string())?
            .into())
    };
    let pre_tokenizer: PreTokenizerWrapper = match pre {
        // StarCoder's and Refact's (Granite 3) split as SmolLM's: digits one
        // by one, then GPT-2's.
        "smollm" | "starcoder" | "refact" => {
            PreSequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()]).into()
        }
        "gpt-2" | "gpt2" => ByteLevel::new(false, true, true).into(),
        // DBRX's, Smaug's and GLM's are Llama 3's (OLMo 2 names DBRX's).
        "llama3" | "llama-bpe" | "llama-v3" | "dbrx" | "smaug-bpe" | "glm4" | "glm5" | "chatglm-bpe" | "pixtral" | "lfm2" => {
            PreSequence::new(vec![split(LLAMA3_REGEX)?, byte_level.into()]).into()
        }
        "olmo" => PreSequence::new(vec![split(OLMO_REGEX)?, byte_level.into()]).into(),
        "qwen2" | "deepseek-r1-qwen" => PreSequence::new(vec![split(QWEN2_REGEX)?, byte_level.into()]).into(),
        "qwen35" => PreSequence::new(vec![split(QWEN35_REGEX)?, byte_level.into()]).into(),
        "gpt-4o" | "llama4" => PreSequence::new(vec![split(GPT4O_REGEX)?, byte_level.into()]).into(),
        "tekken" => PreSequence::new(vec![split(TEKKEN_REGEX)?, byte_level.into()]).into(),
        other => {
            return Err(format!(
            "pre-tokenizer {other:?} is not supported; refusing to guess (supported: smollm, starcoder, refact, gpt-2, llama-bpe, dbrx, smaug-bpe, glm4, lfm2, pixtral, olmo, qwen2, qwen35, gpt-4o, tekken)"
        ))
        }
    };
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(pre_tokenizer));
    tok.with_decoder(Some(DecoderWrapper::from(tokenizers::decoders::byte_level::ByteLevel::default())));
    Ok(tok)
}
