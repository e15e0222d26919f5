//! Quantized matrix × activations for GGML's Q4_0, Q4_1, Q8_0 and Q4_K
//! weights (the K-quant kernel itself is in `quant_k.rs`).
//!
//! Activations are rounded to 8 bits per 32-value block exactly as llama.cpp's
//! x86 build does (scale 127/max, round half to even, the Q8_1 block sum from
//! the unrounded scale), and each dot product accumulates in the same order as
//! its AVX2 kernel: eight FMA lanes, then the same horizontal sum. Matching
//! the rounding matters more than it seems: the model's top two tokens are
//! often closer than candle's Q4_1 rounding error (see ARCHITECTURE.md).
//!
//! Weights stay in GGUF's own block layout (f16 scales beside their quants),
//! so a decode step reads no more bytes than the file holds. The kernels work
//! on tiles — several weight rows against one activation row when decoding,
//! so their independent FMA chains overlap; two weight rows against four
//! activation rows when prefilling, so each unpacked block is used four
//! times — and every product in a tile is computed exactly as a lone dot
//! product would be, in the same order.
//!
//! AVX2+FMA+F16C kernels are chosen at run time; the portable path computes
//! the very same floating-point operations, so results do not depend on the CPU.

use std::ops::Range;

use candle_core::quantized::{GgmlDType, QTensor};
use half::f16;

use crate::vec_ops::hsum8;

use crate::quant_k::{self, BlockQ4K, Q8KBlock, QK_K};
use crate::worker_pool::{DisjointSlice, WorkerPool};

/// How many weight rows ahead a decode step prefetches.
const PREFETCH_COLUMNS: usize = 8;

/// A weight matrix `[n, k]` in one of the supported block formats.
pub struct QuantMatrix {
    n: usize,
    k: usize,
    blocks: Blocks,
}

enum Blocks {
    Q4_0(Vec<BlockQ4_0>),
    Q4_1(Vec<BlockQ4_1>),
    Q8_0(Vec<BlockQ8_0>),
    Q4K(Vec<BlockQ4K>),
}

/// Activation rows rounded for the formats that will read them: 32-value
/// Q8 blocks for Q4_0/Q4_1/Q8_0, 256-value Q8_K blocks for the K-quants.
#[derive(Default)]
pub(crate) struct Activations {
    pub(crate) q8: Vec<Q8Block>,
    pub(crate) q8k: Vec<Q8KBlock>,
}

impl Activations {
    /// Rounds `x` for every matrix in `matrices`.
    pub(crate) fn for_matrices<'a>(x: &[f32], matrices: impl IntoIterator<Item = &'a QuantMatrix>) -> Self {
        let (mut q8, mut q8k) = (false, false);
        for m in matrices {
            match m.blocks {
                Blocks::Q4K(_) => q8k = true,
                _ => q8 = true,
            }
        }
        Self { q8: if q8 { quantize(x) } else { Vec::new() }, q8k: if q8k { quant_k::quantize(x) } else { Vec::new() } }
    }

    /// Appends `other`, rounded from the rows after this one's.
    pub(crate) fn extend(&mut self, other: Self) {
        self.q8.extend(other.q8);
        self.q8k.extend(other.q8k);
    }
}

