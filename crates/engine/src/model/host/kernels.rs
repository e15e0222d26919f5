//! The attention kernels of the CPU's pass: a layer's new keys and values
//! written into the caches, and scaled dot-product attention of the
//! queries against them, in llama.cpp's orders.

use super::{Buffers, KvRows};
use crate::cpu::attention::{self, Order};
use crate::cpu::vec_ops;
use crate::kv_cache::KvCache;
use crate::model::{window_start, AttentionShape, Model};
use crate::worker_pool::{DisjointSlice, WorkerPool};

/// Cache positions from which a decode step's attention runs in three
/// regions rather than a task per query head.
const LONG_HISTORY: usize = 512;

/// Positions per task of a long decode step's scores.
const POSITIONS_PER_TASK: usize = 512;

/// Output dimensions per task of a long decode step's weighted values.
const DIMS_PER_TASK: usize = 16;

impl Model {
    /// How many of the keys' leading dimensions are the values, where
    /// they are (`ModelConfig::values_in_keys`).
    fn values_lead(&self) -> usize {
        self.config.mla.map_or(0, |m| m.kv_lora_rank)
    }

    /// Writes the new keys and values (`buf.k`, `buf.v`) into the caches
    /// (where the layer `stores` its own) and attends with the queries
    /// (`buf.q`) into `buf.attn`: the part of attention every kind of
    /// layer shares (MLA's too, `mla_host`).
    #[allow(clippy::too_many_arguments, reason = "the pass's pool, buffers and caches beside the layer's choices")]
    pub(super) fn store_and_attend(
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
            KvRows::Caches { caches, positions, owners } => {
                // Every row's keys are stored before any row attends: a
                // verify pass's later rows see its earlier ones.
                for (r, &o) in owners.iter().enumerate() {
                    let mut store = caches[o].host_mut(layer);
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
            KvRows::Caches { caches, positions, owners } if positions.iter().all(|&p| p < LONG_HISTORY) => self
                .attention_caches(
                    pool,
                    caches,
                    (positions, owners),
                    layer,
                    &buf.q,
                    &mut buf.attn,
                    (window, sinks),
                    scale,
                ),
            KvRows::Caches { caches, positions, owners } => {
                // Each row against its own cache up to its own position, as
                // it would alone.
                for (r, &o) in owners.iter().enumerate() {
                    let range = r * qd..(r + 1) * qd;
                    self.attention(
                        pool,
                        caches[o],
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

    /// Decode rows over caches (row `r` in `caches[owners[r]]` at
    /// `positions[r]`), none of them over a long history: a task per (row,
    /// head) in one region, each computed as `attention` computes it for
    /// that row alone (one region per row would leave a thread idle at the
    /// end of each).
    #[allow(
        clippy::too_many_arguments,
        reason = "a kernel's operands: the caches and positions, the queries and outputs, the window and the scale"
    )]
    fn attention_caches(
        &self,
        pool: &WorkerPool,
        caches: &[&mut KvCache],
        (positions, owners): (&[usize], &[usize]),
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
        // A cache's values up to its last row's position (read only as far
        // as each row's own).
        let values: Vec<_> = views
            .iter()
            .enumerate()
            .map(|(i, kv)| {
                let end = owners.iter().zip(positions).filter(|(&o, _)| o == i).map(|(_, &p)| p + 1).max();
                kv.values_t(pool, self.values_lead(), end.unwrap_or(0))
            })
            .collect();
        let out = DisjointSlice::new(out);
        pool.run(positions.len() * nh, &|t| {
            let (r, qh) = (t / nh, t % nh);
            let (o, p) = (owners[r], positions[r]);
            let kv = &views[o];
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
                (values[o].run(qh / n_rep), values[o].stride, values[o].dims),
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
        shape: AttentionShape,
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
