//! Shared test fixtures: the real default model, and tiny random-weight GGUF
//! files written at test time for every supported family.
#![allow(dead_code, reason = "each test binary uses its own part of the shared helpers")]

pub mod gemma4_vocab;
pub mod o200k;
pub mod retype;

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use hearth_engine::Engine;

/// candle's CPU kernels (the structure tests' reference, and the graph
/// pass on the CPU) run in a pool whose threads are pinned to cores and
/// spin at a barrier: on a 2-core machine running tests side by side, a
/// 64-wide matmul then takes a millisecond of spinning instead of
/// microseconds. One thread, unless the environment says otherwise.
#[ctor::ctor(unsafe)]
fn candle_on_one_thread() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // SAFETY: before main, no other thread reads the environment.
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
}

/// The real SmolLM2 file. Fails loudly rather than skipping: these tests are
/// the proof that the real loading path works.
pub fn default_model() -> PathBuf {
    let p = hearth_engine::paths::default_model_path(|k| std::env::var_os(k));
    assert!(p.is_file(), "default model missing at {}; run scripts/fetch-model.sh first", p.display());
    p
}

/// The real Gemma 3 270M Q4_K_M file, fetched by scripts/fetch-gemma.sh.
pub fn gemma3_model() -> PathBuf {
    let p =
        hearth_engine::paths::default_model_path(|k| std::env::var_os(k)).with_file_name("gemma-3-270m-q4_k_m.gguf");
    assert!(p.is_file(), "the Gemma 3 file is missing at {}; run scripts/fetch-gemma.sh first", p.display());
    p
}

/// Every test binary here runs the kernels `HEARTH_ISA` caps them to, as the
/// CLI and the app do (`./hearth test` runs them under `avx2` and
/// `portable` too); set before any test starts.
#[ctor::ctor(unsafe)]
fn cap_isa_from_env() {
    if let Some(cap) = std::env::var("HEARTH_ISA").ok().and_then(|s| hearth_engine::cpu::isa::Isa::parse(&s)) {
        hearth_engine::cpu::isa::cap_isa(cap);
    }
}

/// The Python of llama-cpp-python's venv (`bench/setup-llamacpp.sh` makes
/// it; `HEARTH_LLAMACPP_PYTHON` names another). Without it a test says so
/// and passes, unless `HEARTH_REQUIRE_LLAMACPP` is set (`./hearth test`
/// sets it).
pub fn llamacpp_python() -> Option<PathBuf> {
    let python = std::env::var_os("HEARTH_LLAMACPP_PYTHON")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/hearth/llama-venv/bin/python")))?;
    if python.is_file() {
        return Some(python);
    }
    assert!(
        std::env::var_os("HEARTH_REQUIRE_LLAMACPP").is_none(),
        "llama.cpp's venv is missing at {}: run bench/setup-llamacpp.sh",
        python.display()
    );
    eprintln!("skipped: no llama.cpp venv at {} (bench/setup-llamacpp.sh makes it)", python.display());
    None
}

