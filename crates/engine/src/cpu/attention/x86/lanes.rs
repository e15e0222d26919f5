//! `Lanes`: llama.cpp's two x86 vector widths, AVX2's eight lanes (`Avx2`)
//! and AVX-512's sixteen (`Avx512`), each with the operations whose
//! instructions differ between its builds.

use std::arch::x86_64::*;

use half::f16;

use crate::cpu::exp::x86::{expf256, expf512};
use crate::cpu::exp::{expf512_lane, expf_lane};

/// One of llama.cpp's x86 vector widths: its register, and the operations
/// whose instructions differ between its builds, among them the reduction
/// trees and `ggml_v_expf`, which differ on purpose (each is the build's).
///
/// Every method but `expf_lane` is inlined into its caller, which must
/// enable the ISA's features (`#[target_feature]`, as the entry points do),
/// and runs the ISA's instructions: the CPU must have them.
pub(super) trait Lanes {
    /// The register.
    type V: Copy;
    /// Its lanes, at most `MAX_W`.
    const W: usize;
    /// Queries per register tile, at most 4.
    const TILE_Q: usize;

    /// Zeros.
    ///
    /// # Safety
    /// The CPU has the ISA's features, and the caller enables them.
    unsafe fn zero() -> Self::V;
    /// `x` in every lane.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn set1(x: f32) -> Self::V;
    /// `W` values from `p`.
    ///
    /// # Safety
    /// As `zero`, and `p` is valid for reading `W` values.
    unsafe fn load(p: *const f32) -> Self::V;
    /// Stores the lanes at `p`.
    ///
    /// # Safety
    /// As `zero`, and `p` is valid for writing `W` values.
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `W` f16 values from `p`, widened.
    ///
    /// # Safety
    /// As `zero`, and `p` is valid for reading `W` values.
    unsafe fn load_f16(p: *const f16) -> Self::V;
    /// The first `len` values from `p`, zeros in the other lanes.
    ///
    /// # Safety
    /// As `zero`, `1 <= len <= W`, and `p` is valid for reading `len` values.
    unsafe fn load_part(p: *const f32, len: usize) -> Self::V;
    /// The first `len` f16 values from `p`, widened, zeros in the other lanes.
    ///
    /// # Safety
    /// As `load_part`.
    unsafe fn load_f16_part(p: *const f16, len: usize) -> Self::V;
    /// `a · b + c`, rounded once.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `fmadd` in the first `len` lanes, `c` in the others.
    ///
    /// # Safety
    /// As `zero`, and `len <= W`.
    unsafe fn fmadd_part(a: Self::V, b: Self::V, c: Self::V, len: usize) -> Self::V;
    /// `a - b`.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    /// `a · b`.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// The instruction's maximum (`b` where either is NaN).
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// Each lane rounded to f16 (to nearest, ties to even) and back.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn round_f16(v: Self::V) -> Self::V;
    /// The build's horizontal sum (tinyBLAS's `hsum`; `hsum_w` in lanes).
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn hsum(v: Self::V) -> f32;
    /// `hsum` of four registers, the same additions, the sums in the lanes
    /// of one.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn hsum4(v: [Self::V; 4]) -> __m128;
    /// `GGML_F32x8_REDUCE` or `GGML_F32x16_REDUCE` of four accumulators
    /// (`reduce_four` in lanes).
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn reduce(acc: [Self::V; 4]) -> f32;
    /// The build's `ggml_v_expf`.
    ///
    /// # Safety
    /// As `zero`.
    unsafe fn expf(x: Self::V) -> Self::V;
    /// The build's `ggml_v_expf` on one lane: the same bits as `expf`.
    fn expf_lane(x: f32) -> f32;
}

/// `Lanes`' methods that are one intrinsic each (their contracts are the trait's).
macro_rules! forward {
    ($($name:ident($($a:ident: $t:ty),*) $(-> $r:ty)? = $f:ident;)*) => {
        $(
            #[inline(always)]
            unsafe fn $name($($a: $t),*) $(-> $r)? {
                $f($($a),*)
            }
        )*
    };
}

/// llama.cpp's AVX2 build (with FMA and F16C).
pub(super) struct Avx2;

/// llama.cpp's AVX-512 build (F, BW, DQ and VL, on top of AVX2).
pub(super) struct Avx512;

// The methods' contracts are the trait's.
impl Lanes for Avx2 {
    type V = __m256;
    const W: usize = 8;
    /// With four accumulators each (decode) or four positions or dimensions
    /// each (prefill), 12 of the 16 registers.
    const TILE_Q: usize = 3;

