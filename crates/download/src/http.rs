use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::{hex, io, DownloadError, Result};

/// How far a download has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub downloaded: u64,
    /// `None` when the server does not say.
    pub total: Option<u64>,
}

/// How long a download may take and how big it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// To open the connection.
    pub connect: Duration,
    /// With no bytes arriving (the response's headers, or the body).
    pub stall: Duration,
    /// For the whole transfer.
    pub overall: Duration,
    /// The file's size, when it is known: a server that would send more is
    /// refused before the checksum is even tried.
    pub size: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(20),
            stall: Duration::from_secs(30),
            overall: Duration::from_secs(4 * 3600),
            size: None,
        }
    }
}

/// How often a waiting download looks at its cancel flag: Cancel returns
/// within this, even while the server sends nothing.
const POLL: Duration = Duration::from_millis(100);

/// Downloads `url` to `dest`, resuming a `dest.part` left by an earlier try,
/// and keeps the file only if its SHA-256 is `sha256` (hex). The part file
/// survives network errors, timeouts and cancellation (so the next call
/// resumes) but not a checksum mismatch or a file past its size.
pub fn download(
    url: &str,
    dest: &Path,
    sha256: &str,
    cancel: &AtomicBool,
    on_progress: impl FnMut(Progress),
) -> Result<PathBuf> {
    download_with(url, dest, sha256, Limits::default(), cancel, on_progress)
}

/// `download` within `limits`. The transfer runs on its own thread, so a
/// stalled server never blocks the caller past `POLL` after Cancel.
pub fn download_with(
    url: &str,
    dest: &Path,
    sha256: &str,
    limits: Limits,
    cancel: &AtomicBool,
    mut on_progress: impl FnMut(Progress),
) -> Result<PathBuf> {
    let part = part_path(dest);
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    if limits.size.is_some_and(|size| have > size) {
        let _ = std::fs::remove_file(&part);
        have = 0;
    }
    let started = Instant::now();
    let transfer = Transfer::start(url, have, limits);
    let (status, length) = match transfer.next(cancel, limits, started)? {
        Message::Response { status, length } => (status, length),
        _ => return Err(DownloadError::Network("the transfer ended before its response".into())),
    };
    let total = match status {
        206 => length.map(|l| l + have),
        200 => {
            // The server ignored the range: start over.
            have = 0;
            length
        }
        416 if have > 0 => {
            // Everything is already here; check it below.
            Some(have)
        }
        _ => return Err(DownloadError::Http { url: url.to_string(), status }),
    };
    if let (Some(total), Some(size)) = (total, limits.size) {
        if total > size {
            let _ = std::fs::remove_file(&part);
            return Err(DownloadError::TooBig { url: url.to_string(), size });
        }
    }
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .append(have > 0)
        .truncate(have == 0)
        .open(&part)
        .map_err(io(&part))?;
    on_progress(Progress { downloaded: have, total });
    if status != 416 {
        let mut since_report = 0u64;
        loop {
            let chunk = match transfer.next(cancel, limits, started) {
                Ok(Message::Data(chunk)) => chunk,
                Ok(Message::End) => break,
                Ok(Message::Response { .. }) => unreachable!("one response per transfer"),
                Err(e) => {
                    file.flush().map_err(io(&part))?;
                    return Err(e);
                }
            };
            if limits.size.is_some_and(|size| have + chunk.len() as u64 > size) {
                drop(file);
                let _ = std::fs::remove_file(&part);
                return Err(DownloadError::TooBig { url: url.to_string(), size: limits.size.unwrap_or(0) });
            }
            file.write_all(&chunk).map_err(io(&part))?;
            have += chunk.len() as u64;
            since_report += chunk.len() as u64;
            if since_report >= 1 << 20 {
                since_report = 0;
                on_progress(Progress { downloaded: have, total });
            }
        }
        file.sync_all().map_err(io(&part))?;
        on_progress(Progress { downloaded: have, total });
    }
    drop(file);
    if let Some(expected) = total {
        if have < expected {
            return Err(DownloadError::Incomplete { url: url.to_string(), got: have, expected });
        }
    }
    keep_if_sha256(&part, dest, sha256)
}

/// What the transfer thread hands back.
enum Message {
    Response { status: u16, length: Option<u64> },
    Data(Vec<u8>),
    End,
}

/// One HTTP request and its body, on a thread of its own; dropping it
/// abandons the thread, which ends when its connection does.
struct Transfer {
    rx: mpsc::Receiver<std::result::Result<Message, String>>,
}

impl Transfer {
    fn start(url: &str, have: u64, limits: Limits) -> Self {
        let (tx, rx) = mpsc::sync_channel(8);
        let url = url.to_string();
        std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .timeout_connect(Some(limits.connect))
                .timeout_recv_response(Some(limits.stall))
                .timeout_global(Some(limits.overall))
                .http_status_as_error(false)
                .build()
                .into();
            let mut request = agent.get(&url);
            if have > 0 {
                request = request.header("Range", format!("bytes={have}-"));
            }
            let response = match request.call() {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            let status = response.status().as_u16();
            let length = response
                .headers()
                .get("content-length")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if tx.send(Ok(Message::Response { status, length })).is_err() {
                return;
            }
            let mut body = response.into_body().into_reader();
            loop {
                let mut buf = vec![0u8; 1 << 16];
                let sent = match body.read(&mut buf) {
                    Ok(0) => {
                        let _ = tx.send(Ok(Message::End));
                        return;
                    }
                    Ok(n) => {
                        buf.truncate(n);
                        tx.send(Ok(Message::Data(buf)))
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                if sent.is_err() {
                    return;
                }
            }
        });
        Self { rx }
    }

    /// The next message, waiting at most `limits.stall` for it and never
    /// past the overall deadline, and returning at once on Cancel.
    fn next(&self, cancel: &AtomicBool, limits: Limits, started: Instant) -> Result<Message> {
        let waiting = Instant::now();
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Err(DownloadError::Cancelled);
            }
            match self.rx.recv_timeout(POLL) {
                Ok(Ok(m)) => return Ok(m),
                Ok(Err(e)) => return Err(DownloadError::Network(e)),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(DownloadError::Network("the transfer stopped".into()))
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if waiting.elapsed() >= limits.stall {
                return Err(DownloadError::Network(format!(
                    "the server sent nothing for {} s",
                    limits.stall.as_secs_f32()
                )));
            }
            if started.elapsed() >= limits.overall {
                return Err(DownloadError::Network(format!(
                    "the download took longer than {} s",
                    limits.overall.as_secs_f32()
                )));
            }
        }
    }
}

/// Renames `part` to `dest` if its SHA-256 is `sha256`; deletes it otherwise.
pub(crate) fn keep_if_sha256(part: &Path, dest: &Path, sha256: &str) -> Result<PathBuf> {
    let actual = sha256_file(part)?;
    if !actual.eq_ignore_ascii_case(sha256) {
        let _ = std::fs::remove_file(part);
        return Err(DownloadError::Checksum { path: dest.to_path_buf(), expected: sha256.to_string(), actual });
    }
    std::fs::rename(part, dest).map_err(io(dest))?;
    Ok(dest.to_path_buf())
}

pub(crate) fn part_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".part");
    dest.with_file_name(name)
}

pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(io(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}
