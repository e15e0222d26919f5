//! A model's facts before it is downloaded: each part's GGUF header read
//! over HTTP with one Range request (the header is the file's first
//! megabytes; the weights are never fetched), and whether it fits this
//! computer.

use std::path::Path;

use hearth_engine::{GgufFile, ModelFacts};
use serde::Serialize;

use crate::api::Hub;
use crate::error::{HubError, Result};
use crate::http::check;
use crate::quants::Quant;

/// No GGUF header runs past this (a 262k-token vocabulary with its merges
/// takes about 12 MB); a header that does is refused rather than fetched.
const HEADER_LIMIT: u64 = 64 << 20;

impl Hub {
    /// The facts of `quant` of `repo_id` at `commit`, from its parts' headers.
    pub fn facts(&self, repo_id: &str, commit: &str, quant: &Quant) -> Result<ModelFacts> {
        let mut parts = Vec::with_capacity(quant.files.len());
        for file in &quant.files {
            let url = self.file_url(repo_id, commit, &file.path);
            let last = file.size.min(HEADER_LIMIT).saturating_sub(1);
            let reply = check(self.client.send(false, &url, Some((0, Some(last))))?, &file.path)?;
            if !matches!(reply.status(), 200 | 206) {
                return Err(HubError::NotTheFile { url, reason: format!("it answered {}", reply.status()) });
            }
            let body = reply.response.into_body().into_reader();
            // Only the header is read; dropping the body ends the transfer.
            parts.push(GgufFile::read_header(body, file.size, HEADER_LIMIT, Path::new(&file.path))?);
        }
        let model = GgufFile::join_headers(parts)?;
        Ok(ModelFacts::from_file(&model)?)
    }
}

/// Whether a model fits this computer's memory, and at what context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "context")]
pub enum Fit {
    /// At its whole context (or 32k, where that is more).
    Fits(u32),
    /// Only at a shorter context than its own.
    FitsAt(u32),
    TooBig,
}

/// Contexts tried, longest first, after the model's own.
const CONTEXTS: [u32; 5] = [32768, 16384, 8192, 4096, 2048];

impl Fit {
    /// `facts` in `memory` bytes, as `ModelFacts::memory_estimate` counts a
    /// conversation: the weights, the KV cache and a hybrid's state.
    pub fn judge(facts: &ModelFacts, memory: u64) -> Self {
        let own = facts.context_length.min(CONTEXTS[0]);
        if facts.memory_estimate(own) <= memory {
            return Fit::Fits(own);
        }
        CONTEXTS
            .iter()
            .copied()
            .filter(|&c| c < own)
            .find(|&c| facts.memory_estimate(c) <= memory)
            .map_or(Fit::TooBig, Fit::FitsAt)
    }
}
