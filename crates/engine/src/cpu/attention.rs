//! Attention's kernels over the f16 KV cache, in llama.cpp's orders.
//!
//! llama.cpp (flash attention off, its default in llama-cpp-python) keeps
//! keys and values in f16 and multiplies them as `ggml_mul_mat` multiplies
//! an f16 matrix: the other operand is rounded to f16 first (the queries for
//! the scores, the softmax probabilities for the values), and the products
//! are summed in f32 — by `ggml_vec_dot_f16` when one row is decoded (four
//! eight-lane accumulators over 32-value steps) and by tinyBLAS when a batch
//! of rows is prefilled (one eight-lane accumulator, then `hsum`). Its
//! values are stored transposed, so the weighted sum of values is a dot
//! product along positions, one per output dimension. The softmax is
//! `ggml_v_expf`, summed eight at a time in f64.
//!
//! Each kernel is written twice, with AVX2 registers and portably, doing the
//! same floating-point operations in the same order (tested bit for bit).
//! The AVX2 forms keep a tile of accumulators in registers: several queries
//! share each key or value they load.

// Lane loops index several arrays by the same lane, as the C they follow.
#![allow(clippy::needless_range_loop)]

use std::ops::Range;

use half::f16;

use super::vec_ops::{exp_sum_impl, hsum8};

/// Which of llama.cpp's matmul paths an attention step follows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Order {
    /// One query row (a decode step): `ggml_vec_dot_f16`.
    Decode,
    /// Several query rows (a prefill): tinyBLAS's f16 tiles.
    Prefill,
}

impl Order {
    /// Positions per accumulator step of the weighted sum of values; a
    /// position's lane is its index modulo this, since llama.cpp's rows start
    /// at position 0 and are padded to whole steps.
    pub fn lanes(self) -> usize {
        match self {
            Order::Decode => 32,
            Order::Prefill => 8,
        }
    }
}

/// Rounds every value to f16 and back, as llama.cpp rounds the operand of a
/// matmul with an f16 matrix.
pub fn round_to_f16(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::isa::has_avx2_fma() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time).
        return unsafe { x86::round_to_f16(x) };
    }
    for v in x.iter_mut() {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// `out[q · stride + j - positions.start] = scale · keys[j] · queries[q]`
/// for every position `j` (keys `[pos, hd]`).
pub fn scores(out: &mut [f32], stride: usize, queries: &[&[f32]], keys: &[f16], positions: Range<usize>, scale: f32, order: Order) {
    // tinyBLAS takes a matmul only when its inner size is a multiple of 8.
    let tiled = order == Order::Prefill && queries[0].len().is_multiple_of(8);
    #[cfg(target_arch = "x86_64")]
    if super::isa::has_avx2_fma() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time).
        return unsafe { x86::scores(out, stride, queries, keys, positions, scale, tiled) };
    }
    portable::scores(out, stride, queries, keys, positions, scale, tiled)
}

/// Turns each `row` of scores into f16-rounded probabilities in place:
/// `ggml_v_expf` of the score less the row's maximum, times the inverse of
/// their sum (formed eight at a time in f64, so rows must start at a
/// multiple of 8 positions). Masked entries are −∞ and come out 0.
pub fn softmax(row: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::isa::has_avx2_fma() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time).
        return unsafe { x86::softmax(row) };
    }
    softmax_impl(row)
}

/// `softmax`'s body, inlined into each build (its `ggml_v_expf` is fused
/// multiply-adds, a libm call each where FMA is not enabled).
#[inline(always)]
fn softmax_impl(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    let inv = (1.0 / exp_sum_impl(row, max)) as f32;
    for p in row.iter_mut() {
        *p *= inv;
    }
    round_to_f16(row);
}

/// `outs[q][d - dims.start] = Σ_j probs[q][j - base] · values_t[d · cap + j]`
/// over positions `base..base + probs[q].len()` (the same length for every
/// query), for each dimension `d` of `dims` (values transposed, `[hd, cap]`).
/// `base` must be a multiple of `order.lanes()`.
pub fn weighted_values(outs: &mut [&mut [f32]], probs: &[&[f32]], values_t: &[f16], cap: usize, dims: Range<usize>, base: usize, order: Order) {
    debug_assert_eq!(base % order.lanes(), 0);
    #[cfg(target_arch = "x86_64")]
    if super::isa::has_avx2_fma() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time).
        return unsafe { x86::weighted_values(outs, probs, values_t, cap, dims, base, order) };
    }
    portable::weighted_values(outs, probs, values_t, cap, dims, base, order)
}

