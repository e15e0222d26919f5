//! One KV cache type for every model family.
//!
//! Keys live in buffers of shape `[batch, kv_heads, capacity, head_dim]`
//! that are written in place, so a decode step never copies the history. On
//! the CPU values are kept transposed, `[batch, kv_heads, head_dim,
//! capacity]`, as llama.cpp keeps them: attention's weighted sum is then a
//! dot product along each row of values. The
//! buffers grow geometrically up to `max_len` (the context length) instead of
//! being allocated at full size up front: a user keeps dozens of conversations,
//! and a full 8k-token buffer for each would cost hundreds of MB apiece.
//!
//! Clones are cheap and copy-on-write: they share buffers until one of them is
//! written, which then copies only the used prefix first.
//!
//! Keys and values are stored in f16, as llama.cpp stores them by default:
//! half the memory and half the disk of f32, and the session file holds the
//! exact bits that memory holds, so a restored cache is the cache that was
//! saved. On the CPU the buffers are plain `Vec<f16>`s that the forward pass
//! reads and writes directly; on other devices (and for the graph pass on
//! the CPU, `Kernels::Graph`) they are f16 candle tensors.
//!
//! A hybrid model's recurrent layers keep no keys or values: their state,
//! and the checkpoints that let the cache be cut back, are a
//! [`RecurrentState`] held here too, so a cache is still one value that
//! clones, truncates, saves and restores as a whole.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use half::f16;

use crate::error::{EngineError, Result};
use crate::model::config::ModelConfig;
use crate::recurrent_state::RecurrentState;

mod halves;
mod host;
mod persist;

use halves::zeroed_halves;
pub(crate) use halves::{f16_bytes, Halves, LeHalves};

/// Smallest allocation, in positions, so short chats do not regrow every turn.
const MIN_CAPACITY: usize = 256;

/// What one position of one KV head of a layer stores.
#[derive(Clone, Copy, Debug)]
struct KvShape {
    heads: usize,
    key_dim: usize,
    /// 0 where the values are the keys' leading dimensions (latent
    /// attention's, `ModelConfig::values_in_keys`): they are read from the
    /// keys, not stored twice.
    value_dim: usize,
}

impl KvShape {
    /// f16 values one position of one sequence holds.
    fn width(&self) -> usize {
        self.heads * (self.key_dim + self.value_dim)
    }
}

/// Positional KV storage for all layers of one model.
#[derive(Clone)]
pub struct KvCache {
    layers: Arc<Vec<LayerKv>>,
    len: usize,
    capacity: usize,
    max_len: usize,
    batch: usize,
    n_layers: usize,
    /// The full layers' KV heads and head size, as a saved cache's header
    /// names them.
    n_kv_heads: usize,
    head_dim: usize,
    /// `kv_layers[i]`: layer `i`'s KV heads and sizes where it keeps
    /// keys and values of its own (not a hybrid's recurrent layers, nor
    /// Gemma 4's layers that read an earlier layer's).
    kv_layers: Arc<Vec<Option<KvShape>>>,
    recurrent: Option<RecurrentState>,
    /// The MTP head's layer and what it keeps, for a model with one
    /// (`model/mtp.rs`): `kv_layers` holds it once the head runs for this
    /// cache (`start_mtp`).
    mtp_head: Option<(usize, KvShape)>,
    /// The model's last hidden states, which its MTP head reads one
    /// position behind; empty where the head does not run.
    mtp_hidden: MtpHidden,
    device: Device,
    /// Buffers as candle tensors (`LayerKv::Device`) rather than plain
    /// host vectors: on a GPU, and for the graph pass on the CPU.
    tensors: bool,
}

/// Final hidden states (after the output norm) of the last positions a
/// pass ran, as the MTP head reads them: position `p`'s with token `p + 1`.
/// Kept for a verify pass's every row (and the position before it), so a
/// cut-back finds the one at its new end; for a prefill chunk, its last.
/// Also each checkpoint's (`KvCache::checkpoint`: a prompt's end, a
/// turn's), where a regeneration, an edit or a hybrid's rewind lands.
/// Not saved: a restored cache's head reads zeros for the first position
/// after it, which changes only how well it drafts.
#[derive(Clone, Default)]
struct MtpHidden {
    /// The position of the first row.
    first: usize,
    /// `[batch, rows, width]`.
    rows: Vec<f32>,
    width: usize,
    /// `(len, state at len - 1)` at the latest checkpoints of one sequence.
    anchors: Vec<(usize, Vec<f32>)>,
}

