//! The model's tokenizer, built from the GGUF's own `tokenizer.ggml.*` metadata.
//!
//! Byte-level BPE vocabularies encode through the `tokenizers` crate,
//! SentencePiece-style ones through `spm.rs`. Decoding goes through a table
//! of the raw bytes each token stands for, which is what lets the streaming
//! decoder cut text only at UTF-8 boundaries.

use std::ops::Range;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use tokenizers::AddedToken;

use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;
use crate::spm::{Special, SpmEncoder};

mod bpe;
mod byte_table;

use bpe::build_bpe;
pub use byte_table::byte_level_alphabet;
use byte_table::{byte_level_table, spm_table};

/// GGUF token types (llama.cpp's `llama_token_type`).
const TYPE_UNKNOWN: i32 = 2;
const TYPE_CONTROL: i32 = 3;
const TYPE_USER_DEFINED: i32 = 4;
const TYPE_BYTE: i32 = 6;

/// Encodes text to ids and ids back to bytes, exactly as the model was trained.
pub struct Tokenizer {
    encoder: Encoder,
    token_bytes: Vec<Vec<u8>>,
    tokens: Vec<String>,
    is_control: Vec<bool>,
    /// Control and user-defined tokens: each tokenizes apart from the
    /// text around it.
    is_special: Vec<bool>,
    /// The texts of the tokens cut out of text before it is merged, longest
    /// first, then by id (llama.cpp's partition): control ones (and, for
    /// SentencePiece-style vocabularies, unknown ones), matched only where
    /// special text is parsed, and user-defined ones, matched in any text.
    cut_specials: Cuts,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    add_bos: bool,
}

