//! The Hub client against a Hub-compatible server on 127.0.0.1
//! (`tests/hub/hub_server.py`, written from the Hub's API documentation,
//! with a second host as its CDN), serving GGUF files written here; the
//! official `huggingface_hub` client downloads from the same server into
//! the same cache as the cross-check. Nothing reaches the internet.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use hearth_engine::{Engine, ModelFacts};
use hearth_hub::{group_quants, Control, FetchOptions, Fit, HfCache, Hub, HubError, SearchSort, ToFetch};
use serde_json::{json, Value};

const TOKEN: &str = "hf_test_token";

struct Server {
    child: Child,
    hub: String,
    _repos: tempfile::TempDir,
    /// The files as written, by repo path.
    files: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn fault(&self, fault: Value) {
        post(&format!("{}/_fault", self.hub), fault);
    }

    fn clear(&self) {
        post(&format!("{}/_log/clear", self.hub), json!({}));
    }

    fn log(&self) -> Vec<Value> {
        let text = ureq::get(&format!("{}/_log", self.hub)).call().unwrap().into_body().read_to_string().unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn source(&self, repo_file: &str) -> Vec<u8> {
        std::fs::read(self.files.join(repo_file)).unwrap()
    }
}

fn post(url: &str, body: Value) {
    ureq::post(url).header("Content-Type", "application/json").send(body.to_string()).unwrap();
}

fn default_model() -> PathBuf {
    hearth_engine::paths::default_model_path(|k| std::env::var_os(k))
}

/// A random-weight model with the default model's vocabulary (~13 MB).
fn write_model(path: &Path, layers: usize) {
    let shape = hearth_engine::random_model::Shape::dense(layers, 256, 512, 4, 2);
    hearth_engine::random_model::write(path, &default_model(), &shape, "q8_0").unwrap();
}

/// Repos: `test-org/tiny-GGUF` (a Q8_0 file, the same model as F16 in two
/// parts, a projector, a README), `test-org/gated-GGUF` and
/// `other-org/popular-GGUF`.
fn start() -> Server {
    let repos = tempfile::tempdir().unwrap();
    let tiny = repos.path().join("test-org/tiny-GGUF");
    std::fs::create_dir_all(&tiny).unwrap();
    write_model(&tiny.join("tiny-Q8_0.gguf"), 2);
    let mut source = hearth_engine::GgufFile::open(tiny.join("tiny-Q8_0.gguf")).unwrap();
    hearth_engine::gguf_writer::write_split(&mut source, &tiny.join("tiny-F16-00001-of-00002.gguf"), 2).unwrap();
    std::fs::copy(tiny.join("tiny-F16-00002-of-00002.gguf"), tiny.join("mmproj-tiny-F16.gguf")).unwrap();
    std::fs::write(tiny.join("README.md"), "# Tiny\n\nA <b>test</b> model.\n").unwrap();
    std::fs::write(tiny.join(".repo.json"), r#"{"downloads": 100, "likes": 5, "license": "mit", "trendingScore": 3, "lastModified": "2026-11-01T00:00:00.000Z"}"#).unwrap();
    let gated = repos.path().join("test-org/gated-GGUF");
    std::fs::create_dir_all(&gated).unwrap();
    std::fs::copy(tiny.join("tiny-F16-00002-of-00002.gguf"), gated.join("gated-Q4_K_M.gguf")).unwrap();
    std::fs::write(
        gated.join(".repo.json"),
        r#"{"downloads": 50, "gated": "manual", "trendingScore": 9, "lastModified": "2026-10-01T00:00:00.000Z"}"#,
    )
    .unwrap();
    let popular = repos.path().join("other-org/popular-GGUF");
    std::fs::create_dir_all(&popular).unwrap();
    std::fs::copy(tiny.join("tiny-F16-00002-of-00002.gguf"), popular.join("popular-Q2_K.gguf")).unwrap();
    std::fs::write(
        popular.join(".repo.json"),
        r#"{"downloads": 500, "likes": 1, "trendingScore": 1, "lastModified": "2026-06-01T00:00:00.000Z"}"#,
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/hub/hub_server.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(repos.path())
        .args(["--token", TOKEN])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the test Hub");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let hub = line.split_whitespace().nth(1).unwrap_or_else(|| panic!("the server said {line:?}")).to_string();
    Server { child, hub, files: repos.path().to_path_buf(), _repos: repos }
}

fn cdn_saw_a_token(server: &Server) -> bool {
    server.log().iter().any(|r| r["host"] == "cdn" && r["authorization"] == true)
}

fn small_chunks() -> FetchOptions {
    FetchOptions { connections: 4, chunk: 1 << 20, ..FetchOptions::default() }
}

/// Search in each order, with the facts a result shows. The test Hub, as
/// the real one, returns only the properties a search expands, so a fact
/// the client forgets to ask for is missing here too.
#[test]
fn search_lists_gguf_repos_in_each_order_with_their_facts() {
    let server = start();
    let hub = Hub::new(&server.hub, None);
    let ids = |sort| -> Vec<String> { hub.search("", sort, 10).unwrap().into_iter().map(|r| r.id).collect() };
    let (popular, tiny, gated) = ("other-org/popular-GGUF", "test-org/tiny-GGUF", "test-org/gated-GGUF");
    assert_eq!(ids(SearchSort::Downloads), [popular, tiny, gated]);
    assert_eq!(ids(SearchSort::Trending), [gated, tiny, popular]);
    assert_eq!(ids(SearchSort::Recent), [tiny, gated, popular]);
    assert_eq!(ids(SearchSort::Likes), [tiny, popular, gated]);
    let found = hub.search("", SearchSort::Downloads, 10).unwrap();
    let tiny = &found[1];
    assert_eq!((tiny.downloads, tiny.likes, tiny.license.as_deref(), tiny.gated), (100, 5, Some("mit"), false));
    assert_eq!(tiny.last_modified.as_deref(), Some("2026-11-01T00:00:00.000Z"));
    assert!(found[2].gated);
    assert_eq!(hub.search("", SearchSort::Downloads, 2).unwrap().len(), 2, "the limit is the Hub's");
    let found = hub.search("tiny", SearchSort::Likes, 10).unwrap();
    assert_eq!(found.len(), 1);
}

#[test]
fn a_repo_lists_its_quants_with_split_parts_as_one_and_its_readme() {
    let server = start();
    let hub = Hub::new(&server.hub, None);
    let repo = hub.repo("test-org/tiny-GGUF", None).unwrap();
    assert_eq!(repo.commit.len(), 40);
    let (quants, projectors) = group_quants(&repo.files);
    let names: Vec<(&str, usize)> = quants.iter().map(|q| (q.name.as_str(), q.files.len())).collect();
    assert_eq!(names, [("Q8_0", 1), ("F16", 2)]);
    assert_eq!(projectors.len(), 1);
    assert!(projectors[0].path.starts_with("mmproj"));
    assert!(quants.iter().flat_map(|q| &q.files).all(|f| f.sha256.as_ref().is_some_and(|s| s.len() == 64)));
    let readme = hub.readme("test-org/tiny-GGUF", &repo.commit).unwrap().unwrap();
    assert!(readme.contains("A <b>test</b> model."));
    let missing = hub.repo("test-org/nothing-here", None).unwrap_err();
    assert!(matches!(missing, HubError::NotFound { .. }), "{missing}");
}

/// A model's facts from its headers alone: one ranged request per part,
/// the same facts as the whole file on disk, and a fit label from them.
#[test]
fn facts_come_from_one_range_request_per_part() {
    let server = start();
    let hub = Hub::new(&server.hub, None);
    let repo = hub.repo("test-org/tiny-GGUF", None).unwrap();
    let (quants, _) = group_quants(&repo.files);
    for quant in &quants {
        server.clear();
        let remote = hub.facts("test-org/tiny-GGUF", &repo.commit, quant).unwrap();
        let local = ModelFacts::read(server.files.join("test-org/tiny-GGUF").join(quant.first())).unwrap();
        assert_eq!(remote, local, "{}", quant.name);
        let ranged: Vec<Value> = server.log().into_iter().filter(|r| r["host"] == "cdn").collect();
        assert_eq!(ranged.len(), quant.files.len(), "{}: {ranged:?}", quant.name);
        assert!(ranged.iter().all(|r| r["range"].as_str().is_some_and(|s| s.starts_with("bytes=0-"))));
    }
    let facts = hub.facts("test-org/tiny-GGUF", &repo.commit, &quants[0]).unwrap();
    assert_eq!(facts.context_length, 4096);
    assert_eq!(Fit::judge(&facts, u64::MAX), Fit::Fits(4096));
    assert_eq!(Fit::judge(&facts, facts.memory_estimate(4096)), Fit::Fits(4096));
    assert_eq!(Fit::judge(&facts, facts.memory_estimate(4096) - 1), Fit::FitsAt(2048));
    assert_eq!(Fit::judge(&facts, facts.tensor_bytes / 2), Fit::TooBig);
}

/// A download lands in the Hugging Face layout, opens whole (both parts),
/// and the official client finds the same files there and fetches nothing.
#[test]
fn downloads_land_in_the_hf_cache_and_huggingface_hub_shares_them() {
    let server = start();
    let hub = Hub::new(&server.hub, None);
    let repo = hub.repo("test-org/tiny-GGUF", None).unwrap();
    let (quants, _) = group_quants(&repo.files);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = HfCache::new(cache_dir.path());
    let f16 = &quants[1];
    let mut reports = 0;
    let paths = hub
        .download(
            &cache,
            ToFetch { repo_id: "test-org/tiny-GGUF", commit: &repo.commit, files: &f16.files },
            small_chunks(),
            &Control::default(),
            |p| {
                assert!(p.downloaded <= p.total);
                reports += 1;
            },
        )
        .unwrap();
    assert!(reports > 0);
    let snapshot = cache_dir.path().join("models--test-org--tiny-GGUF/snapshots").join(&repo.commit);
    assert_eq!(paths[0], snapshot.join("tiny-F16-00001-of-00002.gguf"));
    for (path, file) in paths.iter().zip(&f16.files) {
        assert_eq!(std::fs::read(path).unwrap(), server.source(&format!("test-org/tiny-GGUF/{}", file.path)));
        let blob = cache_dir.path().join("models--test-org--tiny-GGUF/blobs").join(file.sha256.as_ref().unwrap());
        assert!(blob.is_file() && std::fs::symlink_metadata(path).unwrap().file_type().is_symlink());
    }
    let refs = std::fs::read_to_string(cache_dir.path().join("models--test-org--tiny-GGUF/refs/main")).unwrap();
    assert_eq!(refs, repo.commit);
    let engine = Engine::open(&paths[0]).unwrap();
    assert_eq!(engine.part_paths().len(), 2);
    assert!(!cdn_saw_a_token(&server));

    // The official client, same server and cache: the file is already there.
    let Some(python) = hub_client_python() else { return };
    server.clear();
    let script = format!(
        "from huggingface_hub import hf_hub_download\n\
         print(hf_hub_download('test-org/tiny-GGUF', 'tiny-F16-00002-of-00002.gguf', cache_dir={:?}))",
        cache_dir.path().to_str().unwrap()
    );
    let theirs = run_python(&python, &server, &script);
    assert_eq!(PathBuf::from(theirs.trim()), paths[1]);
    assert!(!server.log().iter().any(|r| r["host"] == "cdn"), "the official client fetched it again");

    // And the other way: what it fetched, Hearth takes from the cache.
    let script = format!(
        "from huggingface_hub import hf_hub_download\n\
         print(hf_hub_download('test-org/tiny-GGUF', 'tiny-Q8_0.gguf', cache_dir={:?}))",
        cache_dir.path().to_str().unwrap()
    );
    let theirs = PathBuf::from(run_python(&python, &server, &script).trim());
    assert_eq!(std::fs::read(&theirs).unwrap(), server.source("test-org/tiny-GGUF/tiny-Q8_0.gguf"));
    server.clear();
    let ours = hub
        .download(
            &cache,
            ToFetch { repo_id: "test-org/tiny-GGUF", commit: &repo.commit, files: &quants[0].files },
            small_chunks(),
            &Control::default(),
            |_| {},
        )
        .unwrap();
    assert_eq!(ours[0], theirs);
    assert!(!server.log().iter().any(|r| r["host"] == "cdn"), "Hearth fetched a cached file again");
}

/// `HEARTH_HUB_PYTHON`, else the venv `scripts/setup-hub-client.sh` makes;
/// required where `HEARTH_REQUIRE_HUB_CLIENT` is set (`./hearth test`).
fn hub_client_python() -> Option<PathBuf> {
    let python = std::env::var_os("HEARTH_HUB_PYTHON").map(PathBuf::from).or_else(|| {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(cache.join("hearth/hub-client/venv/bin/python"))
    })?;
    if python.is_file() {
        return Some(python);
    }
    assert!(
        std::env::var_os("HEARTH_REQUIRE_HUB_CLIENT").is_none(),
        "huggingface_hub's venv is missing at {}: run scripts/setup-hub-client.sh",
        python.display()
    );
    eprintln!("skipped the huggingface_hub cross-check: no venv at {}", python.display());
    None
}

fn run_python(python: &Path, server: &Server, script: &str) -> String {
    let out = Command::new(python)
        .args(["-c", script])
        .env("HF_ENDPOINT", &server.hub)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_ENABLE_HF_TRANSFER", "0")
        .env_remove("HF_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Pause keeps the chunks fetched; the next download fetches only the rest.
#[test]
fn pause_then_resume_fetches_only_what_is_missing() {
    let server = start();
    let hub = Hub::new(&server.hub, None);
    let repo = hub.repo("test-org/tiny-GGUF", None).unwrap();
    let (quants, _) = group_quants(&repo.files);
    let file = &quants[0].files[..];
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = HfCache::new(cache_dir.path());
    // 4 MB/s per connection: a few seconds for the file.
    server.fault(json!({"kind": "slow", "rate": 4_000_000, "times": 1000}));
    let control = Control::default();
    let err = hub
        .download(
            &cache,
            ToFetch { repo_id: "test-org/tiny-GGUF", commit: &repo.commit, files: file },
            small_chunks(),
            &control,
            |p| {
                if p.downloaded > p.total / 3 {
                    control.pause();
                }
            },
        )
        .unwrap_err();
    assert!(matches!(err, HubError::Paused), "{err}");
    let blobs = cache_dir.path().join("models--test-org--tiny-GGUF/blobs");
    let part =
        std::fs::read_dir(&blobs).unwrap().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".hearth-part"));
    assert!(part, "the pause kept no part file");
    server.clear();
    let paths = hub
        .download(
            &cache,
            ToFetch { repo_id: "test-org/tiny-GGUF", commit: &repo.commit, files: file },
            small_chunks(),
            &Control::default(),
            |_| {},
        )
        .unwrap();
    assert_eq!(std::fs::read(&paths[0]).unwrap(), server.source("test-org/tiny-GGUF/tiny-Q8_0.gguf"));
    let fetched: u64 = server
        .log()
        .iter()
        .filter(|r| r["host"] == "cdn")
        .filter_map(|r| {
            r["range"].as_str()?.strip_prefix("bytes=")?.split_once('-').map(|(a, b)| (a.to_string(), b.to_string()))
        })
        .map(|(a, b)| b.parse::<u64>().unwrap() + 1 - a.parse::<u64>().unwrap())
        .sum();
    assert!(fetched < file[0].size, "the resume fetched {fetched} of {} bytes", file[0].size);
}

/// Cancel leaves nothing of the file behind, in the blobs or the snapshot.
#[test]
fn cancel_leaves_no_partial_file() {
    let server = start();
    let hub = Hub::new(&server.hub, None);
    let repo = hub.repo("test-org/tiny-GGUF", None).unwrap();
    let (quants, _) = group_quants(&repo.files);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = HfCache::new(cache_dir.path());
    server.fault(json!({"kind": "slow", "rate": 4_000_000, "times": 1000}));
    let control = Control::default();
    let err = hub
        .download(
            &cache,
            ToFetch { repo_id: "test-org/tiny-GGUF", commit: &repo.commit, files: &quants[0].files },
            small_chunks(),
            &control,
            |p| {
                if p.downloaded > 0 {
                    control.cancel();
                }
            },
        )
        .unwrap_err();
    assert!(matches!(err, HubError::Cancelled), "{err}");
    let left: Vec<_> = walk(cache_dir.path()).into_iter().filter(|p| p.is_file()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// Bad transfers: a cut one resumes; wrong bytes, a wrong range, an HTML
/// page or a redirect loop fail by name and leave nothing to open.
#[test]
fn bad_transfers_resume_or_fail_clearly() {
    let server = start();
    let hub = Hub::new(&server.hub, None);
    let repo = hub.repo("test-org/tiny-GGUF", None).unwrap();
    let (quants, _) = group_quants(&repo.files);
    let files = &quants[0].files;
    let source = server.source("test-org/tiny-GGUF/tiny-Q8_0.gguf");
    let fetch = |faults: &[Value]| {
        server.clear();
        for f in faults {
            server.fault(f.clone());
        }
        let cache_dir = tempfile::tempdir().unwrap();
        let got = hub.download(
            &HfCache::new(cache_dir.path()),
            ToFetch { repo_id: "test-org/tiny-GGUF", commit: &repo.commit, files },
            small_chunks(),
            &Control::default(),
            |_| {},
        );
        let files: Vec<String> = walk(cache_dir.path())
            .into_iter()
            .filter(|p| p.is_file() || p.is_symlink())
            .map(|p| p.strip_prefix(cache_dir.path()).unwrap().to_string_lossy().into_owned())
            .collect();
        // A failed download leaves nothing a reader could open: no blob, no
        // link in a snapshot; only its part file, to resume from.
        if got.is_err() {
            let openable: Vec<&String> = files.iter().filter(|f| !f.contains(".hearth-part")).collect();
            assert!(openable.is_empty(), "a failed download left {openable:?}");
        }
        (got.map(|p| std::fs::read(&p[0]).unwrap()), files.len())
    };
    // Cut mid-chunk, twice: resumed from where each stopped.
    let (got, _) = fetch(&[json!({"kind": "cut", "after": 300_000, "times": 2})]);
    assert!(got.unwrap() == source);
    // Every request cut before its first byte: the tries run out with a
    // network error (a cut after some bytes is progress, and goes on).
    let (got, _) = fetch(&[json!({"kind": "cut", "after": 0, "times": 1000})]);
    assert!(matches!(got, Err(HubError::Network { .. })), "{:?}", got.err());
    // One byte flipped: the SHA-256 says so and the file is deleted.
    let (got, left) = fetch(&[json!({"kind": "corrupt"})]);
    match got {
        Err(HubError::Checksum { file, .. }) => assert_eq!(file, "tiny-Q8_0.gguf"),
        other => panic!("{:?}", other.err()),
    }
    assert_eq!(left, 0);
    let (got, _) = fetch(&[json!({"kind": "wrong-range", "times": 1000})]);
    assert!(matches!(&got, Err(HubError::NotTheFile { reason, .. }) if reason.contains("bytes")), "{:?}", got.err());
    let (got, _) = fetch(&[json!({"kind": "html", "times": 1000})]);
    assert!(matches!(&got, Err(HubError::NotTheFile { reason, .. }) if reason.contains("HTML")), "{:?}", got.err());
    let (got, _) = fetch(&[json!({"kind": "loop", "times": 1000})]);
    assert!(matches!(got, Err(HubError::RedirectLoop { .. })), "{:?}", got.err());
    // More than the disk holds: refused before a byte is fetched.
    server.clear();
    let cache_dir = tempfile::tempdir().unwrap();
    let options = FetchOptions { disk_reserve: u64::MAX / 2, ..small_chunks() };
    let err = hub
        .download(
            &HfCache::new(cache_dir.path()),
            ToFetch { repo_id: "test-org/tiny-GGUF", commit: &repo.commit, files },
            options,
            &Control::default(),
            |_| {},
        )
        .unwrap_err();
    assert!(matches!(err, HubError::DiskFull { .. }), "{err}");
    assert!(!server.log().iter().any(|r| r["host"] == "cdn"));
}

/// A gated repo without a token says so; with one it downloads, and the
/// token goes to the Hub only, never to the CDN it redirects to.
#[test]
fn a_gated_repo_needs_the_token_which_never_reaches_the_cdn() {
    let server = start();
    let repo_id = "test-org/gated-GGUF";
    let anonymous = Hub::new(&server.hub, None);
    let repo = anonymous.repo(repo_id, None).unwrap();
    assert!(repo.summary.gated);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = HfCache::new(cache_dir.path());
    let err = anonymous.download(
        &cache,
        ToFetch { repo_id, commit: &repo.commit, files: &repo.files },
        small_chunks(),
        &Control::default(),
        |_| {},
    );
    let err = err.unwrap_err();
    assert!(matches!(err, HubError::Gated { .. }), "{err}");
    assert!(err.to_string().contains("token"), "{err}");
    server.clear();
    let with_token = Hub::new(&server.hub, Some(TOKEN.into()));
    let paths = with_token
        .download(
            &cache,
            ToFetch { repo_id, commit: &repo.commit, files: &repo.files },
            small_chunks(),
            &Control::default(),
            |_| {},
        )
        .unwrap();
    assert_eq!(std::fs::read(&paths[0]).unwrap(), server.source("test-org/gated-GGUF/gated-Q4_K_M.gguf"));
    let log = server.log();
    assert!(log.iter().any(|r| r["host"] == "hub" && r["authorization"] == true));
    assert!(log.iter().any(|r| r["host"] == "cdn"));
    assert!(!cdn_saw_a_token(&server), "the token reached the CDN: {log:?}");
}

/// A home folder with a model file in it, to copy where another app keeps its models.
struct Home {
    dir: tempfile::TempDir,
    model: PathBuf,
}

impl Home {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("source.gguf");
        write_model(&model, 1);
        Self { dir, model }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The model copied to `rel`, its folders made.
    fn put(&self, rel: &str) -> PathBuf {
        let path = self.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::copy(&self.model, &path).unwrap();
        path
    }
}

/// Other apps' folders, shaped as each app writes them: every model is
/// listed in place under its app's name, and what Hearth cannot run is
/// listed with the reason.
#[test]
fn models_in_other_apps_folders_are_found_in_place_under_their_names() {
    use hearth_hub::{scan, FoundIn};
    let home = Home::new();
    let put = |rel: &str| home.put(rel);
    // LM Studio: publisher/repo/file, and an MLX model (a folder of safetensors).
    let lm = put(".lmstudio/models/lmstudio-community/Tiny-GGUF/Tiny-Q8_0.gguf");
    std::fs::create_dir_all(home.path().join(".lmstudio/models/mlx-community/Tiny-4bit")).unwrap();
    std::fs::write(home.path().join(".lmstudio/models/mlx-community/Tiny-4bit/model.safetensors"), b"{}").unwrap();
    // Ollama: a manifest naming its model layer's blob.
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let blob = put(&format!(".ollama/models/blobs/{}", digest.replace(':', "-")));
    let manifest = json!({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:aa", "size": 1},
        {"mediaType": "application/vnd.ollama.image.model", "digest": digest, "size": 1}]});
    let manifest_path = home.path().join(".ollama/models/manifests/registry.ollama.ai/library/tiny/8b");
    std::fs::create_dir_all(manifest_path.parent().unwrap()).unwrap();
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    // The Hugging Face cache, as huggingface_hub leaves it (a link to a blob).
    let hf_blob = put(".cache/huggingface/hub/models--org--Tiny-GGUF/blobs/abc");
    let snapshot = home.path().join(".cache/huggingface/hub/models--org--Tiny-GGUF/snapshots/c0ffee");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::os::unix::fs::symlink("../../blobs/abc", snapshot.join("Tiny-Q4_K_M.gguf")).unwrap();
    std::fs::create_dir_all(home.path().join(".cache/huggingface/hub/models--org--Tiny-GGUF/refs")).unwrap();
    std::fs::write(home.path().join(".cache/huggingface/hub/models--org--Tiny-GGUF/refs/main"), "c0ffee").unwrap();
    // llama.cpp's cache: a model of an unknown family, and a file that is no GGUF.
    let mut unknown = std::fs::read(&home.model).unwrap();
    let at = unknown.windows(5).position(|w| w == b"llama").unwrap();
    unknown[at + 3] = b'x';
    std::fs::create_dir_all(home.path().join(".cache/llama.cpp")).unwrap();
    std::fs::write(home.path().join(".cache/llama.cpp/org_Odd-GGUF_odd.gguf"), unknown).unwrap();
    std::fs::write(home.path().join(".cache/llama.cpp/notes.gguf"), b"not a model").unwrap();
    // Jan: a folder per model, named by it.
    let jan = put(".local/share/Jan/data/llamacpp/models/Tiny-Q4_0/model.gguf");

    let places = hearth_hub::default_places(hearth_hub::Platform::Linux, home.path(), |_| None);
    let found = scan(&places);
    let by_name =
        |name: &str| found.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("{name} not found in {found:#?}"));
    let lm_model = by_name("lmstudio-community/Tiny-GGUF/Tiny-Q8_0");
    assert_eq!((lm_model.found_in, &lm_model.path, lm_model.unusable.as_deref()), (FoundIn::LmStudio, &lm, None));
    assert_eq!(lm_model.architecture.as_deref(), Some("llama"));
    let ollama = by_name("tiny:8b");
    assert_eq!((ollama.found_in, &ollama.path, ollama.unusable.as_deref()), (FoundIn::Ollama, &blob, None));
    let hf = by_name("org/Tiny-GGUF:Q4_K_M");
    assert_eq!((hf.found_in, hf.unusable.as_deref()), (FoundIn::HuggingFace, None));
    assert_eq!(std::fs::canonicalize(&hf.path).unwrap(), std::fs::canonicalize(&hf_blob).unwrap());
    let mlx = by_name("mlx-community/Tiny-4bit");
    assert!(mlx.unusable.as_deref().is_some_and(|r| r.contains("safetensors")), "{mlx:?}");
    let odd = by_name("org_Odd-GGUF_odd");
    assert!(odd.unusable.as_deref().is_some_and(|r| r.contains("llaxa")), "{odd:?}");
    let notes = by_name("notes");
    assert_eq!(notes.unusable.as_deref(), Some("not a GGUF file"));
    let jan_model = by_name("Tiny-Q4_0");
    assert_eq!((jan_model.found_in, &jan_model.path, jan_model.unusable.as_deref()), (FoundIn::Jan, &jan, None));
    assert_eq!(found.len(), 7, "{found:#?}");
}

/// The apps' folders where macOS and Windows keep them (Windows' from
/// `APPDATA` and `LOCALAPPDATA`): each platform finds its own and not the
/// other's.
#[test]
fn other_apps_folders_are_found_where_macos_and_windows_keep_them() {
    use hearth_hub::{default_places, scan, FoundIn, Platform};
    let home = Home::new();
    let put = |rel: &str| drop(home.put(rel));
    put("Library/Caches/llama.cpp/org_Mac-GGUF_mac.gguf");
    put("Library/Application Support/Jan/data/llamacpp/models/Mac-Q4_0/model.gguf");
    put("Local/llama.cpp/org_Win-GGUF_win.gguf");
    put("Roaming/Jan/data/llamacpp/models/Win-Q8_0/model.gguf");
    put(".lmstudio/models/org/Both-GGUF/Both-Q8_0.gguf");
    let listed = |platform, var: &dyn Fn(&str) -> Option<PathBuf>| {
        let mut found: Vec<(FoundIn, String)> =
            scan(&default_places(platform, home.path(), var)).into_iter().map(|m| (m.found_in, m.name)).collect();
        found.sort_by(|a, b| a.1.cmp(&b.1));
        found
    };
    let both = (FoundIn::LmStudio, "org/Both-GGUF/Both-Q8_0".to_string());
    assert_eq!(
        listed(Platform::MacOs, &|_| None),
        [(FoundIn::Jan, "Mac-Q4_0".into()), both.clone(), (FoundIn::LlamaCpp, "org_Mac-GGUF_mac".into())]
    );
    let windows_vars = |k: &str| match k {
        "APPDATA" => Some(home.path().join("Roaming")),
        "LOCALAPPDATA" => Some(home.path().join("Local")),
        _ => None,
    };
    assert_eq!(
        listed(Platform::Windows, &windows_vars),
        [(FoundIn::Jan, "Win-Q8_0".into()), both, (FoundIn::LlamaCpp, "org_Win-GGUF_win".into())]
    );
}

/// A disk that fills while a file downloads: the download stops with a
/// disk-full error, nothing is opened half-written, and once there is room
/// again it resumes. A small tmpfs is the disk (mounting needs root, as the
/// CI machines are; elsewhere this test says it cannot run and passes).
#[test]
fn a_disk_that_fills_mid_download_says_so_and_resumes_later() {
    let mount = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"])
        .arg(mount.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(mount.path());
    let server = start();
    let hub = Hub::new(&server.hub, None);
    let repo = hub.repo("test-org/tiny-GGUF", None).unwrap();
    let (quants, _) = group_quants(&repo.files);
    let files = &quants[0].files;
    assert!(files[0].size > 8 << 20 && files[0].size < 20 << 20, "{}", files[0].size);
    let cache = HfCache::new(mount.path().join("hf"));
    let filler = mount.path().join("filler");
    let wanted = ToFetch { repo_id: "test-org/tiny-GGUF", commit: &repo.commit, files };
    let options = FetchOptions { disk_reserve: 0, ..small_chunks() };
    server.fault(json!({"kind": "slow", "rate": 4_000_000, "times": 1000}));
    let mut filled = false;
    let err = hub
        .download(&cache, wanted, options, &Control::default(), |p| {
            // Another program takes the rest of the disk part-way.
            if !filled && p.downloaded > 2 << 20 {
                filled = true;
                let _ = std::fs::write(&filler, vec![1u8; 24 << 20]);
            }
        })
        .unwrap_err();
    assert!(matches!(err, HubError::DiskFull { .. }), "{err}");
    assert!(err.to_string().contains("tiny-Q8_0.gguf"), "{err}");
    let snapshot = cache.snapshot_path("test-org/tiny-GGUF", &repo.commit, &files[0].path);
    assert!(!snapshot.exists(), "nothing half-written is there to open");
    std::fs::remove_file(&filler).unwrap();
    server.clear();
    let paths = hub.download(&cache, wanted, options, &Control::default(), |_| {}).unwrap();
    assert_eq!(std::fs::read(&paths[0]).unwrap(), server.source("test-org/tiny-GGUF/tiny-Q8_0.gguf"));
}
