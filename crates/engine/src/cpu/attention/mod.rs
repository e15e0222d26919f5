//! Attention's kernels over the f16 KV cache, in llama.cpp's orders.
//!
//! llama.cpp (flash attention off, its default in llama-cpp-python) keeps
//! keys and values in f16 and multiplies them as `ggml_mul_mat` multiplies
//! an f16 matrix: the other operand is rounded to f16 first (the queries for
//! the scores, the softmax probabilities for the values), and the products
//! are summed in f32 — by `ggml_vec_dot_f16` when one row is decoded (four
//! accumulators over steps of four vectors) and by tinyBLAS when a batch of
//! rows is prefilled (one accumulator, then a horizontal sum). Its values
//! are stored transposed, so the weighted sum of values is a dot product
//! along positions, one per output dimension. The softmax is
//! `ggml_v_expf`, summed a vector at a time in f64.
//!
//! llama.cpp's vectors are as wide as its build's ISA: eight lanes for AVX2,
//! sixteen for AVX-512, with a different `ggml_v_expf` and different
//! reduction trees (`width`). Hearth follows the order of the build for the
//! CPU it runs on: the AVX-512 one where the kernels run AVX-512, else the
//! AVX2 one (the portable path too, so every CPU without AVX-512 gets the
//! same bits).
//!
//! Each kernel is written portably, generic over the width, and again in
//! registers (`avx2`, `avx512`), doing the same floating-point operations in
//! the same order (tested bit for bit). The register forms keep a tile of
//! accumulators: several queries share each key or value they load.

// Lane loops index several arrays by the same lane, as the C they follow.
#![allow(clippy::needless_range_loop)]

use std::ops::Range;

use half::f16;

use super::isa::{isa, Isa};
use super::vec_ops::{exp_sum_impl, hsum8, hsum_w};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

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
            Order::Decode => 4 * width(),
            Order::Prefill => width(),
        }
    }
}

/// The lanes of the llama.cpp build whose order the kernels follow here: 16
/// where they run AVX-512, else 8.
pub fn width() -> usize {
    if isa() >= Isa::Avx512Vnni {
        16
    } else {
        8
    }
}

/// `vec_ops::silu_mul` on AVX-512 (it shares this module's `ggml_v_expf`).
///
/// # Safety
/// The CPU must have AVX-512 F, BW, DQ and VL.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn silu_mul_avx512(gate: &mut [f32], up: &[f32]) {
    avx512::silu_mul(gate, up)
}

