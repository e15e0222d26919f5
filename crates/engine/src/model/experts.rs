//! A mixture-of-experts FFN: a router picks `used` of `count` experts for
//! each token, and the token's FFN output is the weighted sum of those
//! experts' SwiGLU FFNs.
//!
//! The numerics are llama.cpp's `build_moe_ffn` with `mul_mat_id` on the
//! CPU: router logits from a plain matmul, a softmax in its `soft_max` op's
//! order, the top k, the weights divided by their sum (clamped away from
//! zero), each expert's rows summed as a vector dot product would sum them
//! alone, the down projections scaled by their weights and added in the
//! order the experts were picked.
//!
//! gpt-oss adds biases (the router's, and each expert's gate, up and
//! down, added as `ggml_add_id` adds them), picks the top k of the raw
//! logits and takes a softmax over those k only, and joins gate and up
//! with its clamped SwiGLU (`ExpertActivation::SwigluOai`).
//!
//! Each expert is a `QuantMatrix` cut from the file's 3-D tensor, so every
//! type Hearth runs runs here with its own kernels. A pass reads only the
//! experts its tokens picked, each once for all the rows that picked it
//! (llama.cpp's grouping in `mul_mat_id`): a decode step reads `used`
//! experts, a prefill chunk each picked expert once.

use std::ops::Range;
use std::sync::Arc;

use super::config::{ExpertActivation, ExpertsConfig, Gating};

use crate::cpu::{attention, vec_ops, Activations, QuantMatrix};
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::worker_pool::{DisjointSlice, WorkerPool};

/// One layer's experts and their router.
pub(super) struct Experts {
    /// `ffn_gate_inp`: `[count, n_embd]`, a logit per expert.
    router: Arc<QuantMatrix>,
    gate: Vec<QuantMatrix>,
    up: Vec<QuantMatrix>,
    down: Vec<QuantMatrix>,
    /// Biases, where the file has them (gpt-oss).
    biases: Biases,
    /// `exp_probs_b`: added to each expert's probability to pick the
    /// experts, not to weight them (GLM-4.5, DeepSeek V3).
    selection_bias: Option<Vec<f32>>,
    /// `ffn_down_exps.scale`: each expert's output multiplied by its own
    /// number (Gemma 4's `per_expert_scale`), where the file has one.
    down_scale: Option<Vec<f32>>,
    config: ExpertsConfig,
    n_embd: usize,
}

/// A layer's expert biases: the router's `[count]`, and each expert's
/// gate and up `[count · ffn]` and down `[count · n_embd]` rows.
#[derive(Default)]
struct Biases {
    router: Option<Vec<f32>>,
    gate: Option<Vec<f32>>,
    up: Option<Vec<f32>>,
    down: Option<Vec<f32>>,
}

/// The weights below which a sum of picked weights is not divided by
/// (llama.cpp clamps the sum to f16's smallest normal).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

