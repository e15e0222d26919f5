//! `.hearth` bundles on the real default model: a conversation and its
//! cache carried to another data folder (and another copy of the model
//! file) resume with no prefill, and hostile or broken bundles change
//! nothing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use hearth_store::{ConversationSettings, MessageStatus, ReplyStats, Role, Store};
use hearth_worker::bundle::CacheImport;
use hearth_worker::events::{GenerationEvent, ModelStatus};
use hearth_worker::{ReplyJob, Worker, WorkerConfig};

/// A data folder with its database and a worker on `model`.
struct Folder {
    dir: tempfile::TempDir,
    store: Store,
    worker: Worker,
}

fn folder(model: &Path) -> Folder {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hearth.db")).unwrap();
    let worker = Worker::start(
        store.reopen().unwrap(),
        WorkerConfig::saving_caches_in(dir.path().join("caches")),
        Box::new(|_| {}),
    );
    worker.load_model(model.to_path_buf());
    // Idle once the model is loaded and hashed.
    assert!(worker.wait_idle(Duration::from_secs(180)));
    assert!(matches!(worker.model_status(), ModelStatus::Ready { .. }), "{:?}", worker.model_status());
    Folder { dir, store, worker }
}

fn greedy(max_new_tokens: u32) -> ConversationSettings {
    ConversationSettings { temperature: 0.0, max_new_tokens, ..Default::default() }
}

/// Runs one turn of conversation `c` (the user's `text` after its shown
/// branch) and returns the reply's text and stats.
fn turn(f: &Folder, c: i64, text: &str, max_new_tokens: u32) -> (String, ReplyStats) {
    let parent = f.store.thread(c).unwrap().last().map(|t| t.message.id);
    let u = f.store.add_message(c, parent, Role::User, text, MessageStatus::Complete).unwrap();
    let reply = f.store.add_message(c, Some(u.id), Role::Assistant, "", MessageStatus::Streaming).unwrap().id;
    // As the app builds it: each reply carries the tokens it was sampled as.
    let (history, settings) = hearth_worker::history::prompt_messages(&f.store, c, Some(u.id)).unwrap();
    let (tx, rx) = mpsc::channel();
    f.worker
        .enqueue(ReplyJob::new(
            c,
            reply,
            history,
            ConversationSettings { max_new_tokens, ..settings },
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
        ))
        .unwrap();
    loop {
        match rx.recv_timeout(Duration::from_secs(120)).expect("the reply ends") {
            GenerationEvent::Finished { stats, .. } => {
                assert!(f.worker.wait_idle(Duration::from_secs(30)));
                return (f.store.message(reply).unwrap().content, stats);
            }
            GenerationEvent::Error { error } => panic!("reply failed: {error:?}"),
            _ => {}
        }
    }
}

fn conversation_count(store: &Store) -> usize {
    store.conversations().unwrap().len()
}

/// The bytes of model file `model` at another path, with another mtime.
fn model_copy(model: &Path, dir: &Path) -> PathBuf {
    let copy = dir.join("copied-model.gguf");
    std::fs::copy(model, &copy).unwrap();
    copy
}

fn default_model() -> PathBuf {
    hearth_engine::paths::default_model_path(|k| std::env::var_os(k))
}

