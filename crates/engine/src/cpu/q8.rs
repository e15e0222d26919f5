//! Activations rounded to 8 bits, as llama.cpp's x86 build rounds them
//! before a quantized dot product: 32-value blocks (Q8_0, with the Q8_1 sum
//! for formats with a minimum) and 256-value blocks with sums of each 16
//! (Q8_K, for the K-quants and IQ4_XS).

use half::f16;

use super::isa::has_avx2_fma;

/// Values per K-quant super-block.
pub(crate) const QK_K: usize = 256;

/// One 32-value block of activations rounded to 8 bits.
#[derive(Clone, Copy)]
pub(crate) struct Q8Block {
    pub(crate) d: f32,
    /// `d ×` the sum of `qs`, rounded through f16 as Q8_1 stores it.
    pub(crate) s: f32,
    pub(crate) qs: [i8; 32],
}

/// 256 activations rounded to 8 bits, with sums of each 16.
#[derive(Clone, Copy)]
pub(crate) struct Q8KBlock {
    pub(crate) d: f32,
    pub(crate) qs: [i8; QK_K],
    pub(crate) bsums: [i16; 16],
}

/// Rounds activations (a multiple of 32 values) to 8-bit blocks: scale
/// 127/max, round half to even, the Q8_1 block sum from the unrounded scale.
pub(crate) fn quantize(x: &[f32]) -> Vec<Q8Block> {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        /// `quantize` compiled for AVX2 and FMA.
        ///
        /// # Safety
        /// The CPU must have AVX2 and FMA. (The body is safe code: any `x`.)
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(x: &[f32]) -> Vec<Q8Block> {
            let mut out = Vec::with_capacity(x.len() / 32);
            for c in x.chunks_exact(32) {
                out.push(quantize_block(c));
            }
            out
        }
        // SAFETY: the CPU has AVX2 and FMA (`has_avx2_fma`, checked at run
        // time); the body is the same safe code, with rounding done by an
        // instruction instead of a libm call, so no length needs checking.
        return unsafe { avx2(x) };
    }
    x.chunks_exact(32).map(quantize_block).collect()
}

#[inline(always)]
fn quantize_block(x: &[f32]) -> Q8Block {
    let max = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = max / 127.0;
    let id = if max != 0.0 { 127.0 / max } else { 0.0 };
    let mut qs = [0i8; 32];
    let mut sum = 0i32;
    for (q, v) in qs.iter_mut().zip(x) {
        let r = (v * id).round_ties_even() as i32;
        sum += r;
        *q = r as i8;
    }
    let s = f16::from_f32(d * sum as f32).to_f32();
    Q8Block { d: f16::from_f32(d).to_f32(), s, qs }
}

/// llama.cpp's `quantize_row_q8_K_ref`.
pub(crate) fn quantize_k(x: &[f32]) -> Vec<Q8KBlock> {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        /// `quantize_k` compiled for AVX2 and FMA.
        ///
        /// # Safety
        /// The CPU must have AVX2 and FMA. (The body is safe code: any `x`.)
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(x: &[f32]) -> Vec<Q8KBlock> {
            // A loop, not a closure: a closure would not inherit the target
            // features, and rounding would become a libm call.
            let mut out = Vec::with_capacity(x.len() / QK_K);
            for c in x.chunks_exact(QK_K) {
                out.push(quantize_k_block(c));
            }
            out
        }
        // SAFETY: the CPU has AVX2 and FMA (`has_avx2_fma`, checked at run
        // time); the body is the same safe code, so no length needs checking.
        return unsafe { avx2(x) };
    }
    x.chunks_exact(QK_K).map(quantize_k_block).collect()
}

#[inline(always)]
fn quantize_k_block(x: &[f32]) -> Q8KBlock {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut b = Q8KBlock { d: 0.0, qs: [0; QK_K], bsums: [0; 16] };
    if amax == 0.0 {
        return b;
    }
    let iscale = -127.0 / max;
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
    }
    for (s, c) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
        *s = c.iter().map(|&q| q as i16).sum();
    }
    b.d = 1.0 / iscale;
    b
}
