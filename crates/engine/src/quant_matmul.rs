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

use candle_core::quantized::{GgmlDType, QTensor};
use half::f16;
use rayon::prelude::*;

/// Output columns handed to one worker at a time.
const COLUMNS_PER_TASK: usize = 64;

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
struct Q8Block {
    d: f32,
    /// `d ×` the sum of `qs`, as Q8_1 stores it (Q4_1 needs it).
    s: f32,
    qs: [i8; 32],
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

    /// `out[m × n] = x[m × k] · selfᵀ`.
    pub fn matmul(&self, x: &[f32], out: &mut [f32]) {
        let (n, k) = (self.n, self.k);
        let m = x.len() / k;
        assert_eq!(x.len(), m * k);
        assert_eq!(out.len(), m * n);
        let kb = k / 32;
        let with_sum = matches!(self.blocks, Blocks::Q4_1 { .. });
        let acts: Vec<Q8Block> = x.chunks_exact(32).map(|c| quantize_block(c, with_sum)).collect();
        let avx2 = has_avx2_fma();
        let dot = |col: usize, row: usize| -> f32 {
            let y = &acts[row * kb..(row + 1) * kb];
            let r = col * kb..(col + 1) * kb;
            match &self.blocks {
                Blocks::Q4_0 { d, qs } => dot_q4_0(&d[r.clone()], &qs[r], y, avx2),
                Blocks::Q4_1 { d, m, qs } => dot_q4_1(&d[r.clone()], &m[r.clone()], &qs[r], y, avx2),
                Blocks::Q8_0 { d, qs } => dot_q8_0(&d[r.clone()], &qs[r], y, avx2),
            }
        };
        if m == 1 {
            out.par_chunks_mut(COLUMNS_PER_TASK).enumerate().for_each(|(t, chunk)| {
                for (i, o) in chunk.iter_mut().enumerate() {
                    *o = dot(t * COLUMNS_PER_TASK + i, 0);
                }
            });
        } else {
            // Column-major work so each worker reuses its weight rows across all
            // activation rows while they are in cache.
            let mut out_t = vec![0f32; n * m];
            out_t.par_chunks_mut(COLUMNS_PER_TASK * m).enumerate().for_each(|(t, chunk)| {
                for (i, col_out) in chunk.chunks_exact_mut(m).enumerate() {
                    let col = t * COLUMNS_PER_TASK + i;
                    for (row, o) in col_out.iter_mut().enumerate() {
                        *o = dot(col, row);
                    }
                }
            });
            for row in 0..m {
                for col in 0..n {
                    out[row * n + col] = out_t[col * m + row];
                }
            }
        }
    }
}

fn has_avx2_fma() -> bool {
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

fn quantize_block(x: &[f32], with_sum: bool) -> Q8Block {
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
    let s = if with_sum { f16::from_f32(d * sum as f32).to_f32() } else { 0.0 };
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
            let (n, k, m) = (70, 256, 3);
            let w = Tensor::from_vec(random(n * k, 1), (n, k), &Device::Cpu).unwrap();
            let q = QTensor::quantize(&w, dtype).unwrap();
            let mat = QuantMatrix::from_qtensor(&q).unwrap();
            let x = random(m * k, 2);
            let mut out = vec![0f32; m * n];
            mat.matmul(&x, &mut out);
            let kb = k / 32;
            let acts: Vec<Q8Block> = x.chunks_exact(32).map(|c| quantize_block(c, dtype == GgmlDType::Q4_1)).collect();
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
