//! The tile kernels in registers: AVX2, AVX-512 with VNNI, and the AVX-512
//! kernels over `RowPairs`; with the helpers the formats' `quants_avx2`
//! unpack their blocks with.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{Block32, RowPairs, Sum};
use crate::cpu::prefetch::prefetch_row_ahead;
use crate::cpu::q8::Q8Block;

/// The eight lanes' sum, in llama.cpp's `hsum_float_8` order.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn hsum(x: __m256) -> f32 {
    let mut r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// An f16 scale, widened by the F16C unit.
///
/// # Safety
/// The CPU must have F16C.
#[inline]
#[target_feature(enable = "f16c")]
pub unsafe fn half(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// `super::scale` with F16C's conversion.
///
/// # Safety
/// The CPU must have F16C (as for `half`).
#[inline(always)]
pub unsafe fn scale<B: super::Block32>(b: &B) -> f32 {
    if B::E8M0 {
        super::e8m0_half(b.d_bits() as u8)
    } else {
        half(b.d_bits())
    }
}

/// Sixteen bytes of nibbles as 32 bytes: low nibbles first, then high.
///
/// # Safety
/// The CPU must have AVX2 and FMA. (It reads the 16 bytes of `qs` only.)
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
    let tmp = _mm_loadu_si128(qs.as_ptr() as *const __m128i);
    _mm256_and_si256(_mm256_set1_epi8(0xF), _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp))
}

/// Bit `i` of `bits` as byte `i` (0xFF where set), for the fifth bit of Q5 formats.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn bytes_from_bits(bits: u32) -> __m256i {
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let mut b = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
    let mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe_u64 as i64);
    b = _mm256_or_si256(b, mask);
    _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1))
}

/// Unsigned × signed bytes, summed in fours, as floats. VNNI does it in
/// one instruction with the same integers: no pair of products reaches
/// `maddubs`'s 16-bit saturation (|q| ≤ 128, |y| ≤ 127).
///
/// # Safety
/// The CPU must have AVX2, and with `VNNI` AVX-512 VL and VNNI too; this
/// is inlined into its caller, which must enable them.
#[inline(always)]
pub unsafe fn us8_dot<const VNNI: bool>(ax: __m256i, sy: __m256i) -> __m256 {
    if VNNI {
        _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy))
    } else {
        _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ax, sy)))
    }
}