/// GGUF's block layouts, byte for byte (scales are f16 bits).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ4_0 {
    d: u16,
    qs: [u8; 16],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ4_1 {
    d: u16,
    m: u16,
    qs: [u8; 16],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ8_0 {
    d: u16,
    qs: [i8; 32],
}

/// One 32-value block of activations rounded to 8 bits.
#[derive(Clone, Copy)]
pub(crate) struct Q8Block {
    d: f32,
    /// `d ×` the sum of `qs`, as Q8_1 stores it (Q4_1 needs it).
    s: f32,
    qs: [i8; 32],
}

fn half(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

fn blocks_from<B: Copy>(data: &[u8], size: usize, parse: impl Fn(&[u8]) -> B) -> Vec<B> {
    data.chunks_exact(size).map(parse).collect()
}

impl QuantMatrix {
    /// `None` when the format has no kernel here; the caller falls back to candle.
    pub fn from_qtensor(t: &QTensor) -> Option<Self> {
        let (n, k) = t.shape().dims2().ok()?;
        if k % 32 != 0 || (t.dtype() == GgmlDType::Q4K && k % QK_K != 0) {
            return None;
        }
        let data = t.data().ok()?;
        let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let blocks = match t.dtype() {
            GgmlDType::Q4_0 => Blocks::Q4_0(blocks_from(&data, 18, |b| BlockQ4_0 { d: u16_at(b, 0), qs: b[2..18].try_into().unwrap() })),
            GgmlDType::Q4_1 => Blocks::Q4_1(blocks_from(&data, 20, |b| BlockQ4_1 { d: u16_at(b, 0), m: u16_at(b, 2), qs: b[4..20].try_into().unwrap() })),
            GgmlDType::Q8_0 => Blocks::Q8_0(blocks_from(&data, 34, |b| BlockQ8_0 { d: u16_at(b, 0), qs: std::array::from_fn(|i| b[2 + i] as i8) })),
            GgmlDType::Q4K => Blocks::Q4K(blocks_from(&data, BlockQ4K::BYTES, BlockQ4K::parse)),
            _ => return None,
        };
        let (count, per_block) = match &blocks {
            Blocks::Q4_0(b) => (b.len(), 32),
            Blocks::Q4_1(b) => (b.len(), 32),
            Blocks::Q8_0(b) => (b.len(), 32),
            Blocks::Q4K(b) => (b.len(), QK_K),
        };
        (count == n * k / per_block).then_some(Self { n, k, blocks })
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    pub fn cols(&self) -> usize {
        self.k
    }

    /// `out[m × n] = x[m × k] · selfᵀ`, on the global worker pool.
    pub fn matmul(&self, x: &[f32], out: &mut [f32]) {
        let m = x.len() / self.k;
        assert_eq!(x.len(), m * self.k);
        assert_eq!(out.len(), m * self.n);
        let acts = Activations::for_matrices(x, [self]);
        let pool = WorkerPool::global();
        let chunk = self.columns_per_task(pool.active_threads());
        let out = DisjointSlice::new(out);
        pool.run(self.n.div_ceil(chunk), &|t| {
            let cols = t * chunk..((t + 1) * chunk).min(self.n);
            // SAFETY: tasks write disjoint column ranges.
            unsafe { self.matmul_cols(&acts, m, cols, &out, self.n) };
        });
    }

    /// Output columns per task: about eight tasks per thread, so that one
    /// slow thread delays a region by a small share only.
    pub(crate) fn columns_per_task(&self, threads: usize) -> usize {
        (self.n / (8 * threads.max(1))).next_multiple_of(8).clamp(8, 256)
    }

    /// Writes `out[row × ld + col]` for every activation row and every
    /// column in `cols` (a weight row each).
    ///
    /// # Safety
    /// No other thread may write those elements of `out` meanwhile.
    pub(crate) unsafe fn matmul_cols(&self, acts: &Activations, rows: usize, cols: Range<usize>, out: &DisjointSlice<f32>, ld: usize) {
        let simd = has_avx2_fma();
        if let Blocks::Q4K(b) = &self.blocks {
            let kb = self.k / QK_K;
            let y = |r: usize| &acts.q8k[r * kb..(r + 1) * kb];
            let mut r = 0;
            while r + 4 <= rows {
                for col in cols.clone() {
                    let t = quant_k::dot_rows::<4>(&b[col * kb..(col + 1) * kb], [y(r), y(r + 1), y(r + 2), y(r + 3)], simd);
                    for (a, v) in t.into_iter().enumerate() {
                        out.write((r + a) * ld + col, v);
                    }
                }
                r += 4;
            }
            for r in r..rows {
                for col in cols.clone() {
                    prefetch_row_ahead(b, kb, col);
                    out.write(r * ld + col, quant_k::dot(&b[col * kb..(col + 1) * kb], y(r), simd));
                }
            }
            return;
        }
        let acts = &acts.q8;
        let kb = self.k / 32;
        debug_assert_eq!(acts.len(), rows * kb);
        let mut row = 0;
        let mut tile = vec![[0f32; 4]; cols.len()];
        while row < rows {
            // Four activation rows per tile when prefilling, one when decoding.
            let r = if rows - row >= 4 { 4 } else { 1 };
            let y: [&[Q8Block]; 4] = std::array::from_fn(|a| {
                let a = row + a.min(r - 1);
                &acts[a * kb..(a + 1) * kb]
            });
            match &self.blocks {
                Blocks::Q4_0(b) => column_range::<BlockQ4_0>(b, kb, cols.clone(), r, y, simd, &mut tile),
                Blocks::Q4_1(b) => column_range::<BlockQ4_1>(b, kb, cols.clone(), r, y, simd, &mut tile),
                Blocks::Q8_0(b) => column_range::<BlockQ8_0>(b, kb, cols.clone(), r, y, simd, &mut tile),
                Blocks::Q4K(_) => unreachable!("K-quants are handled above"),
            }
            for (i, t) in tile.iter().enumerate() {
                for (a, v) in t.iter().enumerate().take(r) {
                    out.write((row + a) * ld + cols.start + i, *v);
                }
            }
            row += r;
        }
    }

    /// Weight row `row` as f32 (how an embedding row is looked up).
    pub(crate) fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        if let Blocks::Q4K(b) = &self.blocks {
            let kb = self.k / QK_K;
            b[row * kb..(row + 1) * kb].iter().zip(out.chunks_exact_mut(QK_K)).for_each(|(b, o)| b.dequantize(o));
            return;
        }
        let kb = self.k / 32;
        for (b, o) in (row * kb..(row + 1) * kb).zip(out.chunks_exact_mut(32)) {
            match &self.blocks {
                Blocks::Q4_0(x) => o.iter_mut().zip(nibbles(&x[b].qs, 8)).for_each(|(o, q)| *o = half(x[b].d) * q as f32),
                Blocks::Q4_1(x) => o.iter_mut().zip(nibbles(&x[b].qs, 0)).for_each(|(o, q)| *o = half(x[b].d) * q as f32 + half(x[b].m)),
                Blocks::Q8_0(x) => o.iter_mut().zip(x[b].qs).for_each(|(o, q)| *o = half(x[b].d) * q as f32),
                Blocks::Q4K(_) => unreachable!("handled above"),
            }
        }
    }
}

/// A weight block format with a dot product against 8-bit activations.
pub(crate) trait WeightBlock: Copy {
    /// The portable dot product of one weight row with one activation row.
    fn dot(x: &[Self], y: &[Q8Block]) -> f32;
    #[cfg(target_arch = "x86_64")]
    /// `W` weight rows × `R` activation rows with AVX2.
    unsafe fn tile<const W: usize, const R: usize>(x: [&[Self]; W], y: [&[Q8Block]; R]) -> [[f32; R]; W];

    /// Every column of `cols` against `R` activation rows, `W` at a time.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn columns<const W: usize, const R: usize>(blocks: &[Self], kb: usize, cols: Range<usize>, y: [&[Q8Block]; R], out: &mut [[f32; 4]]) {
        let row = |c: usize| &blocks[c * kb..(c + 1) * kb];
        let mut col = cols.start;
        let mut xs = [row(col); W];
        while col + W <= cols.end {
            if R == 1 {
                prefetch_row_ahead(blocks, kb, col);
            }
            for (i, x) in xs.iter_mut().enumerate() {
                *x = row(col + i);
            }
            let t = Self::tile::<W, R>(xs, y);
            for i in 0..W {
                out[col - cols.start + i][..R].copy_from_slice(&t[i]);
            }
            col += W;
        }
        while col < cols.end {
            let t = Self::tile::<1, R>([row(col)], y);
            out[col - cols.start][..R].copy_from_slice(&t[0]);
            col += 1;
        }
    }
}

/// Decoding streams the weights once from memory: asks for the row
/// `PREFETCH_COLUMNS` after `row` (about one memory latency of work ahead)
/// while this one is computed, past the end of a task's rows too.
#[inline]
fn prefetch_row_ahead<B>(blocks: &[B], kb: usize, row: usize) {
    #[cfg(target_arch = "x86_64")]
    if (row + PREFETCH_COLUMNS + 1) * kb <= blocks.len() {
        let bytes = kb * std::mem::size_of::<B>();
        // SAFETY: the row lies inside `blocks`; a prefetch reads nothing.
        unsafe {
            let p = blocks.as_ptr().add((row + PREFETCH_COLUMNS) * kb) as *const i8;
            for off in (0..bytes).step_by(64) {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.add(off));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (blocks, kb, row);
}

/// `out[i][a]` = weight row `cols.start + i` · activation row `a < r`.
fn column_range<B: WeightBlock>(blocks: &[B], kb: usize, cols: Range<usize>, r: usize, y: [&[Q8Block]; 4], simd: bool, out: &mut [[f32; 4]]) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time).
        unsafe {
            if r == 4 {
                B::columns::<2, 4>(blocks, kb, cols, y, out);
            } else {
                B::columns::<1, 1>(blocks, kb, cols, [y[0]], out);
            }
        }
        return;
    }
    let _ = simd;
    for (i, o) in out.iter_mut().enumerate() {
        let col = cols.start + i;
        for (a, v) in o.iter_mut().enumerate().take(r) {
            *v = B::dot(&blocks[col * kb..(col + 1) * kb], y[a]);
        }
    }
}

pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static DETECTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *DETECTED.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Rounds activations (a multiple of 32 values) to 8-bit blocks.
pub(crate) fn quantize(x: &[f32]) -> Vec<Q8Block> {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(x: &[f32]) -> Vec<Q8Block> {
            let mut out = Vec::with_capacity(x.len() / 32);
            for c in x.chunks_exact(32) {
                out.push(quantize_block(c));
            }
            out
        }
        // SAFETY: the CPU has AVX2 (checked at run time); the same code,
        // with rounding done by an instruction instead of a libm call.
        return unsafe { avx2(x) };
    }
    x.chunks_exact(32).map(quantize_block).collect()
}

#[inline(always)]
fn quantize_block(x: &[f32]) -> Q8Block {
    let max = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = max / 127.0;
    let id = if max != 0.0 { 127.0 / max } else { 0.0 };
    let mut qs = [0i8; 32];
    let mut sum = 0i32;
    for (q, v) in qs.iter_mut().zip(x) {
        let r = (v * id).round_ties_even() as i32;
        sum += r;
        *q = r as i8;
    }
    let s = f16::from_f32(d * sum as f32).to_f32();
    Q8Block { d: f16::from_f32(d).to_f32(), s, qs }
}

/// Eight lanes, each the integer dot of four consecutive bytes.
fn lanes(x: &[i32; 32], y: &[i8; 32]) -> [f32; 8] {
    std::array::from_fn(|l| (l * 4..l * 4 + 4).map(|b| x[b] * y[b] as i32).sum::<i32>() as f32)
}

