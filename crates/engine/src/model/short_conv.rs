//! LFM2's recurrent layers: a short gated convolution. The input is
//! projected to three rows `b`, `c` and `x`; `b·x` runs through a causal
//! convolution of `conv_kernel` taps per channel, whose last inputs are the
//! layer's state in the cache's `RecurrentState`; `c` gates its output,
//! which `out_proj` takes back to the embedding.

use super::delta_net::SequenceRows;
use super::matmul::matmuls;
use super::Matrix;
use crate::cpu::vec_ops;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::model::config::RecurrentConfig;
use crate::worker_pool::WorkerPool;

pub(super) struct ShortConv {
    /// `shortconv.in_proj`: `b`, `c` and `x`, `n_embd` rows each.
    in_proj: Matrix,
    /// `shortconv.conv`: each channel's taps, oldest first.
    conv: Vec<f32>,
    /// `shortconv.out_proj`.
    out_proj: Matrix,
    /// Which of the cache's recurrent states is this layer's.
    slot: usize,
    n_embd: usize,
}

impl ShortConv {
    pub(super) fn load(
        file: &mut GgufFile,
        prefix: &str,
        shape: &RecurrentConfig,
        slot: usize,
        n_embd: usize,
        matmul: &mut dyn FnMut(&mut GgufFile, &str, usize, usize) -> Result<Matrix>,
    ) -> Result<Self> {
        let name = format!("{prefix}.shortconv.conv.weight");
        super::check_shape(file, &name, &[n_embd, shape.conv_kernel])?;
        let t = file.tensor(&name, &candle_core::Device::Cpu)?;
        let conv = t.dequantize(&candle_core::Device::Cpu)?.flatten_all()?.to_vec1()?;
        Ok(Self {
            in_proj: matmul(file, &format!("{prefix}.shortconv.in_proj.weight"), 3 * n_embd, n_embd)?,
            conv,
            out_proj: matmul(file, &format!("{prefix}.shortconv.out_proj.weight"), n_embd, n_embd)?,
            slot,
            n_embd,
        })
    }

    /// The layer's output `[rows, n_embd]` into `out` for the normed input
    /// `h`, each sequence's rows in order against (and advancing) its
    /// cache's state. `sequence_rows` as in `QuantMatrix::matmul_cols`.
    pub(super) fn forward_host(
        &self,
        pool: &WorkerPool,
        h: &[f32],
        rows: usize,
        sequence_rows: usize,
        sequences: &mut [SequenceRows],
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let mut bcx = vec![0f32; rows * 3 * self.n_embd];
        matmuls(pool, h, rows, sequence_rows, &mut [(&self.in_proj, &mut bcx)])?;
        let gated = self.mix(&bcx, rows, sequences);
        out.resize(rows * self.n_embd, 0.0);
        matmuls(pool, &gated, rows, sequence_rows, &mut [(&self.out_proj, out)])
    }

    /// The layer in the graph pass (a GPU's) for the normed input `h`
    /// (`[batch, seq, n_embd]`, each of `sequences` its rows of it): the
    /// projections on the device, the convolution against each cache's
    /// state on the host (the **host fallback**, exactly the CPU pass's),
    /// one read back and one write a layer.
    pub(super) fn forward_graph(
        &self,
        h: &candle_core::Tensor,
        sequences: &mut [SequenceRows],
    ) -> Result<candle_core::Tensor> {
        let (batch, seq, _) = h.dims3()?;
        let bcx = self.in_proj.forward(h)?.flatten_all()?.to_vec1::<f32>()?;
        let gated = self.mix(&bcx, batch * seq, sequences);
        let gated = candle_core::Tensor::from_vec(gated, (batch, seq, self.n_embd), h.device())?;
        Ok(self.out_proj.forward(&gated)?)
    }

    /// `c · conv(b · x)` for each row of the projections `bcx`, each
    /// sequence's rows in order against (and advancing) its state.
    fn mix(&self, bcx: &[f32], rows: usize, sequences: &mut [SequenceRows]) -> Vec<f32> {
        let e = self.n_embd;
        let mut gated = vec![0f32; rows * e];
        let mut bx = vec![0f32; e];
        let mut conv_out = vec![0f32; e];
        for seq in sequences.iter_mut() {
            let state = seq.cache.recurrent_mut().expect("a hybrid model's cache has a recurrent state");
            let (past, _) = state.layer_mut(self.slot);
            for r in seq.rows.clone() {
                let row = &bcx[r * 3 * e..(r + 1) * 3 * e];
                let (b, c, x) = (&row[..e], &row[e..2 * e], &row[2 * e..]);
                for ((o, &b), &x) in bx.iter_mut().zip(b).zip(x) {
                    *o = b * x;
                }
                vec_ops::causal_conv_step(past, &self.conv, &bx, &mut conv_out);
                for ((g, &c), &y) in gated[r * e..(r + 1) * e].iter_mut().zip(c).zip(&conv_out) {
                    *g = c * y;
                }
            }
        }
        gated
    }
}
