//! `pull ORG/NAME[:QUANT]` and `--model hf:ORG/NAME[:QUANT]`: a model from
//! the Hugging Face Hub (or `HF_ENDPOINT`'s mirror) into the Hugging Face
//! cache that `huggingface_hub` and llama.cpp share, with a progress bar.
//! `--model hf:` takes the cached copy when there is one, so it works
//! offline; `pull` always asks the Hub.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hearth_hub::{
    group_quants, snapshot_files, snapshots_main_first, Control, DownloadProgress, FetchOptions, HfCache, Hub, Quant,
    ToFetch,
};

use crate::CliResult;

/// What llama.cpp's `-hf` also takes when no quant is named.
const DEFAULT_QUANT: &str = "Q4_K_M";

/// `ORG/NAME[:QUANT]` as its repo and quant.
fn parse_spec(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once(':') {
        Some((repo, quant)) if !quant.is_empty() => (repo, Some(quant)),
        Some((repo, _)) => (repo, None),
        None => (spec, None),
    }
}

/// The Hub as the environment names it: `HF_ENDPOINT`, `HF_TOKEN`.
fn hub() -> Hub {
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| hearth_hub::DEFAULT_ENDPOINT.to_string());
    Hub::new(&endpoint, std::env::var("HF_TOKEN").ok())
}

/// The Hugging Face cache, where `huggingface_hub` finds it.
pub(crate) fn hf_cache() -> HfCache {
    let home = directories::BaseDirs::new().map_or_else(|| PathBuf::from("."), |d| d.home_dir().to_path_buf());
    HfCache::new(hearth_hub::hf_cache_dir(&home, |k| std::env::var_os(k).map(PathBuf::from)))
}

/// The quant a user asked for, else `Q4_K_M`, else the smallest; an
/// unknown one is an error that lists what there is.
fn pick<'a>(quants: &'a [Quant], wanted: Option<&str>, repo: &str) -> CliResult<&'a Quant> {
    let named = |name: &str| quants.iter().find(|q| q.name.eq_ignore_ascii_case(name));
    let found = match wanted {
        Some(name) => named(name),
        None => named(DEFAULT_QUANT).or_else(|| quants.first()),
    };
    found.ok_or_else(|| {
        let have: Vec<&str> = quants.iter().map(|q| q.name.as_str()).collect();
        match wanted {
            Some(name) => format!("{repo} has no {name} file (it has: {})", have.join(", ")).into(),
            None => format!("{repo} has no GGUF model file").into(),
        }
    })
}

/// `spec` from the cache if it is there, else from the Hub: the path that opens it.
pub(crate) fn resolve(spec: &str) -> CliResult<PathBuf> {
    let (repo, quant) = parse_spec(spec);
    if let Some(path) = cached(&hf_cache(), repo, quant) {
        return Ok(path);
    }
    pull(spec, false)
}

/// The cached model `repo:quant`, at the commit `refs/main` names or an
/// older one; a split model only with every part there.
fn cached(cache: &HfCache, repo: &str, quant: Option<&str>) -> Option<PathBuf> {
    snapshots_main_first(&cache.repo_dir(repo)).into_iter().find_map(|snapshot| {
        let (quants, _) = group_quants(&snapshot_files(&snapshot));
        let quant = pick(&quants, quant, repo).ok()?;
        Some(snapshot.join(quant.first()))
    })
}

/// Fetches `spec` (every part, into the cache) and returns the path that opens it.
pub(crate) fn pull(spec: &str, json: bool) -> CliResult<PathBuf> {
    let (repo, quant) = parse_spec(spec);
    let hub = hub();
    let details = hub.repo(repo, None)?;
    let (quants, _) = group_quants(&details.files);
    let quant = pick(&quants, quant, repo)?;
    let mut bar = ProgressBar::new(format!("{repo}:{}", quant.name), json);
    let paths = hub.download(
        &hf_cache(),
        ToFetch { repo_id: repo, commit: &details.commit, files: &quant.files },
        FetchOptions::default(),
        &Control::default(),
        |p| bar.show(p),
    )?;
    bar.finish();
    Ok(paths.into_iter().next().expect("a quant has a file"))
}

/// Progress on stderr: one line redrawn on a terminal, else a line per tenth.
struct ProgressBar {
    label: String,
    terminal: bool,
    quiet: bool,
    last: Instant,
    tenths: u64,
}

impl ProgressBar {
    fn new(label: String, quiet: bool) -> Self {
        let terminal = std::io::stderr().is_terminal();
        Self { label, terminal, quiet, last: Instant::now() - Duration::from_secs(1), tenths: 0 }
    }

    fn show(&mut self, p: &DownloadProgress) {
        if self.quiet || p.total == 0 {
            return;
        }
        let mb = |b: u64| b as f64 / 1e6;
        let eta = if p.bytes_per_second > 0.0 {
            format!("{:.0} s left", (p.total - p.downloaded) as f64 / p.bytes_per_second)
        } else {
            String::new()
        };
        let what = if p.checking { "checking SHA-256".to_string() } else { eta };
        let line = format!(
            "{} {:.1}/{:.1} MB, {:.1} MB/s {what}",
            self.label,
            mb(p.downloaded),
            mb(p.total),
            p.bytes_per_second / 1e6
        );
        let mut err = std::io::stderr();
        if self.terminal {
            if self.last.elapsed() >= Duration::from_millis(200) {
                let _ = write!(err, "\r\x1b[2K{line}");
                self.last = Instant::now();
            }
        } else {
            let tenths = p.downloaded * 10 / p.total;
            if tenths > self.tenths {
                self.tenths = tenths;
                let _ = writeln!(err, "{line}");
            }
        }
    }

    fn finish(&self) {
        if self.terminal && !self.quiet {
            let _ = writeln!(std::io::stderr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_spec_and_picks_a_quant() {
        assert_eq!(parse_spec("org/name:q8_0"), ("org/name", Some("q8_0")));
        assert_eq!(parse_spec("org/name"), ("org/name", None));
        let quant = |name: &str, size| Quant {
            name: name.into(),
            files: vec![hearth_hub::RepoFile { path: format!("m-{name}.gguf"), size, sha256: None }],
            size,
        };
        let quants = [quant("Q2_K", 1), quant("Q4_K_M", 2), quant("Q8_0", 3)];
        assert_eq!(pick(&quants, None, "r").unwrap().name, "Q4_K_M");
        assert_eq!(pick(&quants, Some("q8_0"), "r").unwrap().name, "Q8_0");
        assert_eq!(pick(&quants[..1], None, "r").unwrap().name, "Q2_K");
        let err = pick(&quants, Some("Q5_K_M"), "r").unwrap_err().to_string();
        assert!(err.contains("Q2_K, Q4_K_M, Q8_0"), "{err}");
    }
}
