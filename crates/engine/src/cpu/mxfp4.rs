//! MXFP4 (the OCP microscaling format gpt-oss ships its experts in): 32
//! four-bit E2M1 values and one E8M0 exponent shared by the block. Values
//! are `2^(e − 128)·TABLE[q]`, the table holding E2M1's values doubled, as
//! llama.cpp keeps them (`kvalues_mxfp4`).

use super::block32::{Block32, Sum};
use super::q4_0::nibbles;

/// E2M1's sixteen values, doubled so that they are integers.
pub(crate) const TABLE: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockMxfp4 {
    e: u8,
    qs: [u8; 16],
}

impl Block32 for BlockMxfp4 {
    // llama.cpp's `ggml_vec_dot_mxfp4_q8_0` sums as its IQ4_NL kernel does.
    const SUM: Sum = Sum::SignedPairs;
    const BYTES: usize = 17;
    const E8M0: bool = true;
    fn d_bits(&self) -> u16 {
        self.e as u16
    }
    fn quants(&self) -> [i8; 32] {
        nibbles(&self.qs).map(|n| TABLE[n as usize])
    }
    /// # Safety
    /// Upholds `Block32::quants_avx2`'s contract: the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quants_avx2(&self) -> std::arch::x86_64::__m256i {
        super::iq4_nl::lookup_avx2_in(&TABLE, self.qs.as_ptr())
    }
}
