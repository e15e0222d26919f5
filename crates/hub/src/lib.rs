//! Where models come from, besides a file the user picks. From the Hugging
//! Face Hub (or a mirror that speaks its API):
//! search, a repo's GGUF files grouped by quant, a file's facts read from
//! its header over HTTP, and downloads into the Hugging Face cache layout
//! that `huggingface_hub` and llama.cpp share, resumable, several
//! connections per file, each file checked against the Hub's SHA-256.
//! And from this computer: the models other apps (LM Studio, Ollama, Jan,
//! llama.cpp) already downloaded, found in their folders (`on_disk.rs`).
//!
//! Nothing here knows about Tauri or reads the environment: the endpoint
//! and token are arguments. The token goes to the Hub's own host only,
//! never along a redirect to its CDN or anywhere else (`http.rs`).

mod api;
mod cache;
mod error;
mod fetch;
mod http;
mod on_disk;
mod quants;
mod remote_facts;

pub use api::{Hub, RepoDetails, RepoFile, RepoSummary, SearchSort};
pub use cache::{hf_cache_dir, repo_folder, HfCache};
pub use error::{HubError, Result};
pub use fetch::{discard_partial, Control, DownloadProgress, FetchOptions, ToFetch};
pub use on_disk::{default_places, scan, snapshot_files, snapshots_main_first, FoundIn, FoundModel, Platform};
pub use quants::{group_quants, Quant};
pub use remote_facts::Fit;

/// The public Hub, where `HF_ENDPOINT` is not set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
