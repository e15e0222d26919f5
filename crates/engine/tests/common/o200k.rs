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
    // Relative to this file, so the other crates' tests that include it find it too.
    let template = include_str!("../data/templates/gpt-oss.jinja");
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
        s("tokenizer.chat_template", template),
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

/// A one-layer gpt-oss file, with the real vocabulary and template, whose
/// weights write one Harmony reply whatever it is asked:
/// `<|channel|>analysis<|message|>{thinking}<|end|><|start|>assistant<|channel|>final<|message|>{answer}<|return|>`.
/// Real parts all through (the architecture, the file format, the
/// tokenizer, the template); only the weights are made, not trained.
///
/// How: queries and keys are zero, so attention averages the values of the
/// last `WINDOW` positions (its sliding window); a token's embedding is a
/// one-hot "current" feature, and its value a one-hot "seen" feature. The
/// FFN's experts are zero. Each output row asks for the current token that
/// precedes it in the script (weight `CUR`), and where the script leaves a
/// token twice with different successors (`<|channel|>`, `<|message|>`),
/// the later successor asks for it a little less (`BRANCH`) and for a token
/// seen only before it (`analysis`, `final`; weight `SEEN`) as well. The
/// margins are tens of logits, so sampling at the app's default
/// temperature follows the script too.
pub fn write_scripted_gpt_oss(path: &Path, thinking: &str, answer: &str) {
    const WINDOW: usize = 12;
    let special = special_token;
    let word = |w: &str| -> Vec<u32> { tiktoken_rs::o200k_base_singleton().encode_ordinary(w) };
    let (start, channel, message, end, ret) = (
        special("<|start|>"),
        special("<|channel|>"),
        special("<|message|>"),
        special("<|end|>"),
        special("<|return|>"),
    );
    let (assistant, analysis, fin) = (word("assistant")[0], word("analysis")[0], word("final")[0]);
    let (think, say) = (word(thinking), word(answer));
    // The script, from the prompt's last token.
    let mut script = vec![assistant, channel, analysis, message];
    script.extend(&think);
    script.extend([end, start, assistant, channel, fin, message]);
    script.extend(&say);
    script.push(ret);
    let mut slots: Vec<u32> = Vec::new();
    for &t in &script {
        if !slots.contains(&t) {
            slots.push(t);
        }
    }
    assert!(slots.len() <= HALF, "the script has {} distinct tokens; at most {HALF}", slots.len());
    let slot = |t: u32| slots.iter().position(|&s| s == t).unwrap();
    for text in [&think, &say] {
        let unique: std::collections::HashSet<_> = text.iter().collect();
        assert_eq!(unique.len(), text.len(), "each token of {thinking:?} and {answer:?} once");
        assert!(text.iter().all(|t| ![assistant, analysis, fin].contains(t)), "no header word in the text");
    }
    assert!(think.iter().all(|t| !say.contains(t)), "the thinking and the answer share no token");
    // The second `<|channel|>` must see the first `analysis`.
    assert!(think.len() + 6 <= WINDOW, "at most {} thinking tokens", WINDOW - 6);

    let mut embd = vec![0f32; VOCAB * E];
    for (k, &t) in slots.iter().enumerate() {
        embd[t as usize * E + k] = 1.0;
    }
    let mut output = vec![0f32; VOCAB * E];
    // The successor of each current token; the first time wins.
    for pair in script.windows(2) {
        let (cur, next) = (pair[0], pair[1]);
        let row = &mut output[next as usize * E..(next as usize + 1) * E];
        row[slot(cur)] = CUR;
    }
    // The second header's branches: `final` after the analysis was seen,
    // the answer after `final` was seen.
    let later_answer = say[0];
    for (next, cur, seen) in [(fin, channel, analysis), (later_answer, message, fin)] {
        let row = &mut output[next as usize * E..(next as usize + 1) * E];
        row[slot(cur)] = CUR - BRANCH;
        row[HALF + slot(seen)] = SEEN;
    }
    write_harmony_weights(path, embd, output, WINDOW, 8192);
}

/// The made gpt-oss files' output weights: for the token the current one
/// is followed by in the script, for a branch's later successor (that much
/// less), and for a token seen in the window.
const CUR: f32 = 40.0;
const BRANCH: f32 = 10.0;
const SEEN: f32 = 25.0;

/// A Harmony special token's id.
fn special_token(name: &str) -> u32 {
    SPECIALS.iter().find(|(_, n)| *n == name).map(|(i, _)| *i).unwrap()
}

