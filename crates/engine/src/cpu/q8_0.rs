//! Q8_0: 32 signed bytes and an f16 scale; values are `d·q`.

use super::block32::{Block32, Sum};

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ8_0 {
    d: u16,
    qs: [i8; 32],
}

impl Block32 for BlockQ8_0 {
    const SUM: Sum = Sum::Signed;
    const BYTES: usize = 34;
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn quants(&self) -> [i8; 32] {
        self.qs
    }
    /// # Safety
    /// Upholds `Block32::quants_avx2`'s contract: the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quants_avx2(&self) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        _mm256_loadu_si256(self.qs.as_ptr() as *const __m256i)
    }
}
