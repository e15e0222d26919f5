//! Q4_0: 32 four-bit quants and an f16 scale; values are `d·(q − 8)`.

use super::block32::{Block32, Sum};

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ4_0 {
    d: u16,
    qs: [u8; 16],
}

/// Low nibbles are values 0..16, high nibbles 16..32 (GGML's order).
pub(crate) fn nibbles(qs: &[u8; 16]) -> [u8; 32] {
    std::array::from_fn(|b| if b < 16 { qs[b] & 0xF } else { qs[b - 16] >> 4 })
}

impl Block32 for BlockQ4_0 {
    const SUM: Sum = Sum::Signed;
    const BYTES: usize = 18;
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn quants(&self) -> [i8; 32] {
        nibbles(&self.qs).map(|n| n as i8 - 8)
    }
    /// # Safety
    /// Upholds `Block32::quants_avx2`'s contract: the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quants_avx2(&self) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        _mm256_sub_epi8(super::block32::x86::nibbles(&self.qs), _mm256_set1_epi8(8))
    }
}