impl Experts {
    /// Layer `prefix`'s router and experts: `ffn_{gate,up,down}_exps`, or
    /// gate and up fused in `ffn_gate_up_exps` (each expert's gate rows,
    /// then its up rows).
    pub(super) fn load(
        file: &mut GgufFile,
        prefix: &str,
        n_embd: usize,
        config: &ExpertsConfig,
        router: Arc<QuantMatrix>,
    ) -> Result<Self> {
        let (count, ffn) = (config.count, config.ffn_len);
        let fused = format!("{prefix}.ffn_gate_up_exps.weight");
        let (gate, up) = if file.has_tensor(&fused) {
            let mut gate = Vec::with_capacity(count);
            let mut up = Vec::with_capacity(count);
            for [g, u] in load_experts::<2>(file, &fused, count, 2 * ffn, n_embd)? {
                gate.push(g);
                up.push(u);
            }
            (gate, up)
        } else {
            let one = |file: &mut GgufFile, name: &str| -> Result<Vec<QuantMatrix>> {
                Ok(load_experts::<1>(file, &format!("{prefix}.{name}.weight"), count, ffn, n_embd)?
                    .into_iter()
                    .map(|[m]| m)
                    .collect())
            };
            (one(file, "ffn_gate_exps")?, one(file, "ffn_up_exps")?)
        };
        let down = load_experts::<1>(file, &format!("{prefix}.ffn_down_exps.weight"), count, n_embd, ffn)?
            .into_iter()
            .map(|[m]| m)
            .collect();
        let fused_bias = format!("{prefix}.ffn_gate_up_exps.bias");
        let (gate_bias, up_bias) = match bias(file, &fused_bias, &[count, 2 * ffn])? {
            // Each expert's gate biases, then its up ones.
            Some(both) => {
                let (mut g, mut u) = (Vec::with_capacity(count * ffn), Vec::with_capacity(count * ffn));
                for expert in both.chunks_exact(2 * ffn) {
                    g.extend_from_slice(&expert[..ffn]);
                    u.extend_from_slice(&expert[ffn..]);
                }
                (Some(g), Some(u))
            }
            None => (
                bias(file, &format!("{prefix}.ffn_gate_exps.bias"), &[count, ffn])?,
                bias(file, &format!("{prefix}.ffn_up_exps.bias"), &[count, ffn])?,
            ),
        };
        let biases = Biases {
            router: bias(file, &format!("{prefix}.ffn_gate_inp.bias"), &[count])?,
            gate: gate_bias,
            up: up_bias,
            down: bias(file, &format!("{prefix}.ffn_down_exps.bias"), &[count, n_embd])?,
        };
        let down_scale = bias(file, &format!("{prefix}.ffn_down_exps.scale"), &[count])?;
        let selection_bias = bias(file, &format!("{prefix}.exp_probs_b.bias"), &[count])?;
        Ok(Self { router, gate, up, down, biases, selection_bias, down_scale, config: config.clone(), n_embd })
    }

    /// Bytes of weights one token reads: the router and `used` experts.
    pub(super) fn bytes_per_token(&self) -> usize {
        let one = self.gate[0].stored_bytes() + self.up[0].stored_bytes() + self.down[0].stored_bytes();
        self.router.stored_bytes() + one * self.config.used
    }

