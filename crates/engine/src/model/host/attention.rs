//! A layer's attention on the CPU around the kernels of `kernels.rs`: the
//! projections, norms and RoPE of its queries and keys, its output gate and
//! projection; DeepSeek V2's latent attention the same way.

use super::{norm_in_place, Buffers, KvRows};
use crate::cpu::vec_ops;
use crate::error::Result;
use crate::model::matmul::matmuls;
use crate::model::{mla, Attention, Matrix, Model};
use crate::worker_pool::WorkerPool;

impl Model {
    /// A layer's attention of `buf.h` into `buf.o`, its keys and values
    /// written into the caches.
    #[allow(
        clippy::too_many_arguments,
        reason = "the pass's pool, buffers, RoPE table and caches beside the layer's attention"
    )]
    pub(super) fn attention_host(
        &self,
        pool: &WorkerPool,
        a: &Attention,
        sliding: bool,
        layer: usize,
        buf: &mut Buffers,
        rope: &(Vec<f32>, Vec<f32>),
        kv: &mut KvRows,
    ) -> Result<()> {
        let c = &self.config;
        let (rows, seq) = (kv.rows(), kv.sequence_rows());
        let shape = c.attention_shape(layer);
        let hd = shape.head_dim;
        let (qd, kd) = (shape.q_width(), shape.kv_width());
        buf.q.resize(rows * qd, 0.0);
        buf.k.resize(rows * kd, 0.0);
        buf.v.resize(rows * kd, 0.0);
        buf.attn.resize(rows * qd, 0.0);
        // Projections into the caches: none for a layer that reads an
        // earlier layer's keys and values.
        let mut jobs: Vec<(&Matrix, &mut Vec<f32>)> = Vec::with_capacity(3);
        if a.gated {
            // Each head's queries, then its output gate.
            buf.q_gate.resize(rows * 2 * qd, 0.0);
            jobs.push((&a.wq.weight, &mut buf.q_gate));
        } else {
            jobs.push((&a.wq.weight, &mut buf.q));
        }
        if let Some(wk) = &a.wk {
            jobs.push((&wk.weight, &mut buf.k));
        }
        if let Some(wv) = &a.wv {
            jobs.push((&wv.weight, &mut buf.v));
        }
        matmuls(pool, &buf.h, rows, seq, &mut jobs)?;
        if a.gated {
            buf.attn_gate.resize(rows * qd, 0.0);
            for (r, both) in buf.q_gate.chunks_exact(2 * qd).enumerate() {
                for (h, head) in both.chunks_exact(2 * hd).enumerate() {
                    let at = r * qd + h * hd;
                    buf.q[at..at + hd].copy_from_slice(&head[..hd]);
                    buf.attn_gate[at..at + hd].copy_from_slice(&head[hd..]);
                }
            }
        }
        let stores = a.wk.is_some();
        if stores && a.wv.is_none() {
            // Gemma 4 without `attn_v`: the keys, before their norm, are the values.
            buf.v.copy_from_slice(&buf.k);
        }
        for (lin, out, width) in
            [(Some(&a.wq), &mut buf.q, qd), (a.wk.as_ref(), &mut buf.k, kd), (a.wv.as_ref(), &mut buf.v, kd)]
        {
            if let Some((_, bias)) = lin.and_then(|l| l.bias.as_ref()) {
                out.chunks_exact_mut(width).for_each(|row| vec_ops::add(row, bias));
            }
        }
        // Per head, or (OLMo 2) across all heads: the weight's length says.
        if let Some(n) = &a.q_norm {
            norm_in_place(n, &mut buf.q, n.host.len());
        }
        if let Some(n) = &a.k_norm {
            norm_in_place(n, &mut buf.k, n.host.len());
        }
        if a.v_norm && stores {
            // `ggml_rms_norm`: the norm without a weight.
            let mut tmp = vec![0f32; hd];
            let ones = vec![1f32; hd];
            for piece in buf.v.chunks_exact_mut(hd) {
                vec_ops::rms_norm(&mut tmp, piece, &ones, c.rms_eps as f32);
                piece.copy_from_slice(&tmp);
            }
        }
        let interleaved = c.architecture.family().interleaved_rope;
        // A batch's rows share their positions' table rows; rows over
        // several caches have a table row each.
        let table_rows = if matches!(kv, KvRows::Batch { .. }) { seq } else { rows };
        apply_rope(&mut buf.q, rope, table_rows, qd, hd, shape.rope_dims, interleaved);
        if stores {
            apply_rope(&mut buf.k, rope, table_rows, kd, hd, shape.rope_dims, interleaved);
        }
        if let Some(t) = &c.attention_temperature {
            for (r, row) in buf.q.chunks_exact_mut(qd).enumerate() {
                vec_ops::scale(row, t.factor(kv.position(r)));
            }
        }

        self.store_and_attend(pool, layer, sliding, stores, a.sinks.as_deref(), buf, kv);

        if a.gated {
            // llama.cpp's sigmoid is scalar libm code.
            for (o, &g) in buf.attn.iter_mut().zip(&buf.attn_gate) {
                *o *= 1.0 / (1.0 + (-g).exp());
            }
        }
        matmuls(pool, &buf.attn, rows, seq, &mut [(&a.wo.weight, &mut buf.o)])?;
        if let Some((_, bias)) = &a.wo.bias {
            buf.o.chunks_exact_mut(c.n_embd).for_each(|row| vec_ops::add(row, bias));
        }
        Ok(())
    }

    /// DeepSeek V2's latent attention (`mla.rs`) of `buf.h` into `buf.o`, as
    /// llama.cpp runs it with `attn_k_b` and `attn_v_b` apart: each head's
    /// query is its unrotated part times `attn_k_b` beside its rotated
    /// part; the one KV head is the normed latent beside the rotated shared
    /// key, and its first `kv_lora_rank` dimensions are also the values
    /// (`ModelConfig::values_in_keys`: stored once); each head's mix of
    /// latents leaves through `attn_v_b`.
    pub(super) fn mla_host(
        &self,
        pool: &WorkerPool,
        m: &mla::Mla,
        layer: usize,
        buf: &mut Buffers,
        rope: &(Vec<f32>, Vec<f32>),
        kv: &mut KvRows,
    ) -> Result<()> {
        let c = &self.config;
        let mla = c.mla.expect("a latent-attention layer has its shape");
        let (rows, seq) = (kv.rows(), kv.sequence_rows());
        let nh = c.attention_shape(layer).n_heads;
        let (rd, kvr, hk, hv) = (c.rope_dims, mla.kv_lora_rank, mla.head_k, mla.head_v);
        let (nope, width) = (hk - rd, kvr + rd);
        let interleaved = c.architecture.family().interleaved_rope;
        let table_rows = if matches!(kv, KvRows::Batch { .. }) { seq } else { rows };

        let mut q = vec![0f32; rows * nh * hk];
        match &m.query {
            mla::Query::Direct(wq) => matmuls(pool, &buf.h, rows, seq, &mut [(wq, &mut q)])?,
            mla::Query::LowRank { a, norm, b } => {
                let r = a.rows();
                let mut qa = vec![0f32; rows * r];
                matmuls(pool, &buf.h, rows, seq, &mut [(a, &mut qa)])?;
                norm_in_place(norm, &mut qa, r);
                matmuls(pool, &qa, rows, seq, &mut [(b, &mut q)])?;
            }
        }
        let mut kva = vec![0f32; rows * width];
        matmuls(pool, &buf.h, rows, seq, &mut [(&m.kv_a, &mut kva)])?;

        // The key: the normed latent, then the shared key rotated.
        buf.k.resize(rows * width, 0.0);
        let mut k_pe = vec![0f32; rows * rd];
        for (r, (row, pe)) in kva.chunks_exact(width).zip(k_pe.chunks_exact_mut(rd)).enumerate() {
            vec_ops::rms_norm(&mut buf.k[r * width..r * width + kvr], &row[..kvr], &m.kv_a_norm.host, m.kv_a_norm.eps);
            pe.copy_from_slice(&row[kvr..]);
        }
        apply_rope(&mut k_pe, rope, table_rows, rd, rd, rd, interleaved);
        for (row, pe) in buf.k.chunks_exact_mut(width).zip(k_pe.chunks_exact(rd)) {
            row[kvr..].copy_from_slice(pe);
        }

        // The queries: each head's unrotated part into the latent's space,
        // then its rotated part.
        let mut q_pe = vec![0f32; rows * nh * rd];
        for (src, dst) in q.chunks_exact(hk).zip(q_pe.chunks_exact_mut(rd)) {
            dst.copy_from_slice(&src[nope..]);
        }
        apply_rope(&mut q_pe, rope, table_rows, nh * rd, rd, rd, interleaved);
        buf.q.resize(rows * nh * width, 0.0);
        let mut q_nope = vec![0f32; rows * nope];
        let mut absorbed = vec![0f32; rows * kvr];
        for (h, k_b) in m.k_b.iter().enumerate() {
            for (r, dst) in q_nope.chunks_exact_mut(nope).enumerate() {
                dst.copy_from_slice(&q[(r * nh + h) * hk..(r * nh + h) * hk + nope]);
            }
            matmuls(pool, &q_nope, rows, seq, &mut [(k_b, &mut absorbed)])?;
            for r in 0..rows {
                let at = (r * nh + h) * width;
                buf.q[at..at + kvr].copy_from_slice(&absorbed[r * kvr..(r + 1) * kvr]);
                buf.q[at + kvr..at + width].copy_from_slice(&q_pe[(r * nh + h) * rd..(r * nh + h + 1) * rd]);
            }
        }
        if let Some(t) = &c.attention_temperature {
            // Mistral Large 3: the absorbed queries, as llama.cpp scales them.
            for (r, row) in buf.q.chunks_exact_mut(nh * width).enumerate() {
                vec_ops::scale(row, t.factor(kv.position(r)));
            }
        }

        buf.attn.resize(rows * nh * width, 0.0);
        self.store_and_attend(pool, layer, false, true, None, buf, kv);

        // Each head's mix of latents out through `attn_v_b`.
        let mut mixed = vec![0f32; rows * kvr];
        let mut head_out = vec![0f32; rows * hv];
        let mut out = vec![0f32; rows * nh * hv];
        for (h, v_b) in m.v_b.iter().enumerate() {
            for (r, dst) in mixed.chunks_exact_mut(kvr).enumerate() {
                let at = (r * nh + h) * width;
                dst.copy_from_slice(&buf.attn[at..at + kvr]);
            }
            matmuls(pool, &mixed, rows, seq, &mut [(v_b, &mut head_out)])?;
            for r in 0..rows {
                out[(r * nh + h) * hv..(r * nh + h + 1) * hv].copy_from_slice(&head_out[r * hv..(r + 1) * hv]);
            }
        }
        buf.o.resize(rows * c.n_embd, 0.0);
        matmuls(pool, &out, rows, seq, &mut [(&m.wo.weight, &mut buf.o)])
    }
}

