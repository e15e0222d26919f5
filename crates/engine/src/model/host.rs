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

use std::ops::Range;

use candle_core::{Device, Tensor};

use super::delta_net::SequenceRows;
use super::{window_start, Attention, Block, Embeddings, Ffn, Matrix, Mixer, Model, Norm};
use crate::cpu::attention::{self, Order};
use crate::cpu::vec_ops;

use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::worker_pool::{DisjointSlice, WorkerPool};

/// Cache positions from which a decode step's attention runs in three
/// regions rather than a task per query head.
const LONG_HISTORY: usize = 512;

/// Positions per task of a long decode step's scores.
const POSITIONS_PER_TASK: usize = 512;

/// Output dimensions per task of a long decode step's weighted values.
const DIMS_PER_TASK: usize = 16;

use super::matmul::{matmuls, ROWS_PER_TASK};

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
        cache.begin_pass(seq);
        let mut kv = KvRows::Batch { cache, batch, seq, pos0 };
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

        let out_rows: Vec<usize> =
            if all { (0..rows).collect() } else { (0..batch).map(|b| b * seq + seq - 1).collect() };
        let mut last = vec![0f32; out_rows.len() * e];
        for (i, &r) in out_rows.iter().enumerate() {
            vec_ops::rms_norm(&mut last[i * e..(i + 1) * e], &x[r * e..(r + 1) * e], &self.norm.host, self.norm.eps);
        }
        let mut logits = vec![0f32; out_rows.len() * self.vocab_size];
        let sequence_rows = if all { seq } else { 1 };
        matmuls(pool, &last, out_rows.len(), sequence_rows, &mut [(&self.output, &mut logits)])?;
        self.soft_cap(&mut logits);
        pool.end_pass();
        Ok(logits)
    }

    /// One decode step for several sequences that each have their own
    /// cache (conversations at different lengths): the matmuls read each
    /// weight once for all rows, each row summed as it would be alone, and
    /// each sequence attends to its own cache. Logits per sequence.
    pub(super) fn forward_host_caches(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Vec<Vec<f32>>> {
        let c = &self.config;
        let pool = WorkerPool::global();
        let rows = tokens.len();
        let e = c.n_embd;
        for cache in caches.iter_mut() {
            cache.reserve(1, 1)?;
        }
        for cache in caches.iter_mut() {
            cache.begin_pass(1);
        }
        let positions: Vec<usize> = caches.iter().map(|c| c.len()).collect();
        let contexts: Vec<usize> = caches.iter().map(|c| c.max_len()).collect();
        let mut x = self.embed(tokens);
        if let Some(s) = self.embed_scale {
            vec_ops::scale(&mut x, s as f32);
        }
        let per_layer = match &self.per_layer_embeddings {
            Some(p) => p.inputs(pool, tokens, &x, 1)?,
            None => Vec::new(),
        };
        // One table row per sequence, at its own position (and, for
        // LongRoPE, by its own session's length).
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
        let mut kv = KvRows::Caches { caches, positions };
        let mut layers = || -> Result<()> {
            for (layer, block) in self.layers.iter().enumerate() {
                let rope = if block.sliding { &rope_local } else { &rope_global };
                self.block_host(pool, block, layer, &mut x, &mut buf, rope, &per_layer, &mut kv)?;
            }
            Ok(())
        };
        let run = layers();
        let KvRows::Caches { caches, positions } = kv else { unreachable!("built over caches") };
        if let Err(e) = run {
            // As in `forward_host_rows`: no half-written recurrent state survives.
            for (cache, p) in caches.iter_mut().zip(positions) {
                cache.truncate(p);
            }
            return Err(e);
        }
        for cache in caches.iter_mut() {
            cache.advance(1);
            cache.end_pass(1);
        }
        let mut last = vec![0f32; rows * e];
        for r in 0..rows {
            vec_ops::rms_norm(&mut last[r * e..(r + 1) * e], &x[r * e..(r + 1) * e], &self.norm.host, self.norm.eps);
        }
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
                    KvRows::Caches { caches, .. } => {
                        caches.iter_mut().enumerate().map(|(r, cache)| SequenceRows { rows: r..r + 1, cache }).collect()
                    }
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

    /// A layer's attention of `buf.h` into `buf.o`, its keys and values
    /// written into the caches.
    #[allow(
        clippy::too_many_arguments,
        reason = "the pass's pool, buffers, RoPE table and caches beside the layer's attention"
    )]
    fn attention_host(
        &self,
        pool: &WorkerPool,
        a: &Attention,
        sliding: bool,
        layer: usize,
        buf: &mut Buffers,
        rope: &(Vec<f32>, Vec<f32>),
        kv: &mut KvRows,
    ) -> Result<()> {
        let c = &self.config;
        let (rows, seq) = (kv.rows(), kv.sequence_rows());
        let shape = c.attention_shape(layer);
        let hd = shape.head_dim;
        let (qd, kd) = (shape.q_width(), shape.kv_width());
        buf.q.resize(rows * qd, 0.0);
        buf.k.resize(rows * kd, 0.0);
        buf.v.resize(rows * kd, 0.0);
        buf.attn.resize(rows * qd, 0.0);
        // Projections into the caches: none for a layer that reads an
        // earlier layer's keys and values.
        let mut jobs: Vec<(&Matrix, &mut Vec<f32>)> = Vec::with_capacity(3);
        if a.gated {
            // Each head's queries, then its output gate.
            buf.q_gate.resize(rows * 2 * qd, 0.0);
            jobs.push((&a.wq.weight, &mut buf.q_gate));
        } else {
            jobs.push((&a.wq.weight, &mut buf.q));
        }
        if let Some(wk) = &a.wk {
            jobs.push((&wk.weight, &mut buf.k));
        }
        if let Some(wv) = &a.wv {
            jobs.push((&wv.weight, &mut buf.v));
        }
        matmuls(pool, &buf.h, rows, seq, &mut jobs)?;
        if a.gated {
            buf.attn_gate.resize(rows * qd, 0.0);
            for (r, both) in buf.q_gate.chunks_exact(2 * qd).enumerate() {
                for (h, head) in both.chunks_exact(2 * hd).enumerate() {
                    let at = r * qd + h * hd;
                    buf.q[at..at + hd].copy_from_slice(&head[..hd]);
                    buf.attn_gate[at..at + hd].copy_from_slice(&head[hd..]);
                }
            }
        }
        let stores = a.wk.is_some();
        if stores && a.wv.is_none() {
            // Gemma 4 without `attn_v`: the keys, before their norm, are the values.
            buf.v.copy_from_slice(&buf.k);
        }
        for (lin, out, width) in
            [(Some(&a.wq), &mut buf.q, qd), (a.wk.as_ref(), &mut buf.k, kd), (a.wv.as_ref(), &mut buf.v, kd)]
        {
            if let Some((_, bias)) = lin.and_then(|l| l.bias.as_ref()) {
                out.chunks_exact_mut(width).for_each(|row| vec_ops::add(row, bias));
            }
        }
        // Per head, or (OLMo 2) across all heads: the weight's length says.
        if let Some(n) = &a.q_norm {
            norm_in_place(n, &mut buf.q, n.host.len());
        }
        if let Some(n) = &a.k_norm {
            norm_in_place(n, &mut buf.k, n.host.len());
        }
        if a.v_norm && stores {
            // `ggml_rms_norm`: the norm without a weight.
            let mut tmp = vec![0f32; hd];
            let ones = vec![1f32; hd];
            for piece in buf.v.chunks_exact_mut(hd) {
                vec_ops::rms_norm(&mut tmp, piece, &ones, c.rms_eps as f32);
                piece.copy_from_slice(&tmp);
            }
        }
        let interleaved = c.architecture.family().interleaved_rope;
        // A batch's rows share their positions' table rows; rows over
        // several caches have a table row each.
        let table_rows = if matches!(kv, KvRows::Batch { .. }) { seq } else { rows };
        apply_rope(&mut buf.q, rope, table_rows, qd, hd, shape.rope_dims, interleaved);
        if stores {
            apply_rope(&mut buf.k, rope, table_rows, kd, hd, shape.rope_dims, interleaved);
        }
        if let Some(t) = &c.attention_temperature {
            for (r, row) in buf.q.chunks_exact_mut(qd).enumerate() {
                vec_ops::scale(row, t.factor(kv.position(r)));
            }
        }

        self.store_and_attend(pool, layer, sliding, stores, a.sinks.as_deref(), buf, kv);

        if a.gated {
            // llama.cpp's sigmoid is scalar libm code.
            for (o, &g) in buf.attn.iter_mut().zip(&buf.attn_gate) {
                *o *= 1.0 / (1.0 + (-g).exp());
            }
        }
        matmuls(pool, &buf.attn, rows, seq, &mut [(&a.wo.weight, &mut buf.o)])?;
        if let Some((_, bias)) = &a.wo.bias {
            buf.o.chunks_exact_mut(c.n_embd).for_each(|row| vec_ops::add(row, bias));
        }
        Ok(())
    }

    /// How many of the keys' leading dimensions are the values, where
    /// they are (`ModelConfig::values_in_keys`).
    fn values_lead(&self) -> usize {
        self.config.mla.map_or(0, |m| m.kv_lora_rank)
    }

    /// DeepSeek V2's latent attention (`mla.rs`) of `buf.h` into `buf.o`, as
    /// llama.cpp runs it with `attn_k_b` and `attn_v_b` apart: each head's
    /// query is its unrotated part times `attn_k_b` beside its rotated
    /// part; the one KV head is the normed latent beside the rotated shared
    /// key, and its first `kv_lora_rank` dimensions are also the values
    /// (`ModelConfig::values_in_keys`: stored once); each head's mix of
    /// latents leaves through `attn_v_b`.
    fn mla_host(
        &self,
        pool: &WorkerPool,
        m: &super::mla::Mla,
        layer: usize,
        buf: &mut Buffers,
        rope: &(Vec<f32>, Vec<f32>),
        kv: &mut KvRows,
    ) -> Result<()> {
        let c = &self.config;
        let mla = c.mla.expect("a latent-attention layer has its shape");
        let (rows, seq) = (kv.rows(), kv.sequence_rows());
        let nh = c.attention_shape(layer).n_heads;
        let (rd, kvr, hk, hv) = (c.rope_dims, mla.kv_lora_rank, mla.head_k, mla.head_v);
        let (nope, width) = (hk - rd, kvr + rd);
        let interleaved = c.architecture.family().interleaved_rope;
        let table_rows = if matches!(kv, KvRows::Batch { .. }) { seq } else { rows };

        let mut q = vec![0f32; rows * nh * hk];
        match &m.query {
            super::mla::Query::Direct(wq) => matmuls(pool, &buf.h, rows, seq, &mut [(wq, &mut q)])?,
            super::mla::Query::LowRank { a, norm, b } => {
                let r = a.rows();
                let mut qa = vec![0f32; rows * r];
                matmuls(pool, &buf.h, rows, seq, &mut [(a, &mut qa)])?;
                norm_in_place(norm, &mut qa, r);
                matmuls(pool, &qa, rows, seq, &mut [(b, &mut q)])?;
            }
        }
        let mut kva = vec![0f32; rows * width];
        matmuls(pool, &buf.h, rows, seq, &mut [(&m.kv_a, &mut kva)])?;

        // The key: the normed latent, then the shared key rotated.
        buf.k.resize(rows * width, 0.0);
        let mut k_pe = vec![0f32; rows * rd];
        for (r, (row, pe)) in kva.chunks_exact(width).zip(k_pe.chunks_exact_mut(rd)).enumerate() {
            vec_ops::rms_norm(&mut buf.k[r * width..r * width + kvr], &row[..kvr], &m.kv_a_norm.host, m.kv_a_norm.eps);
            pe.copy_from_slice(&row[kvr..]);
        }
        apply_rope(&mut k_pe, rope, table_rows, rd, rd, rd, interleaved);
        for (row, pe) in buf.k.chunks_exact_mut(width).zip(k_pe.chunks_exact(rd)) {
            row[kvr..].copy_from_slice(pe);
        }

        // The queries: each head's unrotated part into the latent's space,
        // then its rotated part.
        let mut q_pe = vec![0f32; rows * nh * rd];
        for (src, dst) in q.chunks_exact(hk).zip(q_pe.chunks_exact_mut(rd)) {
            dst.copy_from_slice(&src[nope..]);
        }
        apply_rope(&mut q_pe, rope, table_rows, nh * rd, rd, rd, interleaved);
        buf.q.resize(rows * nh * width, 0.0);
        let mut q_nope = vec![0f32; rows * nope];
        let mut absorbed = vec![0f32; rows * kvr];
        for (h, k_b) in m.k_b.iter().enumerate() {
            for (r, dst) in q_nope.chunks_exact_mut(nope).enumerate() {
                dst.copy_from_slice(&q[(r * nh + h) * hk..(r * nh + h) * hk + nope]);
            }
            matmuls(pool, &q_nope, rows, seq, &mut [(k_b, &mut absorbed)])?;
            for r in 0..rows {
                let at = (r * nh + h) * width;
                buf.q[at..at + kvr].copy_from_slice(&absorbed[r * kvr..(r + 1) * kvr]);
                buf.q[at + kvr..at + width].copy_from_slice(&q_pe[(r * nh + h) * rd..(r * nh + h + 1) * rd]);
            }
        }
        if let Some(t) = &c.attention_temperature {
            // Mistral Large 3: the absorbed queries, as llama.cpp scales them.
            for (r, row) in buf.q.chunks_exact_mut(nh * width).enumerate() {
                vec_ops::scale(row, t.factor(kv.position(r)));
            }
        }

        buf.attn.resize(rows * nh * width, 0.0);
        self.store_and_attend(pool, layer, false, true, None, buf, kv);

        // Each head's mix of latents out through `attn_v_b`.
        let mut mixed = vec![0f32; rows * kvr];
        let mut head_out = vec![0f32; rows * hv];
        let mut out = vec![0f32; rows * nh * hv];
        for (h, v_b) in m.v_b.iter().enumerate() {
            for (r, dst) in mixed.chunks_exact_mut(kvr).enumerate() {
                let at = (r * nh + h) * width;
                dst.copy_from_slice(&buf.attn[at..at + kvr]);
            }
            matmuls(pool, &mixed, rows, seq, &mut [(v_b, &mut head_out)])?;
            for r in 0..rows {
                out[(r * nh + h) * hv..(r * nh + h + 1) * hv].copy_from_slice(&head_out[r * hv..(r + 1) * hv]);
            }
        }
        buf.o.resize(rows * c.n_embd, 0.0);
        matmuls(pool, &out, rows, seq, &mut [(&m.wo.weight, &mut buf.o)])
    }

    /// Writes the new keys and values (`buf.k`, `buf.v`) into the caches
    /// (where the layer `stores` its own) and attends with the queries
    /// (`buf.q`) into `buf.attn`: the part of attention every kind of
    /// layer shares (MLA's too, `mla_host`).
    #[allow(clippy::too_many_arguments, reason = "the pass's pool, buffers and caches beside the layer's choices")]
    fn store_and_attend(
        &self,
        pool: &WorkerPool,
        layer: usize,
        sliding: bool,
        stores: bool,
        sinks: Option<&[f32]>,
        buf: &mut Buffers,
        kv: &mut KvRows,
    ) {
        let c = &self.config;
        let rows = kv.rows();
        let shape = c.attention_shape(layer);
        let hd = shape.head_dim;
        let (qd, kd) = (shape.q_width(), shape.kv_width());
        // New keys and values go straight into the caches' buffers.
        let nkv = shape.n_kv_heads;
        let vd = if c.values_in_keys() { 0 } else { hd };
        match kv {
            _ if !stores => {}
            KvRows::Batch { cache, seq, pos0, .. } => {
                let mut store = cache.host_mut(layer);
                for r in 0..rows {
                    let (bi, i) = (r / *seq, r % *seq);
                    for h in 0..nkv {
                        let src = r * kd + h * hd;
                        let v: &[f32] = if vd == 0 { &[] } else { &buf.v[src..src + vd] };
                        store.store(bi * nkv + h, *pos0 + i, &buf.k[src..src + hd], v);
                    }
                }
            }
            KvRows::Caches { caches, positions } => {
                for (r, cache) in caches.iter_mut().enumerate() {
                    let mut store = cache.host_mut(layer);
                    for h in 0..nkv {
                        let src = r * kd + h * hd;
                        let v: &[f32] = if vd == 0 { &[] } else { &buf.v[src..src + vd] };
                        store.store(h, positions[r], &buf.k[src..src + hd], v);
                    }
                }
            }
        }
        let mut by = c.attention_scale.unwrap_or(1.0f32 / (hd as f32).sqrt());
        if c.architecture.family().scales_queries {
            vec_ops::scale(&mut buf.q, by);
            by = 1.0;
        }
        let scale = ScoreScale { by, softcap: c.attention_softcap };
        // llama.cpp multiplies the f16 keys by the queries rounded to f16.
        attention::round_to_f16(&mut buf.q);
        let window = sliding.then_some(c.sliding_window).flatten();
        match kv {
            KvRows::Batch { cache, batch, seq, pos0 } => {
                self.attention(pool, cache, layer, &buf.q, &mut buf.attn, (*batch, *seq, *pos0), (window, sinks), scale)
            }
            KvRows::Caches { caches, positions } if positions.iter().all(|&p| p < LONG_HISTORY) => {
                self.attention_caches(pool, caches, positions, layer, &buf.q, &mut buf.attn, (window, sinks), scale)
            }
            KvRows::Caches { caches, positions } => {
                // Each sequence against its own cache, as it would alone.
                for (r, cache) in caches.iter().enumerate() {
                    let range = r * qd..(r + 1) * qd;
                    self.attention(
                        pool,
                        cache,
                        layer,
                        &buf.q[range.clone()],
                        &mut buf.attn[range],
                        (1, 1, positions[r]),
                        (window, sinks),
                        scale,
                    );
                }
            }
        }
    }

    /// Scaled dot-product attention of the new queries against the cache,
    /// in llama.cpp's orders (see `cpu::attention`). A prefill runs a task
    /// per (sequence, KV head, four rows), so each key and value is read
    /// once for those rows' query heads. A decode step over a long history
    /// runs as llama.cpp does, in three parallel regions (scores by
    /// position, softmax by head, weighted values by dimension), so that
    /// two threads share three KV heads evenly. `sinks`: each query
    /// head's sink logit (see `attention::softmax`).
    #[allow(
        clippy::too_many_arguments,
        reason = "a kernel's operands: the cache, the queries and outputs, the batch's shape, the window and the scale"
    )]
    fn attention(
        &self,
        pool: &WorkerPool,
        cache: &KvCache,
        layer: usize,
        q: &[f32],
        out: &mut [f32],
        (batch, seq, pos0): (usize, usize, usize),
        (window, sinks): (Option<usize>, Option<&[f32]>),
        scale: ScoreScale,
    ) {
        let c = &self.config;
        let shape = c.attention_shape(layer);
        let (hd, nh, nkv) = (shape.head_dim, shape.n_heads, shape.n_kv_heads);
        let n_rep = nh / nkv;
        let qd = nh * hd;
        let kv = cache.host(c.kv_source[layer]);
        let cap = kv.capacity;
        let values = kv.values_t(pool, self.values_lead(), pos0 + seq);
        // Each (sequence, KV head) owns `cap · hd` keys and its values.
        let head = |bi: usize, h: usize| {
            let at = (bi * nkv + h) * cap * hd;
            (&kv.k[at..at + cap * hd], values.run(bi * nkv + h))
        };
        // Causal: positions up to p; a sliding layer sees the last `w`.
        let bounds_of = |p: usize| (window.map_or(0, |w| window_start(p, w)), p);
        if seq == 1 && pos0 >= LONG_HISTORY {
            return self.attention_long_decode(
                pool,
                shape,
                q,
                out,
                (batch, pos0, (values.stride, values.dims)),
                bounds_of(pos0),
                sinks,
                scale,
                &head,
            );
        }
        let (order, rows_per_task, heads_per_task) =
            if seq == 1 { (Order::Decode, 1, 1) } else { (Order::Prefill, 4, n_rep) };
        let groups = nh / heads_per_task;
        let row_blocks = seq.div_ceil(rows_per_task);
        let out = DisjointSlice::new(out);
        pool.run(batch * groups * row_blocks, &|t| {
            let (bi, rest) = (t / (groups * row_blocks), t % (groups * row_blocks));
            let (group, block) = (rest / row_blocks, rest % row_blocks);
            let first_head = group * heads_per_task;
            let (keys, values_t) = head(bi, first_head / n_rep);
            let mut queries = Vec::new();
            let mut bounds = Vec::new();
            let mut head_sinks = Vec::new();
            let mut outs = Vec::new();
            for i in block * rows_per_task..((block + 1) * rows_per_task).min(seq) {
                let r = bi * seq + i;
                for qh in first_head..first_head + heads_per_task {
                    let range = r * qd + qh * hd..r * qd + (qh + 1) * hd;
                    queries.push(&q[range.clone()]);
                    bounds.push(bounds_of(pos0 + i));
                    head_sinks.push(sink_of(sinks, qh));
                    // SAFETY: each task writes only its own (row, head) slices.
                    outs.push(unsafe { out.slice(range) });
                }
            }
            attend(
                &mut outs,
                &queries,
                &bounds,
                &head_sinks,
                keys,
                (values_t, values.stride, values.dims),
                scale,
                order,
            );
        });
    }

    /// One decode row per cache, none of them over a long history: a task
    /// per (row, head) in one region, each computed as `attention` computes
    /// it for that row alone (one region per row would leave a thread idle
    /// at the end of each).
    #[allow(
        clippy::too_many_arguments,
        reason = "a kernel's operands: the caches and positions, the queries and outputs, the window and the scale"
    )]
    fn attention_caches(
        &self,
        pool: &WorkerPool,
        caches: &[&mut KvCache],
        positions: &[usize],
        layer: usize,
        q: &[f32],
        out: &mut [f32],
        (window, sinks): (Option<usize>, Option<&[f32]>),
        scale: ScoreScale,
    ) {
        let c = &self.config;
        let shape = c.attention_shape(layer);
        let (hd, nh, nkv) = (shape.head_dim, shape.n_heads, shape.n_kv_heads);
        let (n_rep, qd) = (nh / nkv, nh * hd);
        let views: Vec<_> = caches.iter().map(|cache| cache.host(c.kv_source[layer])).collect();
        let values: Vec<_> =
            views.iter().zip(positions).map(|(kv, &p)| kv.values_t(pool, self.values_lead(), p + 1)).collect();
        let out = DisjointSlice::new(out);
        pool.run(caches.len() * nh, &|t| {
            let (r, qh) = (t / nh, t % nh);
            let (kv, p) = (&views[r], positions[r]);
            let at = (qh / n_rep) * kv.capacity * hd;
            let range = r * qd + qh * hd..r * qd + (qh + 1) * hd;
            // SAFETY: each task writes only its own (row, head) slice.
            let mut outs = [unsafe { out.slice(range.clone()) }];
            let bounds = [(window.map_or(0, |w| window_start(p, w)), p)];
            attend(
                &mut outs,
                &[&q[range]],
                &bounds,
                &[sink_of(sinks, qh)],
                &kv.k[at..at + kv.capacity * hd],
                (values[r].run(qh / n_rep), values[r].stride, values[r].dims),
                scale,
                Order::Decode,
            );
        });
    }

    /// A decode step's attention over a long history, in three regions.
    #[allow(
        clippy::too_many_arguments,
        reason = "a kernel's operands: the shape, queries and outputs, the span of positions, the scale and how to read a head"
    )]
    fn attention_long_decode<'a>(
        &self,
        pool: &WorkerPool,
        shape: super::AttentionShape,
        q: &[f32],
        out: &mut [f32],
        (batch, pos0, (stride, value_dims)): (usize, usize, (usize, usize)),
        (lo, hi): (usize, usize),
        sinks: Option<&[f32]>,
        scale: ScoreScale,
        head: &(dyn Fn(usize, usize) -> (&'a [half::f16], &'a [half::f16]) + Sync),
    ) {
        let (hd, nh, nkv) = (shape.head_dim, shape.n_heads, shape.n_kv_heads);
        let (n_rep, qd) = (nh / nkv, nh * hd);
        debug_assert_eq!(hi, pos0);
        let start = lo / Order::Decode.lanes() * Order::Decode.lanes();
        let width = hi + 1 - start;
        let mut probs = vec![0f32; batch * nh * width];
        {
            let rows = DisjointSlice::new(&mut probs);
            let chunks = width.div_ceil(POSITIONS_PER_TASK);
            pool.run(batch * nkv * chunks, &|t| {
                let (bi, h, chunk) = (t / (nkv * chunks), (t / chunks) % nkv, t % chunks);
                let positions =
                    start + chunk * POSITIONS_PER_TASK..(start + (chunk + 1) * POSITIONS_PER_TASK).min(hi + 1);
                let n = positions.len();
                let queries: Vec<&[f32]> = (0..n_rep).map(|r| &q[bi * qd + (h * n_rep + r) * hd..][..hd]).collect();
                let mut scores = vec![0f32; n_rep * n];
                attention::scores(&mut scores, n, &queries, head(bi, h).0, positions.clone(), scale.by, Order::Decode);
                scale.cap(&mut scores);
                for (r, s) in scores.chunks(n).enumerate() {
                    let row = (bi * nh + h * n_rep + r) * width + positions.start - start;
                    // SAFETY: tasks write disjoint position ranges of each row.
                    unsafe { rows.slice(row..row + n) }.copy_from_slice(s);
                }
            });
            pool.run(batch * nh, &|t| {
                // SAFETY: one task per row.
                let row = unsafe { rows.slice(t * width..(t + 1) * width) };
                row[..lo - start].fill(f32::NEG_INFINITY);
                attention::softmax(row, sink_of(sinks, t % nh));
            });
        }
        let dim_chunks = value_dims.div_ceil(DIMS_PER_TASK);
        let out = DisjointSlice::new(out);
        let probs = &probs;
        pool.run(batch * nkv * dim_chunks, &|t| {
            let (bi, h, chunk) = (t / (nkv * dim_chunks), (t / dim_chunks) % nkv, t % dim_chunks);
            let dims = chunk * DIMS_PER_TASK..((chunk + 1) * DIMS_PER_TASK).min(value_dims);
            let p: Vec<&[f32]> = (0..n_rep).map(|r| &probs[(bi * nh + h * n_rep + r) * width..][..width]).collect();
            let mut outs: Vec<&mut [f32]> = (0..n_rep)
                .map(|r| {
                    let at = bi * qd + (h * n_rep + r) * hd;
                    // SAFETY: each task writes its own dimensions of its heads.
                    unsafe { out.slice(at + dims.start..at + dims.end) }
                })
                .collect();
            attention::weighted_values(&mut outs, &p, head(bi, h).1, stride, dims, start, Order::Decode);
        });
    }
}

