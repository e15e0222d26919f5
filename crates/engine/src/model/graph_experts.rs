//! A mixture of experts in the graph pass (what a GPU runs): each expert's
//! matrices are candle tensors on the device, cut from the file's 3-D
//! tensors.
//!
//! The router's logits come back to the host, which picks each row's
//! experts as the CPU's pass does (`experts::route`, with the router's
//! biases and a selection bias where the file has them): that is the one
//! host step, since candle has no top-k. Then each picked expert runs once
//! on the rows that picked it (gathered with `index_select`), with its
//! biases (gpt-oss) and its activation (SiLU, or gpt-oss's clamped SwiGLU),
//! and its output, times each row's weight, is added into those rows on
//! the device. (candle's fused CUDA kernel, `indexed_moe_forward`, has no
//! CPU form, so it could not be tested here; this form runs the same on
//! both.) MXFP4 experts arrive as Q8_0, which holds their values exactly
//! (`GgufFile::tensor_parts`). Gemma 4's experts add GELU, a scale per
//! expert and a router input of their own; a fused gate and up is cut in
//! two per expert.
//!
//! A shared expert (Qwen 3.5) runs beside them as a dense FFN (`mod.rs`).

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use super::config::{ExpertActivation, ExpertsConfig};
use super::experts::{bias, route};
use crate::error::Result;
use crate::gguf::GgufFile;

/// One layer's experts and router on the device.
pub(super) struct GraphExperts {
    router: QMatMul,
    /// The router's biases (gpt-oss), added on the host before routing.
    router_bias: Option<Vec<f32>>,
    /// `exp_probs_b`: added for the picking only (GLM-4.5, DeepSeek V3).
    selection_bias: Option<Vec<f32>>,
    gate: Vec<QMatMul>,
    up: Vec<QMatMul>,
    down: Vec<QMatMul>,
    /// Each expert's gate, up and down biases, a row per expert (gpt-oss).
    gate_bias: Option<Tensor>,
    up_bias: Option<Tensor>,
    down_bias: Option<Tensor>,
    /// `ffn_down_exps.scale`: each expert's output times its number (Gemma 4).
    down_scale: Option<Vec<f32>>,
    config: ExpertsConfig,
    bytes_per_token: usize,
}

impl GraphExperts {
    /// Layer `prefix`'s router and `ffn_{gate,up,down}_exps` on `device`.
    pub(super) fn load(
        file: &mut GgufFile,
        prefix: &str,
        n_embd: usize,
        config: &ExpertsConfig,
        device: &Device,
    ) -> Result<Self> {
        let (count, ffn) = (config.count, config.ffn_len);
        let load = |file: &mut GgufFile, name: &str, rows: usize, cols: usize| -> Result<Vec<QTensor>> {
            let name = format!("{prefix}.{name}.weight");
            super::check_shape(file, &name, &[count, rows, cols])?;
            file.tensor_parts(&name, count, device)
        };
        let fused = format!("{prefix}.ffn_gate_up_exps.weight");
        let (gate, up) = if file.has_tensor(&fused) {
            // Each expert's gate rows, then its up rows.
            super::check_shape(file, &fused, &[count, 2 * ffn, n_embd])?;
            let raw = file.raw_tensor(&fused)?;
            let half = raw.data.len() / count / 2;
            let (mut gate, mut up) = (Vec::with_capacity(count), Vec::with_capacity(count));
            for expert in raw.data.chunks_exact(2 * half) {
                gate.push(file.qtensor(&fused, raw.dtype, &expert[..half], vec![ffn, n_embd], device)?);
                up.push(file.qtensor(&fused, raw.dtype, &expert[half..], vec![ffn, n_embd], device)?);
            }
            (gate, up)
        } else {
            (load(file, "ffn_gate_exps", ffn, n_embd)?, load(file, "ffn_up_exps", ffn, n_embd)?)
        };
        let down = load(file, "ffn_down_exps", n_embd, ffn)?;
        let router_name = format!("{prefix}.ffn_gate_inp.weight");
        super::check_shape(file, &router_name, &[count, n_embd])?;
        let router = file.tensor(&router_name, device)?;
        let one = gate[0].storage_size_in_bytes() + up[0].storage_size_in_bytes() + down[0].storage_size_in_bytes();
        let bytes_per_token = router.storage_size_in_bytes() + one * config.used;
        let matmuls = |ts: Vec<QTensor>| -> Result<Vec<QMatMul>> {
            Ok(ts.into_iter().map(QMatMul::from_qtensor).collect::<candle_core::Result<_>>()?)
        };
        let rows_of = |file: &mut GgufFile, name: &str, width: usize| -> Result<Option<Tensor>> {
            match bias(file, &format!("{prefix}.{name}"), &[count, width])? {
                Some(b) => Ok(Some(Tensor::from_vec(b, (count, width), device)?)),
                None => Ok(None),
            }
        };
        let (gate_bias, up_bias) = match bias(file, &format!("{prefix}.ffn_gate_up_exps.bias"), &[count, 2 * ffn])? {
            // Each expert's gate biases, then its up ones.
            Some(both) => {
                let (mut g, mut u) = (Vec::with_capacity(count * ffn), Vec::with_capacity(count * ffn));
                for expert in both.chunks_exact(2 * ffn) {
                    g.extend_from_slice(&expert[..ffn]);
                    u.extend_from_slice(&expert[ffn..]);
                }
                (Some(Tensor::from_vec(g, (count, ffn), device)?), Some(Tensor::from_vec(u, (count, ffn), device)?))
            }
            None => (rows_of(file, "ffn_gate_exps.bias", ffn)?, rows_of(file, "ffn_up_exps.bias", ffn)?),
        };
        let down_bias = rows_of(file, "ffn_down_exps.bias", n_embd)?;
        Ok(Self {
            router: QMatMul::from_qtensor(router)?,
            router_bias: bias(file, &format!("{prefix}.ffn_gate_inp.bias"), &[count])?,
            selection_bias: bias(file, &format!("{prefix}.exp_probs_b.bias"), &[count])?,
            gate: matmuls(gate)?,
            up: matmuls(up)?,
            down: matmuls(down)?,
            gate_bias,
            up_bias,
            down_bias,
            down_scale: bias(file, &format!("{prefix}.ffn_down_exps.scale"), &[count])?,
            config: config.clone(),
            bytes_per_token,
        })
    }

