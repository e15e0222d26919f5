//! A model file opened for chat: weights, tokenizer, chat template and end tokens.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use candle_core::Device;

use crate::constraint::{Grammar, GrammarSpec, Grammars};
use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;
use crate::model::{Kernels, Model};
use crate::reasoning::{ReasoningEffort, ReasoningFormat};
use crate::sampler_loop::GenerationConfig;
use crate::sampling::SamplingParams;
use crate::session::Session;
use crate::session_file::CacheIdentity;
use crate::template::{ChatMessage, ChatTemplate};
use crate::tools::{ToolFormat, Tools};

/// The engine's version and a hash of its source (see `build.rs`): it
/// changes whenever kernels or numerics may have, which invalidates caches.
pub const BUILD_ID: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("HEARTH_ENGINE_BUILD_ID"));
use crate::tokenizer::Tokenizer;

/// Spellings of end-of-turn markers across families. One counts as an end
/// token only if the model has it as a control token and its template uses it.
/// Harmony (gpt-oss) ends a turn with `<|return|>` (its EOS) or, for a
/// tool call, `<|call|>`; its `<|end|>` ends only a message, and is no
/// control token there (`Tokenizer`).
const END_OF_TURN_MARKERS: &[&str] = &[
    "<|im_end|>",
    "<end_of_turn>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<|endoftext|>",
    "<|call|>",
    "<turn|>",
    "<|tool_response>",
];

/// How a conversation's prompt is rendered beyond its messages: the
/// template variables a reasoning model reads. A template without the
/// variable is unaffected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptOptions {
    /// Thinking on or off (Qwen3's `enable_thinking`); `None`: the template's default.
    pub thinking: Option<bool>,
    /// gpt-oss's `reasoning_effort`; `None`: the template's default (medium).
    pub effort: Option<ReasoningEffort>,
}

/// Everything needed to chat with one GGUF model. Immutable once opened, so
/// many sessions share it.
pub struct Engine {
    /// The model's file, or its first part when it is split.
    path: PathBuf,
    /// Every file of the model, in order (one unless it is split).
    part_paths: Vec<PathBuf>,
    model: Model,
    tokenizer: Tokenizer,
    template: ChatTemplate,
    end_tokens: Vec<u32>,
    /// How the template marks thinking, if it is a reasoning model's.
    reasoning: Option<ReasoningFormat>,
    /// How the template takes tools and the model writes calls.
    tool_format: ToolFormat,
    /// User-defined tokens the template writes as markup, sorted: kept as
    /// text in a message, as control tokens are (`guarded_spans`).
    template_markup: Vec<u32>,
    /// The grammar compiler over this model's vocabulary, built on first use.
    grammars: OnceLock<Grammars>,
    /// The whole file's SHA-256, once known: computed by `hash_file` (gigabytes
    /// take a while, so the app does it in the background) or remembered.
    file_sha256: OnceLock<String>,
}

