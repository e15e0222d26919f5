//! Q4_1: 32 four-bit quants, an f16 scale and an f16 minimum; values are `d·q + m`.

use super::block32::{Block32, Sum};
use super::q4_0::nibbles;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ4_1 {
    d: u16,
    m: u16,
    qs: [u8; 16],
}

impl Block32 for BlockQ4_1 {
    const SUM: Sum = Sum::WithMin;
    const BYTES: usize = 20;
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn m_bits(&self) -> u16 {
        self.m
    }
    fn quants(&self) -> [i8; 32] {
        nibbles(&self.qs).map(|n| n as i8)
    }
    /// # Safety
    /// Upholds `Block32::quants_avx2`'s contract: the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quants_avx2(&self) -> std::arch::x86_64::__m256i {
        super::block32::x86::nibbles(&self.qs)
    }
}
