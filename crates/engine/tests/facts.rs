//! `ModelFacts`: a model file's header facts, read without its weights.
//! Expected figures for the real files are the `gguf` Python package's
//! (`GGUFReader`: `n_elements` and `n_bytes` summed per tensor type).

mod common;

use common::{default_model, gemma3_model, tiny, Family, TinySpec, VOCAB};
use hearth_engine::{EngineError, ModelFacts};

fn share(facts: &ModelFacts) -> Vec<(&str, u64)> {
    facts.quant_types.iter().map(|s| (s.name.as_str(), s.bytes)).collect()
}

#[test]
fn default_model_facts() {
    let path = default_model();
    let f = ModelFacts::read(&path).unwrap();
    assert_eq!(f.architecture, "llama");
    assert!(f.supported);
    assert_eq!(f.name.as_deref(), Some("Smollm2 135M 8k Lc100K Mix1 Ep2"));
    assert_eq!(f.parameter_count, 134_515_008);
    assert_eq!(f.tensor_bytes, 96_576_768);
    assert_eq!(share(&f), [("Q4_1", 66_355_200), ("Q8_0", 30_081_024), ("F32", 140_544)]);
    let total: f64 = f.quant_types.iter().map(|s| s.fraction).sum();
    assert!((total - 1.0).abs() < 1e-9);
    assert!((f.quant_types[0].fraction - 0.68707).abs() < 1e-4);
    assert_eq!(f.context_length, 8192);
    assert_eq!(f.file_size, 98_362_432);
    assert_eq!((f.n_layers, f.n_heads, f.n_kv_heads, f.head_dim, f.embedding_length), (30, 9, 3, 64, 576));
    // f16 K and V: 2 bytes × 2 × 30 layers × 3 KV heads × 64.
    assert_eq!(f.kv_bytes_per_token, 23_040);
    assert_eq!(f.memory_estimate(8192), 96_576_768 + 23_040 * 8192);
    assert_eq!(f.memory_estimate(0), f.tensor_bytes);
}

/// The KV estimate is the engine's own cache size per position.
#[test]
fn kv_bytes_match_the_engine_cache() {
    let engine = common::open_default();
    let f = ModelFacts::read(default_model()).unwrap();
    let cache = hearth_engine::KvCache::new(engine.model().config(), 16, &hearth_engine::Device::Cpu);
    assert_eq!(f.kv_bytes_per_token, cache.bytes_per_position() as u64);
}

/// Gemma 3: one KV head of 256 (`attention.key_length`, not embedding/heads),
/// and its sliding-window layers keep every position, so all 18 count.
#[test]
fn gemma3_facts() {
    let f = ModelFacts::read(gemma3_model()).unwrap();
    assert_eq!(f.architecture, "gemma3");
    assert_eq!(f.name.as_deref(), Some("Gemma 3 270m"));
    assert_eq!(f.parameter_count, 268_098_176);
    assert_eq!(f.tensor_bytes, 246_587_904);
    assert_eq!(
        share(&f),
        [("Q8_0", 179_824_640), ("Q5_0", 43_591_680), ("Q4_K", 13_271_040), ("Q6_K", 9_676_800), ("F32", 223_744)]
    );
    assert_eq!(f.context_length, 32_768);
    assert_eq!((f.n_layers, f.n_kv_heads, f.head_dim), (18, 1, 256));
    assert_eq!(f.kv_bytes_per_token, 2 * 2 * 18 * 256);
}

#[test]
fn tiny_model_facts() {
    let spec = TinySpec::new(Family::Llama);
    let (_dir, path) = tiny(&spec);
    let f = ModelFacts::read(&path).unwrap();
    let (e, qd, kvd, ffn) = (spec.n_embd, spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim, spec.ffn);
    let matrices = 2 * VOCAB * e + spec.n_layers * (2 * qd * e + 2 * kvd * e + 3 * ffn * e);
    let norms = e + spec.n_layers * 2 * e;
    assert_eq!(f.parameter_count, (matrices + norms) as u64);
    // Q8_0: 34 bytes per 32 values.
    assert_eq!(share(&f), [("Q8_0", (matrices / 32 * 34) as u64), ("F32", (norms * 4) as u64)]);
    assert_eq!(f.name, None);
    assert_eq!(f.context_length, spec.context as u32);
    assert_eq!(f.kv_bytes_per_token, (2 * 2 * spec.n_layers * spec.n_kv_heads * spec.head_dim) as u64);
    assert_eq!(f.file_size, std::fs::metadata(&path).unwrap().len());
}