impl Tokenizer {
    /// Builds the tokenizer from the file's metadata. A `tokenizer.json` next to
    /// the model, if present, replaces the encoder; decoding still uses the
    /// GGUF vocabulary, which the model's ids index.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let path = file.path().to_path_buf();
        let err = |reason: String| EngineError::Tokenizer { path: path.clone(), reason };
        let model_kind = file.string("tokenizer.ggml.model").map_err(|e| err(e.to_string()))?.to_string();
        let tokens: Vec<String> = file
            .array("tokenizer.ggml.tokens")
            .map_err(|e| err(e.to_string()))?
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                _ => Err(err("tokenizer.ggml.tokens holds a non-string".into())),
            })
            .collect::<Result<_>>()?;
        if tokens.is_empty() {
            return Err(err("the vocabulary is empty".into()));
        }
        let mut types: Vec<i32> = match file.array("tokenizer.ggml.token_type") {
            Ok(a) => a.iter().map(|v| v.to_i32().unwrap_or(1)).collect(),
            Err(_) => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() {
            return Err(err("token types and tokens differ in length".into()));
        }
        harmony_rendered_tokens(&tokens, &mut types);
        mistral_rendered_tokens(&tokens, &mut types);
        end_tokens_are_control(&tokens, &mut types);
        let id = |key: &str| -> Result<Option<u32>> {
            let v = file.u32_opt(key).map_err(|e| err(e.to_string()))?;
            match v {
                Some(i) if i as usize >= tokens.len() => Err(err(format!("{key} = {i} is outside the vocabulary"))),
                v => Ok(v),
            }
        };
        let bos = id("tokenizer.ggml.bos_token_id")?;
        let eos = id("tokenizer.ggml.eos_token_id")?;
        let eot = id("tokenizer.ggml.eot_token_id")?;
        // Checked for range only: both encoders fall back to bytes, not to <unk>.
        id("tokenizer.ggml.unknown_token_id")?;
        // llama.cpp always adds Gemma 4's BOS, whatever the file says.
        let add_bos =
            model_kind == "gemma4" || file.bool_opt("tokenizer.ggml.add_bos_token").unwrap_or(model_kind == "llama");

        let json = Path::new(file.path()).with_file_name("tokenizer.json");
        let is_control = types.iter().map(|&t| t == TYPE_CONTROL).collect();
        // SentencePiece-style encoders parse unknown-type tokens as llama.cpp
        // does; the `tokenizers` path knows control and user-defined ones.
        let parsed = |with_unknown: bool| -> Cuts {
            let mut list: Vec<Cut> = tokens
                .iter()
                .zip(&types)
                .enumerate()
                .filter(|(_, (t, _))| !t.is_empty())
                .filter_map(|(i, (t, &ty))| {
                    let always = ty == TYPE_USER_DEFINED;
                    (always || ty == TYPE_CONTROL || (with_unknown && ty == TYPE_UNKNOWN)).then(|| Cut {
                        text: t.clone(),
                        id: i as u32,
                        always,
                    })
                })
                .collect();
            list.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
            let mut first = [false; 256];
            list.iter().for_each(|c| first[c.text.as_bytes()[0] as usize] = true);
            Cuts { list, first }
        };
        let is_special = types.iter().map(|&t| t == TYPE_CONTROL || t == TYPE_USER_DEFINED).collect();
        let special: Vec<Special> = types
            .iter()
            .map(|&t| match t {
                TYPE_USER_DEFINED => Special::Always,
                TYPE_CONTROL | TYPE_UNKNOWN => Special::WhenParsing,
                _ => Special::No,
            })
            .collect();
        if (model_kind == "gemma4" || model_kind == "llama") && !json.is_file() {
            let spm = if model_kind == "gemma4" {
                // SentencePiece-style pieces merged by rank (llama.cpp's `gemma4`).
                let merges: Vec<String> = file
                    .array("tokenizer.ggml.merges")
                    .map_err(|e| err(e.to_string()))?
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => Ok(s.clone()),
                        _ => Err(err("tokenizer.ggml.merges holds a non-string".into())),
                    })
                    .collect::<Result<_>>()?;
                SpmEncoder::with_merges(&tokens, &special, &merges)
            } else {
                let add_space_prefix = file.bool_opt("tokenizer.ggml.add_space_prefix").unwrap_or(true);
                let scores = spm_scores(file, tokens.len()).map_err(err)?;
                SpmEncoder::new(&tokens, scores, &special, add_space_prefix)
            };
            return Ok(Self {
                encoder: Encoder::Spm(spm),
                token_bytes: spm_table(&tokens, &types),
                cut_specials: parsed(true),
                tokens,
                is_control,
                is_special,
                bos,
                eos,
                eot,
                add_bos,
            });
        }
        let token_bytes = match model_kind.as_str() {
            "gpt2" => byte_level_table(&tokens, &types),
            "llama" | "gemma4" => spm_table(&tokens, &types),
            other => {
                return Err(err(format!("tokenizer model {other:?} is not supported (gpt2, llama and gemma4 are)")))
            }
        };
        let special = if json.is_file() {
            tokenizers::Tokenizer::from_file(&json).map_err(|e| err(format!("{}: {e}", json.display())))?
        } else {
            let pre = file.string_opt("tokenizer.ggml.pre").unwrap_or("default");
            let mut bpe = build_bpe(file, &tokens, pre).map_err(err)?;
            // Matched when special tokens are parsed; user-defined ones are
            // cut out of plain text by `encode` itself, as llama.cpp does.
            let added: Vec<AddedToken> = tokens
                .iter()
                .zip(&types)
                .filter(|(_, &t)| t == TYPE_CONTROL || t == TYPE_USER_DEFINED)
                .map(|(s, _)| AddedToken::from(s.clone(), true))
                .collect();
            bpe.add_special_tokens(added).map_err(|e| err(format!("special tokens: {e}")))?;
            bpe
        };
        let mut plain = special.clone();
        plain.set_encode_special_tokens(true);
        let cut_specials = parsed(false);
        Ok(Self {
            encoder: Encoder::Hf { special, plain },
            token_bytes,
            tokens,
            is_control,
            is_special,
            cut_specials,
            bos,
            eos,
            eot,
            add_bos,
        })
    }

    /// Token ids for `text`. With `parse_special`, text such as `<|im_end|>`
    /// becomes its control token; without it, it is spelled out like any text.
    /// A BOS token is prepended when `add_bos` is asked for and the model wants one.
    pub fn encode(&self, text: &str, add_bos: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if add_bos && self.add_bos {
            ids.extend(self.bos);
        }
        match &self.encoder {
            Encoder::Spm(spm) => ids.extend(spm.encode(text, parse_special)),
            Encoder::Hf { special, .. } if parse_special => {
                let enc = special
                    .encode(text, false)
                    .map_err(|e| EngineError::Tokenizer { path: "<encode>".into(), reason: e.to_string() })?;
                ids.extend_from_slice(enc.get_ids());
            }
            // User-defined tokens cut out; the text between spelled as text.
            Encoder::Hf { .. } => ids.extend(self.encode_cut(text, &|c| c.always, &|_| true, &[])?),
        }
        Ok(ids)
    }

    /// `text` cut at the specials `cut` picks, longest first (within
    /// `plain`, only those `cut_plain` picks too), the runs between encoded
    /// with no special token matched in them.
    fn encode_cut(
        &self,
        text: &str,
        cut: &dyn Fn(&Cut) -> bool,
        cut_plain: &dyn Fn(&Cut) -> bool,
        plain: &[Range<usize>],
    ) -> Result<Vec<u32>> {
        enum Piece {
            Text(Range<usize>),
            Token(u32),
        }
        let mut pieces = vec![Piece::Text(0..text.len())];
        for special in self.cut_specials.list.iter().filter(|c| cut(c)) {
            let s = special.text.as_str();
            if !text.contains(s) {
                continue;
            }
            let step = s.chars().next().map_or(1, char::len_utf8);
            let mut next = Vec::with_capacity(pieces.len() + 2);
            for piece in pieces {
                let Piece::Text(range) = piece else {
                    next.push(piece);
                    continue;
                };
                let (mut start, mut search) = (range.start, range.start);
                while let Some(found) = text[search..range.end].find(s) {
                    let (at, end) = (search + found, search + found + s.len());
                    if !cut_plain(special) && plain.iter().any(|p| at < p.end && end > p.start) {
                        search = at + step;
                        continue;
                    }
                    if at > start {
                        next.push(Piece::Text(start..at));
                    }
                    next.push(Piece::Token(special.id));
                    (start, search) = (end, end);
                }
                if start < range.end {
                    next.push(Piece::Text(start..range.end));
                }
            }
            pieces = next;
        }
        let mut ids = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Token(id) => ids.push(id),
                Piece::Text(range) => ids.extend(self.encode_verbatim(&text[range])?),
            }
        }
        Ok(ids)
    }

    /// A run of text with no special token matched in it.
    fn encode_verbatim(&self, text: &str) -> Result<Vec<u32>> {
        match &self.encoder {
            Encoder::Spm(spm) => Ok(spm.encode_verbatim(text)),
            Encoder::Hf { plain, .. } => Ok(plain
                .encode(text, false)
                .map_err(|e| EngineError::Tokenizer { path: "<encode>".into(), reason: e.to_string() })?
                .get_ids()
                .to_vec()),
        }
    }

    /// `encode(text, add_bos, true)`, except inside `plain` (byte ranges of
    /// `text`: the messages' own content in a rendered prompt), where no
    /// control token is matched: text there that spells one (`<|im_end|>`,
    /// `<start_of_turn>`) is tokenized as the text it is, so a pasted text
    /// or a tool's result cannot open a turn of its own. Elsewhere, and for
    /// text that spells none, the ids are `encode`'s.
    ///
    /// User-defined tokens are matched in that text as in any (llama.cpp
    /// matches them everywhere: Gemma's newline runs are such tokens),
    /// except those `markup` names (a template's own, such as Harmony's
    /// `<|start|>`, which llama.cpp makes user-defined).
    pub fn encode_guarded(
        &self,
        text: &str,
        add_bos: bool,
        plain: &[Range<usize>],
        markup: &dyn Fn(u32) -> bool,
    ) -> Result<Vec<u32>> {
        if plain.is_empty() {
            return self.encode(text, add_bos, true);
        }
        let mut ids = Vec::new();
        if add_bos && self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend(self.encode_cut(text, &|_| true, &|c| c.always && !markup(c.id), plain)?);
        Ok(ids)
    }

    /// Whether `text` spells a control token, or a user-defined one that
    /// `markup` names.
    pub fn spells_markup(&self, text: &str, markup: &dyn Fn(u32) -> bool) -> bool {
        // Most messages have no byte any special begins with: no search.
        text.bytes().any(|b| self.cut_specials.first[b as usize])
            && self.cut_specials.list.iter().any(|c| (!c.always || markup(c.id)) && text.contains(c.text.as_str()))
    }

    /// The user-defined tokens other than runs of whitespace, with their
    /// text: markup a model writes as one token (Harmony's `<|channel|>`,
    /// Mistral's `[TOOL_CALLS]`).
    pub fn markup_tokens(&self) -> Vec<(String, u32)> {
        self.cut_specials
            .list
            .iter()
            .filter(|c| c.always && !c.text.trim().is_empty())
            .map(|c| (c.text.clone(), c.id))
            .collect()
    }

    /// The user-defined tokens `source` (a chat template) spells, other
    /// than runs of whitespace: the markup it writes with them.
    pub fn user_defined_in(&self, source: &str) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .cut_specials
            .list
            .iter()
            .filter(|c| c.always && !c.text.trim().is_empty() && source.contains(c.text.as_str()))
            .map(|c| c.id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Text for `ids`; control tokens contribute nothing, invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&i| self.token_bytes(i).iter().copied()).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The raw bytes token `id` stands for in generated text.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// The token's spelling in the vocabulary, control tokens included.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.tokens.iter().position(|t| t == text).map(|i| i as u32)
    }

    pub fn is_control(&self, id: u32) -> bool {
        self.is_control.get(id as usize).copied().unwrap_or(false)
    }

    /// A control or user-defined token: it tokenizes apart from the text
    /// on either side of it.
    pub fn is_special(&self, id: u32) -> bool {
        self.is_special.get(id as usize).copied().unwrap_or(false)
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    pub fn eot(&self) -> Option<u32> {
        self.eot
    }

    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
}

