//! The families llama.cpp is the only reference for (experts, the f32
//! products their routers run, Qwen 3.5's hybrids) against llama.cpp
//! itself, on random-weight files written here: the logits at every
//! position of a sequence longer than a prefill chunk, teacher-forced in
//! both engines.
//!
//! llama.cpp runs through llama-cpp-python (`tests/llamacpp/logits.py`) from
//! the venv `bench/setup-llamacpp.sh` makes; `HEARTH_LLAMACPP_PYTHON` names
//! another one. Without it the tests say so and pass, unless
//! `HEARTH_REQUIRE_LLAMACPP` is set (`./hearth test` sets it).
//!
//! That venv's llama.cpp is its AVX2 build, so these tests run Hearth's AVX2
//! kernels unless `HEARTH_ISA` says otherwise: on the same kernels the two
//! engines should agree to the last bits.

mod common;

use std::path::Path;

use candle_core::quantized::GgmlDType;
use common::{tiny, Family, TinySpec};
use hearth_engine::Engine;

#[ctor::ctor(unsafe)]
fn avx2_unless_told() {
    if std::env::var_os("HEARTH_ISA").is_none() {
        hearth_engine::cpu::isa::cap_isa(hearth_engine::cpu::isa::Isa::Avx2);
    }
}

/// llama.cpp's logits `[ids.len()][vocab]` for `ids` on `model`, read as a
/// prompt or (`steps`) one token per pass, and whether its build runs AVX-512.
fn llamacpp_logits(python: &Path, model: &Path, ids: &[u32], steps: bool) -> (Vec<Vec<f32>>, bool) {
    let dir = model.parent().unwrap();
    let (ids_path, out) = (dir.join("ids.json"), dir.join("logits.f32"));
    std::fs::write(&ids_path, serde_json::to_string(ids).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/llamacpp/logits.py");
    let mut command = std::process::Command::new(python);
    command.arg(script).arg(model).arg(&ids_path).arg(&out);
    if steps {
        command.arg("--steps");
    }
    let run = command.output().unwrap();
    assert!(run.status.success(), "llama.cpp failed on {}: {}", model.display(), String::from_utf8_lossy(&run.stderr));
    let info: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let vocab = info["vocab"].as_u64().unwrap() as usize;
    let bytes = std::fs::read(&out).unwrap();
    let all: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(all.len(), ids.len() * vocab);
    (all.chunks_exact(vocab).map(<[f32]>::to_vec).collect(), info["avx512"].as_bool().unwrap())
}

fn log_softmax(x: &[f32]) -> Vec<f64> {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = x.iter().map(|&v| (v as f64 - max).exp()).sum();
    x.iter().map(|&v| v as f64 - max - sum.ln()).collect()
}

fn argmax(x: &[f32]) -> usize {
    x.iter().enumerate().fold(0, |best, (i, &v)| if v > x[best] { i } else { best })
}

/// Mean KL(llama.cpp ‖ Hearth) over positions, and the positions whose top token differs.
fn compare(reference: &[Vec<f32>], ours: &[Vec<f32>]) -> (f64, Vec<usize>) {
    let mut kl = 0.0;
    let mut differ = Vec::new();
    for (i, (r, o)) in reference.iter().zip(ours).enumerate() {
        let (lr, lo) = (log_softmax(r), log_softmax(o));
        kl += lr.iter().zip(&lo).map(|(a, b)| a.exp() * (a - b)).sum::<f64>();
        if argmax(r) != argmax(o) {
            differ.push(i);
        }
    }
    (kl / reference.len() as f64, differ)
}

fn ids(n: usize) -> Vec<u32> {
    (0..n).map(|i| (3 + (i * 37 + i * i / 7) % 310) as u32).collect()
}

/// How the sequence goes through both engines.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Feed {
    /// As a prompt, in chunks of 512.
    Prompt,
    /// One token per pass, as decode steps.
    Steps,
}

fn check(spec: &TinySpec, positions: usize, feed: Feed) {
    let (_dir, path) = tiny(spec);
    let label = format!(
        "{:?} ({feed:?}), {:?}, experts {:?} of {:?}",
        spec.family, spec.dtype, spec.experts, spec.experts_dtype
    );
    check_file(&label, &path, positions, feed);
}

