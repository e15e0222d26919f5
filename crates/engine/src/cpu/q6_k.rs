//! Q6_K: 256 six-bit quants (low nibbles in `ql`, two high bits in `qh`),
//! signed 8-bit scales per 16 values, an f16 super-scale. Values are
//! `d·sc·(q − 32)`.

use super::block256::{Block256, Finish, Scales};
use super::q8::QK_K;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ6K {
    ql: [u8; 128],
    qh: [u8; 64],
    scales: [i8; 16],
    d: u16,
}

impl Block256 for BlockQ6K {
    const SIGNED: bool = false;
    const FINISH: Finish = Finish::Offset32;
    const BYTES: usize = 210;
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn scales(&self) -> Scales {
        Scales { sc: self.scales.map(|s| s as i16), mins: [0; 16] }
    }
    fn dot_lanes(x: &[Self], y: &[super::q8::Q8KBlock], isa: super::isa::Isa) -> Option<f32> {
        #[cfg(target_arch = "x86_64")]
        if isa >= super::isa::Isa::Avx512Vnni {
            super::isa::assert_available(isa);
            // SAFETY: the CPU has AVX-512 VNNI and what it implies
            // (`assert_available`); `dot_rows` checked that `y` is as long as `x`.
            return Some(unsafe { dot_lanes_avx512(x, y) });
        }
        #[cfg(target_arch = "x86_64")]
        if isa >= super::isa::Isa::Avx2 {
            super::isa::assert_available(isa);
            // SAFETY: the CPU has AVX2, FMA and F16C (`assert_available`);
            // `dot_rows` checked that `y` is as long as `x`.
            return Some(unsafe { dot_lanes_avx2(x, y) });
        }
        let _ = (x, y, isa);
        None
    }
    fn quants(&self) -> [i8; QK_K] {
        // Per 128 values: runs 0 and 1 take the low nibbles of ql's two
        // halves, runs 2 and 3 the high nibbles; qh gives two bits per run.
        std::array::from_fn(|e| {
            let (j, s, b) = (e / 128, (e % 128) / 32, e % 32);
            let low = (self.ql[64 * j + 32 * (s % 2) + b] >> (4 * (s / 2))) & 0xF;
            let high = (self.qh[32 * j + b] >> (2 * s)) & 3;
            (low | (high << 4)) as i8
        })
    }
    /// # Safety
    /// Upholds `Block256::quants_avx2`'s contract: the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quants_avx2(&self) -> [std::arch::x86_64::__m256i; 8] {
        use super::block256::x86::bits;
        use std::arch::x86_64::*;
        let mut q = [_mm256_setzero_si256(); 8];
        for j in 0..2 {
            let qh = _mm256_loadu_si256(self.qh.as_ptr().add(32 * j) as *const __m256i);
            for s in 0..4 {
                let ql = _mm256_loadu_si256(self.ql.as_ptr().add(64 * j + 32 * (s % 2)) as *const __m256i);
                let low = bits(ql, 4 * (s / 2) as i32, 0xF);
                let high = bits(qh, 2 * s as i32, 3);
                q[4 * j + s] = _mm256_or_si256(low, _mm256_slli_epi16::<4>(high));
            }
        }
        q
    }
}