    /// `out = Σ_k w_k · down_k(SiLU(gate_k(h)) · up_k(h))` for each of the
    /// `rows` rows of `h` (normed FFN inputs), over the experts each row
    /// picked by the router from `router_input` (Gemma 4's own), else from
    /// `h`; `sequence_rows` as in `QuantMatrix::matmul_cols`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the pass's pool and scratch beside the rows, the router's input and the output"
    )]
    pub(super) fn forward_host(
        &self,
        pool: &WorkerPool,
        h: &[f32],
        router_input: Option<&[f32]>,
        rows: usize,
        sequence_rows: usize,
        out: &mut [f32],
        scratch: &mut ExpertScratch,
    ) -> Result<()> {
        let (e, ffn, used) = (self.n_embd, self.config.ffn_len, self.config.used);
        let mut logits = vec![0f32; rows * self.config.count];
        {
            let router = &*self.router;
            let acts = Activations::for_matrices(router_input.unwrap_or(h), [router]);
            let chunk = expert_chunk(self.config.count, pool.active_threads());
            let out = DisjointSlice::new(&mut logits);
            pool.run(self.config.count.div_ceil(chunk), &|t| {
                let cols = t * chunk..((t + 1) * chunk).min(self.config.count);
                // SAFETY: the tasks' column ranges are disjoint.
                unsafe { router.matmul_cols(&acts, rows, sequence_rows, cols, &out, self.config.count) };
            });
        }
        if let Some(b) = &self.biases.router {
            logits.chunks_exact_mut(self.config.count).for_each(|row| vec_ops::add(row, b));
        }
        let picks: Vec<Pick> = logits.chunks_exact_mut(self.config.count).flat_map(|l| self.route(l)).collect();

        // The input rounded once for every expert's gate and up: the experts
        // of one tensor share its type, so the first ones name every rounding.
        let rounded = Activations::for_matrices(h, [&self.gate[0], &self.up[0]]);
        // The rows each expert serves, in row order, experts in id order.
        // A prompt's rows are summed in the order llama.cpp gives that many
        // rows; rows of separate sequences (a batch of decode steps) each as
        // it would be alone, so they share the expert's weights but not
        // their bits. Prompts of several sequences are grouped apart.
        let sequences = if sequence_rows > 1 { rows / sequence_rows } else { 1 };
        let mut served: Vec<Vec<usize>> = vec![Vec::new(); self.config.count * sequences];
        for (i, p) in picks.iter().enumerate() {
            let sequence = if sequence_rows > 1 { i / used / sequence_rows } else { 0 };
            served[sequence * self.config.count + p.expert].push(i);
        }
        let work: Vec<Work> = served
            .into_iter()
            .enumerate()
            .filter(|(_, picks)| !picks.is_empty())
            .map(|(key, picks)| {
                let expert = key % self.config.count;
                let rows: Vec<usize> = picks.iter().map(|&i| i / used).collect();
                let acts = rounded.gather(&rows, e, [&self.gate[expert], &self.up[expert]]);
                let order_rows = if sequence_rows > 1 { picks.len() } else { 1 };
                Work { expert, picks, acts, order_rows }
            })
            .collect();
        let threads = pool.active_threads();

        // Gate and up of every picked expert, in one region. Every value of
        // the scratch buffers is written before it is read.
        let n = picks.len();
        scratch.gate.resize(n * ffn, 0.0);
        scratch.up.resize(n * ffn, 0.0);
        scratch.down.resize(n * e, 0.0);
        let mut gates = split(&mut scratch.gate[..n * ffn], work.iter().map(|w| w.picks.len() * ffn));
        let mut ups = split(&mut scratch.up[..n * ffn], work.iter().map(|w| w.picks.len() * ffn));
        {
            let chunk = expert_chunk(ffn, threads);
            let mut plan: Vec<(usize, bool, Range<usize>)> = Vec::new();
            for w in 0..work.len() {
                for is_up in [false, true] {
                    plan.extend((0..ffn).step_by(chunk).map(|s| (w, is_up, s..(s + chunk).min(ffn))));
                }
            }
            let gates: Vec<DisjointSlice<f32>> = gates.iter_mut().map(|g| DisjointSlice::new(g)).collect();
            let ups: Vec<DisjointSlice<f32>> = ups.iter_mut().map(|u| DisjointSlice::new(u)).collect();
            pool.run(plan.len(), &|t| {
                let (w, is_up, cols) = plan[t].clone();
                let work = &work[w];
                let (m, out) =
                    if is_up { (&self.up[work.expert], &ups[w]) } else { (&self.gate[work.expert], &gates[w]) };
                // SAFETY: the plan's column ranges are disjoint within each output.
                unsafe { m.expert_cols(&work.acts, work.picks.len(), work.order_rows, cols, out, ffn) };
            });
        }
        for ((g, u), w) in gates.iter_mut().zip(ups.iter_mut()).zip(&work) {
            // `ggml_add_id`: each pick's rows get its expert's biases.
            for (bias, out) in [(&self.biases.gate, &mut **g), (&self.biases.up, &mut **u)] {
                if let Some(b) = bias {
                    let b = &b[w.expert * ffn..(w.expert + 1) * ffn];
                    out.chunks_exact_mut(ffn).for_each(|row| vec_ops::add(row, b));
                }
            }
            match self.config.activation {
                ExpertActivation::Silu => vec_ops::silu_mul(g, u),
                ExpertActivation::SwigluOai { alpha, limit } => vec_ops::swiglu_oai(g, u, alpha, limit),
                ExpertActivation::Gelu => vec_ops::gelu_mul(g, u),
            }
        }

        // Down of every picked expert, in one region.
        let acts: Vec<Activations> =
            work.iter().zip(&gates).map(|(w, g)| Activations::for_matrices(g, [&self.down[w.expert]])).collect();
        let mut downs = split(&mut scratch.down[..n * e], work.iter().map(|w| w.picks.len() * e));
        {
            let chunk = expert_chunk(e, threads);
            let plan: Vec<(usize, Range<usize>)> =
                (0..work.len()).flat_map(|w| (0..e).step_by(chunk).map(move |s| (w, s..(s + chunk).min(e)))).collect();
            let downs: Vec<DisjointSlice<f32>> = downs.iter_mut().map(|d| DisjointSlice::new(d)).collect();
            pool.run(plan.len(), &|t| {
                let (w, cols) = plan[t].clone();
                let work = &work[w];
                // SAFETY: as above.
                unsafe {
                    self.down[work.expert].expert_cols(&acts[w], work.picks.len(), work.order_rows, cols, &downs[w], e)
                };
            });
        }

        if let Some(scale) = &self.down_scale {
            // `build_lora_mm_id`: the product times its expert's scale.
            for (d, w) in downs.iter_mut().zip(&work) {
                vec_ops::scale(d, scale[w.expert]);
            }
        }
        if let Some(b) = &self.biases.down {
            for (d, w) in downs.iter_mut().zip(&work) {
                let b = &b[w.expert * e..(w.expert + 1) * e];
                d.chunks_exact_mut(e).for_each(|row| vec_ops::add(row, b));
            }
        }

        // Each row's experts weighted and added in the order they were picked.
        let mut by_pick: Vec<&[f32]> = vec![&[]; picks.len()];
        for (w, work) in work.iter().enumerate() {
            for (j, &i) in work.picks.iter().enumerate() {
                by_pick[i] = &downs[w][j * e..(j + 1) * e];
            }
        }
        for (r, row) in out.chunks_exact_mut(e).enumerate().take(rows) {
            for slot in 0..used {
                let i = r * used + slot;
                let (d, weight) = (by_pick[i], picks[i].weight);
                if slot == 0 {
                    row.iter_mut().zip(d).for_each(|(o, &d)| *o = d * weight);
                } else {
                    row.iter_mut().zip(d).for_each(|(o, &d)| *o += d * weight);
                }
            }
        }
        Ok(())
    }

    /// Picks this row's experts from its router logits (overwritten).
    fn route(&self, logits: &mut [f32]) -> Vec<Pick> {
        route(&self.config, self.selection_bias.as_deref(), logits)
    }
}

