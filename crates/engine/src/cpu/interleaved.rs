//! Q4_0, IQ4_NL and MXFP4 weights with eight rows interleaved, built at load time
//! as llama.cpp's REPACK builds them: one register then holds four values
//! of each of eight rows, so a multiply-add against four activation bytes
//! broadcast to every lane gives eight rows' sums at once, with no
//! horizontal sums. Each block's exact integer sum is scaled by `dx·dy` in
//! one fused multiply-add, llama.cpp's repacked order.

use super::block32::{e8m0_half, half};
use super::iq4_nl::TABLE;
use super::isa::Isa;
use super::q8::Q8Block;

/// Rows per group.
pub(crate) const ROWS: usize = 8;

/// One 32-value block of eight rows: their scales (f16 bits, or MXFP4's
/// E8M0 exponent bytes), then their nibbles in four-byte runs
/// (`qs[32c + 4r + j]` is byte `4c + j` of row `r`'s block).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Group8 {
    d: [u16; ROWS],
    qs: [u8; 16 * ROWS],
}

/// What the nibbles index.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nibbles {
    /// `q − 8`.
    Q4_0,
    /// IQ4_NL's table.
    Iq4Nl,
    /// MXFP4's table, under an E8M0 scale.
    Mxfp4,
}

impl Nibbles {
    /// The sixteen values a nibble stands for, where a table gives them.
    fn table(self) -> &'static [i8; 16] {
        match self {
            Nibbles::Mxfp4 => &super::mxfp4::TABLE,
            _ => &TABLE,
        }
    }

    /// A block's scale from its stored bits.
    fn scale(self, bits: u16) -> f32 {
        match self {
            Nibbles::Mxfp4 => e8m0_half(bits as u8),
            _ => half(bits),
        }
    }
}

/// A matrix whose row count is a multiple of eight, in groups of eight rows.
pub(crate) struct Interleaved {
    groups: Vec<Group8>,
    kb: usize,
    kind: Nibbles,
}

impl Interleaved {
    /// From GGUF's row-major blocks: a scale (an f16, or MXFP4's E8M0
    /// byte), then 16 bytes of nibbles.
    pub(crate) fn new(data: &[u8], n: usize, kb: usize, kind: Nibbles) -> Self {
        let scale = if kind == Nibbles::Mxfp4 { 1 } else { 2 };
        let bytes = scale + 16;
        debug_assert!(n.is_multiple_of(ROWS) && data.len() == n * kb * bytes);
        let block = |row: usize, b: usize| &data[(row * kb + b) * bytes..(row * kb + b + 1) * bytes];
        let mut groups = Vec::with_capacity(n / ROWS * kb);
        for g in 0..n / ROWS {
            for b in 0..kb {
                let mut group = Group8 { d: [0; ROWS], qs: [0; 16 * ROWS] };
                for r in 0..ROWS {
                    let src = block(g * ROWS + r, b);
                    group.d[r] = if scale == 1 { src[0] as u16 } else { u16::from_le_bytes([src[0], src[1]]) };
                    for c in 0..4 {
                        let from = scale + 4 * c;
                        group.qs[32 * c + 4 * r..32 * c + 4 * r + 4].copy_from_slice(&src[from..from + 4]);
                    }
                }
                groups.push(group);
            }
        }
        Self { groups, kb, kind }
    }

    pub(crate) fn stored_bytes(&self) -> usize {
        std::mem::size_of_val(self.groups.as_slice())
    }

    /// Row `row`'s block `b`: its scale and its 32 quants in activation order.
    pub(crate) fn block(&self, row: usize, b: usize) -> (f32, [i8; 32]) {
        let g = &self.groups[(row / ROWS) * self.kb + b];
        let r = row % ROWS;
        let byte = |j: usize| g.qs[32 * (j / 4) + 4 * r + j % 4];
        let q = std::array::from_fn(|e| {
            let n = if e < 16 { byte(e) & 0xF } else { byte(e - 16) >> 4 };
            match self.kind {
                Nibbles::Q4_0 => n as i8 - 8,
                kind => kind.table()[n as usize],
            }
        });
        (self.kind.scale(g.d[r]), q)
    }

