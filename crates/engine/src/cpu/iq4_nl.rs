//! IQ4_NL: 32 four-bit indices into a fixed non-linear table, and an f16
//! scale; values are `d·TABLE[q]`.

use super::block32::{Block32, Sum};
use super::q4_0::nibbles;

/// The table every IQ4 block indexes (llama.cpp's `kvalues_iq4nl`).
pub(crate) const TABLE: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockIq4Nl {
    d: u16,
    qs: [u8; 16],
}

/// Sixteen bytes of indices looked up in the table: low nibbles, then high.
///
/// # Safety
/// The CPU must have AVX2 and FMA, and `qs` must be valid for reading
/// 16 bytes (an unaligned load).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn lookup_avx2(qs: *const u8) -> std::arch::x86_64::__m256i {
    lookup_avx2_in(&TABLE, qs)
}

/// `lookup_avx2` in another sixteen-value table (MXFP4's).
///
/// # Safety
/// As `lookup_avx2`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn lookup_avx2_in(table: &[i8; 16], qs: *const u8) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let table = _mm_loadu_si128(table.as_ptr() as *const __m128i);
    let bits = _mm_loadu_si128(qs as *const __m128i);
    let m4 = _mm_set1_epi8(0xF);
    _mm256_set_m128i(
        _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bits, 4), m4)),
        _mm_shuffle_epi8(table, _mm_and_si128(bits, m4)),
    )
}

impl Block32 for BlockIq4Nl {
    const SUM: Sum = Sum::SignedPairs;
    const BYTES: usize = 18;
    fn d_bits(&self) -> u16 {
        self.d
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
        lookup_avx2(self.qs.as_ptr())
    }
}
