//! Quantized matrix × activations for GGML's Q4_0, Q4_1 and Q8_0 weights.
//!
//! Activations are rounded to 8 bits per 32-value block exactly as llama.cpp's
//! x86 build does (scale 127/max, round half to even, the Q8_1 block sum from
//! the unrounded scale), and each dot product accumulates in the same order as
//! its AVX2 kernel: eight FMA lanes, then the same horizontal sum. Matching
//! the rounding matters more than it seems: the model's top two tokens are
//! often closer than candle's Q4_1 rounding error (see ARCHITECTURE.md).
//!
//! AVX2+FMA kernels are chosen at run time; the portable path computes the
//! very same floating-point operations, so results do not depend on the CPU.

use std::ops::Range;

use candle_core::quantized::{GgmlDType, QTensor};
use half::f16;

use crate::worker_pool::{DisjointSlice, WorkerPool};

/// Activation rows a prefill task runs against each pair of weight rows.
const ROW_TILE: usize = 4;

/// A weight matrix `[n, k]` in one of the supported block formats, with its
/// f16 scales widened once at load time.
pub struct QuantMatrix {
    n: usize,
    k: usize,
    blocks: Blocks,
}

enum Blocks {
    Q4_0 { d: Vec<f32>, qs: Vec<[u8; 16]> },
    Q4_1 { d: Vec<f32>, m: Vec<f32>, qs: Vec<[u8; 16]> },
    Q8_0 { d: Vec<f32>, qs: Vec<[i8; 32]> },
}

/// One 32-value block of activations rounded to 8 bits.
#[derive(Clone, Copy)]
pub(crate) struct Q8Block {
    d: f32,
    /// `d ×` the sum of `qs`, as Q8_1 stores it (Q4_1 needs it).
    s: f32,
    qs: [i8; 32],
}

impl Q8Block {
    pub(crate) const ZERO: Self = Self { d: 0.0, s: 0.0, qs: [0; 32] };
}

impl QuantMatrix {
    /// `None` when the format has no kernel here; the caller falls back to candle.
    pub fn from_qtensor(t: &QTensor) -> Option<Self> {
        let (n, k) = t.shape().dims2().ok()?;
        if k % 32 != 0 {
            return None;
        }
        let data = t.data().ok()?;
        let f = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
        let blocks = match t.dtype() {
            GgmlDType::Q4_0 => {
                let raw: Vec<&[u8]> = data.chunks_exact(18).collect();
                Blocks::Q4_0 { d: raw.iter().map(|b| f(b)).collect(), qs: raw.iter().map(|b| b[2..18].try_into().unwrap()).collect() }
            }
            GgmlDType::Q4_1 => {
                let raw: Vec<&[u8]> = data.chunks_exact(20).collect();
                Blocks::Q4_1 {
                    d: raw.iter().map(|b| f(b)).collect(),
                    m: raw.iter().map(|b| f(&b[2..])).collect(),
                    qs: raw.iter().map(|b| b[4..20].try_into().unwrap()).collect(),
                }
            }
            GgmlDType::Q8_0 => {
                let raw: Vec<&[u8]> = data.chunks_exact(34).collect();
                Blocks::Q8_0 { d: raw.iter().map(|b| f(b)).collect(), qs: raw.iter().map(|b| std::array::from_fn(|i| b[2 + i] as i8)).collect() }
            }
            _ => return None,
        };
        let count = match &blocks {
            Blocks::Q4_0 { d, .. } | Blocks::Q4_1 { d, .. } | Blocks::Q8_0 { d, .. } => d.len(),
        };
        (count == n * k / 32).then_some(Self { n, k, blocks })
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
        let acts = quantize(x);
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
    pub(crate) unsafe fn matmul_cols(&self, acts: &[Q8Block], rows: usize, cols: Range<usize>, out: &DisjointSlice<f32>, ld: usize) {
        let kb = self.k / 32;
        debug_assert_eq!(acts.len(), rows * kb);
        let avx2 = has_avx2_fma();
        let act = |r: usize| &acts[r * kb..(r + 1) * kb];
        let single = |col: usize, y: &[Q8Block]| -> f32 {
            let r = col * kb..(col + 1) * kb;
            match &self.blocks {
                Blocks::Q4_0 { d, qs } => dot_q4_0(&d[r.clone()], &qs[r], y, avx2),
                Blocks::Q4_1 { d, m, qs } => dot_q4_1(&d[r.clone()], &m[r.clone()], &qs[r], y, avx2),
                Blocks::Q8_0 { d, qs } => dot_q8_0(&d[r.clone()], &qs[r], y, avx2),
            }
        };
        let mut row = 0;
        // Tiles of two weight rows × four activation rows reuse each unpacked
        // weight block four times; every product is still computed exactly
        // as `single` computes it.
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            if let Blocks::Q4_1 { d, m, qs } = &self.blocks {
                while row + ROW_TILE <= rows {
                    let ys: [&[Q8Block]; ROW_TILE] = std::array::from_fn(|i| act(row + i));
                    let mut col = cols.start;
                    while col + 2 <= cols.end {
                        let (r0, r1) = (col * kb..(col + 1) * kb, (col + 1) * kb..(col + 2) * kb);
                        let t = x86::tile_q4_1(
                            [(&d[r0.clone()], &m[r0.clone()], &qs[r0]), (&d[r1.clone()], &m[r1.clone()], &qs[r1])],
                            ys,
                        );
                        for (w, tw) in t.iter().enumerate() {
                            for (a, v) in tw.iter().enumerate() {
                                out.write((row + a) * ld + col + w, *v);
                            }
                        }
                        col += 2;
                    }
                    if col < cols.end {
                        for (a, y) in ys.iter().enumerate() {
                            out.write((row + a) * ld + col, single(col, y));
                        }
                    }
                    row += ROW_TILE;
                }
            }
        }
        for r in row..rows {
            let y = act(r);
            for col in cols.clone() {
                out.write(r * ld + col, single(col, y));
            }
        }
    }