    pub(crate) fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        for (b, o) in out.chunks_exact_mut(32).enumerate().take(self.kb) {
            let (d, q) = self.block(row, b);
            o.iter_mut().zip(q).for_each(|(o, q)| *o = d * q as f32);
        }
    }

    /// The portable product of row `row` with one activation row, in the
    /// repacked order.
    pub(crate) fn dot(&self, row: usize, y: &[Q8Block]) -> f32 {
        let mut acc = 0f32;
        for (b, y) in y.iter().enumerate().take(self.kb) {
            let (d, q) = self.block(row, b);
            let sumi: i32 = q.iter().zip(&y.qs).map(|(&q, &v)| q as i32 * v as i32).sum();
            acc = (sumi as f32).mul_add(d * y.d, acc);
        }
        acc
    }

    /// `out(a, row)` for every row of the groups covering `rows` (a multiple
    /// of eight) and every activation row `a`.
    pub(crate) fn matmul_rows(
        &self,
        acts: &[Q8Block],
        n_acts: usize,
        rows: std::ops::Range<usize>,
        isa: Isa,
        mut out: impl FnMut(usize, usize, f32),
    ) {
        debug_assert!(rows.start.is_multiple_of(ROWS) && rows.end.is_multiple_of(ROWS));
        let kb = self.kb;
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 {
            super::isa::assert_available(isa);
            let vnni = isa >= Isa::Avx512Vnni;
            // AVX-512: activation rows in fours against two groups at once;
            // the eight-row kernel takes the rest.
            let quads = if vnni { n_acts / 4 * 4 } else { 0 };
            // Each activation block's exact sum, for VNNI: the offset that
            // makes the quants unsigned comes off through it.
            let ysum: Vec<i32> = if vnni {
                acts[..n_acts * kb].iter().map(|b| b.qs.iter().map(|&v| v as i32).sum()).collect()
            } else {
                Vec::new()
            };
            let paired = if quads > 0 {
                // SAFETY: `quads > 0` only with VNNI: `isa` is AVX-512 with
                // VNNI, which `isa()` found on this CPU (asserted above).
                unsafe { self.matmul_pairs_avx512(acts, &ysum, quads, rows.clone(), &mut out) }
            } else {
                rows.start / ROWS
            };
            for g in rows.start / ROWS..rows.end / ROWS {
                let groups = &self.groups[g * kb..(g + 1) * kb];
                let mut a = if g < paired { quads } else { 0 };
                while a < n_acts {
                    let take = if n_acts - a >= 4 { 4 } else { 1 };
                    let mut lanes = [[0f32; ROWS]; 4];
                    // SAFETY: the CPU has `isa`'s features (`assert_available`
                    // above: `isa()` checked them at run time), and the kernels
                    // read `kb` blocks of each slice: `groups`, every activation
                    // row and (VNNI) its block sums are all sliced `kb` long.
                    unsafe {
                        if take == 4 {
                            let y: [&[Q8Block]; 4] = std::array::from_fn(|i| &acts[(a + i) * kb..(a + i + 1) * kb]);
                            if vnni {
                                let s = std::array::from_fn(|i| &ysum[(a + i) * kb..(a + i + 1) * kb]);
                                x86::group_avx512::<4>(groups, y, s, self.kind, &mut lanes)
                            } else {
                                x86::group_avx2::<4>(groups, y, self.kind, &mut lanes)
                            }
                        } else {
                            let y = [&acts[a * kb..(a + 1) * kb]];
                            if vnni {
                                x86::group_avx512::<1>(groups, y, [&ysum[a * kb..(a + 1) * kb]], self.kind, &mut lanes)
                            } else {
                                x86::group_avx2::<1>(groups, y, self.kind, &mut lanes)
                            }
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
        for row in rows {
            for a in 0..n_acts {
                out(a, row, self.dot(row, &acts[a * kb..(a + 1) * kb]));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Interleaved {
    /// Activation rows `0..quads` (a multiple of four: prefill) against the
    /// groups of `rows` two at a time, sixteen rows to a 512-bit register
    /// (AVX-512). Returns the first group not done (a last odd group). A
    /// decoding row stays with the eight-row kernel, which streams the
    /// weights faster on Zen 4.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, DQ, VL and VNNI.
    /// (Every slice the kernel reads is sliced here, with checks, `kb` long.)
    unsafe fn matmul_pairs_avx512(
        &self,
        acts: &[Q8Block],
        ysum: &[i32],
        quads: usize,
        rows: std::ops::Range<usize>,
        out: &mut impl FnMut(usize, usize, f32),
    ) -> usize {
        let kb = self.kb;
        let end = rows.end / ROWS;
        let mut g = rows.start / ROWS;
        while g + 2 <= end {
            let (g0, g1) = (&self.groups[g * kb..(g + 1) * kb], &self.groups[(g + 1) * kb..(g + 2) * kb]);
            for a in (0..quads).step_by(4) {
                let mut lanes = [[0f32; 2 * ROWS]; 4];
                let y: [&[Q8Block]; 4] = std::array::from_fn(|i| &acts[(a + i) * kb..(a + i + 1) * kb]);
                let s: [&[i32]; 4] = std::array::from_fn(|i| &ysum[(a + i) * kb..(a + i + 1) * kb]);
                // SAFETY: the CPU has AVX-512 with VNNI (this function's
                // contract), and `g0`, `g1`, every `y[i]` and `s[i]` are sliced
                // `kb` long above, as the kernel reads them.
                unsafe { x86::group_pair_avx512(g0, g1, y, s, self.kind, &mut lanes) };
                for (i, l) in lanes.iter().enumerate() {
                    for (r, v) in l.iter().enumerate() {
                        out(a + i, g * ROWS + r, *v);
                    }
                }
            }
            g += 2;
        }
        g
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Group8, Nibbles, ROWS};
    use crate::cpu::q8::Q8Block;

    /// A group's eight scales as floats: F16C's conversion, or for MXFP4
    /// `e8m0_half` on each exponent byte, in integer lanes (the same bits).
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C; inlined into a caller that enables them.
    #[inline(always)]
    unsafe fn scales(g: &Group8, kind: Nibbles) -> __m256 {
        let bits = _mm_loadu_si128(g.d.as_ptr() as *const __m128i);
        if kind != Nibbles::Mxfp4 {
            return _mm256_cvtph_ps(bits);
        }
        let e = _mm256_cvtepu16_epi32(bits);
        let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
        let tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
        let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, small))
    }

    /// Eight weight rows against `R` activation rows; `lanes[a][r]`.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C, and every `y[a]` must hold at
    /// least `groups.len()` blocks (read by unchecked index).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn group_avx2<const R: usize>(
        groups: &[Group8],
        y: [&[Q8Block]; R],
        kind: Nibbles,
        lanes: &mut [[f32; ROWS]; 4],
    ) {
        group::<R, false>(groups, y, [&[]; R], kind, lanes)
    }

    /// `group_avx2` with VNNI's byte dot products of the quants offset to
    /// unsigned bytes, the offset's products taken off through each
    /// activation block's sum (`ysum`): the same integers, so the same results.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, DQ, VL and VNNI,
    /// and every `y[a]` and `ysum[a]` must hold at least `groups.len()`
    /// entries (read by unchecked index).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub(super) unsafe fn group_avx512<const R: usize>(
        groups: &[Group8],
        y: [&[Q8Block]; R],
        ysum: [&[i32]; R],
        kind: Nibbles,
        lanes: &mut [[f32; ROWS]; 4],
    ) {
        group::<R, true>(groups, y, ysum, kind, lanes)
    }

    /// `group_avx2` (or `group_avx512` with `VNNI`), inlined into it.
    ///
    /// # Safety
    /// As that entry point's: its features enabled by the caller, every
    /// `y[a]` (and with `VNNI` every `ysum[a]`) at least `groups.len()` long.
    #[inline(always)]
    unsafe fn group<const R: usize, const VNNI: bool>(
        groups: &[Group8],
        y: [&[Q8Block]; R],
        ysum: [&[i32]; R],
        kind: Nibbles,
        lanes: &mut [[f32; ROWS]; 4],
    ) {
        let m4 = _mm256_set1_epi8(0xF);
        let ones = _mm256_set1_epi16(1);
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(kind.table().as_ptr() as *const __m128i));
        let flip = _mm256_set1_epi8(-128);
        let offset = if kind == Nibbles::Q4_0 { 8 } else { 128 };
        let mut acc = [_mm256_setzero_ps(); R];
        let mut q = [_mm256_setzero_si256(); 8];
        let mut aq = [_mm256_setzero_si256(); 8];
        for (b, g) in groups.iter().enumerate() {
            let d = scales(g, kind);
            for c in 0..4 {
                let v = _mm256_loadu_si256(g.qs.as_ptr().add(32 * c) as *const __m256i);
                let (lo, hi) = (_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4));
                if VNNI {
                    // Unsigned: the nibble itself (Q4_0, offset 8), or the
                    // table's value plus 128 (IQ4_NL, MXFP4).
                    if kind == Nibbles::Q4_0 {
                        (q[c], q[4 + c]) = (lo, hi);
                    } else {
                        q[c] = _mm256_xor_si256(_mm256_shuffle_epi8(table, lo), flip);
                        q[4 + c] = _mm256_xor_si256(_mm256_shuffle_epi8(table, hi), flip);
                    }
                } else if kind == Nibbles::Q4_0 {
                    q[c] = _mm256_sub_epi8(lo, _mm256_set1_epi8(8));
                    q[4 + c] = _mm256_sub_epi8(hi, _mm256_set1_epi8(8));
                } else {
                    q[c] = _mm256_shuffle_epi8(table, lo);
                    q[4 + c] = _mm256_shuffle_epi8(table, hi);
                }
            }
            if !VNNI {
                // |q| once per block, the signs moved onto each activation row.
                for c in 0..8 {
                    aq[c] = _mm256_sign_epi8(q[c], q[c]);
                }
            }
            for a in 0..R {
                let yb = y[a].get_unchecked(b);
                let mut sumi =
                    if VNNI { _mm256_set1_epi32(-offset * *ysum[a].get_unchecked(b)) } else { _mm256_setzero_si256() };
                for c in 0..8 {
                    // Values 4c..4c+4 (low nibbles) or 16+4(c−4).. (high), broadcast to every row.
                    let off = if c < 4 { 4 * c } else { 16 + 4 * (c - 4) };
                    let yv = _mm256_set1_epi32(std::ptr::read_unaligned(yb.qs.as_ptr().add(off) as *const i32));
                    // Exact integers either way (no 16-bit saturation: |q| ≤ 127, |y| ≤ 127).
                    sumi = if VNNI {
                        _mm256_dpbusd_epi32(sumi, q[c], yv)
                    } else {
                        _mm256_add_epi32(
                            sumi,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(aq[c], _mm256_sign_epi8(yv, q[c])), ones),
                        )
                    };
                }
                let scale = _mm256_mul_ps(d, _mm256_set1_ps(yb.d));
                acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), scale, acc[a]);
            }
        }
        for a in 0..R {
            _mm256_storeu_ps(lanes[a].as_mut_ptr(), acc[a]);
        }
    }

    /// Two groups (sixteen rows, the second in the upper half) against four
    /// activation rows; `lanes[a][r]`. Each row's lane takes `group`'s exact
    /// integer sum (its quants offset to unsigned bytes for VNNI, the
    /// offset's products taken off through `ysum`) and the same float steps.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, DQ, VL and VNNI,
    /// and `g1`, every `y[a]` and every `ysum[a]` must hold at least
    /// `g0.len()` entries (read by unchecked index).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub(super) unsafe fn group_pair_avx512(
        g0: &[Group8],
        g1: &[Group8],
        y: [&[Q8Block]; 4],
        ysum: [&[i32]; 4],
        kind: Nibbles,
        lanes: &mut [[f32; 2 * ROWS]; 4],
    ) {
        let m4 = _mm512_set1_epi8(0xF);
        let flip = _mm512_set1_epi8(-128);
        let table = _mm512_broadcast_i32x4(_mm_loadu_si128(kind.table().as_ptr() as *const __m128i));
        let offset = if kind == Nibbles::Q4_0 { 8 } else { 128 };
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut q = [_mm512_setzero_si512(); 8];
        for b in 0..g0.len() {
            let (a0, a1) = (g0.get_unchecked(b), g1.get_unchecked(b));
            let (d0, d1) = (scales(a0, kind), scales(a1, kind));
            let d = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(d0), d1);
            for c in 0..4 {
                let v0 = _mm256_loadu_si256(a0.qs.as_ptr().add(32 * c) as *const __m256i);
                let v1 = _mm256_loadu_si256(a1.qs.as_ptr().add(32 * c) as *const __m256i);
                let v = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(v0), v1);
                let (lo, hi) = (_mm512_and_si512(v, m4), _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4));
                if kind == Nibbles::Q4_0 {
                    q[c] = lo;
                    q[4 + c] = hi;
                } else {
                    q[c] = _mm512_xor_si512(_mm512_shuffle_epi8(table, lo), flip);
                    q[4 + c] = _mm512_xor_si512(_mm512_shuffle_epi8(table, hi), flip);
                }
            }
            for a in 0..4 {
                let yb = y[a].get_unchecked(b);
                let mut sumi = _mm512_set1_epi32(-offset * *ysum[a].get_unchecked(b));
                for (c, qc) in q.iter().enumerate() {
                    let off = if c < 4 { 4 * c } else { 16 + 4 * (c - 4) };
                    let yv = _mm512_set1_epi32(std::ptr::read_unaligned(yb.qs.as_ptr().add(off) as *const i32));
                    sumi = _mm512_dpbusd_epi32(sumi, *qc, yv);
                }
                let scale = _mm512_mul_ps(d, _mm512_set1_ps(yb.d));
                acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), scale, acc[a]);
            }
        }
        for a in 0..4 {
            _mm512_storeu_ps(lanes[a].as_mut_ptr(), acc[a]);
        }
    }
}
