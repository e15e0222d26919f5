//! Attention over the f16 KV cache, in llama.cpp's orders.
//!
//! llama.cpp (flash attention off, its default in llama-cpp-python) keeps
//! keys and values in f16 and multiplies them as `ggml_mul_mat` multiplies
//! an f16 matrix: the other operand is rounded to f16 first (the queries for
//! the scores, the softmax probabilities for the values), and the products
//! are summed in f32 — by `ggml_vec_dot_f16` when one row is decoded (four
//! eight-lane accumulators over 32-value steps) and by tinyBLAS when a batch
//! of rows is prefilled (one eight-lane accumulator, then `hsum`). The
//! softmax is `ggml_v_expf`, summed eight at a time in f64. Matching these
//! keeps Hearth's greedy tokens equal to llama.cpp's on a long history.

use half::f16;

use super::vec_ops::{exp_sum_impl, hsum8};

/// Which of llama.cpp's matmul paths an attention step follows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// One query row (a decode step): `ggml_vec_dot_f16`.
    Decode,
    /// Several query rows (a prefill): tinyBLAS's f16 tiles.
    Prefill,
}

impl Order {
    /// Accumulator lanes of the weighted sum of values, by position.
    fn value_lanes(self) -> usize {
        match self {
            Order::Decode => 32,
            Order::Prefill => 8,
        }
    }
}

/// Attention for a group of queries that share one KV head (the query
/// heads of a grouped-query head, over a few rows): query `g` sees
/// positions `bounds[g].0..=bounds[g].1` of `keys`/`values` (`[pos, hd]`,
/// f16). Each key and value is loaded once for the whole group. The
/// queries must already be rounded to f16 (as llama.cpp rounds them).
/// `scores` and `acc` are scratch.
#[allow(clippy::too_many_arguments)]
pub fn attend_group(outs: &mut [&mut [f32]], queries: &[&[f32]], bounds: &[(usize, usize)], keys: &[f16], values: &[f16], scale: f32, order: Order, scores: &mut [Vec<f32>], acc: &mut Vec<f32>) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn avx2(outs: &mut [&mut [f32]], queries: &[&[f32]], bounds: &[(usize, usize)], keys: &[f16], values: &[f16], scale: f32, order: Order, scores: &mut [Vec<f32>], acc: &mut Vec<f32>) {
            attend_group_impl::<true>(outs, queries, bounds, keys, values, scale, order, scores, acc)
        }
        if super::isa::has_avx2_fma() {
            // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time).
            return unsafe { avx2(outs, queries, bounds, keys, values, scale, order, scores, acc) };
        }
    }
    attend_group_impl::<false>(outs, queries, bounds, keys, values, scale, order, scores, acc)
}

