//! Dot products for the 256-value super-block formats (Q2_K … Q6_K,
//! IQ4_XS) against activations rounded to Q8_K, in llama.cpp's AVX2 order.
//!
//! Each format says how to unpack a block into 256 quants in activation
//! order, a scale per 16 values and its minimums (`Block256`); the kernel is
//! written once. The integer lanes are exact and laid out as llama.cpp lays
//! them (lane `l` holds values `4l..4l+4` of every 32), and the few float
//! steps — which differ between formats — follow its order (`Finish`), so
//! results match its AVX2 build. That build has two orders: `ggml_vec_dot_*`
//! for fewer than eight activation rows (decoding), and its tiled matmul for
//! eight or more (prefill), which sums each block exactly in integers and
//! then applies `d`, `dmin` and the activation scale one block at a time
//! (`Order`). The portable path performs the same floating-point operations.

use super::block32::half;
use super::isa::Isa;
use super::q8::{Q8KBlock, QK_K};
use super::vec_ops::hsum8;

/// How a format's integer sums become a float.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// `Σ d·lanes` (Q3_K, IQ4_XS).
    Plain,
    /// Minimums per 16 values, in the same accumulator first (Q2_K).
    MinLanes,
    /// Minimums per 32 values in a four-lane accumulator (Q4_K).
    MinQuad,
    /// Minimums per 32 values summed as one float per block (Q5_K).
    MinScalar,
    /// Unsigned quants with 32 subtracted through the activation sums (Q6_K).
    Offset32,
}

/// Which of llama.cpp's float orders a product follows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Order {
    /// `ggml_vec_dot_*`: eight float lanes per row (fewer than eight rows).
    Lanes,
    /// The tiled matmul: one float step per block (eight rows or more).
    Tiled,
    /// Q4_K in llama.cpp's repacked 8-row layout, one activation row at a
    /// time (its GEMV: rows left over from groups of four): scale sums and
    /// minimum sums in two float accumulators, one step per block. Only
    /// `dot` computes it here, as the reference for `interleaved_q4k`,
    /// which holds such matrices.
    Repacked,
    /// The same layout's GEMM, for activation rows in groups of four: one
    /// step per 64 values (two sub-blocks) instead of per block (`dot` only).
    RepackedGemm,
}

impl Order {
    /// The order llama.cpp uses for a matmul over `rows` activation rows.
    pub(crate) fn for_rows(rows: usize) -> Self {
        if rows >= 8 {
            Self::Tiled
        } else {
            Self::Lanes
        }
    }
}

/// The minimums' integer sum for one block, as the tiled matmul forms it.
fn min_sum<B: Block256>(mins: &[i16; 16], bsums: &[i16; 16]) -> i32 {
    match B::FINISH {
        Finish::MinLanes => (0..16).map(|i| mins[i] as i32 * bsums[i] as i32).sum(),
        Finish::MinQuad | Finish::MinScalar => min_quad(mins, bsums).iter().sum(),
        _ => 0,
    }
}

/// `Σ sc·q·y` over the block's values `range`, exactly, with Q6_K's 32
/// subtracted from each quant.
fn block_sum<B: Block256>(s: &Scales, q: &[i8; QK_K], y: &Q8KBlock, range: std::ops::Range<usize>) -> i32 {
    range
        .map(|e| {
            let qv = if B::SIGNED { q[e] as i32 } else { q[e] as u8 as i32 };
            let qv = if B::FINISH == Finish::Offset32 { qv - 32 } else { qv };
            s.sc[e / 16] as i32 * qv * y.qs[e] as i32
        })
        .sum()
}

/// The minimums of sub-blocks `2sb` and `2sb+1` (per-32 minimums) against
/// their activation sums.
fn min_pair(mins: &[i16; 16], bsums: &[i16; 16], sb: usize) -> i32 {
    (0..2).map(|h| mins[2 * sb + h] as i32 * (bsums[4 * sb + 2 * h] as i32 + bsums[4 * sb + 2 * h + 1] as i32)).sum()
}

/// One block's float step in the tiled order: `acc += (d·s1 − dmin·s2)·dy`.
#[inline(always)]
fn tiled_step<B: Block256>(acc: f32, d: f32, dmin: f32, s1: i32, mins: &[i16; 16], y: &Q8KBlock) -> f32 {
    let mut res = d * s1 as f32;
    if matches!(B::FINISH, Finish::MinLanes | Finish::MinQuad | Finish::MinScalar) {
        res = (-dmin).mul_add(min_sum::<B>(mins, &y.bsums) as f32, res);
    }
    res.mul_add(y.d, acc)
}

