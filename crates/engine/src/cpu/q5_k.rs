//! Q5_K: Q4_K's layout plus a fifth bit per value (`qh`, bit `c` for the
//! `c`-th run of 32). Values are `d·sc·q − dmin·m`.

use super::block256::{Block256, Finish, Scales};
use super::q4_k::{nibble_runs, scales_and_mins};
use super::q8::QK_K;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ5K {
    d: u16,
    dmin: u16,
    scales: [u8; 12],
    qh: [u8; 32],
    qs: [u8; 128],
}

impl Block256 for BlockQ5K {
    const SIGNED: bool = false;
    const FINISH: Finish = Finish::MinScalar;
    const BYTES: usize = 176;
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn dmin_bits(&self) -> u16 {
        self.dmin
    }
    fn scales(&self) -> Scales {
        scales_and_mins(&self.scales)
    }
    fn quants(&self) -> [i8; QK_K] {
        std::array::from_fn(|e| (nibble_runs(&self.qs, e) | (((self.qh[e % 32] >> (e / 32)) & 1) << 4)) as i8)
    }
    /// # Safety
    /// Upholds `Block256::quants_avx2`'s contract: the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quants_avx2(&self) -> [std::arch::x86_64::__m256i; 8] {
        use super::block256::x86::bits;
        use std::arch::x86_64::*;
        let mut q = super::q4_k::nibble_runs_avx2(&self.qs);
        let qh = _mm256_loadu_si256(self.qh.as_ptr() as *const __m256i);
        for (c, v) in q.iter_mut().enumerate() {
            *v = _mm256_or_si256(*v, _mm256_slli_epi16::<4>(bits(qh, c as i32, 1)));
        }
        q
    }
}
