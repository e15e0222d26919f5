//! Dot products for the 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0, IQ4_NL) against activations rounded to Q8 blocks, in tiles.
//!
//! Each format says only how to unpack one block (`Block32`); the tile
//! code here is written once. Every product in a tile is computed exactly
//! as a lone dot product is, in llama.cpp's AVX2 order: eight lanes, each
//! the exact integer dot of four consecutive values, scaled into f32 lanes
//! with a fused multiply-add per block, then one horizontal sum. The
//! portable path performs the same floating-point operations.

use std::ops::Range;

use super::isa::Isa;
use super::q8::Q8Block;
use super::vec_ops::hsum8;

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// How a format's blocks combine into a dot product.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sum {
    /// Signed quants: `Σ d·dy·lanes`.
    Signed,
    /// Unsigned quants and a minimum: `Σ d·dy·lanes + Σ m·sy` (Q8_1's sums).
    WithMin,
    /// Signed, with even and odd blocks in two accumulators and an odd
    /// last block added alone (IQ4_NL's order).
    SignedPairs,
}

/// One 32-value weight block.
pub(crate) trait Block32: Copy + Send + Sync + 'static {
    const SUM: Sum;
    /// Bytes in GGUF (the struct is laid out exactly so).
    const BYTES: usize;
    /// The scale is an E8M0 exponent (MXFP4), its byte in `d_bits`, rather
    /// than an f16.
    const E8M0: bool = false;
    fn d_bits(&self) -> u16;
    fn m_bits(&self) -> u16 {
        0
    }
    /// The quants in activation order: signed values, or unsigned for `WithMin`.
    fn quants(&self) -> [i8; 32];
    /// The same quants in a register.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA (impls enable them, or are inlined
    /// into a caller that does). The block is read through `&self` only.
    #[cfg(target_arch = "x86_64")]
    unsafe fn quants_avx2(&self) -> std::arch::x86_64::__m256i;
    /// Signed quants plus 128, as unsigned bytes (VNNI multiplies unsigned
    /// by signed); called only where AVX-512 BW and VL are present.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and AVX-512 F, BW and VL. This default is
    /// inlined into its caller, which must enable them (`#[target_feature]`).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn offset_quants_avx512(&self) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        _mm256_xor_si256(self.quants_avx2(), _mm256_set1_epi8(-128))
    }

    fn dequantize(&self, out: &mut [f32]) {
        let (d, m) = (scale(self), half(self.m_bits()));
        for (o, q) in out.iter_mut().zip(self.quants()) {
            *o = if Self::SUM == Sum::WithMin { d * (q as u8) as f32 + m } else { d * q as f32 };
        }
    }
}

