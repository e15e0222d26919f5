//! The graph pass: [`Model::forward`] built from candle tensor ops, what
//! runs on a GPU (and, with `Kernels::Graph`, on the CPU, where tests hold
//! it to the host pass of `host.rs`). The KV cache and the embeddings are
//! tensors on the device. What candle has no op for runs on the host, said
//! where it does: the experts' routing (`graph_experts.rs`), the hybrids'
//! recurrences (`DeltaNet::forward_graph`, `ShortConv::forward_graph`) and
//! Gemma 4's per-layer table rows (`per_layer.rs`).

mod attention;

use candle_core::{DType, Device, Tensor};

use super::{delta_net, window_start, Block, Embeddings, Ffn, LayerExperts, Matrix, Mixer, Model, RopeFreqs};
use crate::error::Result;
use crate::kv_cache::KvCache;

impl Model {
    /// [`Model::forward`] built from candle tensor ops: what runs on a GPU.
    /// On the CPU it is the reference that tests hold the host pass to.
    pub fn forward_graph(&self, tokens: &[Vec<u32>], cache: &mut KvCache) -> Result<Tensor> {
        self.forward_graph_stoppable(tokens, cache, &|| false)
    }

    /// `forward_graph`, asking `stop` between the layers of a pass of
    /// several positions (see `forward_stoppable`).
    pub(super) fn forward_graph_stoppable(
        &self,
        tokens: &[Vec<u32>],
        cache: &mut KvCache,
        stop: &dyn Fn() -> bool,
    ) -> Result<Tensor> {
        self.check_tokens(tokens)?;
        let batch = tokens.len();
        let seq_len = tokens[0].len();
        cache.reserve(seq_len, batch)?;
        let pos0 = cache.len();
        let flat: Vec<u32> = tokens.iter().flatten().copied().collect();
        let mut x = self.embed_graph(&flat, batch, seq_len)?;
        let per_layer = match &self.per_layer_embeddings {
            Some(p) => Some(p.inputs_graph(&flat, &x)?),
            None => None,
        };
        let rope_global = Rope::new(self.rope_for(cache.max_len()), pos0, seq_len, &self.device)?;
        let rope_local = Rope::new(&self.rope_local, pos0, seq_len, &self.device)?;
        let mask_global = causal_mask(seq_len, pos0, 0, None, &self.device)?;
        let mask_local = match self.config.sliding_window {
            Some(w) => causal_mask(seq_len, pos0, window_start(pos0, w), Some(w), &self.device)?,
            None => None,
        };
        let positions: Vec<usize> = (pos0..pos0 + seq_len).collect();
        let temperature = self.temperature_graph(&positions, (1, 1, seq_len, 1))?;
        let mut scratch = delta_net::DeltaScratch::default();
        cache.begin_pass(seq_len);
        let mut kv = GraphKv::One(cache);
        let mut layers = || -> Result<Tensor> {
            for (i, block) in self.layers.iter().enumerate() {
                let (rope, mask, kv_start) = if block.sliding {
                    let w = self.config.sliding_window.unwrap_or(usize::MAX);
                    (&rope_local, mask_local.as_ref(), window_start(pos0, w))
                } else {
                    (&rope_global, mask_global.as_ref(), 0)
                };
                let pass = GraphLayerInputs {
                    rope,
                    mask,
                    kv_start,
                    window: None,
                    temperature: temperature.as_ref(),
                    per_layer: per_layer.as_ref(),
                };
                x = self.block_forward(block, i, &x, &pass, &mut kv, &mut scratch)?;
                // Keys and values written past the cache's length are not yet
                // part of it: stopping here leaves it as it was.
                if seq_len > 1 && i + 1 < self.layers.len() && stop() {
                    return Err(crate::EngineError::Stopped);
                }
            }
            self.logits_graph(&x.narrow(1, seq_len - 1, 1)?.contiguous()?, batch)
        };
        let run = layers();
        if self.config.recurrent.is_some() {
            // The recurrent layers' host fallback ran on the worker pool.
            crate::worker_pool::WorkerPool::global().end_pass();
        }
        match run {
            Ok(logits) => {
                cache.advance(seq_len);
                cache.end_pass(seq_len);
                Ok(logits)
            }
            Err(e) => {
                // As in the host pass: a hybrid's recurrent state, written in
                // place, goes back to its checkpoint; nothing this pass wrote
                // (to its last logits, which a GPU may fail to hold) counts.
                cache.truncate(pos0);
                Err(e)
            }
        }
    }

