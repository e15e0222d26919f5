//! Q5_1: 32 five-bit quants, an f16 scale and an f16 minimum; values are `d·q + m`.

use super::block32::{Block32, Sum};
use super::q5_0::five_bits;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ5_1 {
    d: u16,
    m: u16,
    qh: [u8; 4],
    qs: [u8; 16],
}

impl Block32 for BlockQ5_1 {
    const SUM: Sum = Sum::WithMin;
    const BYTES: usize = 24;
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn m_bits(&self) -> u16 {
        self.m
    }
    fn quants(&self) -> [i8; 32] {
        five_bits(&self.qs, self.qh).map(|q| q as i8)
    }
    /// # Safety
    /// Upholds `Block32::quants_avx2`'s contract: the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quants_avx2(&self) -> std::arch::x86_64::__m256i {
        use super::block32::x86::{bytes_from_bits, nibbles};
        use std::arch::x86_64::*;
        let hi = _mm256_and_si256(bytes_from_bits(u32::from_le_bytes(self.qh)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(&self.qs), hi)
    }
}
