//! GGML's Q4_K weights × activations rounded to Q8_K, as llama.cpp's x86
//! build computes them: the integer sums are exact, and the few float
//! operations (scales, the min correction, the horizontal sums) happen in
//! the same order, so the results match its AVX2 kernel to the bit.

use half::f16;

use crate::vec_ops::hsum8;

/// Values per K-quant super-block.
pub(crate) const QK_K: usize = 256;

/// GGUF's Q4_K block: eight 32-value sub-blocks with 6-bit scales and mins.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ4K {
    d: u16,
    dmin: u16,
    scales: [u8; 12],
    qs: [u8; 128],
}

/// 256 activations rounded to 8 bits, with sums of each 16.
#[derive(Clone, Copy)]
pub(crate) struct Q8KBlock {
    d: f32,
    qs: [i8; QK_K],
    bsums: [i16; 16],
}

impl BlockQ4K {
    pub(crate) fn parse(b: &[u8]) -> Self {
        Self { d: u16::from_le_bytes([b[0], b[1]]), dmin: u16::from_le_bytes([b[2], b[3]]), scales: b[4..16].try_into().unwrap(), qs: b[16..144].try_into().unwrap() }
    }

    pub(crate) const BYTES: usize = 144;

    /// The eight 6-bit scales, then the eight mins (llama.cpp's `utmp` dance).
    fn scales_and_mins(&self) -> [u8; 16] {
        let s = &self.scales;
        let mut u = [0u32; 4];
        for (i, w) in u.iter_mut().take(3).enumerate() {
            *w = u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
        }
        const K1: u32 = 0x3f3f_3f3f;
        const K2: u32 = 0x0f0f_0f0f;
        const K3: u32 = 0x0303_0303;
        u[3] = ((u[2] >> 4) & K2) | (((u[1] >> 6) & K3) << 4);
        let aux = u[1] & K1;
        u[1] = (u[2] & K2) | (((u[0] >> 6) & K3) << 4);
        u[2] = aux;
        u[0] &= K1;
        let mut out = [0u8; 16];
        for (i, w) in u.iter().enumerate() {
            out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Value `j` of the block as f32 (for embedding look-ups).
    pub(crate) fn dequantize(&self, out: &mut [f32]) {
        let sm = self.scales_and_mins();
        let (d, dmin) = (f16::from_bits(self.d).to_f32(), f16::from_bits(self.dmin).to_f32());
        for j in 0..4 {
            for half in 0..2 {
                let sub = 2 * j + half;
                let (sc, m) = (d * sm[sub] as f32, dmin * sm[8 + sub] as f32);
                for t in 0..32 {
                    let q = if half == 0 { self.qs[32 * j + t] & 0xF } else { self.qs[32 * j + t] >> 4 };
                    out[64 * j + 32 * half + t] = sc * q as f32 - m;
                }
            }
        }
    }
}

/// llama.cpp's `quantize_row_q8_K_ref`.
pub(crate) fn quantize(x: &[f32]) -> Vec<Q8KBlock> {
    x.chunks_exact(QK_K)
        .map(|x| {
            let (mut max, mut amax) = (0f32, 0f32);
            for &v in x {
                if v.abs() > amax {
                    amax = v.abs();
                    max = v;
                }
            }
            let mut b = Q8KBlock { d: 0.0, qs: [0; QK_K], bsums: [0; 16] };
            if amax == 0.0 {
                return b;
            }
            let iscale = -127.0 / max;
            for (q, &v) in b.qs.iter_mut().zip(x) {
                *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
            }
            for (s, c) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
                *s = c.iter().map(|&q| q as i16).sum();
            }
            b.d = 1.0 / iscale;
            b
        })
        .collect()
}

/// One weight row · one activation row.
pub(crate) fn dot(x: &[BlockQ4K], y: &[Q8KBlock], simd: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked by the caller at run time).
        return unsafe { dot_avx2(x, y) };
    }
    let _ = simd;
    let mut acc = [0f32; 8];
    let mut acc_m = [0f32; 4];
    for (x, y) in x.iter().zip(y) {
        let d = y.d * f16::from_bits(x.d).to_f32();
        let dmin = -y.d * f16::from_bits(x.dmin).to_f32();
        let sm = x.scales_and_mins();
        let q8s: [i32; 8] = std::array::from_fn(|k| y.bsums[2 * k] as i32 + y.bsums[2 * k + 1] as i32);
        for (l, a) in acc_m.iter_mut().enumerate() {
            let prod = sm[8 + 2 * l] as i32 * q8s[2 * l] + sm[8 + 2 * l + 1] as i32 * q8s[2 * l + 1];
            *a = dmin.mul_add(prod as f32, *a);
        }
        let mut sumi = [0i32; 8];
        for j in 0..4 {
            for (half, sc) in [(0, sm[2 * j] as i32), (1, sm[2 * j + 1] as i32)] {
                for (u, s) in sumi.iter_mut().enumerate() {
                    let mut p = 0;
                    for t in 4 * u..4 * u + 4 {
                        let q = if half == 0 { x.qs[32 * j + t] & 0xF } else { x.qs[32 * j + t] >> 4 };
                        p += q as i32 * y.qs[64 * j + 32 * half + t] as i32;
                    }
                    *s += sc * p;
                }
            }
        }
        for (a, s) in acc.iter_mut().zip(sumi) {
            *a = d.mul_add(s as f32, *a);
        }
    }
    hsum8(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2(x: &[BlockQ4K], y: &[Q8KBlock]) -> f32 {
    dot_rows_avx2::<1>(x, [y])[0]
}

/// One weight row against `R` activation rows: each block's nibbles and
/// scales are unpacked once for all of them (prefill); every product is
/// computed as `dot` computes it.
pub(crate) fn dot_rows<const R: usize>(x: &[BlockQ4K], y: [&[Q8KBlock]; R], simd: bool) -> [f32; R] {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked by the caller at run time).
        return unsafe { dot_rows_avx2::<R>(x, y) };
    }
    let _ = simd;
    std::array::from_fn(|a| dot(x, y[a], false))
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_rows_avx2<const R: usize>(x: &[BlockQ4K], y: [&[Q8KBlock]; R]) -> [f32; R] {
    use std::arch::x86_64::*;
    let m4 = _mm256_set1_epi8(0xF);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut acc_m = [_mm_setzero_ps(); R];
    let n = x.len();
    for a in 0..R {
        assert!(y[a].len() >= n);
    }
    for i in 0..n {
        let xb = &x[i];
        let (xd, xdmin) = (_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(xb.d as i32))), _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(xb.dmin as i32))));
        let sm = xb.scales_and_mins();
        let mins_and_scales = _mm256_cvtepu8_epi16(_mm_loadu_si128(sm.as_ptr() as *const __m128i));
        let mins = _mm256_extracti128_si256(mins_and_scales, 1);
        let sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
        let scales = _mm256_set_m128i(sc128, sc128);
        let mut q4 = [_mm256_setzero_si256(); 8];
        let mut sc = [_mm256_setzero_si256(); 8];
        for j in 0..4 {
            // Every 16-bit lane holds scale 2j (low nibbles) or 2j+1 (high).
            sc[2 * j] = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((((4 * j + 1) << 8) | (4 * j)) as i16));
            sc[2 * j + 1] = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((((4 * j + 3) << 8) | (4 * j + 2)) as i16));
            let bits = _mm256_loadu_si256(xb.qs.as_ptr().add(32 * j) as *const __m256i);
            q4[2 * j] = _mm256_and_si256(bits, m4);
            q4[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        }
        for a in 0..R {
            let yb = y[a].get_unchecked(i);
            let d = yb.d * xd;
            let dmin = -yb.d * xdmin;
            let q8sums = _mm256_loadu_si256(yb.bsums.as_ptr() as *const __m256i);
            let q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
            acc_m[a] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(mins, q8s)), acc_m[a]);
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let q8l = _mm256_loadu_si256(yb.qs.as_ptr().add(64 * j) as *const __m256i);
                let q8h = _mm256_loadu_si256(yb.qs.as_ptr().add(64 * j + 32) as *const __m256i);
                let p16l = _mm256_madd_epi16(sc[2 * j], _mm256_maddubs_epi16(q4[2 * j], q8l));
                let p16h = _mm256_madd_epi16(sc[2 * j + 1], _mm256_maddubs_epi16(q4[2 * j + 1], q8h));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
            }
            acc[a] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[a]);
        }
    }
    let mut out = [0f32; R];
    for a in 0..R {
        let mut m = acc_m[a];
        m = _mm_add_ps(m, _mm_movehl_ps(m, m));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc[a]);
        out[a] = hsum8(lanes) + _mm_cvtss_f32(m);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    #[test]
    fn portable_and_avx2_agree_bit_for_bit_and_track_the_dequantized_product() {
        let (n, k) = (5, 512);
        let mut s = 7u64;
        let mut rnd = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
        let x: Vec<f32> = (0..k).map(|_| rnd()).collect();
        let q = QTensor::quantize(&Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap(), GgmlDType::Q4K).unwrap();
        let blocks: Vec<BlockQ4K> = q.data().unwrap().chunks_exact(BlockQ4K::BYTES).map(BlockQ4K::parse).collect();
        let deq: Vec<f32> = q.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let acts = quantize(&x);
        let simd = crate::quant_matmul::has_avx2_fma();
        for row in 0..n {
            let b = &blocks[row * 2..row * 2 + 2];
            let portable = dot(b, &acts, false);
            assert_eq!(portable.to_bits(), dot(b, &acts, simd).to_bits(), "row {row}");
            let tiled = dot_rows::<3>(b, [&acts, &acts, &acts], simd);
            assert!(tiled.iter().all(|t| t.to_bits() == portable.to_bits()), "tiled row {row}");
            let exact: f32 = deq[row * k..(row + 1) * k].iter().zip(&x).map(|(a, b)| a * b).sum();
            assert!((portable - exact).abs() < 0.1, "row {row}: {portable} vs {exact}");
            let mut row_values = vec![0f32; k];
            b.iter().zip(row_values.chunks_exact_mut(QK_K)).for_each(|(b, o)| b.dequantize(o));
            assert_eq!(row_values, deq[row * k..(row + 1) * k], "dequantize row {row}");
        }
    }
}