    /// Weight row `row` as f32 (how an embedding row is looked up).
    pub(crate) fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let kb = self.k / 32;
        for (b, o) in (row * kb..(row + 1) * kb).zip(out.chunks_exact_mut(32)) {
            match &self.blocks {
                Blocks::Q4_0 { d, qs } => o.iter_mut().zip(nibbles(&qs[b], 8)).for_each(|(o, q)| *o = d[b] * q as f32),
                Blocks::Q4_1 { d, m, qs } => o.iter_mut().zip(nibbles(&qs[b], 0)).for_each(|(o, q)| *o = d[b] * q as f32 + m[b]),
                Blocks::Q8_0 { d, qs } => o.iter_mut().zip(qs[b]).for_each(|(o, q)| *o = d[b] * q as f32),
            }
        }
    }
}

/// Rounds activations (a multiple of 32 values) to 8-bit blocks.
pub(crate) fn quantize(x: &[f32]) -> Vec<Q8Block> {
    x.chunks_exact(32).map(quantize_block).collect()
}

pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static DETECTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *DETECTED.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

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

/// llama.cpp's `hsum_float_8`.
fn hsum8(a: [f32; 8]) -> f32 {
    let r = [a[4] + a[0], a[5] + a[1], a[6] + a[2], a[7] + a[3]];
    (r[0] + r[2]) + (r[1] + r[3])
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

fn dot_q4_1(d: &[f32], m: &[f32], qs: &[[u8; 16]], y: &[Q8Block], avx2: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: the CPU has AVX2 and FMA (checked at run time).
        return unsafe { x86::dot_q4_1(d, m, qs, y) };
    }
    let _ = avx2;
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for i in 0..d.len() {
        summs += m[i] * y[i].s;
        accumulate(&mut acc, d[i] * y[i].d, lanes(&nibbles(&qs[i], 0), &y[i].qs));
    }
    hsum8(acc) + summs
}

fn dot_q4_0(d: &[f32], qs: &[[u8; 16]], y: &[Q8Block], avx2: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: the CPU has AVX2 and FMA (checked at run time).
        return unsafe { x86::dot_q4_0(d, qs, y) };
    }
    let _ = avx2;
    let mut acc = [0f32; 8];
    for i in 0..d.len() {
        accumulate(&mut acc, d[i] * y[i].d, lanes(&nibbles(&qs[i], 8), &y[i].qs));
    }
    hsum8(acc)
}

