//! `QuantMatrix`: a weight matrix in its file's own layout, multiplied by
//! activation rows on the worker pool with the kernel for its type.

use std::ops::Range;

use super::block256::{self, Block256, Order};
use super::block32::{self, Block32, RowPairs};
use super::float::FloatRows;
use super::interleaved::{self, Interleaved, Nibbles};
use super::interleaved_q4k::{self, InterleavedQ4K};
use super::iq4_nl::BlockIq4Nl;
use super::iq4_xs::BlockIq4Xs;
use super::isa::{self, Isa};
use super::mxfp4::BlockMxfp4;
use super::prefetch::prefetch_row_ahead;
use super::q2_k::BlockQ2K;
use super::q3_k::BlockQ3K;
use super::q4_0::BlockQ4_0;
use super::q4_1::BlockQ4_1;
use super::q4_k::BlockQ4K;
use super::q5_0::BlockQ5_0;
use super::q5_1::BlockQ5_1;
use super::q5_k::BlockQ5K;
use super::q6_k::BlockQ6K;
use super::q8::{self, Q8Block, Q8KBlock, QK_K};
use super::q8_0::BlockQ8_0;
use crate::ggml_type::GgmlType;
use crate::worker_pool::{DisjointSlice, WorkerPool};

#[cfg(target_endian = "big")]
compile_error!("GGUF blocks are read in place as little-endian structs");

/// A weight matrix `[n, k]` (n rows of k values) in any type Hearth runs.
pub struct QuantMatrix {
    n: usize,
    k: usize,
    weights: Weights,
}

enum Weights {
    Q4_0(Vec<BlockQ4_0>),
    Q4_1(Vec<BlockQ4_1>),
    Q5_0(Vec<BlockQ5_0>),
    Q5_1(Vec<BlockQ5_1>),
    Q8_0(Vec<BlockQ8_0>),
    Iq4Nl(Vec<BlockIq4Nl>),
    Mxfp4(Vec<BlockMxfp4>),
    Q2K(Vec<BlockQ2K>),
    Q3K(Vec<BlockQ3K>),
    Q4K(Vec<BlockQ4K>),
    Q5K(Vec<BlockQ5K>),
    Q6K(Vec<BlockQ6K>),
    Iq4Xs(Vec<BlockIq4Xs>),
    Float(FloatRows),
    /// Q4_0, IQ4_NL or MXFP4 with rows in eights, interleaved as llama.cpp repacks them.
    Interleaved(Interleaved),
    /// Q4_K with rows in eights, interleaved as llama.cpp repacks them.
    InterleavedQ4K(InterleavedQ4K),
}

/// Calls `$body` with `$b` bound to the block vector of a 32-value format,
/// `$k` to that of a 256-value one, `$f` to float rows, or `$i` and `$j` to
/// the interleaved 32-value and Q4_K layouts.
macro_rules! by_format {
    ($w:expr, $b:ident => $b32:expr, $k:ident => $b256:expr, $f:ident => $float:expr, $i:ident => $inter:expr, $j:ident => $inter_k:expr) => {
        match $w {
            Weights::Q4_0($b) => $b32,
            Weights::Q4_1($b) => $b32,
            Weights::Q5_0($b) => $b32,
            Weights::Q5_1($b) => $b32,
            Weights::Q8_0($b) => $b32,
            Weights::Iq4Nl($b) => $b32,
            Weights::Mxfp4($b) => $b32,
            Weights::Q2K($k) => $b256,
            Weights::Q3K($k) => $b256,
            Weights::Q4K($k) => $b256,
            Weights::Q5K($k) => $b256,
            Weights::Q6K($k) => $b256,
            Weights::Iq4Xs($k) => $b256,
            Weights::Float($f) => $float,
            Weights::Interleaved($i) => $inter,
            Weights::InterleavedQ4K($j) => $inter_k,
        }
    };
}

