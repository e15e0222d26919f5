//! What a reply is asked to do: a conversation's reply (with its variants,
//! a prefix to continue, or a recording to replay) or an API request's.

use std::sync::Arc;

use hearth_engine::ChatMessage;
use hearth_store::{ConversationSettings, ReplayRecord, TokenChoice};

use crate::events::GenerationEvent;
use crate::EventSink;

/// A reply to write.
pub struct ReplyJob {
    pub conversation_id: i64,
    pub reply_id: i64,
    /// The conversation up to the reply, system prompt first.
    pub messages: Vec<ChatMessage>,
    /// Text the reply already has (when continuing a stopped reply).
    pub prefix: String,
    /// The prefix as token ids, when it was chosen token by token
    /// ("continue from here with …"); else it is tokenized from `prefix`.
    pub prefix_ids: Option<Vec<u32>>,
    /// The prefix tokens' choices, which the reply's own choices extend.
    pub prefix_choices: Vec<TokenChoice>,
    pub settings: ConversationSettings,
    /// Shared, so the queue can tell a job its place after its lock is released.
    pub events: Arc<dyn Fn(GenerationEvent) + Send + Sync>,
    /// Run this recorded reply again and compare, instead of writing one.
    pub replay: Option<ReplayRecord>,
    /// Replies to write beside `reply_id` from the same prompt, as one batch
    /// ("Generate N"): variant b samples with the seed + b.
    pub variant_ids: Vec<i64>,
    /// Set for a reply to an API request rather than in a conversation.
    pub request: Option<Request>,
    /// The tools offered (an API request's `tools` and `tool_choice`, a
    /// chat's MCP tools); a required call is constrained to the tools'
    /// schemas. A stored reply's calls are taken out of its text and
    /// recorded as its tool calls, pending.
    pub tools: hearth_engine::Tools,
    /// A chat reply whose calls run when it ends (`tool_rounds`), and the
    /// reply that reads their results is queued; `None`: its calls, if
    /// any, are recorded and left pending.
    pub tool_round: Option<crate::tool_offer::ToolRound>,
}

/// A reply to an API request: nothing is stored (its reply ids are 0), its
/// queue id is one `Worker::submit` gives, and its cache is whichever
/// request cache shares most of its prompt (`Caches::take_request`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// `Some(k)`: each token's log-probability and k likeliest alternatives
    /// go with it in `tokens` events.
    pub logprobs: Option<usize>,
    /// A prompt as it is (`/v1/completions`, a benchmark's tokens), in
    /// place of the messages rendered through the chat template.
    pub raw_prompt: Option<RawPrompt>,
    /// A grammar every sequence's reply follows (`response_format`,
    /// `grammar`), compiled for the model the reply runs on.
    pub grammar: Option<hearth_engine::GrammarSpec>,
    /// Sample past the model's end tokens, to the token limit (llama.cpp's
    /// `ignore_eos`): a benchmark's replies of a fixed length.
    pub ignore_end_tokens: bool,
    /// `grammar` (else the tools' call grammar) as the server compiled it
    /// to check it, kept so it is compiled once.
    pub compiled: Option<CompiledGrammar>,
}

/// A grammar compiled for one loaded model. A reply that runs on another
/// (the model was changed meanwhile) compiles its own.
#[derive(Clone)]
pub struct CompiledGrammar {
    pub engine: Arc<hearth_engine::Engine>,
    pub grammar: hearth_engine::Grammar,
}

impl CompiledGrammar {
    /// The grammar, if it was compiled for `engine`.
    pub fn for_engine(&self, engine: &hearth_engine::Engine) -> Option<&hearth_engine::Grammar> {
        std::ptr::eq(&*self.engine, engine).then_some(&self.grammar)
    }
}

impl std::fmt::Debug for CompiledGrammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledGrammar").field("model", &self.engine.path()).finish_non_exhaustive()
    }
}

impl PartialEq for CompiledGrammar {
    /// The same compilation: for the same loaded model, of the same grammar.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.engine, &other.engine) && self.grammar.same_as(&other.grammar)
    }
}

/// A prompt given as it is rather than as messages.
#[derive(Debug, Clone, PartialEq)]
pub enum RawPrompt {
    /// Text, tokenized with the model's start token where it adds one.
    Text(String),
    /// Token ids, read as they are.
    Ids(Vec<u32>),
}

impl ReplyJob {
    /// A reply from scratch: no prefix, no variants, not a replay.
    pub fn new(
        conversation_id: i64,
        reply_id: i64,
        messages: Vec<ChatMessage>,
        settings: ConversationSettings,
        events: EventSink,
    ) -> Self {
        Self {
            conversation_id,
            reply_id,
            messages,
            prefix: String::new(),
            prefix_ids: None,
            prefix_choices: Vec::new(),
            settings,
            events: Arc::from(events),
            replay: None,
            variant_ids: Vec::new(),
            request: None,
            tools: hearth_engine::Tools::default(),
            tool_round: None,
        }
    }

    /// A reply to an API request: `sequences` (1–8) sampled from one
    /// prompt as one batch, like "Generate N".
    pub fn for_request(
        messages: Vec<ChatMessage>,
        settings: ConversationSettings,
        sequences: usize,
        request: Request,
        events: EventSink,
    ) -> Self {
        Self {
            variant_ids: vec![0; sequences.clamp(1, 8) - 1],
            request: Some(request),
            ..Self::new(0, 0, messages, settings, events)
        }
    }

    /// Whether the reply is a conversation's, written to the database.
    pub fn stored(&self) -> bool {
        self.request.is_none()
    }

    /// Every reply this job writes, variant 0 (`reply_id`) first.
    pub fn reply_ids(&self) -> Vec<i64> {
        std::iter::once(self.reply_id).chain(self.variant_ids.iter().copied()).collect()
    }
}