    /// One decode step for sequences that each have their own cache (of
    /// batch 1), in one graph pass: `tokens[i]` at `caches[i]`'s length.
    /// The weights are read once for all the rows (what makes a second
    /// conversation on a GPU nearly free); each row attends to its own
    /// cache at its own position. Logits per sequence.
    pub(super) fn forward_graph_caches(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Vec<Vec<f32>>> {
        let rows = tokens.len();
        for cache in caches.iter_mut() {
            cache.reserve(1, 1)?;
        }
        let positions: Vec<usize> = caches.iter().map(|c| c.len()).collect();
        let mut x = self.embed_graph(tokens, rows, 1)?;
        let per_layer = match &self.per_layer_embeddings {
            Some(p) => Some(p.inputs_graph(tokens, &x)?),
            None => None,
        };
        // A table row per sequence, at its own position (and, for
        // LongRoPE, by its own session's length).
        let globals: Vec<&RopeFreqs> = caches.iter().map(|c| self.rope_for(c.max_len())).collect();
        let rope_global = Rope::per_row(&globals, &positions, &self.device)?;
        let rope_local = Rope::per_row(&vec![&self.rope_local; rows], &positions, &self.device)?;
        let temperature = self.temperature_graph(&positions, (rows, 1, 1, 1))?;
        for cache in caches.iter_mut() {
            cache.begin_pass(1);
        }
        let mut scratch = delta_net::DeltaScratch::default();
        let mut kv = GraphKv::Many(caches);
        let mut layers = || -> Result<Tensor> {
            for (i, block) in self.layers.iter().enumerate() {
                let (rope, window) = match (block.sliding, self.config.sliding_window) {
                    (true, Some(w)) => (&rope_local, Some(w)),
                    (true, None) => (&rope_local, None),
                    (false, _) => (&rope_global, None),
                };
                let pass = GraphLayerInputs {
                    rope,
                    mask: None,
                    kv_start: 0,
                    window,
                    temperature: temperature.as_ref(),
                    per_layer: per_layer.as_ref(),
                };
                x = self.block_forward(block, i, &x, &pass, &mut kv, &mut scratch)?;
            }
            self.logits_graph(&x, rows)
        };
        let run = layers();
        if self.config.recurrent.is_some() {
            crate::worker_pool::WorkerPool::global().end_pass();
        }
        let GraphKv::Many(caches) = kv else { unreachable!("built over caches") };
        match run.and_then(|logits| Ok(logits.to_vec2::<f32>()?)) {
            Ok(logits) => {
                for cache in caches.iter_mut() {
                    cache.advance(1);
                    cache.end_pass(1);
                }
                Ok(logits)
            }
            Err(e) => {
                for (cache, &p) in caches.iter_mut().zip(&positions) {
                    cache.truncate(p);
                }
                Err(e)
            }
        }
    }

    /// The scaled embeddings of `flat` as `[batch, seq, n_embd]`.
    fn embed_graph(&self, flat: &[u32], batch: usize, seq_len: usize) -> Result<Tensor> {
        let mut x = match &self.embeddings {
            Embeddings::Device(t) => t.index_select(&Tensor::from_slice(flat, batch * seq_len, &self.device)?, 0)?,
            _ => Tensor::from_vec(self.embed(flat), (batch * seq_len, self.config.n_embd), &self.device)?,
        }
        .reshape((batch, seq_len, self.config.n_embd))?;
        if let Some(s) = self.embed_scale {
            x = (x * s)?;
        }
        Ok(x)
    }

    /// Mistral 3: the queries' factor at each of `positions`, shaped to
    /// multiply the queries (`[batch, heads, seq, head_dim]`).
    fn temperature_graph(&self, positions: &[usize], shape: (usize, usize, usize, usize)) -> Result<Option<Tensor>> {
        match &self.config.attention_temperature {
            Some(t) => {
                let f: Vec<f32> = positions.iter().map(|&p| t.factor(p)).collect();
                Ok(Some(Tensor::from_vec(f, shape, &self.device)?))
            }
            None => Ok(None),
        }
    }

    /// The logits `[rows, vocab]` of the last positions `x` (`[rows, 1,
    /// n_embd]`), with the host pass's `soft_cap`: Granite's scale, Gemma 2's cap.
    fn logits_graph(&self, x: &Tensor, rows: usize) -> Result<Tensor> {
        let mut logits = self.output.forward(&self.norm.forward(x)?)?.reshape((rows, self.vocab_size))?;
        if let Some(s) = self.config.logit_scale {
            logits = (logits * (1.0 / s) as f64)?;
        }
        if let Some(cap) = self.config.final_logit_softcap {
            logits = ((logits * (1.0 / cap) as f64)?.tanh()? * cap as f64)?;
        }
        Ok(logits)
    }

    fn block_forward(
        &self,
        b: &Block,
        layer: usize,
        x: &Tensor,
        pass: &GraphLayerInputs,
        kv: &mut GraphKv,
        scratch: &mut delta_net::DeltaScratch,
    ) -> Result<Tensor> {
        let h = match &b.attn_norm {
            Some(n) => n.forward(x)?,
            None => x.clone(),
        };
        let mut attn = match &b.mixer {
            Mixer::Attention(a) => self.attention_graph(a, layer, &h, pass, kv)?,
            Mixer::DeltaNet(d) => {
                d.forward_graph(crate::worker_pool::WorkerPool::global(), &h, &mut kv.sequences(&h)?, scratch)?
            }
            Mixer::ShortConv(s) => s.forward_graph(&h, &mut kv.sequences(&h)?)?,
            Mixer::Mla(m) => self.mla_graph(m, layer, &h, pass, kv)?,
        };
        if let Some(n) = &b.post_attn_norm {
            attn = n.forward(&attn)?;
        }
        if let Some(s) = self.config.residual_scale {
            attn = (attn * s as f64)?;
        }
        let x = (x + attn)?;

        let h = match &b.ffn_norm {
            Some(n) => n.forward(&x)?,
            None => x.clone(),
        };
        let mut ffn = match &b.ffn {
            Ffn::Dense { gate, up, down } => self.dense_graph(gate, up, down, &h)?,
            Ffn::DenseAndExperts(d) => {
                let LayerExperts::Graph(experts) = &d.experts else {
                    unreachable!("the graph's layers load their experts as GraphExperts")
                };
                // As the host pass: `post_norm_1(dense(h)) +
                // post_norm_2(experts(pre_norm_2(x)))`, the router reading
                // `rms_norm(x) / √n_embd · router_scale`.
                let dense = d.post_norm_1.forward(&self.dense_graph(&d.gate, &d.up, &d.down, &h)?)?;
                let e = self.config.n_embd;
                let ones = Tensor::ones(e, DType::F32, &self.device)?;
                // As the host pass: `1/√n_embd` in f32.
                let inv = 1.0f32 / (e as f32).sqrt();
                let router_in = candle_nn::ops::rms_norm(&x, &ones, self.config.rms_eps as f32)?
                    .affine(inv as f64, 0.0)?
                    .broadcast_mul(&d.router_scale_tensor)?;
                let moe = experts.forward(&d.pre_norm_2.forward(&x)?, Some(&router_in))?;
                (dense + d.post_norm_2.forward(&moe)?)?
            }
            Ffn::GraphExperts { experts, shared } => {
                let mut ffn = experts.forward(&h, None)?;
                if let Some(s) = shared {
                    // llama.cpp: moe_out + ffn_shexp · σ(gate_inp · x).
                    let mut out = self.dense_graph(&s.gate, &s.up, &s.down, &h)?;
                    if let Some(g) = &s.gate_inp {
                        out = out.broadcast_mul(&candle_nn::ops::sigmoid(&g.forward(&h)?)?)?;
                    }
                    ffn = (ffn + out)?;
                }
                ffn
            }
            _ => unreachable!("the graph's layers load their experts as GraphExperts"),
        };
        if let Some(n) = &b.post_ffn_norm {
            ffn = n.forward(&ffn)?;
        }
        if let Some(s) = self.config.residual_scale {
            ffn = (ffn * s as f64)?;
        }
        let mut x = (x + ffn)?;
        if let (Some(p), Some(inputs)) = (&b.per_layer, pass.per_layer) {
            x = p.add_graph(&x, inputs, layer)?;
        }
        if let Some(s) = b.out_scale {
            x = (x * s as f64)?;
        }
        Ok(x)
    }

    /// A gated FFN in the graph pass: `down(act(gate(h)) · up(h))`, GELU
    /// for Gemma, SiLU otherwise.
    fn dense_graph(&self, gate: &Matrix, up: &Matrix, down: &Matrix, h: &Tensor) -> Result<Tensor> {
        let gate = gate.forward(h)?;
        let act = if self.config.architecture.family().gemma_style {
            gelu_as_llama(&gate)?
        } else {
            candle_nn::ops::silu(&gate)?
        };
        Ok(down.forward(&(act * up.forward(h)?)?)?)
    }
}

/// What every layer of one graph pass reads beside its input: the RoPE
/// tables, the mask and the first cache position it attends to (a sliding
/// layer's or a full one's), Mistral 3's query factors and Gemma 4's
/// per-layer inputs.
#[derive(Clone, Copy)]
struct GraphLayerInputs<'a> {
    rope: &'a Rope,
    mask: Option<&'a Tensor>,
    /// The first cache position the pass's rows attend to, in one cache.
    kv_start: usize,
    /// A sliding layer's window, for rows of their own caches
    /// (`GraphKv::Many`), each of which starts at its own position.
    window: Option<usize>,
    temperature: Option<&'a Tensor>,
    /// Gemma 4: every layer's per-layer input (`PerLayerEmbeddings::inputs_graph`).
    per_layer: Option<&'a Tensor>,
}

