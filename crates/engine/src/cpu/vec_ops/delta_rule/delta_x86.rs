//! `delta_rule_impl` in registers, for `d` a multiple of `4·W`: the decay
//! fused into the pass that takes the dot product with `k`, and the update
//! into the one with `q` (each value rounded as before, each product summed
//! in the same order), so a row passes through registers twice a token
//! rather than four times, with the reductions in the registers llama.cpp's
//! build uses.

use std::arch::x86_64::*;

use super::{DeltaToken, DELTA_TILE_ROWS};

/// A register of `W` f32 lanes and the few operations the kernel needs.
pub(super) trait Lanes {
    type V: Copy;
    const W: usize;
    /// # Safety (every method)
    /// The CPU has the ISA's features and the caller enables them;
    /// pointers are valid for `W` values.
    unsafe fn zero() -> Self::V;
    unsafe fn set1(x: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// `a·b + c`, fused.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `(a0 + a2) + (a1 + a3)`, then the horizontal sum in `dot`'s order
    /// for this width.
    unsafe fn reduce(a: [Self::V; 4]) -> f32;
}

pub(super) struct Avx2;
pub(super) struct Avx512;

impl Lanes for Avx2 {
    type V = __m256;
    const W: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn set1(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        _mm256_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    /// The halves added, then two `hadd`s.
    #[inline(always)]
    unsafe fn reduce(a: [__m256; 4]) -> f32 {
        let v = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
        let t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let t = _mm_hadd_ps(t, t);
        _mm_cvtss_f32(_mm_hadd_ps(t, t))
    }
}

impl Lanes for Avx512 {
    type V = __m512;
    const W: usize = 16;
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn set1(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        _mm512_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    /// `hsum_w::<16>`'s order: the 256-bit halves added, then `hsum8`.
    #[inline(always)]
    unsafe fn reduce(a: [__m512; 4]) -> f32 {
        let v = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
        let h = _mm256_add_ps(_mm512_extractf32x8_ps::<1>(v), _mm512_castps512_ps256(v));
        let r = _mm_add_ps(_mm256_extractf128_ps::<1>(h), _mm256_castps256_ps128(h));
        let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
    }
}

/// # Safety
/// The CPU must have AVX2 and FMA; the slices as `super::delta_rule`
/// asserts them, with `d` a multiple of 32.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn avx2(s: &mut [f32], tokens: &[DeltaToken], scale: f32, out: &mut [&mut [f32]]) {
    run::<Avx2>(s, tokens, scale, out)
}

/// # Safety
/// The CPU must have AVX2, FMA and AVX-512 F (DQ for the halves); the
/// slices as `super::delta_rule` asserts them, with `d` a multiple of 64.
#[target_feature(enable = "avx2,fma,avx512f,avx512dq")]
pub(super) unsafe fn avx512(s: &mut [f32], tokens: &[DeltaToken], scale: f32, out: &mut [&mut [f32]]) {
    run::<Avx512>(s, tokens, scale, out)
}

/// # Safety
/// As the entry point that inlines it.
#[inline(always)]
unsafe fn run<L: Lanes>(s: &mut [f32], tokens: &[DeltaToken], scale: f32, out: &mut [&mut [f32]]) {
    let d = tokens[0].k.len();
    let step = 4 * L::W;
    for (tile_index, tile) in s.chunks_mut(DELTA_TILE_ROWS * d).enumerate() {
        let first = tile_index * DELTA_TILE_ROWS;
        for (t, o) in tokens.iter().zip(out.iter_mut()) {
            let (k, q) = (t.k.as_ptr(), t.q.as_ptr());
            let decay = L::set1(t.decay);
            for (i, row) in tile.chunks_exact_mut(d).enumerate() {
                let m = first + i;
                let p = row.as_mut_ptr();
                let mut acc = [L::zero(); 4];
                for c in (0..d).step_by(step) {
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let at = c + L::W * j;
                        let x = L::mul(L::load(p.add(at)), decay);
                        L::store(p.add(at), x);
                        *acc = L::fmadd(x, L::load(k.add(at)), *acc);
                    }
                }
                let dm = L::set1((*t.v.get_unchecked(m) - L::reduce(acc)) * t.beta);
                let mut acc = [L::zero(); 4];
                for c in (0..d).step_by(step) {
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let at = c + L::W * j;
                        let x = L::fmadd(L::load(k.add(at)), dm, L::load(p.add(at)));
                        L::store(p.add(at), x);
                        *acc = L::fmadd(x, L::load(q.add(at)), *acc);
                    }
                }
                *o.get_unchecked_mut(m) = L::reduce(acc) * scale;
            }
        }
    }
}