/// `W` weight rows × `R` activation rows. Inlined into an entry point
/// that enables the ISA's features (`columns_avx2`, `columns_avx512`).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C, and with `VNNI` AVX-512 F, BW,
/// DQ, VL and VNNI too; the caller must enable them. Every `x[r]` and
/// every `y[a]` must hold at least `x[0].len()` blocks: the loop reads
/// blocks `0..x[0].len()` of each by unchecked index.
#[inline(always)]
#[allow(
    clippy::needless_range_loop,
    reason = "lanes and rows index several arrays by the same index, as the C they follow"
)]
pub unsafe fn tile<B: Block32, const W: usize, const R: usize, const VNNI: bool>(
    x: [&[B]; W],
    y: [&[Q8Block]; R],
) -> [[f32; R]; W] {
    // Plain loops, not closures: a closure would not inherit this
    // function's target features, and its intrinsics would become calls.
    let mut acc = [[[_mm256_setzero_ps(); R]; W]; 2];
    let mut summs = [[0f32; R]; W];
    let mut q = [_mm256_setzero_si256(); W];
    // Signed formats: |q| once per block, the signs moved onto each activation row.
    let mut aq = [_mm256_setzero_si256(); W];
    let mut d = [0f32; W];
    let mut m = [0f32; W];
    let n = x[0].len();
    let paired = if B::SUM == Sum::SignedPairs { n & !1 } else { n };
    for i in 0..paired {
        let slot = if B::SUM == Sum::SignedPairs { i % 2 } else { 0 };
        for r in 0..W {
            let b = x[r].get_unchecked(i);
            q[r] = b.quants_avx2();
            if B::SUM != Sum::WithMin {
                aq[r] = _mm256_sign_epi8(q[r], q[r]);
            }
            d[r] = scale(b);
            if B::SUM == Sum::WithMin {
                m[r] = half(b.m_bits());
            }
        }
        for a in 0..R {
            let b = y[a].get_unchecked(i);
            let qy = _mm256_loadu_si256(b.qs.as_ptr() as *const __m256i);
            for r in 0..W {
                if B::SUM == Sum::WithMin {
                    summs[r][a] += m[r] * b.s;
                    acc[0][r][a] = _mm256_fmadd_ps(_mm256_set1_ps(d[r] * b.d), us8_dot::<VNNI>(q[r], qy), acc[0][r][a]);
                } else {
                    // IQ4_NL multiplies the scales the other way round; the product is the same.
                    acc[slot][r][a] = _mm256_fmadd_ps(
                        _mm256_set1_ps(d[r] * b.d),
                        us8_dot::<VNNI>(aq[r], _mm256_sign_epi8(qy, q[r])),
                        acc[slot][r][a],
                    );
                }
            }
        }
    }
    let mut out = [[0f32; R]; W];
    for r in 0..W {
        for a in 0..R {
            out[r][a] = match B::SUM {
                Sum::Signed => hsum(acc[0][r][a]),
                Sum::WithMin => hsum(acc[0][r][a]) + summs[r][a],
                Sum::SignedPairs => {
                    let mut s = hsum(_mm256_add_ps(acc[0][r][a], acc[1][r][a]));
                    if paired < n {
                        let (xb, yb) = (x[r].get_unchecked(paired), y[a].get_unchecked(paired));
                        let qs = xb.quants();
                        let mut sumi = 0i32;
                        for t in 0..32 {
                            sumi += qs[t] as i32 * yb.qs[t] as i32;
                        }
                        s = (yb.d * scale(xb)).mul_add(sumi as f32, s);
                    }
                    s
                }
            };
        }
    }
    out
}

/// Every column of `cols` against `R` activation rows, `W` at a time.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C. Every `y[a]` must hold at least
/// `kb` blocks (read by unchecked index); the weight rows are sliced
/// from `blocks` and `out` indexed with checks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn columns_avx2<B: Block32, const W: usize, const R: usize>(
    blocks: &[B],
    kb: usize,
    cols: Range<usize>,
    y: [&[Q8Block]; R],
    decoding: bool,
    out: &mut [[f32; 4]],
) {
    columns::<B, W, R, false>(blocks, kb, cols, y, decoding, out)
}

/// `columns_avx2` with VNNI's byte dot products: the same results.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, DQ, VL and VNNI.
/// Every `y[a]` must hold at least `kb` blocks, as for `columns_avx2`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
pub unsafe fn columns_avx512<B: Block32, const W: usize, const R: usize>(
    blocks: &[B],
    kb: usize,
    cols: Range<usize>,
    y: [&[Q8Block]; R],
    decoding: bool,
    out: &mut [[f32; 4]],
) {
    columns::<B, W, R, true>(blocks, kb, cols, y, decoding, out)
}

/// `columns_avx2` (or `columns_avx512` with `VNNI`), inlined into it.
///
/// # Safety
/// As that entry point's: its features enabled by the caller, and every
/// `y[a]` at least `kb` blocks long.
#[inline(always)]
unsafe fn columns<B: Block32, const W: usize, const R: usize, const VNNI: bool>(
    blocks: &[B],
    kb: usize,
    cols: Range<usize>,
    y: [&[Q8Block]; R],
    decoding: bool,
    out: &mut [[f32; 4]],
) {
    let row = |c: usize| &blocks[c * kb..(c + 1) * kb];
    let mut col = cols.start;
    let mut xs = [row(col); W];
    while col + W <= cols.end {
        if decoding {
            for i in 0..W {
                prefetch_row_ahead(blocks, kb, col + i);
            }
        }
        for (i, x) in xs.iter_mut().enumerate() {
            *x = row(col + i);
        }
        let t = tile::<B, W, R, VNNI>(xs, y);
        for i in 0..W {
            out[col - cols.start + i][..R].copy_from_slice(&t[i]);
        }
        col += W;
    }
    while col < cols.end {
        let t = tile::<B, 1, R, VNNI>([row(col)], y);
        out[col - cols.start][..R].copy_from_slice(&t[0]);
        col += 1;
    }
}