fn nibbles(qs: &[u8; 16], offset: i32) -> [i32; 32] {
    std::array::from_fn(|b| if b < 16 { (qs[b] & 0xF) as i32 - offset } else { (qs[b - 16] >> 4) as i32 - offset })
}

fn accumulate(acc: &mut [f32; 8], d: f32, l: [f32; 8]) {
    for (a, v) in acc.iter_mut().zip(l) {
        *a = d.mul_add(v, *a);
    }
}

impl WeightBlock for BlockQ4_1 {
    fn dot(x: &[Self], y: &[Q8Block]) -> f32 {
        let mut acc = [0f32; 8];
        let mut summs = 0f32;
        for (x, y) in x.iter().zip(y) {
            summs += half(x.m) * y.s;
            accumulate(&mut acc, half(x.d) * y.d, lanes(&nibbles(&x.qs, 0), &y.qs));
        }
        hsum8(acc) + summs
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const W: usize, const R: usize>(x: [&[Self]; W], y: [&[Q8Block]; R]) -> [[f32; R]; W] {
        use std::arch::x86_64::*;
        // Plain loops, not closures: a closure would not inherit this
        // function's target features, and its intrinsics would become calls.
        let mut acc = [[_mm256_setzero_ps(); R]; W];
        let mut summs = [[0f32; R]; W];
        let mut q = [_mm256_setzero_si256(); W];
        let mut d = [0f32; W];
        let mut m = [0f32; W];
        for i in 0..x[0].len() {
            for r in 0..W {
                let b = &x[r][i];
                q[r] = x86::nibbles(&b.qs);
                d[r] = x86::half(b.d);
                m[r] = x86::half(b.m);
            }
            for a in 0..R {
                let b = &y[a][i];
                let qy = _mm256_loadu_si256(b.qs.as_ptr() as *const __m256i);
                for r in 0..W {
                    summs[r][a] += m[r] * b.s;
                    acc[r][a] = _mm256_fmadd_ps(_mm256_set1_ps(d[r] * b.d), x86::us8_dot(q[r], qy), acc[r][a]);
                }
            }
        }
        let mut out = [[0f32; R]; W];
        for r in 0..W {
            for a in 0..R {
                out[r][a] = x86::hsum(acc[r][a]) + summs[r][a];
            }
        }
        out
    }
}

/// The portable dot product for formats whose quants are signed once
/// unpacked: `scale_quants` gives a block's scale and its 32 quants.
fn signed_dot<B>(x: &[B], y: &[Q8Block], scale_quants: impl Fn(&B) -> (f32, [i32; 32])) -> f32 {
    let mut acc = [0f32; 8];
    for (x, y) in x.iter().zip(y) {
        let (d, q) = scale_quants(x);
        accumulate(&mut acc, d * y.d, lanes(&q, &y.qs));
    }
    hsum8(acc)
}

impl WeightBlock for BlockQ4_0 {
    fn dot(x: &[Self], y: &[Q8Block]) -> f32 {
        signed_dot(x, y, |b| (half(b.d), nibbles(&b.qs, 8)))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const W: usize, const R: usize>(x: [&[Self]; W], y: [&[Q8Block]; R]) -> [[f32; R]; W] {
        x86::signed_tile::<Self, W, R, { x86::Q4_0 }>(x, y)
    }
}

impl WeightBlock for BlockQ8_0 {
    fn dot(x: &[Self], y: &[Q8Block]) -> f32 {
        signed_dot(x, y, |b| (half(b.d), std::array::from_fn(|i| b.qs[i] as i32)))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const W: usize, const R: usize>(x: [&[Self]; W], y: [&[Q8Block]; R]) -> [[f32; R]; W] {
        x86::signed_tile::<Self, W, R, { x86::Q8_0 }>(x, y)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Q8Block;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn hsum(x: __m256) -> f32 {
        let mut r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
        r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        r = _mm_add_ss(r, _mm_movehdup_ps(r));
        _mm_cvtss_f32(r)
    }

    /// An f16 scale, widened by the F16C unit.
    #[inline]
    #[target_feature(enable = "f16c")]
    pub unsafe fn half(bits: u16) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
        let tmp = _mm_loadu_si128(qs.as_ptr() as *const __m128i);
        _mm256_and_si256(_mm256_set1_epi8(0xF), _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp))
    }