pub fn open_default() -> Engine {
    Engine::open(default_model()).expect("the default model opens")
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Family {
    Llama,
    /// LFM2: short gated convolutions on even layers (no KV heads), QK-normed
    /// attention on odd ones.
    Lfm2,
    /// DeepSeek V2's layout (GLM-4.7-Flash): latent attention, a dense
    /// first layer, sigmoid-routed experts beside a shared one.
    Deepseek2,
    /// GLM-4.5: biased QKV, partial RoPE, a dense first layer, then
    /// sigmoid-routed experts with a selection bias beside a shared expert.
    Glm4Moe,
    /// Granite 3: Llama with embedding, residual, attention and logit scales.
    Granite,
    /// Granite MoE Shared: Granite with experts and an ungated shared expert.
    GraniteMoe,
    /// OLMo 2: post-norms only, Q and K normed across heads (with
    /// `olmo3_window`, OLMo 3's sliding layers).
    Olmo2,
    /// Gemma 2: Gemma 3's norms and GELU without QK norms, soft-capped
    /// attention scores and logits, every other layer sliding.
    Gemma2,
    /// SmolLM3: Llama without RoPE on every fourth layer.
    SmolLm3,
    /// Mistral 3: Llama with YaRN's own betas and log multiplier, the
    /// attention temperature and an attention output bias.
    Mistral3,
    /// Phi-3: fused `attn_qkv` and gate-and-up `ffn_up`, partial NeoX RoPE
    /// (`rope_dims`) with LongRoPE's long and short factors and magnitude.
    Phi3,
    Qwen2,
    Qwen3,
    Gemma3,
    /// Qwen 3 with `experts` in place of the dense FFN.
    Qwen3Moe,
    /// Qwen3-VL's text model: Qwen 3 (or Qwen3-MoE) with multi-section RoPE.
    Qwen3Vl,
    Qwen3VlMoe,
    /// Qwen 3.5: Gated DeltaNet layers, every fourth gated attention.
    Qwen35,
    /// Qwen 3.5 with `experts` and a shared expert.
    Qwen35Moe,
    /// gpt-oss: `experts` with biases, attention with biases and sinks,
    /// even layers sliding over `sliding_window`, YaRN.
    GptOss,
    /// Gemma 4: written by `write_gemma4` from `TinySpec::gemma4`.
    Gemma4,
}

impl Family {
    pub fn is_hybrid(self) -> bool {
        matches!(self, Family::Qwen35 | Family::Qwen35Moe)
    }

    pub fn has_experts(self) -> bool {
        matches!(
            self,
            Family::Qwen3Moe
                | Family::Qwen3VlMoe
                | Family::Qwen35Moe
                | Family::GptOss
                | Family::GraniteMoe
                | Family::Glm4Moe
                | Family::Deepseek2
        )
    }
}

pub struct TinySpec {
    pub family: Family,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub context: usize,
    pub sliding_window: usize,
    pub sliding_pattern: usize,
    pub seed: u64,
    pub dtype: GgmlDType,
    /// For `Qwen3Moe`: experts per layer, used per token, and each one's width.
    pub experts: (usize, usize, usize),
    /// The experts' type (the rest is `dtype`).
    pub experts_dtype: GgmlDType,
    /// Gate and up in one `ffn_gate_up_exps` tensor (the same values).
    pub fused_gate_up: bool,
    /// Hybrids: the recurrent layers' head size, key heads and value heads,
    /// and every how many layers one is full attention.
    pub recurrent: (usize, usize, usize, usize),
    /// Hybrids: dimensions of each attention head that RoPE rotates.
    pub rope_dims: usize,
    /// YaRN's factor and original context (`rope.scaling.*`), where set.
    pub yarn: Option<(f32, u32)>,
    /// gpt-oss's real vocabulary and template (`o200k.rs`) in place of the
    /// tiny one.
    pub o200k: bool,
    /// Gemma 4's own choices.
    pub gemma4: Gemma4Spec,
    /// A chat template in place of the vocabulary's own.
    pub chat_template: Option<String>,
    /// Control tokens written in place of the tiny vocabulary's last
    /// filler tokens (a family's markup, such as Mistral's `[TOOL_CALLS]`).
    pub control_tokens: Vec<&'static str>,
    /// `rope.scaling.original_context_length` (Phi-3: sessions longer than
    /// this take LongRoPE's long factors).
    pub original_context: Option<u32>,
    /// OLMo 2 written as OLMo 3: `sliding_window` on three of every four layers.
    pub olmo3_window: bool,
    /// Metadata (keys without the architecture's prefix) written over the family's own.
    pub metadata: Vec<(&'static str, Value)>,
    /// Another type for the tensors this names (`None`: the spec's own).
    pub retype: Option<fn(&str) -> Option<GgmlDType>>,
    /// GLM-4.5: Q and K normed per head (`attn_q_norm`, `attn_k_norm`), as
    /// GLM-4.5's converter writes them where the model has `use_qk_norm`.
    pub qk_norm: bool,
}

/// What a Gemma 4 file adds to `TinySpec` (its `head_dim`, `n_kv_heads`
/// and `rope_dims` are the full layers').
#[derive(Clone, Debug)]
pub struct Gemma4Spec {
    /// `attention.sliding_window_pattern`.
    pub sliding: Vec<bool>,
    /// `attention.shared_kv_layers`.
    pub shared_kv_layers: usize,
    /// Layers without `attn_v` (their keys serve as values).
    pub no_v: Vec<usize>,
    pub head_dim_swa: usize,
    pub kv_heads_swa: usize,
    pub rope_dims_swa: usize,
    /// `embedding_length_per_layer_input` (0: none).
    pub per_layer: usize,
    /// Rotated pairs of a full head; the rest get llama.cpp's 1e30
    /// frequency factor (Gemma 4's proportional RoPE).
    pub rotated_pairs_full: usize,
    pub softcap: f32,
    /// Gemma 4's vocabulary (`gemma4_vocab.rs`, from the real Gemma 3
    /// file) and real template in place of the tiny ones.
    pub real_vocab: bool,
}

impl Gemma4Spec {
    /// E2B's structure, small: per-layer embeddings, the last two layers
    /// reading layers 2 and 3, layer 1 without `attn_v`.
    pub fn small() -> Self {
        Self {
            sliding: vec![true, false, true, false, true, false],
            shared_kv_layers: 2,
            no_v: vec![1],
            head_dim_swa: 16,
            kv_heads_swa: 2,
            rope_dims_swa: 16,
            per_layer: 32,
            rotated_pairs_full: 8,
            softcap: 30.0,
            real_vocab: false,
        }
    }
}

impl TinySpec {
    pub fn new(family: Family) -> Self {
        let hybrid = family.is_hybrid();
        Self {
            family,
            // A hybrid's layers alternate recurrent and attention here.
            n_layers: if hybrid { 4 } else { 2 },
            n_embd: 64,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 16,
            ffn: 128,
            context: 256,
            sliding_window: 8,
            sliding_pattern: 2,
            seed: 7,
            dtype: GgmlDType::Q8_0,
            experts: (8, 2, 64),
            experts_dtype: GgmlDType::Q8_0,
            fused_gate_up: false,
            recurrent: (64, 2, 4, if hybrid { 2 } else { 4 }),
            rope_dims: 8,
            // gpt-oss's own; Mistral 3's steps its attention temperature
            // every 32 positions here (16,384 in Ministral 3).
            yarn: match family {
                Family::GptOss => Some((32.0, 4096)),
                Family::Mistral3 => Some((4.0, 32)),
                _ => None,
            },
            o200k: false,
            gemma4: Gemma4Spec::small(),
            chat_template: None,
            control_tokens: Vec::new(),
            original_context: (family == Family::Phi3).then_some(32),
            olmo3_window: false,
            metadata: Vec::new(),
            retype: None,
            qk_norm: false,
        }
    }

    /// A Gemma 4 model like E2B (`moe`: false) or 26B-A4B (experts beside
    /// the dense MLP, all layers their own KV, no per-layer embeddings).
    pub fn gemma4(moe: bool) -> Self {
        let mut spec =
            Self { n_layers: 6, n_heads: 4, n_kv_heads: 1, head_dim: 32, context: 2048, ..Self::new(Family::Gemma4) };
        if moe {
            spec.n_layers = 4;
            spec.experts = (8, 2, 64);
            spec.gemma4 = Gemma4Spec {
                sliding: vec![true, true, false, true],
                shared_kv_layers: 0,
                no_v: vec![2],
                per_layer: 0,
                ..Gemma4Spec::small()
            };
        } else {
            spec.experts = (0, 0, 0);
        }
        spec
    }
}

/// DeepSeek V2's latent attention here: the latent's rank, the rotated
/// key's size, each head's unrotated query part, value and query rank.
pub const MLA_RANK: usize = 32;
pub const MLA_ROPE: usize = 32;
pub const MLA_NOPE: usize = 32;
pub const MLA_V: usize = 32;
pub const MLA_Q_RANK: usize = 32;
const MLA_KV_HEADS: usize = 1;

/// Tiny vocab: the control tokens, then the 256 GPT-2 byte characters (or
/// SentencePiece byte tokens for Gemma), then filler up to VOCAB.
pub const VOCAB: usize = 320;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn random(rng: &mut Lcg, dims: &[usize], scale: f32) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.next() * scale).collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

/// Writes a random-weight model of `spec` to `path`.
pub fn write_tiny(path: &Path, spec: &TinySpec) {
    if spec.family == Family::Gemma4 {
        return write_gemma4(path, spec);
    }
    let arch = match spec.family {
        Family::Llama => "llama",
        Family::Gemma2 => "gemma2",
        Family::Olmo2 => "olmo2",
        Family::Granite => "granite",
        Family::Glm4Moe => "glm4moe",
        Family::Deepseek2 => "deepseek2",
        Family::Lfm2 => "lfm2",
        Family::GraniteMoe => "granitemoe",
        Family::SmolLm3 => "smollm3",
        Family::Mistral3 => "mistral3",
        Family::Phi3 => "phi3",
        Family::Qwen2 => "qwen2",
        Family::Qwen3 => "qwen3",
        Family::Gemma3 => "gemma3",
        Family::Qwen3Moe => "qwen3moe",
        Family::Qwen3Vl => "qwen3vl",
        Family::Qwen3VlMoe => "qwen3vlmoe",
        Family::Qwen35 => "qwen35",
        Family::Qwen35Moe => "qwen35moe",
        Family::GptOss => "gpt-oss",
        Family::Gemma4 => unreachable!("written by write_gemma4"),
    };
    let mut rng = Lcg(spec.seed);
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let q = |t: &Tensor, dtype: GgmlDType| QTensor::quantize(t, dtype).unwrap();
    let mut put = |name: String, t: Tensor, dtype: GgmlDType| {
        let dtype = spec.retype.and_then(|f| f(&name)).unwrap_or(dtype);
        tensors.push((name, q(&t, dtype)))
    };
    let e = spec.n_embd;
    let qd = spec.n_heads * spec.head_dim;
    let kvd = spec.n_kv_heads * spec.head_dim;
    let ones_ish = |rng: &mut Lcg, n: usize| (random(rng, &[n], 0.1) + 1.0).unwrap();
    let vocab = if spec.o200k { o200k::VOCAB } else { VOCAB };
    put("token_embd.weight".into(), random(&mut rng, &[vocab, e], 1.0), spec.dtype);
    // LFM2's converter names the final norm `token_embd_norm`.
    let output_norm = if spec.family == Family::Lfm2 { "token_embd_norm.weight" } else { "output_norm.weight" };
    put(output_norm.into(), ones_ish(&mut rng, e), GgmlDType::F32);
    if !matches!(spec.family, Family::Gemma2 | Family::Gemma3) {
        put("output.weight".into(), random(&mut rng, &[vocab, e], 0.2), spec.dtype);
    }
    if spec.family == Family::Phi3 {
        // Divisors of each pair's angle: near 1 for short sessions, up to
        // several for long ones (Phi-3.5's run from 1 to about 60).
        let factors = |rng: &mut Lcg, spread: f64| {
            random(rng, &[spec.rope_dims / 2], 1.0).abs().unwrap().affine(spread, 1.0).unwrap()
        };
        put("rope_factors_short.weight".into(), factors(&mut rng, 0.2), GgmlDType::F32);
        put("rope_factors_long.weight".into(), factors(&mut rng, 6.0), GgmlDType::F32);
    }
    let (sd, hk, hv, interval) = spec.recurrent;
    for i in 0..spec.n_layers {
        let p = format!("blk.{i}");
        let olmo2 = spec.family == Family::Olmo2;
        if !olmo2 {
            put(format!("{p}.attn_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        }
        let recurrent = spec.family.is_hybrid() && (i + 1) % interval != 0;
        if recurrent {
            let channels = (2 * hk + hv) * sd;
            put(format!("{p}.attn_qkv.weight"), random(&mut rng, &[channels, e], 0.2), spec.dtype);
            put(format!("{p}.attn_gate.weight"), random(&mut rng, &[hv * sd, e], 0.2), spec.dtype);
            put(format!("{p}.ssm_conv1d.weight"), random(&mut rng, &[channels, 4], 0.5), GgmlDType::F32);
            put(format!("{p}.ssm_dt.bias"), random(&mut rng, &[hv], 0.5), GgmlDType::F32);
            // −exp(A_log), as the converter stores it.
            let a = (random(&mut rng, &[hv], 0.5).exp().unwrap() * -1.0).unwrap();
            put(format!("{p}.ssm_a"), a, GgmlDType::F32);
            put(format!("{p}.ssm_beta.weight"), random(&mut rng, &[hv, e], 0.2), spec.dtype);
            put(format!("{p}.ssm_alpha.weight"), random(&mut rng, &[hv, e], 0.2), spec.dtype);
            put(format!("{p}.ssm_norm.weight"), ones_ish(&mut rng, sd), GgmlDType::F32);
            put(format!("{p}.ssm_out.weight"), random(&mut rng, &[e, hv * sd], 0.2), spec.dtype);
        } else if spec.family == Family::Lfm2 && i % 2 == 0 {
            // A short convolution of three taps.
            put(format!("{p}.shortconv.in_proj.weight"), random(&mut rng, &[3 * e, e], 0.2), spec.dtype);
            put(format!("{p}.shortconv.conv.weight"), random(&mut rng, &[e, 3], 0.5), GgmlDType::F32);
            put(format!("{p}.shortconv.out_proj.weight"), random(&mut rng, &[e, e], 0.2), spec.dtype);
        } else if spec.family == Family::Deepseek2 {
            // Latent attention: MLA_* below; queries through a low rank.
            let nh = spec.n_heads;
            put(format!("{p}.attn_q_a.weight"), random(&mut rng, &[MLA_Q_RANK, e], 0.2), spec.dtype);
            put(format!("{p}.attn_q_a_norm.weight"), ones_ish(&mut rng, MLA_Q_RANK), GgmlDType::F32);
            put(
                format!("{p}.attn_q_b.weight"),
                random(&mut rng, &[nh * (MLA_NOPE + MLA_ROPE), MLA_Q_RANK], 0.2),
                spec.dtype,
            );
            put(format!("{p}.attn_kv_a_mqa.weight"), random(&mut rng, &[MLA_RANK + MLA_ROPE, e], 0.2), spec.dtype);
            put(format!("{p}.attn_kv_a_norm.weight"), ones_ish(&mut rng, MLA_RANK), GgmlDType::F32);
            put(format!("{p}.attn_k_b.weight"), random(&mut rng, &[nh, MLA_RANK, MLA_NOPE], 0.2), spec.dtype);
            put(format!("{p}.attn_v_b.weight"), random(&mut rng, &[nh, MLA_V, MLA_RANK], 0.2), spec.dtype);
            put(format!("{p}.attn_output.weight"), random(&mut rng, &[e, nh * MLA_V], 0.2), spec.dtype);
        } else if spec.family == Family::Phi3 {
            put(format!("{p}.attn_qkv.weight"), random(&mut rng, &[qd + 2 * kvd, e], 0.2), spec.dtype);
            put(format!("{p}.attn_output.weight"), random(&mut rng, &[e, qd], 0.2), spec.dtype);
        } else {
            // Qwen 3.5's queries carry an output gate per head.
            let q_rows = if spec.family.is_hybrid() { 2 * qd } else { qd };
            put(format!("{p}.attn_q.weight"), random(&mut rng, &[q_rows, e], 0.2), spec.dtype);
            put(format!("{p}.attn_k.weight"), random(&mut rng, &[kvd, e], 0.2), spec.dtype);
            put(format!("{p}.attn_v.weight"), random(&mut rng, &[kvd, e], 0.2), spec.dtype);
            put(format!("{p}.attn_output.weight"), random(&mut rng, &[e, qd], 0.2), spec.dtype);
        }
        let gpt_oss = spec.family == Family::GptOss;
        if spec.family == Family::Mistral3 {
            put(format!("{p}.attn_output.bias"), random(&mut rng, &[e], 0.1), GgmlDType::F32);
        }
        if gpt_oss {
            put(format!("{p}.attn_output.bias"), random(&mut rng, &[e], 0.1), GgmlDType::F32);
            // A few units, as trained sinks are: some above the scores, some below.
            put(format!("{p}.attn_sinks.weight"), random(&mut rng, &[spec.n_heads], 3.0), GgmlDType::F32);
        }
        let ffn_norm = if spec.family.is_hybrid() || gpt_oss || spec.family == Family::Glm4Moe {
            "post_attention_norm"
        } else {
            "ffn_norm"
        };
        // GLM-4.5 and DeepSeek V2: the first layer dense.
        let dense_here = matches!(spec.family, Family::Glm4Moe | Family::Deepseek2) && i == 0;
        if olmo2 {
            // After attention and the FFN only; Q and K normed across heads.
            put(format!("{p}.post_attention_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
            put(format!("{p}.post_ffw_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
            put(format!("{p}.attn_q_norm.weight"), ones_ish(&mut rng, qd), GgmlDType::F32);
            put(format!("{p}.attn_k_norm.weight"), ones_ish(&mut rng, kvd), GgmlDType::F32);
        } else {
            put(format!("{p}.{ffn_norm}.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        }
        if matches!(spec.family, Family::Qwen35Moe | Family::GraniteMoe)
            || (matches!(spec.family, Family::Glm4Moe | Family::Deepseek2) && !dense_here)
        {
            if spec.family == Family::Qwen35Moe {
                put(format!("{p}.ffn_gate_inp_shexp.weight"), random(&mut rng, &[e], 0.3), GgmlDType::F32);
            }
            // GLM's one shared expert is as wide as a routed one.
            let w = if matches!(spec.family, Family::Glm4Moe | Family::Deepseek2) { spec.experts.2 } else { spec.ffn };
            put(format!("{p}.ffn_gate_shexp.weight"), random(&mut rng, &[w, e], 0.2), spec.dtype);
            put(format!("{p}.ffn_up_shexp.weight"), random(&mut rng, &[w, e], 0.2), spec.dtype);
            put(format!("{p}.ffn_down_shexp.weight"), random(&mut rng, &[e, w], 0.2), spec.dtype);
        }
        if spec.family.has_experts() && !dense_here {
            let (n, _, ff) = spec.experts;
            if matches!(spec.family, Family::Glm4Moe | Family::Deepseek2) {
                // Selection biases a few tenths apart, as trained ones are.
                put(format!("{p}.exp_probs_b.bias"), random(&mut rng, &[n], 0.3), GgmlDType::F32);
            }
            // Router logits a few units apart, so that picks are clear.
            put(format!("{p}.ffn_gate_inp.weight"), random(&mut rng, &[n, e], 0.5), GgmlDType::F32);
            let (gate, up) = (random(&mut rng, &[n, ff, e], 0.2), random(&mut rng, &[n, ff, e], 0.2));
            if spec.fused_gate_up {
                let both = Tensor::cat(&[&gate, &up], 1).unwrap();
                put(format!("{p}.ffn_gate_up_exps.weight"), both, spec.experts_dtype);
            } else {
                put(format!("{p}.ffn_gate_exps.weight"), gate, spec.experts_dtype);
                put(format!("{p}.ffn_up_exps.weight"), up, spec.experts_dtype);
            }
            put(format!("{p}.ffn_down_exps.weight"), random(&mut rng, &[n, e, ff], 0.2), spec.experts_dtype);
            if gpt_oss {
                put(format!("{p}.ffn_gate_inp.bias"), random(&mut rng, &[n], 0.5), GgmlDType::F32);
                put(format!("{p}.ffn_gate_exps.bias"), random(&mut rng, &[n, ff], 0.3), GgmlDType::F32);
                put(format!("{p}.ffn_up_exps.bias"), random(&mut rng, &[n, ff], 0.3), GgmlDType::F32);
                put(format!("{p}.ffn_down_exps.bias"), random(&mut rng, &[n, e], 0.3), GgmlDType::F32);
            }
        } else if spec.family == Family::Phi3 {
            // Gate and up in one, gate first.
            put(format!("{p}.ffn_up.weight"), random(&mut rng, &[2 * spec.ffn, e], 0.2), spec.dtype);
            put(format!("{p}.ffn_down.weight"), random(&mut rng, &[e, spec.ffn], 0.2), spec.dtype);
        } else {
            put(format!("{p}.ffn_gate.weight"), random(&mut rng, &[spec.ffn, e], 0.2), spec.dtype);
            put(format!("{p}.ffn_up.weight"), random(&mut rng, &[spec.ffn, e], 0.2), spec.dtype);
            put(format!("{p}.ffn_down.weight"), random(&mut rng, &[e, spec.ffn], 0.2), spec.dtype);
        }
        if matches!(spec.family, Family::Qwen2 | Family::GptOss | Family::Glm4Moe) {
            put(format!("{p}.attn_q.bias"), random(&mut rng, &[qd], 0.1), GgmlDType::F32);
            put(format!("{p}.attn_k.bias"), random(&mut rng, &[kvd], 0.1), GgmlDType::F32);
            put(format!("{p}.attn_v.bias"), random(&mut rng, &[kvd], 0.1), GgmlDType::F32);
        }
        if matches!(
            spec.family,
            Family::Qwen3 | Family::Qwen3Moe | Family::Qwen3Vl | Family::Qwen3VlMoe | Family::Gemma3
        ) || (spec.family.is_hybrid() && !recurrent)
            || (spec.family == Family::Lfm2 && i % 2 == 1)
            || (spec.family == Family::Glm4Moe && spec.qk_norm)
        {
            put(format!("{p}.attn_q_norm.weight"), ones_ish(&mut rng, spec.head_dim), GgmlDType::F32);
            put(format!("{p}.attn_k_norm.weight"), ones_ish(&mut rng, spec.head_dim), GgmlDType::F32);
        }
        if matches!(spec.family, Family::Gemma2 | Family::Gemma3) {
            put(format!("{p}.post_attention_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
            put(format!("{p}.post_ffw_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        }
    }

    let k = |s: &str| format!("{arch}.{s}");
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (k("block_count"), Value::U32(spec.n_layers as u32)),
        (k("embedding_length"), Value::U32(e as u32)),
        // Granite MoE's experts are `feed_forward_length` wide.
        (
            k("feed_forward_length"),
            Value::U32(if spec.family == Family::GraniteMoe { spec.experts.2 } else { spec.ffn } as u32),
        ),
        (k("attention.head_count"), Value::U32(spec.n_heads as u32)),
        (k("attention.head_count_kv"), Value::U32(spec.n_kv_heads as u32)),
        (k("attention.key_length"), Value::U32(spec.head_dim as u32)),
        (k("attention.value_length"), Value::U32(spec.head_dim as u32)),
        (
            k("rope.dimension_count"),
            Value::U32(if spec.family.is_hybrid() || matches!(spec.family, Family::Phi3 | Family::Glm4Moe) {
                spec.rope_dims
            } else {
                spec.head_dim
            } as u32),
        ),
        (k("context_length"), Value::U32(spec.context as u32)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("rope.freq_base"), Value::F32(if spec.family == Family::GptOss { 150_000.0 } else { 10_000.0 })),
    ];
    if let Some((factor, original)) = spec.yarn {
        md.push((k("rope.scaling.type"), Value::String("yarn".into())));
        md.push((k("rope.scaling.factor"), Value::F32(factor)));
        md.push((k("rope.scaling.original_context_length"), Value::U32(original)));
    }
    if spec.family == Family::GptOss {
        md.push((k("attention.sliding_window"), Value::U32(spec.sliding_window as u32)));
    }
    if let Some(n) = spec.original_context {
        md.push((k("rope.scaling.original_context_length"), Value::U32(n)));
    }
    if spec.family == Family::Phi3 {
        // sqrt(1 + ln(scale) / ln(original)), as the converter writes it.
        md.push((k("rope.scaling.attn_factor"), Value::F32(1.19)));
    }
    if spec.family == Family::Mistral3 {
        // Ministral 3's (its betas are llama.cpp's defaults: these are not).
        md.push((k("rope.scaling.yarn_beta_fast"), Value::F32(16.0)));
        md.push((k("rope.scaling.yarn_beta_slow"), Value::F32(2.0)));
        md.push((k("rope.scaling.yarn_log_multiplier"), Value::F32(1.0)));
        md.push((k("attention.temperature_scale"), Value::F32(0.1)));
    }
    if spec.family.is_hybrid() {
        // Pairs shared out as Qwen 3.5's [11, 11, 10, 0] shares 32.
        let pairs = spec.rope_dims / 2;
        let third = pairs / 3;
        let sections = [pairs - 2 * third, third, third, 0];
        md.push((k("rope.dimension_sections"), Value::Array(sections.iter().map(|&s| Value::I32(s as i32)).collect())));
        md.push((k("ssm.conv_kernel"), Value::U32(4)));
        md.push((k("ssm.state_size"), Value::U32(sd as u32)));
        md.push((k("ssm.group_count"), Value::U32(hk as u32)));
        md.push((k("ssm.time_step_rank"), Value::U32(hv as u32)));
        md.push((k("ssm.inner_size"), Value::U32((hv * sd) as u32)));
        md.push((k("full_attention_interval"), Value::U32(interval as u32)));
    }
    if matches!(spec.family, Family::Qwen3Vl | Family::Qwen3VlMoe) {
        // Qwen3-VL's [24, 20, 20, 0] of 64 pairs, at this head size.
        let pairs = spec.head_dim / 2;
        let sections = [pairs - 2 * (pairs * 5 / 16), pairs * 5 / 16, pairs * 5 / 16, 0];
        md.push((k("rope.dimension_sections"), Value::Array(sections.iter().map(|&s| Value::I32(s as i32)).collect())));
        md.push((k("n_deepstack_layers"), Value::U32(0)));
    }
    if matches!(spec.family, Family::Qwen35Moe | Family::GraniteMoe) {
        md.push((k("expert_shared_feed_forward_length"), Value::U32(spec.ffn as u32)));
    }
    if spec.family == Family::Lfm2 {
        // No KV heads marks a convolution layer.
        let kv: Vec<Value> =
            (0..spec.n_layers).map(|i| Value::U32(if i % 2 == 0 { 0 } else { spec.n_kv_heads as u32 })).collect();
        md.retain(|(k2, _)| *k2 != k("attention.head_count_kv"));
        md.push((k("attention.head_count_kv"), Value::Array(kv)));
        md.push((k("shortconv.l_cache"), Value::U32(3)));
    }
    if spec.family == Family::Deepseek2 {
        // One KV head: the latent beside the rotated key (`key_length`),
        // the latent alone as the value.
        for (key, v) in [
            ("attention.head_count_kv", MLA_KV_HEADS),
            ("attention.key_length", MLA_RANK + MLA_ROPE),
            ("attention.value_length", MLA_RANK),
            ("attention.key_length_mla", MLA_NOPE + MLA_ROPE),
            ("attention.value_length_mla", MLA_V),
            ("rope.dimension_count", MLA_ROPE),
            ("attention.q_lora_rank", MLA_Q_RANK),
            ("attention.kv_lora_rank", MLA_RANK),
        ] {
            md.retain(|(k2, _)| *k2 != k(key));
            md.push((k(key), Value::U32(v as u32)));
        }
    }
    if matches!(spec.family, Family::Glm4Moe | Family::Deepseek2) {
        md.push((k("expert_shared_count"), Value::U32(1)));
        md.push((k("leading_dense_block_count"), Value::U32(1)));
        md.push((k("expert_weights_norm"), Value::Bool(true)));
        md.push((k("expert_weights_scale"), Value::F32(1.5)));
        md.push((k("expert_gating_func"), Value::U32(2)));
    }
    if matches!(spec.family, Family::Granite | Family::GraniteMoe) {
        // Granite 3.3 2B's.
        md.push((k("embedding_scale"), Value::F32(12.0)));
        md.push((k("residual_scale"), Value::F32(0.22)));
        md.push((k("attention.scale"), Value::F32(0.015625)));
        md.push((k("logit_scale"), Value::F32(8.0)));
    }
    if spec.family.has_experts() {
        md.push((k("expert_count"), Value::U32(spec.experts.0 as u32)));
        md.push((k("expert_used_count"), Value::U32(spec.experts.1 as u32)));
        md.push((k("expert_feed_forward_length"), Value::U32(spec.experts.2 as u32)));
    }
    if spec.olmo3_window {
        md.push((k("attention.sliding_window"), Value::U32(spec.sliding_window as u32)));
    }
    if spec.family == Family::Gemma2 {
        // Caps that bite at these scores' sizes (the real ones are 50 and 30).
        md.push((k("attention.sliding_window"), Value::U32(spec.sliding_window as u32)));
        md.push((k("attn_logit_softcapping"), Value::F32(2.0)));
        md.push((k("final_logit_softcapping"), Value::F32(3.0)));
    }
    if spec.family == Family::Gemma3 {
        md.push((k("attention.sliding_window"), Value::U32(spec.sliding_window as u32)));
        md.push((k("attention.sliding_window_pattern"), Value::U32(spec.sliding_pattern as u32)));
        md.push((k("rope.freq_base_swa"), Value::F32(10000.0)));
    }
    for (key, value) in &spec.metadata {
        md.retain(|(k2, _)| *k2 != k(key));
        md.push((k(key), value.clone()));
    }
    md.extend(if spec.o200k { o200k::tokenizer_metadata() } else { tokenizer_metadata(spec.family) });
    set_template(&mut md, spec);
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
}

/// A random-weight Gemma 4 file of `spec` (see `TinySpec::gemma4`).
pub fn write_gemma4(path: &Path, spec: &TinySpec) {
    let g = &spec.gemma4;
    let mut rng = Lcg(spec.seed);
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let q = |t: &Tensor, dtype: GgmlDType| QTensor::quantize(t, dtype).unwrap();
    let mut put = |name: String, t: Tensor, dtype: GgmlDType| tensors.push((name, q(&t, dtype)));
    let (e, n) = (spec.n_embd, spec.n_layers);
    let ones_ish = |rng: &mut Lcg, n: usize| (random(rng, &[n], 0.1) + 1.0).unwrap();
    let vocabulary = if g.real_vocab {
        let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/templates/gemma-4.jinja");
        gemma4_vocab::tokenizer_metadata(&gemma3_model(), &std::fs::read_to_string(template).unwrap())
    } else {
        tokenizer_metadata(Family::Gemma3)
    };
    let vocab = match vocabulary.iter().find(|(k, _)| k == "tokenizer.ggml.tokens") {
        Some((_, Value::Array(t))) => t.len(),
        _ => unreachable!("a vocabulary has tokens"),
    };
    // Tied output. Scaled by √n_embd, rows of unit size would drown every
    // layer's (post-normed) output, and the model would copy its input;
    // at 0.3 the layers count and logits still spread a few units.
    put("token_embd.weight".into(), random(&mut rng, &[vocab, e], 0.3), spec.dtype);
    put("output_norm.weight".into(), ones_ish(&mut rng, e), GgmlDType::F32);
    let mut factors = vec![1f32; spec.head_dim / 2];
    factors[g.rotated_pairs_full..].iter_mut().for_each(|f| *f = 1e30);
    put("rope_freqs.weight".into(), Tensor::new(factors, &Device::Cpu).unwrap(), GgmlDType::F32);
    if g.per_layer > 0 {
        put("per_layer_token_embd.weight".into(), random(&mut rng, &[vocab, n * g.per_layer], 1.0), spec.dtype);
        put("per_layer_model_proj.weight".into(), random(&mut rng, &[n * g.per_layer, e], 0.2), spec.dtype);
        put("per_layer_proj_norm.weight".into(), ones_ish(&mut rng, g.per_layer), GgmlDType::F32);
    }
    let n_kv = n - g.shared_kv_layers;
    for i in 0..n {
        let p = format!("blk.{i}");
        let swa = g.sliding[i];
        let (hd, kvh) = if swa { (g.head_dim_swa, g.kv_heads_swa) } else { (spec.head_dim, spec.n_kv_heads) };
        let (qd, kvd) = (spec.n_heads * hd, kvh * hd);
        put(format!("{p}.attn_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        put(format!("{p}.attn_q.weight"), random(&mut rng, &[qd, e], 0.2), spec.dtype);
        put(format!("{p}.attn_q_norm.weight"), ones_ish(&mut rng, hd), GgmlDType::F32);
        if i < n_kv {
            put(format!("{p}.attn_k.weight"), random(&mut rng, &[kvd, e], 0.2), spec.dtype);
            if !g.no_v.contains(&i) {
                put(format!("{p}.attn_v.weight"), random(&mut rng, &[kvd, e], 0.2), spec.dtype);
            }
            put(format!("{p}.attn_k_norm.weight"), ones_ish(&mut rng, hd), GgmlDType::F32);
        }
        put(format!("{p}.attn_output.weight"), random(&mut rng, &[e, qd], 0.2), spec.dtype);
        put(format!("{p}.post_attention_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        put(format!("{p}.ffn_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        put(format!("{p}.ffn_gate.weight"), random(&mut rng, &[spec.ffn, e], 0.2), spec.dtype);
        put(format!("{p}.ffn_up.weight"), random(&mut rng, &[spec.ffn, e], 0.2), spec.dtype);
        put(format!("{p}.ffn_down.weight"), random(&mut rng, &[e, spec.ffn], 0.2), spec.dtype);
        put(format!("{p}.post_ffw_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        let (experts, _, ff) = spec.experts;
        if experts > 0 {
            put(format!("{p}.ffn_gate_inp.weight"), random(&mut rng, &[experts, e], 0.5), GgmlDType::F32);
            put(format!("{p}.ffn_gate_inp.scale"), ones_ish(&mut rng, e), GgmlDType::F32);
            let (gate, up) = (random(&mut rng, &[experts, ff, e], 0.2), random(&mut rng, &[experts, ff, e], 0.2));
            put(format!("{p}.ffn_gate_exps.weight"), gate, spec.experts_dtype);
            put(format!("{p}.ffn_up_exps.weight"), up, spec.experts_dtype);
            put(format!("{p}.ffn_down_exps.weight"), random(&mut rng, &[experts, e, ff], 0.2), spec.experts_dtype);
            put(format!("{p}.ffn_down_exps.scale"), ones_ish(&mut rng, experts), GgmlDType::F32);
            put(format!("{p}.pre_ffw_norm_2.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
            put(format!("{p}.post_ffw_norm_1.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
            put(format!("{p}.post_ffw_norm_2.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        }
        if g.per_layer > 0 {
            put(format!("{p}.inp_gate.weight"), random(&mut rng, &[g.per_layer, e], 0.3), spec.dtype);
            put(format!("{p}.proj.weight"), random(&mut rng, &[e, g.per_layer], 0.3), spec.dtype);
            put(format!("{p}.post_norm.weight"), ones_ish(&mut rng, e), GgmlDType::F32);
        }
        put(format!("{p}.layer_output_scale.weight"), (random(&mut rng, &[1], 0.3) + 1.0).unwrap(), GgmlDType::F32);
    }

    let k = |s: &str| format!("gemma4.{s}");
    let per_layer =
        |f: &dyn Fn(bool) -> usize| Value::Array(g.sliding.iter().map(|&s| Value::I32(f(s) as i32)).collect());
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String("gemma4".into())),
        (k("block_count"), Value::U32(n as u32)),
        (k("embedding_length"), Value::U32(e as u32)),
        // Granite MoE's experts are `feed_forward_length` wide.
        (
            k("feed_forward_length"),
            Value::U32(if spec.family == Family::GraniteMoe { spec.experts.2 } else { spec.ffn } as u32),
        ),
        (k("attention.head_count"), Value::U32(spec.n_heads as u32)),
        (k("attention.head_count_kv"), per_layer(&|s| if s { g.kv_heads_swa } else { spec.n_kv_heads })),
        (k("attention.key_length"), Value::U32(spec.head_dim as u32)),
        (k("attention.value_length"), Value::U32(spec.head_dim as u32)),
        (k("attention.key_length_swa"), Value::U32(g.head_dim_swa as u32)),
        (k("attention.value_length_swa"), Value::U32(g.head_dim_swa as u32)),
        (k("rope.dimension_count"), Value::U32(spec.head_dim as u32)),
        (k("rope.dimension_count_swa"), Value::U32(g.rope_dims_swa as u32)),
        (k("context_length"), Value::U32(spec.context as u32)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("rope.freq_base"), Value::F32(1_000_000.0)),
        (k("rope.freq_base_swa"), Value::F32(10_000.0)),
        (k("attention.sliding_window"), Value::U32(spec.sliding_window as u32)),
        (k("attention.sliding_window_pattern"), Value::Array(g.sliding.iter().map(|&s| Value::Bool(s)).collect())),
        (k("attention.shared_kv_layers"), Value::U32(g.shared_kv_layers as u32)),
        (k("embedding_length_per_layer_input"), Value::U32(g.per_layer as u32)),
        (k("final_logit_softcapping"), Value::F32(g.softcap)),
    ];
    if spec.experts.0 > 0 {
        md.push((k("expert_count"), Value::U32(spec.experts.0 as u32)));
        md.push((k("expert_used_count"), Value::U32(spec.experts.1 as u32)));
        md.push((k("expert_feed_forward_length"), Value::U32(spec.experts.2 as u32)));
    }
    md.extend(vocabulary);
    set_template(&mut md, spec);
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
}

/// `spec.chat_template` in place of the vocabulary's template, and
/// `spec.control_tokens` in place of its last tokens.
fn set_template(md: &mut [(String, Value)], spec: &TinySpec) {
    let n = spec.control_tokens.len();
    if n > 0 {
        for (k, v) in md.iter_mut() {
            match (k.as_str(), v) {
                ("tokenizer.ggml.tokens", Value::Array(tokens)) => {
                    let at = tokens.len() - n;
                    for (t, name) in tokens[at..].iter_mut().zip(&spec.control_tokens) {
                        *t = Value::String(name.to_string());
                    }
                }
                ("tokenizer.ggml.token_type", Value::Array(types)) => {
                    let at = types.len() - n;
                    types[at..].iter_mut().for_each(|t| *t = Value::I32(3));
                }
                _ => {}
            }
        }
    }
    if let Some(t) = &spec.chat_template {
        for (k, v) in md.iter_mut() {
            if k == "tokenizer.chat_template" {
                *v = Value::String(t.clone());
            }
        }
    }
}

fn strings(v: Vec<String>) -> Value {
    Value::Array(v.into_iter().map(Value::String).collect())
}

fn tokenizer_metadata(family: Family) -> Vec<(String, Value)> {
    let s = |k: &str, v: &str| (k.to_string(), Value::String(v.to_string()));
    let u = |k: &str, v: u32| (k.to_string(), Value::U32(v));
    if matches!(family, Family::Gemma2 | Family::Gemma3) {
        let mut tokens: Vec<String> =
            ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"].map(String::from).to_vec();
        let mut types = vec![3, 3, 3, 2, 3, 3];
        for b in 0..256 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        for w in ["▁", "▁the", "▁a", "he", "llo", "▁hello", "user", "model", "\n"] {
            tokens.push(w.to_string());
            types.push(1);
        }
        while tokens.len() < VOCAB {
            tokens.push(format!("▁w{}", tokens.len()));
            types.push(1);
        }
        let scores: Vec<Value> = (0..VOCAB).map(|i| Value::F32(-(i as f32))).collect();
        vec![
            s("tokenizer.ggml.model", "llama"),
            ("tokenizer.ggml.tokens".into(), strings(tokens)),
            ("tokenizer.ggml.token_type".into(), Value::Array(types.into_iter().map(Value::I32).collect())),
            ("tokenizer.ggml.scores".into(), Value::Array(scores)),
            u("tokenizer.ggml.bos_token_id", 2),
            u("tokenizer.ggml.eos_token_id", 1),
            u("tokenizer.ggml.unknown_token_id", 3),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
            ("tokenizer.ggml.add_space_prefix".into(), Value::Bool(false)),
            s("tokenizer.chat_template", "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"),
        ]
    } else {
        let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from).to_vec();
        let mut types = vec![3, 3, 3];
        for c in hearth_engine::tokenizer::byte_level_alphabet() {
            tokens.push(c.to_string());
            types.push(1);
        }
        let merges = vec!["Ġ t", "h e", "Ġt he", "l l", "he ll", "hell o"];
        for m in &merges {
            tokens.push(m.replace(' ', ""));
            types.push(1);
        }
        while tokens.len() < VOCAB {
            tokens.push(format!("<filler{}>", tokens.len()));
            types.push(4);
        }
        let pre = match family {
            Family::Llama | Family::SmolLm3 => "smollm",
            Family::Mistral3 => "tekken",
            Family::Phi3 => "gpt-4o",
            Family::Granite | Family::GraniteMoe => "refact",
            Family::Glm4Moe | Family::Deepseek2 => "glm4",
            Family::Lfm2 => "lfm2",
            Family::Qwen35 | Family::Qwen35Moe => "qwen35",
            Family::GptOss => "gpt-4o",
            _ => "qwen2",
        };
        vec![
            s("tokenizer.ggml.model", "gpt2"),
            s("tokenizer.ggml.pre", pre),
            ("tokenizer.ggml.tokens".into(), strings(tokens)),
            ("tokenizer.ggml.token_type".into(), Value::Array(types.into_iter().map(Value::I32).collect())),
            ("tokenizer.ggml.merges".into(), strings(merges.into_iter().map(String::from).collect())),
            u("tokenizer.ggml.bos_token_id", 1),
            u("tokenizer.ggml.eos_token_id", 2),
            u("tokenizer.ggml.unknown_token_id", 0),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
            s("tokenizer.chat_template", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
        ]
    }
}

/// Writes a tiny model into a fresh temp dir and returns both (keep the dir alive).
pub fn tiny(spec: &TinySpec) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("tiny-{:?}.gguf", spec.family).to_lowercase());
    write_tiny(&path, spec);
    (dir, path)
}

/// The largest difference as a fraction of `b`'s largest magnitude.
pub fn relative_diff(a: &[f32], b: &[f32]) -> f32 {
    max_abs_diff(a, b) / b.iter().fold(f32::MIN_POSITIVE, |m, v| m.max(v.abs()))
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The default model's greedy reply to "What is 2 + 2?" as llama.cpp's
/// build for this CPU gives it, which the kernels follow: the AVX-512 one
/// where they run AVX-512, else the AVX2 one (`golden.rs` holds the ids).
pub fn two_plus_two() -> &'static str {
    match hearth_engine::cpu::isa::isa() {
        hearth_engine::cpu::isa::Isa::Avx512Vnni => "The answer is 4.",
        _ => "The answer to this classic math problem is 4.",
    }
}

/// Advances `turn` to its end; the tokens it wrote (padding left out).
pub fn run_to_end(engine: &Engine, turn: &mut hearth_engine::Turn) -> Vec<u32> {
    let mut tokens = Vec::new();
    loop {
        match turn.advance(engine.model(), engine.tokenizer()).unwrap() {
            hearth_engine::Advance::Prefill(_) => {}
            hearth_engine::Advance::Tokens(events) => tokens.extend(events.iter().map(|e| e.token)),
            hearth_engine::Advance::Done => return tokens,
        }
    }
}

/// A small gpt-oss file with MXFP4 experts, written by Hearth's own GGUF
/// writer (`hearth-cli write-random-model --gpt-oss`) with the default
/// model's vocabulary.
pub fn written_gpt_oss() -> (tempfile::TempDir, PathBuf) {
    use hearth_engine::random_model::{write, Experts, Shape};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpt-oss.gguf");
    let shape = Shape {
        layers: 2,
        embd: 128,
        ffn: 128,
        heads: 4,
        kv_heads: 2,
        head_dim: Some(64),
        experts: Some(Experts { count: 8, used: 4, ffn: 64, dtype: "mxfp4".into() }),
        recurrent: None,
        gpt_oss: true,
        gemma4: None,
    };
    write(&path, &default_model(), &shape, "q8_0").unwrap();
    (dir, path)
}