fn dot_q8_0(d: &[f32], qs: &[[i8; 32]], y: &[Q8Block], avx2: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: the CPU has AVX2 and FMA (checked at run time).
        return unsafe { x86::dot_q8_0(d, qs, y) };
    }
    let _ = avx2;
    let mut acc = [0f32; 8];
    for i in 0..d.len() {
        let x: [i32; 32] = std::array::from_fn(|b| qs[i][b] as i32);
        accumulate(&mut acc, d[i] * y[i].d, lanes(&x, &y[i].qs));
    }
    hsum8(acc)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Q8Block;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(x: __m256) -> f32 {
        let mut r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
        r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        r = _mm_add_ss(r, _mm_movehdup_ps(r));
        _mm_cvtss_f32(r)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
        let tmp = _mm_loadu_si128(qs.as_ptr() as *const __m128i);
        _mm256_and_si256(_mm256_set1_epi8(0xF), _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp))
    }

    /// Unsigned × signed bytes, summed in fours, as floats.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn us8_dot(ax: __m256i, sy: __m256i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ax, sy)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn i8_dot(x: __m256i, y: __m256i) -> __m256 {
        us8_dot(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_q4_1(d: &[f32], m: &[f32], qs: &[[u8; 16]], y: &[Q8Block]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0f32;
        for i in 0..d.len() {
            summs += m[i] * y[i].s;
            let qy = _mm256_loadu_si256(y[i].qs.as_ptr() as *const __m256i);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d[i] * y[i].d), us8_dot(nibbles(&qs[i]), qy), acc);
        }
        hsum(acc) + summs
    }

    type Q4_1Row<'a> = (&'a [f32], &'a [f32], &'a [[u8; 16]]);

    /// `dot_q4_1` for two weight rows × `R` activation rows at once.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile_q4_1<const R: usize>(w: [Q4_1Row; 2], y: [&[Q8Block]; R]) -> [[f32; R]; 2] {
        let mut acc = [[_mm256_setzero_ps(); R]; 2];
        let mut summs = [[0f32; R]; 2];
        for i in 0..w[0].0.len() {
            let x = [nibbles(&w[0].2[i]), nibbles(&w[1].2[i])];
            for a in 0..R {
                let b = &y[a][i];
                let qy = _mm256_loadu_si256(b.qs.as_ptr() as *const __m256i);
                for r in 0..2 {
                    summs[r][a] += w[r].1[i] * b.s;
                    acc[r][a] = _mm256_fmadd_ps(_mm256_set1_ps(w[r].0[i] * b.d), us8_dot(x[r], qy), acc[r][a]);
                }
            }
        }
        std::array::from_fn(|r| std::array::from_fn(|a| hsum(acc[r][a]) + summs[r][a]))
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_q4_0(d: &[f32], qs: &[[u8; 16]], y: &[Q8Block]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for i in 0..d.len() {
            let qx = _mm256_sub_epi8(nibbles(&qs[i]), _mm256_set1_epi8(8));
            let qy = _mm256_loadu_si256(y[i].qs.as_ptr() as *const __m256i);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d[i] * y[i].d), i8_dot(qx, qy), acc);
        }
        hsum(acc)
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_q8_0(d: &[f32], qs: &[[i8; 32]], y: &[Q8Block]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for i in 0..d.len() {
            let qx = _mm256_loadu_si256(qs[i].as_ptr() as *const __m256i);
            let qy = _mm256_loadu_si256(y[i].qs.as_ptr() as *const __m256i);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d[i] * y[i].d), i8_dot(qx, qy), acc);
        }
        hsum(acc)
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
                        Blocks::Q4_0 { d, qs } => dot_q4_0(&d[r.clone()], &qs[r], y, false),
                        Blocks::Q4_1 { d, m, qs } => dot_q4_1(&d[r.clone()], &m[r.clone()], &qs[r], y, false),
                        Blocks::Q8_0 { d, qs } => dot_q8_0(&d[r.clone()], &qs[r], y, false),
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