/// The summation orders of one product, where llama.cpp has several.
#[derive(Clone, Copy)]
struct Orders {
    /// The K-quants (not repacked).
    block256: Order,
    /// A repacked Q4_K: its GEMM for rows in fours, else its GEMV.
    q4k_gemm: bool,
    /// Float weights: tinyBLAS (a prompt's rows) rather than a dot product each.
    float_prompt: bool,
}

/// GGUF's bytes as a vector of blocks.
fn blocks<B: Copy>(data: &[u8], bytes: usize) -> Vec<B> {
    assert_eq!(std::mem::size_of::<B>(), bytes, "block struct does not match GGUF's layout");
    let n = data.len() / bytes;
    let mut v: Vec<B> = Vec::with_capacity(n);
    // SAFETY: `B` is always one of the block types, each a `repr(C)` struct
    // of integers with no padding (its size is checked above), so any bytes
    // are a valid value; the copy reads `n · bytes <= data.len()` bytes and
    // fills exactly the `n` blocks reserved.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), v.as_mut_ptr() as *mut u8, n * bytes);
        v.set_len(n);
    }
    v
}

/// Activation rows rounded for the matrices that will read them.
#[derive(Default)]
pub(crate) struct Activations {
    q8: Vec<Q8Block>,
    /// `q8` in fours of rows for the AVX-512 prefill kernel.
    q8_pairs: RowPairs,
    q8k: Vec<Q8KBlock>,
    f32: Vec<f32>,
    f16: Vec<f32>,
    bf16: Vec<f32>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Rounding {
    Q8,
    Q8K,
    F32,
    F16,
    Bf16,
}

impl Activations {
    /// Rounds `x` for every matrix in `matrices`.
    pub(crate) fn for_matrices<'a>(x: &[f32], matrices: impl IntoIterator<Item = &'a QuantMatrix>) -> Self {
        let matrices: Vec<&QuantMatrix> = matrices.into_iter().collect();
        let mut acts = Self::default();
        let mut done: Vec<Rounding> = Vec::new();
        for &m in &matrices {
            let r = m.rounding();
            if done.contains(&r) {
                continue;
            }
            done.push(r);
            match (r, &m.weights) {
                (Rounding::Q8, _) => acts.q8 = q8::quantize(x),
                (Rounding::Q8K, _) => acts.q8k = q8::quantize_k(x),
                (Rounding::F32, Weights::Float(f)) => acts.f32 = f.round_activations(x),
                (Rounding::F16, Weights::Float(f)) => acts.f16 = f.round_activations(x),
                (Rounding::Bf16, Weights::Float(f)) => acts.bf16 = f.round_activations(x),
                _ => unreachable!("float roundings come from float weights"),
            }
        }
        if isa::isa() >= Isa::Avx512Vnni {
            if let Some(m) = matrices.iter().find(|m| m.reads_row_pairs()) {
                acts.q8_pairs = RowPairs::new(&acts.q8, m.cols() / 32);
            }
        }
        acts
    }

