//! A layer's attention in the graph pass: the usual kind (grouped-query,
//! gated, with sinks or a soft-cap) and DeepSeek V2's latent attention,
//! each as the host pass runs it.

use candle_core::{DType, Tensor};

use super::{round_to_f16, GraphKv, GraphLayerInputs};
use crate::error::Result;
use crate::model::{mla, Attention, Model, Norm};

impl Model {
    /// DeepSeek V2's latent attention in the graph pass, as `mla_host` runs
    /// it: each head's unrotated query taken into the latent's space by
    /// `attn_k_b`, beside its rotated part; one KV head of the normed
    /// latent beside the rotated shared key, whose first `kv_lora_rank`
    /// dimensions are the values (the cache keeps no values of its own);
    /// each head's mix of latents out through `attn_v_b`.
    pub(super) fn mla_graph(
        &self,
        m: &mla::Mla,
        layer: usize,
        h: &Tensor,
        pass: &GraphLayerInputs,
        kv: &mut GraphKv,
    ) -> Result<Tensor> {
        let c = &self.config;
        let rope = pass.rope;
        let mla = c.mla.expect("a latent-attention layer has its shape");
        let nh = c.attention_shape(layer).n_heads;
        let (rd, kvr, hk, hv) = (c.rope_dims, mla.kv_lora_rank, mla.head_k, mla.head_v);
        let (nope, width) = (hk - rd, kvr + rd);
        let (batch, seq_len, _) = h.dims3()?;
        let interleaved = c.architecture.family().interleaved_rope;
        let q = match &m.query {
            mla::Query::Direct(wq) => wq.forward(h)?,
            mla::Query::LowRank { a, norm, b } => b.forward(&norm.forward(&a.forward(h)?)?)?,
        };
        let q = q.reshape((batch, seq_len, nh, hk))?.transpose(1, 2)?;
        let q_pe = rope.apply(&q.narrow(3, nope, rd)?.contiguous()?, interleaved)?;
        let absorbed = (0..nh)
            .map(|head| m.k_b[head].forward(&q.narrow(1, head, 1)?.narrow(3, 0, nope)?.squeeze(1)?.contiguous()?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let q = Tensor::cat(&[&Tensor::stack(&absorbed, 1)?, &q_pe], 3)?;
        // Mistral Large 3's attention temperature, on the absorbed queries.
        let q = match pass.temperature {
            Some(t) => q.broadcast_mul(t)?,
            None => q,
        };

        let kva = m.kv_a.forward(h)?;
        let latent = m.kv_a_norm.forward(&kva.narrow(2, 0, kvr)?.contiguous()?)?;
        let k_pe = rope.apply(&kva.narrow(2, kvr, rd)?.reshape((batch, 1, seq_len, rd))?.contiguous()?, interleaved)?;
        let key = Tensor::cat(&[&latent.reshape((batch, 1, seq_len, kvr))?, &k_pe], 3)?;
        // Every head against the one KV head, as rows of it.
        let q = round_to_f16(&q.reshape((batch, 1, nh * seq_len, width))?)?;
        let scale = c.attention_scale.unwrap_or(1.0f32 / (width as f32).sqrt()) as f64;
        let attend = |q: &Tensor, k_all: &Tensor, mask: Option<&Tensor>, batch: usize| -> Result<Tensor> {
            let kv_len = k_all.dim(2)?;
            let mut scores = (q.matmul(&k_all.t()?)? * scale)?;
            if let Some(mask) = mask {
                scores = scores.reshape((batch, 1, nh, seq_len, kv_len))?.broadcast_add(mask)?.reshape((
                    batch,
                    1,
                    nh * seq_len,
                    kv_len,
                ))?;
            }
            let probs = round_to_f16(&candle_nn::ops::softmax_last_dim(&scores)?)?;
            Ok(probs.matmul(&k_all.narrow(3, 0, kvr)?.contiguous()?)?)
        };
        let mixed = kv.attend(layer, layer, Some((&key, None)), (batch, seq_len), pass, |k_all, _, mask, rows| {
            attend(&q.narrow(0, rows.start, rows.len())?, k_all, mask, rows.len())
        })?;
        let mixed = mixed.reshape((batch, nh, seq_len, kvr))?;
        let heads = (0..nh)
            .map(|head| m.v_b[head].forward(&mixed.narrow(1, head, 1)?.squeeze(1)?.contiguous()?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let out = Tensor::stack(&heads, 2)?.reshape((batch, seq_len, nh * hv))?;
        Ok(m.wo.forward(&out)?)
    }

    /// One attention layer of the graph pass for the normed input `h`:
    /// its keys and values written into `cache`, its output before the
    /// residual. Qwen 3.5's gated queries and partial RoPE as the host pass
    /// runs them.
    pub(super) fn attention_graph(
        &self,
        a: &Attention,
        layer: usize,
        h: &Tensor,
        pass: &GraphLayerInputs,
        kv: &mut GraphKv,
    ) -> Result<Tensor> {
        let (rope, temperature) = (pass.rope, pass.temperature);
        let c = &self.config;
        let shape = c.attention_shape(layer);
        let (nh, nkv, hd) = (shape.n_heads, shape.n_kv_heads, shape.head_dim);
        let (batch, seq_len, _) = h.dims3()?;
        let heads = |t: Tensor, n: usize| t.reshape((batch, seq_len, n, hd))?.transpose(1, 2)?.contiguous();
        let projected = a.wq.forward(h)?;
        // Gated: each head's queries, then its output gate.
        let (q, gate) = if a.gated {
            let both = projected.reshape((batch, seq_len, nh, 2 * hd))?;
            (both.narrow(3, 0, hd)?.reshape((batch, seq_len, nh * hd))?, Some(both.narrow(3, hd, hd)?))
        } else {
            (projected, None)
        };
        // Q and K normed per head, or (OLMo 2) across all heads: the
        // weight's length says.
        let normed = |t: Tensor, norm: &Option<Norm>, n: usize| -> candle_core::Result<Tensor> {
            match norm {
                Some(norm) if norm.host.len() != hd => heads(norm.forward(&t)?, n),
                Some(norm) => norm.forward(&heads(t, n)?),
                None => heads(t, n),
            }
        };
        let q = normed(q, &a.q_norm, nh)?;
        let interleaved = c.architecture.family().interleaved_rope;
        let rotate = |t: &Tensor| -> candle_core::Result<Tensor> {
            let rd = shape.rope_dims;
            if rd == hd {
                return rope.apply(t, interleaved);
            }
            if rd == 0 {
                // SmolLM3's layers without RoPE.
                return Ok(t.clone());
            }
            // Partial RoPE: the first `rope_dims` of each head turn.
            let turned = rope.apply(&t.narrow(3, 0, rd)?.contiguous()?, interleaved)?;
            Tensor::cat(&[&turned, &t.narrow(3, rd, hd - rd)?], 3)?.contiguous()
        };
        let mut q = rotate(&q)?;
        if let Some(t) = temperature {
            q = q.broadcast_mul(t)?;
        }
        // Keys and values into the cache, but for a layer that reads an
        // earlier layer's (Gemma 4's last ones).
        let new_kv = match &a.wk {
            Some(wk) => {
                let unbiased = wk.weight.forward(h)?;
                // Gemma 4 without `attn_v`: the keys, before their bias and
                // norm, are the values (as the host pass copies them).
                let v = match &a.wv {
                    Some(wv) => wv.forward(h)?,
                    None => unbiased.clone(),
                };
                let k = match &wk.bias {
                    Some((b, _)) => unbiased.broadcast_add(b)?,
                    None => unbiased,
                };
                let k = rotate(&normed(k, &a.k_norm, nkv)?)?;
                let mut v = heads(v, nkv)?;
                if a.v_norm {
                    // `ggml_rms_norm`: the norm without a weight.
                    let ones = Tensor::ones(hd, DType::F32, &self.device)?;
                    v = candle_nn::ops::rms_norm(&v, &ones, c.rms_eps as f32)?;
                }
                Some((k, v))
            }
            None => None,
        };

        // Grouped-query attention without repeating K/V: fold the query heads
        // that share a KV head into the row dimension.
        let n_rep = nh / nkv;
        let q = q.reshape((batch, nkv, n_rep * seq_len, hd))?;
        // In f32 as the host pass computes it (in f64, `1/√96` is another float).
        let scale = c.attention_scale.unwrap_or(1.0f32 / (hd as f32).sqrt()) as f64;
        let (q, scale) = if c.architecture.family().scales_queries { ((q * scale)?, 1.0) } else { (q, scale) };
        // As the CPU pass (and llama.cpp): the f16 keys meet f16-rounded
        // queries, the f16 values f16-rounded probabilities.
        let q = round_to_f16(&q)?;
        let attend =
            |q: &Tensor, k_all: &Tensor, v_all: &Tensor, mask: Option<&Tensor>, batch: usize| -> Result<Tensor> {
                let kv_len = k_all.dim(2)?;
                let mut scores = (q.matmul(&k_all.t()?)? * scale)?;
                if let Some(cap) = c.attention_softcap {
                    // Gemma 2: `cap · tanh(score / cap)`, before the mask.
                    scores = ((scores * (1.0 / cap) as f64)?.tanh()? * cap as f64)?;
                }
                if let Some(m) = mask {
                    scores = scores.reshape((batch, nkv, n_rep, seq_len, kv_len))?.broadcast_add(m)?.reshape((
                        batch,
                        nkv,
                        n_rep * seq_len,
                        kv_len,
                    ))?;
                }
                let probs = match &a.sinks_tensor {
                    // gpt-oss: each head's sink logit joins its softmax's
                    // denominator only (a column of its own, dropped after). Query
                    // head `g·n_rep + r` is row block `r` of KV head `g`.
                    Some(sinks) => {
                        let sink = sinks
                            .reshape((1, nkv, n_rep, 1, 1))?
                            .broadcast_as((batch, nkv, n_rep, seq_len, 1))?
                            .reshape((batch, nkv, n_rep * seq_len, 1))?;
                        let all = candle_nn::ops::softmax_last_dim(&Tensor::cat(&[&scores, &sink], 3)?)?;
                        all.narrow(3, 0, kv_len)?
                    }
                    None => candle_nn::ops::softmax_last_dim(&scores)?,
                };
                Ok(round_to_f16(&probs)?.matmul(&v_all.contiguous()?)?)
            };
        let new = new_kv.as_ref().map(|(k, v)| (k, Some(v)));
        let mixed = kv.attend(layer, c.kv_source[layer], new, (batch, seq_len), pass, |k_all, v_all, mask, rows| {
            let v_all = v_all
                .ok_or_else(|| crate::EngineError::CorruptCache(format!("layer {layer}'s cache holds no values")))?;
            attend(&q.narrow(0, rows.start, rows.len())?, k_all, v_all, mask, rows.len())
        })?;
        let mut attn = mixed.reshape((batch, nh, seq_len, hd))?.transpose(1, 2)?.reshape((batch, seq_len, nh * hd))?;
        if let Some(g) = gate {
            attn = (attn * candle_nn::ops::sigmoid(&g.reshape((batch, seq_len, nh * hd))?)?)?;
        }
        Ok(a.wo.forward(&attn)?)
    }
}
