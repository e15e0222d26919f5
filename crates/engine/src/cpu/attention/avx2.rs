//! Attention's kernels in AVX2 registers, in llama.cpp's AVX2 orders.

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
            *x = crate::cpu::vec_ops::expf_lane(*x - max);
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
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(f(0x3c07_2010), b, f(0x3d2b_9f17)),
            u,
            _mm256_fmadd_ps(f(0x3e2a_af33), b, f(0x3eff_fedb)),
        ),
        u,
        _mm256_mul_ps(f(0x3f7f_fff6), b),
    );
    if _mm256_movemask_ps(c) == 0 {
        return _mm256_fmadd_ps(j, k, k);
    }
    let g = _mm256_and_si256(
        _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
        _mm256_set1_epi32(0x8200_0000u32 as i32),
    );
    let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
    let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    let d = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
    _mm256_or_ps(
        _mm256_and_ps(d, _mm256_mul_ps(s1, s1)),
        _mm256_andnot_ps(
            d,
            _mm256_or_ps(
                _mm256_and_ps(c, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                _mm256_andnot_ps(c, _mm256_fmadd_ps(j, k, k)),
            ),
        ),
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores(
    out: &mut [f32],
    stride: usize,
    queries: &[&[f32]],
    keys: &[f16],
    positions: Range<usize>,
    scale: f32,
    tiled: bool,
) {
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
unsafe fn scores_tiled<const Q: usize>(
    out: &mut [f32],
    stride: usize,
    qs: &[&[f32]],
    keys: &[f16],
    hd: usize,
    positions: Range<usize>,
    scale: f32,
) {
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
unsafe fn tile<const Q: usize, const P: usize>(
    out: &mut [f32],
    stride: usize,
    qs: &[&[f32]],
    keys: &[f16],
    hd: usize,
    j: usize,
    start: usize,
    scale: f32,
) {
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
            _mm_storeu_ps(
                out[at..at + 4].as_mut_ptr(),
                _mm_mul_ps(hsum4([acc[q][0], acc[q][1], acc[q][2], acc[q][3]]), _mm_set1_ps(scale)),
            );
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
    let x: [__m128; 4] =
        std::array::from_fn(|i| _mm_add_ps(_mm256_extractf128_ps(v[i], 1), _mm256_castps256_ps128(v[i])));
    // [x0 + x2, x1 + x3] of each, interleaved: ab = [a02, b02, a13, b13].
    let ab = _mm_add_ps(_mm_unpacklo_ps(x[0], x[1]), _mm_unpackhi_ps(x[0], x[1]));
    let cd = _mm_add_ps(_mm_unpacklo_ps(x[2], x[3]), _mm_unpackhi_ps(x[2], x[3]));
    _mm_add_ps(_mm_movelh_ps(ab, cd), _mm_movehl_ps(cd, ab))
}

/// `ggml_vec_dot_f16`'s order, one position × `Q` queries at a time.
#[inline(always)]
unsafe fn scores_dot<const Q: usize>(
    out: &mut [f32],
    stride: usize,
    qs: &[&[f32]],
    keys: &[f16],
    hd: usize,
    positions: Range<usize>,
    scale: f32,
) {
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
pub unsafe fn weighted_values(
    outs: &mut [&mut [f32]],
    probs: &[&[f32]],
    values_t: &[f16],
    cap: usize,
    dims: Range<usize>,
    base: usize,
    order: Order,
) {
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
unsafe fn values_tiled<const Q: usize>(
    outs: &mut [&mut [f32]],
    probs: &[&[f32]],
    values_t: &[f16],
    cap: usize,
    dims: Range<usize>,
    base: usize,
) {
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
unsafe fn values_tile<const Q: usize, const D: usize>(
    outs: &mut [&mut [f32]],
    probs: &[&[f32]],
    values_t: &[f16],
    cap: usize,
    d: usize,
    d0: usize,
    base: usize,
) {
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
unsafe fn values_dot<const Q: usize>(
    outs: &mut [&mut [f32]],
    probs: &[&[f32]],
    values_t: &[f16],
    cap: usize,
    dims: Range<usize>,
    base: usize,
) {
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
                reduce_four::<8>(&lanes)
            };
            outs[q][d - dims.start] = sum;
        }
    }
}
