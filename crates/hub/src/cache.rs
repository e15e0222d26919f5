//! The Hugging Face cache layout, shared with `huggingface_hub` and
//! llama.cpp's `-hf`, so a file is stored once whoever fetched it:
//!
//! ```text
//! ROOT/models--ORG--NAME/blobs/SHA256              the bytes, named by their hash
//! ROOT/models--ORG--NAME/snapshots/COMMIT/PATH     a link to the blob
//! ROOT/models--ORG--NAME/refs/main                 the commit `main` was at
//! ```
//!
//! Where symbolic links cannot be made (Windows without developer mode),
//! the snapshot entry is a hard link, as the blob's twin on the same disk.

use std::path::{Path, PathBuf};

use crate::error::{io, Result};

/// `models--ORG--NAME`, the folder of repo `org/name`.
pub fn repo_folder(repo_id: &str) -> String {
    format!("models--{}", repo_id.replace('/', "--"))
}

/// Where `huggingface_hub` keeps its cache, found as it finds it:
/// `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`
/// under `home`. `var` reads the environment (an empty value is unset).
pub fn hf_cache_dir(home: &Path, var: impl Fn(&str) -> Option<PathBuf>) -> PathBuf {
    let var = |k: &str| var(k).filter(|v| !v.as_os_str().is_empty());
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .unwrap_or_else(|| home.join(".cache").join("huggingface").join("hub"))
}

/// A Hugging Face cache folder (`HF_HUB_CACHE`, `~/.cache/huggingface/hub`).
#[derive(Debug, Clone)]
pub struct HfCache {
    root: PathBuf,
}

impl HfCache {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn repo_dir(&self, repo_id: &str) -> PathBuf {
        self.root.join(repo_folder(repo_id))
    }

    pub fn blob_path(&self, repo_id: &str, sha256: &str) -> PathBuf {
        self.repo_dir(repo_id).join("blobs").join(sha256)
    }

    pub fn snapshot_path(&self, repo_id: &str, commit: &str, file: &str) -> PathBuf {
        file.split('/').fold(self.repo_dir(repo_id).join("snapshots").join(commit), |p, part| p.join(part))
    }

    /// The snapshot entry of `file` if its blob is whole (`size` bytes).
    pub fn cached(&self, repo_id: &str, commit: &str, file: &str, size: u64) -> Option<PathBuf> {
        let path = self.snapshot_path(repo_id, commit, file);
        (std::fs::metadata(&path).ok()?.len() == size).then_some(path)
    }

    /// Points the snapshot entry of `file` at its blob.
    pub(crate) fn link(&self, repo_id: &str, commit: &str, file: &str, sha256: &str) -> Result<PathBuf> {
        let entry = self.snapshot_path(repo_id, commit, file);
        let dir = entry.parent().expect("a snapshot entry is in a folder");
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let _ = std::fs::remove_file(&entry);
        let blob = self.blob_path(repo_id, sha256);
        // Relative, as huggingface_hub writes it, so the cache can move.
        let depth = file.split('/').count() + 1;
        let target = (0..depth).fold(PathBuf::new(), |p, _| p.join("..")).join("blobs").join(sha256);
        if symlink(&target, &entry).is_err() {
            std::fs::hard_link(&blob, &entry).map_err(io(&entry))?;
        }
        Ok(entry)
    }

    /// Deletes `file`'s snapshot entry at `commit` and its blob (what a
    /// cancelled download fetched).
    pub fn remove(&self, repo_id: &str, commit: &str, file: &crate::RepoFile) {
        if !crate::api::is_file_path(&file.path) || !crate::api::is_commit(commit) {
            return;
        }
        let _ = std::fs::remove_file(self.snapshot_path(repo_id, commit, &file.path));
        if let Some(sha256) = &file.sha256 {
            let _ = std::fs::remove_file(self.blob_path(repo_id, sha256));
        }
    }

    /// Records that `branch` of `repo_id` is at `commit`.
    pub(crate) fn set_ref(&self, repo_id: &str, branch: &str, commit: &str) -> Result<()> {
        let path = self.repo_dir(repo_id).join("refs").join(branch);
        let dir = path.parent().expect("refs is a folder");
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        std::fs::write(&path, commit).map_err(io(&path))
    }
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(windows)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::windows::fs::symlink_file(target, link)
}
