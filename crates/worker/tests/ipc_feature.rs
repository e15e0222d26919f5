//! The libraries describe their types for the page (ts-rs) only under their
//! `ipc` feature. Every build in `./hearth test` turns it on (the shell is in
//! the workspace), so a ts-rs attribute or import left outside the feature
//! would pass there and break the builds without it (`cargo build -p
//! hearth-cli`, as the device scripts run). This reads the sources instead.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn ts_rs_appears_only_under_the_ipc_feature() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for name in ["store", "worker", "mcp"] {
        rust_files(&crates.join(name).join("src"), &mut files);
    }
    assert!(files.len() > 20, "the sources were not found: {files:?}");
    let mut outside = Vec::new();
    let mut under = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.starts_with("//") {
                continue;
            }
            let uses_ts = line.contains("ts_rs")
                || line.starts_with("#[ts(")
                || line.contains("derive(TS")
                || line.contains(", TS)");
            if !uses_ts {
                continue;
            }
            if line.starts_with("#[cfg_attr(feature = \"ipc\",") {
                under += 1;
            } else {
                outside.push(format!("{}:{}: {line}", file.display(), i + 1));
            }
        }
    }
    assert!(outside.is_empty(), "ts-rs outside `#[cfg_attr(feature = \"ipc\", …)]`:\n{}", outside.join("\n"));
    assert!(under > 30, "only {under} described types: has the feature's spelling changed?");
}
