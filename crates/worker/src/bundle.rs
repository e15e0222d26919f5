//! Portable conversations (`.hearth` files): a zip holding the
//! conversation's export (`docs/export-format.md`), its saved KV cache, and
//! a manifest naming the model that computed the cache by its SHA-256.
//!
//! Opened where the same model file is loaded (same bytes, any path or
//! modification time) and the same engine build runs, the cache is checked
//! chunk by chunk and installed as the new conversation's saved cache, so
//! the next turn runs only its new tokens. Anywhere else the text is
//! imported and the cache skipped, with the reason. A bundle is read whole
//! and checked before anything is written: members other than the three
//! known ones (a path such as `../x` among them), duplicate or encrypted
//! members, and members larger than their limit (as declared or as read)
//! refuse the file.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hearth_engine::{CacheIdentity, Engine};
use hearth_store::{ConversationExport, Import, Store};
use serde::{Deserialize, Serialize};

use crate::budgets::CacheBudgets;
use crate::error::{AppError, AppResult, ErrorKind};

/// The bundle's description of itself and of the model its cache needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    /// Always `hearth-bundle`.
    pub format: String,
    pub version: u32,
    /// The model the cache was computed with; `None` when the bundle has no cache.
    pub model: Option<ModelIdentity>,
}

/// A model file as a bundle names it: by content, not by path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelIdentity {
    pub sha256: String,
    /// The file name it had, to tell the user which model to open.
    pub name: String,
    pub size_bytes: u64,
    pub architecture: String,
    pub engine_build: String,
}

impl Manifest {
    pub const FORMAT: &'static str = "hearth-bundle";
    pub const VERSION: u32 = 1;
}

pub const MANIFEST: &str = "bundle.json";
pub const CONVERSATION: &str = "conversation.json";
pub const CACHE: &str = "cache.session";

/// The largest manifest, conversation and cache a bundle may hold.
const MAX_MANIFEST: u64 = 1 << 20;
const MAX_CONVERSATION: u64 = hearth_store::MAX_IMPORT_BYTES as u64;
const MAX_CACHE: u64 = 64 << 30;

/// What became of a bundle's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum CacheImport {
    /// Installed: the next turn runs only its new tokens.
    Restored,
    /// Not installed; the note says why.
    Skipped,
    /// The file had none.
    None,
}

/// What importing a bundle did.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleImport {
    pub report: hearth_store::ImportReport,
    pub cache: CacheImport,
    pub cache_note: Option<String>,
}

fn bad(path: &Path, reason: impl std::fmt::Display) -> AppError {
    AppError::new(ErrorKind::BadImport, format!("{} is not a usable Hearth bundle: {reason}", path.display()))
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> AppError + '_ {
    move |e| AppError::write_failed(path, e)
}