    forward! {
        zero() -> __m256 = _mm256_setzero_ps;
        set1(x: f32) -> __m256 = _mm256_set1_ps;
        load(p: *const f32) -> __m256 = _mm256_loadu_ps;
        store(p: *mut f32, v: __m256) = _mm256_storeu_ps;
        fmadd(a: __m256, b: __m256, c: __m256) -> __m256 = _mm256_fmadd_ps;
        sub(a: __m256, b: __m256) -> __m256 = _mm256_sub_ps;
        mul(a: __m256, b: __m256) -> __m256 = _mm256_mul_ps;
        max(a: __m256, b: __m256) -> __m256 = _mm256_max_ps;
        expf(x: __m256) -> __m256 = expf256;
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, len: usize) -> __m256 {
        _mm256_maskload_ps(p, mask8(len))
    }
    #[inline(always)]
    unsafe fn load_f16_part(p: *const f16, len: usize) -> __m256 {
        // AVX2 has no masked 16-bit load: the values go through the stack.
        let mut lanes = [f16::ZERO; 8];
        std::ptr::copy_nonoverlapping(p, lanes.as_mut_ptr(), len);
        Self::load_f16(lanes.as_ptr())
    }
    #[inline(always)]
    unsafe fn fmadd_part(a: __m256, b: __m256, c: __m256, len: usize) -> __m256 {
        _mm256_blendv_ps(c, _mm256_fmadd_ps(a, b, c), _mm256_castsi256_ps(mask8(len)))
    }
    #[inline(always)]
    unsafe fn round_f16(v: __m256) -> __m256 {
        _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }
    /// tinyBLAS's `hsum`: (lo + hi), then (r0 + r2) + (r1 + r3).
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let x = _mm_add_ps(_mm256_extractf128_ps::<1>(v), _mm256_castps256_ps128(v));
        let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
        _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)))
    }
    #[inline(always)]
    unsafe fn hsum4(v: [__m256; 4]) -> __m128 {
        hsum4_256(v)
    }
    /// `GGML_F32x8_REDUCE`: the four added pairwise, (lo + hi), two `hadd`s.
    #[inline(always)]
    unsafe fn reduce(acc: [__m256; 4]) -> f32 {
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
        let t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let t = _mm_hadd_ps(t, t);
        _mm_cvtss_f32(_mm_hadd_ps(t, t))
    }
    #[inline(always)]
    fn expf_lane(x: f32) -> f32 {
        expf_lane(x)
    }
}

// The methods' contracts are the trait's.
impl Lanes for Avx512 {
    type V = __m512;
    const W: usize = 16;
    /// Four accumulators each (decode) or four positions or dimensions each
    /// (prefill), 16 of the 32 registers.
    const TILE_Q: usize = 4;

    forward! {
        zero() -> __m512 = _mm512_setzero_ps;
        set1(x: f32) -> __m512 = _mm512_set1_ps;
        load(p: *const f32) -> __m512 = _mm512_loadu_ps;
        store(p: *mut f32, v: __m512) = _mm512_storeu_ps;
        fmadd(a: __m512, b: __m512, c: __m512) -> __m512 = _mm512_fmadd_ps;
        sub(a: __m512, b: __m512) -> __m512 = _mm512_sub_ps;
        mul(a: __m512, b: __m512) -> __m512 = _mm512_mul_ps;
        max(a: __m512, b: __m512) -> __m512 = _mm512_max_ps;
        expf(x: __m512) -> __m512 = expf512;
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const f16) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, len: usize) -> __m512 {
        _mm512_maskz_loadu_ps(mask16(len), p)
    }
    #[inline(always)]
    unsafe fn load_f16_part(p: *const f16, len: usize) -> __m512 {
        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask16(len), p.cast()))
    }
    #[inline(always)]
    unsafe fn fmadd_part(a: __m512, b: __m512, c: __m512, len: usize) -> __m512 {
        _mm512_mask3_fmadd_ps(a, b, c, mask16(len))
    }
    #[inline(always)]
    unsafe fn round_f16(v: __m512) -> __m512 {
        _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }
    /// `_mm512_reduce_add_ps` as GCC expands it: (hi + lo) of 256, then
    /// AVX2's `hsum`.
    #[inline(always)]
    unsafe fn hsum(v: __m512) -> f32 {
        Avx2::hsum(half_sum(v))
    }
    #[inline(always)]
    unsafe fn hsum4(v: [__m512; 4]) -> __m128 {
        hsum4_256([half_sum(v[0]), half_sum(v[1]), half_sum(v[2]), half_sum(v[3])])
    }
    /// `GGML_F32x16_REDUCE`: the four added pairwise, then `hsum`.
    #[inline(always)]
    unsafe fn reduce(acc: [__m512; 4]) -> f32 {
        Self::hsum(_mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3])))
    }
    #[inline(always)]
    fn expf_lane(x: f32) -> f32 {
        expf512_lane(x)
    }
}

/// Lanes `0..len` set (all of them from 8).
///
/// # Safety
/// The CPU has AVX2, and the caller enables it.
#[inline(always)]
unsafe fn mask8(len: usize) -> __m256i {
    _mm256_cmpgt_epi32(_mm256_set1_epi32(len.min(8) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
}

/// Lanes `0..len` set (all of them from 16).
#[inline(always)]
fn mask16(len: usize) -> __mmask16 {
    if len >= 16 {
        0xFFFF
    } else {
        (1u16 << len) - 1
    }
}

/// The high half of a register plus its low half.
///
/// # Safety
/// The CPU has AVX-512 F and DQ, and the caller enables them.
#[inline(always)]
unsafe fn half_sum(v: __m512) -> __m256 {
    _mm256_add_ps(_mm512_extractf32x8_ps::<1>(v), _mm512_castps512_ps256(v))
}

/// AVX2's `hsum` of four registers at once: the same additions, with the
/// four sums in the lanes of one register.
///
/// # Safety
/// The CPU has AVX2, and the caller enables it.
#[inline(always)]
unsafe fn hsum4_256(v: [__m256; 4]) -> __m128 {
    let mut x = [_mm_setzero_ps(); 4];
    for i in 0..4 {
        x[i] = _mm_add_ps(_mm256_extractf128_ps::<1>(v[i]), _mm256_castps256_ps128(v[i]));
    }
    // [x0 + x2, x1 + x3] of each, interleaved: ab = [a02, b02, a13, b13].
    let ab = _mm_add_ps(_mm_unpacklo_ps(x[0], x[1]), _mm_unpackhi_ps(x[0], x[1]));
    let cd = _mm_add_ps(_mm_unpacklo_ps(x[2], x[3]), _mm_unpackhi_ps(x[2], x[3]));
    _mm_add_ps(_mm_movelh_ps(ab, cd), _mm_movehl_ps(cd, ab))
}
