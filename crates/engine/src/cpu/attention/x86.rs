//! Attention's kernels in registers, written once over `Lanes`: eight lanes
//! in AVX2 (`Avx2`) or sixteen in AVX-512 (`Avx512`), each in the order of
//! llama.cpp built for that ISA. `avx2` and `avx512` hold the entry points,
//! which enable the ISA's features and inline the kernels at its width.

use std::arch::x86_64::*;
use std::ops::Range;

use half::f16;

use super::{leftovers, tiled, Order};
use crate::cpu::exp::x86::{expf256, expf512};
use crate::cpu::exp::{expf512_lane, expf_lane};

/// The most lanes of any `Lanes`: the size of the buffers that hold a
/// register's lanes on the stack.
const MAX_W: usize = 16;

/// One of llama.cpp's x86 vector widths: its register, and the operations
/// whose instructions differ between its builds, among them the reduction
/// trees and `ggml_v_expf`, which differ on purpose (each is the build's).
///
/// Every method but `expf_lane` is inlined into its caller, which must
/// enable the ISA's features (`#[target_feature]`, as the entry points do),
/// and runs the ISA's instructions: the CPU must have them.
pub(super) trait Lanes {
    /// The register.
    type V: Copy;
    /// Its lanes, at most `MAX_W`.
    const W: usize;
    /// Queries per register tile, at most 4.
    const TILE_Q: usize;

    /// Zeros.
    ///
    /// # Safety
    /// The CPU has the ISA's features, and the caller enables them.
    unsafe fn zero() -> Self::V;
    /// `x` in every lane.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn set1(x: f32) -> Self::V;
    /// `W` values from `p`.
    ///
    /// # Safety
    /// As `zero`, and `p` is valid for reading `W` values.
    unsafe fn load(p: *const f32) -> Self::V;
    /// Stores the lanes at `p`.
    ///
    /// # Safety
    /// As `zero`, and `p` is valid for writing `W` values.
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `W` f16 values from `p`, widened.
    ///
    /// # Safety
    /// As `zero`, and `p` is valid for reading `W` values.
    unsafe fn load_f16(p: *const f16) -> Self::V;
    /// The first `len` values from `p`, zeros in the other lanes.
    ///
    /// # Safety
    /// As `zero`, `1 <= len <= W`, and `p` is valid for reading `len` values.
    unsafe fn load_part(p: *const f32, len: usize) -> Self::V;
    /// The first `len` f16 values from `p`, widened, zeros in the other lanes.
    ///
    /// # Safety
    /// As `load_part`.
    unsafe fn load_f16_part(p: *const f16, len: usize) -> Self::V;
    /// `a · b + c`, rounded once.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `fmadd` in the first `len` lanes, `c` in the others.
    ///
    /// # Safety
    /// As `zero`, and `len <= W`.
    unsafe fn fmadd_part(a: Self::V, b: Self::V, c: Self::V, len: usize) -> Self::V;
    /// `a - b`.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    /// `a · b`.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// The instruction's maximum (`b` where either is NaN).
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// Each lane rounded to f16 (to nearest, ties to even) and back.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn round_f16(v: Self::V) -> Self::V;
    /// The build's horizontal sum (tinyBLAS's `hsum`; `hsum_w` in lanes).
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn hsum(v: Self::V) -> f32;
    /// `hsum` of four registers, the same additions, the sums in the lanes
    /// of one.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn hsum4(v: [Self::V; 4]) -> __m128;
    /// `GGML_F32x8_REDUCE` or `GGML_F32x16_REDUCE` of four accumulators
    /// (`reduce_four` in lanes).
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn reduce(acc: [Self::V; 4]) -> f32;
    /// The build's `ggml_v_expf`.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn expf(x: Self::V) -> Self::V;
    /// The build's `ggml_v_expf` on one lane: the same bits as `expf`.
    fn expf_lane(x: f32) -> f32;
}

/// `Lanes`' methods that are one intrinsic each (their contracts are the trait's).
macro_rules! forward {
    ($($name:ident($($a:ident: $t:ty),*) $(-> $r:ty)? = $f:ident;)*) => {
        $(
            #[inline(always)]
            unsafe fn $name($($a: $t),*) $(-> $r)? {
                $f($($a),*)
            }
        )*
    };
}

/// llama.cpp's AVX2 build (with FMA and F16C).
pub(super) struct Avx2;