/// `GGML_F32x8_REDUCE` of four eight-lane accumulators.
#[inline(always)]
fn reduce_four(acc: &[[f32; 8]; 4]) -> f32 {
    let v: [f32; 8] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
    let t: [f32; 4] = std::array::from_fn(|l| v[l] + v[l + 4]);
    (t[0] + t[1]) + (t[2] + t[3])
}

/// The kernels one lane at a time: the reference for the AVX2 forms, and
/// what other CPUs run.
mod portable {
    use super::*;

    pub fn scores(out: &mut [f32], stride: usize, queries: &[&[f32]], keys: &[f16], positions: Range<usize>, scale: f32, tiled: bool) {
        let hd = queries[0].len();
        for j in positions.clone() {
            let k = &keys[j * hd..(j + 1) * hd];
            for (q, query) in queries.iter().enumerate() {
                out[q * stride + j - positions.start] = dot(k, query, tiled) * scale;
            }
        }
    }

    /// tinyBLAS's order (`tiled`) or `ggml_vec_dot_f16`'s, whose leftovers
    /// past the last 32-value step are summed in f64.
    pub fn dot(k: &[f16], q: &[f32], tiled: bool) -> f32 {
        let n = q.len();
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
            for (a, acc) in acc.iter_mut().enumerate() {
                for l in 0..8 {
                    let at = i + 8 * a + l;
                    acc[l] = k[at].to_f32().mul_add(q[at], acc[l]);
                }
            }
        }
        leftovers(reduce_four(&acc), &k[wide..n], &q[wide..])
    }

    pub fn weighted_values(outs: &mut [&mut [f32]], probs: &[&[f32]], values_t: &[f16], cap: usize, dims: Range<usize>, base: usize, order: Order) {
        let n = probs[0].len();
        for d in dims.clone() {
            let row = &values_t[d * cap + base..d * cap + base + n];
            for (out, p) in outs.iter_mut().zip(probs) {
                out[d - dims.start] = value_dot(row, p, order);
            }
        }
    }

    /// One output of the weighted sum: a position's lane is its offset
    /// from `base` modulo the order's lanes.
    pub fn value_dot(v: &[f16], p: &[f32], order: Order) -> f32 {
        match order {
            Order::Decode => {
                let mut acc = [[0f32; 8]; 4];
                for (i, (v, p)) in v.iter().zip(p).enumerate() {
                    let (a, l) = ((i % 32) / 8, i % 8);
                    acc[a][l] = v.to_f32().mul_add(*p, acc[a][l]);
                }
                reduce_four(&acc)
            }
            Order::Prefill => {
                let mut acc = [0f32; 8];
                for (i, (v, p)) in v.iter().zip(p).enumerate() {
                    acc[i % 8] = v.to_f32().mul_add(*p, acc[i % 8]);
                }
                hsum8(acc)
            }
        }
    }
}

