//! Bad input gets a typed error that names the file and the reason, never a panic.

mod common;

use common::{tiny, Family, TinySpec};
use hearth_engine::{Engine, EngineError, SamplingParams};

fn open_err(bytes: &[u8]) -> EngineError {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.gguf");
    std::fs::write(&p, bytes).unwrap();
    let err = Engine::open(&p).err().expect("opening must fail");
    assert!(err.to_string().contains("bad.gguf"), "error does not name the file: {err}");
    err
}

#[test]
fn missing_file() {
    let err = Engine::open("/nonexistent/model.gguf").err().unwrap();
    assert!(matches!(err, EngineError::Io { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/model.gguf"));
}

#[test]
fn random_bytes() {
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    assert!(matches!(open_err(&bytes), EngineError::CorruptModel { .. } | EngineError::TruncatedModel { .. }));
    assert!(matches!(open_err(b""), EngineError::CorruptModel { .. } | EngineError::TruncatedModel { .. }));
}

#[test]
fn truncated_files_at_many_points() {
    let (_d, path) = tiny(&TinySpec::new(Family::Llama));
    let full = std::fs::read(&path).unwrap();
    for cut in [4, 16, 100, full.len() / 3, full.len() / 2, full.len() - 1] {
        let err = open_err(&full[..cut]);
        assert!(
            matches!(err, EngineError::TruncatedModel { .. } | EngineError::CorruptModel { .. }),
            "cut at {cut}: {err}"
        );
    }
    // The tensor data is where a partial download ends: that must say truncated.
    assert!(matches!(open_err(&full[..full.len() - 1]), EngineError::TruncatedModel { .. }));
}

#[test]
fn truncated_real_model_says_truncated() {
    let p = common::default_model();
    let full = std::fs::read(&p).unwrap();
    let err = open_err(&full[..full.len() / 2]);
    assert!(matches!(err, EngineError::TruncatedModel { .. }), "{err}");
}

#[test]
fn unknown_architecture() {
    let (_d, path) = tiny(&TinySpec::new(Family::Llama));
    let mut bytes = std::fs::read(&path).unwrap();
    // Same length, so the file stays well-formed: "llama" -> "llaxa".
    let at = bytes.windows(5).position(|w| w == b"llama").unwrap();
    bytes[at + 3] = b'x';
    match open_err(&bytes) {
        EngineError::UnsupportedArchitecture { architecture, .. } => assert_eq!(architecture, "llaxa"),
        e => panic!("wrong error: {e}"),
    }
}

#[test]
fn unknown_pre_tokenizer_is_refused_not_guessed() {
    let (_d, path) = tiny(&TinySpec::new(Family::Llama));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.windows(6).position(|w| w == b"smollm").unwrap();
    bytes[at..at + 6].copy_from_slice(b"smolxx");
    let err = open_err(&bytes);
    assert!(matches!(err, EngineError::Tokenizer { .. }), "{err}");
    assert!(err.to_string().contains("smolxx"));
}

#[test]
fn out_of_range_settings_name_the_field() {
    let cases: Vec<(SamplingParams, &str)> = vec![
        (SamplingParams { temperature: -0.1, ..Default::default() }, "temperature"),
        (SamplingParams { temperature: f32::NAN, ..Default::default() }, "temperature"),
        (SamplingParams { top_p: 0.0, ..Default::default() }, "top_p"),
        (SamplingParams { top_p: 1.5, ..Default::default() }, "top_p"),
        (SamplingParams { top_k: Some(0), ..Default::default() }, "top_k"),
        (SamplingParams { min_p: -0.5, ..Default::default() }, "min_p"),
        (SamplingParams { repeat_penalty: 0.0, ..Default::default() }, "repeat_penalty"),
        (SamplingParams { presence_penalty: 3.0, ..Default::default() }, "presence_penalty"),
        (SamplingParams { frequency_penalty: -3.0, ..Default::default() }, "frequency_penalty"),
    ];
    for (p, field) in cases {
        match p.validate() {
            Err(EngineError::InvalidSetting { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: expected an error, got {other:?}"),
        }
    }
    assert!(SamplingParams::default().validate().is_ok());
    assert!(SamplingParams::greedy().validate().is_ok());

    // The loop refuses them too, before touching the model.
    let (_d, path) = tiny(&TinySpec::new(Family::Llama));
    let engine = Engine::open(&path).unwrap();
    let cfg = engine.generation_config(SamplingParams { top_p: 2.0, ..Default::default() }, 4);
    let mut session = engine.new_session(None);
    assert!(session.start_turn(engine.model(), engine.tokenizer(), &[5, 6], cfg, 1).is_err());
    assert!(session.tokens().is_empty());
}

#[test]
fn out_of_vocabulary_ids_are_an_error() {
    let (_d, path) = tiny(&TinySpec::new(Family::Qwen2));
    let engine = Engine::open(&path).unwrap();
    let mut cache = engine.model().new_cache(64);
    assert!(engine.model().forward(&[vec![1, 100_000]], &mut cache).is_err());
    assert_eq!(cache.len(), 0);
}

/// Byte offset of tensor `name`'s info in a GGUF header: (dims start, n_dims).
fn tensor_info_at(bytes: &[u8], name: &str) -> (usize, usize) {
    let mut needle = (name.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(name.as_bytes());
    let at = bytes.windows(needle.len()).position(|w| w == needle.as_slice()).unwrap() + needle.len();
    let n_dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    (at + 4, n_dims)
}

#[test]
fn a_tensor_type_hearth_cannot_run_is_refused_by_name() {
    // Rows of 256: whole blocks of the type written in below.
    let (_d, path) = tiny(&TinySpec { n_embd: 256, ..TinySpec::new(Family::Llama) });
    let mut bytes = std::fs::read(&path).unwrap();
    let (dims, n) = tensor_info_at(&bytes, "blk.0.ffn_gate.weight");
    // IQ2_XXS (16): a valid type whose smaller blocks still lie inside the file.
    bytes[dims + 8 * n..dims + 8 * n + 4].copy_from_slice(&16u32.to_le_bytes());
    match open_err(&bytes) {
        e @ EngineError::UnsupportedTensorType { .. } => {
            let msg = e.to_string();
            assert!(
                msg.contains("blk.0.ffn_gate.weight") && msg.contains("IQ2_XXS") && msg.contains("Q4_K_M"),
                "{msg}"
            );
        }
        e => panic!("wrong error: {e}"),
    }
}

#[test]
fn dimensions_that_multiply_past_2_64_are_refused() {
    let (_d, path) = tiny(&TinySpec::new(Family::Llama));
    let mut bytes = std::fs::read(&path).unwrap();
    let (dims, _) = tensor_info_at(&bytes, "blk.0.ffn_down.weight");
    bytes[dims..dims + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    bytes[dims + 8..dims + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let err = open_err(&bytes);
    assert!(matches!(err, EngineError::CorruptModel { .. }) && err.to_string().contains("2^64"), "{err}");
}

#[test]
fn a_tensor_whose_shape_does_not_match_the_model_is_refused() {
    let (_d, path) = tiny(&TinySpec::new(Family::Llama));
    let mut bytes = std::fs::read(&path).unwrap();
    let (dims, _) = tensor_info_at(&bytes, "blk.0.ffn_down.weight");
    // Same element count, rows and columns swapped.
    let (a, b) = (bytes[dims..dims + 8].to_vec(), bytes[dims + 8..dims + 16].to_vec());
    bytes[dims..dims + 8].copy_from_slice(&b);
    bytes[dims + 8..dims + 16].copy_from_slice(&a);
    let err = open_err(&bytes);
    assert!(
        matches!(err, EngineError::CorruptModel { .. }) && err.to_string().contains("blk.0.ffn_down.weight"),
        "{err}"
    );
}

#[test]
fn a_zero_alignment_is_refused_without_a_panic() {
    let (_d, path) = tiny(&TinySpec::new(Family::Llama));
    let mut bytes = std::fs::read(&path).unwrap();
    // "llama.block_count" and "general.alignment" have the same length; both are u32.
    let at = bytes.windows(17).position(|w| w == b"llama.block_count").unwrap();
    bytes[at..at + 17].copy_from_slice(b"general.alignment");
    assert_eq!(u32::from_le_bytes(bytes[at + 17..at + 21].try_into().unwrap()), 4, "value type u32");
    bytes[at + 21..at + 25].copy_from_slice(&0u32.to_le_bytes());
    let err = open_err(&bytes);
    assert!(matches!(err, EngineError::CorruptModel { .. }) && err.to_string().contains("alignment"), "{err}");
}

#[test]
fn a_template_bomb_is_a_template_error_not_a_hang() {
    // Nested loops of 10^10 iterations, as a hostile GGUF could carry.
    let bomb = "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}";
    let t = hearth_engine::ChatTemplate::new(bomb, "", "").unwrap();
    let started = std::time::Instant::now();
    let err = t.render(&[hearth_engine::ChatMessage::user("hi")], true).unwrap_err();
    assert!(matches!(err, EngineError::Template(_)), "{err}");
    assert!(err.to_string().contains("fuel"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}", started.elapsed());
    // A real template over a long conversation stays well inside the limit.
    let chatml = hearth_engine::ChatTemplate::chatml();
    let long: Vec<_> = (0..5000).map(|i| hearth_engine::ChatMessage::user(format!("message {i}"))).collect();
    assert!(chatml.render(&long, true).unwrap().len() > 5000 * 20);
}

#[test]
fn a_huge_declared_array_is_refused_without_allocating_it() {
    let (_d, path) = tiny(&TinySpec::new(Family::Llama));
    let mut bytes = std::fs::read(&path).unwrap();
    let key = b"tokenizer.ggml.tokens";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    assert_eq!(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()), 9, "an array");
    assert_eq!(u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()), 8, "of strings");
    // 2^40 strings: a reader that trusted the count would ask for terabytes.
    bytes[at + 8..at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let err = open_err(&bytes);
    assert!(matches!(err, EngineError::TruncatedModel { .. } | EngineError::CorruptModel { .. }), "{err}");
    assert!(err.to_string().contains("array count"), "{err}");
}

#[test]
fn more_experts_used_than_the_file_has() {
    let (_d, path) = tiny(&TinySpec { experts: (2, 3, 64), ..TinySpec::new(Family::Qwen3Moe) });
    let err = Engine::open(&path).err().expect("opening must fail");
    assert!(matches!(err, EngineError::CorruptModel { .. }), "{err}");
    assert!(err.to_string().contains("qwen3moe.expert_used_count"), "{err}");
}

#[test]
fn expert_tensors_of_the_wrong_shape() {
    let (_d, path) = tiny(&TinySpec::new(Family::Qwen3Moe));
    let mut bytes = std::fs::read(&path).unwrap();
    // The experts' width, 64, says 32: the same length, a well-formed file.
    let key = b"expert_feed_forward_length";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    assert_eq!(u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()), 64);
    bytes[at + 4..at + 8].copy_from_slice(&32u32.to_le_bytes());
    let err = open_err(&bytes);
    assert!(matches!(err, EngineError::CorruptModel { .. }), "{err}");
    assert!(err.to_string().contains("ffn_gate_exps.weight") && err.to_string().contains("[8, 64, 64]"), "{err}");
}

/// A tiny `spec` file with its metadata and tensors edited, and the error
/// opening it gives.
fn edited(
    spec: &TinySpec,
    edit: impl FnOnce(
        &mut Vec<(String, candle_core::quantized::gguf_file::Value)>,
        &mut Vec<(String, candle_core::quantized::QTensor)>,
    ),
) -> String {
    use candle_core::quantized::gguf_file;
    let (dir, path) = tiny(spec);
    let mut f = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    let mut md: Vec<(String, gguf_file::Value)> = content.metadata.clone().into_iter().collect();
    let mut names: Vec<String> = content.tensor_infos.keys().cloned().collect();
    names.sort();
    let mut tensors: Vec<(String, candle_core::quantized::QTensor)> =
        names.iter().map(|n| (n.clone(), content.tensor(&mut f, n, &candle_core::Device::Cpu).unwrap())).collect();
    edit(&mut md, &mut tensors);
    let out = dir.path().join("edited.gguf");
    let md_refs: Vec<(&str, &gguf_file::Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &candle_core::quantized::QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut std::fs::File::create(&out).unwrap(), &md_refs, &t_refs).unwrap();
    match Engine::open(&out) {
        Ok(_) => panic!("the edited file opened"),
        Err(e) => e.to_string(),
    }
}

/// A hybrid file with one metadata key or tensor changed.
fn hybrid_with(
    edit: impl Fn(&mut Vec<(String, candle_core::quantized::gguf_file::Value)>, &mut Vec<String>),
) -> String {
    edited(&TinySpec::new(Family::Qwen35), |md, tensors| {
        let mut names: Vec<String> = tensors.iter().map(|(n, _)| n.clone()).collect();
        edit(md, &mut names);
        tensors.retain(|(n, _)| names.contains(n));
    })
}

/// Sets metadata `key` to `value`, adding it where it is missing.
fn set(
    md: &mut Vec<(String, candle_core::quantized::gguf_file::Value)>,
    key: &str,
    value: candle_core::quantized::gguf_file::Value,
) {
    md.retain(|(k, _)| k != key);
    md.push((key.to_string(), value));
}

#[test]
fn gpt_oss_sinks_of_the_wrong_length_are_refused_by_name() {
    let spec = TinySpec::new(Family::GptOss);
    let err = edited(&spec, |_, tensors| {
        for (name, t) in tensors.iter_mut() {
            if name == "blk.1.attn_sinks.weight" {
                let longer =
                    candle_core::Tensor::zeros(spec.n_heads + 1, candle_core::DType::F32, &candle_core::Device::Cpu)
                        .unwrap();
                *t =
                    candle_core::quantized::QTensor::quantize(&longer, candle_core::quantized::GgmlDType::F32).unwrap();
            }
        }
    });
    assert!(err.contains("blk.1.attn_sinks.weight") && err.contains("[4]"), "{err}");
    let err = edited(&spec, |_, tensors| tensors.retain(|(n, _)| n != "blk.0.attn_sinks.weight"));
    assert!(err.contains("missing tensor blk.0.attn_sinks.weight"), "{err}");
}

#[test]
fn a_yarn_factor_of_zero_or_less_is_refused_by_key() {
    use candle_core::quantized::gguf_file::Value;
    for factor in [0.0, -4.0, f32::NAN] {
        let err =
            edited(&TinySpec::new(Family::GptOss), |md, _| set(md, "gpt-oss.rope.scaling.factor", Value::F32(factor)));
        assert!(err.contains("gpt-oss.rope.scaling.factor") && err.contains("YaRN"), "{factor}: {err}");
    }
    let err = edited(&TinySpec::new(Family::GptOss), |md, _| {
        set(md, "gpt-oss.rope.scaling.type", Value::String("longrope".into()))
    });
    assert!(err.contains("gpt-oss.rope.scaling.type") && err.contains("longrope"), "{err}");
    let err =
        edited(&TinySpec::new(Family::GptOss), |md, _| set(md, "gpt-oss.attention.sliding_window", Value::U32(0)));
    assert!(err.contains("gpt-oss.attention.sliding_window"), "{err}");
}

#[test]
fn an_mxfp4_tensor_that_is_not_whole_blocks_is_refused_by_name() {
    let (_d, path) = tiny(&TinySpec::new(Family::GptOss));
    let turned = common::retype::tensors_to_mxfp4(&path, |n| n.contains("_exps.weight"), 3);
    assert!(turned > 0);
    assert!(Engine::open(&path).is_ok(), "the MXFP4 file itself opens");
    let mut bytes = std::fs::read(&path).unwrap();
    // Rows of 48 values: a block and a half each.
    let (dims, _) = tensor_info_at(&bytes, "blk.1.ffn_down_exps.weight");
    assert_eq!(u64::from_le_bytes(bytes[dims..dims + 8].try_into().unwrap()), 64);
    bytes[dims..dims + 8].copy_from_slice(&48u64.to_le_bytes());
    let err = open_err(&bytes);
    assert!(matches!(err, EngineError::CorruptModel { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("blk.1.ffn_down_exps.weight") && msg.contains("MXFP4") && msg.contains("whole"), "{msg}");
}

#[test]
fn a_hybrid_without_its_state_tensors_or_with_bad_sections_is_refused_by_name() {
    use candle_core::quantized::gguf_file::Value;
    let err = hybrid_with(|_, names| names.retain(|n| n != "blk.0.ssm_conv1d.weight"));
    assert!(err.contains("blk.0.ssm_conv1d.weight"), "{err}");
    let err = hybrid_with(|md, _| {
        for (k, v) in md.iter_mut() {
            if k == "qwen35.rope.dimension_sections" {
                *v = Value::Array(vec![Value::I32(0), Value::I32(0), Value::I32(0), Value::I32(0)]);
            }
        }
    });
    assert!(err.contains("rope.dimension_sections") && err.contains("adds up"), "{err}");
    let err = hybrid_with(|md, _| {
        for (k, v) in md.iter_mut() {
            if k == "qwen35.ssm.inner_size" {
                *v = Value::U32(100);
            }
        }
    });
    assert!(err.contains("ssm.inner_size"), "{err}");
}

/// A tiny model written again in three parts, as `llama-gguf-split` does.
fn split_in_three(dir: &std::path::Path, name: &str, spec: &TinySpec) -> Vec<std::path::PathBuf> {
    let (_d, whole) = tiny(spec);
    let mut source = hearth_engine::GgufFile::open(&whole).unwrap();
    hearth_engine::gguf_writer::write_split(&mut source, &dir.join(format!("{name}-00001-of-00003.gguf")), 3).unwrap()
}

fn split_err(path: &std::path::Path) -> String {
    let err = Engine::open(path).err().expect("opening must fail");
    assert!(matches!(err, EngineError::SplitModel { .. }), "{err}");
    err.to_string()
}

#[test]
fn a_split_model_with_a_part_missing_names_the_part() {
    let dir = tempfile::tempdir().unwrap();
    let parts = split_in_three(dir.path(), "m", &TinySpec::new(Family::Llama));
    std::fs::remove_file(&parts[2]).unwrap();
    for opened in &parts[..2] {
        let err = split_err(opened);
        assert!(err.contains("m-00003-of-00003.gguf") && err.contains("part 3 of 3 is missing"), "{err}");
    }
}

#[test]
fn a_split_model_with_a_part_of_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let parts = split_in_three(dir.path(), "m", &TinySpec::new(Family::Llama));
    // Another model's second part under this model's name: a different
    // number of tensors.
    let other = split_in_three(dir.path(), "other", &TinySpec { n_layers: 3, ..TinySpec::new(Family::Llama) });
    std::fs::copy(&other[1], &parts[1]).unwrap();
    let err = split_err(&parts[0]);
    assert!(err.contains("m-00002-of-00003.gguf") && err.contains("a model of"), "{err}");
    // This model's third part copied over its second: it says so.
    let parts = split_in_three(dir.path(), "n", &TinySpec::new(Family::Llama));
    std::fs::copy(&parts[2], &parts[1]).unwrap();
    let err = split_err(&parts[0]);
    assert!(err.contains("n-00002-of-00003.gguf") && err.contains("part 3 of 3"), "{err}");
}

/// A split model is one model to its caches: its size is the parts' sum,
/// its hash is of every part's bytes in order, and a byte changed in its
/// last part changes its identity, so no saved cache outlives an edit of
/// any part.
#[test]
fn a_split_models_identity_covers_every_part() {
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().unwrap();
    let parts = split_in_three(dir.path(), "m", &TinySpec::new(Family::Llama));
    let engine = Engine::open(&parts[0]).unwrap();
    assert_eq!(engine.part_paths(), &parts[..]);
    let sizes: u64 = parts.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(engine.file_fingerprint().unwrap().0, sizes);
    let mut all = Sha256::new();
    for part in &parts {
        all.update(std::fs::read(part).unwrap());
    }
    let expected: String = all.finalize().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(engine.hash_file(&|| false).unwrap().as_deref(), Some(expected.as_str()));
    let before = engine.cache_identity(256).unwrap();
    // The last part's last byte (tensor data) changed, its size kept.
    let mut last = std::fs::read(&parts[2]).unwrap();
    *last.last_mut().unwrap() ^= 1;
    std::fs::write(&parts[2], &last).unwrap();
    let engine = Engine::open(&parts[0]).unwrap();
    engine.hash_file(&|| false).unwrap();
    let after = engine.cache_identity(256).unwrap();
    assert_eq!(before.model_size, after.model_size);
    assert_ne!(before.model_sha256, after.model_sha256);
    assert_ne!(before, after);
}

#[test]
fn a_split_part_renamed_by_hand_says_its_parts_cannot_be_found() {
    let dir = tempfile::tempdir().unwrap();
    let parts = split_in_three(dir.path(), "m", &TinySpec::new(Family::Llama));
    let renamed = dir.path().join("model.gguf");
    std::fs::rename(&parts[0], &renamed).unwrap();
    let err = split_err(&renamed);
    assert!(err.contains("model.gguf") && err.contains("cannot be found"), "{err}");
}

/// A header read from the start of a file fetched over HTTP (the Hub's fit
/// label): past what was fetched it is refused by name, not read on or
/// allocated, however large the file says it is.
#[test]
fn a_header_longer_than_what_was_fetched_is_refused() {
    let (_d, path) = tiny(&TinySpec::new(Family::Llama));
    let bytes = std::fs::read(&path).unwrap();
    let name = std::path::Path::new("remote.gguf");
    let err = hearth_engine::GgufFile::read_header(&bytes[..1024], 1 << 40, 1024, name).err().unwrap();
    assert!(
        matches!(err, EngineError::CorruptModel { .. }) && err.to_string().contains("longer than the 1024 bytes"),
        "{err}"
    );
    let whole = hearth_engine::GgufFile::read_header(&bytes[..], bytes.len() as u64, bytes.len() as u64, name).unwrap();
    assert_eq!(whole.total_len(), bytes.len() as u64);
}