/// `check` on the model file at `path`.
fn check_file(label: &str, path: &Path, positions: usize, feed: Feed) {
    let Some(python) = common::llamacpp_python() else { return };
    let path = path.to_path_buf();
    let ids = ids(positions);
    let (reference, reference_avx512) = llamacpp_logits(&python, &path, &ids, feed == Feed::Steps);
    let engine = Engine::open(&path).unwrap();
    let model = engine.model();
    let mut cache = model.new_cache(positions + 16);
    let ours: Vec<Vec<f32>> = match feed {
        Feed::Prompt => {
            let flat = model.logits_at_every_position(&ids, &mut cache).unwrap();
            flat.chunks_exact(model.vocab_size()).map(<[f32]>::to_vec).collect()
        }
        Feed::Steps => ids
            .iter()
            .map(|&t| model.forward(&[vec![t]], &mut cache).unwrap().to_vec2::<f32>().unwrap().remove(0))
            .collect(),
    };
    let (kl, differ) = compare(&reference, &ours);
    if std::env::var_os("HEARTH_DEBUG_DIFF").is_some() {
        let diffs: Vec<(usize, f32)> = reference
            .iter()
            .zip(&ours)
            .enumerate()
            .map(|(i, (r, o))| (i, r.iter().zip(o).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max)))
            .filter(|(_, d)| *d > 0.0)
            .take(8)
            .collect();
        eprintln!("first differing positions: {diffs:?}");
    }
    eprintln!("{label}: mean KL {kl:.3e}, top token differs at {} of {positions}", differ.len());
    use hearth_engine::cpu::isa::{isa, Isa};
    if (isa() == Isa::Avx512Vnni) == reference_avx512 {
        // The same kernels in the same orders: the same bits.
        assert!(differ.is_empty(), "{label}: the top token differs from llama.cpp's at {differ:?}");
        assert!(kl < 1e-9, "{label}: mean KL {kl:.3e} to llama.cpp");
    } else {
        // Another ISA's orders: no further than llama.cpp's AVX2 build is
        // from its AVX-512 one (3.9e-3 on the default model, NOTES.md).
        assert!(kl < 4e-3, "{label}: mean KL {kl:.3e} to llama.cpp's other-ISA build");
    }
}

/// gpt-oss ships its experts in MXFP4: here a Qwen3-MoE file's experts
/// (rows in eights: repacked by both engines) and, in a Llama file, every
/// projection, as random MXFP4 blocks.
#[test]
fn mxfp4_weights_match_llama_cpp() {
    let cases = [
        ("qwen3moe, MXFP4 experts", moe(GgmlDType::Q8_0, 64, 64), "_exps."),
        ("llama, MXFP4 projections", TinySpec { context: 2048, ..TinySpec::new(Family::Llama) }, ".attn_|.ffn_"),
    ];
    for (label, spec, names) in cases {
        for (positions, feed) in [(600, Feed::Prompt), (80, Feed::Steps)] {
            let (_dir, path) = tiny(&spec);
            let pick =
                |n: &str| n.starts_with("blk.") && !n.contains("norm") && names.split('|').any(|p| n.contains(p));
            let turned = common::retype::tensors_to_mxfp4(&path, pick, 7);
            // Every layer's: three experts tensors, or seven projections.
            assert!(turned >= 3 * spec.n_layers, "{label}: {turned} tensors in MXFP4");
            check_file(&format!("{label} ({feed:?})"), &path, positions, feed);
        }
    }
}

fn moe(experts_dtype: GgmlDType, n_embd: usize, expert_ffn: usize) -> TinySpec {
    TinySpec { n_embd, context: 2048, experts: (16, 4, expert_ffn), experts_dtype, ..TinySpec::new(Family::Qwen3Moe) }
}

#[test]
fn qwen3moe_with_q8_0_experts_matches_llama_cpp() {
    check(&moe(GgmlDType::Q8_0, 64, 64), 600, Feed::Prompt);
    check(&moe(GgmlDType::Q8_0, 64, 64), 80, Feed::Steps);
}