/// The special tokens text is cut at, longest first, and the bytes they
/// begin with.
struct Cuts {
    list: Vec<Cut>,
    first: [bool; 256],
}

/// A special token as text is cut at it.
struct Cut {
    text: String,
    id: u32,
    /// User-defined: cut out of any text, not only where specials are parsed.
    always: bool,
}

/// How text becomes ids.
#[allow(clippy::large_enum_variant, reason = "one per model, built once and never moved in a hot path")]
enum Encoder {
    /// Byte-level BPE (`gpt2`) or a `tokenizer.json`, through the `tokenizers` crate.
    Hf {
        /// Treats special-token text as special (chat templates).
        special: tokenizers::Tokenizer,
        /// Treats special-token text as plain text (user-typed content).
        plain: tokenizers::Tokenizer,
    },
    /// SentencePiece-style vocabularies (`llama`), merged as llama.cpp merges them.
    Spm(SpmEncoder),
}

fn spm_scores(file: &GgufFile, n: usize) -> std::result::Result<Vec<f32>, String> {
    let scores: Vec<f32> = match file.array("tokenizer.ggml.scores") {
        Ok(a) => a.iter().map(|v| v.to_f32().map_err(|e| e.to_string())).collect::<std::result::Result<_, _>>()?,
        Err(_) => return Err("a SentencePiece vocabulary needs tokenizer.ggml.scores".into()),
    };
    if scores.len() != n {
        return Err("scores and tokens differ in length".into());
    }
    Ok(scores)
}

