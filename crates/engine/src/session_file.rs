//! A conversation's cache on disk, so continuing it after a restart runs only
//! the new tokens.
//!
//! The file is an append-only log: a header naming exactly what the cache
//! was computed with (`CacheIdentity`) and its SHA-256, then chunks of
//! positions, each with its first position, its token ids, the forward
//! passes that computed them (`Passes`: what an exact replay re-runs), every layer's
//! keys and values in f16 (the bits memory holds, so a restored cache is
//! bit-identical to the one saved), and a SHA-256 of the previous digest and
//! the chunk. The digests chain, so chunks spliced in from another history
//! (or another file) are rejected where the splice is. A turn appends one
//! chunk; a branch to an earlier point rewrites the file (temp file, fsync,
//! rename). Reading stops at the first chunk that is torn, out of place or
//! fails its digest, and keeps the verified chunks before it.
//!
//! A hybrid model's chunk also holds its recurrent state at the chunk's end
//! (its attention layers alone have keys and values), which comes back as a
//! checkpoint: a restored conversation can be cut back to the end of any
//! saved turn.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{EngineError, Result};
use crate::kv_cache::{f16_bytes, KvCache, LeHalves};
use crate::model::Model;
use crate::passes::{Pass, Passes};
use crate::session::Session;

const MAGIC: &[u8; 8] = b"HEARTHSF";
const CHUNK: &[u8; 4] = b"CHNK";
/// 4: chunks carry the passes that computed them; 3: chunks carry their
/// first position and chain their digests; 2: keys and values in f16; 1
/// held f32.
pub(crate) const FORMAT_VERSION: u32 = 4;

/// What a saved cache was computed with. A cache is used only when all of it
/// matches the model and settings it would be used with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheIdentity {
    pub model_size: u64,
    /// Modification time, nanoseconds since the Unix epoch.
    pub model_mtime_ns: u64,
    /// SHA-256 of the whole model file; `None` while it is being computed,
    /// and a cache written then is never read back.
    pub model_sha256: Option<String>,
    pub architecture: String,
    pub dtype: String,
    pub context_length: usize,
    pub engine_version: String,
    pub format_version: u32,
    /// Layers whose keys and values the file holds: the model's, and its
    /// MTP head's where the head ran for the cache (`KvCache::mtp_live`).
    /// `Engine::cache_identity` names the model's; `write` the cache's.
    #[serde(default)]
    pub cache_layers: usize,
}

/// What `read` recovered.
pub struct Restored {
    pub session: Session,
    /// False when a torn or corrupt chunk ended the read early; the session
    /// then covers only the verified chunks before it, and the file should be
    /// rewritten.
    pub complete: bool,
}

fn corrupt(path: &Path, what: impl std::fmt::Display) -> EngineError {
    EngineError::CorruptCache(format!("{}: {what}", path.display()))
}

/// The identity a cache file was saved under, read from its checked
/// header alone (a bundle from another machine names its model by hash).
pub fn read_identity(path: &Path) -> Result<CacheIdentity> {
    let file = File::open(path).map_err(|e| corrupt(path, format!("cannot open: {e}")))?;
    read_header(path, &mut BufReader::new(file)).map(|(identity, _)| identity)
}

/// The header: the identity, and the digest the first chunk chains from.
fn read_header(path: &Path, r: &mut impl Read) -> Result<(CacheIdentity, [u8; 32])> {
    let mut fixed = [0u8; 16];
    r.read_exact(&mut fixed).map_err(|e| corrupt(path, format!("header: {e}")))?;
    if &fixed[..8] != MAGIC {
        return Err(corrupt(path, "not a Hearth session cache"));
    }
    let version = u32::from_le_bytes(fixed[8..12].try_into().expect("4 bytes"));
    let json_len = u32::from_le_bytes(fixed[12..16].try_into().expect("4 bytes")) as usize;
    if version != FORMAT_VERSION || json_len > 1 << 20 {
        return Err(corrupt(path, format!("format version {version}")));
    }
    let mut json = vec![0u8; json_len];
    r.read_exact(&mut json).map_err(|e| corrupt(path, format!("header: {e}")))?;
    let mut digest = [0u8; 32];
    r.read_exact(&mut digest).map_err(|e| corrupt(path, format!("header: {e}")))?;
    let mut hasher = Sha256::new();
    hasher.update(fixed);
    hasher.update(&json);
    if hasher.finalize().as_slice() != digest {
        return Err(corrupt(path, "header checksum mismatch"));
    }
    let identity = serde_json::from_slice(&json).map_err(|e| corrupt(path, e))?;
    Ok((identity, digest))
}

