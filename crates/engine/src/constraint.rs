//! Constrained decoding: a grammar every sampled token must keep the reply
//! inside (a JSON schema, any JSON object, a Lark grammar), through
//! llguidance, the parser behind llama.cpp's and vLLM's guidance support.
//!
//! `Grammars` is built once per model: a token trie of the model's own
//! vocabulary (each token's bytes; control tokens marked as special, so no
//! grammar's text ever produces one) and llguidance's parser factory.
//! `Grammars::compile` checks a grammar and gives a `Grammar`, which starts
//! a `Constraint` per sequence. Before each sample the constraint's mask
//! sets every token the grammar forbids to −∞; the sampler chain then runs
//! as usual within what is allowed, with the same seed. The model's end
//! tokens are allowed exactly when the grammar may end.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use toktrie::{ApproximateTokEnv, SimpleVob, TokRxInfo, TokTrie};

use crate::error::{EngineError, Result};
use crate::tokenizer::Tokenizer;

/// What a reply must be.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// JSON valid against this schema (OpenAI's `json_schema`).
    JsonSchema(serde_json::Value),
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// A grammar in llguidance's Lark syntax.
    Lark(String),
}

/// One model's grammar compiler: its token trie and parser factory.
pub struct Grammars {
    factory: Arc<ParserFactory>,
    end_tokens: Vec<u32>,
    /// Lark string literals that are exactly one markup token's text, and
    /// that token (`Tokenizer::markup_tokens`).
    markup: Vec<(String, u32)>,
}

impl Grammars {
    /// Over `tokenizer`'s vocabulary (padded to the model's `vocab_size`);
    /// `end_tokens[0]` is the end of sequence a finished grammar allows.
    pub fn new(tokenizer: &Tokenizer, vocab_size: usize, end_tokens: &[u32]) -> Result<Self> {
        let Some(&eos) = end_tokens.first() else {
            return Err(EngineError::setting("response_format", "the model has no end token to finish a grammar with"));
        };
        let words: Vec<Vec<u8>> = (0..vocab_size as u32)
            .map(|id| {
                if tokenizer.is_control(id) || end_tokens.contains(&id) {
                    // Special: reachable by no text, only by the trie's marker.
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tokenizer.token_text(id).unwrap_or("").as_bytes());
                    w
                } else {
                    tokenizer.token_bytes(id).to_vec()
                }
            })
            .collect();
        let trie = TokTrie::from(&TokRxInfo::new(vocab_size as u32, eos), &words);
        let env: toktrie::TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| grammar_error(e.to_string()))?;
        factory.quiet();
        let markup = tokenizer
            .markup_tokens()
            .into_iter()
            .map(|(text, id)| (serde_json::Value::String(text).to_string(), id))
            .collect();
        Ok(Self { factory: Arc::new(factory), end_tokens: end_tokens.to_vec(), markup })
    }

    /// Checks `spec` and compiles it; an unsupported schema feature is an
    /// error naming it, never silently ignored.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Grammar> {
        let top = match spec {
            GrammarSpec::JsonSchema(schema) => TopLevelGrammar::from_json_schema(compact_json(schema.clone())),
            GrammarSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(compact_json(serde_json::json!({"type": "object"})))
            }
            GrammarSpec::Lark(lark) => TopLevelGrammar::from_lark(self.markup_as_tokens(lark)),
        };
        let parser = self.factory.create_parser(top).map_err(|e| grammar_error(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(grammar_error(e));
        }
        // A grammar no text can start (its first mask fails) is refused here,
        // naming its field, rather than failing the reply at its first token.
        if let Err(e) = matcher.deep_clone().compute_mask_or_eos() {
            // Its first line: the parser's state dump follows.
            let e = e.to_string();
            return Err(grammar_error(format!("no reply can follow it: {}", e.lines().next().unwrap_or_default())));
        }
        Ok(Grammar { prototype: Arc::new(matcher), end_tokens: self.end_tokens.clone() })
    }
}

