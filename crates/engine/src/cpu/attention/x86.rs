//! Attention's kernels in registers, written once over `Lanes`: eight lanes
//! in AVX2 (`Avx2`) or sixteen in AVX-512 (`Avx512`), each in the order of
//! llama.cpp built for that ISA. `avx2` and `avx512` hold the entry points,
//! which enable the ISA's features and inline the kernels at its width.

use std::arch::x86_64::*;
use std::ops::Range;

use half::f16;

use super::{leftovers, tiled, Order};

mod lanes;

use lanes::{Avx2, Avx512, Lanes};

/// The most lanes of any `Lanes`: the size of the buffers that hold a
/// register's lanes on the stack.
const MAX_W: usize = 16;

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
