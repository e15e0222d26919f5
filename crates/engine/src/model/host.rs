//! The forward pass on the CPU, over plain buffers.
//!
//! A decode step of a small model is mostly fixed costs when it is built from
//! tensor ops: an allocation and a dispatch per op, a thread-pool fork-join
//! per matmul, masks and views per layer. Here each layer is five parallel
//! regions on the [`WorkerPool`] (Q/K/V together, attention by head, the
//! output projection, gate and up together, down), the small element-wise
//! work runs between them on the calling thread, keys and values are written
//! straight into the cache's buffers, and causality and sliding windows are
//! loop bounds rather than masks. The arithmetic is the graph path's, so the
//! two agree to float rounding (tested in `tests/tiny_models.rs`).

mod attention;
mod kernels;
mod mtp;

use std::ops::Range;

use candle_core::{Device, Tensor};

use super::delta_net::SequenceRows;
use super::matmul::{matmuls, ROWS_PER_TASK};
use super::{Block, Embeddings, Ffn, Matrix, Mixer, Model, Norm};
use crate::cpu::vec_ops;
use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::worker_pool::{DisjointSlice, WorkerPool};

impl Model {
    pub(super) fn forward_host(
        &self,
        tokens: &[Vec<u32>],
        cache: &mut KvCache,
        stop: &dyn Fn() -> bool,
    ) -> Result<Tensor> {
        let batch = tokens.len();
        let logits = self.forward_host_rows(tokens, cache, false, stop)?;
        Ok(Tensor::from_vec(logits, (batch, self.vocab_size), &Device::Cpu)?)
    }

    /// The forward pass; logits of every position (`all`) or of each
    /// sequence's last, as `[rows, vocab]`. A pass of several positions
    /// asks `stop` after each layer but the last (see `forward_stoppable`).
    pub(super) fn forward_host_rows(
        &self,
        tokens: &[Vec<u32>],
        cache: &mut KvCache,
        all: bool,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let pool = WorkerPool::global();
        let (batch, seq) = (tokens.len(), tokens[0].len());
        let rows = batch * seq;
        cache.reserve(seq, batch)?;
        let pos0 = cache.len();
        let e = c.n_embd;
        let flat: Vec<u32> = tokens.iter().flatten().copied().collect();
        let mut x = self.embed(&flat);
        if let Some(s) = self.embed_scale {
            vec_ops::scale(&mut x, s as f32);
        }
        let per_layer = match &self.per_layer_embeddings {
            Some(p) => p.inputs(pool, &flat, &x, seq)?,
            None => Vec::new(),
        };
        let rope_global = self.rope_for(cache.max_len()).tables(pos0, seq);
        // Only sliding layers use the local tables.
        let rope_local =
            if c.sliding_window.is_some() { self.rope_local.tables(pos0, seq) } else { Default::default() };
        let mut buf = Buffers::new(self, rows);
        // Before the pass begins: a head that fails to load leaves the cache as it was.
        let head = if cache.mtp_live() { Some(self.mtp_head()?) } else { None };
        cache.begin_pass(seq);
        let mut kv = KvRows::Batch { cache, batch, seq, pos0 };
        let mut head_read = None;
        let mut layers = || -> Result<()> {
            for (layer, block) in self.layers.iter().enumerate() {
                let rope = if block.sliding { &rope_local } else { &rope_global };
                self.block_host(pool, block, layer, &mut x, &mut buf, rope, &per_layer, &mut kv)?;
                // A decode step is short and ends in a sample; a chunk of a long
                // prompt near a full context can take seconds, and Stop should
                // not wait for all of it. The cache's length has not moved yet.
                if seq > 1 && layer + 1 < self.layers.len() && stop() {
                    return Err(crate::EngineError::Stopped);
                }
            }
            if let Some(head) = head {
                let hidden = self.final_norm(&x);
                self.mtp_after_pass(pool, head, &flat, &hidden, &mut buf, &rope_global, &mut kv)?;
                head_read = Some(hidden);
            }
            Ok(())
        };
        let run = layers();
        let KvRows::Batch { cache, .. } = kv else { unreachable!("built as a batch") };
        if let Err(e) = run {
            // A hybrid's recurrent state was written in place: back to its
            // checkpoint (the one before this pass, for a pass of several rows).
            cache.truncate(pos0);
            return Err(e);
        }
        cache.advance(seq);
        cache.end_pass(seq);
        if let Some(hidden) = &head_read {
            // Each sequence's last row, which the head reads with the next token.
            let last: Vec<f32> =
                (0..batch).flat_map(|b| hidden[(b * seq + seq - 1) * e..(b * seq + seq) * e].iter().copied()).collect();
            cache.keep_mtp_hidden((pos0, pos0 + seq - 1), &last, e);
        }

        let out_rows: Vec<usize> =
            if all { (0..rows).collect() } else { (0..batch).map(|b| b * seq + seq - 1).collect() };
        let mut last = vec![0f32; out_rows.len() * e];
        for (i, &r) in out_rows.iter().enumerate() {
            match &head_read {
                // Normed already, for the MTP head.
                Some(hidden) => last[i * e..(i + 1) * e].copy_from_slice(&hidden[r * e..(r + 1) * e]),
                None => vec_ops::rms_norm(
                    &mut last[i * e..(i + 1) * e],
                    &x[r * e..(r + 1) * e],
                    &self.norm.host,
                    self.norm.eps,
                ),
            }
        }
        let mut logits = vec![0f32; out_rows.len() * self.vocab_size];
        let sequence_rows = if all { seq } else { 1 };
        matmuls(pool, &last, out_rows.len(), sequence_rows, &mut [(&self.output, &mut logits)])?;
        self.soft_cap(&mut logits);
        pool.end_pass();
        Ok(logits)
    }