/// Checkpoints whose hidden state the MTP head keeps.
const MTP_ANCHORS: usize = 16;

enum LayerKv {
    /// `k`: `[batch, kv_heads, capacity, key_dim]`; `v`: `[batch, kv_heads, value_dim, capacity]`
    /// (empty where the values are the keys', `KvShape`).
    Host { k: Vec<f16>, v: Vec<f16> },
    /// `v` is `None` where the values are the keys' (no zero-width tensor:
    /// CUDA has no kernel launch of no threads).
    Device { k: Tensor, v: Option<Tensor> },
}

impl KvCache {
    /// An empty cache for `config`, holding at most `max_len` positions.
    pub fn new(config: &ModelConfig, max_len: usize, device: &Device) -> Self {
        let shape = |i: usize| {
            let a = config.attention_shape(i);
            let value_dim = if config.values_in_keys() { 0 } else { a.head_dim };
            config.stores_kv(i).then_some(KvShape { heads: a.n_kv_heads, key_dim: a.head_dim, value_dim })
        };
        Self {
            layers: Arc::new(Vec::new()),
            len: 0,
            capacity: 0,
            max_len,
            batch: 1,
            n_layers: config.cache_layers(),
            n_kv_heads: config.n_kv_heads,
            head_dim: config.head_dim,
            // The MTP head's layer keeps nothing until the head starts (`start_mtp`).
            kv_layers: Arc::new((0..config.cache_layers()).map(|i| shape(i).filter(|_| i < config.n_layers)).collect()),
            recurrent: config.recurrent.as_ref().map(RecurrentState::new),
            mtp_head: (config.mtp_layers > 0).then(|| shape(config.n_layers).map(|s| (config.n_layers, s))).flatten(),
            mtp_hidden: MtpHidden::default(),
            device: device.clone(),
            tensors: !device.is_cpu(),
        }
    }

    /// Whether the buffers are candle tensors, as on a GPU (rather than the
    /// host pass's plain vectors).
    pub fn holds_tensors(&self) -> bool {
        self.tensors
    }

    /// This empty cache with its buffers as tensors even on the CPU, as a
    /// GPU keeps them: for the graph pass there (`Kernels::Graph`).
    pub(crate) fn in_tensors(mut self) -> Self {
        debug_assert!(self.layers.is_empty());
        self.tensors = true;
        self
    }

    /// Keys and values one position of one sequence holds, over every layer.
    fn kv_width(&self) -> usize {
        self.kv_layers.iter().flatten().map(KvShape::width).sum()
    }

    /// A hybrid model's recurrent state, for its pass to read and write.
    pub(crate) fn recurrent_mut(&mut self) -> Option<&mut RecurrentState> {
        self.recurrent.as_mut()
    }

    /// Whether this cache holds a recurrent state (a hybrid model's).
    pub fn is_hybrid(&self) -> bool {
        self.recurrent.is_some()
    }

    /// Positions at which the recurrent state is kept, for cutting the cache
    /// back (empty for a transformer's cache, which can be cut anywhere).
    pub fn checkpoint_positions(&self) -> Vec<usize> {
        self.recurrent.as_ref().map_or_else(Vec::new, RecurrentState::checkpoint_positions)
    }

    /// Bytes one checkpoint of the recurrent state takes (0 without one).
    pub fn state_bytes(&self) -> usize {
        self.recurrent.as_ref().map_or(0, RecurrentState::state_bytes)
    }

    /// Keeps the recurrent state at the current length as a checkpoint, so
    /// the cache can later be cut back to here (a turn's end). Nothing for
    /// a transformer's cache.
    pub fn checkpoint(&mut self) {
        if let Some(r) = &mut self.recurrent {
            r.checkpoint(self.len);
        }
        if let Some(h) = self.mtp_hidden(0).filter(|_| self.batch == 1).map(<[f32]>::to_vec) {
            let len = self.len;
            let anchors = &mut self.mtp_hidden.anchors;
            anchors.retain(|(at, _)| *at != len);
            anchors.push((len, h));
            if anchors.len() > MTP_ANCHORS {
                anchors.remove(0);
            }
        }
    }