#[test]
fn qwen3moe_with_q4_0_experts_matches_llama_cpp() {
    check(&moe(GgmlDType::Q4_0, 64, 64), 600, Feed::Prompt);
    check(&moe(GgmlDType::Q4_0, 64, 64), 80, Feed::Steps);
}

#[test]
fn qwen3moe_with_k_quant_experts_matches_llama_cpp() {
    // Q4_K is repacked by llama.cpp (and by Hearth); Q6_K is not.
    for dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
        check(&moe(dtype, 256, 256), 600, Feed::Prompt);
        check(&moe(dtype, 256, 256), 80, Feed::Steps);
    }
}

/// SmolLM3: its fourth and eighth layers attend without RoPE.
#[test]
fn smollm3_matches_llama_cpp() {
    let spec = TinySpec { n_layers: 8, context: 2048, ..TinySpec::new(Family::SmolLm3) };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
}

/// Mistral 3: YaRN with the file's betas and log multiplier, queries
/// sharpened every 32 positions (the attention temperature), an attention
/// output bias, Tekken's pre-tokenizer.
#[test]
fn mistral3_matches_llama_cpp() {
    let spec = TinySpec { n_layers: 3, context: 2048, ..TinySpec::new(Family::Mistral3) };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 70, Feed::Steps);
}

/// Phi-3: fused projections, 12 of 16 dimensions rotated, queries scaled
/// before attention, LongRoPE's magnitude, and its long factors for a
/// session past the original context, its short ones within it.
#[test]
fn phi3_matches_llama_cpp_with_long_and_short_factors() {
    let spec = TinySpec { n_layers: 3, rope_dims: 12, context: 8192, ..TinySpec::new(Family::Phi3) };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
    let short = TinySpec { original_context: Some(4096), ..spec };
    check(&short, 100, Feed::Prompt);
}

/// Gemma 2: soft-capped attention scores (before the window's mask) and
/// logits, every other layer sliding over 8 positions, post-norms, GELU.
#[test]
fn gemma2_matches_llama_cpp() {
    let spec = TinySpec { n_layers: 4, context: 2048, ..TinySpec::new(Family::Gemma2) };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
}

/// OLMo 2: no pre-norms, post-norms after attention and the FFN, Q and K
/// normed across all heads; and as OLMo 3, three of four layers sliding.
#[test]
fn olmo2_and_olmo3_match_llama_cpp() {
    let spec = TinySpec { n_layers: 4, context: 2048, ..TinySpec::new(Family::Olmo2) };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
    let olmo3 = TinySpec { olmo3_window: true, ..spec };
    check(&olmo3, 100, Feed::Prompt);
    check(&olmo3, 40, Feed::Steps);
}

/// Granite 3: embeddings, each half's residual, attention and logits
/// scaled; Granite MoE Shared: experts beside an ungated shared expert.
#[test]
fn granite_and_granitemoe_match_llama_cpp() {
    let spec = TinySpec { n_layers: 3, context: 2048, ..TinySpec::new(Family::Granite) };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
    let moe = TinySpec { n_layers: 2, context: 2048, ..TinySpec::new(Family::GraniteMoe) };
    check(&moe, 100, Feed::Prompt);
    check(&moe, 40, Feed::Steps);
}

/// Qwen3-VL's text model, dense and with experts: multi-section RoPE over
/// text positions, which llama.cpp runs as its IMROPE.
#[test]
fn qwen3vl_text_matches_llama_cpp() {
    let spec = TinySpec { n_layers: 2, context: 2048, ..TinySpec::new(Family::Qwen3Vl) };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
    let moe = TinySpec { n_layers: 2, context: 2048, ..TinySpec::new(Family::Qwen3VlMoe) };
    check(&moe, 100, Feed::Prompt);
}

/// GLM-4.5: a dense first layer, then sigmoid-routed experts picked with
/// a selection bias, weights normalised and scaled, beside a shared
/// expert; biased QKV and half the head rotated.
#[test]
fn glm4moe_matches_llama_cpp() {
    let spec = TinySpec { n_layers: 3, rope_dims: 8, context: 2048, ..TinySpec::new(Family::Glm4Moe) };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
}