    /// Decode rows over several caches (conversations at different
    /// lengths, each with one row, or a verify pass's several): `tokens[r]`
    /// goes to cache `owners[r]` at that cache's next free position, rows of
    /// one cache consecutive and in order. The matmuls read each weight once
    /// for all rows, each row summed as it would be alone, and each row
    /// attends to its own cache up to its own position, so every row's
    /// logits and keys are the bits a one-row step at its position gives.
    /// Logits per row.
    pub(super) fn forward_host_caches(
        &self,
        tokens: &[u32],
        owners: &[usize],
        caches: &mut [&mut KvCache],
    ) -> Result<Vec<Vec<f32>>> {
        let c = &self.config;
        let pool = WorkerPool::global();
        let rows = tokens.len();
        let e = c.n_embd;
        let mut counts = vec![0usize; caches.len()];
        owners.iter().for_each(|&o| counts[o] += 1);
        for (cache, &n) in caches.iter_mut().zip(&counts) {
            cache.reserve(n, 1)?;
        }
        for (cache, &n) in caches.iter_mut().zip(&counts) {
            cache.begin_verify_pass(n);
        }
        let starts: Vec<usize> = caches.iter().map(|c| c.len()).collect();
        // Each cache's rows take its next positions in turn.
        let mut next = starts.clone();
        let positions: Vec<usize> = owners
            .iter()
            .map(|&o| {
                next[o] += 1;
                next[o] - 1
            })
            .collect();
        let contexts: Vec<usize> = owners.iter().map(|&o| caches[o].max_len()).collect();
        let mut x = self.embed(tokens);
        if let Some(s) = self.embed_scale {
            vec_ops::scale(&mut x, s as f32);
        }
        let per_layer = match &self.per_layer_embeddings {
            Some(p) => p.inputs(pool, tokens, &x, 1)?,
            None => Vec::new(),
        };
        // One table row per row, at its own position (and, for LongRoPE, by
        // its own session's length).
        let tables = |ropes: &[&super::RopeFreqs]| {
            let mut out = (Vec::new(), Vec::new());
            for (rope, &p) in ropes.iter().zip(&positions) {
                let (cos, sin) = rope.tables(p, 1);
                out.0.extend(cos);
                out.1.extend(sin);
            }
            out
        };
        let globals: Vec<&super::RopeFreqs> = contexts.iter().map(|&n| self.rope_for(n)).collect();
        let rope_global = tables(&globals);
        let rope_local = if c.sliding_window.is_some() {
            tables(&vec![&self.rope_local; positions.len()])
        } else {
            Default::default()
        };
        let mut buf = Buffers::new(self, rows);
        let mut kv = KvRows::Caches { caches, positions, owners };
        let mut head_read = None;
        let mut layers = || -> Result<()> {
            for (layer, block) in self.layers.iter().enumerate() {
                let rope = if block.sliding { &rope_local } else { &rope_global };
                self.block_host(pool, block, layer, &mut x, &mut buf, rope, &per_layer, &mut kv)?;
            }
            if self.mtp_source.is_some() {
                head_read = self.mtp_after_caches_pass(pool, tokens, &x, &rope_global, &mut kv)?;
            }
            Ok(())
        };
        let run = layers();
        let KvRows::Caches { caches, .. } = kv else { unreachable!("built over caches") };
        if let Err(e) = run {
            // As in `forward_host_rows`: no half-written recurrent state survives.
            for (cache, &p) in caches.iter_mut().zip(&starts) {
                cache.truncate(p);
            }
            return Err(e);
        }
        let mut first_row = 0;
        for ((cache, &n), &start) in caches.iter_mut().zip(&counts).zip(&starts) {
            cache.advance(n);
            // Checkpoints as after a decode step: a verify pass is cut back
            // to where it began (`begin_verify_pass`), not to a checkpoint.
            cache.end_pass(1);
            if let (Some(hidden), true) = (&head_read, cache.mtp_live()) {
                // Every row: a cut-back after a verify pass finds its new end's.
                cache.keep_mtp_hidden((start, start), &hidden[first_row * e..(first_row + n) * e], e);
            }
            first_row += n;
        }
        let last = head_read.unwrap_or_else(|| self.final_norm(&x));
        let mut logits = vec![0f32; rows * self.vocab_size];
        matmuls(pool, &last, rows, 1, &mut [(&self.output, &mut logits)])?;
        self.soft_cap(&mut logits);
        pool.end_pass();
        Ok(logits.chunks_exact(self.vocab_size).map(<[f32]>::to_vec).collect())
    }

