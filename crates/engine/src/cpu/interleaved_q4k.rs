//! Q4_K weights with eight rows interleaved, built at load time as
//! llama.cpp's REPACK builds its Q4_K layout: one register holds four
//! quants of each of eight rows, so a multiply-add against four activation
//! bytes broadcast to every lane gives eight rows' sums at once, with no
//! horizontal sums. The 6-bit scales and minimums are unpacked here once,
//! not at every product.
//!
//! The integer sums are exact and the float steps are those of
//! `block256`'s two repacked orders (`Order::RepackedGemm` per 64 values
//! for one sequence's rows in fours, `Order::Repacked` per block for the
//! rest), so every product has the bits the row-major kernels give it.

use super::block32::half;
use super::isa::Isa;
use super::q4_k::BlockQ4K;
use super::q8::{Q8KBlock, QK_K};

/// Rows per group.
pub(crate) const ROWS: usize = 8;

/// One 256-value super-block of eight rows.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct GroupQ4K {
    d: [u16; ROWS],
    dmin: [u16; ROWS],
    /// `sc[8j + r]`: row `r`'s scale of 32-value sub-block `j`.
    sc: [u8; 8 * ROWS],
    /// `mins[16p + 2r + h]`: row `r`'s minimum of sub-block `2p + h`, in
    /// pairs, so one 16-bit multiply-add takes a 64-value run's two.
    mins: [u8; 8 * ROWS],
    /// `qs[256p + 32c + 4r + t]`: byte `32p + 4c + t` of row `r`'s quants
    /// (low nibbles: values `64p + 4c + t`; high: 32 further on).
    qs: [u8; 128 * ROWS],
}

/// A Q4_K matrix whose row count is a multiple of eight, in groups of eight rows.
pub(crate) struct InterleavedQ4K {
    groups: Vec<GroupQ4K>,
    kb: usize,
}

impl InterleavedQ4K {
    /// From GGUF's row-major blocks.
    pub(crate) fn new(blocks: &[BlockQ4K], n: usize, kb: usize) -> Self {
        debug_assert!(n.is_multiple_of(ROWS) && blocks.len() == n * kb);
        let mut groups = Vec::with_capacity(n / ROWS * kb);
        for g in 0..n / ROWS {
            for b in 0..kb {
                let mut group = GroupQ4K {
                    d: [0; ROWS],
                    dmin: [0; ROWS],
                    sc: [0; 8 * ROWS],
                    mins: [0; 8 * ROWS],
                    qs: [0; 128 * ROWS],
                };
                for r in 0..ROWS {
                    let src = &blocks[(g * ROWS + r) * kb + b];
                    let (d, dmin, scales, qs) = src.parts();
                    group.d[r] = d;
                    group.dmin[r] = dmin;
                    let (sc, mins) = super::q4_k::unpack_scales(scales);
                    for j in 0..8 {
                        group.sc[8 * j + r] = sc[j];
                        group.mins[16 * (j / 2) + 2 * r + j % 2] = mins[j];
                    }
                    for p in 0..4 {
                        for c in 0..8 {
                            let dst = 256 * p + 32 * c + 4 * r;
                            group.qs[dst..dst + 4].copy_from_slice(&qs[32 * p + 4 * c..32 * p + 4 * c + 4]);
                        }
                    }
                }
                groups.push(group);
            }
        }
        Self { groups, kb }
    }

    pub(crate) fn stored_bytes(&self) -> usize {
        std::mem::size_of_val(self.groups.as_slice())
    }

    /// Row `row`'s block `b` as the file holds it.
    pub(crate) fn block(&self, row: usize, b: usize) -> BlockQ4K {
        let g = &self.groups[(row / ROWS) * self.kb + b];
        let r = row % ROWS;
        let sc = std::array::from_fn(|j| g.sc[8 * j + r]);
        let mins = std::array::from_fn(|j| g.mins[16 * (j / 2) + 2 * r + j % 2]);
        let mut qs = [0u8; 128];
        for p in 0..4 {
            for c in 0..8 {
                let src = 256 * p + 32 * c + 4 * r;
                qs[32 * p + 4 * c..32 * p + 4 * c + 4].copy_from_slice(&g.qs[src..src + 4]);
            }
        }
        BlockQ4K::from_parts(g.d[r], g.dmin[r], super::q4_k::pack_scales(&sc, &mins), qs)
    }

