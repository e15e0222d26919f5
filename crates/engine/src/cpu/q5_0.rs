//! Q5_0: 32 five-bit quants (low nibbles, plus a 32-bit word of fifth bits)
//! and an f16 scale; values are `d·(q − 16)`.

use super::block32::{Block32, Sum};
use super::q4_0::nibbles;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ5_0 {
    d: u16,
    qh: [u8; 4],
    qs: [u8; 16],
}

/// Four-bit quants with their fifth bits, 0..32.
pub(crate) fn five_bits(qs: &[u8; 16], qh: [u8; 4]) -> [u8; 32] {
    let h = u32::from_le_bytes(qh);
    let n = nibbles(qs);
    std::array::from_fn(|j| n[j] | ((((h >> j) & 1) as u8) << 4))
}

impl Block32 for BlockQ5_0 {
    const SUM: Sum = Sum::Signed;
    const BYTES: usize = 22;
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn quants(&self) -> [i8; 32] {
        five_bits(&self.qs, self.qh).map(|q| q as i8 - 16)
    }
    /// # Safety
    /// Upholds `Block32::quants_avx2`'s contract: the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quants_avx2(&self) -> std::arch::x86_64::__m256i {
        use super::block32::x86::{bytes_from_bits, nibbles};
        use std::arch::x86_64::*;
        // 0xF0 where the fifth bit is clear: as a signed byte, q − 16.
        let hi = _mm256_andnot_si256(bytes_from_bits(u32::from_le_bytes(self.qh)), _mm256_set1_epi8(0xF0u8 as i8));
        _mm256_or_si256(nibbles(&self.qs), hi)
    }
    /// # Safety
    /// Upholds `Block32::offset_quants_avx512`'s contract: the CPU has AVX2,
    /// FMA and AVX-512 F, BW and VL.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
    unsafe fn offset_quants_avx512(&self) -> std::arch::x86_64::__m256i {
        use super::block32::x86::nibbles;
        use std::arch::x86_64::*;
        // q − 16 + 128 = the nibble plus 0x80 where the fifth bit is set, 0x70 where not.
        let high =
            _mm256_mask_blend_epi8(u32::from_le_bytes(self.qh), _mm256_set1_epi8(0x70), _mm256_set1_epi8(0x80u8 as i8));
        _mm256_or_si256(nibbles(&self.qs), high)
    }
}