/// `columns_avx512::<B, 1, 1>` for signed formats with the quants offset
/// to unsigned bytes, the offset's products taken off through `offsets`
/// (the same exact integers, so the same results, without moving signs).
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, DQ, VL and VNNI.
/// `offsets` and `y` must hold at least `kb` entries each: blocks
/// `0..kb` of both are read by unchecked index (and `offsets` by an
/// aligned load, which `Lanes8`'s alignment provides).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
pub(super) unsafe fn columns1_avx512<B: Block32>(
    blocks: &[B],
    kb: usize,
    cols: Range<usize>,
    offsets: &[super::Lanes8],
    y: &[Q8Block],
    out: &mut [[f32; 4]],
) {
    debug_assert!(B::SUM == Sum::Signed && offsets.len() == kb && y.len() >= kb);
    for col in cols.clone() {
        prefetch_row_ahead(blocks, kb, col);
        let x = &blocks[col * kb..(col + 1) * kb];
        let mut acc = _mm256_setzero_ps();
        for i in 0..kb {
            let (b, yb) = (x.get_unchecked(i), y.get_unchecked(i));
            let base = _mm256_load_si256(offsets.get_unchecked(i).0.as_ptr() as *const __m256i);
            let qy = _mm256_loadu_si256(yb.qs.as_ptr() as *const __m256i);
            let s = _mm256_dpbusd_epi32(base, b.offset_quants_avx512(), qy);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(scale(b) * yb.d), _mm256_cvtepi32_ps(s), acc);
        }
        out[col - cols.start][0] = hsum(acc);
    }
}

/// `columns_avx512::<B, 1, 4>` over `G` groups of four activation rows,
/// two rows to a register: each row's eight lanes take exactly the same
/// operations (one exact integer dot per four values, one fused
/// multiply-add per block, the same `hsum`), in half the instructions,
/// and each unpacked weight block serves `4·G` rows.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, DQ, VL and VNNI.
/// `pairs` must lay out `4·G` activation rows of `kb` blocks from run
/// `base` on (`pairs.kb == kb`, and `pairs.covers(row + 4g)` for each
/// `g < G` with `base = row / 4 · kb · 2`): the kernel reads runs
/// `base..base + 2·kb·G` of its vectors, and the sums from `base / 2`, by
/// pointer.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
pub unsafe fn columns_pairs_avx512<B: Block32, const G: usize>(
    blocks: &[B],
    kb: usize,
    cols: Range<usize>,
    (pairs, base): (&RowPairs, usize),
    decoding: bool,
    out: &mut [[[f32; 4]; G]],
) {
    let runs: [Runs; G] = std::array::from_fn(|g| {
        let b = base + g * 2 * kb;
        Runs {
            qs: pairs.qs.as_ptr().add(b) as *const __m512i,
            d: pairs.d.as_ptr().add(b) as *const __m512,
            offset: pairs.offset.as_ptr().add(b) as *const __m512i,
            s: pairs.s.as_ptr().add(b / 2) as *const f32,
        }
    });
    let row = |c: usize| &blocks[c * kb..(c + 1) * kb];
    let mut col = cols.start;
    // Several weight rows at a time share each activation pair's loads.
    const W: usize = 4;
    while col + W <= cols.end {
        if decoding {
            for i in 0..W {
                prefetch_row_ahead(blocks, kb, col + i);
            }
        }
        let t = tile_pairs::<B, W, G>(std::array::from_fn(|i| row(col + i)), &runs);
        out[col - cols.start..col - cols.start + W].copy_from_slice(&t);
        col += W;
    }
    while col < cols.end {
        out[col - cols.start] = tile_pairs::<B, 1, G>([row(col)], &runs)[0];
        col += 1;
    }
}