/// A conversation on `model` carried in a bundle to another data folder
/// (and another copy of the file) resumes with no prefill, and its next
/// turn writes what the live cache and a cold prefill write.
fn a_bundle_resumes_exactly(model: &Path) {
    let a = folder(model);
    let c = a.store.create_conversation().unwrap();
    a.store.set_conversation_settings(c.id, &greedy(32)).unwrap();
    let (first, first_stats) = turn(&a, c.id, "What is 2 + 2?", 32);
    let bundle = a.dir.path().join("chat.hearth");
    a.worker.export_bundle(&a.store, c.id, &bundle).unwrap();
    let json = serde_json::to_vec(&a.store.export_conversation(c.id).unwrap()).unwrap();

    // Another machine: another data folder, the same model's bytes elsewhere.
    let copies = tempfile::tempdir().unwrap();
    let b = folder(&model_copy(model, copies.path()));
    let imported = b.worker.import_bundle(&b.store, &bundle).unwrap();
    assert_eq!(imported.cache, CacheImport::Restored, "{:?}", imported.cache_note);
    let id = imported.report.imported[0];
    let thread = b.store.thread(id).unwrap();
    assert_eq!(thread.last().unwrap().message.content, first);
    assert_eq!(b.worker.cache_states(&[id]), [(id, hearth_worker::CacheState::Saved)]);

    let (resumed, stats) = turn(&b, id, "And 3 + 3?", 16);
    // Only the new message (and the template's markers around it) ran.
    assert!(stats.processed_tokens < stats.prompt_tokens - first_stats.prompt_tokens + 4, "resumed: {stats:?}");
    assert!(stats.prompt_tokens > first_stats.prompt_tokens + first_stats.generated_tokens);

    // The same turn where the bundle was made, from its live cache...
    let (original, original_stats) = turn(&a, c.id, "And 3 + 3?", 16);
    assert_eq!(original_stats.processed_tokens, stats.processed_tokens, "live: {original_stats:?}");
    assert_eq!(resumed, original);
    // ...and from a cold prefill of the same history (the JSON alone).
    let cold_folder = folder(model);
    let cold_id = cold_folder.store.import(&hearth_store::Import::parse(&json).unwrap()).unwrap().imported[0];
    let (cold, cold_stats) = turn(&cold_folder, cold_id, "And 3 + 3?", 16);
    assert_eq!(cold_stats.processed_tokens, cold_stats.prompt_tokens);
    assert_eq!(resumed, cold);
}

#[test]
fn a_bundle_resumes_in_another_data_folder_with_no_prefill_and_the_tokens_of_a_cold_prefill() {
    a_bundle_resumes_exactly(&default_model());
}

/// A hybrid's bundle carries its recurrent state (as checkpoints in the
/// cache file) beside the attention layers' keys and values.
#[test]
fn a_hybrid_moe_bundle_resumes_in_another_data_folder_with_no_prefill_and_the_tokens_of_a_cold_prefill() {
    use hearth_engine::random_model::{write, Experts, Recurrent, Shape};
    let files = tempfile::tempdir().unwrap();
    let path = files.path().join("qwen35moe-random.gguf");
    let shape = Shape {
        layers: 4,
        embd: 256,
        ffn: 256,
        heads: 4,
        kv_heads: 2,
        head_dim: Some(64),
        experts: Some(Experts { count: 8, used: 2, ffn: 128, dtype: "q8_0".into() }),
        recurrent: Some(Recurrent {
            state: 64,
            k_heads: 2,
            v_heads: 4,
            interval: 2,
            rope_dims: 16,
            shared_ffn: 128,
            mtp: false,
        }),
        gpt_oss: false,
        gemma4: None,
    };
    write(&path, &default_model(), &shape, "q8_0").unwrap();
    a_bundle_resumes_exactly(&path);
}

/// A Gemma 4 bundle: a cache whose shared layers hold nothing, and whose
/// layers have heads of two sizes.
#[test]
fn a_gemma4_bundle_resumes_in_another_data_folder_with_no_prefill_and_the_tokens_of_a_cold_prefill() {
    use hearth_engine::random_model::{write, Gemma4, Shape};
    let files = tempfile::tempdir().unwrap();
    let path = files.path().join("gemma4-random.gguf");
    let shape = Shape {
        layers: 7,
        embd: 256,
        ffn: 512,
        heads: 4,
        kv_heads: 1,
        head_dim: Some(128),
        experts: None,
        recurrent: None,
        gpt_oss: false,
        gemma4: Some(Gemma4 { per_layer: 64, shared_kv_layers: 3, head_dim_swa: 64, kv_heads_swa: 2, window: 16 }),
    };
    write(&path, &default_model(), &shape, "q8_0").unwrap();
    a_bundle_resumes_exactly(&path);
}