/// DeepSeek V2's layout (GLM-4.7-Flash): latent attention with queries
/// through a low rank, one cached latent and rotated key per position, a
/// dense first layer, then sigmoid-routed experts beside a shared one.
/// The values are read from the cached keys (`values_in_keys`), in every
/// attention path: prompt rows and decode steps past the long-history
/// threshold.
#[test]
fn deepseek2_latent_attention_matches_llama_cpp() {
    let spec = TinySpec { n_layers: 3, context: 2048, ..TinySpec::new(Family::Deepseek2) };
    check(&spec, 600, Feed::Prompt);
    check(&spec, 560, Feed::Steps);
}

/// LFM2: short gated convolutions (their state carried from pass to
/// pass) between QK-normed attention layers.
#[test]
fn lfm2_matches_llama_cpp() {
    let spec = TinySpec { n_layers: 4, context: 2048, ..TinySpec::new(Family::Lfm2) };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
}

/// The CLI's files of the other families (`random_model::write_family`,
/// which the benchmarks use) open in both engines and agree: their
/// layouts and metadata are the families' own.
#[test]
fn written_random_files_of_each_other_family_match_llama_cpp() {
    use hearth_engine::random_model::{write_family, Experts, Shape, FAMILIES};
    let dir = tempfile::tempdir().unwrap();
    for family in FAMILIES {
        let moe = matches!(*family, "granitemoe" | "glm4moe" | "deepseek2");
        let shape = Shape {
            layers: 3,
            embd: 256,
            ffn: 512,
            heads: 4,
            kv_heads: 2,
            head_dim: Some(64),
            experts: moe.then(|| Experts { count: 8, used: 2, ffn: 256, dtype: "q8_0".into() }),
            recurrent: None,
            gpt_oss: false,
            gemma4: None,
        };
        let path = dir.path().join(format!("{family}.gguf"));
        write_family(&path, &common::default_model(), family, &shape, "q8_0").unwrap();
        check_file(family, &path, 40, Feed::Prompt);
    }
}

#[test]
fn f32_weights_match_llama_cpp_as_a_prompt_and_as_steps() {
    // A router's f32 products: tinyBLAS for a prompt, a dot product each
    // for a step, each in its build's width.
    let spec =
        TinySpec { n_embd: 256, head_dim: 64, dtype: GgmlDType::F32, context: 2048, ..TinySpec::new(Family::Qwen3) };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
}

fn hybrid(family: Family, dtype: GgmlDType, experts_dtype: GgmlDType) -> TinySpec {
    TinySpec {
        n_layers: 8,
        head_dim: 64,
        rope_dims: 16,
        context: 2048,
        dtype,
        experts: (16, 4, 64),
        experts_dtype,
        ffn: 64,
        recurrent: (64, 2, 4, 4),
        ..TinySpec::new(family)
    }
}

#[test]
fn qwen35_matches_llama_cpp() {
    for dtype in [GgmlDType::Q8_0, GgmlDType::F32] {
        let spec = hybrid(Family::Qwen35, dtype, dtype);
        check(&spec, 600, Feed::Prompt);
        check(&spec, 80, Feed::Steps);
    }
}

#[test]
fn qwen35moe_matches_llama_cpp() {
    for experts_dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0] {
        let spec = hybrid(Family::Qwen35Moe, GgmlDType::Q8_0, experts_dtype);
        check(&spec, 600, Feed::Prompt);
        check(&spec, 80, Feed::Steps);
    }
}

#[test]
fn qwen35moe_with_k_quant_experts_matches_llama_cpp() {
    // Q4_K experts (repacked by both engines), Q6_K ones, the rest Q8_0:
    // rows 256 wide for the K-quants' blocks.
    for experts_dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
        let spec = TinySpec {
            n_embd: 256,
            ffn: 256,
            experts: (16, 4, 256),
            ..hybrid(Family::Qwen35Moe, GgmlDType::Q8_0, experts_dtype)
        };
        check(&spec, 600, Feed::Prompt);
        check(&spec, 80, Feed::Steps);
    }
}

/// gpt-oss's shape in small: heads of 64 (its own), more query heads than
/// the embedding is wide, a 128-position window on even layers (so a
/// 600-token prompt slides), YaRN as gpt-oss sets it, sinks and biases.
fn gpt_oss(experts_dtype: GgmlDType) -> TinySpec {
    TinySpec {
        n_layers: 4,
        n_heads: 8,
        n_kv_heads: 2,
        head_dim: 64,
        context: 2048,
        sliding_window: 128,
        experts: (16, 4, 64),
        experts_dtype,
        ..TinySpec::new(Family::GptOss)
    }
}

