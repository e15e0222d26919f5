//! A hybrid model's recurrent state (Qwen 3.5's Gated DeltaNet layers), held
//! in its `KvCache` beside the attention layers' keys and values, with
//! checkpoints of it.
//!
//! Keys and values can be cut back to any position; a recurrent state
//! summarises the whole prefix and cannot. So the cache keeps copies of the
//! state at chosen positions, and cutting it back to position `p` restores
//! the latest copy at or before `p`: the session then re-reads only the
//! tokens after that copy. Copies are taken where a conversation is likely
//! to branch or stop: at each end of a prompt's chunk (so the end of every
//! user message), at the end of every turn, every
//! [`DECODE_CHECKPOINT_INTERVAL`] positions of a reply, and before a pass of
//! several rows writes the state (so a pass stopped between its layers
//! leaves nothing half-written). A copy shares its buffers with the state
//! until the next pass writes them, so taking one costs a copy of the state
//! only if a pass follows.
//!
//! The state is f32, as llama.cpp keeps it.

use std::sync::Arc;

use crate::model::config::RecurrentConfig;

/// Positions of a reply between two checkpoints: a branch from a token
/// alternative re-reads at most this many.
pub const DECODE_CHECKPOINT_INTERVAL: usize = 256;

/// Checkpoints one cache keeps; past this, the one nearest its predecessor goes.
pub const MAX_CHECKPOINTS: usize = 16;

/// One position's state of every recurrent layer.
#[derive(Clone, PartialEq)]
pub(crate) struct StateBits {
    /// Per recurrent layer: the convolution's last inputs, `[channels][kernel − 1]`
    /// oldest first, then the delta rule's matrices, `[v_heads][v][k]`.
    layers: Vec<(Vec<f32>, Vec<f32>)>,
}

/// The current state and its checkpoints.
#[derive(Clone)]
pub(crate) struct RecurrentState {
    conv_len: usize,
    delta_len: usize,
    n_layers: usize,
    /// The state; `None` is all zeros (nothing read yet).
    current: Option<Arc<StateBits>>,
    /// The position `current` is at; `None` while a pass is writing it.
    at: Option<usize>,
    /// Copies of the state at earlier positions, in order; `None` is zeros.
    checkpoints: Vec<(usize, Option<Arc<StateBits>>)>,
    /// The state where a speculative verify pass began, to cut back to
    /// when its drafts are refused: kept apart from the checkpoints, so
    /// that verify passes leave the checkpoints plain decoding leaves.
    rollback: Option<(usize, Option<Arc<StateBits>>)>,
}

impl RecurrentState {
    pub(crate) fn new(config: &RecurrentConfig) -> Self {
        Self {
            conv_len: config.conv_state_len(),
            delta_len: config.delta_state_len(),
            n_layers: config.layers.iter().filter(|&&r| r).count(),
            current: None,
            at: Some(0),
            checkpoints: Vec::new(),
            rollback: None,
        }
    }

    /// Bytes of one position's state.
    pub(crate) fn state_bytes(&self) -> usize {
        self.n_layers * (self.conv_len + self.delta_len) * 4
    }

    /// Bytes held: the state and each checkpoint that does not share its buffers.
    pub(crate) fn allocated_bytes(&self) -> usize {
        let mut held: Vec<&Arc<StateBits>> = self.current.iter().collect();
        for (_, c) in &self.checkpoints {
            if let Some(c) = c {
                if !held.iter().any(|h| Arc::ptr_eq(h, c)) {
                    held.push(c);
                }
            }
        }
        held.len() * self.state_bytes()
    }

    /// Positions of the checkpoints kept.
    pub(crate) fn checkpoint_positions(&self) -> Vec<usize> {
        self.checkpoints.iter().map(|(p, _)| *p).collect()
    }

    /// Before a pass of `rows` rows at position `len` writes the state.
    pub(crate) fn begin_pass(&mut self, len: usize, rows: usize) {
        let last = self.checkpoints.last().map_or(0, |(p, _)| *p);
        if rows > 1 || len >= last + DECODE_CHECKPOINT_INTERVAL {
            self.checkpoint(len);
        }
        self.at = None;
    }

    /// Before a verify pass (several rows of one sequence's decode) at
    /// position `len`: keeps the state there to cut back to, and takes the
    /// checkpoint a decode step at `len` would take.
    pub(crate) fn begin_verify_pass(&mut self, len: usize) {
        if self.at == Some(len) {
            self.rollback = Some((len, self.current.clone()));
        }
        self.begin_pass(len, 1);
    }

    /// Forgets the verify pass's state (its rows were kept, or read again).
    pub(crate) fn release_rollback(&mut self) {
        self.rollback = None;
    }

    /// After a pass of `rows` rows brought the state to position `len`.
    pub(crate) fn end_pass(&mut self, len: usize, rows: usize) {
        self.at = Some(len);
        if rows > 1 {
            self.checkpoint(len);
        }
    }

