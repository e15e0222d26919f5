//! Downloading a repo's files into the cache: several connections per
//! file, each fetching chunks by HTTP Range into their place in one
//! preallocated part file, resumable across pauses and restarts (a small
//! state file beside it lists the chunks done), each file checked against
//! the Hub's SHA-256 before it is moved into `blobs/`.
//!
//! Every answer is checked for what it claims: the status and
//! `Content-Range` must be the range asked for, an HTML page is not a file,
//! and a transfer cut mid-chunk is retried from where it stopped.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::api::{check_repo_id, is_commit, is_file_path, Hub, RepoFile};
use crate::cache::HfCache;
use crate::error::{io, HubError, Result};
use crate::http::check;

mod part_file;

pub use part_file::discard_partial;
use part_file::{remove_partial, rename_retrying, with_suffix, PartState};

/// What a download fetches: files of a repo at a commit (a model's parts
/// in order, so the first path returned opens it).
#[derive(Debug, Clone, Copy)]
pub struct ToFetch<'a> {
    pub repo_id: &'a str,
    pub commit: &'a str,
    pub files: &'a [RepoFile],
}

/// How a download is fetched.
#[derive(Debug, Clone, Copy)]
pub struct FetchOptions {
    /// Connections per file (as `hf_transfer` and `aria2 -x` use).
    pub connections: usize,
    /// The unit a connection fetches, and what a pause may have to fetch again.
    pub chunk: u64,
    /// Bytes to leave free on the disk.
    pub disk_reserve: u64,
    /// Tries per chunk before the download fails (a cut transfer resumes
    /// where it stopped).
    pub tries: u32,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self { connections: 8, chunk: 32 << 20, disk_reserve: 512 << 20, tries: 5 }
    }
}

/// Pause and Cancel for a running download, from any thread.
#[derive(Debug, Clone, Default)]
pub struct Control(Arc<AtomicU8>);

const RUN: u8 = 0;
const PAUSE: u8 = 1;
const CANCEL: u8 = 2;

impl Control {
    /// Stops, keeping what was fetched: the next download of the same files resumes.
    pub fn pause(&self) {
        let _ = self.0.compare_exchange(RUN, PAUSE, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Stops and deletes what was fetched of the file in progress.
    pub fn cancel(&self) {
        self.0.store(CANCEL, Ordering::SeqCst);
    }

    /// Whether Cancel was pressed.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst) == CANCEL
    }

    fn stopped(&self) -> Option<HubError> {
        match self.0.load(Ordering::SeqCst) {
            PAUSE => Some(HubError::Paused),
            CANCEL => Some(HubError::Cancelled),
            _ => None,
        }
    }
}

/// How far a download has got, across all its files.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DownloadProgress {
    /// The file being fetched (or checked).
    pub file: String,
    pub downloaded: u64,
    pub total: u64,
    /// Over the last few seconds.
    pub bytes_per_second: f64,
    /// Reading the file back to check its SHA-256.
    pub checking: bool,
}

/// How often progress is reported and Pause and Cancel are looked at.
const TICK: Duration = Duration::from_millis(100);