/// llama.cpp's AVX-512 build (F, BW, DQ and VL, on top of AVX2).
pub(super) struct Avx512;

// The methods' contracts are the trait's.
impl Lanes for Avx2 {
    type V = __m256;
    const W: usize = 8;
    /// With four accumulators each (decode) or four positions or dimensions
    /// each (prefill), 12 of the 16 registers.
    const TILE_Q: usize = 3;

    forward! {
        zero() -> __m256 = _mm256_setzero_ps;
        set1(x: f32) -> __m256 = _mm256_set1_ps;
        load(p: *const f32) -> __m256 = _mm256_loadu_ps;
        store(p: *mut f32, v: __m256) = _mm256_storeu_ps;
        fmadd(a: __m256, b: __m256, c: __m256) -> __m256 = _mm256_fmadd_ps;
        sub(a: __m256, b: __m256) -> __m256 = _mm256_sub_ps;
        mul(a: __m256, b: __m256) -> __m256 = _mm256_mul_ps;
        max(a: __m256, b: __m256) -> __m256 = _mm256_max_ps;
        expf(x: __m256) -> __m256 = expf256;
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, len: usize) -> __m256 {
        _mm256_maskload_ps(p, mask8(len))
    }
    #[inline(always)]
    unsafe fn load_f16_part(p: *const f16, len: usize) -> __m256 {
        // AVX2 has no masked 16-bit load: the values go through the stack.
        let mut lanes = [f16::ZERO; 8];
        std::ptr::copy_nonoverlapping(p, lanes.as_mut_ptr(), len);
        Self::load_f16(lanes.as_ptr())
    }
    #[inline(always)]
    unsafe fn fmadd_part(a: __m256, b: __m256, c: __m256, len: usize) -> __m256 {
        _mm256_blendv_ps(c, _mm256_fmadd_ps(a, b, c), _mm256_castsi256_ps(mask8(len)))
    }
    #[inline(always)]
    unsafe fn round_f16(v: __m256) -> __m256 {
        _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }
    /// tinyBLAS's `hsum`: (lo + hi), then (r0 + r2) + (r1 + r3).
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let x = _mm_add_ps(_mm256_extractf128_ps::<1>(v), _mm256_castps256_ps128(v));
        let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
        _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)))
    }
    #[inline(always)]
    unsafe fn hsum4(v: [__m256; 4]) -> __m128 {
        hsum4_256(v)
    }
    /// `GGML_F32x8_REDUCE`: the four added pairwise, (lo + hi), two `hadd`s.
    #[inline(always)]
    unsafe fn reduce(acc: [__m256; 4]) -> f32 {
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
        let t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let t = _mm_hadd_ps(t, t);
        _mm_cvtss_f32(_mm_hadd_ps(t, t))
    }
    #[inline(always)]
    fn expf_lane(x: f32) -> f32 {
        expf_lane(x)
    }
}

// The methods' contracts are the trait's.
impl Lanes for Avx512 {
    type V = __m512;
    const W: usize = 16;
    /// Four accumulators each (decode) or four positions or dimensions each
    /// (prefill), 16 of the 32 registers.
    const TILE_Q: usize = 4;

    forward! {
        zero() -> __m512 = _mm512_setzero_ps;
        set1(x: f32) -> __m512 = _mm512_set1_ps;
        load(p: *const f32) -> __m512 = _mm512_loadu_ps;
        store(p: *mut f32, v: __m512) = _mm512_storeu_ps;
        fmadd(a: __m512, b: __m512, c: __m512) -> __m512 = _mm512_fmadd_ps;
        sub(a: __m512, b: __m512) -> __m512 = _mm512_sub_ps;
        mul(a: __m512, b: __m512) -> __m512 = _mm512_mul_ps;
        max(a: __m512, b: __m512) -> __m512 = _mm512_max_ps;
        expf(x: __m512) -> __m512 = expf512;
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, len: usize) -> __m512 {
        _mm512_maskz_loadu_ps(mask16(len), p)
    }
    #[inline(always)]
    unsafe fn load_f16_part(p: *const f16, len: usize) -> __m512 {
        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask16(len), p.cast()))
    }
    #[inline(always)]
    unsafe fn fmadd_part(a: __m512, b: __m512, c: __m512, len: usize) -> __m512 {
        _mm512_mask3_fmadd_ps(a, b, c, mask16(len))
    }
    #[inline(always)]
    unsafe fn round_f16(v: __m512) -> __m512 {
        _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }
    /// `_mm512_reduce_add_ps` as GCC expands it: (hi + lo) of 256, then
    /// AVX2's `hsum`.
    #[inline(always)]
    unsafe fn hsum(v: __m512) -> f32 {
        Avx2::hsum(half_sum(v))
    }
    #[inline(always)]
    unsafe fn hsum4(v: [__m512; 4]) -> __m128 {
        hsum4_256([half_sum(v[0]), half_sum(v[1]), half_sum(v[2]), half_sum(v[3])])
    }
    /// `GGML_F32x16_REDUCE`: the four added pairwise, then `hsum`.
    #[inline(always)]
    unsafe fn reduce(acc: [__m512; 4]) -> f32 {
        Self::hsum(_mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3])))
    }
    #[inline(always)]
    fn expf_lane(x: f32) -> f32 {
        expf512_lane(x)
    }
}

