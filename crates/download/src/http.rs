use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::{hex, io, DownloadError, Result};

/// How far a download has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub downloaded: u64,
    /// `None` when the server does not say.
    pub total: Option<u64>,
}

/// Downloads `url` to `dest`, resuming a `dest.part` left by an earlier try,
/// and keeps the file only if its SHA-256 is `sha256` (hex). The part file
/// survives network errors and cancellation (so the next call resumes) but
/// not a checksum mismatch.
pub fn download(url: &str, dest: &Path, sha256: &str, cancel: &AtomicBool, mut on_progress: impl FnMut(Progress)) -> Result<PathBuf> {
    let part = part_path(dest);
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(20)))
        .timeout_recv_body(None)
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.get(url);
    if have > 0 {
        request = request.header("Range", format!("bytes={have}-"));
    }
    let response = request.call().map_err(|e| DownloadError::Network(e.to_string()))?;
    let status = response.status().as_u16();
    let length = response.headers().get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
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
    let mut file = OpenOptions::new().create(true).write(true).append(have > 0).truncate(have == 0).open(&part).map_err(io(&part))?;
    on_progress(Progress { downloaded: have, total });
    if status != 416 {
        let mut body = response.into_body().into_reader();
        let mut buf = vec![0u8; 1 << 16];
        let mut since_report = 0u64;
        loop {
            if cancel.load(Ordering::Relaxed) {
                file.flush().map_err(io(&part))?;
                return Err(DownloadError::Cancelled);
            }
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    file.flush().map_err(io(&part))?;
                    return Err(DownloadError::Network(e.to_string()));
                }
            };
            file.write_all(&buf[..n]).map_err(io(&part))?;
            have += n as u64;
            since_report += n as u64;
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