    /// Rows `rows` (of `k` values each) of these, for `matrices`: what
    /// rounding them again would give, without rounding them again.
    pub(crate) fn gather<'a>(
        &self,
        rows: &[usize],
        k: usize,
        matrices: impl IntoIterator<Item = &'a QuantMatrix>,
    ) -> Self {
        fn pick<T: Copy>(all: &[T], rows: &[usize], per_row: usize) -> Vec<T> {
            if all.is_empty() {
                return Vec::new();
            }
            rows.iter().flat_map(|&r| all[r * per_row..(r + 1) * per_row].iter().copied()).collect()
        }
        let mut acts = Self {
            q8: pick(&self.q8, rows, k / 32),
            q8_pairs: RowPairs::default(),
            q8k: pick(&self.q8k, rows, k / QK_K),
            f32: pick(&self.f32, rows, k),
            f16: pick(&self.f16, rows, k),
            bf16: pick(&self.bf16, rows, k),
        };
        if isa::isa() >= Isa::Avx512Vnni && matrices.into_iter().any(|m| m.reads_row_pairs()) {
            acts.q8_pairs = RowPairs::new(&acts.q8, k / 32);
        }
        acts
    }

    /// The rows rounded for float weights of `f`'s type.
    fn rounded_for(&self, f: &FloatRows) -> &[f32] {
        match f {
            FloatRows::F32(_) => &self.f32,
            FloatRows::F16(_) => &self.f16,
            FloatRows::Bf16(_) => &self.bf16,
        }
    }

    /// Appends `other`, rounded from the rows after this one's.
    pub(crate) fn extend(&mut self, other: Self) {
        self.q8_pairs.extend(other.q8_pairs, self.q8.len());
        self.q8.extend(other.q8);
        self.q8k.extend(other.q8k);
        self.f32.extend(other.f32);
        self.f16.extend(other.f16);
        self.bf16.extend(other.bf16);
    }
}

