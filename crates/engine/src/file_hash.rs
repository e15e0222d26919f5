//! SHA-256 in hex: of bytes, and of a whole file read in pieces so it can be stopped.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// SHA-256 of `bytes` in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// SHA-256 of token ids, each as 4 little-endian bytes: how a reply
/// record names its prompt.
pub fn ids_sha256(ids: &[u32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|t| t.to_le_bytes()).collect();
    sha256_hex(&bytes)
}

/// The file's SHA-256 in lowercase hex, or `None` if `stop` said to stop
/// (it is asked between pieces of 1 MiB).
pub fn sha256_file(path: &Path, stop: &dyn Fn() -> bool) -> std::io::Result<Option<String>> {
    sha256_files(&[path], stop).map_err(|(_, e)| e)
}

/// The SHA-256 of `paths` read one after another (a model split into
/// parts hashes as the file they would make joined), or `None` if `stop`
/// said to stop. An error names the file it came from.
pub fn sha256_files<P: AsRef<Path>>(
    paths: &[P],
    stop: &dyn Fn() -> bool,
) -> Result<Option<String>, (PathBuf, std::io::Error)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for path in paths {
        let path = path.as_ref();
        let fail = |e| (path.to_path_buf(), e);
        let mut file = std::fs::File::open(path).map_err(fail)?;
        loop {
            if stop() {
                return Ok(None);
            }
            let n = file.read(&mut buf).map_err(fail)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
    }
    Ok(Some(hex(&hasher.finalize())))
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What coreutils' `sha256sum` says of the file.
    fn sha256sum(path: &Path) -> String {
        let out = std::process::Command::new("sha256sum").arg(path).output().unwrap();
        String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_string()
    }

    #[test]
    fn hashes_the_whole_file_and_stops_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(
            sha256_file(&path, &|| false).unwrap().unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // Past the first piece too.
        let data: Vec<u8> = (0..(3u32 << 20) + 12345).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, data).unwrap();
        assert_eq!(sha256_file(&path, &|| false).unwrap().unwrap(), sha256sum(&path));
        assert_eq!(sha256_file(&path, &|| true).unwrap(), None);
    }
}