/// Writes conversation `id` with its saved cache (from `caches_dir`, when
/// there is one computed with a model whose hash is known) to `out`.
/// `cache_files` is the lock cache saves hold: the file is opened and
/// measured under it, so the copy ends where a save ended. (Saves only
/// append to a file or replace it with a new one, so the bytes an open
/// handle reads up to that length do not change after.)
pub fn export(store: &Store, caches_dir: Option<&Path>, cache_files: &Mutex<()>, id: i64, out: &Path) -> AppResult<()> {
    let conversation = store.export_conversation(id)?;
    let cache_file = caches_dir.map(|d| d.join(format!("{id}.session")));
    let cached = cache_file.and_then(|p| {
        let _saves = crate::locks::lock(cache_files);
        // The cache goes in only under an identity another machine can check.
        let identity = hearth_engine::session_file::read_identity(&p).ok().filter(|i| i.model_sha256.is_some())?;
        let file = File::open(&p).ok()?;
        let len = file.metadata().ok()?.len();
        Some((p, identity, file, len))
    });
    let model = cached.as_ref().map(|(_, identity, ..)| model_identity(store, identity));
    let manifest = Manifest { format: Manifest::FORMAT.into(), version: Manifest::VERSION, model };

    let tmp = part_path(out);
    let write = || -> AppResult<()> {
        let file = File::create(&tmp).map_err(io(&tmp))?;
        let mut zip = zip::ZipWriter::new(file);
        let deflated = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        // f16 keys and values barely compress; storing them costs nothing to read.
        let stored = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(true);
        let zip_err = |e: zip::result::ZipError| {
            AppError::new(ErrorKind::Storage, format!("cannot write {}: {e}", tmp.display()))
        };
        zip.start_file(MANIFEST, deflated).map_err(zip_err)?;
        zip.write_all(&serde_json::to_vec_pretty(&manifest).expect("manifests serialise")).map_err(io(&tmp))?;
        zip.start_file(CONVERSATION, deflated).map_err(zip_err)?;
        zip.write_all(&serde_json::to_vec_pretty(&conversation).expect("exports serialise")).map_err(io(&tmp))?;
        if let Some((path, _, file, len)) = &cached {
            zip.start_file(CACHE, stored).map_err(zip_err)?;
            let copied = std::io::copy(&mut file.take(*len), &mut zip)
                .map_err(|e| AppError::new(ErrorKind::Storage, format!("cannot read {}: {e}", path.display())))?;
            if copied != *len {
                return Err(AppError::new(
                    ErrorKind::Storage,
                    format!("{} ended after {copied} of its {len} bytes", path.display()),
                ));
            }
        }
        let file = zip.finish().map_err(zip_err)?;
        file.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, out).map_err(io(out))
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Where a file is written before it is renamed to `out`: beside it, hidden,
/// under a name no one else's file has (a failed write deletes it).
pub fn part_path(out: &Path) -> PathBuf {
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    out.with_file_name(format!(".{name}.{}.hearth-part", std::process::id()))
}

fn model_identity(store: &Store, identity: &CacheIdentity) -> ModelIdentity {
    let sha256 = identity.model_sha256.clone().unwrap_or_default();
    let name = store.model_name_by_sha256(&sha256).ok().flatten().unwrap_or_default();
    ModelIdentity {
        sha256,
        name,
        size_bytes: identity.model_size,
        architecture: identity.architecture.clone(),
        engine_build: identity.engine_version.clone(),
    }
}

/// A bundle's members, read and checked; the cache only located (it is
/// read only where it can be used).
struct Opened {
    zip: zip::ZipArchive<File>,
    manifest: Manifest,
    conversation: ConversationExport,
    /// The cache member's index and declared size.
    cache: Option<(usize, u64)>,
}

/// Reads the bundle at `path`: every member's name and size, and the
/// manifest and conversation within their limits.
fn open(path: &Path) -> AppResult<Opened> {
    let file = File::open(path).map_err(|e| bad(path, format!("cannot open it: {e}")))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(path, format!("not a zip archive ({e})")))?;
    let mut manifest = None;
    let mut conversation = None;
    let mut cache: Option<(usize, u64)> = None;
    for i in 0..zip.len() {
        let mut member = zip.by_index(i).map_err(|e| bad(path, e))?;
        let name = member.name().map_err(|e| bad(path, format!("a member has an unreadable name ({e})")))?.to_string();
        if member.encrypted() {
            return Err(bad(path, format!("{name:?} is encrypted")));
        }
        let limit = match name.as_str() {
            MANIFEST => MAX_MANIFEST,
            CONVERSATION => MAX_CONVERSATION,
            CACHE => MAX_CACHE,
            // Nothing is ever extracted by name, but a file naming other
            // paths (`../`, absolute) was not written by Hearth.
            _ => return Err(bad(path, format!("it holds {name:?}, which is not part of a bundle"))),
        };
        let seen = match name.as_str() {
            MANIFEST => manifest.is_some(),
            CONVERSATION => conversation.is_some(),
            _ => cache.is_some(),
        };
        if seen {
            return Err(bad(path, format!("it holds {name:?} twice")));
        }
        if member.size() > limit {
            return Err(bad(path, format!("{name:?} is {} MB; the limit is {} MB", member.size() >> 20, limit >> 20)));
        }
        if name == CACHE {
            cache = Some((i, member.size()));
            continue;
        }
        // The declared size may lie: never read past the limit.
        let mut bytes = Vec::new();
        (&mut member).take(limit + 1).read_to_end(&mut bytes).map_err(|e| bad(path, format!("{name:?}: {e}")))?;
        if bytes.len() as u64 > limit {
            return Err(bad(path, format!("{name:?} is larger than it says, or than {} MB", limit >> 20)));
        }
        if name == MANIFEST {
            manifest = Some(bytes);
        } else {
            conversation = Some(bytes);
        }
    }
    let manifest_bytes = manifest.ok_or_else(|| bad(path, format!("it has no {MANIFEST}")))?;
    let value: serde_json::Value =
        serde_json::from_slice(&manifest_bytes).map_err(|e| bad(path, format!("{MANIFEST} is not JSON: {e}")))?;
    if value.get("format").and_then(|f| f.as_str()) != Some(Manifest::FORMAT) {
        return Err(bad(path, format!("{MANIFEST} does not name the format {}", Manifest::FORMAT)));
    }
    let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
    if version > Manifest::VERSION as u64 {
        return Err(bad(
            path,
            format!(
                "it was written by a newer Hearth (bundle version {version}; this build reads up to {})",
                Manifest::VERSION
            ),
        ));
    }
    let manifest: Manifest =
        serde_json::from_value(value).map_err(|e| bad(path, format!("{MANIFEST} is malformed: {e}")))?;
    let conversation_bytes = conversation.ok_or_else(|| bad(path, format!("it has no {CONVERSATION}")))?;
    let conversation = match Import::parse(&conversation_bytes).map_err(|e| bad(path, e))? {
        Import::Conversations(mut list) if list.len() == 1 && conversation_bytes.starts_with(b"{") => list.remove(0),
        _ => return Err(bad(path, format!("{CONVERSATION} is not one Hearth conversation"))),
    };
    if cache.is_some() != manifest.model.is_some() {
        return Err(bad(path, "its manifest and its cache disagree"));
    }
    Ok(Opened { zip, manifest, conversation, cache })
}