/// One block's float steps in the repacked order (unsigned formats with minimums).
#[inline(always)]
fn repacked_step<B: Block256>(acc: f32, acc_min: f32, x: &B, s1: i32, mins: &[i16; 16], y: &Q8KBlock) -> (f32, f32) {
    let acc = (s1 as f32).mul_add(half(x.d_bits()) * y.d, acc);
    let acc_min = (min_sum::<B>(mins, &y.bsums) as f32).mul_add(half(x.dmin_bits()) * y.d, acc_min);
    (acc, acc_min)
}

/// Scales per 16 values, and minimums: per 16 for `MinLanes`, per 32 (the
/// first eight) for `MinQuad` and `MinScalar`.
#[repr(C, align(32))]
pub(crate) struct Scales {
    pub(crate) sc: [i16; 16],
    pub(crate) mins: [i16; 16],
}

/// One 256-value weight super-block.
pub(crate) trait Block256: Copy + Send + Sync + 'static {
    const SIGNED: bool;
    const FINISH: Finish;
    /// Bytes in GGUF (the struct is laid out exactly so).
    const BYTES: usize;
    fn d_bits(&self) -> u16;
    fn dmin_bits(&self) -> u16 {
        0
    }
    fn scales(&self) -> Scales;
    /// The quants in activation order (unsigned ones as their bit patterns).
    fn quants(&self) -> [i8; QK_K];
    /// The same quants, 32 values a register.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA (impls enable them). The block is read
    /// through `&self` only.
    #[cfg(target_arch = "x86_64")]
    unsafe fn quants_avx2(&self) -> [std::arch::x86_64::__m256i; 8];

    /// A one-row product in `Order::Lanes` by a kernel of this format's
    /// own, where it has one for `isa` (the same bits as `dot_rows`).
    fn dot_lanes(_x: &[Self], _y: &[Q8KBlock], _isa: Isa) -> Option<f32> {
        None
    }

    fn dequantize(&self, out: &mut [f32]) {
        let (d, dmin) = (half(self.d_bits()), half(self.dmin_bits()));
        let s = self.scales();
        let q = self.quants();
        for (e, o) in out.iter_mut().enumerate().take(QK_K) {
            let qv = if Self::SIGNED { q[e] as i32 } else { q[e] as u8 as i32 };
            let qv = if Self::FINISH == Finish::Offset32 { qv - 32 } else { qv };
            let min = match Self::FINISH {
                Finish::MinLanes => dmin * s.mins[e / 16] as f32,
                Finish::MinQuad | Finish::MinScalar => dmin * s.mins[e / 32] as f32,
                _ => 0.0,
            };
            *o = (d * s.sc[e / 16] as f32) * qv as f32 - min;
        }
    }
}

/// `Σ_k mins[k]·(bsums[2k] + bsums[2k+1])` by pairs, as four lanes.
fn min_quad(mins: &[i16; 16], bsums: &[i16; 16]) -> [i32; 4] {
    let q8s: [i32; 8] = std::array::from_fn(|k| bsums[2 * k] as i32 + bsums[2 * k + 1] as i32);
    std::array::from_fn(|l| mins[2 * l] as i32 * q8s[2 * l] + mins[2 * l + 1] as i32 * q8s[2 * l + 1])
}

