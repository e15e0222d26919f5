//! Matrix products of the CPU pass: several weight matrices against one
//! input, its activations rounded once, all in one `WorkerPool` region.

use std::ops::Range;

use candle_core::{Device, Tensor};

use super::Matrix;
use crate::cpu::{Activations, QuantMatrix};
use crate::error::Result;
use crate::worker_pool::{DisjointSlice, WorkerPool};

/// Rows of activations per quantization or element-wise task.
pub(super) const ROWS_PER_TASK: usize = 16;

impl Matrix {
    pub(super) fn rows(&self) -> usize {
        match self {
            Matrix::Own(m) => m.rows(),
            Matrix::Candle(m) => match m {
                candle_core::quantized::QMatMul::QTensor(t) => t.shape().dims()[0],
                candle_core::quantized::QMatMul::Tensor(t) | candle_core::quantized::QMatMul::TensorF16(t) => {
                    t.dims()[0]
                }
            },
        }
    }
}

/// `out_i = x · W_iᵀ` for several matrices that share the input `x`
/// (`rows × k`, `sequence_rows` of them per sequence): one quantization of
/// `x`, one parallel region for all.
pub(super) fn matmuls(
    pool: &WorkerPool,
    x: &[f32],
    rows: usize,
    sequence_rows: usize,
    jobs: &mut [(&Matrix, &mut Vec<f32>)],
) -> Result<()> {
    let mut own = Vec::new();
    for (m, out) in jobs.iter_mut() {
        match m {
            Matrix::Own(q) => own.push((q.as_ref(), DisjointSlice::new(out.as_mut_slice()))),
            Matrix::Candle(q) => {
                // Formats without a Hearth kernel: candle's, with a copy each way.
                let k = x.len() / rows;
                let t = candle_core::Module::forward(q, &Tensor::from_slice(x, (rows, k), &Device::Cpu)?)?;
                out.copy_from_slice(&t.flatten_all()?.to_vec1::<f32>()?);
            }
        }
    }
    if own.is_empty() {
        return Ok(());
    }
    let matrices: Vec<&QuantMatrix> = own.iter().map(|(m, _)| *m).collect();
    let acts = quantize_rows(pool, x, rows, &matrices);
    let threads = pool.active_threads();
    let mut plan: Vec<(usize, Range<usize>)> = Vec::new();
    for (j, (m, _)) in own.iter().enumerate() {
        let chunk = m.columns_per_task(threads);
        plan.extend((0..m.rows()).step_by(chunk).map(|s| (j, s..(s + chunk).min(m.rows()))));
    }
    pool.run(plan.len(), &|t| {
        let (j, cols) = plan[t].clone();
        let (m, out) = &own[j];
        // SAFETY: the plan's column ranges are disjoint within each output.
        unsafe { m.matmul_cols(&acts, rows, sequence_rows, cols, out, m.rows()) };
    });
    Ok(())
}

/// Rounds the activation rows for `matrices`, a task per chunk of rows when
/// there are many (prefill).
fn quantize_rows(pool: &WorkerPool, x: &[f32], rows: usize, matrices: &[&QuantMatrix]) -> Activations {
    if rows < 2 * ROWS_PER_TASK {
        return Activations::for_matrices(x, matrices.iter().copied());
    }
    let width = x.len() / rows;
    let chunks: Vec<std::sync::Mutex<Activations>> =
        (0..rows.div_ceil(ROWS_PER_TASK)).map(|_| Default::default()).collect();
    pool.run(chunks.len(), &|t| {
        let r = t * ROWS_PER_TASK..((t + 1) * ROWS_PER_TASK).min(rows);
        let acts = Activations::for_matrices(&x[r.start * width..r.end * width], matrices.iter().copied());
        *chunks[t].lock().unwrap_or_else(|e| e.into_inner()) = acts;
    });
    let mut all = Activations::default();
    for c in chunks {
        all.extend(c.into_inner().unwrap_or_else(|e| e.into_inner()));
    }
    all
}
