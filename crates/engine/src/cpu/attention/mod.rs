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
//! Each kernel is written twice, each time once for both widths: portably,
//! one lane at a time (`portable`, generic over the width), and in registers
//! (`x86`, generic over `x86::Lanes`, the register and the few instructions
//! that differ between the AVX2 and AVX-512 builds, with an entry point per
//! ISA that enables its features). Both do the same floating-point
//! operations in the same order (tested bit for bit). The register forms
//! keep a tile of accumulators: several queries share each key or value
//! they load.
//!
//! The public functions check the lengths of their slices before any
//! register code runs, so the register forms never reach past a slice.

#![allow(
    clippy::needless_range_loop,
    reason = "lane loops index several arrays by the same lane, as the C they follow"
)]

use std::ops::Range;

use half::f16;

use super::exp::expf_w;
use super::isa::{isa, Isa};
use super::vec_ops::hsum_w;

mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
use x86::{avx2, avx512};

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

/// Rounds every value to f16 and back, as llama.cpp rounds the operand of a
/// matmul with an f16 matrix.
pub fn round_to_f16(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match isa() {
        // SAFETY: the CPU has the ISA's features (checked at run time); the
        // kernel reads and writes within `x`.
        Isa::Avx512Vnni => return unsafe { avx512::round_to_f16(x) },
        // SAFETY: as above.
        Isa::Avx2 => return unsafe { avx2::round_to_f16(x) },
        Isa::Portable => {}
    }
    for v in x.iter_mut() {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// `out[q · stride + j - positions.start] = scale · keys[j] · queries[q]`
/// for every position `j` (keys `[pos, hd]`).
///
/// # Panics
/// If `queries` is empty or its rows differ in length, if `keys` has fewer
/// than `positions.end` rows, or if `out` is too short for the last query's
/// row.
pub fn scores(
    out: &mut [f32],
    stride: usize,
    queries: &[&[f32]],
    keys: &[f16],
    positions: Range<usize>,
    scale: f32,
    order: Order,
) {
    let hd = queries[0].len();
    // The register forms read every query and key by pointer, and write `out` by index.
    assert!(queries.iter().all(|q| q.len() == hd), "queries of different lengths");
    if !positions.is_empty() {
        assert!(positions.end.checked_mul(hd).is_some_and(|n| n <= keys.len()), "keys end before the positions");
        let last = (queries.len() - 1).checked_mul(stride).and_then(|at| at.checked_add(positions.len()));
        assert!(last.is_some_and(|n| n <= out.len()), "scores past the end of `out`");
    }
    #[cfg(target_arch = "x86_64")]
    match isa() {
        // SAFETY: the CPU has the ISA's features (checked at run time), and
        // the slices hold every key and query the positions need (asserted).
        Isa::Avx512Vnni => return unsafe { avx512::scores(out, stride, queries, keys, positions, scale, order) },
        // SAFETY: as above.
        Isa::Avx2 => return unsafe { avx2::scores(out, stride, queries, keys, positions, scale, order) },
        Isa::Portable => {}
    }
    portable::scores::<8>(out, stride, queries, keys, positions, scale, tiled(hd, order, 8))
}

/// `keys[j] · query` in `order` as the portable kernels sum it (the
/// reference the register forms are tested against).
#[cfg(test)]
pub(crate) fn portable_dot(key: &[f16], query: &[f32], order: Order) -> f32 {
    let hd = query.len();
    match width() {
        16 => portable::dot::<16>(key, query, tiled(hd, order, 16)),
        _ => portable::dot::<8>(key, query, tiled(hd, order, 8)),
    }
}

/// Whether the scores follow tinyBLAS (`w` lanes): it takes a matmul only
/// when its inner size is a multiple of its vector.
#[inline(always)]
fn tiled(hd: usize, order: Order, w: usize) -> bool {
    order == Order::Prefill && hd.is_multiple_of(w)
}

/// Turns each `row` of scores into f16-rounded probabilities in place:
/// `ggml_v_expf` of the score less the row's maximum, times the inverse of
/// their sum (formed a vector at a time in f64, so rows must start at a
/// multiple of `width()` positions). Masked entries are −∞ and come out 0.
///
/// `sink` is a head's attention sink (gpt-oss), a logit that joins the
/// denominator but has no value: as llama.cpp's `soft_max` takes it, it
/// raises the maximum and adds libm's `expf(sink − max)` to the f64 sum.
/// −∞ is no sink, and leaves every bit as it was.
pub fn softmax(row: &mut [f32], sink: f32) {
    #[cfg(target_arch = "x86_64")]
    match isa() {
        // SAFETY: the CPU has the ISA's features (checked at run time); the
        // kernel reads and writes within `row`.
        Isa::Avx512Vnni => return unsafe { avx512::softmax(row, sink) },
        // SAFETY: as above.
        Isa::Avx2 => return unsafe { avx2::softmax(row, sink) },
        Isa::Portable => {}
    }
    softmax_impl::<8>(row, sink)
}

/// The sum of a softmax's exponentials with a sink's share added.
#[inline(always)]
fn with_sink(sum: f64, sink: f32, max: f32) -> f64 {
    if sink == f32::NEG_INFINITY {
        sum
    } else {
        sum + (sink - max).exp() as f64
    }
}

/// A softmax as llama.cpp's `soft_max` op computes it outside attention
/// (a mixture-of-experts router's): `softmax`'s sums, without rounding to
/// f16, and a tail (never seen with 8 or 16 lanes of experts) through libm's
/// `expf` as `ggml_vec_soft_max_f32` has it.
pub fn softmax_f32(row: &mut [f32]) {
    let lanes = if isa() == Isa::Avx512Vnni { 16 } else { 8 };
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    let wide = row.len() / lanes * lanes;
    let mut sum = 0f64;
    for c in row[..wide].chunks_exact_mut(lanes) {
        if lanes == 16 {
            let v: [f32; 16] = std::array::from_fn(|l| expf_w::<16>(c[l] - max));
            c.copy_from_slice(&v);
            sum += hsum_w::<16>(&v) as f64;
        } else {
            let v: [f32; 8] = std::array::from_fn(|l| expf_w::<8>(c[l] - max));
            c.copy_from_slice(&v);
            sum += hsum_w::<8>(&v) as f64;
        }
    }
    for x in &mut row[wide..] {
        *x = (*x - max).exp();
        sum += *x as f64;
    }
    let inv = (1.0 / sum) as f32;
    for p in row.iter_mut() {
        *p *= inv;
    }
}

/// `softmax`'s body, inlined into each build (its `ggml_v_expf` is fused
/// multiply-adds, a libm call each where FMA is not enabled).
#[inline(always)]
fn softmax_impl<const W: usize>(row: &mut [f32], sink: f32) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s)).max(sink);
    let inv = (1.0 / with_sink(exp_sum_impl::<W>(row, max), sink, max)) as f32;
    for p in row.iter_mut() {
        *p *= inv;
    }
    for v in row.iter_mut() {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// `x[i] = exp(x[i] - max)` with `ggml_v_expf`, returning the sum as
/// `ggml_vec_soft_max_f32` forms it (`W` at a time, in f64).
#[inline(always)]
fn exp_sum_impl<const W: usize>(x: &mut [f32], max: f32) -> f64 {
    let mut sum = 0f64;
    let mut chunks = x.chunks_exact_mut(W);
    for c in &mut chunks {
        let v: [f32; W] = std::array::from_fn(|l| expf_w::<W>(c[l] - max));
        c.copy_from_slice(&v);
        sum += hsum_w::<W>(&v) as f64;
    }
    // llama.cpp pads rows to 256 with masked (zero) entries, so a tail is
    // still one SIMD block whose missing lanes add nothing.
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let mut v = [0f32; W];
        for (o, x) in v.iter_mut().zip(rest.iter_mut()) {
            *x = expf_w::<W>(*x - max);
            *o = *x;
        }
        sum += hsum_w::<W>(&v) as f64;
    }
    sum
}