/// The portable dot product of one weight row with one activation row.
pub(crate) fn dot<B: Block256>(x: &[B], y: &[Q8KBlock], order: Order) -> f32 {
    if order == Order::RepackedGemm {
        let (mut acc, mut acc_min) = (0f32, 0f32);
        for (x, y) in x.iter().zip(y) {
            let s = x.scales();
            let q = x.quants();
            let (d, dmin) = (half(x.d_bits()) * y.d, half(x.dmin_bits()) * y.d);
            for sb in 0..4 {
                let s1 = block_sum::<B>(&s, &q, y, 64 * sb..64 * sb + 64);
                acc = (s1 as f32).mul_add(d, acc);
                acc_min = (min_pair(&s.mins, &y.bsums, sb) as f32).mul_add(dmin, acc_min);
            }
        }
        return acc - acc_min;
    }
    if order == Order::Repacked {
        let (mut acc, mut acc_min) = (0f32, 0f32);
        for (x, y) in x.iter().zip(y) {
            let s = x.scales();
            let s1 = block_sum::<B>(&s, &x.quants(), y, 0..QK_K);
            (acc, acc_min) = repacked_step::<B>(acc, acc_min, x, s1, &s.mins, y);
        }
        return acc - acc_min;
    }
    if order == Order::Tiled {
        let mut acc = 0f32;
        for (x, y) in x.iter().zip(y) {
            let s = x.scales();
            let s1 = block_sum::<B>(&s, &x.quants(), y, 0..QK_K);
            acc = tiled_step::<B>(acc, half(x.d_bits()), half(x.dmin_bits()), s1, &s.mins, y);
        }
        return acc;
    }
    let mut acc = [0f32; 8];
    let mut acc_m = [0f32; 4];
    let mut summs = 0f32;
    for (x, y) in x.iter().zip(y) {
        let d = y.d * half(x.d_bits());
        let dmin = -y.d * half(x.dmin_bits());
        let s = x.scales();
        let q = x.quants();
        match B::FINISH {
            Finish::MinLanes => {
                for (l, a) in acc.iter_mut().enumerate() {
                    let p = s.mins[2 * l] as i32 * y.bsums[2 * l] as i32
                        + s.mins[2 * l + 1] as i32 * y.bsums[2 * l + 1] as i32;
                    *a = dmin.mul_add(p as f32, *a);
                }
            }
            Finish::MinQuad => {
                for (a, p) in acc_m.iter_mut().zip(min_quad(&s.mins, &y.bsums)) {
                    *a = dmin.mul_add(p as f32, *a);
                }
            }
            Finish::MinScalar => summs += dmin * min_quad(&s.mins, &y.bsums).iter().sum::<i32>() as f32,
            _ => {}
        }
        let mut sumi = [0i32; 8];
        for e in 0..QK_K {
            let qv = if B::SIGNED { q[e] as i32 } else { q[e] as u8 as i32 };
            sumi[(e % 32) / 4] += s.sc[e / 16] as i32 * qv * y.qs[e] as i32;
        }
        if B::FINISH == Finish::Offset32 {
            for (l, v) in sumi.iter_mut().enumerate() {
                *v -= 32
                    * (y.bsums[2 * l] as i32 * s.sc[2 * l] as i32 + y.bsums[2 * l + 1] as i32 * s.sc[2 * l + 1] as i32);
            }
        }
        for (a, v) in acc.iter_mut().zip(sumi) {
            *a = d.mul_add(v as f32, *a);
        }
    }
    hsum8(acc)
        + match B::FINISH {
            Finish::MinQuad => (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]),
            Finish::MinScalar => summs,
            _ => 0.0,
        }
}