/// Lanes `0..len` set (all of them from 8).
///
/// # Safety
/// The CPU has AVX2, and the caller enables it.
#[inline(always)]
unsafe fn mask8(len: usize) -> __m256i {
    _mm256_cmpgt_epi32(_mm256_set1_epi32(len.min(8) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
}

/// Lanes `0..len` set (all of them from 16).
#[inline(always)]
fn mask16(len: usize) -> __mmask16 {
    if len >= 16 {
        0xFFFF
    } else {
        (1u16 << len) - 1
    }
}

/// The high half of a register plus its low half.
///
/// # Safety
/// The CPU has AVX-512 F and DQ, and the caller enables them.
#[inline(always)]
unsafe fn half_sum(v: __m512) -> __m256 {
    _mm256_add_ps(_mm512_extractf32x8_ps::<1>(v), _mm512_castps512_ps256(v))
}

/// AVX2's `hsum` of four registers at once: the same additions, with the
/// four sums in the lanes of one register.
///
/// # Safety
/// The CPU has AVX2, and the caller enables it.
#[inline(always)]
unsafe fn hsum4_256(v: [__m256; 4]) -> __m128 {
    let mut x = [_mm_setzero_ps(); 4];
    for i in 0..4 {
        x[i] = _mm_add_ps(_mm256_extractf128_ps::<1>(v[i]), _mm256_castps256_ps128(v[i]));
    }
    // [x0 + x2, x1 + x3] of each, interleaved: ab = [a02, b02, a13, b13].
    let ab = _mm_add_ps(_mm_unpacklo_ps(x[0], x[1]), _mm_unpackhi_ps(x[0], x[1]));
    let cd = _mm_add_ps(_mm_unpacklo_ps(x[2], x[3]), _mm_unpackhi_ps(x[2], x[3]));
    _mm_add_ps(_mm_movelh_ps(ab, cd), _mm_movehl_ps(cd, ab))
}

/// Runs `$f::<$T, Q>` with `Q` the queries in a tile (`$q`, up to `TILE_Q`):
/// a tile's accumulators live in registers, so its size is a constant.
macro_rules! by_tile {
    ($T:ident, $q:expr, $f:ident($($a:expr),* $(,)?)) => {
        match $q {
            4 if $T::TILE_Q >= 4 => $f::<$T, 4>($($a),*),
            3 if $T::TILE_Q >= 3 => $f::<$T, 3>($($a),*),
            2 => $f::<$T, 2>($($a),*),
            _ => $f::<$T, 1>($($a),*),
        }
    };
}

/// `attention::round_to_f16` a register at a time.
///
/// # Safety
/// The CPU has `T`'s features, and the caller enables them.
#[inline(always)]
unsafe fn round_to_f16<T: Lanes>(x: &mut [f32]) {
    let wide = x.len() / T::W * T::W;
    let p = x.as_mut_ptr();
    for i in (0..wide).step_by(T::W) {
        T::store(p.add(i), T::round_f16(T::load(p.add(i))));
    }
    for v in x[wide..].iter_mut() {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// `softmax_impl::<T::W>` a register at a time.
///
/// # Safety
/// As `round_to_f16`.
#[inline(always)]
unsafe fn softmax<T: Lanes>(row: &mut [f32], sink: f32) {
    const { assert!(T::W <= MAX_W) };
    let n = row.len();
    let wide = n / T::W * T::W;
    let p = row.as_mut_ptr();
    let mut m = T::set1(f32::NEG_INFINITY);
    for i in (0..wide).step_by(T::W) {
        m = T::max(m, T::load(p.add(i)));
    }
    let mut lanes = [0f32; MAX_W];
    T::store(lanes.as_mut_ptr(), m);
    let max = lanes[..T::W].iter().chain(&row[wide..]).fold(f32::NEG_INFINITY, |m, &s| m.max(s)).max(sink);
    let mut sum = 0f64;
    let vmax = T::set1(max);
    for i in (0..wide).step_by(T::W) {
        let e = T::expf(T::sub(T::load(p.add(i)), vmax));
        T::store(p.add(i), e);
        sum += T::hsum(e) as f64;
    }
    if wide < n {
        // The tail is one more vector, its missing lanes zero.
        let mut v = [0f32; MAX_W];
        for (o, x) in v.iter_mut().zip(row[wide..].iter_mut()) {
            *x = T::expf_lane(*x - max);
            *o = *x;
        }
        sum += T::hsum(T::load(v.as_ptr())) as f64;
    }
    let sum = super::with_sink(sum, sink, max);
    let inv = T::set1((1.0 / sum) as f32);
    for i in (0..wide).step_by(T::W) {
        T::store(p.add(i), T::round_f16(T::mul(T::load(p.add(i)), inv)));
    }
    let inv = (1.0 / sum) as f32;
    for x in row[wide..].iter_mut() {
        *x = f16::from_f32(*x * inv).to_f32();
    }
}

/// `attention::scores`, `T::TILE_Q` queries at a time.
///
/// # Safety
/// As `round_to_f16`, and the slices hold what `attention::scores` asserts:
/// every query `hd` long, `keys` at least `positions.end · hd`, `out` at
/// least `(queries - 1) · stride + positions.len()`.
#[inline(always)]
unsafe fn scores<T: Lanes>(
    out: &mut [f32],
    stride: usize,
    queries: &[&[f32]],
    keys: &[f16],
    positions: Range<usize>,
    scale: f32,
    order: Order,
) {
    if positions.is_empty() {
        return;
    }
    let hd = queries[0].len();
    let tiled = tiled(hd, order, T::W);
    for (c, chunk) in queries.chunks(T::TILE_Q).enumerate() {
        let out = &mut out[c * T::TILE_Q * stride..];
        if tiled {
            by_tile!(T, chunk.len(), scores_tiled(out, stride, chunk, keys, hd, positions.clone(), scale))
        } else {
            by_tile!(T, chunk.len(), scores_dot(out, stride, chunk, keys, hd, positions.clone(), scale))
        }
    }
}

/// tinyBLAS's order, four positions × `Q` queries at a time.
///
/// # Safety
/// As `scores`, and `hd` is a multiple of `T::W`.
#[inline(always)]
unsafe fn scores_tiled<T: Lanes, const Q: usize>(
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
        tile::<T, Q, 4>(out, stride, qs, keys, hd, j, positions.start, scale);
        j += 4;
    }
    while j < positions.end {
        tile::<T, Q, 1>(out, stride, qs, keys, hd, j, positions.start, scale);
        j += 1;
    }
}

/// `P` positions from `j` × `Q` queries, one accumulator each.
///
/// # Safety
/// As `scores_tiled`, and `j + P <= positions.end`.
#[inline(always)]
#[allow(clippy::too_many_arguments, reason = "a kernel's operands, inlined into its callers' loops")]
unsafe fn tile<T: Lanes, const Q: usize, const P: usize>(
    out: &mut [f32],
    stride: usize,
    qs: &[&[f32]],
    keys: &[f16],
    hd: usize,
    j: usize,
    start: usize,
    scale: f32,
) {
    // Plain loops, not closures: a closure would not inherit the entry
    // point's target features, and its intrinsics would become calls.
    let kp = keys.as_ptr().add(j * hd);
    let mut acc = [[T::zero(); P]; Q];
    let mut k = [T::zero(); P];
    for s in (0..hd).step_by(T::W) {
        for p in 0..P {
            k[p] = T::load_f16(kp.add(p * hd + s));
        }
        for q in 0..Q {
            let qv = T::load(qs[q].as_ptr().add(s));
            for p in 0..P {
                acc[q][p] = T::fmadd(k[p], qv, acc[q][p]);
            }
        }
    }
    for q in 0..Q {
        let at = q * stride + j - start;
        if P == 4 {
            let sums = T::hsum4([acc[q][0], acc[q][1], acc[q][2], acc[q][3]]);
            _mm_storeu_ps(out[at..at + 4].as_mut_ptr(), _mm_mul_ps(sums, _mm_set1_ps(scale)));
        } else {
            for p in 0..P {
                out[at + p] = T::hsum(acc[q][p]) * scale;
            }
        }
    }
}

/// `ggml_vec_dot_f16`'s order, one position × `Q` queries at a time.
///
/// # Safety
/// As `scores`.
#[inline(always)]
unsafe fn scores_dot<T: Lanes, const Q: usize>(
    out: &mut [f32],
    stride: usize,
    qs: &[&[f32]],
    keys: &[f16],
    hd: usize,
    positions: Range<usize>,
    scale: f32,
) {
    let step = 4 * T::W;
    let wide = hd / step * step;
    for j in positions.clone() {
        let kp = keys.as_ptr().add(j * hd);
        let mut acc = [[T::zero(); 4]; Q];
        for s in (0..wide).step_by(step) {
            for a in 0..4 {
                let k = T::load_f16(kp.add(s + T::W * a));
                for q in 0..Q {
                    acc[q][a] = T::fmadd(k, T::load(qs[q].as_ptr().add(s + T::W * a)), acc[q][a]);
                }
            }
        }
        for q in 0..Q {
            let sum = leftovers(T::reduce(acc[q]), &keys[j * hd + wide..(j + 1) * hd], &qs[q][wide..]);
            out[q * stride + j - positions.start] = sum * scale;
        }
    }
}

/// `attention::weighted_values`, `T::TILE_Q` queries at a time.
///
/// # Safety
/// As `round_to_f16`, and the slices hold what `attention::weighted_values`
/// asserts: one output row per query, each at least `dims.len()` long,
/// every query's probabilities `n` long, and `values_t` at least
/// `(dims.end - 1) · cap + base + n`.
#[inline(always)]
unsafe fn weighted_values<T: Lanes>(
    outs: &mut [&mut [f32]],
    probs: &[&[f32]],
    values_t: &[f16],
    cap: usize,
    dims: Range<usize>,
    base: usize,
    order: Order,
) {
    for (c, chunk) in probs.chunks(T::TILE_Q).enumerate() {
        let outs = &mut outs[c * T::TILE_Q..c * T::TILE_Q + chunk.len()];
        match order {
            Order::Prefill => by_tile!(T, chunk.len(), values_tiled(outs, chunk, values_t, cap, dims.clone(), base)),
            Order::Decode => by_tile!(T, chunk.len(), values_dot(outs, chunk, values_t, cap, dims.clone(), base)),
        }
    }
}

/// tinyBLAS's order, four dimensions × `Q` queries at a time.
///
/// # Safety
/// As `weighted_values`.
#[inline(always)]
unsafe fn values_tiled<T: Lanes, const Q: usize>(
    outs: &mut [&mut [f32]],
    probs: &[&[f32]],
    values_t: &[f16],
    cap: usize,
    dims: Range<usize>,
    base: usize,
) {
    let mut d = dims.start;
    while d + 4 <= dims.end {
        values_tile::<T, Q, 4>(outs, probs, values_t, cap, d, dims.start, base);
        d += 4;
    }
    while d < dims.end {
        values_tile::<T, Q, 1>(outs, probs, values_t, cap, d, dims.start, base);
        d += 1;
    }
}

/// `D` dimensions from `d` × `Q` queries, one accumulator each; the tail's
/// positions in their lanes, the lanes past it left as they are.
///
/// # Safety
/// As `weighted_values`, and `d0 <= d` and `d + D <= dims.end`.
#[inline(always)]
unsafe fn values_tile<T: Lanes, const Q: usize, const D: usize>(
    outs: &mut [&mut [f32]],
    probs: &[&[f32]],
    values_t: &[f16],
    cap: usize,
    d: usize,
    d0: usize,
    base: usize,
) {
    let n = probs[0].len();
    let wide = n / T::W * T::W;
    let vp = values_t.as_ptr().add(d * cap + base);
    let mut acc = [[T::zero(); D]; Q];
    let mut v = [T::zero(); D];
    for i in (0..wide).step_by(T::W) {
        for r in 0..D {
            v[r] = T::load_f16(vp.add(r * cap + i));
        }
        for q in 0..Q {
            let p = T::load(probs[q].as_ptr().add(i));
            for r in 0..D {
                acc[q][r] = T::fmadd(v[r], p, acc[q][r]);
            }
        }
    }
    if wide < n {
        let len = n - wide;
        for r in 0..D {
            v[r] = T::load_f16_part(vp.add(r * cap + wide), len);
        }
        for q in 0..Q {
            let p = T::load_part(probs[q].as_ptr().add(wide), len);
            for r in 0..D {
                acc[q][r] = T::fmadd_part(v[r], p, acc[q][r], len);
            }
        }
    }
    for q in 0..Q {
        for r in 0..D {
            outs[q][d + r - d0] = T::hsum(acc[q][r]);
        }
    }
}

/// `ggml_vec_dot_f16`'s order, one dimension × `Q` queries at a time.
///
/// # Safety
/// As `weighted_values`.
#[inline(always)]
unsafe fn values_dot<T: Lanes, const Q: usize>(
    outs: &mut [&mut [f32]],
    probs: &[&[f32]],
    values_t: &[f16],
    cap: usize,
    dims: Range<usize>,
    base: usize,
) {
    let n = probs[0].len();
    let step = 4 * T::W;
    let wide = n / step * step;
    for d in dims.clone() {
        let vp = values_t.as_ptr().add(d * cap + base);
        let mut acc = [[T::zero(); 4]; Q];
        for i in (0..wide).step_by(step) {
            for a in 0..4 {
                let v = T::load_f16(vp.add(i + T::W * a));
                for q in 0..Q {
                    acc[q][a] = T::fmadd(v, T::load(probs[q].as_ptr().add(i + T::W * a)), acc[q][a]);
                }
            }
        }
        // The tail: each position in its lane, the lanes past `n` left as
        // they are (a masked fused multiply-add, as the lane loop would).
        for a in 0..4 {
            let at = wide + T::W * a;
            if at >= n {
                break;
            }
            let len = (n - at).min(T::W);
            let v = T::load_f16_part(vp.add(at), len);
            for q in 0..Q {
                acc[q][a] = T::fmadd_part(v, T::load_part(probs[q].as_ptr().add(at), len), acc[q][a], len);
            }
        }
        for q in 0..Q {
            outs[q][d - dims.start] = T::reduce(acc[q]);
        }
    }
}

/// An ISA's entry points: each enables the ISA's features (`$features`)
/// and inlines its kernel at the ISA's width (`$T`).
macro_rules! entry_points {
    ($(#[$doc:meta])* mod $isa:ident: $T:ident, $features:literal) => {
        $(#[$doc])*
        pub(super) mod $isa {
            use super::*;

            /// `attention::round_to_f16`.
            ///
            /// # Safety
            /// The CPU has the features this module enables.
            #[target_feature(enable = $features)]
            pub unsafe fn round_to_f16(x: &mut [f32]) {
                super::round_to_f16::<$T>(x)
            }

            /// `attention::softmax`.
            ///
            /// # Safety
            /// The CPU has the features this module enables.
            #[target_feature(enable = $features)]
            pub unsafe fn softmax(row: &mut [f32], sink: f32) {
                super::softmax::<$T>(row, sink)
            }

            /// `attention::scores`.
            ///
            /// # Safety
            /// The CPU has the features this module enables, and the slices
            /// are as long as `attention::scores` asserts.
            #[target_feature(enable = $features)]
            pub unsafe fn scores(
                out: &mut [f32],
                stride: usize,
                queries: &[&[f32]],
                keys: &[f16],
                positions: Range<usize>,
                scale: f32,
                order: Order,
            ) {
                super::scores::<$T>(out, stride, queries, keys, positions, scale, order)
            }

            /// `attention::weighted_values`.
            ///
            /// # Safety
            /// The CPU has the features this module enables, and the slices
            /// are as long as `attention::weighted_values` asserts.
            #[target_feature(enable = $features)]
            pub unsafe fn weighted_values(
                outs: &mut [&mut [f32]],
                probs: &[&[f32]],
                values_t: &[f16],
                cap: usize,
                dims: Range<usize>,
                base: usize,
                order: Order,
            ) {
                super::weighted_values::<$T>(outs, probs, values_t, cap, dims, base, order)
            }
        }
    };
}

entry_points! {
    /// The kernels in llama.cpp's AVX2 orders.
    mod avx2: Avx2, "avx2,fma,f16c"
}
entry_points! {
    /// The kernels in the orders of llama.cpp built for AVX-512: sixteen
    /// lanes, `_mm512_reduce_add_ps`'s tree, and its AVX-512 `ggml_v_expf`.
    mod avx512: Avx512, "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl"
}
