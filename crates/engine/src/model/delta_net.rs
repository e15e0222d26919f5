//! A Gated DeltaNet layer (Qwen 3.5's recurrent layers): linear attention
//! whose state is a `head_dim × head_dim` matrix per value head, decayed
//! and corrected by the delta rule at every token.
//!
//! Per token, for the layer's normed input `x`:
//! 1. `qkv = W_qkv·x`, `z = W_z·x`, `β = σ(W_β·x)`, `g = softplus(W_α·x + dt_bias)·a`;
//! 2. `qkv` through a causal depthwise convolution over the last
//!    `conv_kernel` tokens (the earlier ones from the state), then SiLU;
//! 3. `q`, `k` L2-normed per head;
//! 4. per value head `j` (reading query and key head `j % k_heads`):
//!    `S ← S·eᵍ`, `d = (v − Sᵀk)·β`, `S ← S + k dᵀ`, `o = Sᵀq / √head_dim`;
//! 5. `o` RMS-normed per head, times `SiLU(z)`, then `W_out`.
//!
//! The numerics are llama.cpp's CPU ones: its fused `gated_delta_net` op,
//! which runs the recurrence token by token for a prompt as for a step
//! (so a chunk's state does not depend on how the prompt was cut), with
//! its `ggml_vec_dot_f32` and `ggml_vec_mad_f32` orders; `ssm_conv`'s
//! fused multiply-adds; libm's `expf` and `logf` in the sigmoids, the
//! softplus and the decay; `ggml_v_silu` for SiLU; its RMS norm, with the
//! L2 norm as an RMS norm of `eps / n` scaled by `1/√n`.

use super::config::RecurrentConfig;
use super::matmul::matmuls;
use super::Matrix;
use crate::cpu::vec_ops;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::kv_cache::KvCache;
use crate::worker_pool::{DisjointSlice, WorkerPool};

/// One recurrent layer's weights.
pub(super) struct DeltaNet {
    /// `attn_qkv`: queries, keys and values, `[conv_channels, n_embd]`.
    qkv: Matrix,
    /// `attn_gate`: the output gate `z`, `[v_heads · head_dim, n_embd]`.
    z: Matrix,
    /// `ssm_beta`: `[v_heads, n_embd]`.
    beta: Matrix,
    /// `ssm_alpha`: `[v_heads, n_embd]`.
    alpha: Matrix,
    /// `ssm_dt.bias`, `[v_heads]`.
    dt_bias: Vec<f32>,
    /// `ssm_a`: `−exp(A_log)`, `[v_heads]`.
    a: Vec<f32>,
    /// `ssm_conv1d`: `[conv_channels][conv_kernel]`, oldest tap first.
    conv: Vec<f32>,
    /// `ssm_norm`: `[head_dim]`, shared by the heads.
    norm: Vec<f32>,
    eps: f32,
    /// `ssm_out`: `[n_embd, v_heads · head_dim]`.
    out: Matrix,
    /// This layer's slot in the cache's recurrent state.
    slot: usize,
    shape: RecurrentConfig,
}

/// Where one sequence's rows of a pass are, and the cache holding its state.
pub(super) struct SequenceRows<'a> {
    pub rows: std::ops::Range<usize>,
    pub cache: &'a mut KvCache,
}

/// Scratch buffers of a pass, reused from layer to layer.
#[derive(Default)]
pub(super) struct DeltaScratch {
    qkv: Vec<f32>,
    z: Vec<f32>,
    beta: Vec<f32>,
    alpha: Vec<f32>,
    conv_out: Vec<f32>,
    heads_out: Vec<f32>,
}

impl DeltaNet {
    /// Layer `prefix`'s recurrent weights; `matmul` loads (and counts) a matrix of a given shape.
    pub(super) fn load(
        file: &mut GgufFile,
        prefix: &str,
        shape: &RecurrentConfig,
        slot: usize,
        n_embd: usize,
        eps: f32,
        matmul: &mut dyn FnMut(&mut GgufFile, &str, usize, usize) -> Result<Matrix>,
    ) -> Result<Self> {
        let (d, hv, channels) = (shape.head_dim, shape.v_heads, shape.conv_channels());
        let missing = |name: &str| {
            file.corrupt(format!(
                "recurrent layer {prefix} lacks its state tensor {prefix}.{name} (a qwen35 layer is recurrent unless every \
                 full_attention_interval-th)"
            ))
        };
        for name in
            ["attn_qkv.weight", "attn_gate.weight", "ssm_conv1d.weight", "ssm_a", "ssm_dt.bias", "ssm_norm.weight"]
        {
            if !file.has_tensor(&format!("{prefix}.{name}")) {
                return Err(missing(name));
            }
        }
        let floats = |file: &mut GgufFile, name: &str, dims: &[usize]| -> Result<Vec<f32>> {
            let full = format!("{prefix}.{name}");
            super::check_shape(file, &full, dims)?;
            let t = file.tensor(&full, &candle_core::Device::Cpu)?;
            Ok(t.dequantize(&candle_core::Device::Cpu)?.flatten_all()?.to_vec1()?)
        };
        let conv = floats(file, "ssm_conv1d.weight", &[channels, shape.conv_kernel])?;
        let dt_bias = floats(file, "ssm_dt.bias", &[hv])?;
        let a = floats(file, "ssm_a", &[hv])?;
        let norm = floats(file, "ssm_norm.weight", &[d])?;
        Ok(Self {
            qkv: matmul(file, &format!("{prefix}.attn_qkv.weight"), channels, n_embd)?,
            z: matmul(file, &format!("{prefix}.attn_gate.weight"), hv * d, n_embd)?,
            beta: matmul(file, &format!("{prefix}.ssm_beta.weight"), hv, n_embd)?,
            alpha: matmul(file, &format!("{prefix}.ssm_alpha.weight"), hv, n_embd)?,
            out: matmul(file, &format!("{prefix}.ssm_out.weight"), n_embd, hv * d)?,
            dt_bias,
            a,
            conv,
            norm,
            eps,
            slot,
            shape: shape.clone(),
        })
    }