    /// The logits' last ops: Granite's scale (`logit · (1 / scale)`), and
    /// Gemma's soft-cap as llama.cpp's three ops compute it:
    /// `tanh(logit · (1 / cap)) · cap`.
    fn soft_cap(&self, logits: &mut [f32]) {
        if let Some(s) = self.config.logit_scale {
            vec_ops::scale(logits, 1.0 / s);
        }
        if let Some(cap) = self.config.final_logit_softcap {
            let inv = 1.0 / cap;
            for l in logits {
                *l = (*l * inv).tanh() * cap;
            }
        }
    }

    /// Embedding rows for `ids`, as f32.
    pub(super) fn embed(&self, ids: &[u32]) -> Vec<f32> {
        let e = self.config.n_embd;
        let mut x = vec![0f32; ids.len() * e];
        for (row, &id) in x.chunks_exact_mut(e).zip(ids) {
            let id = id as usize;
            match &self.embeddings {
                Embeddings::Quant(m) => m.dequantize_row(id, row),
                Embeddings::Device(_) => unreachable!("device embeddings are looked up by the graph"),
            }
        }
        x
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one layer of the host pass: the pass's pool, buffers, RoPE table and caches beside the layer's own inputs (a step context is to come with one file per family)"
    )]
    fn block_host(
        &self,
        pool: &WorkerPool,
        b: &Block,
        layer: usize,
        x: &mut [f32],
        buf: &mut Buffers,
        rope: &(Vec<f32>, Vec<f32>),
        per_layer: &[f32],
        kv: &mut KvRows,
    ) -> Result<()> {
        let c = &self.config;
        let (rows, seq) = (kv.rows(), kv.sequence_rows());
        let e = c.n_embd;

        norm_rows(pool, b.attn_norm.as_ref(), x, &mut buf.h, e);
        match &b.mixer {
            Mixer::Attention(a) => self.attention_host(pool, a, b.sliding, layer, buf, rope, kv)?,
            Mixer::Mla(m) => self.mla_host(pool, m, layer, buf, rope, kv)?,
            Mixer::DeltaNet(_) | Mixer::ShortConv(_) => {
                let mut sequences: Vec<SequenceRows> = match kv {
                    KvRows::Batch { cache, seq, .. } => vec![SequenceRows { rows: 0..*seq, cache }],
                    KvRows::Caches { caches, owners, .. } => caches
                        .iter_mut()
                        .enumerate()
                        .map(|(i, cache)| {
                            // A cache's rows are consecutive (`forward_host_caches`).
                            let first = owners.iter().position(|&o| o == i).expect("each cache has a row");
                            let n = owners[first..].iter().take_while(|&&o| o == i).count();
                            SequenceRows { rows: first..first + n, cache }
                        })
                        .collect(),
                };
                match &b.mixer {
                    Mixer::DeltaNet(d) => {
                        d.forward_host(pool, &buf.h, rows, seq, &mut sequences, &mut buf.o, &mut buf.delta)?
                    }
                    Mixer::ShortConv(s) => s.forward_host(pool, &buf.h, rows, seq, &mut sequences, &mut buf.o)?,
                    _ => unreachable!("a recurrent mixer"),
                }
            }
        }
        if let Some(n) = &b.post_attn_norm {
            norm_in_place(n, &mut buf.o, e);
        }
        if let Some(s) = c.residual_scale {
            vec_ops::scale(&mut buf.o, s);
        }
        vec_ops::add(x, &buf.o);

        norm_rows(pool, b.ffn_norm.as_ref(), x, &mut buf.h, e);
        match &b.ffn {
            Ffn::Dense { gate, up, down } => self.dense_ffn(pool, gate, up, down, rows, seq, buf)?,
            Ffn::DenseAndExperts(d) => {
                self.dense_ffn(pool, &d.gate, &d.up, &d.down, rows, seq, buf)?;
                norm_in_place(&d.post_norm_1, &mut buf.o, e);
                // The dense output waits in `moe_out` while the experts write `o`.
                std::mem::swap(&mut buf.o, &mut buf.moe_out);
                // The router reads `rms_norm(x) / √n_embd · router_scale`,
                // each op rounded as llama.cpp's are.
                let mut router_in = vec![0f32; rows * e];
                let ones = vec![1f32; e];
                let inv = 1.0 / (e as f32).sqrt();
                for (o, xr) in router_in.chunks_exact_mut(e).zip(x.chunks_exact(e)) {
                    vec_ops::rms_norm(o, xr, &ones, c.rms_eps as f32);
                    for (v, &s) in o.iter_mut().zip(&d.router_scale) {
                        *v = *v * inv * s;
                    }
                }
                norm_rows(pool, Some(&d.pre_norm_2), x, &mut buf.h, e);
                buf.o.resize(rows * e, 0.0);
                let super::LayerExperts::Host(experts) = &d.experts else {
                    unreachable!("the CPU's pass loads its experts as Experts")
                };
                experts.forward_host(pool, &buf.h, Some(&router_in), rows, seq, &mut buf.o, &mut buf.experts)?;
                norm_in_place(&d.post_norm_2, &mut buf.o, e);
                for (o, &m) in buf.o.iter_mut().zip(&buf.moe_out) {
                    *o += m;
                }
            }
            Ffn::GraphExperts { .. } => unreachable!("graph experts run in the graph pass"),
            Ffn::Experts { experts, shared } => {
                experts.forward_host(pool, &buf.h, None, rows, seq, &mut buf.o, &mut buf.experts)?;
                if let Some(s) = shared {
                    // llama.cpp: moe_out + ffn_shexp · σ(gate_inp · x), each op rounded.
                    // The experts' output waits in `moe_out` (both buffers kept
                    // from layer to layer) while the shared expert writes `o`.
                    std::mem::swap(&mut buf.o, &mut buf.moe_out);
                    if let Some(gate_inp) = &s.gate_inp {
                        buf.shared_gate.resize(rows, 0.0);
                        matmuls(pool, &buf.h, rows, seq, &mut [(gate_inp, &mut buf.shared_gate)])?;
                    }
                    buf.o.resize(rows * e, 0.0);
                    self.dense_ffn(pool, &s.gate, &s.up, &s.down, rows, seq, buf)?;
                    let moe = buf.moe_out.chunks_exact_mut(e);
                    if s.gate_inp.is_some() {
                        for ((m, row), &g) in moe.zip(buf.o.chunks_exact(e)).zip(&buf.shared_gate) {
                            let g = 1.0 / (1.0 + (-g).exp());
                            for (m, &s) in m.iter_mut().zip(row) {
                                *m += s * g;
                            }
                        }
                    } else {
                        // Granite MoE Shared: moe_out + ffn_shexp.
                        for (m, row) in moe.zip(buf.o.chunks_exact(e)) {
                            vec_ops::add(m, row);
                        }
                    }
                    std::mem::swap(&mut buf.o, &mut buf.moe_out);
                }
            }
        }
        if let Some(n) = &b.post_ffn_norm {
            norm_in_place(n, &mut buf.o, e);
        }
        if let Some(s) = c.residual_scale {
            vec_ops::scale(&mut buf.o, s);
        }
        vec_ops::add(x, &buf.o);
        if let Some(p) = &b.per_layer {
            p.add(pool, x, per_layer, layer, rows, seq)?;
        }
        if let Some(s) = b.out_scale {
            vec_ops::scale(x, s);
        }
        Ok(())
    }

    /// A dense gated FFN of `buf.h` into `buf.o`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the pass's pool and buffers beside the three matrices and the batch's shape"
    )]
    fn dense_ffn(
        &self,
        pool: &WorkerPool,
        gate: &Matrix,
        up: &Matrix,
        down: &Matrix,
        rows: usize,
        seq: usize,
        buf: &mut Buffers,
    ) -> Result<()> {
        let ffn = gate.rows();
        buf.gate.resize(rows * ffn, 0.0);
        buf.up.resize(rows * ffn, 0.0);
        matmuls(pool, &buf.h, rows, seq, &mut [(gate, &mut buf.gate), (up, &mut buf.up)])?;
        let gelu = self.config.architecture.family().gemma_style;
        for_row_chunks(pool, rows, &mut buf.gate, ffn, |range, gate| {
            let up = &buf.up[range.start * ffn..range.end * ffn];
            if gelu {
                vec_ops::gelu_mul(gate, up);
            } else {
                vec_ops::silu_mul(gate, up);
            }
        });
        matmuls(pool, &buf.gate, rows, seq, &mut [(down, &mut buf.o)])
    }
}

