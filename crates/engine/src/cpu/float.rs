//! Unquantized weights: F32, F16 and BF16. As in llama.cpp, activations
//! are rounded to the weights' type before the dot product (F16 and BF16).
//! F32 and BF16 products are summed in `ggml_vec_dot_f32`'s order (or
//! tinyBLAS's for an f32 prompt); F16 ones as llama.cpp multiplies an f16
//! matrix, which is what attention's kernels over the f16 KV cache do:
//! `ggml_vec_dot_f16` (its leftovers in f64) per output, or tinyBLAS's f16
//! tiles for a prompt.

use std::ops::Range;

use half::{bf16, f16};

use super::{attention, vec_ops};
use crate::ggml_type::GgmlType;

/// Weight rows in their stored type.
pub(crate) enum FloatRows {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<u16>),
}

impl FloatRows {
    /// `None` for a type that is not F32, F16 or BF16.
    pub(crate) fn from_bytes(dtype: GgmlType, data: &[u8]) -> Option<Self> {
        let u16s = || data.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
        Some(match dtype {
            GgmlType::F32 => {
                Self::F32(data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
            }
            GgmlType::F16 => {
                Self::F16(data.chunks_exact(2).map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]]))).collect())
            }
            GgmlType::Bf16 => Self::Bf16(u16s()),
            _ => return None,
        })
    }

    /// Rounds activations as llama.cpp does for this weight type.
    pub(crate) fn round_activations(&self, x: &[f32]) -> Vec<f32> {
        match self {
            Self::F32(_) => x.to_vec(),
            Self::F16(_) => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
            Self::Bf16(_) => x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect(),
        }
    }

    /// Row `row` (of width `k`) as f32, into `buf` unless it is stored so.
    pub(crate) fn row<'a>(&'a self, row: usize, k: usize, buf: &'a mut Vec<f32>) -> &'a [f32] {
        let range = row * k..(row + 1) * k;
        match self {
            Self::F32(w) => &w[range],
            Self::F16(w) => {
                buf.clear();
                buf.extend(w[range].iter().map(|v| v.to_f32()));
                buf
            }
            Self::Bf16(w) => {
                buf.clear();
                buf.extend(w[range].iter().map(|&b| bf16::from_bits(b).to_f32()));
                buf
            }
        }
    }

    /// Weight rows `cols` against `rows` rounded activation rows (`x`,
    /// rows of `k`), each product given to `write(row, col, value)`.
    /// `prompt`: as `dot_rows`.
    pub(crate) fn matmul_cols(
        &self,
        k: usize,
        x: &[f32],
        rows: usize,
        cols: Range<usize>,
        prompt: bool,
        mut write: impl FnMut(usize, usize, f32),
    ) {
        let Self::F16(w) = self else {
            let mut buf = Vec::new();
            for col in cols {
                self.dot_rows(k, x, rows, col, prompt, &mut buf, |r, v| write(r, col, v));
            }
            return;
        };
        // The weight rows are keys and the activation rows queries, at
        // scale 1 (exact): `scores` tiles them in registers in llama.cpp's
        // f16 orders, tinyBLAS's where its shape allows.
        let order = if prompt { attention::Order::Prefill } else { attention::Order::Decode };
        let queries: Vec<&[f32]> = x.chunks_exact(k).take(rows).collect();
        const BLOCK: usize = 64;
        let mut tile = vec![0f32; rows * BLOCK.min(cols.len())];
        for start in cols.clone().step_by(BLOCK) {
            let block = start..(start + BLOCK).min(cols.end);
            let n = block.len();
            attention::scores(&mut tile, n, &queries, w, block.clone(), 1.0, order);
            for (r, scores) in tile.chunks_exact(n).take(rows).enumerate() {
                for (col, &v) in block.clone().zip(scores) {
                    write(r, col, v);
                }
            }
        }
    }

    /// Weight row `col` against `rows` rounded activation rows. `prompt`:
    /// the rows are one sequence's prompt, which llama.cpp multiplies with
    /// tinyBLAS (f32 weights) rather than a dot product per output.
    #[allow(clippy::too_many_arguments, reason = "a kernel's operands, inlined into its callers' loops")]
    pub(crate) fn dot_rows(
        &self,
        k: usize,
        x: &[f32],
        rows: usize,
        col: usize,
        prompt: bool,
        buf: &mut Vec<f32>,
        mut write: impl FnMut(usize, f32),
    ) {
        let w = self.row(col, k, buf);
        for r in 0..rows {
            let x = &x[r * k..(r + 1) * k];
            let tiled = if prompt && matches!(self, Self::F32(_)) { vec_ops::dot_one_accumulator(x, w) } else { None };
            write(r, tiled.unwrap_or_else(|| vec_ops::dot(x, w)));
        }
    }

    pub(crate) fn stored_bytes(&self) -> usize {
        match self {
            Self::F32(w) => w.len() * 4,
            Self::F16(w) => w.len() * 2,
            Self::Bf16(w) => w.len() * 2,
        }
    }
}