#[test]
fn gpt_oss_matches_llama_cpp() {
    // Steps past the window too; llama.cpp's window cache holds 256 cells
    // when it reads a token at a time, so stay below that.
    for (positions, feed) in [(600, Feed::Prompt), (200, Feed::Steps)] {
        check(&gpt_oss(GgmlDType::Q8_0), positions, feed);
    }
}

#[test]
fn gpt_oss_with_mxfp4_experts_matches_llama_cpp() {
    let spec = gpt_oss(GgmlDType::Q8_0);
    for (positions, feed) in [(600, Feed::Prompt), (200, Feed::Steps)] {
        let (_dir, path) = tiny(&spec);
        let turned = common::retype::tensors_to_mxfp4(&path, |n| n.contains("_exps.weight"), 11);
        assert_eq!(turned, 3 * spec.n_layers, "every layer's three expert tensors in MXFP4");
        check_file(&format!("gpt-oss, MXFP4 experts ({feed:?})"), &path, positions, feed);
    }
}

/// The file `hearth-cli write-random-model --gpt-oss` writes (MXFP4
/// experts as random blocks, through Hearth's own GGUF writer, with the
/// default model's vocabulary), as llama.cpp reads it.
#[test]
fn a_written_random_gpt_oss_file_matches_llama_cpp() {
    let (_dir, path) = common::written_gpt_oss();
    for (positions, feed) in [(300, Feed::Prompt), (40, Feed::Steps)] {
        check_file(&format!("written gpt-oss ({feed:?})"), &path, positions, feed);
    }
}

/// Gemma 4 like E2B: per-layer embeddings, heads of two sizes, the last two
/// layers reading earlier layers' keys and values, a layer whose keys are
/// its values, proportional RoPE, a window of 8 under a 600-token prompt.
#[test]
fn gemma4_matches_llama_cpp() {
    for (positions, feed) in [(600, Feed::Prompt), (80, Feed::Steps)] {
        check(&TinySpec::gemma4(false), positions, feed);
    }
}

/// Gemma 4 like 26B-A4B: experts beside the dense MLP.
#[test]
fn gemma4_with_experts_matches_llama_cpp() {
    for (positions, feed) in [(600, Feed::Prompt), (80, Feed::Steps)] {
        check(&TinySpec::gemma4(true), positions, feed);
    }
}

/// The files `hearth-cli write-random-model --gemma4` writes (the benchmark
/// and worker tests' Gemma 4), as llama.cpp reads them: E2B's structure
/// with per-layer embeddings and shared KV layers, and one with experts.
#[test]
fn written_random_gemma4_files_match_llama_cpp() {
    use hearth_engine::random_model::{write, Experts, Gemma4, Shape};
    for experts in [None, Some(Experts { count: 8, used: 2, ffn: 64, dtype: "q8_0".into() })] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gemma4.gguf");
        let moe = experts.is_some();
        let shape = Shape {
            layers: 7,
            embd: 128,
            ffn: 256,
            heads: 4,
            kv_heads: 1,
            head_dim: Some(64),
            experts,
            recurrent: None,
            gpt_oss: false,
            gemma4: Some(Gemma4 {
                per_layer: if moe { 0 } else { 32 },
                shared_kv_layers: if moe { 0 } else { 3 },
                head_dim_swa: 32,
                kv_heads_swa: 2,
                window: 16,
            }),
        };
        write(&path, &common::default_model(), &shape, "q8_0").unwrap();
        for (positions, feed) in [(300, Feed::Prompt), (40, Feed::Steps)] {
            check_file(&format!("written gemma4, experts {moe} ({feed:?})"), &path, positions, feed);
        }
    }
}

// What llama.cpp reads differently from what a file says, family by
// family (docs/metadata-keys.md): each case a file whose metadata would
// move the logits if read the other way.

fn f32_value(x: f32) -> candle_core::quantized::gguf_file::Value {
    candle_core::quantized::gguf_file::Value::F32(x)
}

