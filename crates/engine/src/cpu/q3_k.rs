//! Q3_K: 256 three-bit quants (two low bits, and a high-bit mask where a
//! clear bit means −4); 6-bit scales per 16 values, biased by 32; an f16
//! super-scale. Values are `d·(sc − 32)·q`.

use super::block256::{Block256, Finish, Scales};
use super::q8::QK_K;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ3K {
    hmask: [u8; 32],
    qs: [u8; 64],
    scales: [u8; 12],
    d: u16,
}

impl Block256 for BlockQ3K {
    const SIGNED: bool = true;
    const FINISH: Finish = Finish::Plain;
    const BYTES: usize = 110;
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn scales(&self) -> Scales {
        // Low four bits from the first eight bytes, high two from the last four.
        let s = &self.scales;
        let sc = std::array::from_fn(|i| {
            let low = if i < 8 { s[i] & 0xF } else { s[i - 8] >> 4 };
            let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
            (low | (high << 4)) as i16 - 32
        });
        Scales { sc, mins: [0; 16] }
    }
    fn quants(&self) -> [i8; QK_K] {
        std::array::from_fn(|e| {
            let (j, s, b) = (e / 128, (e % 128) / 32, e % 32);
            let low = ((self.qs[32 * j + b] >> (2 * s)) & 3) as i8;
            let high_set = (self.hmask[b] >> (4 * j + s)) & 1 == 1;
            if high_set {
                low
            } else {
                low - 4
            }
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
        let hmask = _mm256_loadu_si256(self.hmask.as_ptr() as *const __m256i);
        for j in 0..2 {
            let v = _mm256_loadu_si256(self.qs.as_ptr().add(32 * j) as *const __m256i);
            for s in 0..4 {
                let high = bits(hmask, (4 * j + s) as i32, 1);
                let low = bits(v, 2 * s as i32, 3);
                q[4 * j + s] = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16::<2>(high)), _mm256_set1_epi8(4));
            }
        }
        q
    }
}