/// Width of the made gpt-oss files: a "current" half and a "seen" half.
const E: usize = 64;
const HALF: usize = 32;

/// A one-layer gpt-oss file of these embeddings and output rows, whose
/// attention averages the values of the last `window` positions.
fn write_harmony_weights(path: &Path, embd: Vec<f32>, output: Vec<f32>, window: usize, context: u32) {
    use candle_core::quantized::{GgmlDType, QTensor};
    use hearth_engine::gguf_writer::TensorEntry;
    use hearth_engine::GgmlType;
    // Values: the normed one-hot (8 at its slot) as 1; out: `window` times
    // that into the "seen" half, so each token in the window counts 1.
    let mut wv = vec![0f32; E * E];
    let mut wo = vec![0f32; E * E];
    for k in 0..HALF {
        wv[k * E + k] = 1.0 / 8.0;
        wo[(HALF + k) * E + k] = window as f32;
    }

    let layer = |n: &str| format!("blk.0.{n}");
    let mut tensors: Vec<(TensorEntry, Vec<u8>)> = Vec::new();
    let mut add = |name: String, dims: Vec<usize>, dtype: GgmlDType, values: Vec<f32>| {
        let t = candle_core::Tensor::from_vec(values, dims.as_slice(), &candle_core::Device::Cpu).unwrap();
        let q = QTensor::quantize(&t, dtype).unwrap();
        let ggml = match dtype {
            GgmlDType::F32 => GgmlType::F32,
            GgmlDType::Q8_0 => GgmlType::Q8_0,
            _ => unreachable!(),
        };
        tensors.push((TensorEntry { name, dims, dtype: ggml }, q.data().unwrap().into_owned()));
    };
    let zeros = |n: usize| vec![0f32; n];
    let ones = |n: usize| vec![1f32; n];
    let (experts, ffn) = (4, 32);
    add("token_embd.weight".into(), vec![VOCAB, E], GgmlDType::Q8_0, embd);
    add("output.weight".into(), vec![VOCAB, E], GgmlDType::Q8_0, output);
    add("output_norm.weight".into(), vec![E], GgmlDType::F32, ones(E));
    add(layer("attn_norm.weight"), vec![E], GgmlDType::F32, ones(E));
    add(layer("post_attention_norm.weight"), vec![E], GgmlDType::F32, ones(E));
    for n in ["attn_q", "attn_k"] {
        add(layer(&format!("{n}.weight")), vec![E, E], GgmlDType::F32, zeros(E * E));
    }
    add(layer("attn_v.weight"), vec![E, E], GgmlDType::F32, wv);
    add(layer("attn_output.weight"), vec![E, E], GgmlDType::F32, wo);
    for n in ["attn_q", "attn_k", "attn_v", "attn_output"] {
        add(layer(&format!("{n}.bias")), vec![E], GgmlDType::F32, zeros(E));
    }
    // A sink far below every score: no share of the softmax.
    add(layer("attn_sinks.weight"), vec![1], GgmlDType::F32, vec![-1000.0]);
    add(layer("ffn_gate_inp.weight"), vec![experts, E], GgmlDType::F32, zeros(experts * E));
    add(layer("ffn_gate_inp.bias"), vec![experts], GgmlDType::F32, zeros(experts));
    for n in ["ffn_gate_exps", "ffn_up_exps"] {
        add(layer(&format!("{n}.weight")), vec![experts, ffn, E], GgmlDType::Q8_0, zeros(experts * ffn * E));
        add(layer(&format!("{n}.bias")), vec![experts, ffn], GgmlDType::F32, zeros(experts * ffn));
    }
    add(layer("ffn_down_exps.weight"), vec![experts, E, ffn], GgmlDType::Q8_0, zeros(experts * E * ffn));
    add(layer("ffn_down_exps.bias"), vec![experts, E], GgmlDType::F32, zeros(experts * E));

    let k = |s: &str| format!("gpt-oss.{s}");
    let u = |key: &str, v: u32| (k(key), Value::U32(v));
    let mut md = vec![
        ("general.architecture".to_string(), Value::String("gpt-oss".into())),
        ("general.name".to_string(), Value::String("Hearth scripted Harmony".into())),
        u("block_count", 1),
        u("context_length", context),
        u("embedding_length", E as u32),
        u("feed_forward_length", ffn as u32),
        u("attention.head_count", 1),
        u("attention.head_count_kv", 1),
        u("attention.key_length", E as u32),
        u("attention.value_length", E as u32),
        u("rope.dimension_count", E as u32),
        (k("rope.freq_base"), Value::F32(150_000.0)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        u("attention.sliding_window", window as u32),
        u("expert_count", experts as u32),
        u("expert_used_count", 2),
        u("expert_feed_forward_length", ffn as u32),
    ];
    md.extend(tokenizer_metadata());
    let (entries, data): (Vec<TensorEntry>, Vec<Vec<u8>>) = tensors.into_iter().unzip();
    let mut data = data.into_iter();
    hearth_engine::gguf_writer::write(path, &md, &entries, |_| Ok(data.next().unwrap())).unwrap();
}

/// A one-layer gpt-oss file, as `write_scripted_gpt_oss` makes one, that
/// works as an agent's model: asked anything, it calls the function `name`
/// with `arguments` (JSON text) in Harmony's form,
/// `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>`;
/// once the function's result holding the word `trigger` (with its
/// leading space, as inside a sentence) has come back, it answers
/// `<|channel|>final<|message|>{answer}<|return|>` instead. So the answer
/// comes only after the agent ran its tool and sent the result back. The
/// answer must not hold the trigger (say it in capitals).
///
/// The branch: after `<|channel|>`, `final` is asked for a little less than
/// `commentary` but also by `trigger` seen within the last `window`
/// positions (a result's end is that close to the reply); after
/// `<|message|>`, the answer by `final` seen. The context is long enough
/// for an agent's tools and instructions.
pub fn write_scripted_gpt_oss_call(path: &Path, name: &str, arguments: &str, trigger: &str, answer: &str) {
    const WINDOW: usize = 64;
    let special = special_token;
    let word = |w: &str| -> Vec<u32> { tiktoken_rs::o200k_base_singleton().encode_ordinary(w) };
    let (channel, message, constrain, call, ret) = (
        special("<|channel|>"),
        special("<|message|>"),
        special("<|constrain|>"),
        special("<|call|>"),
        special("<|return|>"),
    );
    let assistant = word("assistant")[0];
    let (commentary, fin) = (word("commentary")[0], word("final")[0]);
    let trigger = word(&format!(" {trigger}"));
    assert_eq!(trigger.len(), 1, "the trigger is one token");
    let trigger = trigger[0];
    let header = word(&format!(" to=functions.{name} "));
    let (args, say) = (word(arguments), word(answer));
    // Once the model wrote it, the trigger would be seen twice, and `final`
    // asked for above every next token.
    assert!(!say.contains(&trigger) && !args.contains(&trigger), "the answer and the call do not hold the trigger");
    // The call, from the prompt's last token; then the answer's branch.
    let mut first = vec![assistant, channel, commentary];
    first.extend(&header);
    first.extend([constrain]);
    first.extend(word("json"));
    first.push(message);
    first.extend(&args);
    first.push(call);
    let mut then = vec![fin, message];
    then.extend(&say);
    then.push(ret);
    let mut slots: Vec<u32> = Vec::new();
    for &t in first.iter().chain(&then).chain([&trigger]) {
        if !slots.contains(&t) {
            slots.push(t);
        }
    }
    assert!(slots.len() <= HALF, "the script has {} distinct tokens; at most {HALF}", slots.len());
    let mut once = std::collections::HashSet::new();
    for &t in first.iter().chain(&then[2..]) {
        assert!(once.insert(t), "token {t} twice in the script: pick words that share no token");
    }
    let slot = |t: u32| slots.iter().position(|&s| s == t).unwrap();
    let mut embd = vec![0f32; VOCAB * E];
    for (k, &t) in slots.iter().enumerate() {
        embd[t as usize * E + k] = 1.0;
    }
    let mut output = vec![0f32; VOCAB * E];
    for pair in first.windows(2).chain(then.windows(2)) {
        let (cur, next) = (pair[0], pair[1]);
        output[next as usize * E + slot(cur)] = CUR;
    }
    for (next, cur, seen) in [(fin, channel, trigger), (say[0], message, fin)] {
        let row = &mut output[next as usize * E..(next as usize + 1) * E];
        row[slot(cur)] = CUR - BRANCH;
        row[HALF + slot(seen)] = SEEN;
    }
    write_harmony_weights(path, embd, output, WINDOW, 131_072);
}