#[test]
fn a_bundle_without_its_model_imports_the_text_and_says_the_cache_was_skipped() {
    let a = folder(&default_model());
    let c = a.store.create_conversation().unwrap();
    a.store.set_conversation_settings(c.id, &greedy(8)).unwrap();
    turn(&a, c.id, "Hi", 8);
    let bundle = a.dir.path().join("chat.hearth");
    a.worker.export_bundle(&a.store, c.id, &bundle).unwrap();

    // No model loaded.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hearth.db")).unwrap();
    let worker = Worker::start(
        store.reopen().unwrap(),
        WorkerConfig::saving_caches_in(dir.path().join("caches")),
        Box::new(|_| {}),
    );
    let imported = worker.import_bundle(&store, &bundle).unwrap();
    assert_eq!(imported.cache, CacheImport::Skipped);
    assert!(imported.cache_note.as_deref().unwrap().contains("no model is loaded"), "{:?}", imported.cache_note);
    assert_eq!(store.thread(imported.report.imported[0]).unwrap().len(), 2);
    assert!(!dir.path().join("caches").join(format!("{}.session", imported.report.imported[0])).exists());

    // Another model: the manifest names other bytes.
    let other = rewrite(&bundle, a.dir.path().join("other.hearth"), |name, bytes| {
        if name == "bundle.json" {
            let mut m: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            m["model"]["sha256"] = "0".repeat(64).into();
            m["model"]["name"] = "Qwen3-0.6B-Q4_K_M.gguf".into();
            serde_json::to_vec(&m).unwrap()
        } else {
            bytes
        }
    });
    let b = folder(&default_model());
    let imported = b.worker.import_bundle(&b.store, &other).unwrap();
    assert_eq!(imported.cache, CacheImport::Skipped);
    assert!(
        imported.cache_note.as_deref().unwrap().contains("another model (Qwen3-0.6B-Q4_K_M.gguf)"),
        "{:?}",
        imported.cache_note
    );
    assert_eq!(b.store.thread(imported.report.imported[0]).unwrap().len(), 2);

    // Saved caches turned off: the text, not the cache.
    let off = folder(&default_model());
    off.worker.set_budgets(hearth_worker::CacheBudgets { memory_mb: 512, disk_mb: 0 });
    let imported = off.worker.import_bundle(&off.store, &bundle).unwrap();
    assert_eq!(
        (imported.cache, imported.cache_note.as_deref()),
        (CacheImport::Skipped, Some("saved caches are turned off (disk budget 0)"))
    );
    assert_eq!(conversation_count(&off.store), 1);

    // The same conversation again adds nothing, nor its cache.
    let again = b.worker.import_bundle(&b.store, &bundle).unwrap();
    assert_eq!((again.report.imported.len(), again.report.skipped_duplicates), (0, 1));
    assert_eq!(
        (again.cache, again.cache_note.as_deref()),
        (CacheImport::Skipped, Some("this conversation is already here"))
    );
    assert_eq!(conversation_count(&b.store), 1);
}

/// Writes a copy of the zip at `from` with each member passed through `edit`.
fn rewrite(from: &Path, to: PathBuf, edit: impl Fn(&str, Vec<u8>) -> Vec<u8>) -> PathBuf {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(from).unwrap()).unwrap();
    let mut members = Vec::new();
    for i in 0..zip.len() {
        let mut m = zip.by_index(i).unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut m, &mut bytes).unwrap();
        members.push((m.name().unwrap().to_string(), bytes));
    }
    write_zip(&to, members.into_iter().map(|(n, b)| (n.clone(), edit(&n, b))).collect());
    to
}

