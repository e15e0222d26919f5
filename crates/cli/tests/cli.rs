//! The CLI's stable surface: subcommands, flags and JSON fields that scripts use.

use std::process::Command;

fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth-cli")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn generate_json_answers_two_plus_two_and_stops_on_the_end_token() {
    let (ok, out, err) =
        cli(&["generate", "--prompt", "What is 2 + 2?", "--temperature", "0", "--json", "--threads", "2"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["text"], two_plus_two());
    assert_eq!(v["finish_reason"], "end_token");
    for key in [
        "prompt_tokens",
        "generated_token_ids",
        "prefill_ms",
        "decode_ms",
        "prefill_tokens_per_s",
        "decode_tokens_per_s",
    ] {
        assert!(!v[key].is_null(), "missing {key}");
    }
    assert_eq!(v["generated_token_ids"].as_array().unwrap().last().unwrap(), 2);
}

#[test]
fn generate_streams_plain_text() {
    let (ok, out, err) = cli(&["generate", "--prompt", "What is 2 + 2?", "--temperature", "0", "--max-tokens", "16"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim_end(), two_plus_two());
}

#[test]
fn tokenize_prints_ids_with_and_without_special_parsing() {
    let (ok, out, _) = cli(&["tokenize", "--text", "<|im_start|>user", "--special"]);
    assert!(ok);
    assert_eq!(out.trim(), "[1,4093]");
    let (_, plain, _) = cli(&["tokenize", "--text", "<|im_start|>user"]);
    assert_ne!(plain.trim(), "[1,4093]");
}

#[test]
fn bench_json_reports_speeds_and_peak_rss() {
    let (ok, out, err) =
        cli(&["bench", "--prompt-tokens", "16", "--gen-tokens", "4", "--repeats", "1", "--json", "--threads", "1"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["prefill_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["peak_rss_bytes"].as_u64().unwrap() > 50 << 20);
    assert_eq!(v["prompt_token_ids"].as_array().unwrap().len(), 16);
    assert_eq!(v["device"], format!("cpu ({})", hearth_engine::cpu::isa::isa().name()));
    // Every matrix once per token: SmolLM2's layers plus its tied output.
    let bytes = v["weight_bytes_per_token"].as_u64().unwrap();
    assert!((90_000_000..98_362_432).contains(&bytes), "{bytes}");
}

#[test]
fn bench_batch_compares_n_sequences_with_one() {
    let (ok, out, err) =
        cli(&["bench", "--prompt-tokens", "16", "--gen-tokens", "4", "--repeats", "1", "--batch", "3", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let b = &v["batched"];
    assert_eq!(b["batch"], 3);
    assert!(b["one_sequence_s"].as_f64().unwrap() > 0.0 && b["batch_s"].as_f64().unwrap() > 0.0);
    let ratio = b["wall_ratio"].as_f64().unwrap();
    assert!((ratio - b["batch_s"].as_f64().unwrap() / b["one_sequence_s"].as_f64().unwrap()).abs() < 1e-9);
    // More than Generate N's eight is refused, not measured as eight.
    let (ok, _, err) = cli(&["bench", "--prompt-tokens", "8", "--gen-tokens", "2", "--repeats", "1", "--batch", "9"]);
    assert!(!ok && err.contains("at most 8"), "{err}");
    // Without --batch there is nothing batched to report.
    let (_, out, _) = cli(&["bench", "--prompt-tokens", "8", "--gen-tokens", "2", "--repeats", "1", "--json"]);
    assert!(serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()["batched"].is_null());
}

/// `bench --concurrent` runs its conversations through the app's worker
/// (one scheduler for the app, the API and the CLI): each reply's rate is
/// the one the worker records for it.
#[test]
fn bench_concurrent_compares_conversations_written_together_with_one_alone() {
    let (ok, out, err) =
        cli(&["bench", "--prompt-tokens", "16", "--gen-tokens", "6", "--repeats", "1", "--concurrent", "3", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let c = &v["concurrent"];
    assert_eq!(c["conversations"], 3);
    let each: Vec<f64> = c["each_tokens_per_s"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert_eq!(each.len(), 3);
    assert!(each.iter().all(|&r| r > 0.0), "{each:?}");
    let worst = each.iter().copied().fold(f64::MAX, f64::min);
    assert!((c["worst_ratio"].as_f64().unwrap() - worst / c["alone_tokens_per_s"].as_f64().unwrap()).abs() < 1e-9);
}

#[test]
fn a_device_this_build_lacks_is_a_clear_error() {
    if cfg!(feature = "cuda") {
        return;
    }
    let (ok, _, err) = cli(&["generate", "--device", "cuda", "--prompt", "hi"]);
    assert!(!ok);
    assert!(err.contains("CUDA is not available"), "{err}");
    let (ok, _, err) = cli(&["generate", "--device", "tpu", "--prompt", "hi"]);
    assert!(!ok);
    assert!(err.contains("not one of auto, cpu, cuda"), "{err}");
}

#[test]
fn a_random_model_is_written_that_loads_and_runs() {
    let dir = std::env::temp_dir().join(format!("hearth-random-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.gguf");
    let p = path.to_str().unwrap();
    let (ok, _, err) = cli(&[
        "write-random-model",
        "--out",
        p,
        "--layers",
        "2",
        "--embd",
        "256",
        "--ffn",
        "512",
        "--heads",
        "4",
        "--kv-heads",
        "2",
    ]);
    assert!(ok, "{err}");
    let (ok, out, err) =
        cli(&["bench", "--model", p, "--prompt-tokens", "8", "--gen-tokens", "2", "--repeats", "1", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    let (ok, _, err) = cli(&["write-random-model", "--out", p, "--dtype", "q9"]);
    assert!(!ok && err.contains("dtype"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A vocabulary carried without its model (as to the GPU machine): the
/// file holds the tokenizer alone, and a model written from it tokenizes
/// as the real one does.
#[test]
fn a_vocabulary_alone_makes_models_that_tokenize_as_the_real_one() {
    let dir = tempfile::tempdir().unwrap();
    let model = hearth_engine::paths::default_model_path(|k| std::env::var_os(k));
    let (vocab, random) = (dir.path().join("v.gguf"), dir.path().join("r.gguf"));
    let (ok, _, err) = cli(&["write-vocab", "--from", model.to_str().unwrap(), "--out", vocab.to_str().unwrap()]);
    assert!(ok, "{err}");
    let size = std::fs::metadata(&vocab).unwrap().len();
    assert!(size < 4 << 20, "{size} bytes: the tokenizer alone");
    let (ok, _, err) = cli(&[
        "write-random-model",
        "--out",
        random.to_str().unwrap(),
        "--tokenizer-from",
        vocab.to_str().unwrap(),
        "--layers",
        "1",
        "--embd",
        "256",
        "--ffn",
        "512",
        "--heads",
        "4",
        "--kv-heads",
        "2",
    ]);
    assert!(ok, "{err}");
    let text = "Hearth runs <|im_start|> models, naïvely 42 times.";
    let ids = |m: &std::path::Path| cli(&["tokenize", "--model", m.to_str().unwrap(), "--text", text, "--special"]).1;
    assert_eq!(ids(&random), ids(&model));
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let (ok, _, err) = cli(&["generate", "--model", "/nonexistent.gguf", "--prompt", "hi"]);
    assert!(!ok);
    assert!(err.starts_with("error: cannot read model file /nonexistent.gguf"), "{err}");
    let (ok, _, err) = cli(&["generate", "--prompt", "hi", "--top-p", "1.5"]);
    assert!(!ok);
    assert!(err.contains("top_p"), "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn bench_cache_reports_cold_warm_and_restored_turns() {
    let (ok, out, err) = cli(&["bench-cache", "--history-tokens", "120", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for key in ["cold_ttft_ms", "warm_ttft_ms", "restored_ttft_ms", "bytes_per_1k_tokens", "save_ms"] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    let prompt = v["prompt_tokens"].as_u64().unwrap();
    assert_eq!(v["cold_processed_tokens"].as_u64().unwrap(), prompt);
    // Warm and restored run only the new turn.
    let new = prompt - v["history_tokens"].as_u64().unwrap();
    assert!(v["warm_processed_tokens"].as_u64().unwrap() <= new + 1, "{v}");
    assert_eq!(v["restored_processed_tokens"], v["warm_processed_tokens"], "{v}");
}

#[test]
fn score_writes_log_probabilities_and_perplexity_compares_with_a_base() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, npy) = (dir.path().join("ids.json"), dir.path().join("s.npy"));
    let (_, tokens, _) =
        cli(&["tokenize", "--text", "The quick brown fox jumps over the lazy dog. The quick brown fox"]);
    std::fs::write(&ids, tokens.trim()).unwrap();
    let n = serde_json::from_str::<Vec<u32>>(tokens.trim()).unwrap().len();
    let (ok, _, err) =
        cli(&["score", "--ids-file", ids.to_str().unwrap(), "--out", npy.to_str().unwrap(), "--threads", "2"]);
    assert!(ok, "{err}");
    let bytes = std::fs::read(&npy).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap();
    assert!(header.contains(&format!("'shape': ({n}, 49152)")), "{header}");
    let row: Vec<f32> = bytes[10 + hlen..10 + hlen + 49152 * 4]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let total: f64 = row.iter().map(|&l| (l as f64).exp()).sum();
    assert!((total - 1.0).abs() < 1e-3, "a row of log-softmax sums to {total}");

    // Perplexity over a text, and against a base equal to Hearth itself: no divergence.
    let text = dir.path().join("t.txt");
    std::fs::write(&text, "The quick brown fox jumps over the lazy dog. ".repeat(8)).unwrap();
    let (ok, out, err) =
        cli(&["perplexity", "--file", text.to_str().unwrap(), "--ctx", "32", "--json", "--threads", "2"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let ppl = v["perplexity"].as_f64().unwrap();
    assert!(ppl > 1.0 && ppl < 50.0, "a repeated sentence is predictable: {ppl}");
    assert!(v["scored"].as_u64().unwrap() > 0);
    let (ok, _, err) =
        cli(&["perplexity", "--file", text.to_str().unwrap(), "--ctx", "32", "--kl-base", ids.to_str().unwrap()]);
    assert!(!ok && err.contains("kl-base"), "a base that is not an .npy is refused: {err}");
}

#[test]
fn replay_runs_an_exported_record_again_and_says_whether_it_matched() {
    use hearth_engine::{file_hash::ids_sha256, paths, ChatMessage, Engine, SamplingParams};
    use hearth_store::{ReplayExport, ReplayRecord};
    // A reply written in this process, as the app writes one.
    let engine = Engine::open(paths::default_model_path(|k| std::env::var_os(k))).unwrap();
    let sha = engine.hash_file(&|| false).unwrap().unwrap();
    let prompt = engine.encode_chat(&[ChatMessage::user("Name a colour.")]).unwrap();
    let sampling = SamplingParams {
        temperature: 0.9,
        top_k: Some(40),
        top_p: 0.9,
        min_p: 0.02,
        seed: 5,
        ..SamplingParams::default()
    };
    let mut session = engine.new_session(Some(2048));
    let mut turn = session
        .start_turn(engine.model(), engine.tokenizer(), &prompt, engine.generation_config(sampling, 20), 1)
        .unwrap();
    let passes = turn.prompt_passes().runs().iter().map(|&p| p.into()).collect();
    while turn.step().unwrap().is_some() {}
    let tokens = turn.finish(0).sequences[0].tokens.clone();
    let record = ReplayRecord {
        model_sha256: Some(sha),
        model_path: paths::default_model_path(|k| std::env::var_os(k)).display().to_string(),
        engine_build: hearth_engine::BUILD_ID.into(),
        device: "cpu".into(),
        prompt_sha256: ids_sha256(&prompt),
        prompt_tokens: prompt.len() as u32,
        passes,
        context_length: 2048,
        temperature: 0.9,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.02,
        repeat_penalty: 1.0,
        penalty_window: 64,
        seed: 5,
        max_new_tokens: 20,
        tokens: tokens.clone(),
        ..ReplayRecord::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reply.json");
    let write = |record: &ReplayRecord| {
        let export = ReplayExport {
            format: ReplayExport::FORMAT.into(),
            version: ReplayExport::VERSION,
            record: record.clone(),
            prompt_ids: prompt.clone(),
        };
        std::fs::write(&file, serde_json::to_vec(&export).unwrap()).unwrap();
    };
    let path = file.to_str().unwrap();

    write(&record);
    let (ok, out, err) = cli(&["replay", "--record", path, "--threads", "2"]);
    assert!(ok, "{out} {err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["matched"], true);
    assert_eq!(v["compared"], tokens.len());
    assert_eq!(v["processed_tokens"], prompt.len(), "from a cold cache");

    // A record that says otherwise is caught at the token where it differs.
    let mut other = record.clone();
    other.tokens[3] ^= 1;
    write(&other);
    let (ok, out, _) = cli(&["replay", "--record", path, "--threads", "2"]);
    assert!(!ok);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((v["matched"].as_bool(), v["first_difference"].as_u64()), (Some(false), Some(3)));

    // Another model file, or a file that is not a record, is refused in words.
    let mut other = record.clone();
    other.model_sha256 = Some("0".repeat(64));
    write(&other);
    let (ok, _, err) = cli(&["replay", "--record", path]);
    assert!(!ok && err.contains("SHA-256"), "{err}");
    std::fs::write(&file, "{\"format\": \"something else\"}").unwrap();
    let (ok, _, err) = cli(&["replay", "--record", path]);
    assert!(!ok && err.contains("not a reply record"), "{err}");
}

/// The default model's greedy reply to "What is 2 + 2?" as llama.cpp's
/// build for this CPU gives it, which the engine's kernels follow (see the
/// engine's golden tests).
fn two_plus_two() -> &'static str {
    match hearth_engine::cpu::isa::isa() {
        hearth_engine::cpu::isa::Isa::Avx512Vnni => "The answer is 4.",
        _ => "The answer to this classic math problem is 4.",
    }
}

/// `bench/device.sh`'s checks, run against the GPU's pass on the CPU: every
/// figure comes as one JSON line, the greedy replies agree with the CPU's
/// own pass up to a near-tie, and the stopped prefill keeps its first
/// chunk and goes on to the reply an unstopped one gives.
#[test]
fn device_check_runs_its_checks_against_the_graph_pass_on_the_cpu() {
    let model = hearth_engine::paths::default_model_path(|k| std::env::var_os(k));
    let model = model.to_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth-cli"))
        .args(["device-check", "--device", "cpu", "--graph", "--threads", "2", "--greedy-model", model])
        .args(["--greedy-tokens", "8", "--speed-model", model, "--prompt-tokens", "64", "--gen-tokens", "8"])
        .args(["--repeats", "1", "--stop-prompt-tokens", "200", "--stop-chunk", "64", "--bandwidth-mib", "64"])
        // candle's CPU pool spins at a barrier on pinned threads (see the engine's tests).
        .env("CANDLE_NUM_THREADS", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let checks: Vec<&str> = lines.iter().map(|l| l["check"].as_str().unwrap()).collect();
    assert_eq!(checks, ["bandwidth", "greedy", "speed", "generate_n", "concurrent", "stop_prefill"], "{stdout}");
    let by = |name: &str| lines.iter().find(|l| l["check"] == name).unwrap();
    assert!(by("bandwidth")["gb_per_s"].as_f64().unwrap() > 0.1);
    let greedy = by("greedy");
    assert_eq!(greedy["pass"], true, "{greedy}");
    assert_eq!(greedy["tokens"], 8);
    let speed = by("speed");
    for key in ["prefill_tokens_per_s", "decode_tokens_per_s", "bound_tokens_per_s", "share_of_bound"] {
        assert!(speed[key].as_f64().unwrap() > 0.0, "{key}: {speed}");
    }
    assert!(by("generate_n")["wall_ratio"].as_f64().unwrap() > 0.0);
    assert_eq!(by("concurrent")["each_tokens_per_s"].as_array().unwrap().len(), 2);
    let stop = by("stop_prefill");
    assert_eq!(stop["pass"], true, "{stop}");
    assert_eq!(stop["kept_positions"], 64);
}

/// `pull` fetches a model from a Hub-compatible server on 127.0.0.1
/// (`tests/hub/hub_server.py`) into the Hugging Face cache, `--model hf:`
/// fetches one the cache lacks with a progress bar, and then opens it from
/// the cache, the server gone.
#[test]
fn pull_fetches_into_the_hf_cache_and_hf_models_open_from_it() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repos/test-org/tiny-GGUF");
    std::fs::create_dir_all(&repo).unwrap();
    let model = repo.join("tiny-Q8_0.gguf");
    let (ok, _, err) = cli(&[
        "write-random-model",
        "--out",
        model.to_str().unwrap(),
        "--layers",
        "1",
        "--embd",
        "64",
        "--ffn",
        "128",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--dtype",
        "q8_0",
    ]);
    assert!(ok, "{err}");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/hub/hub_server.py");
    let mut server = Command::new("python3")
        .arg(script)
        .arg(dir.path().join("repos"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let hub = line.split_whitespace().nth(1).unwrap().to_string();
    let cache = dir.path().join("hf");
    let run_with = |cache: &std::path::Path, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hearth-cli"))
            .args(args)
            .env("HF_ENDPOINT", &hub)
            .env("HF_HUB_CACHE", cache)
            .env_remove("HF_TOKEN")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let run = |args: &[&str]| run_with(&cache, args);
    let (ok, _, err) = run(&["pull", "test-org/tiny-GGUF:Q4_K_M"]);
    assert!(!ok && err.contains("has no Q4_K_M file (it has: Q8_0)"), "{err}");
    // A model the cache lacks is fetched where it is named, with a progress
    // bar on stderr (a line per tenth where stderr is no terminal).
    let other_cache = dir.path().join("hf-other");
    let (ok, out, err) = run_with(&other_cache, &["tokenize", "--model", "hf:test-org/tiny-GGUF:Q8_0", "--text", "Hi"]);
    assert!(ok, "{out}{err}");
    let mb = std::fs::metadata(&model).unwrap().len() as f64 / 1e6;
    let done = format!("test-org/tiny-GGUF:Q8_0 {mb:.1}/{mb:.1} MB");
    assert!(err.lines().any(|l| l.starts_with(&done)), "no progress line {done:?} in {err}");
    assert!(other_cache.join("models--test-org--tiny-GGUF/refs/main").is_file());
    let (ok, out_json, err) = run(&["pull", "test-org/tiny-GGUF", "--json"]);
    assert!(ok, "{out}{err}");
    let path: serde_json::Value = serde_json::from_str(out_json.trim()).unwrap();
    let path = std::path::PathBuf::from(path["path"].as_str().unwrap());
    assert!(path.starts_with(cache.join("models--test-org--tiny-GGUF/snapshots")), "{}", path.display());
    assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&model).unwrap());
    server.kill().unwrap();
    server.wait().unwrap();
    let (ok, out, err) = run(&["tokenize", "--model", "hf:test-org/tiny-GGUF:Q8_0", "--text", "Hello"]);
    assert!(ok, "{err}");
    assert!(out.trim().starts_with('['), "{out}");
}