/// One weight row against `R` activation rows: each block is unpacked once
/// for all of them (prefill); every product is computed as `dot` computes it.
pub(crate) fn dot_rows<B: Block256, const R: usize>(x: &[B], y: [&[Q8KBlock]; R], order: Order, isa: Isa) -> [f32; R] {
    debug_assert!(matches!(order, Order::Lanes | Order::Tiled), "the repacked orders run in interleaved_q4k");
    if R == 1 && order == Order::Lanes {
        assert!(y[0].len() >= x.len());
        if let Some(v) = B::dot_lanes(x, y[0], isa) {
            return [v; R];
        }
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        super::isa::assert_available(isa);
        for ya in &y {
            assert!(ya.len() >= x.len());
        }
        // SAFETY: the CPU has `isa`'s features (`assert_available` above:
        // `isa()` checked them at run time); every activation row is at least
        // as long as the weight row (asserted), as the kernel reads them.
        return unsafe {
            if isa >= Isa::Avx512Vnni {
                x86::dot_rows_avx512::<B, R>(x, y, order)
            } else {
                x86::dot_rows_avx2::<B, R>(x, y, order)
            }
        };
    }
    let _ = isa;
    std::array::from_fn(|a| dot(x, y[a], order))
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    use super::{Block256, Finish, Order};
    use crate::cpu::block32::x86::half;
    use crate::cpu::q8::Q8KBlock;
    use crate::cpu::vec_ops::hsum8;

    /// Four vectors of eight 32-bit lanes to four totals (exact: integer adds).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn totals4(v: &[__m256i; 4]) -> __m128i {
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
        _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1))
    }

    /// Bytes of `v` shifted right by `n` (< 8) and masked to `mask`.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn bits(v: __m256i, n: i32, mask: i8) -> __m256i {
        _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(n)), _mm256_set1_epi8(mask))
    }

    /// `super::dot_rows` in AVX2 registers.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C, and every `y[a]` must hold at
    /// least `x.len()` blocks (read by unchecked index).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_rows_avx2<B: Block256, const R: usize>(x: &[B], y: [&[Q8KBlock]; R], order: Order) -> [f32; R] {
        dot_rows::<B, R, false>(x, y, order)
    }

    /// `dot_rows_avx2` with VNNI's fused 16-bit dot products and two
    /// 32-value chunks to a 512-bit register: the same integers, so the
    /// same results.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, DQ, VL and VNNI,
    /// and every `y[a]` must hold at least `x.len()` blocks.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub unsafe fn dot_rows_avx512<B: Block256, const R: usize>(x: &[B], y: [&[Q8KBlock]; R], order: Order) -> [f32; R] {
        dot_rows::<B, R, true>(x, y, order)
    }

    /// Two 256-bit halves as one register.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F; inlined into a caller that enables it.
    #[inline(always)]
    unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
    }

    /// The eight 32-bit lanes of both halves added (exact).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and AVX2; inlined into a caller that
    /// enables them.
    #[inline(always)]
    unsafe fn fold(v: __m512i) -> __m256i {
        _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
    }

    /// `AVX512`: the integer sums in 512-bit registers (the AVX-512 entry
    /// point), else in 256-bit ones.
    ///
    /// # Safety
    /// The CPU must have the features of `dot_rows_avx2` (with `AVX512`,
    /// `dot_rows_avx512`), and the caller must enable them (it is inlined).
    /// Every `y[a]` must hold at least `x.len()` blocks: block `i` of each is
    /// read by unchecked index for every `i < x.len()`.
    #[inline(always)]
    #[allow(
        clippy::needless_range_loop,
        reason = "lanes and rows index several arrays by the same index, as the C they follow"
    )]
    unsafe fn dot_rows<B: Block256, const R: usize, const AVX512: bool>(
        x: &[B],
        y: [&[Q8KBlock]; R],
        order: Order,
    ) -> [f32; R] {
        let tiled = order != Order::Lanes;
        assert!(R <= 8);
        // Float steps of the tiled orders run four rows at a time: `R`
        // rows are `groups` fours (zero rows fill the last).
        let groups = R.div_ceil(4);
        let mut sums = [_mm256_setzero_si256(); 8];
        let mut mins = [_mm256_setzero_si256(); 8];
        let mut yd = [0f32; 8];
        let mut acc4 = [_mm_setzero_ps(); 2];
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc_m = [_mm_setzero_ps(); R];
        let mut summs = [0f32; R];
        let mut sc = [_mm256_setzero_si256(); 8];
        for i in 0..x.len() {
            let xb = x.get_unchecked(i);
            let (xd, xdmin) = (half(xb.d_bits()), half(xb.dmin_bits()));
            let s = xb.scales();
            let q = xb.quants_avx2();
            // Signed formats: |q| once per block, the signs moved onto each activation row.
            let mut aq = [_mm256_setzero_si256(); 8];
            if B::SIGNED {
                for c in 0..8 {
                    aq[c] = _mm256_sign_epi8(q[c], q[c]);
                }
            }
            if !AVX512 {
                for c in 0..8 {
                    sc[c] = _mm256_set_m128i(_mm_set1_epi16(s.sc[2 * c + 1]), _mm_set1_epi16(s.sc[2 * c]));
                }
            }
            // Chunks 2c and 2c + 1 side by side, for the 512-bit sums; the
            // scales of their four 16-value runs, one per 128-bit quarter.
            let (mut q2, mut aq2, mut sc2) =
                ([_mm512_setzero_si512(); 4], [_mm512_setzero_si512(); 4], [_mm512_setzero_si512(); 4]);
            let mut neg2 = [0u64; 4];
            if AVX512 {
                let sc512 = _mm512_castsi256_si512(_mm256_load_si256(s.sc.as_ptr() as *const __m256i));
                for c in 0..4 {
                    q2[c] = join(q[2 * c], q[2 * c + 1]);
                    let run = 4 * c as i16;
                    let idx = _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(run + 1), _mm_set1_epi16(run))),
                        _mm256_set_m128i(_mm_set1_epi16(run + 3), _mm_set1_epi16(run + 2)),
                    );
                    sc2[c] = _mm512_permutexvar_epi16(idx, sc512);
                    if B::SIGNED {
                        aq2[c] = join(aq[2 * c], aq[2 * c + 1]);
                        neg2[c] = _mm512_movepi8_mask(q2[c]);
                    }
                }
            }
            let sc16 = _mm256_load_si256(s.sc.as_ptr() as *const __m256i);
            let mins16 = _mm256_load_si256(s.mins.as_ptr() as *const __m256i);
            let mins8 = _mm256_castsi256_si128(mins16);
            for a in 0..R {
                let yb = y[a].get_unchecked(i);
                let d = yb.d * xd;
                let dmin = -yb.d * xdmin;
                let bsums = _mm256_loadu_si256(yb.bsums.as_ptr() as *const __m256i);
                if !tiled {
                    match B::FINISH {
                        Finish::MinLanes => {
                            acc[a] = _mm256_fmadd_ps(
                                _mm256_set1_ps(dmin),
                                _mm256_cvtepi32_ps(_mm256_madd_epi16(mins16, bsums)),
                                acc[a],
                            );
                        }
                        Finish::MinQuad | Finish::MinScalar => {
                            let q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
                            let prod = _mm_madd_epi16(mins8, q8s);
                            if B::FINISH == Finish::MinQuad {
                                acc_m[a] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[a]);
                            } else {
                                let h = _mm_hadd_epi32(_mm_hadd_epi32(prod, _mm_setzero_si128()), _mm_setzero_si128());
                                summs[a] += dmin * _mm_cvtsi128_si32(h) as f32;
                            }
                        }
                        _ => {}
                    }
                }
                let mut sumi = _mm256_setzero_si256();
                if AVX512 {
                    let zero = _mm512_setzero_si512();
                    let mut wide = zero;
                    for c in 0..4 {
                        let yv = _mm512_loadu_si512(yb.qs.as_ptr().add(64 * c) as *const __m512i);
                        let p16 = if B::SIGNED {
                            _mm512_maddubs_epi16(aq2[c], _mm512_mask_sub_epi8(yv, neg2[c], zero, yv))
                        } else {
                            _mm512_maddubs_epi16(q2[c], yv)
                        };
                        wide = _mm512_dpwssd_epi32(wide, sc2[c], p16);
                    }
                    sumi = fold(wide);
                } else {
                    for c in 0..8 {
                        let yv = _mm256_loadu_si256(yb.qs.as_ptr().add(32 * c) as *const __m256i);
                        let p16 = if B::SIGNED {
                            _mm256_maddubs_epi16(aq[c], _mm256_sign_epi8(yv, q[c]))
                        } else {
                            _mm256_maddubs_epi16(q[c], yv)
                        };
                        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc[c], p16));
                    }
                }
                if B::FINISH == Finish::Offset32 {
                    sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums, sc16)));
                }
                if tiled {
                    sums[a] = sumi;
                    mins[a] = match B::FINISH {
                        Finish::MinLanes => _mm256_madd_epi16(mins16, bsums),
                        Finish::MinQuad | Finish::MinScalar => {
                            let q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
                            _mm256_castsi128_si256(_mm_madd_epi16(mins8, q8s))
                        }
                        _ => _mm256_setzero_si256(),
                    };
                    yd[a] = yb.d;
                } else {
                    acc[a] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[a]);
                }
            }
            for g in 0..groups {
                let four = |v: &[__m256i; 8]| [v[4 * g], v[4 * g + 1], v[4 * g + 2], v[4 * g + 3]];
                let ydv = _mm_loadu_ps(yd.as_ptr().add(4 * g));
                if tiled {
                    // Integer sums are exact, so each product's lane total is its
                    // block's; the float steps then run for four products at once.
                    let s1 = _mm_cvtepi32_ps(totals4(&four(&sums)));
                    let has_min = matches!(B::FINISH, Finish::MinLanes | Finish::MinQuad | Finish::MinScalar);
                    let mut res = _mm_mul_ps(_mm_set1_ps(xd), s1);
                    if has_min {
                        res = _mm_fnmadd_ps(_mm_set1_ps(xdmin), _mm_cvtepi32_ps(totals4(&four(&mins))), res);
                    }
                    acc4[g] = _mm_fmadd_ps(res, ydv, acc4[g]);
                }
            }
        }
        if tiled {
            let mut t = [0f32; 8];
            for g in 0..groups {
                _mm_storeu_ps(t.as_mut_ptr().add(4 * g), acc4[g]);
            }
            return std::array::from_fn(|a| t[a]);
        }
        let mut out = [0f32; R];
        for a in 0..R {
            let mut lanes = [0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), acc[a]);
            out[a] = hsum8(lanes);
            match B::FINISH {
                Finish::MinQuad => {
                    let mut m = acc_m[a];
                    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
                    m = _mm_add_ss(m, _mm_movehdup_ps(m));
                    out[a] += _mm_cvtss_f32(m);
                }
                Finish::MinScalar => out[a] += summs[a],
                _ => {}
            }
        }
        out
    }
}
