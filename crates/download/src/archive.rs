use std::fs::File;
use std::path::{Path, PathBuf};

use crate::http::{keep_if_sha256, part_path};
use crate::{io, DownloadError, Result};

/// Copies `member` out of the zip at `archive` to `dest`, keeping it only if
/// its SHA-256 is `sha256`. Written to `dest.part` first, then renamed.
pub fn extract_member(archive: &Path, member: &str, dest: &Path, sha256: &str) -> Result<PathBuf> {
    let bad = |reason: String| DownloadError::Archive { path: archive.to_path_buf(), reason };
    let mut zip = zip::ZipArchive::new(File::open(archive).map_err(io(archive))?).map_err(|e| bad(e.to_string()))?;
    let mut entry = zip.by_name(member).map_err(|e| bad(format!("{member}: {e}")))?;
    let part = part_path(dest);
    let mut out = File::create(&part).map_err(io(&part))?;
    std::io::copy(&mut entry, &mut out).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof => bad(e.to_string()),
        _ => DownloadError::Io { path: part.clone(), source: e },
    })?;
    out.sync_all().map_err(io(&part))?;
    drop(out);
    keep_if_sha256(&part, dest, sha256)
}