/// One four-row group's runs of `RowPairs`, from its first block.
#[derive(Clone, Copy)]
struct Runs {
    qs: *const __m512i,
    d: *const __m512,
    offset: *const __m512i,
    s: *const f32,
}

/// `W` weight rows × `G` groups of four activation rows.
///
/// # Safety
/// The CPU must have AVX-512 F, BW, DQ, VL and VNNI (and AVX2, FMA,
/// F16C), enabled by the caller (`columns_pairs_avx512`). Every `x[w]`
/// must hold at least `kb = x[0].len()` blocks (unchecked index), and
/// every `runs[g]` must point into `RowPairs` vectors with `2·kb` runs
/// of `qs`, `d` and `offset` and `kb` sums of `s` from there (aligned
/// loads: the vectors' element types are aligned for them).
#[inline(always)]
#[allow(
    clippy::needless_range_loop,
    reason = "lanes and rows index several arrays by the same index, as the C they follow"
)]
unsafe fn tile_pairs<B: Block32, const W: usize, const G: usize>(x: [&[B]; W], runs: &[Runs; G]) -> [[[f32; 4]; G]; W] {
    let zero = _mm512_setzero_si512();
    let mut acc = [[[_mm512_setzero_ps(); 2]; G]; W];
    // Each row's sum in its own lane: the same multiply and add per
    // block as a lone row's scalar sum.
    let mut summs = [[_mm_setzero_ps(); G]; W];
    let kb = x[0].len();
    for i in 0..kb {
        let mut uq = [zero; W];
        let mut d = [_mm512_setzero_ps(); W];
        for w in 0..W {
            let b = x[w].get_unchecked(i);
            d[w] = _mm512_set1_ps(scale(b));
            if B::SUM == Sum::WithMin {
                let m = _mm_set1_ps(half(b.m_bits()));
                for g in 0..G {
                    summs[w][g] = _mm_add_ps(summs[w][g], _mm_mul_ps(m, _mm_load_ps(runs[g].s.add(4 * i))));
                }
                uq[w] = _mm512_broadcast_i64x4(b.quants_avx2());
            } else {
                // q + 128 as unsigned bytes; the offset's products come off
                // through `pairs.offset`: the same exact integers.
                uq[w] = _mm512_broadcast_i64x4(b.offset_quants_avx512());
            }
        }
        for g in 0..G {
            for p in 0..2 {
                let yq = _mm512_load_si512(runs[g].qs.add(2 * i + p));
                let dy = _mm512_load_ps(runs[g].d.add(2 * i + p) as *const f32);
                let base = if B::SUM == Sum::WithMin { zero } else { _mm512_load_si512(runs[g].offset.add(2 * i + p)) };
                for w in 0..W {
                    let s = _mm512_dpbusd_epi32(base, uq[w], yq);
                    acc[w][g][p] = _mm512_fmadd_ps(_mm512_mul_ps(d[w], dy), _mm512_cvtepi32_ps(s), acc[w][g][p]);
                }
            }
        }
    }
    let mut out = [[[0f32; 4]; G]; W];
    for w in 0..W {
        for g in 0..G {
            for p in 0..2 {
                out[w][g][2 * p] = hsum(_mm512_castps512_ps256(acc[w][g][p]));
                out[w][g][2 * p + 1] = hsum(_mm512_extractf32x8_ps::<1>(acc[w][g][p]));
            }
            if B::SUM == Sum::WithMin {
                let mut s = [0f32; 4];
                _mm_storeu_ps(s.as_mut_ptr(), summs[w][g]);
                for a in 0..4 {
                    out[w][g][a] += s[a];
                }
            }
        }
    }
    out
}