/// Imports the bundle at `path`: the conversation always (unless the
/// database holds it already), its cache where `engine` is the model that
/// computed it. `caches_dir` is where the worker looks for saved caches.
pub fn import(
    store: &Store,
    engine: Option<&Engine>,
    caches_dir: Option<&Path>,
    budgets: CacheBudgets,
    disk_reserve: u64,
    path: &Path,
) -> AppResult<BundleImport> {
    let mut opened = open(path)?;
    // The cache is checked whole before the conversation is written, so
    // what the import says of it is what the next turn finds. It is read
    // only where it can be used, and a cache that cannot be costs only the cache.
    let cache = match (opened.cache, &opened.manifest.model) {
        (Some((index, size)), Some(model)) => Some((|| {
            let (engine, dir) = usable(engine, model, caches_dir, budgets, disk_reserve, size)?;
            let copy = copy_out(path, &mut opened.zip, index, size, dir)?;
            check_cache(engine, copy.path())
        })()),
        _ => None,
    };
    let cache = match cache {
        Some(Err(Refusal::Hostile(e))) => return Err(e),
        Some(Err(Refusal::Skip(note))) => Some(Err(note)),
        Some(Ok(session)) => Some(Ok(session)),
        None => None,
    };
    let report = store.import(&Import::Conversations(vec![opened.conversation]))?;
    let (cache, cache_note) = match (cache, report.imported.first()) {
        (None, _) => (CacheImport::None, None),
        (Some(_), None) => (CacheImport::Skipped, Some("this conversation is already here".to_string())),
        (Some(Err(note)), Some(_)) => (CacheImport::Skipped, Some(note)),
        (Some(Ok(session)), Some(&id)) => {
            let (engine, dir) =
                (engine.expect("a checked cache has an engine"), caches_dir.expect("a checked cache has a folder"));
            let dest = dir.join(format!("{id}.session"));
            let written = engine
                .cache_identity(session.context_length())
                .and_then(|identity| hearth_engine::session_file::write(&dest, &identity, &session));
            match written {
                Ok(()) => (CacheImport::Restored, None),
                Err(e) => {
                    let _ = std::fs::remove_file(&dest);
                    (CacheImport::Skipped, Some(format!("it could not be saved here ({e})")))
                }
            }
        }
    };
    Ok(BundleImport { report, cache, cache_note })
}

/// Why a bundle's cache is not installed: a bundle that lies about it is
/// refused whole; anything else costs only the cache.
enum Refusal {
    Hostile(AppError),
    Skip(String),
}

impl From<String> for Refusal {
    fn from(note: String) -> Self {
        Refusal::Skip(note)
    }
}