/// Attention for queries that share one KV head, in one task: query `g`
/// sees positions `bounds[g].0..=bounds[g].1` of `keys` (`[pos, hd]`) and
/// `values_t` (`[dims, stride]`), and writes the first `dims` of its output. Rows start at a multiple of the order's lanes,
/// as llama.cpp's start at position 0; positions masked for one query but
/// not another are scored and then set to −∞. `sinks[g]` is query `g`'s
/// head's sink logit, −∞ for none.
#[allow(clippy::too_many_arguments, reason = "a kernel's operands, as ggml's flash attention takes them")]
fn attend(
    outs: &mut [&mut [f32]],
    queries: &[&[f32]],
    bounds: &[(usize, usize)],
    sinks: &[f32],
    keys: &[half::f16],
    (values_t, stride, dims): (&[half::f16], usize, usize),
    scale: ScoreScale,
    order: Order,
) {
    let first = bounds.iter().map(|b| b.0).min().unwrap_or(0);
    let last = bounds.iter().map(|b| b.1).max().unwrap_or(0);
    let start = first / order.lanes() * order.lanes();
    let width = last + 1 - start;
    let mut scores = vec![0f32; queries.len() * width];
    attention::scores(&mut scores, width, queries, keys, start..last + 1, scale.by, order);
    scale.cap(&mut scores);
    for ((row, &(lo, hi)), &sink) in scores.chunks_mut(width).zip(bounds).zip(sinks) {
        row[..lo - start].fill(f32::NEG_INFINITY);
        row[hi + 1 - start..].fill(f32::NEG_INFINITY);
        attention::softmax(row, sink);
    }
    let probs: Vec<&[f32]> = scores.chunks(width).collect();
    attention::weighted_values(outs, &probs, values_t, stride, 0..dims, start, order);
}