impl QuantMatrix {
    /// A matrix from a tensor's bytes, or why Hearth cannot run it.
    pub fn from_raw(dtype: GgmlType, dims: &[usize], data: &[u8]) -> Result<Self, String> {
        let &[n, k] = dims else { return Err(format!("is not a matrix (shape {dims:?})")) };
        if !dtype.is_runnable() {
            return Err(format!("is {dtype}"));
        }
        let bs = dtype.block_size();
        if k % bs != 0 {
            return Err(format!("has rows of {k} values, not a multiple of {dtype}'s {bs}-value blocks"));
        }
        let expected = n.checked_mul(k / bs).and_then(|b| b.checked_mul(dtype.block_bytes()));
        if expected != Some(data.len()) {
            return Err(format!(
                "holds {} bytes, but {n}×{k} {dtype} values take {}",
                data.len(),
                expected.map_or("more than 2^64".into(), |e| e.to_string())
            ));
        }
        use GgmlType as T;
        let weights = match dtype {
            T::Q4_0 if n % interleaved::ROWS == 0 => {
                Weights::Interleaved(Interleaved::new(data, n, k / 32, Nibbles::Q4_0))
            }
            T::Iq4Nl if n % interleaved::ROWS == 0 => {
                Weights::Interleaved(Interleaved::new(data, n, k / 32, Nibbles::Iq4Nl))
            }
            T::Mxfp4 if n % interleaved::ROWS == 0 => {
                Weights::Interleaved(Interleaved::new(data, n, k / 32, Nibbles::Mxfp4))
            }
            T::Q4_0 => Weights::Q4_0(blocks(data, BlockQ4_0::BYTES)),
            T::Q4_1 => Weights::Q4_1(blocks(data, BlockQ4_1::BYTES)),
            T::Q5_0 => Weights::Q5_0(blocks(data, BlockQ5_0::BYTES)),
            T::Q5_1 => Weights::Q5_1(blocks(data, BlockQ5_1::BYTES)),
            T::Q8_0 => Weights::Q8_0(blocks(data, BlockQ8_0::BYTES)),
            T::Iq4Nl => Weights::Iq4Nl(blocks(data, BlockIq4Nl::BYTES)),
            T::Mxfp4 => Weights::Mxfp4(blocks(data, BlockMxfp4::BYTES)),
            T::Q2K => Weights::Q2K(blocks(data, BlockQ2K::BYTES)),
            T::Q3K => Weights::Q3K(blocks(data, BlockQ3K::BYTES)),
            T::Q4K if n % interleaved_q4k::ROWS == 0 => {
                Weights::InterleavedQ4K(InterleavedQ4K::new(&blocks::<BlockQ4K>(data, BlockQ4K::BYTES), n, k / QK_K))
            }
            T::Q4K => Weights::Q4K(blocks(data, BlockQ4K::BYTES)),
            T::Q5K => Weights::Q5K(blocks(data, BlockQ5K::BYTES)),
            T::Q6K => Weights::Q6K(blocks(data, BlockQ6K::BYTES)),
            T::Iq4Xs => Weights::Iq4Xs(blocks(data, BlockIq4Xs::BYTES)),
            _ => Weights::Float(FloatRows::from_bytes(dtype, data).ok_or_else(|| format!("is {dtype}"))?),
        };
        Ok(Self { n, k, weights })
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    pub fn cols(&self) -> usize {
        self.k
    }

    /// Bytes the weights take in memory (as in the file).
    pub fn stored_bytes(&self) -> usize {
        by_format!(&self.weights, b => std::mem::size_of_val(b.as_slice()), k => std::mem::size_of_val(k.as_slice()), f => f.stored_bytes(), i => i.stored_bytes(), j => j.stored_bytes())
    }

    /// Whether the AVX-512 prefill kernel of this type reads `RowPairs`
    /// (the 32-value formats laid out as in the file).
    fn reads_row_pairs(&self) -> bool {
        matches!(
            self.weights,
            Weights::Q4_0(_) | Weights::Q4_1(_) | Weights::Q5_0(_) | Weights::Q5_1(_) | Weights::Q8_0(_)
        )
    }

    fn rounding(&self) -> Rounding {
        match &self.weights {
            Weights::Q4_0(_)
            | Weights::Q4_1(_)
            | Weights::Q5_0(_)
            | Weights::Q5_1(_)
            | Weights::Q8_0(_)
            | Weights::Iq4Nl(_)
            | Weights::Mxfp4(_)
            | Weights::Interleaved(_) => Rounding::Q8,
            Weights::Float(FloatRows::F32(_)) => Rounding::F32,
            Weights::Float(FloatRows::F16(_)) => Rounding::F16,
            Weights::Float(FloatRows::Bf16(_)) => Rounding::Bf16,
            _ => Rounding::Q8K,
        }
    }

    /// `out[m × n] = x[m × k] · selfᵀ`, on the global worker pool.
    pub fn matmul(&self, x: &[f32], out: &mut [f32]) {
        let m = x.len() / self.k;
        assert_eq!(x.len(), m * self.k, "activations that are not whole rows of {} values", self.k);
        assert_eq!(out.len(), m * self.n, "an output that is not {m} rows of {} values", self.n);
        let acts = Activations::for_matrices(x, [self]);
        let pool = WorkerPool::global();
        let chunk = self.columns_per_task(pool.active_threads());
        let out = DisjointSlice::new(out);
        pool.run(self.n.div_ceil(chunk), &|t| {
            let cols = t * chunk..((t + 1) * chunk).min(self.n);
            // SAFETY: each task writes columns `cols` of the `m` output rows,
            // and the tasks' column ranges are disjoint; nothing else touches
            // `out` until `run` returns.
            unsafe { self.matmul_cols(&acts, m, m, cols, &out, self.n) };
        });
    }

    /// Output columns per task: about eight tasks per thread, so that one
    /// slow thread delays a region by a small share only.
    pub(crate) fn columns_per_task(&self, threads: usize) -> usize {
        (self.n / (8 * threads.max(1))).next_multiple_of(8).clamp(8, 256)
    }

    /// Writes `out[row × ld + col]` for every activation row and every
    /// column in `cols` (a weight row each).
    ///
    /// `sequence_rows` is how many of the `rows` belong to one sequence:
    /// all of them when prefilling, one when decoding a batch of sequences.
    /// The summation order is the one llama.cpp uses for that sequence
    /// alone, so each sequence of a batch gets the bits it would get on its
    /// own (variant `b` of a batch is the reply a single run gives).
    ///
    /// # Safety
    /// No other thread may read or write those elements of `out` meanwhile
    /// (`DisjointSlice`'s contract; it checks the indices itself). Lengths
    /// need no promise: `acts` and the weights are sliced with checks, and
    /// the kernels check what they read unchecked.
    pub(crate) unsafe fn matmul_cols(
        &self,
        acts: &Activations,
        rows: usize,
        sequence_rows: usize,
        cols: Range<usize>,
        out: &DisjointSlice<f32>,
        ld: usize,
    ) {
        let orders = Orders {
            block256: Order::for_rows(sequence_rows),
            q4k_gemm: sequence_rows == rows,
            // tinyBLAS takes f32 weights only in tiles of four output rows
            // (a shared expert's one-row gate is a dot product per output).
            float_prompt: sequence_rows >= 2 && self.rows().is_multiple_of(4),
        };
        self.product_cols(acts, rows, orders, cols, out, ld)
    }

    /// `matmul_cols` for the rows that picked this matrix as one of their
    /// experts, summed as llama.cpp's `mul_mat_id` sums them: the K-quants
    /// in the order it gives `order_rows` rows (the expert's rows of one
    /// prompt; 1 for rows of separate sequences), a repacked Q4_K's GEMV for
    /// every row, a dot product per output for float weights.
    ///
    /// # Safety
    /// As `matmul_cols`.
    pub(crate) unsafe fn expert_cols(
        &self,
        acts: &Activations,
        rows: usize,
        order_rows: usize,
        cols: Range<usize>,
        out: &DisjointSlice<f32>,
        ld: usize,
    ) {
        let orders = Orders { block256: Order::for_rows(order_rows), q4k_gemm: false, float_prompt: false };
        self.product_cols(acts, rows, orders, cols, out, ld)
    }

    /// # Safety
    /// As `matmul_cols`.
    unsafe fn product_cols(
        &self,
        acts: &Activations,
        rows: usize,
        orders: Orders,
        cols: Range<usize>,
        out: &DisjointSlice<f32>,
        ld: usize,
    ) {
        let isa = isa::isa();
        by_format!(&self.weights,
            b => cols32(b, self.k / 32, (&acts.q8, &acts.q8_pairs), rows, cols, out, ld, isa),
            k => cols256(k, self.k / QK_K, &acts.q8k, rows, cols, out, ld, orders.block256, isa),
            f => {
                let x = acts.rounded_for(f);
                f.matmul_cols(self.k, x, rows, cols, orders.float_prompt, |r, col, v| out.write(r * ld + col, v));
            },
            i => i.matmul_rows(&acts.q8, rows, cols, isa, |r, col, v| out.write(r * ld + col, v)),
            j => j.matmul_rows(&acts.q8k, rows, orders.q4k_gemm, cols, isa, |r, col, v| out.write(r * ld + col, v))
        )
    }

    /// Weight row `row` as f32 (how an embedding row is looked up).
    pub(crate) fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let out = &mut out[..self.k];
        by_format!(&self.weights,
            b => {
                let kb = self.k / 32;
                b[row * kb..(row + 1) * kb].iter().zip(out.chunks_exact_mut(32)).for_each(|(b, o)| b.dequantize(o))
            },
            k => {
                let kb = self.k / QK_K;
                k[row * kb..(row + 1) * kb].iter().zip(out.chunks_exact_mut(QK_K)).for_each(|(b, o)| b.dequantize(o))
            },
            f => {
                let mut buf = Vec::new();
                out.copy_from_slice(f.row(row, self.k, &mut buf))
            },
            i => i.dequantize_row(row, out),
            j => j.dequantize_row(row, out)
        )
    }