/// Picks a row's experts from its router logits (overwritten), as
/// `config` gates them, with `selection_bias` added for the picking only:
/// the experts in pick order, each with its weight.
pub(super) fn route(config: &ExpertsConfig, selection_bias: Option<&[f32]>, logits: &mut [f32]) -> Vec<Pick> {
    match config.gating {
        Gating::Softmax => attention::softmax_f32(logits),
        // ggml_sigmoid: 1 / (1 + e^−x), in f32.
        Gating::Sigmoid => logits.iter_mut().for_each(|l| *l = 1.0 / (1.0 + (-*l).exp())),
        Gating::SoftmaxWeight => {}
    }
    let probs: &[f32] = logits;
    // Picked by the probabilities plus the selection bias, where there is one.
    let selection: Vec<f32> = match selection_bias {
        Some(b) => probs.iter().zip(b).map(|(&p, &b)| p + b).collect(),
        None => probs.to_vec(),
    };
    let mut order: Vec<usize> = (0..probs.len()).collect();
    // Largest first; ties to the lower id.
    order.sort_by(|&a, &b| selection[b].total_cmp(&selection[a]).then(a.cmp(&b)));
    order.truncate(config.used);
    let mut weights: Vec<f32> = order.iter().map(|&x| probs[x]).collect();
    if config.gating == Gating::SoftmaxWeight {
        // The picked logits, in pick order, through `soft_max`.
        attention::softmax_f32(&mut weights);
    }
    if config.normalize_weights {
        let sum = (weights.iter().map(|&w| w as f64).sum::<f64>() as f32).max(MIN_WEIGHT_SUM);
        weights.iter_mut().for_each(|w| *w /= sum);
    }
    if let Some(s) = config.weights_scale {
        weights.iter_mut().for_each(|w| *w *= s);
    }
    order.into_iter().zip(weights).map(|(expert, weight)| Pick { expert, weight }).collect()
}