/// Rotates the first `rot` dimensions of every head of `x` (`[rows, heads
/// × hd]`, row r at position `pos0 + r % seq`), pairing adjacent values
/// (GGUF's permuted llama weights) or the two halves of those dimensions
/// (NeoX); the rest pass unchanged (partial rotary). The multiply-adds are
/// fused the way GCC fuses llama.cpp's `rotate_pairs`.
#[allow(clippy::too_many_arguments, reason = "a kernel's operands, as ggml's rope takes them")]
fn apply_rope(
    x: &mut [f32],
    (cos, sin): &(Vec<f32>, Vec<f32>),
    seq: usize,
    width: usize,
    hd: usize,
    rot: usize,
    interleaved: bool,
) {
    let half = rot / 2;
    for (r, row) in x.chunks_exact_mut(width).enumerate() {
        let t = r % seq;
        let (c, s) = (&cos[t * half..(t + 1) * half], &sin[t * half..(t + 1) * half]);
        for head in row.chunks_exact_mut(hd) {
            let head = &mut head[..rot];
            if interleaved {
                for i in 0..half {
                    let (x0, x1) = (head[2 * i], head[2 * i + 1]);
                    head[2 * i] = x0.mul_add(c[i], -(x1 * s[i]));
                    head[2 * i + 1] = x0.mul_add(s[i], x1 * c[i]);
                }
            } else {
                for i in 0..half {
                    let (x0, x1) = (head[i], head[i + half]);
                    head[i] = x0.mul_add(c[i], -(x1 * s[i]));
                    head[i + half] = x0.mul_add(s[i], x1 * c[i]);
                }
            }
        }
    }
}