/// Rounds every value to f16 and back, as llama.cpp rounds the operand of a
/// matmul with an f16 matrix.
pub fn round_to_f16(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = f16::from_f32(*v).to_f32();
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend_group_impl<const AVX2: bool>(outs: &mut [&mut [f32]], queries: &[&[f32]], bounds: &[(usize, usize)], keys: &[f16], values: &[f16], scale: f32, order: Order, scores: &mut [Vec<f32>], acc: &mut Vec<f32>) {
    let hd = queries[0].len();
    let g = queries.len();
    let first = bounds.iter().map(|b| b.0).min().unwrap_or(0);
    let last = bounds.iter().map(|b| b.1).max().unwrap_or(0);
    for (s, &(lo, hi)) in scores.iter_mut().zip(bounds) {
        s.clear();
        s.resize(hi + 1 - lo, 0.0);
    }
    // tinyBLAS takes a matmul only when its inner size is a multiple of 8.
    let tiled = order == Order::Prefill && hd % 8 == 0;
    for j in first..=last {
        let k = &keys[j * hd..(j + 1) * hd];
        for q in 0..g {
            let (lo, hi) = bounds[q];
            if (lo..=hi).contains(&j) {
                scores[q][j - lo] = dot::<AVX2>(k, queries[q], tiled) * scale;
            }
        }
    }
    let mut inv = [0f32; 64];
    assert!(g <= inv.len());
    for q in 0..g {
        let max = scores[q].iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
        inv[q] = (1.0 / exp_sum_impl(&mut scores[q], max)) as f32;
        for p in scores[q].iter_mut() {
            *p = f16::from_f32(*p * inv[q]).to_f32();
        }
    }
    let lanes = order.value_lanes();
    acc.clear();
    acc.resize(g * lanes * hd, 0.0);
    for j in first..=last {
        let v = &values[j * hd..(j + 1) * hd];
        // llama.cpp's rows are padded to whole steps, so a position's lane
        // is fixed by its index.
        let lane = j % lanes;
        for q in 0..g {
            let (lo, hi) = bounds[q];
            if (lo..=hi).contains(&j) {
                let at = (q * lanes + lane) * hd;
                axpy::<AVX2>(&mut acc[at..at + hd], scores[q][j - lo], v);
            }
        }
    }
    for (q, out) in outs.iter_mut().enumerate() {
        let a = |lane: usize, d: usize| acc[(q * lanes + lane) * hd + d];
        for (d, o) in out.iter_mut().enumerate() {
            *o = match order {
                // GGML_F32x8_REDUCE of the four accumulators.
                Order::Decode => {
                    let v: [f32; 8] = std::array::from_fn(|l| (a(l, d) + a(16 + l, d)) + (a(8 + l, d) + a(24 + l, d)));
                    let t: [f32; 4] = std::array::from_fn(|l| v[l] + v[l + 4]);
                    (t[0] + t[1]) + (t[2] + t[3])
                }
                Order::Prefill => hsum8(std::array::from_fn(|l| a(l, d))),
            };
        }
    }
}

/// `Σ k[i]·q[i]`: tinyBLAS's order (`tiled`) or `ggml_vec_dot_f16`'s,
/// whose leftovers past the last 32-value step are summed in f64.
#[inline(always)]
fn dot<const AVX2: bool>(k: &[f16], q: &[f32], tiled: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: only the AVX2 build of the caller passes AVX2 = true.
        return unsafe { dot_avx2(k, q, tiled) };
    }
    let n = k.len().min(q.len());
    if tiled {
        let mut acc = [0f32; 8];
        for i in (0..n).step_by(8) {
            for l in 0..8 {
                acc[l] = k[i + l].to_f32().mul_add(q[i + l], acc[l]);
            }
        }
        return hsum8(acc);
    }
    let wide = n / 32 * 32;
    let mut acc = [[0f32; 8]; 4];
    for i in (0..wide).step_by(32) {
        for (j, acc) in acc.iter_mut().enumerate() {
            for l in 0..8 {
                let at = i + 8 * j + l;
                acc[l] = k[at].to_f32().mul_add(q[at], acc[l]);
            }
        }
    }
    let v: [f32; 8] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
    let t: [f32; 4] = std::array::from_fn(|l| v[l] + v[l + 4]);
    let mut s = ((t[0] + t[1]) + (t[2] + t[3])) as f64;
    for i in wide..n {
        s += (k[i].to_f32() * q[i]) as f64;
    }
    s as f32
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2(k: &[f16], q: &[f32], tiled: bool) -> f32 {
    use std::arch::x86_64::*;
    let n = k.len().min(q.len());
    let (pk, pq) = (k.as_ptr() as *const __m128i, q.as_ptr());
    let load_k = |i: usize| _mm256_cvtph_ps(_mm_loadu_si128(pk.cast::<u16>().add(i).cast()));
    if tiled {
        let mut acc = _mm256_setzero_ps();
        for i in (0..n).step_by(8) {
            acc = _mm256_fmadd_ps(load_k(i), _mm256_loadu_ps(pq.add(i)), acc);
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        return hsum8(lanes);
    }
    let wide = n / 32 * 32;
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in (0..wide).step_by(32) {
        for (j, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(load_k(i + 8 * j), _mm256_loadu_ps(pq.add(i + 8 * j)), *acc);
        }
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    let t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let t = _mm_hadd_ps(t, t);
    let mut s = _mm_cvtss_f32(_mm_hadd_ps(t, t)) as f64;
    for i in wide..n {
        s += (k[i].to_f32() * q[i]) as f64;
    }
    s as f32
}

/// `y += p · v`, one fused multiply-add per value.
#[inline(always)]
fn axpy<const AVX2: bool>(y: &mut [f32], p: f32, v: &[f16]) {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: only the AVX2 build of the caller passes AVX2 = true.
        return unsafe { axpy_avx2(y, p, v) };
    }
    for (y, v) in y.iter_mut().zip(v) {
        *y = v.to_f32().mul_add(p, *y);
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn axpy_avx2(y: &mut [f32], p: f32, v: &[f16]) {
    use std::arch::x86_64::*;
    let n = y.len().min(v.len());
    let wide = n / 8 * 8;
    let (py, pv) = (y.as_mut_ptr(), v.as_ptr().cast::<u16>());
    let pb = _mm256_set1_ps(p);
    for i in (0..wide).step_by(8) {
        let x = _mm256_cvtph_ps(_mm_loadu_si128(pv.add(i).cast()));
        _mm256_storeu_ps(py.add(i), _mm256_fmadd_ps(x, pb, _mm256_loadu_ps(py.add(i))));
    }
    for i in wide..n {
        y[i] = v[i].to_f32().mul_add(p, y[i]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32) - 0.5).collect()
    }

    fn run<const AVX2: bool>(hd: usize, positions: usize, order: Order) -> Vec<f32> {
        let keys: Vec<f16> = data(positions * hd, 1).into_iter().map(f16::from_f32).collect();
        let values: Vec<f16> = data(positions * hd, 2).into_iter().map(f16::from_f32).collect();
        let mut q = data(2 * hd, 3);
        round_to_f16(&mut q);
        let mut out = vec![0f32; 2 * hd];
        let (a, b) = out.split_at_mut(hd);
        let mut outs = [a, b];
        let bounds = [(0, positions - 1), (positions / 3, positions - 2)];
        let mut scores = vec![Vec::new(); 2];
        attend_group_impl::<AVX2>(&mut outs, &[&q[..hd], &q[hd..]], &bounds, &keys, &values, 0.125, order, &mut scores, &mut Vec::new());
        // Against f64 attention over the same f16 inputs.
        for (g, &(lo, hi)) in bounds.iter().enumerate() {
            let s: Vec<f64> = (lo..=hi).map(|j| (0..hd).map(|d| keys[j * hd + d].to_f64() * q[g * hd + d] as f64).sum::<f64>() * 0.125).collect();
            let max = s.iter().cloned().fold(f64::MIN, f64::max);
            let total: f64 = s.iter().map(|x| (x - max).exp()).sum();
            for d in 0..hd {
                let want: f64 = (lo..=hi).map(|j| (s[j - lo] - max).exp() / total * values[j * hd + d].to_f64()).sum();
                assert!((out[g * hd + d] as f64 - want).abs() < 2e-3, "head {g} dim {d}: {} vs {want}", out[g * hd + d]);
            }
        }
        out
    }

    #[test]
    fn attention_is_softmax_weighted_values_and_both_builds_agree_bit_for_bit() {
        for (hd, positions) in [(64, 70), (40, 33), (256, 9)] {
            for order in [Order::Decode, Order::Prefill] {
                let portable = run::<false>(hd, positions, order);
                #[cfg(target_arch = "x86_64")]
                if super::super::isa::has_avx2_fma() {
                    let vector = run::<true>(hd, positions, order);
                    assert!(portable.iter().zip(&vector).all(|(a, b)| a.to_bits() == b.to_bits()), "hd {hd}: AVX2 and portable differ");
                }
            }
        }
    }
}