/// Rounds every value to f16 and back, as llama.cpp rounds the operand of a
/// matmul with an f16 matrix.
pub fn round_to_f16(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx2 {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time).
        return unsafe { avx2::round_to_f16(x) };
    }
    for v in x.iter_mut() {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// `out[q · stride + j - positions.start] = scale · keys[j] · queries[q]`
/// for every position `j` (keys `[pos, hd]`).
pub fn scores(
    out: &mut [f32],
    stride: usize,
    queries: &[&[f32]],
    keys: &[f16],
    positions: Range<usize>,
    scale: f32,
    order: Order,
) {
    // tinyBLAS takes a matmul only when its inner size is a multiple of its vector.
    let tiled = order == Order::Prefill && queries[0].len().is_multiple_of(width());
    #[cfg(target_arch = "x86_64")]
    match isa() {
        // SAFETY: the CPU has the ISA's features (checked at run time).
        Isa::Avx512Vnni => return unsafe { avx512::scores(out, stride, queries, keys, positions, scale, tiled) },
        Isa::Avx2 => return unsafe { avx2::scores(out, stride, queries, keys, positions, scale, tiled) },
        Isa::Portable => {}
    }
    portable::scores::<8>(out, stride, queries, keys, positions, scale, tiled)
}

/// Turns each `row` of scores into f16-rounded probabilities in place:
/// `ggml_v_expf` of the score less the row's maximum, times the inverse of
/// their sum (formed a vector at a time in f64, so rows must start at a
/// multiple of `width()` positions). Masked entries are −∞ and come out 0.
pub fn softmax(row: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match isa() {
        // SAFETY: the CPU has the ISA's features (checked at run time).
        Isa::Avx512Vnni => return unsafe { avx512::softmax(row) },
        Isa::Avx2 => return unsafe { avx2::softmax(row) },
        Isa::Portable => {}
    }
    softmax_impl::<8>(row)
}

/// `softmax`'s body, inlined into each build (its `ggml_v_expf` is fused
/// multiply-adds, a libm call each where FMA is not enabled).
#[inline(always)]
fn softmax_impl<const W: usize>(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    let inv = (1.0 / exp_sum_impl::<W>(row, max)) as f32;
    for p in row.iter_mut() {
        *p *= inv;
    }
    for v in row.iter_mut() {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// `outs[q][d - dims.start] = Σ_j probs[q][j - base] · values_t[d · cap + j]`
/// over positions `base..base + probs[q].len()` (the same length for every
/// query), for each dimension `d` of `dims` (values transposed, `[hd, cap]`).
/// `base` must be a multiple of `order.lanes()`.
pub fn weighted_values(
    outs: &mut [&mut [f32]],
    probs: &[&[f32]],
    values_t: &[f16],
    cap: usize,
    dims: Range<usize>,
    base: usize,
    order: Order,
) {
    debug_assert_eq!(base % order.lanes(), 0);
    #[cfg(target_arch = "x86_64")]
    match isa() {
        // SAFETY: the CPU has the ISA's features (checked at run time).
        Isa::Avx512Vnni => return unsafe { avx512::weighted_values(outs, probs, values_t, cap, dims, base, order) },
        Isa::Avx2 => return unsafe { avx2::weighted_values(outs, probs, values_t, cap, dims, base, order) },
        Isa::Portable => {}
    }
    portable::weighted_values::<8>(outs, probs, values_t, cap, dims, base, order)
}

/// `GGML_F32x8_REDUCE` or `GGML_F32x16_REDUCE` of four accumulators: they
/// are added pairwise, then the lanes as each build adds them.
#[inline(always)]
fn reduce_four<const W: usize>(acc: &[[f32; W]; 4]) -> f32 {
    let v: [f32; W] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
    if W == 16 {
        return hsum_w::<W>(&v);
    }
    // AVX2: (lo + hi), then two `hadd`s.
    let t: [f32; 4] = std::array::from_fn(|l| v[l] + v[l + 4]);
    (t[0] + t[1]) + (t[2] + t[3])
}

/// The kernels one lane at a time, for either width: the reference for the
/// register forms, and what other CPUs run (at width 8).
mod portable {
    use super::*;

    pub fn scores<const W: usize>(
        out: &mut [f32],
        stride: usize,
        queries: &[&[f32]],
        keys: &[f16],
        positions: Range<usize>,
        scale: f32,
        tiled: bool,
    ) {
        let hd = queries[0].len();
        for j in positions.clone() {
            let k = &keys[j * hd..(j + 1) * hd];
            for (q, query) in queries.iter().enumerate() {
                out[q * stride + j - positions.start] = dot::<W>(k, query, tiled) * scale;
            }
        }
    }

    /// tinyBLAS's order (`tiled`) or `ggml_vec_dot_f16`'s, whose leftovers
    /// past the last four-vector step are summed in f64.
    pub fn dot<const W: usize>(k: &[f16], q: &[f32], tiled: bool) -> f32 {
        let n = q.len();
        if tiled {
            let mut acc = [0f32; W];
            for i in (0..n).step_by(W) {
                for l in 0..W {
                    acc[l] = k[i + l].to_f32().mul_add(q[i + l], acc[l]);
                }
            }
            return hsum_w::<W>(&acc);
        }
        let step = 4 * W;
        let wide = n / step * step;
        let mut acc = [[0f32; W]; 4];
        for i in (0..wide).step_by(step) {
            for (a, acc) in acc.iter_mut().enumerate() {
                for l in 0..W {
                    let at = i + W * a + l;
                    acc[l] = k[at].to_f32().mul_add(q[at], acc[l]);
                }
            }
        }
        leftovers(reduce_four::<W>(&acc), &k[wide..n], &q[wide..])
    }

    pub fn weighted_values<const W: usize>(
        outs: &mut [&mut [f32]],
        probs: &[&[f32]],
        values_t: &[f16],
        cap: usize,
        dims: Range<usize>,
        base: usize,
        order: Order,
    ) {
        let n = probs[0].len();
        for d in dims.clone() {
            let row = &values_t[d * cap + base..d * cap + base + n];
            for (out, p) in outs.iter_mut().zip(probs) {
                out[d - dims.start] = value_dot::<W>(row, p, order);
            }
        }
    }

    /// One output of the weighted sum: a position's lane is its offset
    /// from `base` modulo the order's lanes.
    pub fn value_dot<const W: usize>(v: &[f16], p: &[f32], order: Order) -> f32 {
        match order {
            Order::Decode => {
                let mut acc = [[0f32; W]; 4];
                for (i, (v, p)) in v.iter().zip(p).enumerate() {
                    let (a, l) = ((i % (4 * W)) / W, i % W);
                    acc[a][l] = v.to_f32().mul_add(*p, acc[a][l]);
                }
                reduce_four::<W>(&acc)
            }
            Order::Prefill => {
                let mut acc = [0f32; W];
                for (i, (v, p)) in v.iter().zip(p).enumerate() {
                    acc[i % W] = v.to_f32().mul_add(*p, acc[i % W]);
                }
                hsum_w::<W>(&acc)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32) - 0.5)
            .collect()
    }

    /// The portable softmax at the dispatched kernels' width.
    fn portable_softmax(row: &mut [f32]) {
        if width() == 16 {
            softmax_impl::<16>(row)
        } else {
            softmax_impl::<8>(row)
        }
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
            let tiled = order == Order::Prefill && hd % width() == 0;
            if width() == 16 {
                portable::scores::<16>(&mut s, n, &queries, &keys, 0..n, 0.125, tiled);
            } else {
                portable::scores::<8>(&mut s, n, &queries, &keys, 0..n, 0.125, tiled);
            }
        } else {
            scores(&mut s, n, &queries, &keys, 0..n, 0.125, order);
        }
        // Query q is masked past position n - 1 - q, as causal rows are.
        for (q, row) in s.chunks_mut(n).enumerate() {
            row[n - q..].fill(f32::NEG_INFINITY);
            if portable_only {
                portable_softmax(row);
            } else {
                softmax(row);
            }
        }
        let mut out = vec![0f32; g * hd];
        let mut outs: Vec<&mut [f32]> = out.chunks_mut(hd).collect();
        let probs: Vec<&[f32]> = s.chunks(n).collect();
        if portable_only {
            if width() == 16 {
                portable::weighted_values::<16>(&mut outs, &probs, &values_t, cap, 0..hd, 0, order);
            } else {
                portable::weighted_values::<8>(&mut outs, &probs, &values_t, cap, 0..hd, 0, order);
            }
        } else {
            weighted_values(&mut outs, &probs, &values_t, cap, 0..hd, 0, order);
        }
        // Against f64 attention over the same f16 inputs.
        for qi in 0..g {
            let visible = n - qi;
            let sc: Vec<f64> = (0..visible)
                .map(|j| (0..hd).map(|d| keys[j * hd + d].to_f64() * q[qi * hd + d] as f64).sum::<f64>() * 0.125)
                .collect();
            let max = sc.iter().cloned().fold(f64::MIN, f64::max);
            let total: f64 = sc.iter().map(|x| (x - max).exp()).sum();
            for d in 0..hd {
                let want: f64 =
                    (0..visible).map(|j| (sc[j] - max).exp() / total * values_t[d * cap + j].to_f64()).sum();
                assert!(
                    (out[qi * hd + d] as f64 - want).abs() < 2e-3,
                    "query {qi} dim {d}: {} vs {want}",
                    out[qi * hd + d]
                );
            }
        }
        out
    }

    #[test]
    fn attention_is_softmax_weighted_values_and_both_builds_agree_bit_for_bit() {
        for (hd, n, g) in [(64, 70, 3), (64, 37, 5), (40, 33, 2), (256, 9, 4), (64, 96, 1), (64, 200, 9), (48, 130, 4)]
        {
            for order in [Order::Decode, Order::Prefill] {
                let portable = attend(hd, n, g, order, true);
                let dispatched = attend(hd, n, g, order, false);
                let same = portable.iter().zip(&dispatched).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "hd {hd}, {n} positions, {g} queries, {order:?}: the vector kernels differ from the portable ones"
                );
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
            portable_softmax(&mut b);
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