/// Whether a cache of `size` bytes for `model` can be used here at all,
/// before a byte of it is read: the loaded model's file and build, saved
/// caches on, room on disk and in the memory budget.
fn usable<'e>(
    engine: Option<&'e Engine>,
    model: &ModelIdentity,
    caches_dir: Option<&Path>,
    budgets: CacheBudgets,
    disk_reserve: u64,
    size: u64,
) -> Result<(&'e Engine, PathBuf), Refusal> {
    let wanted = if model.name.is_empty() { "the model it was made with".to_string() } else { model.name.clone() };
    let Some(engine) = engine else { return Err(format!("no model is loaded; it needs {wanted}").into()) };
    let Some(dir) = caches_dir else { return Err(Refusal::Skip("caches are not saved in this session".into())) };
    let Some(loaded) = engine.file_sha256() else {
        return Err(Refusal::Skip("the loaded model is still being checked (hashed); import again in a moment".into()));
    };
    if loaded != model.sha256 {
        return Err(format!("it was computed with another model ({wanted})").into());
    }
    if model.engine_build != hearth_engine::BUILD_ID {
        return Err(format!("it was computed by another Hearth build ({})", model.engine_build).into());
    }
    if budgets.disk_mb == 0 {
        return Err(Refusal::Skip("saved caches are turned off (disk budget 0)".into()));
    }
    if size > (budgets.disk_mb as u64) << 20 || size > (budgets.memory_mb as u64) << 20 {
        return Err(format!("it is {} MB, more than the cache budgets allow", size >> 20).into());
    }
    std::fs::create_dir_all(dir).map_err(|e| Refusal::Skip(format!("the caches folder cannot be made ({e})")))?;
    // A copy to check, then the cache itself, and the disk's reserve kept.
    if fs4::available_space(dir).is_ok_and(|free| free < 2 * size + disk_reserve) {
        return Err(Refusal::Skip("there is not enough free disk space for it".into()));
    }
    Ok((engine, dir.to_path_buf()))
}

/// Copies the cache member out beside the caches (as `import-*.tmp`, which
/// the next start deletes if this one dies), reading no more than it declares.
fn copy_out(
    path: &Path,
    zip: &mut zip::ZipArchive<File>,
    index: usize,
    size: u64,
    dir: PathBuf,
) -> Result<tempfile::NamedTempFile, Refusal> {
    let mut member = zip.by_index(index).map_err(|e| Refusal::Hostile(bad(path, e)))?;
    let mut tmp = tempfile::Builder::new()
        .prefix("import-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(|e| format!("it could not be copied ({e})"))?;
    let copied = match std::io::copy(&mut (&mut member).take(size + 1), tmp.as_file_mut()) {
        Ok(n) => n,
        // A member that fails to inflate is the bundle's fault; a full disk is not.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof) => {
            return Err(Refusal::Hostile(bad(path, format!("{CACHE:?}: {e}"))))
        }
        Err(e) => return Err(format!("it could not be copied ({e})").into()),
    };
    if copied != size {
        return Err(Refusal::Hostile(bad(path, format!("{CACHE:?} is larger or smaller than it says"))));
    }
    Ok(tmp)
}

/// The copied cache as a session of the loaded model, or why not.
fn check_cache(engine: &Engine, file: &Path) -> Result<hearth_engine::Session, Refusal> {
    let loaded = engine.file_sha256().unwrap_or_default();
    let identity = hearth_engine::session_file::read_identity(file).map_err(|e| format!("it is damaged ({e})"))?;
    if identity.model_sha256.as_deref() != Some(loaded) || identity.engine_version != hearth_engine::BUILD_ID {
        return Err("its cache file names another model than its manifest".to_string().into());
    }
    // Same bytes, same build: the device's cache type must agree as well.
    let here = engine.cache_identity(identity.context_length).map_err(|e| e.to_string())?;
    if (here.architecture.as_str(), here.dtype.as_str()) != (identity.architecture.as_str(), identity.dtype.as_str()) {
        return Err(format!(
            "it was computed as {} {}; here it would be {} {}",
            identity.architecture, identity.dtype, here.architecture, here.dtype
        )
        .into());
    }
    let restored = hearth_engine::session_file::read(file, &identity, engine.model())
        .map_err(|e| format!("it is damaged ({e})"))?;
    if !restored.complete {
        return Err("it is damaged (a chunk failed its checksum)".to_string().into());
    }
    Ok(restored.session)
}
