//! Attention's kernels in AVX-512 registers, in the order of llama.cpp
//! built for AVX-512: sixteen lanes, `_mm512_reduce_add_ps`'s tree, and its
//! AVX-512 `ggml_v_expf`.

use std::arch::x86_64::*;

use super::*;

/// Queries per register tile: four accumulators each (decode) or four
/// positions or dimensions each (prefill), 16 of the 32 registers.
const TILE_Q: usize = 4;

#[inline(always)]
unsafe fn load_f16(p: *const f16) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
}

/// `_mm512_reduce_add_ps` as GCC expands it: (hi + lo) of 256, of 128, then
/// (r0 + r2) + (r1 + r3).
#[inline(always)]
unsafe fn hsum(v: __m512) -> f32 {
    let a = _mm256_add_ps(_mm512_extractf32x8_ps::<1>(v), _mm512_castps512_ps256(v));
    let x = _mm_add_ps(_mm256_extractf128_ps::<1>(a), _mm256_castps256_ps128(a));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)))
}

/// `GGML_F32x16_REDUCE`.
#[inline(always)]
unsafe fn reduce(acc: [__m512; 4]) -> f32 {
    hsum(_mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3])))
}

/// `softmax_impl::<16>` sixteen lanes at a time.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
pub unsafe fn softmax(row: &mut [f32]) {
    let n = row.len();
    let wide = n / 16 * 16;
    let p = row.as_mut_ptr();
    let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
    for i in (0..wide).step_by(16) {
        m = _mm512_max_ps(m, _mm512_loadu_ps(p.add(i)));
    }
    let mut lanes = [0f32; 16];
    _mm512_storeu_ps(lanes.as_mut_ptr(), m);
    let max = lanes.iter().chain(&row[wide..]).fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    let mut sum = 0f64;
    let vmax = _mm512_set1_ps(max);
    for i in (0..wide).step_by(16) {
        let e = expf(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), vmax));
        _mm512_storeu_ps(p.add(i), e);
        sum += hsum(e) as f64;
    }
    if wide < n {
        let mut v = [0f32; 16];
        for (o, x) in v.iter_mut().zip(row[wide..].iter_mut()) {
            *x = crate::cpu::vec_ops::expf512_lane(*x - max);
            *o = *x;
        }
        sum += hsum_w::<16>(&v) as f64;
    }
    let inv = _mm512_set1_ps((1.0 / sum) as f32);
    for i in (0..wide).step_by(16) {
        let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm512_mul_ps(_mm512_loadu_ps(p.add(i)), inv));
        _mm512_storeu_ps(p.add(i), _mm512_cvtph_ps(h));
    }
    let inv = (1.0 / sum) as f32;
    for x in row[wide..].iter_mut() {
        *x = f16::from_f32(*x * inv).to_f32();
    }
}

