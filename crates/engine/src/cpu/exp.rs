//! llama.cpp's `ggml_v_expf`, the exponential of its softmax and SiLU, in
//! the forms of its two x86 builds: AVX2's (eight lanes) and AVX-512's
//! (sixteen lanes, a polynomial ending in `+ 1` and an exact `scalef`),
//! which differ in some last bits.
//!
//! Each form is written one lane at a time (the portable kernels, and the
//! tails of vector loops) and in registers (`x86`), doing the same
//! floating-point operations: the callers test the two bit for bit. This
//! module uses no other kernel module, so attention and the vector
//! operations both build on it without depending on each other.

/// `ggml_v_expf` for one lane (its AVX2 form, lane by lane).
#[inline(always)]
pub(crate) fn expf_lane(x: f32) -> f32 {
    let f = f32::from_bits;
    let r = f(0x4b40_0000);
    let z = x.mul_add(f(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(f(0x35bf_be8e), (-n).mul_add(f(0x3f31_7200), x));
    let e = z.to_bits() << 23;
    let k = f(e.wrapping_add(1f32.to_bits()));
    let u = b * b;
    let j = f(0x3c07_2010)
        .mul_add(b, f(0x3d2b_9f17))
        .mul_add(u, f(0x3e2a_af33).mul_add(b, f(0x3eff_fedb)))
        .mul_add(u, f(0x3f7f_fff6) * b);
    if n.abs() <= 126.0 || n.is_nan() {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f(g.wrapping_add(0x7f00_0000));
    if n.abs() > 192.0 {
        return s1 * s1;
    }
    let s2 = f(e.wrapping_sub(g));
    s2.mul_add(j, s2) * s1
}

/// `ggml_v_expf` for one lane, its AVX-512 form: the polynomial ends in
/// `+ 1` inside the last fused step, and 2^n is applied exactly by
/// `scalef`, so only |n| > 192 is special.
#[inline(always)]
pub(crate) fn expf512_lane(x: f32) -> f32 {
    let f = f32::from_bits;
    let r = f(0x4b40_0000);
    let z = x.mul_add(f(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(f(0x35bf_be8e), (-n).mul_add(f(0x3f31_7200), x));
    let u = b * b;
    let j = f(0x3c07_2010)
        .mul_add(b, f(0x3d2b_9f17))
        .mul_add(u, f(0x3e2a_af33).mul_add(b, f(0x3eff_fedb)))
        .mul_add(u, f(0x3f7f_fff6).mul_add(b, 1.0));
    if n.is_nan() {
        return f32::NAN;
    }
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    // `scalef(j, n)`: j·2^n, rounded once (the f64 product is exact).
    (j as f64 * f64::from_bits(((n as i64 + 1023) as u64) << 52)) as f32
}

/// `ggml_v_expf` in the form of the build with `W` lanes.
#[inline(always)]
pub(crate) fn expf_w<const W: usize>(x: f32) -> f32 {
    if W == 16 {
        expf512_lane(x)
    } else {
        expf_lane(x)
    }
}

/// `ggml_v_expf` in registers.
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    /// The AVX2 form: `expf_lane` on eight lanes.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. The function is inlined into its
    /// caller, which must enable them (`#[target_feature]`).
    #[inline(always)]
    pub(crate) unsafe fn expf256(x: __m256) -> __m256 {
        let f = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
        let r = f(0x4b40_0000);
        let z = _mm256_fmadd_ps(x, f(0x3fb8_aa3b), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(n, f(0x35bf_be8e), _mm256_fnmadd_ps(n, f(0x3f31_7200), x));
        let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
        let k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0))));
        let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
        let c = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(126.0));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(f(0x3c07_2010), b, f(0x3d2b_9f17)),
                u,
                _mm256_fmadd_ps(f(0x3e2a_af33), b, f(0x3eff_fedb)),
            ),
            u,
            _mm256_mul_ps(f(0x3f7f_fff6), b),
        );
        if _mm256_movemask_ps(c) == 0 {
            return _mm256_fmadd_ps(j, k, k);
        }
        let g = _mm256_and_si256(
            _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
            _mm256_set1_epi32(0x8200_0000u32 as i32),
        );
        let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
        let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        let d = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
        _mm256_or_ps(
            _mm256_and_ps(d, _mm256_mul_ps(s1, s1)),
            _mm256_andnot_ps(
                d,
                _mm256_or_ps(
                    _mm256_and_ps(c, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                    _mm256_andnot_ps(c, _mm256_fmadd_ps(j, k, k)),
                ),
            ),
        )
    }

    /// The AVX-512 form: `expf512_lane` on sixteen lanes.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F. The function is inlined into its
    /// caller, which must enable it (`#[target_feature]`).
    #[inline(always)]
    pub(crate) unsafe fn expf512(x: __m512) -> __m512 {
        let f = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
        let r = f(0x4b40_0000);
        let z = _mm512_fmadd_ps(x, f(0x3fb8_aa3b), r);
        let n = _mm512_sub_ps(z, r);
        let b = _mm512_fnmadd_ps(n, f(0x35bf_be8e), _mm512_fnmadd_ps(n, f(0x3f31_7200), x));
        let d = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
        let u = _mm512_mul_ps(b, b);
        let j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_fmadd_ps(f(0x3c07_2010), b, f(0x3d2b_9f17)),
                u,
                _mm512_fmadd_ps(f(0x3e2a_af33), b, f(0x3eff_fedb)),
            ),
            u,
            _mm512_fmadd_ps(f(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
        );
        let res = _mm512_scalef_ps(j, n);
        if d == 0 {
            return res;
        }
        let zero = _mm512_setzero_ps();
        let alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, zero), _mm512_set1_ps(f32::INFINITY), zero);
        _mm512_mask_blend_ps(d, res, alt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_expf_is_close_to_exp_and_handles_the_extremes() {
        for i in -1700..1700 {
            let x = i as f32 * 0.05;
            let (got, want) = (expf_lane(x), (x as f64).exp());
            assert!(((got as f64 - want) / want).abs() < 2e-6 || want < 1e-37, "{x}: {got} vs {want}");
        }
        assert_eq!(expf_lane(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf_lane(-1000.0), 0.0);
        assert_eq!(expf_lane(0.0), 1.0);
    }

    #[test]
    fn the_avx512_expf_is_close_to_exp_handles_the_extremes_and_differs_from_the_avx2_one() {
        let mut differ = 0;
        for i in -2200..1760 {
            let x = i as f32 * 0.05;
            let (got, want) = (expf512_lane(x), (x as f64).exp());
            assert!(((got as f64 - want) / want).abs() < 2e-6 || want < 1e-37, "{x}: {got} vs {want}");
            differ += (got != expf_lane(x)) as usize;
        }
        assert!(differ > 0, "the two builds' expf should differ in some last bits");
        assert_eq!(expf512_lane(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf512_lane(-1000.0), 0.0);
        assert_eq!(expf512_lane(1000.0), f32::INFINITY);
        assert_eq!(expf512_lane(0.0), 1.0);
        assert!(expf512_lane(f32::NAN).is_nan());
        // Subnormal results, which `scalef` rounds once.
        assert!(expf512_lane(-100.0) > 0.0 && expf512_lane(-100.0) < f32::MIN_POSITIVE);
    }
}