    /// The layer's output `[rows, n_embd]` into `out` for the normed input
    /// `h` `[rows, n_embd]`, each sequence's rows read in order against (and
    /// advancing) its cache's state. `sequence_rows` as in `QuantMatrix::matmul_cols`.
    // The pass's buffers and rows, as the attention layers take them.
    #[allow(
        clippy::too_many_arguments,
        reason = "the pass's pool and scratch beside the rows, the sequences' states and the output"
    )]
    pub(super) fn forward_host(
        &self,
        pool: &WorkerPool,
        h: &[f32],
        rows: usize,
        sequence_rows: usize,
        sequences: &mut [SequenceRows],
        out: &mut Vec<f32>,
        buf: &mut DeltaScratch,
    ) -> Result<()> {
        let s = &self.shape;
        let (d, hv, channels) = (s.head_dim, s.v_heads, s.conv_channels());
        buf.qkv.resize(rows * channels, 0.0);
        buf.z.resize(rows * hv * d, 0.0);
        buf.beta.resize(rows * hv, 0.0);
        buf.alpha.resize(rows * hv, 0.0);
        matmuls(
            pool,
            h,
            rows,
            sequence_rows,
            &mut [
                (&self.qkv, &mut buf.qkv),
                (&self.z, &mut buf.z),
                (&self.beta, &mut buf.beta),
                (&self.alpha, &mut buf.alpha),
            ],
        )?;
        self.mix(pool, rows, sequences, buf);
        out.resize(rows * self.out.rows(), 0.0);
        matmuls(pool, &buf.heads_out, rows, sequence_rows, &mut [(&self.out, out)])
    }

    /// The layer in the graph pass (what a GPU runs) for the normed input
    /// `h` (`[batch, seq, n_embd]`, each of `sequences` its rows of it: a
    /// cache's rows, or a row per cache): the projections on the device,
    /// then the **host fallback**: the
    /// convolution, the delta rule and the gated norm run on the CPU
    /// against the cache's recurrent state, exactly as in the CPU's pass
    /// (one read back and one write a layer), and `ssm_out` on the device.
    /// candle has no op for the recurrence; the state stays on the host,
    /// where the cache's checkpoints and saved sessions keep it.
    pub(super) fn forward_graph(
        &self,
        pool: &WorkerPool,
        h: &candle_core::Tensor,
        sequences: &mut [SequenceRows],
        buf: &mut DeltaScratch,
    ) -> Result<candle_core::Tensor> {
        let s = &self.shape;
        let (d, hv, channels) = (s.head_dim, s.v_heads, s.conv_channels());
        let (batch, seq, _) = h.dims3()?;
        // One read back for the four projections.
        let projected = candle_core::Tensor::cat(
            &[self.qkv.forward(h)?, self.z.forward(h)?, self.beta.forward(h)?, self.alpha.forward(h)?],
            2,
        )?
        .flatten_all()?
        .to_vec1::<f32>()?;
        let width = channels + hv * d + 2 * hv;
        buf.qkv.clear();
        buf.z.clear();
        buf.beta.clear();
        buf.alpha.clear();
        for row in projected.chunks_exact(width) {
            let (qkv, rest) = row.split_at(channels);
            let (z, rest) = rest.split_at(hv * d);
            let (beta, alpha) = rest.split_at(hv);
            buf.qkv.extend_from_slice(qkv);
            buf.z.extend_from_slice(z);
            buf.beta.extend_from_slice(beta);
            buf.alpha.extend_from_slice(alpha);
        }
        self.mix(pool, batch * seq, sequences, buf);
        let heads = candle_core::Tensor::from_slice(&buf.heads_out, (batch, seq, hv * d), h.device())?;
        Ok(self.out.forward(&heads)?)
    }

    /// From the projections in `buf` (`qkv`, `z`, `beta`, `alpha`) to each
    /// row's gated, normed heads in `buf.heads_out`: the convolution and the
    /// recurrence against each sequence's state, advancing it.
    fn mix(&self, pool: &WorkerPool, rows: usize, sequences: &mut [SequenceRows], buf: &mut DeltaScratch) {
        let s = &self.shape;
        let (d, hk, hv, channels) = (s.head_dim, s.k_heads, s.v_heads, s.conv_channels());
        // llama.cpp's sigmoid and softplus are scalar libm code.
        for b in buf.beta.iter_mut() {
            *b = 1.0 / (1.0 + (-*b).exp());
        }
        for g in buf.alpha.chunks_exact_mut(hv) {
            for ((g, &bias), &a) in g.iter_mut().zip(&self.dt_bias).zip(&self.a) {
                let x = *g + bias;
                let softplus = if x > 20.0 { x } else { (1.0 + x.exp()).ln() };
                *g = softplus * a;
            }
        }

        // The convolution, each sequence's rows in order from its state.
        buf.conv_out.resize(rows * channels, 0.0);
        for seq in sequences.iter_mut() {
            let state = seq.cache.recurrent_mut().expect("a hybrid model's cache has a recurrent state");
            let (conv_state, _) = state.layer_mut(self.slot);
            for r in seq.rows.clone() {
                let input = &buf.qkv[r * channels..(r + 1) * channels];
                let output = &mut buf.conv_out[r * channels..(r + 1) * channels];
                vec_ops::causal_conv_step(conv_state, &self.conv, input, output);
            }
        }
        for row in buf.conv_out.chunks_exact_mut(channels) {
            vec_ops::silu(row);
        }
        // Queries and keys L2-normed per head.
        let inv_sqrt_d = 1.0 / (d as f32).sqrt();
        let ones = vec![1f32; d];
        let mut tmp = vec![0f32; d];
        for row in buf.conv_out.chunks_exact_mut(channels) {
            for head in row[..2 * hk * d].chunks_exact_mut(d) {
                vec_ops::rms_norm(&mut tmp, head, &ones, self.eps / d as f32);
                for (h, t) in head.iter_mut().zip(&tmp) {
                    *h = t * inv_sqrt_d;
                }
            }
        }

        // The recurrence: a task per (sequence, value head), each token in order.
        buf.heads_out.resize(rows * hv * d, 0.0);
        {
            let conv_out = &buf.conv_out;
            let (beta, gates) = (&buf.beta, &buf.alpha);
            let heads_out = DisjointSlice::new(&mut buf.heads_out);
            let mut states: Vec<(std::ops::Range<usize>, DisjointSlice<f32>)> = Vec::new();
            for seq in sequences.iter_mut() {
                let state = seq.cache.recurrent_mut().expect("a hybrid model's cache has a recurrent state");
                let (_, delta) = state.layer_mut(self.slot);
                states.push((seq.rows.clone(), DisjointSlice::new(delta)));
            }
            pool.run(states.len() * hv, &|t| {
                let (si, j) = (t / hv, t % hv);
                let (rows, state) = &states[si];
                // SAFETY: each task owns its sequence's value head `j`: its
                // state matrix and its outputs.
                let s = unsafe { state.slice(j * d * d..(j + 1) * d * d) };
                let tokens: Vec<vec_ops::DeltaToken> = rows
                    .clone()
                    .map(|r| {
                        let row = &conv_out[r * channels..(r + 1) * channels];
                        vec_ops::DeltaToken {
                            q: &row[(j % hk) * d..(j % hk + 1) * d],
                            k: &row[hk * d + (j % hk) * d..hk * d + (j % hk + 1) * d],
                            v: &row[2 * hk * d + j * d..2 * hk * d + (j + 1) * d],
                            // libm's expf, as llama.cpp's kernel takes it.
                            decay: gates[r * hv + j].exp(),
                            beta: beta[r * hv + j],
                        }
                    })
                    .collect();
                // SAFETY: as above.
                let mut outs: Vec<&mut [f32]> = rows
                    .clone()
                    .map(|r| unsafe { heads_out.slice(r * hv * d + j * d..r * hv * d + (j + 1) * d) })
                    .collect();
                vec_ops::delta_rule(s, &tokens, inv_sqrt_d, &mut outs);
            });
        }

        // Gated RMS norm per head: (RMSNorm(o)·w)·SiLU(z).
        for (o_row, z_row) in buf.heads_out.chunks_exact_mut(hv * d).zip(buf.z.chunks_exact_mut(hv * d)) {
            for (o, z) in o_row.chunks_exact_mut(d).zip(z_row.chunks_exact_mut(d)) {
                vec_ops::rms_norm(&mut tmp, o, &self.norm, self.eps);
                vec_ops::silu(z);
                for ((o, t), z) in o.iter_mut().zip(&tmp).zip(z.iter()) {
                    *o = t * z;
                }
            }
        }
    }
}