/// Where a forward pass's rows keep their keys and values.
enum KvRows<'a, 'c> {
    /// `batch` sequences of `seq` rows each, in the rows of one cache, all
    /// from position `pos0`.
    Batch { cache: &'a mut KvCache, batch: usize, seq: usize, pos0: usize },
    /// Decode rows over several caches, each at its own position: row `r`
    /// belongs to `caches[owners[r]]`, a cache's rows consecutive.
    Caches { caches: &'a mut [&'c mut KvCache], positions: Vec<usize>, owners: &'a [usize] },
}

impl KvRows<'_, '_> {
    fn rows(&self) -> usize {
        match self {
            KvRows::Batch { batch, seq, .. } => batch * seq,
            KvRows::Caches { positions, .. } => positions.len(),
        }
    }

    /// Rows that belong to one sequence (see `QuantMatrix::matmul_cols`).
    fn sequence_rows(&self) -> usize {
        match self {
            KvRows::Batch { seq, .. } => *seq,
            KvRows::Caches { .. } => 1,
        }
    }

    /// The position of row `row`.
    fn position(&self, row: usize) -> usize {
        match self {
            KvRows::Batch { seq, pos0, .. } => pos0 + row % seq,
            KvRows::Caches { positions, .. } => positions[row],
        }
    }
}

struct Buffers {
    h: Vec<f32>,
    /// A gated attention's queries and gates, before they are split.
    q_gate: Vec<f32>,
    attn_gate: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    shared_gate: Vec<f32>,
    moe_out: Vec<f32>,
    experts: super::experts::ExpertScratch,
    delta: super::delta_net::DeltaScratch,
}

impl Buffers {
    fn new(model: &Model, rows: usize) -> Self {
        let c = &model.config;
        let e = c.n_embd;
        let qd = c.attention.iter().map(|a| a.q_width()).max().unwrap_or(0);
        let kd = c.attention.iter().map(|a| a.kv_width()).max().unwrap_or(0);
        let ffn = match model.layers.first().map(|b| &b.ffn) {
            Some(Ffn::Dense { gate, .. }) => gate.rows(),
            _ => 0,
        };
        Self {
            h: vec![0f32; rows * e],
            q_gate: Vec::new(),
            attn_gate: Vec::new(),
            q: vec![0f32; rows * qd],
            k: vec![0f32; rows * kd],
            v: vec![0f32; rows * kd],
            attn: vec![0f32; rows * qd],
            o: vec![0f32; rows * e],
            gate: vec![0f32; rows * ffn],
            up: vec![0f32; rows * ffn],
            shared_gate: Vec::new(),
            moe_out: Vec::new(),
            experts: Default::default(),
            delta: Default::default(),
        }
    }
}

/// Runs `f(rows, slice)` over chunks of `width`-wide rows of `data`, in
/// parallel when there are enough rows to be worth it.
fn for_row_chunks(
    pool: &WorkerPool,
    rows: usize,
    data: &mut [f32],
    width: usize,
    f: impl Fn(Range<usize>, &mut [f32]) + Sync,
) {
    if rows < 2 * ROWS_PER_TASK {
        f(0..rows, &mut data[..rows * width]);
        return;
    }
    let out = DisjointSlice::new(data);
    pool.run(rows.div_ceil(ROWS_PER_TASK), &|t| {
        let r = t * ROWS_PER_TASK..((t + 1) * ROWS_PER_TASK).min(rows);
        // SAFETY: tasks own disjoint row ranges.
        f(r.clone(), unsafe { out.slice(r.start * width..r.end * width) });
    });
}

/// `x`'s rows normed into `out`, or copied where there is no norm (OLMo 2).
fn norm_rows(pool: &WorkerPool, n: Option<&Norm>, x: &[f32], out: &mut [f32], width: usize) {
    let Some(n) = n else {
        out[..x.len()].copy_from_slice(x);
        return;
    };
    let rows = x.len() / width;
    for_row_chunks(pool, rows, out, width, |range, out| {
        let src = &x[range.start * width..range.end * width];
        for (o, x) in out.chunks_exact_mut(width).zip(src.chunks_exact(width)) {
            vec_ops::rms_norm(o, x, &n.host, n.eps);
        }
    });
}

/// RMS-normalises every `width`-wide piece of `x` in place (per-head norms
/// too, with `width` the head size).
fn norm_in_place(n: &Norm, x: &mut [f32], width: usize) {
    let mut tmp = vec![0f32; width];
    for piece in x.chunks_exact_mut(width) {
        vec_ops::rms_norm(&mut tmp, piece, &n.host, n.eps);
        piece.copy_from_slice(&tmp);
    }
}
