//! IQ4_XS: 256 four-bit indices into IQ4_NL's table; 6-bit scales per 32
//! values (low nibbles in `scales_l`, high bits in `scales_h`), biased by
//! 32; an f16 super-scale. Values are `d·(sc − 32)·TABLE[q]`.

use super::block256::{Block256, Finish, Scales};
use super::iq4_nl::TABLE;
use super::q8::QK_K;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockIq4Xs {
    d: u16,
    scales_h: u16,
    scales_l: [u8; 4],
    qs: [u8; 128],
}

impl Block256 for BlockIq4Xs {
    const SIGNED: bool = true;
    const FINISH: Finish = Finish::Plain;
    const BYTES: usize = 136;
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn scales(&self) -> Scales {
        let mut sc = [0i16; 16];
        for c in 0..8 {
            let low = (self.scales_l[c / 2] >> (4 * (c % 2))) & 0xF;
            let high = ((self.scales_h >> (2 * c)) & 3) as u8;
            let s = (low | (high << 4)) as i16 - 32;
            sc[2 * c] = s;
            sc[2 * c + 1] = s;
        }
        Scales { sc, mins: [0; 16] }
    }
    fn quants(&self) -> [i8; QK_K] {
        // Each 32 values: 16 bytes, low nibbles first, then high.
        std::array::from_fn(|e| {
            let (c, hi, b) = (e / 32, (e % 32) / 16, e % 16);
            TABLE[((self.qs[16 * c + b] >> (4 * hi)) & 0xF) as usize]
        })
    }
    /// # Safety
    /// Upholds `Block256::quants_avx2`'s contract: the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quants_avx2(&self) -> [std::arch::x86_64::__m256i; 8] {
        let mut q = [std::arch::x86_64::_mm256_setzero_si256(); 8];
        for (c, v) in q.iter_mut().enumerate() {
            *v = super::iq4_nl::lookup_avx2(self.qs.as_ptr().add(16 * c));
        }
        q
    }
}