/// `ggml_v_expf`, AVX-512 form: `expf512_lane` on sixteen lanes.
#[inline(always)]
pub(crate) unsafe fn expf(x: __m512) -> __m512 {
    let f = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
    let r = f(0x4b40_0000);
    let z = _mm512_fmadd_ps(x, f(0x3fb8_aa3b), r);
    let n = _mm512_sub_ps(z, r);
    let b = _mm512_fnmadd_ps(n, f(0x35bf_be8e), _mm512_fnmadd_ps(n, f(0x3f31_7200), x));
    let d = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
    let u = _mm512_mul_ps(b, b);
    let j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(f(0x3c07_2010), b, f(0x3d2b_9f17)),
            u,
            _mm512_fmadd_ps(f(0x3e2a_af33), b, f(0x3eff_fedb)),
        ),
        u,
        _mm512_fmadd_ps(f(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
    );
    let res = _mm512_scalef_ps(j, n);
    if d == 0 {
        return res;
    }
    let zero = _mm512_setzero_ps();
    let alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, zero), _mm512_set1_ps(f32::INFINITY), zero);
    _mm512_mask_blend_ps(d, res, alt)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
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
            (4, true) => scores_tiled::<4>(out, stride, chunk, keys, hd, positions.clone(), scale),
            (3, true) => scores_tiled::<3>(out, stride, chunk, keys, hd, positions.clone(), scale),
            (2, true) => scores_tiled::<2>(out, stride, chunk, keys, hd, positions.clone(), scale),
            (_, true) => scores_tiled::<1>(out, stride, chunk, keys, hd, positions.clone(), scale),
            (4, false) => scores_dot::<4>(out, stride, chunk, keys, hd, positions.clone(), scale),
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
    let mut acc = [[_mm512_setzero_ps(); P]; Q];
    for s in (0..hd).step_by(16) {
        let k: [__m512; P] = std::array::from_fn(|p| load_f16(kp.add(p * hd + s)));
        for q in 0..Q {
            let qv = _mm512_loadu_ps(qs[q].as_ptr().add(s));
            for p in 0..P {
                acc[q][p] = _mm512_fmadd_ps(k[p], qv, acc[q][p]);
            }
        }
    }
    for q in 0..Q {
        let at = q * stride + j - start;
        for p in 0..P {
            out[at + p] = hsum(acc[q][p]) * scale;
        }
    }
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
    let wide = hd / 64 * 64;
    for j in positions.clone() {
        let kp = keys.as_ptr().add(j * hd);
        let mut acc = [[_mm512_setzero_ps(); 4]; Q];
        for s in (0..wide).step_by(64) {
            for a in 0..4 {
                let k = load_f16(kp.add(s + 16 * a));
                for q in 0..Q {
                    acc[q][a] = _mm512_fmadd_ps(k, _mm512_loadu_ps(qs[q].as_ptr().add(s + 16 * a)), acc[q][a]);
                }
            }
        }
        for q in 0..Q {
            let sum = leftovers(reduce(acc[q]), &keys[j * hd + wide..(j + 1) * hd], &qs[q][wide..]);
            out[q * stride + j - positions.start] = sum * scale;
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
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
            (4, Order::Prefill) => values_tiled::<4>(outs, chunk, values_t, cap, dims.clone(), base),
            (3, Order::Prefill) => values_tiled::<3>(outs, chunk, values_t, cap, dims.clone(), base),
            (2, Order::Prefill) => values_tiled::<2>(outs, chunk, values_t, cap, dims.clone(), base),
            (_, Order::Prefill) => values_tiled::<1>(outs, chunk, values_t, cap, dims.clone(), base),
            (4, Order::Decode) => values_dot::<4>(outs, chunk, values_t, cap, dims.clone(), base),
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
    let wide = n / 16 * 16;
    let vp = values_t.as_ptr().add(d * cap + base);
    let mut acc = [[_mm512_setzero_ps(); D]; Q];
    for i in (0..wide).step_by(16) {
        let v: [__m512; D] = std::array::from_fn(|r| load_f16(vp.add(r * cap + i)));
        for q in 0..Q {
            let p = _mm512_loadu_ps(probs[q].as_ptr().add(i));
            for r in 0..D {
                acc[q][r] = _mm512_fmadd_ps(v[r], p, acc[q][r]);
            }
        }
    }
    if wide < n {
        let k: __mmask16 = (1u16 << (n - wide)) - 1;
        let v: [__m512; D] =
            std::array::from_fn(|r| _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, vp.add(r * cap + wide).cast())));
        for q in 0..Q {
            let p = _mm512_maskz_loadu_ps(k, probs[q].as_ptr().add(wide));
            for r in 0..D {
                acc[q][r] = _mm512_mask3_fmadd_ps(v[r], p, acc[q][r], k);
            }
        }
    }
    for q in 0..Q {
        for r in 0..D {
            outs[q][d + r - d0] = hsum(acc[q][r]);
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
    let wide = n / 64 * 64;
    for d in dims.clone() {
        let vp = values_t.as_ptr().add(d * cap + base);
        let mut acc = [[_mm512_setzero_ps(); 4]; Q];
        for i in (0..wide).step_by(64) {
            for a in 0..4 {
                let v = load_f16(vp.add(i + 16 * a));
                for q in 0..Q {
                    acc[q][a] = _mm512_fmadd_ps(v, _mm512_loadu_ps(probs[q].as_ptr().add(i + 16 * a)), acc[q][a]);
                }
            }
        }
        // The tail: each position in its lane, the lanes past `n` left as
        // they are (a masked fused multiply-add, as the lane loop would).
        if wide < n {
            for a in 0..4 {
                let at = wide + 16 * a;
                if at >= n {
                    break;
                }
                let k: __mmask16 = if n - at >= 16 { 0xFFFF } else { (1u16 << (n - at)) - 1 };
                let v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, vp.add(at).cast()));
                for q in 0..Q {
                    acc[q][a] =
                        _mm512_mask3_fmadd_ps(v, _mm512_maskz_loadu_ps(k, probs[q].as_ptr().add(at)), acc[q][a], k);
                }
            }
        }
        for q in 0..Q {
            let sum = reduce(acc[q]);
            outs[q][d - dims.start] = sum;
        }
    }
}

/// `ggml_vec_swiglu_f32` as llama.cpp's AVX-512 build runs it: `silu_mul_impl::<16>`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
pub unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let wide = n / 16 * 16;
    let (g, u) = (gate.as_mut_ptr(), up.as_ptr());
    let one = _mm512_set1_ps(1.0);
    for i in (0..wide).step_by(16) {
        let x = _mm512_loadu_ps(g.add(i));
        let e = expf(_mm512_sub_ps(_mm512_setzero_ps(), x));
        _mm512_storeu_ps(g.add(i), _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_loadu_ps(u.add(i))));
    }
    for i in wide..n {
        gate[i] = gate[i] / (1.0 + (-gate[i]).exp()) * up[i];
    }
}