/// Where a graph pass's rows keep their keys and values.
enum GraphKv<'a, 'c> {
    /// `[batch, seq]` rows in one cache, from its length on.
    One(&'a mut KvCache),
    /// One row per cache (decode steps of several conversations), each at
    /// its own length.
    Many(&'a mut [&'c mut KvCache]),
}

impl GraphKv<'_, '_> {
    /// Writes layer `layer`'s new keys and values (`new`: `[batch, heads,
    /// seq_len, …]`, no values where the keys are the values; `None` for a
    /// layer that keeps none of its own) and runs `attend` on what layer
    /// `source` holds for each cache's rows (`rows`, a range of the batch):
    /// the keys, the values and the mask, the outputs stacked back in row
    /// order.
    #[allow(
        clippy::too_many_arguments,
        reason = "the graph pass's layer, its new keys and values, the batch's shape and the attention to run"
    )]
    fn attend(
        &mut self,
        layer: usize,
        source: usize,
        new: Option<(&Tensor, Option<&Tensor>)>,
        (batch, seq_len): (usize, usize),
        pass: &GraphLayerInputs,
        attend: impl Fn(&Tensor, Option<&Tensor>, Option<&Tensor>, std::ops::Range<usize>) -> Result<Tensor>,
    ) -> Result<Tensor> {
        match self {
            GraphKv::One(cache) => {
                if let Some((k, v)) = new {
                    cache.write(layer, k, v)?;
                }
                let end = cache.len() + seq_len;
                let (k_all, v_all) = cache.view(source, pass.kv_start, end)?;
                attend(&k_all, v_all.as_ref(), pass.mask, 0..batch)
            }
            GraphKv::Many(caches) => {
                let mut out = Vec::with_capacity(caches.len());
                for (r, cache) in caches.iter_mut().enumerate() {
                    let pos = cache.len();
                    if let Some((k, v)) = new {
                        let row = |t: &Tensor| t.narrow(0, r, 1);
                        cache.write(layer, &row(k)?, v.map(row).transpose()?.as_ref())?;
                    }
                    let start = pass.window.map_or(0, |w| window_start(pos, w));
                    let (k_all, v_all) = cache.view(source, start, pos + 1)?;
                    out.push(attend(&k_all, v_all.as_ref(), None, r..r + 1)?);
                }
                Ok(Tensor::cat(&out, 0)?)
            }
        }
    }

    /// The recurrent layers' sequences: the one cache's rows (a hybrid's
    /// cache holds one sequence), or a row per cache.
    fn sequences(&mut self, h: &Tensor) -> Result<Vec<delta_net::SequenceRows<'_>>> {
        let (batch, seq, _) = h.dims3()?;
        match self {
            GraphKv::One(cache) => {
                if batch != 1 {
                    return Err(crate::EngineError::setting("batch", "a hybrid model's cache holds one sequence"));
                }
                Ok(vec![delta_net::SequenceRows { rows: 0..seq, cache }])
            }
            GraphKv::Many(caches) => Ok(caches
                .iter_mut()
                .enumerate()
                .map(|(r, cache)| delta_net::SequenceRows { rows: r..r + 1, cache })
                .collect()),
        }
    }
}