/// DeepSeek V2's layout with YaRN as llama.cpp's converter writes it for
/// every YaRN model: betas that llama.cpp's DeepSeek loader does not read
/// (it keeps 32 and 1), and the log multiplier, which it does; and with
/// Mistral Large 3's attention temperature.
#[test]
fn deepseek2_with_yarn_betas_and_a_temperature_matches_llama_cpp() {
    let spec = TinySpec {
        n_layers: 2,
        context: 2048,
        yarn: Some((4.0, 32)),
        metadata: vec![
            ("rope.scaling.yarn_beta_fast", f32_value(8.0)),
            ("rope.scaling.yarn_beta_slow", f32_value(3.0)),
            ("rope.scaling.yarn_log_multiplier", f32_value(0.1)),
        ],
        ..TinySpec::new(Family::Deepseek2)
    };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
    // Mistral Large 3 in this layout: the attention temperature, every 16 positions here.
    let temperature = TinySpec {
        n_layers: 2,
        context: 2048,
        metadata: vec![
            ("attention.temperature_scale", f32_value(0.1)),
            ("attention.temperature_length", candle_core::quantized::gguf_file::Value::U32(16)),
        ],
        ..TinySpec::new(Family::Deepseek2)
    };
    check(&temperature, 100, Feed::Prompt);
    check(&temperature, 40, Feed::Steps);
}

/// `rope.scaling.finetuned = false`: dense Granite's switch for RoPE,
/// which llama.cpp's Granite MoE loader never reads.
#[test]
fn granite_rope_switch_is_read_as_llama_cpp_reads_it() {
    let off = || vec![("rope.scaling.finetuned", candle_core::quantized::gguf_file::Value::Bool(false))];
    let dense = TinySpec { n_layers: 2, context: 2048, metadata: off(), ..TinySpec::new(Family::Granite) };
    check(&dense, 60, Feed::Prompt);
    let moe = TinySpec { n_layers: 2, context: 2048, metadata: off(), ..TinySpec::new(Family::GraniteMoe) };
    check(&moe, 100, Feed::Prompt);
    check(&moe, 40, Feed::Steps);
}

/// OLMo 3's sliding layers rotate with `rope.freq_base` in llama.cpp's
/// graph, whatever `rope.freq_base_swa` says.
#[test]
fn olmo3_with_a_sliding_rope_base_matches_llama_cpp() {
    let spec = TinySpec {
        n_layers: 4,
        context: 2048,
        olmo3_window: true,
        metadata: vec![("rope.freq_base_swa", f32_value(500.0))],
        ..TinySpec::new(Family::Olmo2)
    };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
}

/// Qwen3-VL sections that add up to fewer pairs than a head rotates: the
/// pairs take the sections in turn, as llama.cpp's IMROPE gives them out.
#[test]
fn qwen3vl_with_short_sections_matches_llama_cpp() {
    let sections = |s: [i32; 4]| {
        use candle_core::quantized::gguf_file::Value;
        Value::Array(s.iter().map(|&x| Value::I32(x)).collect())
    };
    for short in [[2, 1, 1, 0], [1, 1, 1, 1]] {
        let spec = TinySpec {
            n_layers: 2,
            context: 2048,
            metadata: vec![("rope.dimension_sections", sections(short))],
            ..TinySpec::new(Family::Qwen3Vl)
        };
        check(&spec, 100, Feed::Prompt);
        check(&spec, 40, Feed::Steps);
    }
}

/// Qwen 3.5's Gated DeltaNet with states narrower than an AVX2 and an
/// AVX-512 register and one of 32 (as in the file), two key heads
/// over more value heads.
#[test]
fn qwen35_with_narrow_delta_net_states_matches_llama_cpp() {
    for (state, value_heads) in [(4, 8), (8, 4), (32, 4)] {
        let spec = TinySpec {
            recurrent: (state, 2, value_heads, 4),
            ..hybrid(Family::Qwen35, GgmlDType::Q8_0, GgmlDType::Q8_0)
        };
        check(&spec, 300, Feed::Prompt);
        check(&spec, 60, Feed::Steps);
    }
}