impl Engine {
    /// Opens a model on the CPU.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_on(path, &Device::Cpu)
    }

    pub fn open_on(path: impl AsRef<Path>, device: &Device) -> Result<Self> {
        Self::open_with(path, device, Kernels::Hearth)
    }

    pub fn open_with(path: impl AsRef<Path>, device: &Device, kernels: Kernels) -> Result<Self> {
        let mut file = GgufFile::open(path.as_ref())?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let model = Model::load_with(&mut file, device, kernels)?;
        if tokenizer.vocab_size() > model.vocab_size() {
            return Err(file.corrupt(format!(
                "the tokenizer has {} tokens but the embeddings only {}",
                tokenizer.vocab_size(),
                model.vocab_size()
            )));
        }
        let text_of = |id: Option<u32>| id.and_then(|i| tokenizer.token_text(i)).unwrap_or("").to_string();
        let template = match file.string_opt("tokenizer.chat_template") {
            Some(src) => ChatTemplate::new(src, &text_of(tokenizer.bos()), &text_of(tokenizer.eos()))?,
            None => ChatTemplate::chatml(),
        };
        let mut end_tokens: Vec<u32> = tokenizer.eos().into_iter().chain(tokenizer.eot()).collect();
        for marker in END_OF_TURN_MARKERS {
            if let Some(id) = tokenizer.token_id(marker) {
                if tokenizer.is_control(id) && template.source().contains(marker) && !end_tokens.contains(&id) {
                    end_tokens.push(id);
                }
            }
        }
        let reasoning = ReasoningFormat::detect(&template);
        let template_markup = tokenizer.user_defined_in(template.source());
        let tool_format = ToolFormat::detect(&template);
        Ok(Self {
            path: file.path().to_path_buf(),
            part_paths: file.part_paths().into_iter().map(Path::to_path_buf).collect(),
            model,
            tokenizer,
            template,
            end_tokens,
            reasoning,
            template_markup,
            tool_format,
            grammars: OnceLock::new(),
            file_sha256: OnceLock::new(),
        })
    }

    /// This engine, its template's `strftime_now` reading `clock` rather
    /// than the local time: gpt-oss's template writes today's date into
    /// every prompt, so a test that samples from one fixes the day.
    pub fn with_template_clock(mut self, clock: crate::template::Clock) -> Result<Self> {
        self.template = self.template.clocked(clock)?;
        Ok(self)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every file of the model, in order: `[path()]` unless it is split.
    pub fn part_paths(&self) -> &[PathBuf] {
        &self.part_paths
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Tokens that end the assistant's turn.
    pub fn end_tokens(&self) -> &[u32] {
        &self.end_tokens
    }

    /// How the template marks thinking (`None`: not a reasoning model's).
    pub fn reasoning(&self) -> Option<&ReasoningFormat> {
        self.reasoning.as_ref()
    }

    /// The prompt ids for a conversation, ending where the reply begins.
    pub fn encode_chat(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        self.encode_chat_with(messages, PromptOptions::default())
    }

    /// The template variables `options` set, for the variables this
    /// model's template reads.
    fn template_vars(&self, options: PromptOptions) -> Vec<(&str, serde_json::Value)> {
        let mut vars = Vec::new();
        if let Some(format) = &self.reasoning {
            if let (Some(on), Some(switch)) = (options.thinking, format.switch.as_deref()) {
                vars.push((switch, on.into()));
            }
            if let (Some(effort), Some(var)) = (options.effort, format.effort.as_deref()) {
                vars.push((var, effort.as_str().into()));
            }
        }
        vars
    }

    /// The prompt text for a conversation, ending where the reply begins,
    /// with `options`' variables set. A Harmony model's replies go to its
    /// template as it wants them: the final message as content, the
    /// analysis as `thinking` (which the template then drops, as its text
    /// says, or keeps).
    pub fn render_chat(&self, messages: &[ChatMessage], options: PromptOptions) -> Result<String> {
        self.render_chat_tools(messages, options, &Tools::default())
    }

    /// `render_chat`, with `tools` offered as the template takes them (its
    /// `tools` variable, or Hearth's fallback: see `tools.rs`).
    pub fn render_chat_tools(&self, messages: &[ChatMessage], options: PromptOptions, tools: &Tools) -> Result<String> {
        let mut vars = self.template_vars(options);
        let (prepared, listed) = self.tool_format.prepare(messages, tools);
        let messages = prepared.as_slice();
        if let Some(listed) = listed {
            vars.push(("tools", listed));
        }
        match self.reasoning.as_ref().filter(|f| f.answer_start.is_some()) {
            Some(format) => {
                let messages: Vec<ChatMessage> = messages
                    .iter()
                    .map(|m| match m.role {
                        crate::template::Role::Assistant if m.thinking.is_none() => {
                            let (thinking, content) = format.split(&m.content);
                            ChatMessage { thinking, content, ..m.clone() }
                        }
                        _ => m.clone(),
                    })
                    .collect();
                self.template.render_with(&messages, true, &vars)
            }
            None => self.template.render_with(messages, true, &vars),
        }
    }

    /// The tokens the template adds to open the reply (its generation
    /// prompt: `<|im_start|>assistant\n`, and `<think>\n` where thinking
    /// opens), with thinking switched as `render_chat` does; `None` where
    /// they cannot be told apart from the messages' own tokens.
    ///
    /// The prompt before them is where the next turn's history still agrees
    /// with this one's, even when the template writes the reply otherwise
    /// than it was sampled (Qwen 3.5 drops earlier turns' thinking): a
    /// hybrid model keeps a checkpoint there (`Turn::set_checkpoint_at`).
    pub fn generation_prompt_ids(&self, options: PromptOptions) -> Result<Option<Vec<u32>>> {
        let probe = [ChatMessage::user("Hi")];
        let vars = self.template_vars(options);
        let render = |open: bool| self.template.render_with(&probe, open, &vars);
        let (whole, body) = (render(true)?, render(false)?);
        let Some(suffix) = whole.strip_prefix(body.as_str()).filter(|s| !s.is_empty()) else { return Ok(None) };
        let ids = self.tokenizer.encode(suffix, false, true)?;
        // Only a suffix that starts with a special token tokenizes apart
        // from the text before it.
        Ok(ids.first().is_some_and(|&id| self.tokenizer.is_special(id)).then_some(ids))
    }

    /// `encode_chat`, with `options` as `render_chat` takes them.
    ///
    /// A message that carries the tokens it was sampled as (`ids`, decoding
    /// to its content) is written as those tokens, not as its text tokenized
    /// again: about one sampled reply in twenty-five tokenizes otherwise, and
    /// the next turn would then miss the cache from that reply on. They are
    /// spliced in only where the template writes the content unchanged and
    /// a special token follows it (so the text on either side tokenizes as
    /// it does whole); otherwise the text is tokenized as usual.
    ///
    /// Only the template's own markup becomes special tokens: a system or
    /// user message whose content spells one (`<|im_end|>`,
    /// `<start_of_turn>`) is tokenized there as text (see `guarded_spans`).
    pub fn encode_chat_with(&self, messages: &[ChatMessage], options: PromptOptions) -> Result<Vec<u32>> {
        self.encode_chat_tools(messages, options, &Tools::default())
    }

    /// `encode_chat_with`, with `tools` offered (`render_chat_tools`). A
    /// tool's result is a message's content like any: text, whatever it spells.
    pub fn encode_chat_tools(
        &self,
        messages: &[ChatMessage],
        options: PromptOptions,
        tools: &Tools,
    ) -> Result<Vec<u32>> {
        let text = self.render_chat_tools(messages, options, tools)?;
        let guarded = self.guarded_spans(messages, options, tools, &text)?;
        let mut ids = match self.encode_spliced(messages, options, tools, &text, &guarded)? {
            Some(ids) => ids,
            None => self.tokenizer.encode_guarded(&text, true, &guarded, &|id| self.is_markup(id))?,
        };
        // Templates that spell out the BOS token would otherwise get two.
        if let Some(bos) = self.tokenizer.bos() {
            if ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
                ids.remove(0);
            }
        }
        Ok(ids)
    }

    /// Whether `id` is a user-defined token the template writes as markup
    /// (Harmony's `<|start|>`, Gemma 4's `<|channel>`): kept as text in a
    /// message, as control tokens are.
    fn is_markup(&self, id: u32) -> bool {
        self.template_markup.binary_search(&id).is_ok()
    }

    /// Where in the rendered prompt `text` the template wrote the content of
    /// each system or user message that spells markup (a control token, or
    /// a user-defined one the template writes): there the spelling stays
    /// text. (A reply's content is the model's own writing,
    /// markup included.) Each such message is rendered once more with its
    /// content replaced by a marker no real text has; what the template
    /// writes before and after the marker is the same as in `text`, and the
    /// content, as the template wrote it (trimmed, say), lies between.
    /// A template that writes the content twice or not at all leaves no
    /// such place, and the prompt is refused rather than let the content's
    /// markup through.
    fn guarded_spans(
        &self,
        messages: &[ChatMessage],
        options: PromptOptions,
        tools: &Tools,
        text: &str,
    ) -> Result<Vec<Range<usize>>> {
        let mut spans = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            if m.role == crate::template::Role::Assistant
                || !self.tokenizer.spells_markup(&m.content, &|id| self.is_markup(id))
            {
                continue;
            }
            let marker = format!("\u{F8FF}hearth-text-{i}\u{F8FF}");
            let mut marked = messages.to_vec();
            marked[i].content = marker.clone();
            marked[i].ids = None;
            let marked_text = self.render_chat_tools(&marked, options, tools)?;
            let place = match marked_text.match_indices(&marker).collect::<Vec<_>>().as_slice() {
                [(at, _)] => {
                    let (before, after) = (&marked_text[..*at], &marked_text[at + marker.len()..]);
                    (before.len() + after.len() <= text.len() && text.starts_with(before) && text.ends_with(after))
                        .then(|| before.len()..text.len() - after.len())
                }
                _ => None,
            };
            match place {
                Some(span) => spans.push(span),
                None => {
                    return Err(EngineError::Template(format!(
                        "message {} spells the model's control tokens, and its chat template rewrites that message, so Hearth cannot keep them as text; remove the markup from the message",
                        i + 1
                    )))
                }
            }
        }
        spans.sort_by_key(|s| s.start);
        Ok(spans)
    }

    /// The prompt with the kept tokens of `messages` spliced in, where that
    /// is exact (see `encode_chat_with`); `None` where it is not, or where no
    /// message keeps its tokens. `text` is the prompt rendered as usual,
    /// `guarded` its spans of content kept as text.
    fn encode_spliced(
        &self,
        messages: &[ChatMessage],
        options: PromptOptions,
        tools: &Tools,
        text: &str,
        guarded: &[Range<usize>],
    ) -> Result<Option<Vec<u32>>> {
        // The tokens written as the content: a reply's own end token is not
        // (the template writes the turn's end), nor any control token after.
        let written = |m: &ChatMessage| -> Option<Vec<u32>> {
            let ids = m.ids.as_deref()?;
            let n = ids.len() - ids.iter().rev().take_while(|&&id| self.tokenizer.is_control(id)).count();
            let ids = &ids[..n];
            (self.tokenizer.decode(ids) == m.content).then(|| ids.to_vec())
        };
        let spliced: Vec<Option<Vec<u32>>> = messages.iter().map(written).collect();
        let kept: Vec<usize> = (0..messages.len()).filter(|&i| spliced[i].is_some()).collect();
        if kept.is_empty() {
            return Ok(None);
        }
        // Each kept message's content replaced by a marker no real text has.
        let marker = |i: usize| format!("\u{F8FF}hearth-kept-{i}\u{F8FF}");
        let mut marked = messages.to_vec();
        for &i in &kept {
            marked[i].content = marker(i);
        }
        let marked_text = self.render_chat_tools(&marked, options, tools)?;
        let mut restored = marked_text.clone();
        for &i in &kept {
            if marked_text.matches(&marker(i)).count() != 1 {
                return Ok(None);
            }
            restored = restored.replace(&marker(i), &messages[i].content);
        }
        // The template writes each content as it is, and nothing else moved.
        if restored != text {
            return Ok(None);
        }
        // `guarded` spans within `text[at..at + len]`, relative to `at`.
        let within = |at: usize, len: usize| -> Vec<Range<usize>> {
            guarded
                .iter()
                .filter(|g| g.start < at + len && g.end > at)
                .map(|g| g.start.max(at) - at..g.end.min(at + len) - at)
                .collect()
        };
        let mut ids = Vec::new();
        let mut rest = marked_text.as_str();
        // Where `rest` begins in `text`.
        let mut at = 0;
        for (n, &i) in kept.iter().enumerate() {
            let (before, after) = rest.split_once(&marker(i)).expect("each marker is there once");
            ids.extend(
                self.tokenizer.encode_guarded(before, n == 0, &within(at, before.len()), &|id| self.is_markup(id))?,
            );
            ids.extend_from_slice(spliced[i].as_deref().expect("kept messages have ids"));
            at += before.len() + messages[i].content.len();
            rest = after;
            // The next text must start with a special token (the turn's end),
            // or it would have merged with the content's last characters.
            let next = self.tokenizer.encode_guarded(rest, false, &within(at, rest.len()), &|id| self.is_markup(id))?;
            if next.first().is_some_and(|&id| !self.tokenizer.is_special(id)) {
                return Ok(None);
            }
        }
        ids.extend(self.tokenizer.encode_guarded(rest, false, &within(at, rest.len()), &|id| self.is_markup(id))?);
        Ok(Some(ids))
    }

    /// How the template takes tools and the model writes its calls.
    pub fn tool_format(&self) -> ToolFormat {
        self.tool_format
    }

    /// The model's size and modification time (ns since the Unix epoch; of
    /// its parts, their sum and the latest), which say when a remembered
    /// hash still applies.
    pub fn file_fingerprint(&self) -> Result<(u64, u64)> {
        let (mut size, mut mtime) = (0, 0);
        for path in &self.part_paths {
            let meta = std::fs::metadata(path).map_err(|source| EngineError::Io { path: path.clone(), source })?;
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            size += meta.len();
            mtime = mtime.max(modified);
        }
        Ok((size, mtime))
    }

    /// The whole model file's SHA-256, if known yet.
    pub fn file_sha256(&self) -> Option<&str> {
        self.file_sha256.get().map(String::as_str)
    }

    /// Takes a SHA-256 remembered for this file (same path, size and time).
    pub fn set_file_sha256(&self, sha256: String) {
        let _ = self.file_sha256.set(sha256);
    }

    /// Reads the whole model and keeps its SHA-256 (of its parts one after
    /// another, when it is split); `None` if `stop` said to stop first.
    pub fn hash_file(&self, stop: &dyn Fn() -> bool) -> Result<Option<String>> {
        let hash = crate::file_hash::sha256_files(&self.part_paths, stop)
            .map_err(|(path, source)| EngineError::Io { path, source })?;
        if let Some(h) = &hash {
            self.set_file_sha256(h.clone());
        }
        Ok(hash)
    }

    /// What a cache computed now, for a context of `context_length`, depends
    /// on: this file (size, time, whole-file hash once known), the
    /// architecture, the dtype, the engine's build. (A file also names the layers it holds: `CacheIdentity::cache_layers`.) A saved cache is used
    /// only when its identity equals this, and never while the hash is unknown.
    pub fn cache_identity(&self, context_length: usize) -> Result<CacheIdentity> {
        let (size, mtime) = self.file_fingerprint()?;
        Ok(CacheIdentity {
            model_size: size,
            model_mtime_ns: mtime,
            model_sha256: self.file_sha256.get().cloned(),
            architecture: self.model.config().architecture.gguf_name().to_string(),
            dtype: "f16".into(),
            context_length,
            engine_version: BUILD_ID.into(),
            format_version: crate::session_file::FORMAT_VERSION,
            cache_layers: self.model.config().n_layers,
        })
    }

    /// A new conversation holding up to `context` tokens (`None`: the model's own).
    pub fn new_session(&self, context: Option<usize>) -> Session {
        Session::new(&self.model, context.unwrap_or(self.model.config().context_length))
    }

    /// A generation config with this model's end tokens.
    pub fn generation_config(&self, sampling: SamplingParams, max_new_tokens: usize) -> GenerationConfig {
        GenerationConfig {
            max_new_tokens,
            end_tokens: self.end_tokens.clone(),
            forbidden_tokens: Vec::new(),
            stop_strings: Vec::new(),
            sampling,
            top_logprobs: 0,
            grammar: None,
            speculation: crate::Speculation::Off,
            draft_model: None,
        }
    }

    /// `spec` compiled for this model (its vocabulary's token trie is built
    /// on first use, then kept): what `GenerationConfig::grammar` takes. An
    /// invalid grammar or an unsupported schema feature is a setting error
    /// naming it.
    pub fn compile_grammar(&self, spec: &GrammarSpec) -> Result<Grammar> {
        let grammars = match self.grammars.get() {
            Some(g) => g,
            None => {
                let built = Grammars::new(&self.tokenizer, self.model.vocab_size(), &self.end_tokens)?;
                self.grammars.get_or_init(|| built)
            }
        };
        grammars.compile(spec)
    }
}