    /// Unsigned × signed bytes, summed in fours, as floats.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn us8_dot(ax: __m256i, sy: __m256i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ax, sy)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn i8_dot(x: __m256i, y: __m256i) -> __m256 {
        us8_dot(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
    }

    pub const Q4_0: u8 = 0;
    pub const Q8_0: u8 = 1;

    /// The tile for formats whose quants are signed bytes once unpacked
    /// (`FORMAT` says which; the blocks are reinterpreted accordingly).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn signed_tile<B, const W: usize, const R: usize, const FORMAT: u8>(x: [&[B]; W], y: [&[Q8Block]; R]) -> [[f32; R]; W] {
        let mut acc = [[_mm256_setzero_ps(); R]; W];
        let mut q = [_mm256_setzero_si256(); W];
        let mut d = [0f32; W];
        for i in 0..x[0].len() {
            for r in 0..W {
                let p = &x[r][i] as *const B;
                if FORMAT == Q4_0 {
                    let b = &*(p as *const super::BlockQ4_0);
                    q[r] = _mm256_sub_epi8(nibbles(&b.qs), _mm256_set1_epi8(8));
                    d[r] = half(b.d);
                } else {
                    let b = &*(p as *const super::BlockQ8_0);
                    q[r] = _mm256_loadu_si256(b.qs.as_ptr() as *const __m256i);
                    d[r] = half(b.d);
                }
            }
            for a in 0..R {
                let b = &y[a][i];
                let qy = _mm256_loadu_si256(b.qs.as_ptr() as *const __m256i);
                for r in 0..W {
                    acc[r][a] = _mm256_fmadd_ps(_mm256_set1_ps(d[r] * b.d), i8_dot(q[r], qy), acc[r][a]);
                }
            }
        }
        let mut out = [[0f32; R]; W];
        for r in 0..W {
            for a in 0..R {
                out[r][a] = hsum(acc[r][a]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Module, Tensor};

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn portable_and_simd_paths_agree_bit_for_bit_and_track_f32() {
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0] {
            let (n, k, m) = (71, 256, 11);
            let w = Tensor::from_vec(random(n * k, 1), (n, k), &Device::Cpu).unwrap();
            let q = QTensor::quantize(&w, dtype).unwrap();
            let mat = QuantMatrix::from_qtensor(&q).unwrap();
            let x = random(m * k, 2);
            let mut out = vec![0f32; m * n];
            mat.matmul(&x, &mut out);
            let kb = k / 32;
            let acts = quantize(&x);
            for row in 0..m {
                for col in 0..n {
                    let y = &acts[row * kb..(row + 1) * kb];
                    let r = col * kb..(col + 1) * kb;
                    let portable = match &mat.blocks {
                        Blocks::Q4_0(b) => BlockQ4_0::dot(&b[r], y),
                        Blocks::Q4_1(b) => BlockQ4_1::dot(&b[r], y),
                        Blocks::Q8_0(b) => BlockQ8_0::dot(&b[r], y),
                        Blocks::Q4K(_) => unreachable!("not in this test"),
                    };
                    assert_eq!(portable.to_bits(), out[row * n + col].to_bits(), "{dtype:?} row {row} col {col}");
                }
            }
            // And both approximate the dequantized product.
            let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
            let exact: Vec<f32> = xt.matmul(&q.dequantize(&Device::Cpu).unwrap().t().unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let err = exact.iter().zip(&out).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(err < 0.2, "{dtype:?}: {err}");
            let candle: Vec<f32> = candle_core::quantized::QMatMul::from_qtensor(q).unwrap().forward(&xt).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let err = candle.iter().zip(&out).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(err < 0.2, "{dtype:?} vs candle: {err}");
        }
    }
}