impl Grammars {
    /// `lark` with each string literal that is exactly a markup token's
    /// text (`"[TOOL_CALLS]"`, `"<|channel|>"`) matched by that token only:
    /// a literal is otherwise matched by any tokens that spell it, and a
    /// model held to a call could write its marker letter by letter, which
    /// reads the same but is not the token its template writes, nor the one
    /// it was trained to write.
    fn markup_as_tokens(&self, lark: &str) -> String {
        let swap = |text: &str| {
            let mut out = text.to_string();
            for (quoted, id) in &self.markup {
                if out.contains(quoted.as_str()) {
                    out = out.replace(quoted.as_str(), &format!("<[{id}]>"));
                }
            }
            out
        };
        // Not inside a `%json` schema, whose strings are a tool's own.
        let mut out = String::with_capacity(lark.len());
        let mut rest = lark;
        while let Some(at) = rest.find("%json") {
            let body = at + "%json".len();
            out.push_str(&swap(&rest[..body]));
            let mut values = serde_json::Deserializer::from_str(&rest[body..]).into_iter::<serde_json::Value>();
            let used = match values.next() {
                Some(Ok(_)) => values.byte_offset(),
                _ => 0,
            };
            out.push_str(&rest[body..body + used]);
            rest = &rest[body + used..];
        }
        out.push_str(&swap(rest));
        out
    }
}

/// JSON as a reply writes it by default: `, ` and `: ` and no other
/// whitespace, so a small model cannot wander off into blank space. A
/// schema's own `x-guidance` options win.
fn compact_json(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance").or_insert(serde_json::json!({
            "whitespace_flexible": false,
            "item_separator": ", ",
            "key_separator": ": ",
        }));
    }
    schema
}

/// Whether `schema` is a JSON schema a grammar can be built from, without a
/// model: a tool's argument schema is checked when its server is listed, so
/// a bad one is named there rather than failing a reply later.
pub fn check_json_schema(schema: &serde_json::Value) -> std::result::Result<(), String> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err("a JSON schema is an object".into());
    }
    let top = TopLevelGrammar::from_json_schema(compact_json(schema.clone()));
    match llguidance::api::GrammarInit::Serialized(top).validate(None, llguidance::api::ParserLimits::default()) {
        llguidance::earley::ValidationResult::Error(e) => Err(e),
        _ => Ok(()),
    }
}

fn grammar_error(e: impl Into<String>) -> EngineError {
    EngineError::setting("response_format", e.into())
}

/// A compiled grammar, ready to start a constraint per sequence.
#[derive(Clone)]
pub struct Grammar {
    prototype: Arc<Matcher>,
    end_tokens: Vec<u32>,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Grammar")
    }
}

impl Grammar {
    /// Whether `other` is this compilation (a clone of it).
    pub fn same_as(&self, other: &Grammar) -> bool {
        Arc::ptr_eq(&self.prototype, &other.prototype)
    }

    /// A fresh constraint at the start of a reply.
    pub fn start(&self) -> Constraint {
        Constraint { matcher: self.prototype.deep_clone(), end_tokens: self.end_tokens.clone() }
    }
}

/// One sequence's place in its grammar.
pub struct Constraint {
    matcher: Matcher,
    end_tokens: Vec<u32>,
}

impl Clone for Constraint {
    fn clone(&self) -> Self {
        Self { matcher: self.matcher.deep_clone(), end_tokens: self.end_tokens.clone() }
    }
}

/// The tokens a constraint allows next.
#[derive(Clone)]
pub struct Mask {
    allowed: SimpleVob,
    /// The grammar may end here: the model's end tokens are allowed.
    may_end: bool,
}

impl Mask {
    pub fn allows(&self, token: u32, end_tokens: &[u32]) -> bool {
        if end_tokens.contains(&token) {
            self.may_end
        } else {
            self.allowed.is_allowed(token)
        }
    }

    /// Sets every token the mask forbids to −∞ in `logits`.
    pub fn apply(&self, logits: &mut [f32], end_tokens: &[u32]) {
        for (t, l) in logits.iter_mut().enumerate() {
            if !self.allows(t as u32, end_tokens) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

impl Constraint {
    /// The tokens the grammar allows next (only the end tokens once it is complete).
    pub fn mask(&mut self) -> Result<Mask> {
        let allowed = self.matcher.compute_mask_or_eos().map_err(|e| grammar_error(e.to_string()))?;
        let eos = self.end_tokens[0];
        Ok(Mask { may_end: allowed.is_allowed(eos), allowed })
    }

    /// Moves past `token` (not an end token).
    pub fn consume(&mut self, token: u32) -> Result<()> {
        self.matcher.consume_token(token).map_err(|e| grammar_error(e.to_string()))
    }

    pub fn end_tokens(&self) -> &[u32] {
        &self.end_tokens
    }
}
