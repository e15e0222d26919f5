//! Q4_K: 256 four-bit quants; 6-bit scales and minimums per 32 values,
//! packed into 12 bytes; f16 super-scales. Values are `d·sc·q − dmin·m`.

use super::block256::{Block256, Finish, Scales};
use super::q8::QK_K;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct BlockQ4K {
    d: u16,
    dmin: u16,
    scales: [u8; 12],
    qs: [u8; 128],
}

impl BlockQ4K {
    /// `d`, `dmin`, the packed scales and the quants.
    pub(crate) fn parts(&self) -> (u16, u16, &[u8; 12], &[u8; 128]) {
        (self.d, self.dmin, &self.scales, &self.qs)
    }

    pub(crate) fn from_parts(d: u16, dmin: u16, scales: [u8; 12], qs: [u8; 128]) -> Self {
        Self { d, dmin, scales, qs }
    }
}

/// The eight 6-bit scales, then the eight minimums, of Q4_K and Q5_K.
pub(crate) fn scales_and_mins(s: &[u8; 12]) -> Scales {
    let (d, m) = unpack_scales(s);
    Scales {
        sc: std::array::from_fn(|e| d[e / 2] as i16),
        mins: std::array::from_fn(|j| if j < 8 { m[j] as i16 } else { 0 }),
    }
}

/// The 12 bytes as eight scales and eight minimums of 6 bits each.
pub(crate) fn unpack_scales(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mins = [0u8; 8];
    for j in 0..8 {
        (sc[j], mins[j]) = if j < 4 {
            (s[j] & 63, s[j + 4] & 63)
        } else {
            ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
        };
    }
    (sc, mins)
}

/// `unpack_scales` undone: every one of the 96 bits is a scale's or a
/// minimum's, so this gives back the file's bytes.
pub(crate) fn pack_scales(sc: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = (mins[j] & 63) | ((mins[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0xF) | ((mins[j + 4] & 0xF) << 4);
    }
    s
}

/// Four-bit quants: each 32 bytes hold 32 values in low nibbles, then 32 in high.
pub(crate) fn nibble_runs(qs: &[u8; 128], e: usize) -> u8 {
    let (j, hi, b) = (e / 64, (e % 64) / 32, e % 32);
    (qs[32 * j + b] >> (4 * hi)) & 0xF
}

/// `nibble_runs` for all 256 values, 32 to a register.
///
/// # Safety
/// The CPU must have AVX2 and FMA. (It reads the 128 bytes of `qs` only.)
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn nibble_runs_avx2(qs: &[u8; 128]) -> [std::arch::x86_64::__m256i; 8] {
    use std::arch::x86_64::*;
    let m4 = _mm256_set1_epi8(0xF);
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..4 {
        let v = _mm256_loadu_si256(qs.as_ptr().add(32 * j) as *const __m256i);
        q[2 * j] = _mm256_and_si256(v, m4);
        q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
    }
    q
}

impl Block256 for BlockQ4K {
    const SIGNED: bool = false;
    const FINISH: Finish = Finish::MinQuad;
    const BYTES: usize = 144;
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
        std::array::from_fn(|e| nibble_runs(&self.qs, e) as i8)
    }
    /// # Safety
    /// Upholds `Block256::quants_avx2`'s contract: the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quants_avx2(&self) -> [std::arch::x86_64::__m256i; 8] {
        nibble_runs_avx2(&self.qs)
    }
}
