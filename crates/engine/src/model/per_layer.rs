//! Gemma 4's per-layer embeddings (E2B, E4B): besides its embedding row,
//! each token has a small vector per layer, looked up in
//! `per_layer_token_embd` and mixed with a projection of the embedding;
//! each layer gates its vector by the residual and adds the projection of
//! the result back.
//!
//! The table is most of an E2B file's bytes (262,144 tokens × 35 layers ×
//! 256 values), and a pass needs one row per token, so its rows are read
//! from the file as they are needed and never loaded whole: the page cache
//! keeps the rows of the tokens a conversation uses.

use std::fs::File;
use std::path::PathBuf;

use super::matmul::matmuls;
use super::{Matrix, Norm};
use crate::cpu::vec_ops;
use crate::error::{EngineError, Result};
use crate::ggml_type::GgmlType;
use crate::gguf::GgufFile;
use crate::worker_pool::WorkerPool;

/// The model-wide half: the token table, and the projection of the
/// embedding that joins it.
pub(super) struct PerLayerEmbeddings {
    /// `per_layer_token_embd`: `[vocab, n_layers · per_layer]`.
    pub tokens: FileRows,
    /// `per_layer_model_proj`: `[n_layers · per_layer, n_embd]`.
    pub model_proj: Matrix,
    /// `per_layer_proj_norm`: `[per_layer]`.
    pub proj_norm: Norm,
}

/// One layer's half: `x += post_norm(proj(GELU(gate · x) · input))`.
pub(super) struct PerLayerInput {
    /// `inp_gate`: `[per_layer, n_embd]`.
    pub gate: Matrix,
    /// `proj`: `[n_embd, per_layer]`.
    pub proj: Matrix,
    pub post_norm: Norm,
}

impl PerLayerEmbeddings {
    /// Every layer's input for each row, `[rows, n_layers · per_layer]`, as
    /// llama.cpp's `project_per_layer_inputs` computes it from the token
    /// ids and the scaled embeddings `x` (`[rows, n_embd]`):
    /// `(rms_norm(model_proj · x / √n_embd) + table[id] · √per_layer) / √2`,
    /// the norm over each layer's share.
    pub fn inputs(&self, pool: &WorkerPool, ids: &[u32], x: &[f32], sequence_rows: usize) -> Result<Vec<f32>> {
        let rows = ids.len();
        let width = self.tokens.cols;
        let per_layer = self.proj_norm.host.len();
        let mut proj = vec![0f32; rows * width];
        matmuls(pool, x, rows, sequence_rows, &mut [(&self.model_proj, &mut proj)])?;
        let n_embd = x.len() / rows.max(1);
        vec_ops::scale(&mut proj, 1.0 / (n_embd as f32).sqrt());
        let mut normed = vec![0f32; per_layer];
        for piece in proj.chunks_exact_mut(per_layer) {
            vec_ops::rms_norm(&mut normed, piece, &self.proj_norm.host, self.proj_norm.eps);
            piece.copy_from_slice(&normed);
        }
        let table_scale = (per_layer as f32).sqrt();
        let input_scale = 1.0 / 2f32.sqrt();
        let mut row = vec![0f32; width];
        for (&id, out) in ids.iter().zip(proj.chunks_exact_mut(width)) {
            self.tokens.read_row(id as usize, &mut row)?;
            for (o, &t) in out.iter_mut().zip(&row) {
                *o = (*o + t * table_scale) * input_scale;
            }
        }
        Ok(proj)
    }
}

/// A tensor's rows read from the file one at a time.
pub(super) struct FileRows {
    file: File,
    path: PathBuf,
    offset: u64,
    dtype: GgmlType,
    row_bytes: usize,
    rows: usize,
    pub cols: usize,
}

impl FileRows {
    /// Tensor `name`, which must be `[rows, cols]` of a type Hearth reads.
    pub fn open(file: &GgufFile, name: &str, rows: usize, cols: usize) -> Result<Self> {
        super::check_shape(file, name, &[rows, cols])?;
        let info = file.tensor_info(name).expect("checked above");
        let dtype = info.dtype;
        if !dtype.is_runnable() {
            return Err(file.unsupported_type(name, dtype));
        }
        if !cols.is_multiple_of(dtype.block_size()) {
            return Err(file.corrupt(format!("{name} has rows of {cols} values, not whole {dtype} blocks")));
        }
        let (path, handle) = file.tensor_file(name)?;
        Ok(Self {
            file: handle,
            path,
            offset: info.offset,
            dtype,
            row_bytes: cols / dtype.block_size() * dtype.block_bytes(),
            rows,
            cols,
        })
    }