/// Raw bytes per token of a byte-level vocabulary.
/// llama.cpp's rule for Harmony (gpt-oss's format): its structure tokens
/// are user-defined, so they are written out in generated text (where the
/// reply's channels are read from) and matched in any text; `<|end|>` too
/// where `<|return|>` and `<|call|>` end a turn, as it then ends only a
/// message.
fn harmony_rendered_tokens(tokens: &[String], types: &mut [i32]) {
    let has = |name: &str| tokens.iter().any(|t| t == name);
    let end_ends_a_message = has("<|return|>") && has("<|call|>");
    for (t, ty) in tokens.iter().zip(types.iter_mut()) {
        let structure = matches!(t.as_str(), "<|channel|>" | "<|message|>" | "<|start|>" | "<|constrain|>");
        if structure || (end_ends_a_message && t == "<|end|>") {
            *ty = TYPE_USER_DEFINED;
        }
    }
}

/// Mistral's tool-call markers (`[TOOL_CALLS]name[ARGS]{…}`) and thinking
/// tags (`[THINK]…[/THINK]`) are control tokens in its files; llama.cpp
/// writes them out in generated text where tools or reasoning are in play
/// (its "preserved tokens"), since calls and thoughts are read from them.
/// Hearth writes them always, as it does Harmony's: a reply's calls and
/// thinking are taken from its text, and a required call's grammar spells
/// them. Chat messages that spell those the template writes stay text
/// (`encode_guarded`: they are its markup).
fn mistral_rendered_tokens(tokens: &[String], types: &mut [i32]) {
    if !tokens.iter().any(|t| t == "[TOOL_CALLS]") {
        return;
    }
    for (t, ty) in tokens.iter().zip(types.iter_mut()) {
        if matches!(t.as_str(), "[TOOL_CALLS]" | "[ARGS]" | "[CALL_ID]" | "[THINK]" | "[/THINK]") {
            *ty = TYPE_USER_DEFINED;
        }
    }
}

/// llama.cpp makes a token that ends generation a control token whatever
/// the file says (`<|tool_response>`, which Gemma 4's converter makes
/// user-defined): it is then matched only where special text is parsed.
fn end_tokens_are_control(tokens: &[String], types: &mut [i32]) {
    for (t, ty) in tokens.iter().zip(types.iter_mut()) {
        if t == "<|tool_response>" && *ty == TYPE_USER_DEFINED {
            *ty = TYPE_CONTROL;
        }
    }
}