    /// Keeps a copy of the state, if it is at `len` and none is kept there.
    pub(crate) fn checkpoint(&mut self, len: usize) {
        if self.at != Some(len) || self.checkpoints.last().is_some_and(|(p, _)| *p >= len) || len == 0 {
            return;
        }
        self.checkpoints.push((len, self.current.clone()));
        if self.checkpoints.len() > MAX_CHECKPOINTS {
            // Thin where they are densest, never the newest.
            let n = self.checkpoints.len();
            let gap = |i: usize| self.checkpoints[i].0 - if i == 0 { 0 } else { self.checkpoints[i - 1].0 };
            let drop = (0..n - 1).min_by_key(|&i| gap(i)).expect("more than one checkpoint");
            self.checkpoints.remove(drop);
        }
    }

    /// Brings the state back to the latest position at or before `len` it
    /// can (a checkpoint, or the start), and returns that position.
    pub(crate) fn rewind(&mut self, len: usize) -> usize {
        self.checkpoints.retain(|(p, _)| *p <= len);
        if self.rollback.as_ref().is_some_and(|(p, _)| *p > len) {
            self.rollback = None;
        }
        if self.at == Some(len) {
            return len;
        }
        let latest = self.checkpoints.last().map(|(p, _)| *p);
        if let Some((p, bits)) = self.rollback.take().filter(|(p, _)| latest.is_none_or(|c| c < *p)) {
            self.current = bits;
            self.at = Some(p);
            return p;
        }
        match self.checkpoints.last() {
            Some((p, bits)) => {
                self.current = bits.clone();
                self.at = Some(*p);
                *p
            }
            None => {
                self.current = None;
                self.at = Some(0);
                0
            }
        }
    }

    /// Whether the state is at `len` (not mid-pass, not elsewhere).
    pub(crate) fn is_at(&self, len: usize) -> bool {
        self.at == Some(len)
    }

    /// Recurrent layer `slot`'s convolution and delta states, writable
    /// (unshared first). Only between `begin_pass` and `end_pass`.
    pub(crate) fn layer_mut(&mut self, slot: usize) -> (&mut [f32], &mut [f32]) {
        debug_assert!(self.at.is_none(), "the state is written inside a pass");
        let (n, conv, delta) = (self.n_layers, self.conv_len, self.delta_len);
        let bits = self.current.get_or_insert_with(|| {
            Arc::new(StateBits { layers: (0..n).map(|_| (vec![0f32; conv], vec![0f32; delta])).collect() })
        });
        let (c, d) = &mut Arc::make_mut(bits).layers[slot];
        (c, d)
    }

    /// The state as little-endian f32 bytes, layer by layer (convolution,
    /// then delta rule): how a saved cache holds it.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        self.bits_to_bytes(&self.current)
    }

    /// `to_bytes` of the checkpoint at `pos`, if one is kept there.
    pub(crate) fn checkpoint_bytes(&self, pos: usize) -> Option<Vec<u8>> {
        self.checkpoints.iter().find(|(p, _)| *p == pos).map(|(_, bits)| self.bits_to_bytes(bits))
    }

    fn bits_to_bytes(&self, bits: &Option<Arc<StateBits>>) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.state_bytes());
        for slot in 0..self.n_layers {
            match bits {
                Some(bits) => {
                    let (c, d) = &bits.layers[slot];
                    out.extend(c.iter().chain(d).flat_map(|x| x.to_le_bytes()));
                }
                None => out.resize(out.len() + (self.conv_len + self.delta_len) * 4, 0),
            }
        }
        out
    }

    /// Sets the state at `len` from `to_bytes`'s output, and keeps it as a checkpoint.
    pub(crate) fn restore_bytes(&mut self, bytes: &[u8], len: usize) -> Result<(), String> {
        if bytes.len() != self.state_bytes() {
            return Err(format!("{} bytes of recurrent state, expected {}", bytes.len(), self.state_bytes()));
        }
        let layers = bytes.chunks_exact(self.layer_bytes()).map(|l| self.layer_from_bytes(l)).collect();
        self.install(layers, len)
    }

    /// Bytes of one recurrent layer's state, as `to_bytes` writes it.
    pub(crate) fn layer_bytes(&self) -> usize {
        (self.conv_len + self.delta_len) * 4
    }

    /// How many recurrent layers the state holds.
    pub(crate) fn n_layers(&self) -> usize {
        self.n_layers
    }

    /// One layer's state (convolution, delta rule) from its `layer_bytes`.
    pub(crate) fn layer_from_bytes(&self, bytes: &[u8]) -> (Vec<f32>, Vec<f32>) {
        debug_assert_eq!(bytes.len(), self.layer_bytes());
        let floats = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        };
        let (conv, delta) = bytes.split_at(self.conv_len * 4);
        (floats(conv), floats(delta))
    }

    /// Sets the state at `len` to each layer's (`layer_from_bytes`), and
    /// keeps it as a checkpoint.
    pub(crate) fn install(&mut self, layers: Vec<(Vec<f32>, Vec<f32>)>, len: usize) -> Result<(), String> {
        let sizes_fit = layers.iter().all(|(c, d)| c.len() == self.conv_len && d.len() == self.delta_len);
        if layers.len() != self.n_layers || !sizes_fit {
            return Err(format!("recurrent state for {} layers, expected {}", layers.len(), self.n_layers));
        }
        self.current = Some(Arc::new(StateBits { layers }));
        self.at = Some(len);
        self.checkpoint(len);
        Ok(())
    }
}