    /// Row `row` as f32 into `out` (`cols` long).
    pub fn read_row(&self, row: usize, out: &mut [f32]) -> Result<()> {
        assert!(row < self.rows, "row {row} of {}", self.rows);
        let mut bytes = vec![0u8; self.row_bytes];
        read_at(&self.file, &mut bytes, self.offset + (row * self.row_bytes) as u64)
            .map_err(|source| EngineError::Io { path: self.path.clone(), source })?;
        let values = crate::cpu::dequantize(self.dtype, &bytes).ok_or_else(|| EngineError::CorruptModel {
            path: self.path.clone(),
            reason: format!("a per-layer embedding row of {} does not decode", self.dtype),
        })?;
        out.copy_from_slice(&values);
        Ok(())
    }
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, buf, offset)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

impl PerLayerInput {
    /// Adds layer `layer`'s share to the residual `x` (`[rows, n_embd]`),
    /// `inputs` being every layer's (`PerLayerEmbeddings::inputs`).
    pub fn add(
        &self,
        pool: &WorkerPool,
        x: &mut [f32],
        inputs: &[f32],
        layer: usize,
        rows: usize,
        sequence_rows: usize,
    ) -> Result<()> {
        let per_layer = self.gate.rows();
        let n_embd = x.len() / rows;
        let width = inputs.len() / rows;
        let mut gated = vec![0f32; rows * per_layer];
        matmuls(pool, x, rows, sequence_rows, &mut [(&self.gate, &mut gated)])?;
        // llama.cpp: `ggml_gelu` then `ggml_mul`; its GELU is the table
        // lookup GEGLU uses, and a product with the input after it.
        for (r, g) in gated.chunks_exact_mut(per_layer).enumerate() {
            let input = &inputs[r * width + layer * per_layer..r * width + (layer + 1) * per_layer];
            vec_ops::gelu_mul(g, input);
        }
        let mut out = vec![0f32; rows * n_embd];
        matmuls(pool, &gated, rows, sequence_rows, &mut [(&self.proj, &mut out)])?;
        let mut normed = vec![0f32; n_embd];
        for (xr, o) in x.chunks_exact_mut(n_embd).zip(out.chunks_exact(n_embd)) {
            vec_ops::rms_norm(&mut normed, o, &self.post_norm.host, self.post_norm.eps);
            vec_ops::add(xr, &normed);
        }
        Ok(())
    }
}

impl PerLayerEmbeddings {
    /// [`PerLayerEmbeddings::inputs`] in the graph pass, for the tokens
    /// `ids` and the scaled embeddings `x` (`[batch, seq, n_embd]`): the
    /// projection and its norm on the device; the table's rows are read
    /// from the file on the host (the table stays on disk, as on the CPU)
    /// and go to the device, one row per token. `[batch, seq, n_layers ·
    /// per_layer]`.
    pub fn inputs_graph(&self, ids: &[u32], x: &candle_core::Tensor) -> Result<candle_core::Tensor> {
        use candle_core::Tensor;
        let (batch, seq, n_embd) = x.dims3()?;
        let (width, per_layer) = (self.tokens.cols, self.proj_norm.host.len());
        let proj = (self.model_proj.forward(x)? * (1.0 / (n_embd as f32).sqrt()) as f64)?;
        let normed = self.proj_norm.forward(&proj.reshape((batch, seq, width / per_layer, per_layer))?)?;
        let mut rows = vec![0f32; ids.len() * width];
        for (&id, row) in ids.iter().zip(rows.chunks_exact_mut(width)) {
            self.tokens.read_row(id as usize, row)?;
        }
        let table = Tensor::from_vec(rows, (batch, seq, width), x.device())?;
        let table_scale = (per_layer as f32).sqrt() as f64;
        let input_scale = (1.0 / 2f32.sqrt()) as f64;
        Ok(((normed.reshape((batch, seq, width))? + (table * table_scale)?)? * input_scale)?)
    }
}

impl PerLayerInput {
    /// [`PerLayerInput::add`] in the graph pass: `x` plus layer `layer`'s
    /// share of `inputs` (`PerLayerEmbeddings::inputs_graph`), gated by `x`.
    pub fn add_graph(
        &self,
        x: &candle_core::Tensor,
        inputs: &candle_core::Tensor,
        layer: usize,
    ) -> Result<candle_core::Tensor> {
        let per_layer = self.gate.rows();
        let input = inputs.narrow(2, layer * per_layer, per_layer)?;
        let gated = (super::graph::gelu_as_llama(&self.gate.forward(x)?)? * input)?;
        let out = self.post_norm.forward(&self.proj.forward(&gated)?)?;
        Ok((x + out)?)
    }
}