    pub(crate) fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        use super::block256::Block256;
        for (b, o) in out.chunks_exact_mut(QK_K).enumerate().take(self.kb) {
            self.block(row, b).dequantize(o);
        }
    }

    /// The portable product of row `row` with one activation row: per 64
    /// values (`gemm`) or per block, as the x86 kernels compute it.
    pub(crate) fn dot(&self, row: usize, y: &[Q8KBlock], gemm: bool) -> f32 {
        let (r, base) = (row % ROWS, (row / ROWS) * self.kb);
        let (mut acc, mut acc_min) = (0f32, 0f32);
        for (b, y) in y.iter().enumerate().take(self.kb) {
            let g = &self.groups[base + b];
            let (d, dmin) = (half(g.d[r]) * y.d, half(g.dmin[r]) * y.d);
            let (mut s_block, mut m_block) = (0i32, 0i32);
            for p in 0..4 {
                let mut s = 0i32;
                let mut m = 0i32;
                for h in 0..2 {
                    let part: i32 = (0..32)
                        .map(|e| {
                            let byte = g.qs[256 * p + 32 * (e / 4) + 4 * r + e % 4];
                            ((byte >> (4 * h)) & 0xF) as i32 * y.qs[64 * p + 32 * h + e] as i32
                        })
                        .sum();
                    s += g.sc[8 * (2 * p + h) + r] as i32 * part;
                    m += g.mins[16 * p + 2 * r + h] as i32
                        * (y.bsums[4 * p + 2 * h] as i32 + y.bsums[4 * p + 2 * h + 1] as i32);
                }
                if gemm {
                    acc = (s as f32).mul_add(d, acc);
                    acc_min = (m as f32).mul_add(dmin, acc_min);
                } else {
                    s_block += s;
                    m_block += m;
                }
            }
            if !gemm {
                acc = (s_block as f32).mul_add(d, acc);
                acc_min = (m_block as f32).mul_add(dmin, acc_min);
            }
        }
        acc - acc_min
    }

    /// `out(a, row)` for every row of the groups covering `rows` (a multiple
    /// of eight) and every activation row `a`. `one_sequence`: the rows are
    /// one sequence's (prefill), whose fours take the per-64-value order.
    pub(crate) fn matmul_rows(
        &self,
        acts: &[Q8KBlock],
        n_acts: usize,
        one_sequence: bool,
        rows: std::ops::Range<usize>,
        isa: Isa,
        mut out: impl FnMut(usize, usize, f32),
    ) {
        debug_assert!(rows.start.is_multiple_of(ROWS) && rows.end.is_multiple_of(ROWS));
        let kb = self.kb;
        let y = |a: usize| &acts[a * kb..(a + 1) * kb];
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 {
            super::isa::assert_available(isa);
            let vnni = isa >= Isa::Avx512Vnni;
            for g in rows.start / ROWS..rows.end / ROWS {
                let groups = &self.groups[g * kb..(g + 1) * kb];
                let mut a = 0;
                while a < n_acts {
                    let take = match n_acts - a {
                        n if n >= 8 && vnni => 8,
                        n if n >= 4 => 4,
                        _ => 1,
                    };
                    let gemm = one_sequence && take > 1;
                    let mut lanes = [[0f32; ROWS]; 8];
                    // SAFETY: the CPU has `isa`'s features (`assert_available`
                    // above: `isa()` checked them at run time; the eight-row
                    // arm runs only with `vnni`), and `groups` and every
                    // activation row `y(..)` are sliced `kb` long, as the
                    // kernels read them.
                    unsafe {
                        match (take, vnni) {
                            (8, _) => {
                                x86::group_avx512::<8>(groups, std::array::from_fn(|i| y(a + i)), gemm, &mut lanes)
                            }
                            (4, true) => {
                                x86::group_avx512::<4>(groups, std::array::from_fn(|i| y(a + i)), gemm, &mut lanes)
                            }
                            (4, false) => {
                                x86::group_avx2::<4>(groups, std::array::from_fn(|i| y(a + i)), gemm, &mut lanes)
                            }
                            (_, true) => x86::group_avx512::<1>(groups, [y(a)], gemm, &mut lanes),
                            (_, false) => x86::group_avx2::<1>(groups, [y(a)], gemm, &mut lanes),
                        }
                    }
                    for (i, l) in lanes.iter().enumerate().take(take) {
                        for (r, v) in l.iter().enumerate() {
                            out(a + i, g * ROWS + r, *v);
                        }
                    }
                    a += take;
                }
            }
            return;
        }
        let _ = isa;
        let fours = if one_sequence { n_acts / 4 * 4 } else { 0 };
        for row in rows {
            for a in 0..n_acts {
                out(a, row, self.dot(row, y(a), a < fours));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{GroupQ4K, ROWS};
    use crate::cpu::q8::Q8KBlock;

    /// Eight weight rows against `R` activation rows; `lanes[a][r]`.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C, and every `y[a]` must hold at
    /// least `groups.len()` blocks (read by unchecked index).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn group_avx2<const R: usize>(
        groups: &[GroupQ4K],
        y: [&[Q8KBlock]; R],
        gemm: bool,
        lanes: &mut [[f32; ROWS]; 8],
    ) {
        group::<R, false>(groups, y, gemm, lanes)
    }

    /// `group_avx2` with VNNI's byte dot products (the quants are unsigned,
    /// as VNNI wants them) and AVX-512VL's 32 registers: the same integers,
    /// so the same results.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, DQ, VL and VNNI,
    /// and every `y[a]` must hold at least `groups.len()` blocks.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub(super) unsafe fn group_avx512<const R: usize>(
        groups: &[GroupQ4K],
        y: [&[Q8KBlock]; R],
        gemm: bool,
        lanes: &mut [[f32; ROWS]; 8],
    ) {
        group::<R, true>(groups, y, gemm, lanes)
    }

    /// `group_avx2` (or `group_avx512` with `VNNI`), inlined into it.
    ///
    /// # Safety
    /// As that entry point's: its features enabled by the caller, and every
    /// `y[a]` at least `groups.len()` blocks long.
    #[inline(always)]
    unsafe fn group<const R: usize, const VNNI: bool>(
        groups: &[GroupQ4K],
        y: [&[Q8KBlock]; R],
        gemm: bool,
        lanes: &mut [[f32; ROWS]; 8],
    ) {
        let m4 = _mm256_set1_epi8(0xF);
        let ones = _mm256_set1_epi16(1);
        let zero = _mm256_setzero_si256();
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc_min = [_mm256_setzero_ps(); R];
        for (b, g) in groups.iter().enumerate() {
            let xd = _mm256_cvtph_ps(_mm_loadu_si128(g.d.as_ptr() as *const __m128i));
            let xdmin = _mm256_cvtph_ps(_mm_loadu_si128(g.dmin.as_ptr() as *const __m128i));
            let mut s_block = [zero; R];
            let mut m_block = [zero; R];
            for p in 0..4 {
                let mut s = [zero; R];
                for h in 0..2 {
                    let sc =
                        _mm256_cvtepu8_epi32(_mm_loadl_epi64(g.sc.as_ptr().add(8 * (2 * p + h)) as *const __m128i));
                    let mut q = [zero; 8];
                    for (c, qc) in q.iter_mut().enumerate() {
                        let v = _mm256_loadu_si256(g.qs.as_ptr().add(256 * p + 32 * c) as *const __m256i);
                        *qc = if h == 0 {
                            _mm256_and_si256(v, m4)
                        } else {
                            _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4)
                        };
                    }
                    for a in 0..R {
                        let yq = y[a].get_unchecked(b).qs.as_ptr().add(64 * p + 32 * h);
                        let mut t = zero;
                        for (c, qc) in q.iter().enumerate() {
                            // Values 4c..4c+4 of the run, broadcast to every row.
                            let yv = _mm256_set1_epi32(std::ptr::read_unaligned(yq.add(4 * c) as *const i32));
                            // Exact either way: 15·127·2 fits 16 bits.
                            t = if VNNI {
                                _mm256_dpbusd_epi32(t, *qc, yv)
                            } else {
                                _mm256_add_epi32(t, _mm256_madd_epi16(_mm256_maddubs_epi16(*qc, yv), ones))
                            };
                        }
                        s[a] = _mm256_add_epi32(s[a], _mm256_mullo_epi32(t, sc));
                    }
                }
                let mins = _mm256_cvtepu8_epi16(_mm_loadu_si128(g.mins.as_ptr().add(16 * p) as *const __m128i));
                for a in 0..R {
                    let yb = y[a].get_unchecked(b);
                    // The run's two 32-value activation sums (they fit 16 bits).
                    let pair =
                        |h: usize| (yb.bsums[4 * p + 2 * h] as i32 + yb.bsums[4 * p + 2 * h + 1] as i32) as u16 as u32;
                    let m = _mm256_madd_epi16(mins, _mm256_set1_epi32((pair(0) | pair(1) << 16) as i32));
                    if gemm {
                        let yd = _mm256_set1_ps(yb.d);
                        acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[a]), _mm256_mul_ps(xd, yd), acc[a]);
                        acc_min[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(xdmin, yd), acc_min[a]);
                    } else {
                        s_block[a] = _mm256_add_epi32(s_block[a], s[a]);
                        m_block[a] = _mm256_add_epi32(m_block[a], m);
                    }
                }
            }
            if !gemm {
                for a in 0..R {
                    let yd = _mm256_set1_ps(y[a].get_unchecked(b).d);
                    acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_block[a]), _mm256_mul_ps(xd, yd), acc[a]);
                    acc_min[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m_block[a]), _mm256_mul_ps(xdmin, yd), acc_min[a]);
                }
            }
        }
        for a in 0..R {
            _mm256_storeu_ps(lanes[a].as_mut_ptr(), _mm256_sub_ps(acc[a], acc_min[a]));
        }
    }
}
