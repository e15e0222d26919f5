//! The kernels one lane at a time, for either width: the reference for the
//! register forms, and what other CPUs run (at width 8).

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