/// What attention scores are multiplied by, and (Gemma 2) the soft-cap
/// applied to them before the mask and softmax.
#[derive(Clone, Copy)]
struct ScoreScale {
    by: f32,
    softcap: Option<f32>,
}

impl ScoreScale {
    /// `cap · tanh(score / cap)`, as llama.cpp's three ops compute it.
    fn cap(&self, scores: &mut [f32]) {
        if let Some(cap) = self.softcap {
            let inv = 1.0 / cap;
            scores.iter_mut().for_each(|s| *s = (*s * inv).tanh() * cap);
        }
    }
}

/// Query head `h`'s sink logit, or −∞ (no sink).
fn sink_of(sinks: Option<&[f32]>, h: usize) -> f32 {
    sinks.map_or(f32::NEG_INFINITY, |s| s[h])
}

/// Where a forward pass's rows keep their keys and values.
enum KvRows<'a, 'c> {
    /// `batch` sequences of `seq` rows each, in the rows of one cache, all
    /// from position `pos0`.
    Batch { cache: &'a mut KvCache, batch: usize, seq: usize, pos0: usize },
    /// One decode row per cache, each at its own position.
    Caches { caches: &'a mut [&'c mut KvCache], positions: Vec<usize> },
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

/// Rotates the first `rot` dimensions of every head of `x` (`[rows, heads
/// × hd]`, row r at position `pos0 + r % seq`), pairing adjacent values
/// (GGUF's permuted llama weights) or the two halves of those dimensions
/// (NeoX); the rest pass unchanged (partial rotary). The multiply-adds are
/// fused the way GCC fuses llama.cpp's `rotate_pairs`.
#[allow(clippy::too_many_arguments, reason = "a kernel's operands, as ggml's rope takes them")]
fn apply_rope(
    x: &mut [f32],
    (cos, sin): &(Vec<f32>, Vec<f32>),
    seq: usize,
    width: usize,
    hd: usize,
    rot: usize,
    interleaved: bool,
) {
    let half = rot / 2;
    for (r, row) in x.chunks_exact_mut(width).enumerate() {
        let t = r % seq;
        let (c, s) = (&cos[t * half..(t + 1) * half], &sin[t * half..(t + 1) * half]);
        for head in row.chunks_exact_mut(hd) {
            let head = &mut head[..rot];
            if interleaved {
                for i in 0..half {
                    let (x0, x1) = (head[2 * i], head[2 * i + 1]);
                    head[2 * i] = x0.mul_add(c[i], -(x1 * s[i]));
                    head[2 * i + 1] = x0.mul_add(s[i], x1 * c[i]);
                }
            } else {
                for i in 0..half {
                    let (x0, x1) = (head[i], head[i + half]);
                    head[i] = x0.mul_add(c[i], -(x1 * s[i]));
                    head[i + half] = x0.mul_add(s[i], x1 * c[i]);
                }
            }
        }
    }
}
