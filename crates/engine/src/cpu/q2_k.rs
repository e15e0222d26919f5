//! Q2_K: 256 two-bit quants; a 4-bit scale and a 4-bit minimum per 16
//! values; f16 super-scales. Values are `d·sc·q − dmin·m`.

use super::block256::{Block256, Finish, Scales};
use super::q8::QK_K;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ2K {
    scales: [u8; 16],
    qs: [u8; 64],
    d: u16,
    dmin: u16,
}

impl Block256 for BlockQ2K {
    const SIGNED: bool = false;
    const FINISH: Finish = Finish::MinLanes;
    const BYTES: usize = 84;
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn dmin_bits(&self) -> u16 {
        self.dmin
    }
    fn scales(&self) -> Scales {
        Scales { sc: self.scales.map(|s| (s & 0xF) as i16), mins: self.scales.map(|s| (s >> 4) as i16) }
    }
    fn quants(&self) -> [i8; QK_K] {
        // Each 32 bytes hold four runs of 32 values, two bits apiece.
        std::array::from_fn(|e| {
            let (j, s, b) = (e / 128, (e % 128) / 32, e % 32);
            ((self.qs[32 * j + b] >> (2 * s)) & 3) as i8
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
            let v = _mm256_loadu_si256(self.qs.as_ptr().add(32 * j) as *const __m256i);
            for s in 0..4 {
                q[4 * j + s] = bits(v, 2 * s as i32, 3);
            }
        }
        q
    }
}