    /// The recurrent state at position `pos` (the current length or a
    /// checkpoint), as a saved cache holds it.
    pub(crate) fn state_to_bytes(&self, pos: usize) -> Result<Vec<u8>> {
        match &self.recurrent {
            Some(r) if pos == self.len && r.is_at(self.len) => Ok(r.to_bytes()),
            Some(r) => r
                .checkpoint_bytes(pos)
                .ok_or_else(|| EngineError::CorruptCache(format!("no recurrent state kept at position {pos}"))),
            None => Ok(Vec::new()),
        }
    }

    /// The recurrent state, for a hybrid model.
    pub(crate) fn recurrent(&self) -> Option<&RecurrentState> {
        self.recurrent.as_ref()
    }

    /// Sets the recurrent state at the current length from each layer's
    /// (`RecurrentState::layer_from_bytes`), keeping it as a checkpoint.
    pub(crate) fn install_state(&mut self, layers: Vec<(Vec<f32>, Vec<f32>)>) -> Result<()> {
        let len = self.len;
        match &mut self.recurrent {
            Some(r) => r.install(layers, len).map_err(EngineError::CorruptCache),
            None => Ok(()),
        }
    }

    /// Before a pass of `rows` rows writes this cache.
    pub(crate) fn begin_pass(&mut self, rows: usize) {
        if let Some(r) = &mut self.recurrent {
            r.begin_pass(self.len, rows);
        }
    }

    /// Before a speculative verify pass of `rows` rows (more than one)
    /// writes this cache: a recurrent state keeps where it was, to cut back
    /// to (`truncate`), apart from its checkpoints.
    pub(crate) fn begin_verify_pass(&mut self, rows: usize) {
        match &mut self.recurrent {
            Some(r) if rows > 1 => r.begin_verify_pass(self.len),
            _ => self.begin_pass(rows),
        }
    }

    /// Forgets where a verify pass began (`begin_verify_pass`).
    pub(crate) fn release_rollback(&mut self) {
        if let Some(r) = &mut self.recurrent {
            r.release_rollback();
        }
    }

    /// After a pass of `rows` rows advanced this cache.
    pub(crate) fn end_pass(&mut self, rows: usize) {
        if let Some(r) = &mut self.recurrent {
            r.end_pass(self.len, rows);
        }
    }

    pub(crate) fn n_layers(&self) -> usize {
        self.n_layers
    }

    /// Positions filled so far (the same for every sequence of the batch).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    pub fn is_full(&self) -> bool {
        self.len >= self.max_len
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Bytes one position of one sequence takes, in memory and on disk.
    pub fn bytes_per_position(&self) -> usize {
        self.kv_width() * 2
    }

    /// Bytes held by the buffers (what this cache costs in memory).
    pub fn allocated_bytes(&self) -> usize {
        let kv = self.kv_width() * self.batch * self.capacity * 2;
        kv + self.recurrent.as_ref().map_or(0, RecurrentState::allocated_bytes)
    }

