//! Every weight type against reference values recorded once with the `gguf`
//! package's numpy dequantizers (`scripts/golden/record_blocks.py`), and the
//! vector kernels against the portable ones, bit for bit.

use super::matrix::{Activations, QuantMatrix};
use crate::ggml_type::GgmlType;

#[derive(Clone)]
struct Case {
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
    values: Vec<f32>,
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn cases() -> Vec<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/blocks.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let types = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Iq4Nl,
        GgmlType::Mxfp4,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Iq4Xs,
        GgmlType::F16,
        GgmlType::Bf16,
        GgmlType::F32,
    ];
    types
        .into_iter()
        .map(|dtype| {
            let c = &json[dtype.name()];
            let values = hex(c["values"].as_str().unwrap())
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            Case {
                dtype,
                rows: c["rows"].as_u64().unwrap() as usize,
                cols: c["cols"].as_u64().unwrap() as usize,
                data: hex(c["data"].as_str().unwrap()),
                values,
            }
        })
        .collect()
}

impl Case {
    /// The same rows repeated to `rows` rows: matrices whose rows come in
    /// eights take llama.cpp's repacked order for Q4_0, IQ4_NL and Q4_K.
    fn cycled(&self, rows: usize) -> Case {
        let (rb, vb) = (self.data.len() / self.rows, self.cols);
        let data = (0..rows).flat_map(|r| self.data[(r % self.rows) * rb..(r % self.rows + 1) * rb].to_vec()).collect();
        let values =
            (0..rows).flat_map(|r| self.values[(r % self.rows) * vb..(r % self.rows + 1) * vb].to_vec()).collect();
        Case { rows, data, values, ..self.clone() }
    }
}

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn every_type_dequantizes_to_the_reference_values() {
    for c in cases() {
        let m = QuantMatrix::from_raw(c.dtype, &[c.rows, c.cols], &c.data).unwrap();
        let mut row = vec![0f32; c.cols];
        for r in 0..c.rows {
            m.dequantize_row(r, &mut row);
            for (i, (a, b)) in row.iter().zip(&c.values[r * c.cols..(r + 1) * c.cols]).enumerate() {
                assert!((a - b).abs() <= 1e-6 * b.abs().max(1e-3), "{} row {r} value {i}: {a} vs {b}", c.dtype);
            }
        }
        let all = super::dequantize(c.dtype, &c.data).unwrap();
        assert_eq!(all.len(), c.values.len());
    }
}

#[test]
fn every_type_multiplies_like_its_reference_values_and_the_paths_agree_bit_for_bit() {
    for c in cases().into_iter().flat_map(|c| [c.cycled(16), c]) {
        let m = QuantMatrix::from_raw(c.dtype, &[c.rows, c.cols], &c.data).unwrap();
        // Five activation rows: one tile of four (prefill) and one alone (decode).
        // One, five (a tile of four and one alone) and nine activation rows
        // (llama.cpp's tiled order from eight rows on).
        for rows in [1, 5, 9] {
            let x = random(rows * c.cols, 3 + rows as u64);
            let mut out = vec![0f32; rows * c.rows];
            m.matmul(&x, &mut out);
            let acts = Activations::for_matrices(&x, [&m]);
            for r in 0..rows {
                for col in 0..c.rows {
                    let got = out[r * c.rows + col];
                    let portable = m.portable_dot(&acts, rows, r, col);
                    assert_eq!(
                        got.to_bits(),
                        portable.to_bits(),
                        "{}: {rows} rows, row {r} col {col}: {got} vs portable {portable}",
                        c.dtype
                    );
                    let w = &c.values[col * c.cols..(col + 1) * c.cols];
                    let xr = &x[r * c.cols..(r + 1) * c.cols];
                    let exact: f64 = w.iter().zip(xr).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let scale: f64 = w.iter().zip(xr).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
                    // Activations rounded to 8 bits: about 1/254 of each term at worst.
                    assert!(
                        (got as f64 - exact).abs() <= scale / 100.0 + 1e-5,
                        "{}: row {r} col {col}: {got} vs {exact} (scale {scale})",
                        c.dtype
                    );
                }
            }
        }
    }
}