    /// The portable dot product of weight row `col` with activation row
    /// `row` of `acts` (the reference the tiled kernels are tested against).
    #[cfg(test)]
    pub(crate) fn portable_dot(&self, acts: &Activations, rows: usize, row: usize, col: usize) -> f32 {
        by_format!(&self.weights,
            b => {
                let kb = self.k / 32;
                block32::dot(&b[col * kb..(col + 1) * kb], &acts.q8[row * kb..(row + 1) * kb])
            },
            k => {
                let kb = self.k / QK_K;
                block256::dot(&k[col * kb..(col + 1) * kb], &acts.q8k[row * kb..(row + 1) * kb], Order::for_rows(rows))
            },
            f => {
                let x = acts.rounded_for(f);
                let mut buf = Vec::new();
                let w = f.row(col, self.k, &mut buf).to_vec();
                let x = &x[row * self.k..(row + 1) * self.k];
                let prompt = rows >= 2 && self.rows().is_multiple_of(4);
                if let FloatRows::F16(h) = f {
                    use super::attention::{portable_dot, Order};
                    let order = if prompt { Order::Prefill } else { Order::Decode };
                    return portable_dot(&h[col * self.k..(col + 1) * self.k], x, order);
                }
                // A prompt's rows against f32 weights: tinyBLAS's order.
                let tiled = if prompt && matches!(f, FloatRows::F32(_)) {
                    super::vec_ops::dot_one_accumulator_portable(x, &w)
                } else {
                    None
                };
                tiled.unwrap_or_else(|| super::vec_ops::dot(x, &w))
            },
            i => i.dot(col, &acts.q8[row * (self.k / 32)..(row + 1) * (self.k / 32)]),
            j => {
                // The row-major kernel's own repacked orders, on the file's blocks.
                let kb = self.k / QK_K;
                let blocks: Vec<BlockQ4K> = (0..kb).map(|b| j.block(col, b)).collect();
                let order = if row < rows - rows % 4 { Order::RepackedGemm } else { Order::Repacked };
                block256::dot(&blocks, &acts.q8k[row * kb..(row + 1) * kb], order)
            }
        )
    }
}

