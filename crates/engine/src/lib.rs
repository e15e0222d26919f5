//! hearth-engine: local LLM inference for Hearth, headless.
//!
//! Open a GGUF file with [`Engine::open`], keep one [`Session`] per
//! conversation, and run each reply as a [`Turn`] of one or more
//! [`Sequence`]s ([`Session::into_turn`], or [`Session::start_turn`] in place). Nothing here knows about Tauri, IPC or storage.

pub mod constraint;
pub mod cpu;
pub mod detok;
pub mod device;
pub mod draft_model;
pub mod engine;
pub mod error;
pub mod facts;
pub mod file_hash;
pub mod ggml_type;
pub mod gguf;
pub mod gguf_writer;
pub mod kv_cache;
pub mod model;
pub mod passes;
pub mod paths;
pub mod random_model;
pub mod reasoning;
pub mod recurrent_state;
pub mod sampler_loop;
pub mod sampling;
pub mod session;
pub mod session_file;
mod session_turn;
pub mod speculation;
mod spm;
pub mod template;
pub mod tokenizer;
pub mod tools;
pub mod turn;
pub mod worker_pool;

pub use candle_core::Device;
pub use constraint::{Grammar, GrammarSpec, Grammars};
pub use detok::StreamDecoder;
pub use device::DeviceChoice;
pub use draft_model::DraftModel;
pub use engine::{Engine, PromptOptions, BUILD_ID};
pub use error::{EngineError, Result};
pub use facts::{ModelFacts, QuantShare};
pub use ggml_type::GgmlType;
pub use gguf::GgufFile;
pub use kv_cache::KvCache;
pub use model::{Architecture, Kernels, Model, ModelConfig};
pub use passes::{Pass, Passes};
pub use reasoning::{ReasoningEffort, ReasoningFormat, ReplySplitter, SplitText, Thinking, ThinkingTracker};
pub use sampler_loop::{
    FinishReason, GenerationConfig, Logprobs, MaskSlot, Sampler, Sequence, SequenceOutput, SequenceState, TokenEvent,
};
pub use sampling::{Rng, SamplingParams};
pub use session::{PrefillStart, Session};
pub use session_file::{CacheIdentity, Restored};
pub use session_turn::SessionTurn;
pub use speculation::Speculation;
pub use template::{ChatMessage, ChatTemplate, Clock, Role, ToolCall};
pub use tokenizer::Tokenizer;
pub use tools::{ToolChoice, ToolFormat, ToolSpec, Tools};
pub use turn::{Advance, DecodeInput, Ended, Progress, StopFn, Turn, TurnOutput, TurnStats};