/// Buffers the experts of every layer of a pass reuse: fresh ones each
/// layer cost page faults and TLB shootdowns on every core.
#[derive(Default)]
pub(super) struct ExpertScratch {
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
}

/// `buf` cut into consecutive pieces of `sizes`.
fn split(mut buf: &mut [f32], sizes: impl Iterator<Item = usize>) -> Vec<&mut [f32]> {
    let mut pieces = Vec::new();
    for size in sizes {
        let (piece, rest) = std::mem::take(&mut buf).split_at_mut(size);
        pieces.push(piece);
        buf = rest;
    }
    pieces
}

/// Weight rows per task of an expert's matrix: a share per thread, in
/// eights (the repacked layouts' groups). Experts are small matrices and
/// many of them run in one region, so smaller tasks would only add claims
/// and break the weights' streaming.
fn expert_chunk(rows: usize, threads: usize) -> usize {
    rows.div_ceil(threads.max(1)).next_multiple_of(8).max(8)
}

/// One expert a row picked, with its weight.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pick {
    pub expert: usize,
    pub weight: f32,
}

/// One picked expert's share of a pass.
struct Work {
    expert: usize,
    /// Indices into the pass's picks (row · used + slot), in row order.
    picks: Vec<usize>,
    /// Those rows of the FFN input, rounded for the expert's gate and up.
    acts: Activations,
    /// The row count that decides the summation order (see `expert_cols`).
    order_rows: usize,
}

/// The f32 bias `name` of `dims` (rows first), where the file has it.
pub(super) fn bias(file: &mut GgufFile, name: &str, dims: &[usize]) -> Result<Option<Vec<f32>>> {
    if !file.has_tensor(name) {
        return Ok(None);
    }
    super::check_shape(file, name, dims)?;
    Ok(Some(super::host_vector(file, name, &candle_core::Device::Cpu)?))
}

/// A 3-D expert tensor `[count, rows, cols]` as `PARTS` matrices per
/// expert, each of `rows / PARTS` consecutive rows.
fn load_experts<const PARTS: usize>(
    file: &mut GgufFile,
    name: &str,
    count: usize,
    rows: usize,
    cols: usize,
) -> Result<Vec<[QuantMatrix; PARTS]>> {
    let info = file.tensor_info(name).ok_or_else(|| file.corrupt(format!("missing tensor {name}")))?;
    if info.dims != [count, rows, cols] {
        return Err(file.corrupt(format!(
            "tensor {name} has shape {:?}, expected [{count}, {rows}, {cols}] (experts, rows, columns)",
            info.dims
        )));
    }
    let raw = file.raw_tensor(name)?;
    if raw.data.len() % (count * PARTS) != 0 {
        return Err(file.corrupt(format!("tensor {name} does not split into {count} experts")));
    }
    let part = raw.data.len() / (count * PARTS);
    let matrix = |bytes: &[u8]| match QuantMatrix::from_raw(raw.dtype, &[rows / PARTS, cols], bytes) {
        Ok(m) => Ok(m),
        Err(_) if !raw.dtype.is_runnable() => Err(file.unsupported_type(name, raw.dtype)),
        Err(why) => Err(file.corrupt(format!("tensor {name} {why}"))),
    };
    raw.data
        .chunks_exact(part * PARTS)
        .map(|expert| {
            let parts: Vec<QuantMatrix> = expert.chunks_exact(part).map(matrix).collect::<Result<_>>()?;
            Ok(parts.try_into().unwrap_or_else(|_| unreachable!("PARTS chunks of PARTS · part bytes")))
        })
        .collect()
}