/// LFM2 with F32 attention and convolution projections.
#[test]
fn lfm2_with_f32_projections_matches_llama_cpp() {
    let spec = TinySpec {
        n_layers: 4,
        context: 2048,
        retype: Some(|n| (n.contains(".attn_") || n.contains(".shortconv.")).then_some(GgmlDType::F32)),
        ..TinySpec::new(Family::Lfm2)
    };
    check(&spec, 100, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
}

/// GLM-4.5 with Q and K normed per head (the 355B's `use_qk_norm`).
#[test]
fn glm4moe_with_qk_norms_matches_llama_cpp() {
    let spec = TinySpec { n_layers: 3, rope_dims: 8, context: 2048, qk_norm: true, ..TinySpec::new(Family::Glm4Moe) };
    check(&spec, 512, Feed::Prompt);
    check(&spec, 40, Feed::Steps);
}

/// F16 weight matrices: every matrix F16, and F16 beside Q8_0 (as
/// quantizers leave some tensors), on a dense file and on one of
/// sigmoid-routed experts.
#[test]
fn f16_matrices_match_llama_cpp() {
    let mixed: fn(&str) -> Option<GgmlDType> =
        |n| ((n.contains(".attn_") && !n.contains("norm")) || n == "output.weight").then_some(GgmlDType::F16);
    let dense = || TinySpec { n_layers: 8, n_embd: 128, head_dim: 32, context: 2048, ..TinySpec::new(Family::SmolLm3) };
    check(&TinySpec { dtype: GgmlDType::F16, ..dense() }, 100, Feed::Prompt);
    check(&TinySpec { dtype: GgmlDType::F16, ..dense() }, 40, Feed::Steps);
    check(&TinySpec { retype: Some(mixed), ..dense() }, 100, Feed::Prompt);
    check(&TinySpec { retype: Some(mixed), ..dense() }, 40, Feed::Steps);
    let experts = || TinySpec { n_layers: 3, context: 2048, ..TinySpec::new(Family::Deepseek2) };
    check(&TinySpec { retype: Some(mixed), ..experts() }, 100, Feed::Prompt);
    check(&TinySpec { retype: Some(mixed), ..experts() }, 40, Feed::Steps);
    let all: fn(&str) -> Option<GgmlDType> =
        |n| (n.ends_with(".weight") && !n.contains("norm")).then_some(GgmlDType::F16);
    check(&TinySpec { retype: Some(all), ..experts() }, 100, Feed::Prompt);
}

/// A model split into parts (`gguf_writer::write_split`, llama-gguf-split's
/// layout) opens whole in both engines: llama.cpp finds the parts from the
/// first, Hearth from any of them, bit for bit the model in one file.
#[test]
fn a_model_split_into_parts_matches_itself_whole_and_llama_cpp() {
    let (_d, whole) = tiny(&TinySpec { n_embd: 256, head_dim: 64, ..TinySpec::new(Family::Qwen3) });
    let dir = tempfile::tempdir().unwrap();
    let mut source = hearth_engine::GgufFile::open(&whole).unwrap();
    let parts =
        hearth_engine::gguf_writer::write_split(&mut source, &dir.path().join("qwen3-00001-of-00003.gguf"), 3).unwrap();
    let ids = ids(40);
    let logits = |path: &Path| {
        let engine = Engine::open(path).unwrap();
        assert_eq!(engine.path(), parts[0], "a split model is named by its first part");
        assert_eq!(engine.part_paths(), &parts[..]);
        let mut cache = engine.model().new_cache(64);
        engine.model().logits_at_every_position(&ids, &mut cache).unwrap()
    };
    let one_file = {
        let engine = Engine::open(&whole).unwrap();
        let mut cache = engine.model().new_cache(64);
        engine.model().logits_at_every_position(&ids, &mut cache).unwrap()
    };
    for part in &parts {
        assert!(logits(part) == one_file, "opened from {}: not the whole file's logits", part.display());
    }
    let facts = hearth_engine::ModelFacts::read(&parts[1]).unwrap();
    assert_eq!(facts.file_size, parts.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum::<u64>());
    assert_eq!(facts.parameter_count, hearth_engine::ModelFacts::read(&whole).unwrap().parameter_count);
    check_file("qwen3 in three parts", &parts[0], 40, Feed::Prompt);
}
