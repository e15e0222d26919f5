//! A download's part file: which of its chunks are whole (kept beside it
//! as JSON, so a resume fetches only the rest), and how it becomes a blob
//! or is discarded.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api::{check_repo_id, RepoFile};
use crate::cache::HfCache;
use crate::error::{io, HubError, Result};

/// Which chunks of a part file are whole, kept beside it as JSON.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct PartState {
    size: u64,
    pub(super) chunk: u64,
    pub(super) done: Vec<bool>,
}

impl PartState {
    fn path(blob: &Path) -> PathBuf {
        with_suffix(blob, ".hearth-part.json")
    }

    fn load(blob: &Path, size: u64) -> Option<Self> {
        let text = std::fs::read_to_string(Self::path(blob)).ok()?;
        let state: Self = serde_json::from_str(&text).ok()?;
        let chunks = size.div_ceil(state.chunk.max(1)) as usize;
        let part_len = std::fs::metadata(with_suffix(blob, ".hearth-part")).ok()?.len();
        (state.size == size && state.done.len() == chunks && part_len == size).then_some(state)
    }

    pub(super) fn load_or_new(blob: &Path, size: u64, chunk: u64) -> Result<Self> {
        if let Some(state) = Self::load(blob, size) {
            return Ok(state);
        }
        remove_partial(blob);
        let state = Self { size, chunk, done: vec![false; size.div_ceil(chunk) as usize] };
        state.save(blob)?;
        Ok(state)
    }

    /// Bytes of `blob` fetched by an earlier try, if one left a part file.
    pub(super) fn fetched(blob: &Path, size: u64) -> Option<u64> {
        Self::load(blob, size).map(|s| s.bytes_done())
    }

    pub(super) fn bytes_done(&self) -> u64 {
        (0..self.done.len())
            .filter(|&i| self.done[i])
            .map(|i| (i as u64 * self.chunk + self.chunk).min(self.size) - i as u64 * self.chunk)
            .sum()
    }

    pub(super) fn save(&self, blob: &Path) -> Result<()> {
        let path = Self::path(blob);
        let tmp = with_suffix(&path, ".tmp");
        std::fs::write(&tmp, serde_json::to_vec(self).unwrap_or_default()).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))
    }
}

/// Deletes what a paused or failed download of `files` left (their part
/// files and states); whole blobs stay. A part another download holds is
/// left to it.
pub fn discard_partial(cache: &HfCache, repo_id: &str, files: &[RepoFile]) {
    if check_repo_id(repo_id).is_err() {
        return;
    }
    for sha256 in files.iter().filter_map(|f| f.sha256.as_deref()) {
        let blob = cache.blob_path(repo_id, sha256);
        let held = File::open(with_suffix(&blob, ".hearth-part"))
            .is_ok_and(|f| matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)));
        if !held {
            remove_partial(&blob);
        }
    }
}

/// Moves the checked part file to its blob. On Windows another program
/// (an antivirus, the indexer) may hold a new file for a moment: try again.
pub(super) fn rename_retrying(part: &Path, blob: &Path) -> Result<()> {
    let mut tries = 0;
    loop {
        match std::fs::rename(part, blob) {
            Ok(()) => return Ok(()),
            Err(e) if tries < 5 && e.kind() == std::io::ErrorKind::PermissionDenied => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(200 * tries));
            }
            Err(e) => return Err(HubError::Io { path: blob.to_path_buf(), source: e }),
        }
    }
}

pub(super) fn remove_partial(blob: &Path) {
    let _ = std::fs::remove_file(with_suffix(blob, ".hearth-part"));
    let _ = std::fs::remove_file(PartState::path(blob));
}

pub(super) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