fn write_zip(to: &Path, members: Vec<(String, Vec<u8>)>) {
    let mut w = zip::ZipWriter::new(std::fs::File::create(to).unwrap());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated).large_file(true);
    for (name, bytes) in members {
        w.start_file(name, opts).unwrap();
        w.write_all(&bytes).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn hostile_and_broken_bundles_are_refused_and_change_nothing() {
    let a = folder(&default_model());
    let c = a.store.create_conversation().unwrap();
    a.store.set_conversation_settings(c.id, &greedy(4)).unwrap();
    turn(&a, c.id, "Hi", 4);
    let good = a.dir.path().join("good.hearth");
    a.worker.export_bundle(&a.store, c.id, &good).unwrap();
    let read = |name: &str| {
        let mut zip = zip::ZipArchive::new(std::fs::File::open(&good).unwrap()).unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut zip.by_name(name).unwrap(), &mut bytes).unwrap();
        bytes
    };
    let (manifest, conversation, cache) = (read("bundle.json"), read("conversation.json"), read("cache.session"));
    let dir = a.dir.path();
    let case = |name: &str, members: Vec<(&str, Vec<u8>)>| {
        let path = dir.join(format!("{name}.hearth"));
        write_zip(&path, members.into_iter().map(|(n, b)| (n.to_string(), b)).collect());
        path
    };
    let mut newer: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    newer["version"] = 2.into();
    let mut torn_cache = cache.clone();
    torn_cache.truncate(cache.len() - 100);
    let truncated = dir.join("truncated.hearth");
    let whole = std::fs::read(&good).unwrap();
    std::fs::write(&truncated, &whole[..whole.len() / 2]).unwrap();
    let not_zip = dir.join("notes.hearth");
    std::fs::write(&not_zip, b"PK\x03\x04 but nothing after").unwrap();
    // 300 MB of spaces deflate to a few hundred KB: a zip bomb for the 256 MB limit.
    let bomb = vec![b' '; 300 << 20];

    let cases: Vec<(PathBuf, &str)> = vec![
        (
            case(
                "zip-slip",
                vec![
                    ("bundle.json", manifest.clone()),
                    ("conversation.json", conversation.clone()),
                    ("../../evil.json", b"{}".to_vec()),
                ],
            ),
            "\"../../evil.json\", which is not part of a bundle",
        ),
        (
            case(
                "absolute",
                vec![
                    ("/etc/cron.d/evil", b"x".to_vec()),
                    ("bundle.json", manifest.clone()),
                    ("conversation.json", conversation.clone()),
                ],
            ),
            "\"/etc/cron.d/evil\", which is not part of a bundle",
        ),
        (
            case(
                "big-manifest",
                vec![("bundle.json", vec![b' '; 2 << 20]), ("conversation.json", conversation.clone())],
            ),
            "\"bundle.json\" is 2 MB; the limit is 1 MB",
        ),
        (
            case("bomb", vec![("bundle.json", manifest.clone()), ("conversation.json", bomb)]),
            "\"conversation.json\" is 300 MB; the limit is 256 MB",
        ),
        (
            case(
                "newer",
                vec![
                    ("bundle.json", serde_json::to_vec(&newer).unwrap()),
                    ("conversation.json", conversation.clone()),
                    ("cache.session", cache.clone()),
                ],
            ),
            "newer Hearth",
        ),
        (
            case("no-conversation", vec![("bundle.json", manifest.clone()), ("cache.session", cache.clone())]),
            "no conversation.json",
        ),
        (
            case(
                "bad-json",
                vec![
                    ("bundle.json", manifest.clone()),
                    ("conversation.json", b"{\"format\": \"hearth-conversation\"".to_vec()),
                    ("cache.session", cache.clone()),
                ],
            ),
            "not JSON",
        ),
        (
            case("no-cache", vec![("bundle.json", manifest.clone()), ("conversation.json", conversation.clone())]),
            "manifest and its cache disagree",
        ),
        (truncated, "not a zip archive"),
        (not_zip, "not a zip archive"),
    ];
    let b = folder(&default_model());
    for (path, want) in &cases {
        let err = b.worker.import_bundle(&b.store, path).unwrap_err();
        assert_eq!(err.kind, hearth_worker::error::ErrorKind::BadImport, "{path:?}: {err:?}");
        assert!(err.message.contains(want), "{path:?}: {} does not say {want:?}", err.message);
        assert_eq!(conversation_count(&b.store), 0, "{path:?} imported something");
        assert_eq!(std::fs::read_dir(b.dir.path().join("caches")).map_or(0, |d| d.count()), 0, "{path:?} left a file");
    }

    // A damaged cache costs only the cache: the text comes in, the cache is skipped.
    let torn = case(
        "torn-cache",
        vec![("bundle.json", manifest), ("conversation.json", conversation), ("cache.session", torn_cache)],
    );
    let imported = b.worker.import_bundle(&b.store, &torn).unwrap();
    assert_eq!(imported.cache, CacheImport::Skipped);
    assert!(imported.cache_note.as_deref().unwrap().contains("damaged"), "{:?}", imported.cache_note);
    assert_eq!(conversation_count(&b.store), 1);
}
