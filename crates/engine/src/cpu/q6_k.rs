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
