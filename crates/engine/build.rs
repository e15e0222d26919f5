//! Gives the engine a build id that changes whenever its source does, so a
//! saved KV cache is reused only by the exact kernels and numerics that
//! computed it (the crate version changes far less often than they do).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn main() {
    println!("cargo:rerun-if-changed=src");
    let mut files = Vec::new();
    collect(Path::new("src"), &mut files);
    files.sort();
    let mut hasher = Sha256::new();
    for f in &files {
        hasher.update(f.to_string_lossy().replace('\\', "/").as_bytes());
        hasher.update([0]);
        hasher.update(std::fs::read(f).expect("engine source is readable"));
    }
    let id: String = hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=HEARTH_ENGINE_BUILD_ID={id}");
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("engine source is listable").flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}