/// The most rows a pass has that streams its weights as a decode step does.
const DECODE_ROWS: usize = 33;

/// A 32-value format: eight or four activation rows per tile when prefilling, one when decoding.
///
/// # Safety
/// As `QuantMatrix::matmul_cols`: no other thread may read or write
/// `out[row × ld + col]` for `row < rows`, `col` in `cols`, meanwhile.
#[allow(clippy::too_many_arguments, reason = "a kernel's operands, inlined into its callers' loops")]
unsafe fn cols32<B: Block32>(
    blocks: &[B],
    kb: usize,
    (acts, pairs): (&[Q8Block], &RowPairs),
    rows: usize,
    cols: Range<usize>,
    out: &DisjointSlice<f32>,
    ld: usize,
    isa: Isa,
) {
    debug_assert_eq!(acts.len(), rows * kb);
    let mut row = 0;
    let mut tile = vec![[0f32; 4]; cols.len()];
    let mut tile8 = Vec::new();
    while row < rows {
        // A pass of a few rows (decode steps, a verify pass) reads each
        // weight row from memory once, in its first tile, which asks for
        // rows ahead; the tiles after find them in cache.
        let streaming = row == 0 && rows <= DECODE_ROWS;
        if block32::eight_rows::<B>(pairs, row, isa) {
            tile8.resize(cols.len(), [[0f32; 4]; 2]);
            block32::column_range8::<B>(blocks, kb, cols.clone(), (pairs, row), isa, streaming, &mut tile8);
            write_rows(out, ld, &cols, row, 8, &tile8, |t, a| t[a / 4][a % 4]);
            row += 8;
            continue;
        }
        let r = (rows - row).min(4);
        let y: [&[Q8Block]; 4] = std::array::from_fn(|a| {
            let a = row + a.min(r - 1);
            &acts[a * kb..(a + 1) * kb]
        });
        block32::column_range::<B>(
            blocks,
            kb,
            cols.clone(),
            r,
            y,
            (pairs, row),
            isa,
            streaming || rows <= 4,
            &mut tile,
        );
        write_rows(out, ld, &cols, row, r, &tile, |t, a| t[a]);
        row += r;
    }
}