pub(crate) fn half(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// A block's scale: its f16 `d`, or for an E8M0 format its exponent.
pub(crate) fn scale<B: Block32>(b: &B) -> f32 {
    if B::E8M0 {
        e8m0_half(b.d_bits() as u8)
    } else {
        half(b.d_bits())
    }
}

/// An E8M0 exponent `e` as `2^(e − 128)`: half its value, as llama.cpp's
/// `GGML_E8M0_TO_FP32_HALF` (MXFP4's table holds its values doubled), with
/// the two smallest as subnormals.
pub(crate) fn e8m0_half(e: u8) -> f32 {
    f32::from_bits(if e < 2 { 0x0020_0000 << e } else { (e as u32 - 1) << 23 })
}

/// Eight lanes, each the integer dot of four consecutive values.
fn lanes<const UNSIGNED: bool>(q: &[i8; 32], y: &[i8; 32]) -> [f32; 8] {
    std::array::from_fn(|l| {
        (l * 4..l * 4 + 4)
            .map(|b| if UNSIGNED { (q[b] as u8) as i32 * y[b] as i32 } else { q[b] as i32 * y[b] as i32 })
            .sum::<i32>() as f32
    })
}

fn fma_lanes(acc: &mut [f32; 8], d: f32, l: [f32; 8]) {
    for (a, v) in acc.iter_mut().zip(l) {
        *a = d.mul_add(v, *a);
    }
}

/// The portable dot product of one weight row with one activation row.
pub(crate) fn dot<B: Block32>(x: &[B], y: &[Q8Block]) -> f32 {
    match B::SUM {
        Sum::Signed => {
            let mut acc = [0f32; 8];
            for (x, y) in x.iter().zip(y) {
                fma_lanes(&mut acc, scale(x) * y.d, lanes::<false>(&x.quants(), &y.qs));
            }
            hsum8(acc)
        }
        Sum::WithMin => {
            let mut acc = [0f32; 8];
            let mut summs = 0f32;
            for (x, y) in x.iter().zip(y) {
                summs += half(x.m_bits()) * y.s;
                fma_lanes(&mut acc, scale(x) * y.d, lanes::<true>(&x.quants(), &y.qs));
            }
            hsum8(acc) + summs
        }
        Sum::SignedPairs => {
            let mut acc = [[0f32; 8]; 2];
            let pairs = x.len() & !1;
            for (i, (x, y)) in x[..pairs].iter().zip(y).enumerate() {
                fma_lanes(&mut acc[i % 2], y.d * scale(x), lanes::<false>(&x.quants(), &y.qs));
            }
            let mut sum = hsum8(std::array::from_fn(|l| acc[0][l] + acc[1][l]));
            if pairs < x.len() {
                let (x, y) = (&x[pairs], &y[pairs]);
                let sumi: i32 = x.quants().iter().zip(&y.qs).map(|(&q, &v)| q as i32 * v as i32).sum();
                sum = (y.d * scale(x)).mul_add(sumi as f32, sum);
            }
            sum
        }
    }
}

/// Activation rows in fours, two rows to each 64-byte run (their quants,
/// their scales, and −128 × each four-value lane's sum, which lets VNNI take
/// signed quants offset to unsigned bytes), laid out once per matmul for the
/// AVX-512 prefill kernel. Run `(g·kb + i)·2 + p` holds rows `4g + 2p` and
/// `4g + 2p + 1` of block `i`.
#[derive(Default)]
pub(crate) struct RowPairs {
    qs: Vec<Run64>,
    d: Vec<Run64>,
    offset: Vec<Run64>,
    /// Each four rows' Q8_1 sums of block `i` at `g·kb + i`, so that the
    /// minimum's products take one vector multiply for all four.
    s: Vec<Sums4>,
    /// Rows covered, a multiple of four.
    rows: usize,
    kb: usize,
    /// With fewer than four rows (decoding), each row's blocks' offsets
    /// alone (−128 × each lane's sum), for the one-row kernel.
    single: Vec<Lanes8>,
}

#[repr(C, align(32))]
#[derive(Clone, Copy)]
struct Lanes8([i32; 8]);

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Run64([u8; 64]);

#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Sums4([f32; 4]);

impl RowPairs {
    /// The whole fours of `rows` activation rows of `kb` blocks each.
    pub(crate) fn new(q8: &[Q8Block], kb: usize) -> Self {
        let rows = q8.len().checked_div(kb).map_or(0, |blocks| blocks / 4 * 4);
        // Decoding's lone rows only: prefill rows take the four-row layout.
        let single = if rows > 0 {
            Vec::new()
        } else {
            q8.iter()
                .map(|b| {
                    Lanes8(std::array::from_fn(|l| {
                        -128 * b.qs[4 * l..4 * l + 4].iter().map(|&v| v as i32).sum::<i32>()
                    }))
                })
                .collect()
        };
        let mut p = Self { rows, kb, single, ..Self::default() };
        for g in 0..rows / 4 {
            for i in 0..kb {
                p.s.push(Sums4(std::array::from_fn(|a| q8[(4 * g + a) * kb + i].s)));
                for h in 0..2 {
                    let (a, b) = (&q8[(4 * g + 2 * h) * kb + i], &q8[(4 * g + 2 * h + 1) * kb + i]);
                    let mut qs = [0u8; 64];
                    let mut d = [0u8; 64];
                    let mut off = [0u8; 64];
                    for (k, blk) in [a, b].into_iter().enumerate() {
                        for (j, v) in blk.qs.iter().enumerate() {
                            qs[32 * k + j] = *v as u8;
                        }
                        for l in 0..8 {
                            d[32 * k + 4 * l..32 * k + 4 * l + 4].copy_from_slice(&blk.d.to_le_bytes());
                            let sum: i32 = blk.qs[4 * l..4 * l + 4].iter().map(|&v| v as i32).sum();
                            off[32 * k + 4 * l..32 * k + 4 * l + 4].copy_from_slice(&(-128 * sum).to_le_bytes());
                        }
                    }
                    p.qs.push(Run64(qs));
                    p.d.push(Run64(d));
                    p.offset.push(Run64(off));
                }
            }
        }
        p
    }

    /// Appends `other`, built from the rows after this one's (`blocks_before`
    /// activation blocks); if this one ends in a partial four, the layout
    /// would not line up, so none is kept.
    pub(crate) fn extend(&mut self, other: Self, blocks_before: usize) {
        if blocks_before == 0 {
            *self = other;
            return;
        }
        if blocks_before != self.rows * self.kb || other.kb != self.kb {
            *self = Self::default();
            return;
        }
        self.qs.extend(other.qs);
        self.d.extend(other.d);
        self.offset.extend(other.offset);
        self.s.extend(other.s);
        // Lone rows' offsets are indexed from row 0: kept only while complete.
        if self.single.len() == blocks_before {
            self.single.extend(other.single);
        } else {
            self.single.clear();
        }
        self.rows += other.rows;
    }

    /// Whether rows `row..row + 4` are laid out.
    pub(crate) fn covers(&self, row: usize) -> bool {
        row.is_multiple_of(4) && row + 4 <= self.rows
    }

    /// Whether row `row`'s offsets alone are laid out.
    fn covers_single(&self, row: usize) -> bool {
        self.kb > 0 && (row + 1) * self.kb <= self.single.len()
    }
}

/// `out[i][a]` = weight row `cols.start + i` · activation row `a < r`
/// (`r` is 4 in a prefill's tiles, 1 to 4 in a decode step: one row per sequence).
///
/// `pairs` may hold activation rows `row..row + 4` laid out for AVX-512.
/// `decoding`: these are all the rows, so each weight row is read once and
/// the kernel asks for rows ahead (a prefill's tiles reread them from cache).
#[allow(clippy::too_many_arguments, reason = "a kernel's operands, inlined into its callers' loops")]
pub(crate) fn column_range<B: Block32>(
    blocks: &[B],
    kb: usize,
    cols: Range<usize>,
    r: usize,
    y: [&[Q8Block]; 4],
    (pairs, row): (&RowPairs, usize),
    isa: Isa,
    decoding: bool,
    out: &mut [[f32; 4]],
) {
    // The x86 kernels read the activation rows by unchecked index, up to the
    // weight rows' `kb` blocks (the portable `dot` would stop at the shorter).
    assert!((1..=4).contains(&r), "1 to 4 activation rows, not {r}");
    assert!(y[..r].iter().all(|y| y.len() >= kb), "activation rows shorter than the weight rows");
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        super::isa::assert_available(isa);
        macro_rules! tiles {
            ($columns:ident) => {
                match r {
                    4 => x86::$columns::<B, 1, 4>(blocks, kb, cols, y, decoding, out),
                    3 => x86::$columns::<B, 1, 3>(blocks, kb, cols, [y[0], y[1], y[2]], decoding, out),
                    2 => x86::$columns::<B, 2, 2>(blocks, kb, cols, [y[0], y[1]], decoding, out),
                    _ => x86::$columns::<B, 1, 1>(blocks, kb, cols, [y[0]], decoding, out),
                }
            };
        }
        // SAFETY: the CPU has `isa`'s features (`assert_available` above:
        // `isa()` checked them at run time). Every weight row is sliced
        // `kb` long (checked), and the activation rows the tile reads, `y[..r]`,
        // hold at least `kb` blocks (asserted above). The pairs kernel reads
        // rows `row..row + 4` of `pairs`, which `covers` them with `kb` blocks
        // each (asserted); the one-row kernel gets `kb` offsets (sliced).
        unsafe {
            if isa >= Isa::Avx512Vnni && r == 4 && B::SUM != Sum::SignedPairs && pairs.covers(row) {
                assert_eq!(pairs.kb, kb, "activation pairs laid out for rows of another width");
                // `[[f32; 4]; 1]` is laid out as `[f32; 4]`: the same `out.len()` elements.
                let out = std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut [[f32; 4]; 1], out.len());
                x86::columns_pairs_avx512::<B, 1>(blocks, kb, cols, (pairs, row / 4 * kb * 2), decoding, out)
            } else if isa >= Isa::Avx512Vnni && r == 1 && B::SUM == Sum::Signed && pairs.covers_single(row) {
                x86::columns1_avx512::<B>(blocks, kb, cols, &pairs.single[row * kb..(row + 1) * kb], y[0], out)
            } else if isa >= Isa::Avx512Vnni {
                tiles!(columns_avx512)
            } else {
                tiles!(columns_avx2)
            }
        }
        return;
    }
    let _ = (pairs, row, decoding);
    for (i, o) in out.iter_mut().enumerate() {
        let col = cols.start + i;
        for (a, v) in o.iter_mut().enumerate().take(r) {
            *v = dot(&blocks[col * kb..(col + 1) * kb], y[a]);
        }
    }
}

