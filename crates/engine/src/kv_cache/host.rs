//! One layer's host (CPU) buffers as the forward pass reads and writes
//! them, and its values transposed for attention.

use std::ops::Range;
use std::sync::Arc;

use half::f16;

use super::{KvCache, KvShape, LayerKv};
use crate::worker_pool::{DisjointSlice, WorkerPool};

/// One layer's host buffers, writable (see `KvCache::host_mut`).
pub(crate) struct HostKvMut<'a> {
    pub k: &'a mut [f16],
    pub v_t: &'a mut [f16],
    pub capacity: usize,
    shape: KvShape,
}

impl HostKvMut<'_> {
    /// Stores one position's key and value of run `run` (sequence × KV
    /// head), rounded to f16 as llama.cpp's `ggml_set_rows` rounds them.
    /// `v` is empty for a layer whose values are its keys (`KvShape`).
    pub fn store(&mut self, run: usize, pos: usize, k: &[f32], v: &[f32]) {
        use half::slice::HalfFloatSliceExt;
        let (kd, vd, cap) = (self.shape.key_dim, self.shape.value_dim, self.capacity);
        debug_assert_eq!((k.len(), v.len()), (kd, vd));
        self.k[(run * cap + pos) * kd..(run * cap + pos + 1) * kd].convert_from_f32_slice(k);
        for (j, x) in v.iter().enumerate() {
            self.v_t[(run * vd + j) * cap + pos] = f16::from_f32(*x);
        }
    }
}

/// One layer's host buffers: keys `[batch, kv_heads, capacity, head_dim]`,
/// values transposed, `[batch, kv_heads, head_dim, capacity]` (empty where
/// the values are the keys' leading dimensions: see `values_t`).
pub(crate) struct HostKv<'a> {
    pub k: &'a [f16],
    v_t: &'a [f16],
    pub capacity: usize,
    key_dim: usize,
}

impl<'a> HostKv<'a> {
    /// The values of positions `..end`, transposed as attention reads them.
    /// A layer whose values are its keys' first `lead` dimensions
    /// (`ModelConfig::values_in_keys`) has them transposed here, for this
    /// pass only, as llama.cpp transposes its view of the keys: the cache
    /// holds the latent once, and the sums come out as they do there.
    pub fn values_t(&self, pool: &WorkerPool, lead: usize, end: usize) -> ValuesT<'a> {
        if !self.v_t.is_empty() || self.k.is_empty() {
            return ValuesT { data: std::borrow::Cow::Borrowed(self.v_t), stride: self.capacity, dims: self.key_dim };
        }
        let (kd, cap) = (self.key_dim, self.capacity);
        let runs = self.k.len() / (cap * kd);
        // Blocks of dimensions, each read as a short row of every key and
        // written as that many sequential rows.
        const DIMS: usize = 32;
        let blocks = lead.div_ceil(DIMS);
        // Every element is written below: no zeroing first (this runs on
        // every pass over the whole history).
        let n = runs * lead * end;
        let mut out: Vec<f16> = Vec::with_capacity(n);
        let dst = DisjointSlice::new(&mut out.spare_capacity_mut()[..n]);
        pool.run(runs * blocks, &|t| {
            let (run, block) = (t / blocks, t % blocks);
            let dims = block * DIMS..((block + 1) * DIMS).min(lead);
            // SAFETY: each task writes its own run's rows of its own dimensions.
            let rows = unsafe { dst.slice((run * lead + dims.start) * end..(run * lead + dims.end) * end) };
            let keys = &self.k[run * cap * kd..];
            transpose_into(rows, end, &keys[..end * kd], kd, dims);
        });
        // SAFETY: the tasks above wrote every one of the `n` elements.
        unsafe { out.set_len(n) };
        ValuesT { data: std::borrow::Cow::Owned(out), stride: end, dims: lead }
    }
}

/// Writes dimensions `dims` of `n` rows of `keys` (each `kd` wide) into
/// `rows` as `dims.len()` rows of `n`: `rows[j * n + i] = keys[i * kd + dims.start + j]`.
fn transpose_into(rows: &mut [std::mem::MaybeUninit<f16>], n: usize, keys: &[f16], kd: usize, dims: Range<usize>) {
    assert!(rows.len() == dims.len() * n && keys.len() >= n * kd && dims.end <= kd);
    let width = dims.len();
    #[allow(unused_mut, reason = "only x86-64 takes blocks of eight first")]
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    while i + 8 <= n {
        let mut j = 0;
        while j + 8 <= width {
            // SAFETY: rows i..i + 8 and dimensions dims.start + j..+ 8 of
            // the keys, and positions i..i + 8 of rows j..j + 8, are in
            // bounds by the assert above; SSE2 is part of x86-64.
            unsafe {
                transpose_8x8(keys.as_ptr().add(i * kd + dims.start + j), kd, rows.as_mut_ptr().add(j * n + i), n)
            };
            j += 8;
        }
        for j in j..width {
            for r in 0..8 {
                rows[j * n + i + r] = std::mem::MaybeUninit::new(keys[(i + r) * kd + dims.start + j]);
            }
        }
        i += 8;
    }
    for i in i..n {
        for j in 0..width {
            rows[j * n + i] = std::mem::MaybeUninit::new(keys[i * kd + dims.start + j]);
        }
    }
}