    /// Forgets every position from `len` on. Later writes overwrite them.
    ///
    /// A hybrid cache goes back to its latest checkpoint at or before `len`,
    /// which may hold fewer positions: read `len()` after.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        if let Some(r) = &mut self.recurrent {
            self.len = r.rewind(self.len);
        }
        // A checkpoint past the end is of positions that will be written again.
        let len = self.len;
        self.mtp_hidden.anchors.retain(|(at, _)| *at <= len);
    }

    /// Makes room for `n_new` positions and ensures the buffers are not shared,
    /// so that the writes that follow cannot reach another clone.
    pub(crate) fn reserve(&mut self, n_new: usize, batch: usize) -> Result<()> {
        let needed = self.len + n_new;
        if needed > self.max_len {
            return Err(EngineError::PromptTooLong { tokens: needed, context: self.max_len });
        }
        if self.recurrent.is_some() && batch != 1 {
            return Err(EngineError::setting("batch", "a hybrid model's cache holds one sequence"));
        }
        if self.layers.is_empty() {
            self.batch = batch;
        } else if batch != self.batch {
            return Err(
                candle_core::Error::Msg(format!("batch {batch} does not match the cache's {}", self.batch)).into()
            );
        }
        let shared = Arc::strong_count(&self.layers) > 1;
        if needed > self.capacity || shared || self.layers.is_empty() {
            let mut capacity = self.capacity.max(MIN_CAPACITY.min(self.max_len));
            while capacity < needed {
                capacity = (capacity * 2).min(self.max_len);
            }
            self.reallocate(capacity)?;
        }
        Ok(())
    }

    fn reallocate(&mut self, capacity: usize) -> Result<()> {
        let mut layers = Vec::with_capacity(self.n_layers);
        let (len, old_cap) = (self.len, self.capacity);
        for i in 0..self.n_layers {
            let old = self.layers.get(i);
            let layer = if let Some(KvShape { heads, key_dim: d, value_dim: vd }) = self.kv_layers[i] {
                if !self.tensors {
                    let mut k = zeroed_halves(self.batch * heads * capacity * d);
                    let mut v = zeroed_halves(self.batch * heads * capacity * vd);
                    if let Some(LayerKv::Host { k: ok, v: ov }) = old {
                        for run in 0..self.batch * heads {
                            let (src, dst) = (run * old_cap * d, run * capacity * d);
                            k[dst..dst + len * d].copy_from_slice(&ok[src..src + len * d]);
                        }
                        for row in 0..self.batch * heads * vd {
                            v[row * capacity..row * capacity + len]
                                .copy_from_slice(&ov[row * old_cap..row * old_cap + len]);
                        }
                    }
                    LayerKv::Host { k, v }
                } else {
                    self.device_layer(old, heads, d, vd, capacity)?
                }
            } else {
                LayerKv::Host { k: Vec::new(), v: Vec::new() }
            };
            layers.push(layer);
        }
        self.layers = Arc::new(layers);
        self.capacity = capacity;
        Ok(())
    }

    /// A device layer's buffers of `capacity` positions, holding `old`'s.
    fn device_layer(
        &self,
        old: Option<&LayerKv>,
        heads: usize,
        d: usize,
        vd: usize,
        capacity: usize,
    ) -> Result<LayerKv> {
        let len = self.len;
        let k = Tensor::zeros((self.batch, heads, capacity, d), DType::F16, &self.device)?;
        let v = match vd {
            0 => None,
            _ => Some(Tensor::zeros((self.batch, heads, capacity, vd), DType::F16, &self.device)?),
        };
        if let (Some(LayerKv::Device { k: ok, v: ov }), true) = (old, len > 0) {
            k.slice_set(&ok.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
            if let (Some(v), Some(ov)) = (&v, ov) {
                v.slice_set(&ov.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
            }
        }
        Ok(LayerKv::Device { k, v })
    }

    /// Writes new keys and values (`[batch, kv_heads, n, key_dim]` and
    /// `[…, value_dim]`; no values where they are the keys') at `len`,
    /// rounded to f16. Call `reserve` first and `advance` after the last layer.
    pub(crate) fn write(&mut self, layer: usize, k: &Tensor, v: Option<&Tensor>) -> Result<()> {
        let k = k.to_dtype(DType::F16)?;
        let v = v.map(|v| v.to_dtype(DType::F16)).transpose()?;
        if !self.tensors {
            let n = k.dims4()?.2;
            let kd = k.flatten_all()?.to_vec1::<f16>()?;
            let vd = match &v {
                Some(v) => v.flatten_all()?.to_vec1::<f16>()?,
                None => Vec::new(),
            };
            return self.write_bits(layer, kd.as_slice(), vd.as_slice(), n);
        }
        let pos = self.len;
        match &self.layers[layer] {
            LayerKv::Device { k: ck, v: cv } => {
                ck.slice_set(&k, 2, pos)?;
                match (cv, &v) {
                    (Some(cv), Some(v)) => cv.slice_set(v, 2, pos)?,
                    (None, None) => {}
                    _ => {
                        return Err(EngineError::CorruptCache(format!(
                            "values for layer {layer} where the cache keeps none, or none where it does"
                        )))
                    }
                }
            }
            LayerKv::Host { .. } => unreachable!(),
        }
        Ok(())
    }

    /// Writes `n` positions of f16 keys and values (`[batch, kv_heads, n,
    /// key_dim]` and `[…, value_dim]`) at `len`, exactly as given: how saved caches come back.
    /// Call `reserve` first and `advance` after the last layer (a caller
    /// that never advances leaves the cache as it was).
    pub(crate) fn write_bits<S: Halves + ?Sized>(&mut self, layer: usize, k: &S, v: &S, n: usize) -> Result<()> {
        let Some(KvShape { heads, key_dim: d, value_dim: vd }) = self.kv_layers[layer] else {
            if k.count() != 0 || v.count() != 0 {
                return Err(EngineError::CorruptCache(format!("keys and values for layer {layer}, which keeps none")));
            }
            return Ok(());
        };
        let (pos, runs) = (self.len, self.batch * heads);
        if k.count() != runs * n * d || v.count() != runs * n * vd {
            return Err(EngineError::CorruptCache(format!(
                "{} keys and {} values for {n} positions of layer {layer}",
                k.count(),
                v.count()
            )));
        }
        if self.tensors {
            let kt = Tensor::from_vec(k.to_vec(), (self.batch, heads, n, d), &self.device)?;
            if vd == 0 {
                return self.write(layer, &kt, None);
            }
            let vt = Tensor::from_vec(v.to_vec(), (self.batch, heads, n, vd), &self.device)?;
            return self.write(layer, &kt, Some(&vt));
        }
        let host = self.host_mut(layer);
        let cap = host.capacity;
        for run in 0..runs {
            let (src, dst) = (run * n * d, (run * cap + pos) * d);
            k.copy_to(src, &mut host.k[dst..dst + n * d]);
            // Row by row of the destination, so the writes are sequential.
            let src = run * n * vd;
            for j in 0..vd {
                let row = &mut host.v_t[(run * vd + j) * cap + pos..(run * vd + j) * cap + pos + n];
                for (i, x) in row.iter_mut().enumerate() {
                    *x = v.at(src + i * vd + j);
                }
            }
        }
        Ok(())
    }

    /// The stored f16 keys and values of positions `start..end` of `layer`,
    /// as `[batch, kv_heads, n, head_dim]`: what a saved cache holds (no
    /// values where they are the keys').
    pub(crate) fn bits(&self, layer: usize, start: usize, end: usize) -> Result<(Vec<f16>, Vec<f16>)> {
        let Some(KvShape { heads, key_dim: d, value_dim: vd }) = self.kv_layers[layer] else {
            return Ok((Vec::new(), Vec::new()));
        };
        match &self.layers[layer] {
            LayerKv::Device { k, v } => {
                let read = |t: &Tensor| -> candle_core::Result<Vec<f16>> {
                    t.narrow(2, start, end - start)?.contiguous()?.flatten_all()?.to_vec1()
                };
                let values = match v {
                    Some(v) => read(v)?,
                    None => Vec::new(),
                };
                Ok((read(k)?, values))
            }
            LayerKv::Host { k, v } => {
                let cap = self.capacity;
                let runs = self.batch * heads;
                let keys = (0..runs)
                    .flat_map(|run| k[(run * cap + start) * d..(run * cap + end) * d].iter().copied())
                    .collect();
                let values = (0..runs)
                    .flat_map(|run| (start..end).flat_map(move |i| (0..vd).map(move |j| v[(run * vd + j) * cap + i])))
                    .collect();
                Ok((keys, values))
            }
        }
    }

    /// Keys and values for positions `start..end` of `layer`, as f32 tensors.
    pub(crate) fn view(&self, layer: usize, start: usize, end: usize) -> Result<(Tensor, Option<Tensor>)> {
        let n = end - start;
        match &self.layers[layer] {
            LayerKv::Device { k, v } => {
                let widen = |t: &Tensor| t.narrow(2, start, n)?.to_dtype(DType::F32);
                Ok((widen(k)?, v.as_ref().map(widen).transpose()?))
            }
            LayerKv::Host { .. } => {
                let (k, v) = self.bits(layer, start, end)?;
                let s = self.kv_layers[layer].unwrap_or(KvShape { heads: 0, key_dim: 0, value_dim: 0 });
                let widen = |x: Vec<f16>| -> Vec<f32> { x.into_iter().map(f16::to_f32).collect() };
                let values = match s.value_dim {
                    0 => None,
                    vd => Some(Tensor::from_vec(widen(v), (self.batch, s.heads, n, vd), &self.device)?),
                };
                Ok((Tensor::from_vec(widen(k), (self.batch, s.heads, n, s.key_dim), &self.device)?, values))
            }
        }
    }

    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
    }

    /// Whether the model's MTP head runs for this cache: every pass writes
    /// its layer, which then holds every position the cache holds.
    pub fn mtp_live(&self) -> bool {
        self.mtp_head.is_some_and(|(i, _)| self.kv_layers[i].is_some())
    }

    /// Starts the model's MTP head for this cache, which must then be empty
    /// (the head must read every position it later attends to); whether
    /// it runs now. From here on every pass runs the head for it, whatever
    /// the reply's drafting: a turn without drafts keeps its layer whole.
    pub fn start_mtp(&mut self) -> bool {
        match self.mtp_head {
            Some(_) if self.mtp_live() => true,
            Some((i, shape)) if self.len == 0 => {
                Arc::make_mut(&mut self.kv_layers)[i] = Some(shape);
                // Buffers made before had no room for the head's layer.
                self.layers = Arc::new(Vec::new());
                self.capacity = 0;
                true
            }
            _ => false,
        }
    }

    /// Layers whose keys and values this cache holds, counted as a saved
    /// cache's header counts them: the model's, and its MTP head's where
    /// it runs.
    pub(crate) fn layers_kept(&self) -> usize {
        self.n_layers - usize::from(self.mtp_head.is_some() && !self.mtp_live())
    }

    /// Sequence `b`'s final hidden state at position `len - 1`, where a
    /// pass kept it (`keep_mtp_hidden`).
    pub(crate) fn mtp_hidden(&self, b: usize) -> Option<&[f32]> {
        self.mtp_hidden_at(b, self.len.checked_sub(1)?)
    }

    fn mtp_hidden_at(&self, b: usize, pos: usize) -> Option<&[f32]> {
        let h = &self.mtp_hidden;
        if h.width == 0 || b >= self.batch || pos >= self.len {
            return None;
        }
        let per_sequence = h.rows.len() / (self.batch * h.width);
        match pos.checked_sub(h.first) {
            Some(at) if at < per_sequence => {
                let start = (b * per_sequence + at) * h.width;
                Some(&h.rows[start..start + h.width])
            }
            _ => h.anchors.iter().find(|(at, _)| *at == pos + 1 && b == 0).map(|(_, v)| v.as_slice()),
        }
    }

    /// Keeps the final hidden states of positions `first..` (`[batch,
    /// rows, width]`) after a pass that wrote positions from `pass_start`:
    /// the MTP head reads them (`mtp_hidden`). For one sequence whose pass
    /// kept every row (`first == pass_start`), the state before the pass,
    /// where known, is kept before them, so a cut-back to where the pass
    /// began finds it. (A state the pass overwrote may be another text's.)
    pub(crate) fn keep_mtp_hidden(&mut self, (pass_start, first): (usize, usize), rows: &[f32], width: usize) {
        let previous = match first.checked_sub(1) {
            Some(p) if self.batch == 1 && first == pass_start => self.mtp_hidden_at(0, p).map(<[f32]>::to_vec),
            _ => None,
        };
        let anchors = std::mem::take(&mut self.mtp_hidden.anchors);
        self.mtp_hidden = match previous {
            Some(mut all) => {
                all.extend_from_slice(rows);
                MtpHidden { first: first - 1, rows: all, width, anchors }
            }
            None => MtpHidden { first, rows: rows.to_vec(), width, anchors },
        };
    }
}