/// `outs[q][d - dims.start] = Σ_j probs[q][j - base] · values_t[d · cap + j]`
/// over positions `base..base + probs[q].len()` (the same length for every
/// query), for each dimension `d` of `dims` (values transposed, `[hd, cap]`).
/// `base` must be a multiple of `order.lanes()`.
///
/// # Panics
/// If `probs` is empty or its rows differ in length, if `outs` has not one
/// row per query of at least `dims.len()` values, or if `values_t` ends
/// before the last dimension's positions.
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
    let n = probs[0].len();
    // The register forms read every probability and value by pointer, and write `outs` by index.
    assert!(probs.iter().all(|p| p.len() == n), "probabilities of different lengths");
    assert_eq!(outs.len(), probs.len(), "one output row per query");
    if !dims.is_empty() {
        assert!(outs.iter().all(|o| o.len() >= dims.len()), "an output row shorter than `dims`");
        let end = (dims.end - 1).checked_mul(cap).and_then(|at| at.checked_add(base)).and_then(|at| at.checked_add(n));
        assert!(end.is_some_and(|end| end <= values_t.len()), "values end before the positions");
    }
    #[cfg(target_arch = "x86_64")]
    match isa() {
        // SAFETY: the CPU has the ISA's features (checked at run time), and
        // the slices hold every value and probability the dimensions need
        // (asserted).
        Isa::Avx512Vnni => return unsafe { avx512::weighted_values(outs, probs, values_t, cap, dims, base, order) },
        // SAFETY: as above.
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
    fn portable_softmax(row: &mut [f32], sink: f32) {
        if width() == 16 {
            softmax_impl::<16>(row, sink)
        } else {
            softmax_impl::<8>(row, sink)
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
            if width() == 16 {
                portable::scores::<16>(&mut s, n, &queries, &keys, 0..n, 0.125, tiled(hd, order, 16));
            } else {
                portable::scores::<8>(&mut s, n, &queries, &keys, 0..n, 0.125, tiled(hd, order, 8));
            }
        } else {
            scores(&mut s, n, &queries, &keys, 0..n, 0.125, order);
        }
        // Query q is masked past position n - 1 - q, as causal rows are.
        for (q, row) in s.chunks_mut(n).enumerate() {
            row[n - q..].fill(f32::NEG_INFINITY);
            if portable_only {
                portable_softmax(row, f32::NEG_INFINITY);
            } else {
                softmax(row, f32::NEG_INFINITY);
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
            softmax(&mut a, f32::NEG_INFINITY);
            portable_softmax(&mut b, f32::NEG_INFINITY);
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{len}: {a:?} vs {b:?}");
            assert!((a.iter().sum::<f32>() - 1.0).abs() < 2e-3);
            assert_eq!(a[3], 0.0);
        }
    }

    #[test]
    fn a_sink_takes_its_share_of_the_denominator_in_every_build() {
        let row: Vec<f32> = (0..37).map(|i| 1.5 - i as f32 * 0.21).collect();
        let exps = |max: f32| row.iter().map(|&x| ((x - max) as f64).exp()).collect::<Vec<f64>>();
        // A sink below the maximum, and one above it (it becomes the maximum).
        for sink in [0.25f32, 4.0] {
            let (mut a, mut b) = (row.clone(), row.clone());
            softmax(&mut a, sink);
            portable_softmax(&mut b, sink);
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "sink {sink}: {a:?} vs {b:?}");
            let max = 1.5f32.max(sink);
            let e = exps(max);
            let total: f64 = e.iter().sum::<f64>() + ((sink - max) as f64).exp();
            for (p, e) in a.iter().zip(&e) {
                assert!((*p as f64 - e / total).abs() < 1e-3, "sink {sink}: {p} vs {}", e / total);
            }
            // The sink's own share is what the row no longer sums to.
            let missing = 1.0 - a.iter().map(|&p| p as f64).sum::<f64>();
            assert!((missing - ((sink - max) as f64).exp() / total).abs() < 2e-3, "sink {sink}: {missing}");
        }
    }

    #[test]
    fn the_exponentials_sum_to_what_exp_sum_returns() {
        let mut v: Vec<f32> = (0..21).map(|i| -(i as f32) * 0.3).collect();
        let sum = exp_sum_impl::<8>(&mut v, 0.0);
        assert!((sum - v.iter().map(|x| *x as f64).sum::<f64>()).abs() < 1e-6);
    }

    /// Keys, values and queries for `g` queries of 64 over `n` positions.
    fn head(n: usize, g: usize) -> (Vec<f16>, Vec<f32>) {
        (data(n * 64, 1).into_iter().map(f16::from_f32).collect(), data(g * 64, 3))
    }

    #[test]
    #[should_panic(expected = "keys end before the positions")]
    fn scores_refuse_keys_that_end_before_the_positions() {
        let (keys, q) = head(10, 1);
        let mut out = vec![0f32; 11];
        scores(&mut out, 11, &[&q], &keys[..keys.len() - 1], 0..10, 1.0, Order::Decode);
    }

    #[test]
    #[should_panic(expected = "scores past the end of `out`")]
    fn scores_refuse_an_out_too_short_for_the_last_query() {
        let (keys, q) = head(10, 2);
        let mut out = vec![0f32; 19];
        scores(&mut out, 10, &[&q[..64], &q[64..]], &keys, 0..10, 1.0, Order::Prefill);
    }

    #[test]
    #[should_panic(expected = "queries of different lengths")]
    fn scores_refuse_queries_of_different_lengths() {
        let (keys, q) = head(10, 2);
        let mut out = vec![0f32; 20];
        scores(&mut out, 10, &[&q[..64], &q[64..127]], &keys, 0..10, 1.0, Order::Decode);
    }

    #[test]
    #[should_panic(expected = "values end before the positions")]
    fn weighted_values_refuse_values_that_end_before_the_positions() {
        // Four dimensions of 40 positions (`cap`), 37 from 0: the last row is one short.
        let values_t: Vec<f16> = vec![f16::ONE; 3 * 40 + 36];
        let p = vec![0.5f32; 37];
        let mut out = vec![0f32; 4];
        weighted_values(&mut [&mut out], &[&p], &values_t, 40, 0..4, 0, Order::Decode);
    }

    #[test]
    #[should_panic(expected = "an output row shorter than `dims`")]
    fn weighted_values_refuse_an_output_row_too_short() {
        let values_t: Vec<f16> = vec![f16::ONE; 4 * 40];
        let p = vec![0.5f32; 37];
        let mut out = vec![0f32; 3];
        weighted_values(&mut [&mut out], &[&p], &values_t, 40, 0..4, 0, Order::Prefill);
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