/// An 8 × 8 block of 16-bit values from rows `src_stride` apart into rows
/// `dst_stride` apart, transposed, in SSE2 registers.
///
/// # Safety
/// Eight values at each of `src + r * src_stride` and `dst + r * dst_stride`
/// (`r < 8`) are in bounds.
#[cfg(target_arch = "x86_64")]
unsafe fn transpose_8x8(src: *const f16, src_stride: usize, dst: *mut std::mem::MaybeUninit<f16>, dst_stride: usize) {
    use std::arch::x86_64::*;
    let row = |r: usize| _mm_loadu_si128(src.add(r * src_stride) as *const __m128i);
    let (a0, a1, a2, a3) = (row(0), row(1), row(2), row(3));
    let (a4, a5, a6, a7) = (row(4), row(5), row(6), row(7));
    // Pairs of 16-bit, then 32-bit, then 64-bit lanes interleaved.
    let (b0, b1) = (_mm_unpacklo_epi16(a0, a1), _mm_unpackhi_epi16(a0, a1));
    let (b2, b3) = (_mm_unpacklo_epi16(a2, a3), _mm_unpackhi_epi16(a2, a3));
    let (b4, b5) = (_mm_unpacklo_epi16(a4, a5), _mm_unpackhi_epi16(a4, a5));
    let (b6, b7) = (_mm_unpacklo_epi16(a6, a7), _mm_unpackhi_epi16(a6, a7));
    let (c0, c1) = (_mm_unpacklo_epi32(b0, b2), _mm_unpackhi_epi32(b0, b2));
    let (c2, c3) = (_mm_unpacklo_epi32(b1, b3), _mm_unpackhi_epi32(b1, b3));
    let (c4, c5) = (_mm_unpacklo_epi32(b4, b6), _mm_unpackhi_epi32(b4, b6));
    let (c6, c7) = (_mm_unpacklo_epi32(b5, b7), _mm_unpackhi_epi32(b5, b7));
    let out = [
        _mm_unpacklo_epi64(c0, c4),
        _mm_unpackhi_epi64(c0, c4),
        _mm_unpacklo_epi64(c1, c5),
        _mm_unpackhi_epi64(c1, c5),
        _mm_unpacklo_epi64(c2, c6),
        _mm_unpackhi_epi64(c2, c6),
        _mm_unpacklo_epi64(c3, c7),
        _mm_unpackhi_epi64(c3, c7),
    ];
    for (r, v) in out.into_iter().enumerate() {
        _mm_storeu_si128(dst.add(r * dst_stride) as *mut __m128i, v);
    }
}

/// A layer's values as attention reads them: `[run, dims, stride]`, each
/// row one dimension over positions.
pub(crate) struct ValuesT<'a> {
    data: std::borrow::Cow<'a, [f16]>,
    pub stride: usize,
    pub dims: usize,
}

impl ValuesT<'_> {
    /// Run `run`'s (sequence × KV head) values.
    pub fn run(&self, run: usize) -> &[f16] {
        let n = self.dims * self.stride;
        &self.data[run * n..(run + 1) * n]
    }
}

impl KvCache {
    /// Layer `layer`'s host buffers (CPU caches only).
    pub(crate) fn host(&self, layer: usize) -> HostKv<'_> {
        match &self.layers[layer] {
            LayerKv::Host { k, v } => {
                HostKv { k, v_t: v, capacity: self.capacity, key_dim: self.kv_layers[layer].map_or(0, |s| s.key_dim) }
            }
            LayerKv::Device { .. } => unreachable!("host access to a device cache"),
        }
    }

    /// Mutable host buffers of `layer`; call `reserve` first (it unshares them).
    pub(crate) fn host_mut(&mut self, layer: usize) -> HostKvMut<'_> {
        let capacity = self.capacity;
        let shape = self.kv_layers[layer].unwrap_or(KvShape { heads: 0, key_dim: 0, value_dim: 0 });
        match Arc::get_mut(&mut self.layers).map(|l| &mut l[layer]) {
            Some(LayerKv::Host { k, v }) => HostKvMut { k, v_t: v, capacity, shape },
            _ => unreachable!("host_mut needs a reserved CPU cache"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Latent attention's values, transposed from the keys for a pass, are
    /// the keys' leading dimensions at every position, for lengths and
    /// widths that are and are not whole 8 × 8 blocks.
    #[test]
    fn values_read_from_the_keys_are_the_keys_leading_dimensions_transposed() {
        let pool = WorkerPool::new(2);
        for (kd, lead, cap, end) in [(576, 512, 64, 61), (20, 13, 9, 9), (72, 64, 40, 16), (8, 8, 3, 1)] {
            let runs = 2;
            let k: Vec<f16> = (0..runs * cap * kd).map(|i| f16::from_bits(i as u16)).collect();
            let kv = HostKv { k: &k, v_t: &[], capacity: cap, key_dim: kd };
            let v = kv.values_t(&pool, lead, end);
            assert_eq!((v.stride, v.dims), (end, lead));
            for run in 0..runs {
                for i in 0..end {
                    for j in 0..lead {
                        assert_eq!(
                            v.run(run)[j * end + i].to_bits(),
                            k[(run * cap + i) * kd + j].to_bits(),
                            "{kd} {lead} {end}: {run} {i} {j}"
                        );
                    }
                }
            }
        }
    }
}