/// Whether `column_range8` runs activation rows `row..row + 8`: the
/// AVX-512 kernel, where `pairs` lays out both fours.
pub(crate) fn eight_rows<B: Block32>(pairs: &RowPairs, row: usize, isa: Isa) -> bool {
    cfg!(target_arch = "x86_64")
        && isa >= Isa::Avx512Vnni
        && B::SUM != Sum::SignedPairs
        && pairs.covers(row)
        && pairs.covers(row + 4)
}

/// `out[i][g][a]` = weight row `cols.start + i` · activation row `row + 4g + a`,
/// where `eight_rows` holds: each unpacked weight block serves eight rows,
/// each product computed exactly as `column_range` computes it.
/// `decoding` as `column_range`'s.
pub(crate) fn column_range8<B: Block32>(
    blocks: &[B],
    kb: usize,
    cols: Range<usize>,
    (pairs, row): (&RowPairs, usize),
    isa: Isa,
    decoding: bool,
    out: &mut [[[f32; 4]; 2]],
) {
    assert!(eight_rows::<B>(pairs, row, isa));
    // The kernel reads rows `row..row + 8` of `pairs` by pointer, `kb` blocks each.
    assert_eq!(pairs.kb, kb, "activation pairs laid out for rows of another width");
    super::isa::assert_available(isa);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX-512 with VNNI: `eight_rows` asserted `isa` is
    // that, and `assert_available` that `isa()` found it at run time. `pairs`
    // lays out rows `row..row + 8` (`covers`, asserted) with `kb` blocks each
    // (asserted), and every weight row is sliced `kb` long (checked).
    unsafe {
        x86::columns_pairs_avx512::<B, 2>(blocks, kb, cols, (pairs, row / 4 * kb * 2), decoding, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (blocks, kb, cols, decoding, out);
}