#[test]
fn sizes_that_do_not_match_the_shape_are_refused() {
    let data = vec![0u8; 18 * 4];
    assert!(QuantMatrix::from_raw(GgmlType::Q4_0, &[2, 64], &data).is_ok());
    assert!(QuantMatrix::from_raw(GgmlType::Q4_0, &[2, 65], &data).is_err());
    assert!(QuantMatrix::from_raw(GgmlType::Q4_0, &[3, 64], &data).is_err());
    assert!(QuantMatrix::from_raw(GgmlType::Q4_0, &[usize::MAX, 64], &data).is_err());
    assert!(QuantMatrix::from_raw(GgmlType::Q4K, &[1, 288], &data).is_err());
    let err = QuantMatrix::from_raw(GgmlType::Iq2Xxs, &[1, 256], &data).err().unwrap();
    assert!(err.contains("IQ2_XXS"), "{err}");
}

#[test]
fn dot_products_equal_llama_cpps_avx2_kernels_bit_for_bit() {
    // Recorded from llama.cpp's own `ggml_vec_dot_*` (scripts/golden/record_dots.py).
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/llama_dots.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut failures = Vec::new();
    for c in cases() {
        let Some(rec) = json.get(c.dtype.name()) else { continue };
        let floats = |k: &str| -> Vec<f32> {
            hex(rec[k].as_str().unwrap()).chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
        };
        let (x, want) = (floats("x"), floats("dots"));
        let m = QuantMatrix::from_raw(c.dtype, &[c.rows, c.cols], &c.data).unwrap();
        let acts = Activations::for_matrices(&x, [&m]);
        let mut out = vec![0f32; c.rows];
        m.matmul(&x, &mut out);
        for (col, &w) in want.iter().enumerate() {
            let got = m.portable_dot(&acts, 1, 0, col);
            if got.to_bits() != w.to_bits() || out[col].to_bits() != w.to_bits() {
                failures.push(format!("{} row {col}: llama.cpp {w:e}, hearth {got:e} / {:e}", c.dtype, out[col]));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn activations_rounded_in_chunks_multiply_as_if_rounded_at_once() {
    use crate::worker_pool::DisjointSlice;
    // Prefill rounds its rows in parallel chunks and appends them; the
    // AVX-512 kernels' four-row layout must line up or not be used.
    for c in cases().into_iter().map(|c| c.cycled(16)) {
        let m = QuantMatrix::from_raw(c.dtype, &[c.rows, c.cols], &c.data).unwrap();
        let rows = 13;
        let x = random(rows * c.cols, 7);
        let run = |acts: &Activations| {
            let mut out = vec![0f32; rows * c.rows];
            let slice = DisjointSlice::new(&mut out);
            // SAFETY: this one call writes every element of `out`, and no
            // other thread can reach it.
            unsafe { m.matmul_cols(acts, rows, rows, 0..c.rows, &slice, c.rows) };
            out
        };
        let whole = run(&Activations::for_matrices(&x, [&m]));
        for split in [4, 5, 8, 12] {
            let mut parts = Activations::for_matrices(&x[..split * c.cols], [&m]);
            parts.extend(Activations::for_matrices(&x[split * c.cols..], [&m]));
            let got = run(&parts);
            assert!(
                whole.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{}: rows split after {split}",
                c.dtype
            );
        }
    }
}

#[test]
#[should_panic(expected = "activations that are not whole rows of 64 values")]
fn a_matmul_refuses_an_activation_row_too_short() {
    // Eight Q4_0 rows of 64 values (the interleaved layout), and two
    // activation rows, the second 32 values short.
    let m = QuantMatrix::from_raw(GgmlType::Q4_0, &[8, 64], &vec![0u8; 8 * 2 * 18]).unwrap();
    let mut out = vec![0f32; 2 * 8];
    m.matmul(&random(2 * 64 - 32, 1), &mut out);
}

#[test]
#[should_panic(expected = "activation rows shorter than the weight rows")]
fn a_tile_refuses_activation_rows_shorter_than_the_weight_rows() {
    use super::block32::{column_range, RowPairs};
    use super::q8::Q8Block;
    use super::q8_0::BlockQ8_0;
    // SAFETY: `BlockQ8_0` is a `repr(C)` struct of integers: all-zero bytes
    // are a valid block.
    let zero: BlockQ8_0 = unsafe { std::mem::zeroed() };
    // Two weight rows of four blocks, against activation rows of three: the
    // vector kernels would read a fourth block past the end of each.
    let blocks = vec![zero; 2 * 4];
    let y = [Q8Block { d: 1.0, s: 0.0, qs: [1; 32] }; 3];
    let mut out = vec![[0f32; 4]; 2];
    let isa = super::isa::isa();
    column_range(&blocks, 4, 0..2, 4, [&y[..]; 4], (&RowPairs::default(), 0), isa, false, &mut out);
}