/// A 256-value format: one weight row against eight activation rows when
/// prefilling (four in the vector-dot order, and for what is left); one
/// against one, prefetching ahead, when decoding.
///
/// # Safety
/// As `QuantMatrix::matmul_cols`: no other thread may read or write
/// `out[row × ld + col]` for `row < rows`, `col` in `cols`, meanwhile.
#[allow(clippy::too_many_arguments, reason = "a kernel's operands, inlined into its callers' loops")]
unsafe fn cols256<B: Block256>(
    blocks: &[B],
    kb: usize,
    acts: &[Q8KBlock],
    rows: usize,
    cols: Range<usize>,
    out: &DisjointSlice<f32>,
    ld: usize,
    order: Order,
    isa: Isa,
) {
    let y = |r: usize| &acts[r * kb..(r + 1) * kb];
    let mut r = 0;
    let mut tile = if rows >= 4 { vec![[0f32; 8]; cols.len()] } else { Vec::new() };
    // Eights where the float steps are per block (the tiled orders): each
    // unpacked block serves twice the rows.
    while r + 8 <= rows && order != Order::Lanes {
        for (t, col) in tile.iter_mut().zip(cols.clone()) {
            *t = block256::dot_rows::<B, 8>(
                &blocks[col * kb..(col + 1) * kb],
                std::array::from_fn(|a| y(r + a)),
                order,
                isa,
            );
        }
        write_rows(out, ld, &cols, r, 8, &tile, |t, a| t[a]);
        r += 8;
    }
    while r + 4 <= rows {
        for (t, col) in tile.iter_mut().zip(cols.clone()) {
            let four = block256::dot_rows::<B, 4>(
                &blocks[col * kb..(col + 1) * kb],
                [y(r), y(r + 1), y(r + 2), y(r + 3)],
                order,
                isa,
            );
            t[..4].copy_from_slice(&four);
        }
        write_rows(out, ld, &cols, r, 4, &tile, |t, a| t[a]);
        r += 4;
    }
    for r in r..rows {
        for col in cols.clone() {
            prefetch_row_ahead(blocks, kb, col);
            out.write(
                r * ld + col,
                block256::dot_rows::<B, 1>(&blocks[col * kb..(col + 1) * kb], [y(r)], order, isa)[0],
            );
        }
    }
}

/// Writes a tile back: `value(&tile[i], a)` to output row `row + a`, column
/// `cols.start + i`, for `n` rows, row by row (contiguous along each output
/// row; down columns, every value would touch its own cache line).
///
/// # Safety
/// No other thread may read or write those elements of `out` meanwhile
/// (their indices are checked by `DisjointSlice::slice`).
unsafe fn write_rows<T>(
    out: &DisjointSlice<f32>,
    ld: usize,
    cols: &Range<usize>,
    row: usize,
    n: usize,
    tile: &[T],
    value: impl Fn(&T, usize) -> f32,
) {
    for a in 0..n {
        let dst = out.slice((row + a) * ld + cols.start..(row + a) * ld + cols.end);
        for (d, t) in dst.iter_mut().zip(tile) {
            *d = value(t, a);
        }
    }
}

/// Values of a whole tensor of a type Hearth runs, as f32.
pub(crate) fn dequantize(dtype: GgmlType, data: &[u8]) -> Option<Vec<f32>> {
    if data.is_empty() {
        return Some(Vec::new());
    }
    let bs = dtype.block_size();
    let per_row = if bs == 1 { data.len() / dtype.block_bytes() } else { bs };
    let m = QuantMatrix::from_raw(dtype, &[data.len() / dtype.block_bytes() * bs / per_row, per_row], data).ok()?;
    let mut out = vec![0f32; m.n * m.k];
    for (r, o) in out.chunks_exact_mut(m.k).enumerate() {
        m.dequantize_row(r, o);
    }
    Some(out)
}
