//! Get models' download queue (`HubState`) against the test Hub on
//! 127.0.0.1 (`tests/hub/hub_server.py`, its files sent slowly so every
//! state can be caught): downloads run one at a time and the next waits
//! queued; Cancel of a queued one leaves nothing; Cancel of a split model
//! after its first part is whole deletes that part too; Pause keeps what
//! arrived and Resume finishes it, and the finished model is handed on once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hearth_app::config::AppConfig;
use hearth_app::hub::{DownloadAction, HubDownload, HubDownloadState, HubState};
use hearth_hub::{group_quants, Quant};

struct TestHub {
    child: Child,
    url: String,
    _repos: tempfile::TempDir,
}

impl Drop for TestHub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TestHub {
    /// `test-org/split-GGUF`: a random-weight model in two parts (~19 and
    /// ~6 MB: its tensors halved in file order, the embeddings first);
    /// `test-org/one-GGUF`: the same model in one file.
    fn start() -> Self {
        let repos = tempfile::tempdir().unwrap();
        let one = repos.path().join("test-org/one-GGUF");
        let split = repos.path().join("test-org/split-GGUF");
        std::fs::create_dir_all(&one).unwrap();
        std::fs::create_dir_all(&split).unwrap();
        let shape = hearth_engine::random_model::Shape::dense(16, 256, 512, 4, 2);
        let default_model = hearth_engine::paths::default_model_path(|k| std::env::var_os(k));
        let whole = one.join("one-Q8_0.gguf");
        hearth_engine::random_model::write(&whole, &default_model, &shape, "q8_0").unwrap();
        let mut source = hearth_engine::GgufFile::open(&whole).unwrap();
        hearth_engine::gguf_writer::write_split(&mut source, &split.join("split-Q8_0-00001-of-00002.gguf"), 2).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/hub/hub_server.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(repos.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the test Hub");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.split_whitespace().nth(1).unwrap_or_else(|| panic!("the server said {line:?}")).to_string();
        Self { child, url, _repos: repos }
    }

    fn post(&self, path: &str, body: &str) {
        let host = self.url.trim_start_matches("http://");
        let mut s = TcpStream::connect(host).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200"), "{reply}");
    }

    /// Every file from now on sent at `rate` bytes a second a connection.
    fn slow(&self, rate: u64) {
        self.post("/_fault", &format!(r#"{{"kind": "slow", "rate": {rate}, "times": 1000}}"#));
    }

    fn fast(&self) {
        self.post("/_log/clear", "{}");
    }
}

fn quant(state: &HubState, repo: &str) -> (String, Quant) {
    let details = state.hub().repo(repo, None).unwrap();
    let (quants, _) = group_quants(&details.files);
    assert_eq!(quants.len(), 1, "{quants:?}");
    (details.commit, quants[0].clone())
}

fn wait_for(state: &HubState, what: &str, done: impl Fn(&[HubDownload]) -> bool) -> Vec<HubDownload> {
    let start = Instant::now();
    loop {
        let shown = state.downloads();
        if done(&shown) {
            return shown;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "waited 120 s for {what}: {shown:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn state_of(shown: &[HubDownload], id: u32) -> Option<HubDownloadState> {
    shown.iter().find(|d| d.id == id).map(|d| d.state)
}

/// The cache's files of `repo` (blobs, snapshot links, part files).
fn files_of(cache: &Path, repo: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() && !path.is_symlink() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&cache.join(hearth_hub::repo_folder(repo)), &mut out);
    out.retain(|p| !p.components().any(|c| c.as_os_str() == "refs"));
    out
}

#[test]
fn downloads_queue_one_at_a_time_and_cancel_pause_and_resume_each() {
    let hub = TestHub::start();
    let home = tempfile::tempdir().unwrap();
    let cache = home.path().join("hf");
    let vars = |k: &str| match k {
        "HF_ENDPOINT" => Some(hub.url.clone().into()),
        "HF_HUB_CACHE" => Some(cache.clone().into_os_string()),
        "HOME" => Some(home.path().into()),
        _ => None,
    };
    let config = AppConfig::from_vars(vars);
    let done: Arc<Mutex<Vec<HubDownload>>> = Arc::default();
    let done_sink = done.clone();
    let state = HubState::new(&config, Box::new(|_| {}), Box::new(move |d| done_sink.lock().unwrap().push(d.clone())));
    let (split_commit, split) = quant(&state, "test-org/split-GGUF");
    assert_eq!(split.files.len(), 2, "two parts, one quant");
    let (one_commit, one) = quant(&state, "test-org/one-GGUF");

    // 2 MB/s: the second part takes about 3 s, so the states below are
    // each caught while they last.
    hub.slow(2_000_000);
    let first = state.enqueue("test-org/split-GGUF", &split_commit, split.clone()).unwrap();
    let second = state.enqueue("test-org/one-GGUF", &one_commit, one.clone()).unwrap();
    assert_eq!(state.enqueue("test-org/one-GGUF", &one_commit, one.clone()).unwrap(), second, "queued once");
    let shown = wait_for(&state, "the first to run", |s| state_of(s, first) == Some(HubDownloadState::Running));
    assert_eq!(state_of(&shown, second), Some(HubDownloadState::Queued), "one runs at a time");

    // Cancel while queued: gone, and nothing of it in the cache.
    state.act(second, DownloadAction::Cancel).unwrap();
    assert_eq!(state_of(&state.downloads(), second), None);
    assert!(files_of(&cache, "test-org/one-GGUF").is_empty());

    // Cancel once the first part is whole: both parts go.
    let first_blob = state.cache.blob_path("test-org/split-GGUF", split.files[0].sha256.as_deref().unwrap());
    let start = Instant::now();
    while !first_blob.is_file() {
        assert!(start.elapsed() < Duration::from_secs(120), "the first part never arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(state_of(&state.downloads(), first), Some(HubDownloadState::Running), "the second part is slow");
    state.act(first, DownloadAction::Cancel).unwrap();
    wait_for(&state, "the cancel", |s| state_of(s, first).is_none());
    assert_eq!(files_of(&cache, "test-org/split-GGUF"), Vec::<PathBuf>::new(), "a cancelled model leaves nothing");

    // Pause keeps what arrived; Resume finishes it, handed on once.
    let third = state.enqueue("test-org/split-GGUF", &split_commit, split.clone()).unwrap();
    assert_ne!(third, first, "an id is never reused");
    wait_for(&state, "bytes to arrive", |s| s.iter().any(|d| d.id == third && d.downloaded > 0));
    state.act(third, DownloadAction::Pause).unwrap();
    wait_for(&state, "the pause", |s| state_of(s, third) == Some(HubDownloadState::Paused));
    assert!(files_of(&cache, "test-org/split-GGUF").iter().any(|p| p.to_string_lossy().contains(".hearth-part")));
    assert!(state.act(third, DownloadAction::Pause).is_err(), "a paused download cannot pause");
    hub.fast();
    state.act(third, DownloadAction::Resume).unwrap();
    let shown = wait_for(&state, "the download to finish", |s| state_of(s, third) == Some(HubDownloadState::Done));
    let finished = shown.iter().find(|d| d.id == third).unwrap();
    assert_eq!((finished.downloaded, finished.total), (split.size, split.size));
    let path = PathBuf::from(finished.path.as_deref().unwrap());
    assert_eq!(path.file_name().unwrap(), "split-Q8_0-00001-of-00002.gguf");
    let engine = hearth_engine::Engine::open(&path).unwrap();
    assert_eq!(engine.part_paths().len(), 2);
    let start = Instant::now();
    while done.lock().unwrap().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "the finished download was not handed on");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let handed: Vec<u32> = done.lock().unwrap().iter().map(|d| d.id).collect();
    assert_eq!(handed, [third]);
    assert!(!files_of(&cache, "test-org/split-GGUF").iter().any(|p| p.to_string_lossy().contains(".hearth-part")));
}