    /// Bytes of weights one token reads: the router and `used` experts.
    pub(super) fn bytes_per_token(&self) -> usize {
        self.bytes_per_token
    }

    /// `Σ_k w_k · down_k(act(gate_k(h), up_k(h)))` for every row of `h`
    /// (`[…, n_embd]`, the normed FFN input), in `h`'s shape, the experts
    /// picked from `router_input` (Gemma 4's own) or else from `h`.
    pub(super) fn forward(&self, h: &Tensor, router_input: Option<&Tensor>) -> Result<Tensor> {
        let e = h.dim(candle_core::D::Minus1)?;
        let rows = h.elem_count() / e;
        let x = h.reshape((rows, e))?;
        let device = x.device();
        // The host step: each row's experts and weights.
        let routed = match router_input {
            Some(r) => r.reshape((rows, e))?,
            None => x.clone(),
        };
        let logits: Vec<Vec<f32>> = self.router.forward(&routed)?.to_dtype(DType::F32)?.to_vec2()?;
        let mut rows_of: Vec<Vec<u32>> = vec![Vec::new(); self.config.count];
        let mut weights_of: Vec<Vec<f32>> = vec![Vec::new(); self.config.count];
        for (r, mut row) in logits.into_iter().enumerate() {
            if let Some(b) = &self.router_bias {
                row.iter_mut().zip(b).for_each(|(l, b)| *l += b);
            }
            for pick in route(&self.config, self.selection_bias.as_deref(), &mut row) {
                rows_of[pick.expert].push(r as u32);
                weights_of[pick.expert].push(pick.weight);
            }
        }
        // An expert's bias row, added to each of its rows (`ggml_add_id`).
        let biased = |t: Tensor, bias: &Option<Tensor>, expert: usize| -> candle_core::Result<Tensor> {
            match bias {
                Some(b) => t.broadcast_add(&b.narrow(0, expert, 1)?),
                None => Ok(t),
            }
        };
        let mut out = Tensor::zeros((rows, e), DType::F32, device)?;
        for (expert, (picked, weights)) in rows_of.into_iter().zip(weights_of).enumerate() {
            if picked.is_empty() {
                continue;
            }
            let n = picked.len();
            let index = Tensor::from_vec(picked, n, device)?;
            let xs = x.index_select(&index, 0)?;
            let gate = biased(self.gate[expert].forward(&xs)?, &self.gate_bias, expert)?;
            let up = biased(self.up[expert].forward(&xs)?, &self.up_bias, expert)?;
            let act = match self.config.activation {
                ExpertActivation::SwigluOai { alpha, limit } => swiglu_oai(&gate, &up, alpha, limit)?,
                ExpertActivation::Gelu => (super::graph::gelu_as_llama(&gate)? * up)?,
                ExpertActivation::Silu => (candle_nn::ops::silu(&gate)? * up)?,
            };
            let mut down = self.down[expert].forward(&act)?;
            if let Some(scale) = &self.down_scale {
                // `build_lora_mm_id`: the product times its expert's scale.
                down = (down * scale[expert] as f64)?;
            }
            let down = biased(down, &self.down_bias, expert)?;
            let weighted = down.broadcast_mul(&Tensor::from_vec(weights, (n, 1), device)?)?;
            out = out.index_add(&index, &weighted, 0)?;
        }
        Ok(out.reshape(h.shape())?)
    }
}

/// gpt-oss's SwiGLU (`vec_ops::swiglu_oai` on tensors): the gate capped
/// at `limit`, the up clamped to `±limit`, `x·σ(αx) · (y + 1)`.
fn swiglu_oai(gate: &Tensor, up: &Tensor, alpha: f32, limit: f32) -> candle_core::Result<Tensor> {
    let x = gate.minimum(limit)?;
    let y = up.clamp(-limit, limit)?;
    let glu = (&x * candle_nn::ops::sigmoid(&(&x * alpha as f64)?)?)?;
    glu * (y + 1.0)?
}