impl Hub {
    /// Downloads `wanted` into `cache` (files already there are kept), and
    /// returns their snapshot paths in order.
    pub fn download(
        &self,
        cache: &HfCache,
        wanted: ToFetch<'_>,
        options: FetchOptions,
        control: &Control,
        mut on_progress: impl FnMut(&DownloadProgress),
    ) -> Result<Vec<PathBuf>> {
        let ToFetch { repo_id, commit, files } = wanted;
        check_repo_id(repo_id)?;
        if !is_commit(commit) {
            return Err(HubError::BadAnswer {
                url: self.endpoint().into(),
                reason: format!("{commit:?} is not a commit"),
            });
        }
        if let Some(bad) = files.iter().find(|f| !is_file_path(&f.path)) {
            return Err(HubError::BadAnswer {
                url: self.endpoint().into(),
                reason: format!("a file path that leaves the repo: {:?}", bad.path),
            });
        }
        let total: u64 = files.iter().fold(0u64, |sum, f| sum.saturating_add(f.size));
        let mut before = 0u64;
        let mut missing = Vec::new();
        for file in files {
            let sha256 = file.sha256.as_deref().ok_or_else(|| HubError::BadAnswer {
                url: self.file_url(repo_id, commit, &file.path),
                reason: format!("{} has no SHA-256 to check it against", file.path),
            })?;
            let blob_whole = std::fs::metadata(cache.blob_path(repo_id, sha256)).is_ok_and(|m| m.len() == file.size);
            if !blob_whole {
                missing.push((file, sha256));
            }
        }
        check_space(cache, repo_id, &missing, options.disk_reserve)?;
        let mut rate = Rate::default();
        let mut paths = Vec::with_capacity(files.len());
        for file in files {
            let sha256 = file.sha256.as_deref().expect("checked above");
            if let Some(path) = cache.cached(repo_id, commit, &file.path, file.size) {
                before += file.size;
                paths.push(path);
                continue;
            }
            let blob = cache.blob_path(repo_id, sha256);
            if std::fs::metadata(&blob).map(|m| m.len()).ok() != Some(file.size) {
                let url = self.file_url(repo_id, commit, &file.path);
                let job = FileJob { hub: self, repo_id, url: &url, file, blob: &blob, options, control };
                job.run(&mut |done, checking| {
                    let downloaded = before + done;
                    on_progress(&DownloadProgress {
                        file: file.path.clone(),
                        downloaded,
                        total,
                        bytes_per_second: rate.sample(downloaded),
                        checking,
                    })
                })?;
            }
            before += file.size;
            paths.push(cache.link(repo_id, commit, &file.path, sha256)?);
        }
        cache.set_ref(repo_id, "main", commit)?;
        on_progress(&DownloadProgress {
            file: files.last().map(|f| f.path.clone()).unwrap_or_default(),
            downloaded: total,
            total,
            bytes_per_second: rate.sample(total),
            checking: false,
        });
        Ok(paths)
    }
}

/// Refuses to start what the disk cannot hold: the files not yet whole,
/// less what an earlier try fetched (on Windows a part file holds its whole
/// size from the start, so free space already leaves it out).
fn check_space(cache: &HfCache, repo_id: &str, missing: &[(&RepoFile, &str)], reserve: u64) -> Result<()> {
    let Some((first, _)) = missing.first() else { return Ok(()) };
    let blobs = cache.repo_dir(repo_id).join("blobs");
    std::fs::create_dir_all(&blobs).map_err(io(&blobs))?;
    let needed = missing.iter().fold(0u64, |sum, (f, sha)| {
        let blob = cache.blob_path(repo_id, sha);
        let held = match PartState::fetched(&blob, f.size) {
            Some(_) if cfg!(windows) => f.size,
            Some(fetched) => fetched,
            None => 0,
        };
        sum.saturating_add(f.size.saturating_sub(held))
    });
    let free = fs4::available_space(&blobs).map_err(io(&blobs))?;
    if free < needed.saturating_add(reserve) {
        return Err(HubError::DiskFull { file: first.path.clone(), needed, free, folder: blobs });
    }
    Ok(())
}

/// Bytes per second over the last few seconds.
#[derive(Default)]
struct Rate {
    samples: VecDeque<(Instant, u64)>,
}

impl Rate {
    fn sample(&mut self, bytes: u64) -> f64 {
        let now = Instant::now();
        self.samples.push_back((now, bytes));
        while self.samples.len() > 2 && now.duration_since(self.samples[0].0) > Duration::from_secs(3) {
            self.samples.pop_front();
        }
        let (t0, b0) = self.samples[0];
        let dt = now.duration_since(t0).as_secs_f64();
        if dt > 0.0 {
            bytes.saturating_sub(b0) as f64 / dt
        } else {
            0.0
        }
    }
}

/// One file's download into its blob.
struct FileJob<'a> {
    hub: &'a Hub,
    repo_id: &'a str,
    url: &'a str,
    file: &'a RepoFile,
    blob: &'a Path,
    options: FetchOptions,
    control: &'a Control,
}

