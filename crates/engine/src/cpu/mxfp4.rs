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

/// MXFP4 blocks (`data`) as Q8_0 blocks holding the same values exactly:
/// each value is `TABLE[q]` (an integer) times `2^(e − 128)`, which is a
/// Q8_0 block's int8 times its f16 scale wherever f16 holds the power of
/// two (`2^−24` to `2^15`). `None` for a block outside that, or data that is
/// not whole blocks. For devices whose kernels lack MXFP4 (candle's): twice
/// the bytes, none of the values changed.
pub(crate) fn to_q8_0(data: &[u8]) -> Option<Vec<u8>> {
    if !data.len().is_multiple_of(BlockMxfp4::BYTES) {
        return None;
    }
    let mut out = Vec::with_capacity(data.len() / BlockMxfp4::BYTES * 34);
    for block in data.chunks_exact(BlockMxfp4::BYTES) {
        let d = super::block32::e8m0_half(block[0]);
        let scale = half::f16::from_f32(d);
        if scale.to_f32() != d {
            return None;
        }
        let qs: [u8; 16] = block[1..].try_into().ok()?;
        out.extend_from_slice(&scale.to_bits().to_le_bytes());
        out.extend(nibbles(&qs).map(|n| TABLE[n as usize] as u8));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code under scales across f16's range comes out as the same
    /// value; a scale past it is refused.
    #[test]
    fn mxfp4_becomes_q8_0_exactly() {
        for e in [104u8, 110, 127, 128, 130, 143] {
            let mut block = vec![e];
            block.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
            let q8 = to_q8_0(&block).unwrap();
            let d = half::f16::from_le_bytes([q8[0], q8[1]]).to_f32();
            let want: Vec<f32> = nibbles(&block[1..].try_into().unwrap())
                .iter()
                .map(|&n| TABLE[n as usize] as f32 * super::super::block32::e8m0_half(e))
                .collect();
            let got: Vec<f32> = q8[2..].iter().map(|&q| q as i8 as f32 * d).collect();
            assert_eq!(got, want, "e = {e}");
        }
        assert!(to_q8_0(&[200u8; 17]).is_none());
        assert!(to_q8_0(&[1u8; 17]).is_none());
        assert!(to_q8_0(&[128u8; 16]).is_none());
    }
}