/// One Q6_K weight row against one Q8_K activation row in llama.cpp's
/// vector-dot order (`Order::Lanes`), with AVX-512 VNNI: decoding's kernel
/// for the most common type of a Q4_K_M file's attention, recurrent and
/// output matrices. `block256::dot_rows` gives the same bits; this one
/// unpacks two 32-value chunks per register straight from the block (no
/// staging through 256-bit quants or the scales array), so more of each
/// block's loads are in flight at once.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, DQ, VL and VNNI,
/// and `y` must hold at least `x.len()` blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
pub(crate) unsafe fn dot_lanes_avx512(x: &[BlockQ6K], y: &[super::q8::Q8KBlock]) -> f32 {
    use super::block32::x86::half;
    use std::arch::x86_64::*;
    debug_assert!(y.len() >= x.len());
    let m4 = _mm512_set1_epi8(0x0F);
    let m3 = _mm512_set1_epi8(3);
    // Per 256-bit half, the shift that brings each chunk's two high bits down:
    // chunks 0 and 1 of 128 values take bits 0–1 and 2–3, chunks 2 and 3 bits 4–5 and 6–7.
    let shift_lo = _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(2));
    let shift_hi = _mm512_inserti64x4::<1>(_mm512_set1_epi16(4), _mm256_set1_epi16(6));
    // Register c holds chunks 2c and 2c + 1: its 128-bit quarters take
    // scales 4c … 4c + 3 (one per 16 values).
    let idx: [__m512i; 4] = std::array::from_fn(|c| {
        let q = |k: i16| _mm_set1_epi16(4 * c as i16 + k);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm256_set_m128i(q(1), q(0))), _mm256_set_m128i(q(3), q(2)))
    });
    let mut acc = _mm256_setzero_ps();
    for i in 0..x.len() {
        let xb = x.get_unchecked(i);
        let yb = y.get_unchecked(i);
        let d = _mm256_set1_ps(yb.d * half(xb.d));
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(xb.scales.as_ptr() as *const __m128i));
        let sc512 = _mm512_castsi256_si512(sc16);
        let mut wide = _mm512_setzero_si512();
        for j in 0..2 {
            let ql = _mm512_loadu_si512(xb.ql.as_ptr().add(64 * j) as *const __m512i);
            let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(xb.qh.as_ptr().add(32 * j) as *const __m256i));
            let q_lo = _mm512_or_si512(
                _mm512_and_si512(ql, m4),
                _mm512_slli_epi16::<4>(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_lo), m3)),
            );
            let q_hi = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                _mm512_slli_epi16::<4>(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), m3)),
            );
            for (h, q) in [q_lo, q_hi].into_iter().enumerate() {
                let c = 2 * j + h;
                let yv = _mm512_loadu_si512(yb.qs.as_ptr().add(64 * c) as *const __m512i);
                let p16 = _mm512_maddubs_epi16(q, yv);
                wide = _mm512_dpwssd_epi32(wide, _mm512_permutexvar_epi16(idx[c], sc512), p16);
            }
        }
        let mut sumi = _mm256_add_epi32(_mm512_castsi512_si256(wide), _mm512_extracti64x4_epi64::<1>(wide));
        let bsums = _mm256_loadu_si256(yb.bsums.as_ptr() as *const __m256i);
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums, sc16)));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
    super::vec_ops::hsum8(lanes)
}

/// `dot_lanes_avx512` on AVX2: `ggml_vec_dot_q6_K_q8_K`'s own loop, each
/// 32-value chunk unpacked from the block into a register as it goes.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C, and `y` must hold at least
/// `x.len()` blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_lanes_avx2(x: &[BlockQ6K], y: &[super::q8::Q8KBlock]) -> f32 {
    use super::block32::x86::half;
    use std::arch::x86_64::*;
    debug_assert!(y.len() >= x.len());
    let m4 = _mm256_set1_epi8(0x0F);
    let m3 = _mm256_set1_epi8(3);
    // Chunk c's two scales (one per 16 values), eight 16-bit lanes each.
    let spread: [__m128i; 8] = std::array::from_fn(|c| {
        let (a, b) = (2 * c as i8, 2 * c as i8 + 1);
        _mm_setr_epi8(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
    });
    let mut acc = _mm256_setzero_ps();
    for i in 0..x.len() {
        let xb = x.get_unchecked(i);
        let yb = y.get_unchecked(i);
        let d = _mm256_set1_ps(yb.d * half(xb.d));
        let scales = _mm_loadu_si128(xb.scales.as_ptr() as *const __m128i);
        let bsums = _mm256_loadu_si256(yb.bsums.as_ptr() as *const __m256i);
        let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums, _mm256_cvtepi8_epi16(scales)));
        let mut sumi = _mm256_setzero_si256();
        for j in 0..2 {
            let ql0 = _mm256_loadu_si256(xb.ql.as_ptr().add(64 * j) as *const __m256i);
            let ql1 = _mm256_loadu_si256(xb.ql.as_ptr().add(64 * j + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(xb.qh.as_ptr().add(32 * j) as *const __m256i);
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m3))),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<2>(qh), m3)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                    _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<4>(qh), m3)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                    _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<6>(qh), m3)),
                ),
            ];
            for (s, q) in q.into_iter().enumerate() {
                let c = 4 * j + s;
                let yv = _mm256_loadu_si256(yb.qs.as_ptr().add(32 * c) as *const __m256i);
                let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, spread[c]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, _mm256_maddubs_epi16(q, yv)));
            }
        }
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, offset)), acc);
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
    super::vec_ops::hsum8(lanes)
}