impl FileJob<'_> {
    fn run(&self, report: &mut dyn FnMut(u64, bool)) -> Result<()> {
        let size = self.file.size;
        let part = with_suffix(self.blob, ".hearth-part");
        let chunk = self.options.chunk.clamp(1 << 20, 1 << 30);
        let state = PartState::load_or_new(self.blob, size, chunk)?;
        let data =
            OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&part).map_err(io(&part))?;
        // One download of a file at a time, also across processes (the app
        // and `hearth-cli pull`): the lock goes with the handle.
        if let Err(std::fs::TryLockError::WouldBlock) = data.try_lock() {
            return Err(HubError::Busy { file: self.file.path.clone() });
        }
        data.set_len(size).map_err(io(&part))?;
        let todo: VecDeque<usize> = (0..state.done.len()).filter(|&i| !state.done[i]).collect();
        let fetched = AtomicU64::new(state.bytes_done());
        let shared = Shared {
            todo: Mutex::new(todo),
            state: Mutex::new(state),
            cdn_url: Mutex::new(None),
            failure: Mutex::new(None),
            fetched,
        };
        let connections = self.options.connections.clamp(1, 32);
        let running = AtomicUsize::new(connections);
        std::thread::scope(|scope| {
            for _ in 0..connections {
                scope.spawn(|| {
                    // Counted down even if the connection panics, so the
                    // loop below always ends.
                    let _done = CountDown(&running);
                    self.connection(&shared, &data, &part);
                });
            }
            // Reports until every connection has stopped: the chunks are
            // done, one failed, or Pause or Cancel was pressed.
            while running.load(Ordering::SeqCst) > 0 {
                std::thread::sleep(TICK);
                report(shared.fetched.load(Ordering::Relaxed), false);
            }
        });
        drop(data);
        if let Some(e) = shared.failure.into_inner().ok().flatten() {
            if matches!(e, HubError::Cancelled | HubError::Checksum { .. }) {
                remove_partial(self.blob);
            }
            return Err(e);
        }
        let state = shared.state.into_inner().map_err(|_| HubError::Cancelled)?;
        if !state.done.iter().all(|&d| d) {
            // Stopped by Pause or Cancel between chunks.
            return Err(match self.control.stopped() {
                Some(HubError::Cancelled) | None => {
                    remove_partial(self.blob);
                    HubError::Cancelled
                }
                Some(e) => e,
            });
        }
        report(size, true);
        let expected = self.file.sha256.as_deref().unwrap_or_default();
        let actual = match sha256_of(&part, self.control) {
            Ok(actual) => actual,
            Err(e) => {
                if matches!(e, HubError::Cancelled) {
                    remove_partial(self.blob);
                }
                return Err(e);
            }
        };
        if !actual.eq_ignore_ascii_case(expected) {
            remove_partial(self.blob);
            return Err(HubError::Checksum { file: self.file.path.clone(), expected: expected.into(), actual });
        }
        rename_retrying(&part, self.blob)?;
        let _ = std::fs::remove_file(with_suffix(self.blob, ".hearth-part.json"));
        Ok(())
    }

    /// One connection: takes chunks until none are left, or something fails.
    fn connection(&self, shared: &Shared, data: &File, part: &Path) {
        loop {
            let failed = shared.failure.lock().map(|f| f.is_some()).unwrap_or(true);
            if failed || self.control.stopped().is_some() {
                return;
            }
            let Some(index) = shared.todo.lock().ok().and_then(|mut t| t.pop_front()) else { return };
            match self.fetch_chunk(shared, data, part, index) {
                Ok(()) => {
                    let Ok(mut state) = shared.state.lock() else { return };
                    state.done[index] = true;
                    // The state only spares a resume some chunks: failing
                    // to save it (an antivirus holding the file) is no
                    // reason to stop the download.
                    let _ = state.save(self.blob);
                }
                Err(e) => {
                    shared.fail(e);
                    return;
                }
            }
        }
    }

    /// Chunk `index` into place, retrying a cut transfer from where it stopped.
    fn fetch_chunk(&self, shared: &Shared, data: &File, part: &Path, index: usize) -> Result<()> {
        let size = self.file.size;
        let chunk = shared.state.lock().map(|s| s.chunk).unwrap_or(self.options.chunk);
        let start = index as u64 * chunk;
        let end = (start + chunk).min(size) - 1;
        let mut at = start;
        let mut tries = 0;
        while at <= end {
            if let Some(stop) = self.control.stopped() {
                shared.fetched.fetch_sub(at - start, Ordering::Relaxed);
                return Err(stop);
            }
            match self.stream_range(shared, data, part, at, end) {
                Ok(got) => {
                    at += got;
                    if got > 0 {
                        tries = 0;
                    }
                }
                Err(HubError::Network { .. } | HubError::Http { status: 408 | 429 | 500..=599, .. })
                    if tries + 1 < self.options.tries =>
                {
                    // Worth another try, from the Hub again: a cut connection,
                    // or a CDN link that expired. A server that sends the
                    // wrong bytes is not tried again.
                    tries += 1;
                    shared.cdn_url.lock().map(|mut u| *u = None).ok();
                    std::thread::sleep(Duration::from_millis(200 << tries.min(4)));
                }
                Err(e) => {
                    shared.fetched.fetch_sub(at - start, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Bytes `from..=to` written in place; returns how many arrived before
    /// the body ended (all of them, unless the transfer was cut).
    fn stream_range(&self, shared: &Shared, data: &File, part: &Path, from: u64, to: u64) -> Result<u64> {
        let size = self.file.size;
        let cached = shared.cdn_url.lock().ok().and_then(|u| u.clone());
        let url = cached.as_deref().unwrap_or(self.url);
        let reply = self.hub.client.send(false, url, Some((from, Some(to))))?;
        let reply = match check(reply, self.repo_id) {
            Ok(r) => r,
            // A CDN link that expired: ask the Hub again.
            Err(HubError::Http { status: 401 | 403 | 410, .. } | HubError::NotFound { .. }) if cached.is_some() => {
                shared.cdn_url.lock().map(|mut u| *u = None).ok();
                check(self.hub.client.send(false, self.url, Some((from, Some(to))))?, self.repo_id)?
            }
            Err(e) => return Err(e),
        };
        let not_the_file = |reason: String| HubError::NotTheFile { url: reply.url.clone(), reason };
        if reply.final_header("content-type").is_some_and(|t| t.to_ascii_lowercase().starts_with("text/html")) {
            return Err(not_the_file("it sent an HTML page".into()));
        }
        let whole = from == 0 && to + 1 == size;
        match reply.status() {
            206 => {
                let said = reply.final_header("content-range").unwrap_or_default();
                let expected = format!("bytes {from}-{to}/{size}");
                if said.trim() != expected {
                    return Err(not_the_file(format!("asked for {expected}, it sent {said:?}")));
                }
            }
            200 if whole => {}
            status => return Err(not_the_file(format!("asked for a byte range, it answered {status}"))),
        }
        if reply.url != self.url {
            shared.cdn_url.lock().map(|mut u| *u = Some(reply.url.clone())).ok();
        }
        let mut body = reply.response.into_body().into_reader();
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        let want = to + 1 - from;
        while got < want {
            if self.control.stopped().is_some() {
                break;
            }
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    if got > 0 {
                        return Ok(got);
                    }
                    return Err(HubError::Network { url: self.url.to_string(), reason: e.to_string() });
                }
            };
            let n = n.min((want - got) as usize);
            write_at(data, &buf[..n], from + got).map_err(|e| self.write_error(part, e))?;
            got += n as u64;
            shared.fetched.fetch_add(n as u64, Ordering::Relaxed);
        }
        if got < want && self.control.stopped().is_none() && got == 0 {
            return Err(HubError::Network { url: self.url.to_string(), reason: "the transfer ended early".into() });
        }
        Ok(got)
    }

    fn write_error(&self, part: &Path, e: std::io::Error) -> HubError {
        // ENOSPC (28), ERROR_DISK_FULL (112), ERROR_HANDLE_DISK_FULL (39).
        let full =
            matches!(e.raw_os_error(), Some(28)) || (cfg!(windows) && matches!(e.raw_os_error(), Some(112 | 39)));
        if full {
            let dir = part.parent().unwrap_or(part).to_path_buf();
            let free = fs4::available_space(&dir).unwrap_or(0);
            HubError::DiskFull { file: self.file.path.clone(), needed: self.file.size, free, folder: dir }
        } else {
            HubError::Io { path: part.to_path_buf(), source: e }
        }
    }
}

/// What a file's connections share.
struct Shared {
    todo: Mutex<VecDeque<usize>>,
    state: Mutex<PartState>,
    /// Where the Hub's redirect led (its CDN), so later chunks skip the hop.
    cdn_url: Mutex<Option<String>>,
    failure: Mutex<Option<HubError>>,
    fetched: AtomicU64,
}

impl Shared {
    fn fail(&self, e: HubError) {
        if let Ok(mut f) = self.failure.lock() {
            // The first failure is the one to report; Pause and Cancel are not failures.
            if f.is_none() && !matches!(e, HubError::Paused) {
                *f = Some(e);
            }
        }
    }
}

/// Counts a connection out when it ends, however it ends.
struct CountDown<'a>(&'a AtomicUsize);

impl Drop for CountDown<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn sha256_of(path: &Path, control: &Control) -> Result<String> {
    let mut file = File::open(path).map_err(io(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 4 << 20];
    loop {
        if let Some(HubError::Cancelled) = control.stopped() {
            return Err(HubError::Cancelled);
        }
        let n = file.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(unix)]
fn write_at(file: &File, bytes: &[u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

#[cfg(windows)]
fn write_at(file: &File, mut bytes: &[u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !bytes.is_empty() {
        let n = file.seek_write(bytes, offset)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n..];
        offset += n as u64;
    }
    Ok(())
}