/// GELU as llama.cpp's GEGLU takes it (`vec_ops::gelu_mul`): looked up in
/// an f16 table, input and result rounded to f16, but `x` itself from 10
/// on and 0 up to −10.
pub(super) fn gelu_as_llama(t: &Tensor) -> candle_core::Result<Tensor> {
    let table = round_to_f16(&round_to_f16(t)?.gelu()?)?;
    let above = t.ge(10f64)?.where_cond(t, &table)?;
    t.le(-10f64)?.where_cond(&t.zeros_like()?, &above)
}

pub(super) fn round_to_f16(t: &Tensor) -> candle_core::Result<Tensor> {
    t.to_dtype(DType::F16)?.to_dtype(DType::F32)
}

/// cos/sin tables for just the positions of this forward pass.
struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    fn new(freqs: &RopeFreqs, pos0: usize, seq_len: usize, device: &Device) -> candle_core::Result<Self> {
        let half = freqs.half;
        let (cos, sin) = freqs.tables(pos0, seq_len);
        Ok(Self {
            cos: Tensor::from_vec(cos, (seq_len, half), device)?,
            sin: Tensor::from_vec(sin, (seq_len, half), device)?,
        })
    }

    /// Tables for rows of their own positions (`[rows, 1, half]`): each
    /// row's sequence at `positions[i]` by `freqs[i]`.
    fn per_row(freqs: &[&RopeFreqs], positions: &[usize], device: &Device) -> candle_core::Result<Self> {
        let half = freqs.first().map_or(0, |f| f.half);
        let (mut cos, mut sin) =
            (Vec::with_capacity(positions.len() * half), Vec::with_capacity(positions.len() * half));
        for (f, &p) in freqs.iter().zip(positions) {
            let (c, s) = f.tables(p, 1);
            cos.extend(c);
            sin.extend(s);
        }
        let rows = positions.len();
        Ok(Self {
            cos: Tensor::from_vec(cos, (rows, 1, half), device)?,
            sin: Tensor::from_vec(sin, (rows, 1, half), device)?,
        })
    }

    fn apply(&self, x: &Tensor, interleaved: bool) -> candle_core::Result<Tensor> {
        if interleaved {
            candle_nn::rotary_emb::rope_i(x, &self.cos, &self.sin)
        } else {
            candle_nn::rotary_emb::rope(x, &self.cos, &self.sin)
        }
    }
}

/// Additive mask `[seq_len, kv_len]` for new positions `pos0..pos0+seq_len`
/// against cache positions `kv_start..pos0+seq_len`. `None` when nothing is masked.
fn causal_mask(
    seq_len: usize,
    pos0: usize,
    kv_start: usize,
    window: Option<usize>,
    device: &Device,
) -> candle_core::Result<Option<Tensor>> {
    let kv_end = pos0 + seq_len;
    let kv_len = kv_end - kv_start;
    let mut any = false;
    let mut m = vec![0f32; seq_len * kv_len];
    for i in 0..seq_len {
        let q = pos0 + i;
        for j in 0..kv_len {
            let k = kv_start + j;
            let hidden = k > q || window.is_some_and(|w| q - k >= w);
            if hidden {
                m[i * kv_len + j] = f32::NEG_INFINITY;
                any = true;
            }
        }
    }
    if !any {
        return Ok(None);
    }
    Ok(Some(Tensor::from_vec(m, (seq_len, kv_len), device)?.to_dtype(DType::F32)?))
}