#[test]
fn truncated_and_corrupt_files_are_the_loaders_errors() {
    let dir = tempfile::tempdir().unwrap();
    // The default model's first megabyte: the whole header, most tensors missing.
    let mut head = vec![0u8; 1 << 20];
    std::io::Read::read_exact(&mut std::fs::File::open(default_model()).unwrap(), &mut head).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &head).unwrap();
    let err = ModelFacts::read(&cut).unwrap_err();
    assert!(matches!(err, EngineError::TruncatedModel { .. }), "{err}");
    assert!(err.to_string().contains("cut.gguf"), "{err}");

    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"not a model at all").unwrap();
    let err = ModelFacts::read(&bad).unwrap_err();
    assert!(matches!(err, EngineError::CorruptModel { .. }), "{err}");
    assert!(err.to_string().contains("bad.gguf"), "{err}");

    let err = ModelFacts::read(dir.path().join("missing.gguf")).unwrap_err();
    assert!(matches!(err, EngineError::Io { .. }), "{err}");
}

#[test]
fn a_hybrids_facts_count_keys_and_values_of_its_attention_layers_and_its_recurrent_state() {
    for family in [Family::Qwen35, Family::Qwen35Moe] {
        let (_dir, path) = tiny(&TinySpec::new(family));
        let f = ModelFacts::read(&path).unwrap();
        let engine = hearth_engine::Engine::open(&path).unwrap();
        let cache = engine.model().new_cache(64);
        assert_eq!(f.kv_bytes_per_token, cache.bytes_per_position() as u64, "{family:?}: attention layers only");
        assert_eq!(f.recurrent_state_bytes, cache.state_bytes() as u64, "{family:?}");
        assert!(f.recurrent_state_bytes > 0);
        // The state and a checkpoint per prompt chunk, up to the cap.
        assert_eq!(f.recurrent_bytes(1000), 3 * f.recurrent_state_bytes);
        assert_eq!(f.memory_estimate(1000), f.tensor_bytes + 1000 * f.kv_bytes_per_token + 3 * f.recurrent_state_bytes);
    }
    let (_dir, path) = tiny(&TinySpec::new(Family::Llama));
    assert_eq!(ModelFacts::read(&path).unwrap().recurrent_state_bytes, 0);
}

/// Gemma 4: the per-layer table counted apart (Google's "effective"
/// parameters leave it out) and out of the memory estimate, as it is read
/// from the file; the KV cache of the layers that keep their own, each at
/// its head size; the estimate equal to the engine's own cache.
#[test]
fn gemma4_facts() {
    let spec = TinySpec::gemma4(false);
    let (_dir, path) = tiny(&spec);
    let f = ModelFacts::read(&path).unwrap();
    let g = &spec.gemma4;
    let table = (VOCAB * spec.n_layers * g.per_layer) as u64;
    assert_eq!(f.per_layer_embedding_parameters, table);
    assert_eq!(f.per_layer_embedding_bytes, table / 32 * 34, "Q8_0");
    assert!(f.parameter_count > table && f.active_parameter_count == f.parameter_count - table);
    assert_eq!(f.memory_estimate(0), f.tensor_bytes - f.per_layer_embedding_bytes);
    // Full layers' heads stand for the model; two sliding layers of 2 × 16
    // and two full ones of 1 × 32 keep keys and values, layers 4 and 5 none.
    assert_eq!((f.n_heads, f.n_kv_heads, f.head_dim), (4, 1, 32));
    assert_eq!(f.kv_bytes_per_token, 2 * 2 * (2 * 2 * 16 + 2 * 32));
    let engine = hearth_engine::Engine::open(&path).unwrap();
    let cache = hearth_engine::KvCache::new(engine.model().config(), 16, &hearth_engine::Device::Cpu);
    assert_eq!(f.kv_bytes_per_token, cache.bytes_per_position() as u64);
}