/// `ggml_vec_dot_f16`'s tail: each product in f32, added in f64.
#[inline(always)]
fn leftovers(sum: f32, k: &[f16], q: &[f32]) -> f32 {
    let mut s = sum as f64;
    for (k, q) in k.iter().zip(q) {
        s += (k.to_f32() * q) as f64;
    }
    s as f32
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::*;

    /// Queries per register tile: with four accumulators each (decode) or
    /// four positions or dimensions each (prefill), 12 of the 16 registers.
    const TILE_Q: usize = 3;

    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }

    /// tinyBLAS's `hsum`: (lo + hi), then (r0 + r2) + (r1 + r3).
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let x = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
        let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
        _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)))
    }

    /// `GGML_F32x8_REDUCE`.
    #[inline(always)]
    unsafe fn reduce(acc: [__m256; 4]) -> f32 {
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
        let t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let t = _mm_hadd_ps(t, t);
        _mm_cvtss_f32(_mm_hadd_ps(t, t))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn round_to_f16(x: &mut [f32]) {
        let wide = x.len() / 8 * 8;
        let p = x.as_mut_ptr();
        for i in (0..wide).step_by(8) {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(p.add(i)));
            _mm256_storeu_ps(p.add(i), _mm256_cvtph_ps(h));
        }
        for v in x[wide..].iter_mut() {
            *v = f16::from_f32(*v).to_f32();
        }
    }

    /// `softmax_impl` eight lanes at a time, with `ggml_v_expf` in AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn softmax(row: &mut [f32]) {
        let n = row.len();
        let wide = n / 8 * 8;
        let p = row.as_mut_ptr();
        let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
        for i in (0..wide).step_by(8) {
            m = _mm256_max_ps(m, _mm256_loadu_ps(p.add(i)));
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), m);
        let max = lanes.iter().chain(&row[wide..]).fold(f32::NEG_INFINITY, |m, &s| m.max(s));
        let mut sum = 0f64;
        let vmax = _mm256_set1_ps(max);
        for i in (0..wide).step_by(8) {
            let e = expf(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), vmax));
            _mm256_storeu_ps(p.add(i), e);
            sum += hsum(e) as f64;
        }
        if wide < n {
            let mut v = [0f32; 8];
            for (o, x) in v.iter_mut().zip(row[wide..].iter_mut()) {
                *x = super::super::vec_ops::expf_lane(*x - max);
                *o = *x;
            }
            sum += hsum8(v) as f64;
        }
        let inv = _mm256_set1_ps((1.0 / sum) as f32);
        for i in (0..wide).step_by(8) {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(_mm256_loadu_ps(p.add(i)), inv));
            _mm256_storeu_ps(p.add(i), _mm256_cvtph_ps(h));
        }
        let inv = (1.0 / sum) as f32;
        for x in row[wide..].iter_mut() {
            *x = f16::from_f32(*x * inv).to_f32();
        }
    }

    /// `ggml_v_expf`, AVX2 form: `expf_lane` on eight lanes.
    #[inline(always)]
    unsafe fn expf(x: __m256) -> __m256 {
        let f = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
        let r = f(0x4b40_0000);
        let z = _mm256_fmadd_ps(x, f(0x3fb8_aa3b), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(n, f(0x35bf_be8e), _mm256_fnmadd_ps(n, f(0x3f31_7200), x));
        let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
        let k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0))));
        let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
        let c = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(126.0));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(_mm256_fmadd_ps(f(0x3c07_2010), b, f(0x3d2b_9f17)), u, _mm256_fmadd_ps(f(0x3e2a_af33), b, f(0x3eff_fedb))),
            u,
            _mm256_mul_ps(f(0x3f7f_fff6), b),
        );
        if _mm256_movemask_ps(c) == 0 {
            return _mm256_fmadd_ps(j, k, k);
        }
        let g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())), _mm256_set1_epi32(0x8200_0000u32 as i32));
        let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
        let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        let d = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
        _mm256_or_ps(
            _mm256_and_ps(d, _mm256_mul_ps(s1, s1)),
            _mm256_andnot_ps(d, _mm256_or_ps(_mm256_and_ps(c, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)), _mm256_andnot_ps(c, _mm256_fmadd_ps(j, k, k)))),
        )
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn scores(out: &mut [f32], stride: usize, queries: &[&[f32]], keys: &[f16], positions: Range<usize>, scale: f32, tiled: bool) {
        let hd = queries[0].len();
        for (c, chunk) in queries.chunks(TILE_Q).enumerate() {
            let out = &mut out[c * TILE_Q * stride..];
            match (chunk.len(), tiled) {
                (3, true) => scores_tiled::<3>(out, stride, chunk, keys, hd, positions.clone(), scale),
                (2, true) => scores_tiled::<2>(out, stride, chunk, keys, hd, positions.clone(), scale),
                (_, true) => scores_tiled::<1>(out, stride, chunk, keys, hd, positions.clone(), scale),
                (3, false) => scores_dot::<3>(out, stride, chunk, keys, hd, positions.clone(), scale),
                (2, false) => scores_dot::<2>(out, stride, chunk, keys, hd, positions.clone(), scale),
                (_, false) => scores_dot::<1>(out, stride, chunk, keys, hd, positions.clone(), scale),
            }
        }
    }

    /// tinyBLAS's order, four positions × `Q` queries at a time.
    #[inline(always)]
    unsafe fn scores_tiled<const Q: usize>(out: &mut [f32], stride: usize, qs: &[&[f32]], keys: &[f16], hd: usize, positions: Range<usize>, scale: f32) {
        let mut j = positions.start;
        while j + 4 <= positions.end {
            tile::<Q, 4>(out, stride, qs, keys, hd, j, positions.start, scale);
            j += 4;
        }
        while j < positions.end {
            tile::<Q, 1>(out, stride, qs, keys, hd, j, positions.start, scale);
            j += 1;
        }
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const Q: usize, const P: usize>(out: &mut [f32], stride: usize, qs: &[&[f32]], keys: &[f16], hd: usize, j: usize, start: usize, scale: f32) {
        let kp = keys.as_ptr().add(j * hd);
        let mut acc = [[_mm256_setzero_ps(); P]; Q];
        for s in (0..hd).step_by(8) {
            let k: [__m256; P] = std::array::from_fn(|p| load_f16(kp.add(p * hd + s)));
            for q in 0..Q {
                let qv = _mm256_loadu_ps(qs[q].as_ptr().add(s));
                for p in 0..P {
                    acc[q][p] = _mm256_fmadd_ps(k[p], qv, acc[q][p]);
                }
            }
        }
        for q in 0..Q {
            let at = q * stride + j - start;
            if P == 4 {
                _mm_storeu_ps(out[at..at + 4].as_mut_ptr(), _mm_mul_ps(hsum4([acc[q][0], acc[q][1], acc[q][2], acc[q][3]]), _mm_set1_ps(scale)));
            } else {
                for p in 0..P {
                    out[at + p] = hsum(acc[q][p]) * scale;
                }
            }
        }
    }

    /// `hsum` of four accumulators at once: the same additions, with the
    /// four sums in the lanes of one register.
    #[inline(always)]
    unsafe fn hsum4(v: [__m256; 4]) -> __m128 {
        let x: [__m128; 4] = std::array::from_fn(|i| _mm_add_ps(_mm256_extractf128_ps(v[i], 1), _mm256_castps256_ps128(v[i])));
        // [x0 + x2, x1 + x3] of each, interleaved: ab = [a02, b02, a13, b13].
        let ab = _mm_add_ps(_mm_unpacklo_ps(x[0], x[1]), _mm_unpackhi_ps(x[0], x[1]));
        let cd = _mm_add_ps(_mm_unpacklo_ps(x[2], x[3]), _mm_unpackhi_ps(x[2], x[3]));
        _mm_add_ps(_mm_movelh_ps(ab, cd), _mm_movehl_ps(cd, ab))
    }

    /// `ggml_vec_dot_f16`'s order, one position × `Q` queries at a time.
    #[inline(always)]
    unsafe fn scores_dot<const Q: usize>(out: &mut [f32], stride: usize, qs: &[&[f32]], keys: &[f16], hd: usize, positions: Range<usize>, scale: f32) {
        let wide = hd / 32 * 32;
        for j in positions.clone() {
            let kp = keys.as_ptr().add(j * hd);
            let mut acc = [[_mm256_setzero_ps(); 4]; Q];
            for s in (0..wide).step_by(32) {
                for a in 0..4 {
                    let k = load_f16(kp.add(s + 8 * a));
                    for q in 0..Q {
                        acc[q][a] = _mm256_fmadd_ps(k, _mm256_loadu_ps(qs[q].as_ptr().add(s + 8 * a)), acc[q][a]);
                    }
                }
            }
            for q in 0..Q {
                let sum = leftovers(reduce(acc[q]), &keys[j * hd + wide..(j + 1) * hd], &qs[q][wide..]);
                out[q * stride + j - positions.start] = sum * scale;
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn weighted_values(outs: &mut [&mut [f32]], probs: &[&[f32]], values_t: &[f16], cap: usize, dims: Range<usize>, base: usize, order: Order) {
        for (c, chunk) in probs.chunks(TILE_Q).enumerate() {
            let outs = &mut outs[c * TILE_Q..c * TILE_Q + chunk.len()];
            match (chunk.len(), order) {
                (3, Order::Prefill) => values_tiled::<3>(outs, chunk, values_t, cap, dims.clone(), base),
                (2, Order::Prefill) => values_tiled::<2>(outs, chunk, values_t, cap, dims.clone(), base),
                (_, Order::Prefill) => values_tiled::<1>(outs, chunk, values_t, cap, dims.clone(), base),
                (3, Order::Decode) => values_dot::<3>(outs, chunk, values_t, cap, dims.clone(), base),
                (2, Order::Decode) => values_dot::<2>(outs, chunk, values_t, cap, dims.clone(), base),
                (_, Order::Decode) => values_dot::<1>(outs, chunk, values_t, cap, dims.clone(), base),
            }
        }
    }

    /// tinyBLAS's order, four dimensions × `Q` queries at a time.
    #[inline(always)]
    unsafe fn values_tiled<const Q: usize>(outs: &mut [&mut [f32]], probs: &[&[f32]], values_t: &[f16], cap: usize, dims: Range<usize>, base: usize) {
        let mut d = dims.start;
        while d + 4 <= dims.end {
            values_tile::<Q, 4>(outs, probs, values_t, cap, d, dims.start, base);
            d += 4;
        }
        while d < dims.end {
            values_tile::<Q, 1>(outs, probs, values_t, cap, d, dims.start, base);
            d += 1;
        }
    }

    #[inline(always)]
    unsafe fn values_tile<const Q: usize, const D: usize>(outs: &mut [&mut [f32]], probs: &[&[f32]], values_t: &[f16], cap: usize, d: usize, d0: usize, base: usize) {
        let n = probs[0].len();
        let wide = n / 8 * 8;
        let vp = values_t.as_ptr().add(d * cap + base);
        let mut acc = [[_mm256_setzero_ps(); D]; Q];
        for i in (0..wide).step_by(8) {
            let v: [__m256; D] = std::array::from_fn(|r| load_f16(vp.add(r * cap + i)));
            for q in 0..Q {
                let p = _mm256_loadu_ps(probs[q].as_ptr().add(i));
                for r in 0..D {
                    acc[q][r] = _mm256_fmadd_ps(v[r], p, acc[q][r]);
                }
            }
        }
        for q in 0..Q {
            for r in 0..D {
                let mut lanes = [0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), acc[q][r]);
                let row = &values_t[(d + r) * cap + base..];
                for i in wide..n {
                    lanes[i % 8] = row[i].to_f32().mul_add(probs[q][i], lanes[i % 8]);
                }
                outs[q][d + r - d0] = hsum8(lanes);
            }
        }
    }

    /// `ggml_vec_dot_f16`'s order, one dimension × `Q` queries at a time.
    #[inline(always)]
    unsafe fn values_dot<const Q: usize>(outs: &mut [&mut [f32]], probs: &[&[f32]], values_t: &[f16], cap: usize, dims: Range<usize>, base: usize) {
        let n = probs[0].len();
        let wide = n / 32 * 32;
        for d in dims.clone() {
            let vp = values_t.as_ptr().add(d * cap + base);
            let mut acc = [[_mm256_setzero_ps(); 4]; Q];
            for i in (0..wide).step_by(32) {
                for a in 0..4 {
                    let v = load_f16(vp.add(i + 8 * a));
                    for q in 0..Q {
                        acc[q][a] = _mm256_fmadd_ps(v, _mm256_loadu_ps(probs[q].as_ptr().add(i + 8 * a)), acc[q][a]);
                    }
                }
            }
            let row = &values_t[d * cap + base..];
            for q in 0..Q {
                let sum = if wide == n {
                    reduce(acc[q])
                } else {
                    let mut lanes = [[0f32; 8]; 4];
                    for (a, l) in lanes.iter_mut().enumerate() {
                        _mm256_storeu_ps(l.as_mut_ptr(), acc[q][a]);
                    }
                    for i in wide..n {
                        let (a, l) = ((i % 32) / 8, i % 8);
                        lanes[a][l] = row[i].to_f32().mul_add(probs[q][i], lanes[a][l]);
                    }
                    reduce_four(&lanes)
                };
                outs[q][d - dims.start] = sum;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32) - 0.5).collect()
    }

    /// Scores, softmax and weighted values for `g` queries over `n`
    /// positions, by the dispatched kernels or the portable ones.
    fn attend(hd: usize, n: usize, g: usize, order: Order, portable_only: bool) -> Vec<f32> {
        let cap = n + 5;
        let keys: Vec<f16> = data(n * hd, 1).into_iter().map(|x| f16::from_f32(4.0 * x)).collect();
        let values_t: Vec<f16> = data(hd * cap, 2).into_iter().map(f16::from_f32).collect();
        let mut q = data(g * hd, 3);
        round_to_f16(&mut q);
        let queries: Vec<&[f32]> = q.chunks(hd).collect();
        let mut s = vec![0f32; g * n];
        if portable_only {
            portable::scores(&mut s, n, &queries, &keys, 0..n, 0.125, order == Order::Prefill && hd % 8 == 0);
        } else {
            scores(&mut s, n, &queries, &keys, 0..n, 0.125, order);
        }
        // Query q is masked past position n - 1 - q, as causal rows are.
        for (q, row) in s.chunks_mut(n).enumerate() {
            row[n - q..].fill(f32::NEG_INFINITY);
            if portable_only {
                softmax_impl(row);
            } else {
                softmax(row);
            }
        }
        let mut out = vec![0f32; g * hd];
        let mut outs: Vec<&mut [f32]> = out.chunks_mut(hd).collect();
        let probs: Vec<&[f32]> = s.chunks(n).collect();
        if portable_only {
            portable::weighted_values(&mut outs, &probs, &values_t, cap, 0..hd, 0, order);
        } else {
            weighted_values(&mut outs, &probs, &values_t, cap, 0..hd, 0, order);
        }
        // Against f64 attention over the same f16 inputs.
        for qi in 0..g {
            let visible = n - qi;
            let sc: Vec<f64> = (0..visible).map(|j| (0..hd).map(|d| keys[j * hd + d].to_f64() * q[qi * hd + d] as f64).sum::<f64>() * 0.125).collect();
            let max = sc.iter().cloned().fold(f64::MIN, f64::max);
            let total: f64 = sc.iter().map(|x| (x - max).exp()).sum();
            for d in 0..hd {
                let want: f64 = (0..visible).map(|j| (sc[j] - max).exp() / total * values_t[d * cap + j].to_f64()).sum();
                assert!((out[qi * hd + d] as f64 - want).abs() < 2e-3, "query {qi} dim {d}: {} vs {want}", out[qi * hd + d]);
            }
        }
        out
    }

    #[test]
    fn attention_is_softmax_weighted_values_and_both_builds_agree_bit_for_bit() {
        for (hd, n, g) in [(64, 70, 3), (64, 37, 5), (40, 33, 2), (256, 9, 4), (64, 96, 1)] {
            for order in [Order::Decode, Order::Prefill] {
                let portable = attend(hd, n, g, order, true);
                let dispatched = attend(hd, n, g, order, false);
                let same = portable.iter().zip(&dispatched).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "hd {hd}, {n} positions, {g} queries, {order:?}: the vector kernels differ from the portable ones");
            }
        }
    }

    #[test]
    fn softmax_builds_agree_bit_for_bit_across_expf_ranges() {
        // Differences from the maximum past 126 and 192 take ggml_v_expf's
        // slow lanes; −∞ is a masked position.
        let mut row: Vec<f32> = (0..45).map(|i| 3.0 - i as f32 * 4.7).collect();
        row[3] = f32::NEG_INFINITY;
        row[10] = 2.9999;
        for len in [45, 40, 8, 5] {
            let (mut a, mut b) = (row[..len].to_vec(), row[..len].to_vec());
            softmax(&mut a);
            softmax_impl(&mut b);
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{len}: {a:?} vs {b:?}");
            assert!((a.iter().sum::<f32>() - 1.0).abs() < 2e-3);
            assert_eq!(a[3], 0.0);
        }
    }

    #[test]
    fn rounding_to_f16_is_round_to_nearest_even() {
        let mut x = vec![1.0 + 2.0 / 4096.0, 1.0 + 6.0 / 4096.0, 65520.0, 1e-8, -2.5e-5, 0.1, 0.2, 0.3, 0.4, 7.0];
        let want: Vec<f32> = x.iter().map(|v| f16::from_f32(*v).to_f32()).collect();
        round_to_f16(&mut x);
        assert_eq!(x, want);
        assert_eq!(x[0], 1.0, "a tie rounds to even (down)");
        assert_eq!(x[1], 1.0 + 2.0 / 1024.0, "a tie rounds to even (up)");
        assert!(x[2].is_infinite());
    }
}