/// Writes all of `session` to `path`, replacing it atomically.
pub fn write(path: &Path, identity: &CacheIdentity, session: &Session) -> Result<()> {
    let tmp = tmp_path(path);
    let io = |e: std::io::Error| corrupt(&tmp, format!("cannot write: {e}"));
    let result = (|| {
        let mut w = BufWriter::new(File::create(&tmp).map_err(io)?);
        let identity = CacheIdentity { cache_layers: session.cache().layers_kept(), ..identity.clone() };
        let json = serde_json::to_vec(&identity).map_err(|e| corrupt(path, e))?;
        let mut header = Vec::with_capacity(16 + json.len());
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&(json.len() as u32).to_le_bytes());
        header.extend_from_slice(&json);
        let digest = Sha256::digest(&header);
        w.write_all(&header).map_err(io)?;
        w.write_all(&digest).map_err(io)?;
        write_chunks(&mut w, session, 0, digest.into())?;
        let file = w.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(|e| corrupt(path, format!("cannot replace: {e}")))?;
        if let Some(dir) = path.parent() {
            // Make the rename itself durable.
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Appends positions `from..` of `session` to a file that holds exactly
/// its first `from` tokens, computed by the same passes (the caller tracks
/// that), and a pass of `session` starts at `from`.
pub fn append(path: &Path, session: &Session, from: usize) -> Result<()> {
    append_observed(path, session, from, &|| {})
}

/// `append`, calling `mid_write` once while the file ends in part of the
/// new chunk (the rest still buffered): tests hold it there to show that
/// nothing copies a cache file mid-append.
pub fn append_observed(path: &Path, session: &Session, from: usize, mid_write: &dyn Fn()) -> Result<()> {
    if from >= session.tokens().len() {
        return Ok(());
    }
    // A cache whose MTP head started after the file was written keeps a
    // layer more than the file's chunks: it is written whole instead.
    let identity = read_identity(path)?;
    if identity.cache_layers != session.cache().layers_kept() {
        return write(path, &identity, session);
    }
    let io = |e: std::io::Error| corrupt(path, format!("cannot append: {e}"));
    let mut file = OpenOptions::new().read(true).append(true).open(path).map_err(io)?;
    // The file ends with the digest the new chunk chains to.
    let mut prev = [0u8; 32];
    file.seek(SeekFrom::End(-32)).and_then(|_| file.read_exact(&mut prev)).map_err(io)?;
    let mut w = BufWriter::new(file);
    write_chunks(&mut w, session, from, prev)?;
    mid_write();
    let file = w.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(())
}

/// Positions `from..` of `session` as chunks chained from `prev`: one, or
/// for a hybrid one per checkpoint of its recurrent state, so that every
/// checkpoint is saved.
fn write_chunks(w: &mut impl Write, session: &Session, from: usize, mut prev: [u8; 32]) -> Result<()> {
    let end = session.tokens().len();
    let mut cuts: Vec<usize> =
        session.cache().checkpoint_positions().into_iter().filter(|&p| p > from && p < end).collect();
    cuts.push(end);
    let mut start = from;
    for to in cuts {
        prev = write_chunk(w, session, start, to, prev)?;
        start = to;
    }
    Ok(())
}

/// Positions `from..to` as one chunk; its digest.
fn write_chunk(w: &mut impl Write, session: &Session, from: usize, to: usize, prev: [u8; 32]) -> Result<[u8; 32]> {
    let tokens = &session.tokens()[from..to];
    if tokens.is_empty() {
        return Ok(prev);
    }
    let cache = session.cache();
    if cache.batch() != 1 {
        return Err(EngineError::CorruptCache("only a batch-1 cache can be saved".into()));
    }
    let mut passes = session
        .passes()
        .after(from)
        .ok_or_else(|| EngineError::CorruptCache(format!("no pass of the cache starts at position {from}")))?;
    passes.truncate(to - from);
    let mut hasher = Sha256::new();
    hasher.update(prev);
    let mut put = |w: &mut dyn Write, bytes: &[u8]| -> Result<()> {
        hasher.update(bytes);
        w.write_all(bytes).map_err(|e| EngineError::CorruptCache(format!("cannot write: {e}")))
    };
    put(w, CHUNK)?;
    put(w, &(from as u64).to_le_bytes())?;
    put(w, &(tokens.len() as u32).to_le_bytes())?;
    let ids: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    put(w, &ids)?;
    put(w, &(passes.runs().len() as u32).to_le_bytes())?;
    let runs: Vec<u8> =
        passes.runs().iter().flat_map(|p| [p.rows, p.kept, p.count]).flat_map(u32::to_le_bytes).collect();
    put(w, &runs)?;
    for layer in 0..cache.n_layers() {
        let (k, v) = cache.bits(layer, from, from + tokens.len())?;
        for data in [k, v] {
            put(w, &f16_bytes(&data))?;
        }
    }
    if cache.is_hybrid() {
        put(w, &cache.state_to_bytes(to)?)?;
    }
    let digest: [u8; 32] = hasher.finalize().into();
    w.write_all(&digest).map_err(|e| EngineError::CorruptCache(format!("cannot write: {e}")))?;
    Ok(digest)
}

/// Reads a saved session for `model` if it was saved under `identity`.
/// A different identity, a bad header or an unreadable file is an error:
/// the caller discards the file and prefills from scratch.
pub fn read(path: &Path, identity: &CacheIdentity, model: &Model) -> Result<Restored> {
    if identity.model_sha256.is_none() {
        return Err(corrupt(path, "the model file's hash is not known yet"));
    }
    let file = File::open(path).map_err(|e| corrupt(path, format!("cannot open: {e}")))?;
    let mut r = BufReader::new(file);
    let (saved, digest) = read_header(path, &mut r)?;
    if saved != (CacheIdentity { cache_layers: saved.cache_layers, ..identity.clone() }) {
        return Err(corrupt(path, "saved for another model, context length or engine version"));
    }
    let config = model.config();
    // The model's layers, and its MTP head's where it ran for the cache.
    let head = config.mtp_layers > 0 && saved.cache_layers == config.cache_layers();
    if saved.cache_layers != config.n_layers && !head {
        return Err(corrupt(path, format!("holds {} layers, not {}", saved.cache_layers, config.n_layers)));
    }
    let mut cache = model.new_cache(identity.context_length);
    if head {
        cache.start_mtp();
    }
    let mut tokens: Vec<u32> = Vec::new();
    let mut passes = Passes::default();
    let widths: Vec<(usize, usize)> = (0..config.cache_layers())
        .map(|i| if i < saved.cache_layers { (config.kv_width(i), config.value_width(i)) } else { (0, 0) })
        .collect();
    let shape = ChunkShape { widths: &widths };
    let mut prev: [u8; 32] = digest;
    let complete = loop {
        let room = identity.context_length - tokens.len();
        let (ids, chunk_passes, hasher) = match read_chunk_head(&mut r, tokens.len(), room, &prev) {
            Ok(None) => break true,
            Ok(Some(head)) => head,
            Err(_) => break false,
        };
        let n = ids.len();
        cache.reserve(n, 1)?;
        // The cache counts the new positions only once the digest holds.
        let Ok((state, computed)) = read_payload(&mut r, &shape, &mut cache, hasher, n) else { break false };
        let mut digest = [0u8; 32];
        if r.read_exact(&mut digest).is_err() || digest != computed {
            break false;
        }
        passes.extend(&chunk_passes);
        cache.advance(n);
        if cache.is_hybrid() {
            cache.install_state(state)?;
        }
        tokens.extend(ids);
        prev = digest;
    };
    Ok(Restored { session: Session::from_parts(cache, tokens, passes)?, complete })
}

/// Each recurrent layer's state, convolution then delta rule.
type State = Vec<(Vec<f32>, Vec<f32>)>;

/// What a chunk holds per position.
struct ChunkShape<'a> {
    /// Keys and values per position of each layer; 0 for a layer that
    /// keeps none.
    widths: &'a [(usize, usize)],
}

/// The head of one chunk starting at position `at` and chained to the
/// digest `prev`: its ids, its passes, and the digest so far; `None` at a
/// clean end of file, or an error for a torn or misplaced one.
fn read_chunk_head(
    r: &mut impl Read,
    at: usize,
    room: usize,
    prev: &[u8; 32],
) -> std::result::Result<Option<(Vec<u32>, Passes, Sha256)>, String> {
    let mut tag = [0u8; 4];
    match r.read(&mut tag[..1]) {
        Ok(0) => return Ok(None),
        Ok(_) => {}
        Err(e) => return Err(e.to_string()),
    }
    r.read_exact(&mut tag[1..]).map_err(|e| e.to_string())?;
    if &tag != CHUNK {
        return Err("bad chunk tag".into());
    }
    let mut hasher = Sha256::new();
    hasher.update(prev);
    hasher.update(tag);
    let mut start = [0u8; 8];
    r.read_exact(&mut start).map_err(|e| e.to_string())?;
    hasher.update(start);
    if u64::from_le_bytes(start) != at as u64 {
        return Err(format!("chunk starts at position {}, expected {at}", u64::from_le_bytes(start)));
    }
    let mut n = [0u8; 4];
    r.read_exact(&mut n).map_err(|e| e.to_string())?;
    hasher.update(n);
    let n = u32::from_le_bytes(n) as usize;
    if n == 0 || n > room {
        return Err(format!("chunk of {n} positions does not fit"));
    }
    let mut ids = vec![0u8; n * 4];
    r.read_exact(&mut ids).map_err(|e| e.to_string())?;
    hasher.update(&ids);
    let mut runs = [0u8; 4];
    r.read_exact(&mut runs).map_err(|e| e.to_string())?;
    hasher.update(runs);
    let runs = u32::from_le_bytes(runs) as usize;
    if runs == 0 || runs > n {
        return Err(format!("{runs} runs of passes for {n} positions"));
    }
    let mut run_bytes = vec![0u8; runs * 12];
    r.read_exact(&mut run_bytes).map_err(|e| e.to_string())?;
    hasher.update(&run_bytes);
    let word = |i: usize| u32::from_le_bytes(run_bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    let passes = Passes::try_from(
        (0..runs)
            .map(|i| Pass { rows: word(3 * i), kept: word(3 * i + 1), count: word(3 * i + 2) })
            .collect::<Vec<_>>(),
    )
    .map_err(|e| e.to_string())?;
    if passes.len() != n {
        return Err(format!("passes cover {} positions of a chunk of {n}", passes.len()));
    }
    let ids = ids.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok(Some((ids, passes, hasher)))
}

/// A chunk's payload after its head: each layer's keys and values,
/// written into `cache` at its length (not yet advanced), then each
/// recurrent layer's state at the chunk's end, returned with the chunk's
/// digest as computed.
///
/// A second thread hashes each layer's bytes while the next layer is read
/// and taken in: restoring a conversation costs the slower of the two, not
/// their sum, and the layer buffers are reused, so the bytes pass through
/// memory that is already mapped and cached.
fn read_payload(
    r: &mut impl Read,
    shape: &ChunkShape,
    cache: &mut KvCache,
    mut hasher: Sha256,
    n: usize,
) -> std::result::Result<(State, [u8; 32]), String> {
    let recurrent = cache.recurrent().map(|s| (s.n_layers(), s.layer_bytes())).unwrap_or((0, 0));
    let (full_tx, full_rx) = mpsc::sync_channel::<Vec<u8>>(1);
    let (empty_tx, empty_rx) = mpsc::channel::<Vec<u8>>();
    std::thread::scope(|s| {
        let hashing = s.spawn(move || {
            for buf in full_rx {
                hasher.update(&buf);
                let _ = empty_tx.send(buf);
            }
            hasher
        });
        let mut state = Vec::with_capacity(recurrent.0);
        let taken = (|| {
            let mut next = |len: usize| -> std::result::Result<Vec<u8>, String> {
                let mut buf = empty_rx.try_recv().unwrap_or_default();
                read_exactly(r, &mut buf, len)?;
                Ok(buf)
            };
            for (layer, &(keys, values)) in shape.widths.iter().enumerate() {
                if keys == 0 {
                    continue;
                }
                let buf = next(n * (keys + values) * 2)?;
                let (k, v) = buf.split_at(n * keys * 2);
                cache.write_bits(layer, LeHalves::new(k), LeHalves::new(v), n).map_err(|e| e.to_string())?;
                full_tx.send(buf).map_err(|_| "the hashing thread stopped".to_string())?;
            }
            for _ in 0..recurrent.0 {
                let buf = next(recurrent.1)?;
                state.push(cache.recurrent().expect("a hybrid cache").layer_from_bytes(&buf));
                full_tx.send(buf).map_err(|_| "the hashing thread stopped".to_string())?;
            }
            Ok::<_, String>(())
        })();
        drop(full_tx);
        let hasher = hashing.join().map_err(|_| "the hashing thread panicked".to_string())?;
        taken?;
        Ok((state, hasher.finalize().into()))
    })
}

/// Reads exactly `len` bytes into `buf` (its old contents dropped), without
/// zeroing it first.
fn read_exactly(r: &mut impl Read, buf: &mut Vec<u8>, len: usize) -> std::result::Result<(), String> {
    buf.clear();
    buf.reserve(len);
    r.take(len as u64).read_to_end(buf).map_err(|e| e.to_string())?;
    if buf.len() != len {
        return Err("torn chunk".into());
    }
    Ok(())
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}
