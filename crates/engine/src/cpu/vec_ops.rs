//! f32 vector operations for the CPU forward pass.
//!
//! Each is written once, over eight-lane arrays with fused multiply-adds,
//! and compiled twice: for AVX2+FMA (chosen at run time) and portably. Both
//! builds perform the same floating-point operations in the same order, so
//! the results do not depend on the CPU, while an installed app still gets
//! vector code without being built for the machine it runs on. SiLU follows
//! the width of the CPU's llama.cpp build (`exp` holds its `ggml_v_expf`),
//! with an AVX-512 form in registers.
//!
//! The orders are llama.cpp's x86 ones (its `ggml_vec_dot_f32`, tinyBLAS's
//! f32 tiles, `ggml_v_expf`, its RMS norm): a 135M-parameter model rounds
//! activations to 8 bits before every matmul, so a last-bit difference in a
//! norm or a softmax flips roundings and, a few layers on, the greedy token.

use super::exp::expf_w;

mod delta_rule;
mod gelu;

pub use delta_rule::{delta_rule, DeltaToken};
pub use gelu::gelu_mul;

macro_rules! multiversion {
    ($(#[$m:meta])* pub fn $name:ident($($a:ident: $t:ty),*) $(-> $r:ty)? => $imp:ident) => {
        $(#[$m])*
        pub fn $name($($a: $t),*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            {
                /// # Safety
                /// The CPU must have AVX2 and FMA. (The body is the portable
                /// safe code: any slices will do.)
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($a: $t),*) $(-> $r)? {
                    $imp($($a),*)
                }
                if crate::cpu::isa::has_avx2_fma() {
                    // SAFETY: the CPU has AVX2 and FMA (`has_avx2_fma`, checked
                    // at run time); the body is safe code, bounds-checked.
                    return unsafe { avx2($($a),*) };
                }
            }
            $imp($($a),*)
        }
    };
}

/// `Σ a[i]·b[i]` in `ggml_vec_dot_f32`'s order on this CPU's llama.cpp
/// build: four accumulators of eight lanes over 32-value steps (AVX2), or of
/// sixteen over 64-value steps where the kernels run AVX-512; then the rest
/// one by one.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::isa::{isa, Isa};
        /// # Safety
        /// The CPU must have AVX2 and FMA. (The body is safe code.)
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(a: &[f32], b: &[f32]) -> f32 {
            dot_impl::<8>(a, b)
        }
        /// # Safety
        /// The CPU must have AVX-512 F. (The body is safe code.)
        #[target_feature(enable = "avx2,fma,avx512f")]
        unsafe fn avx512(a: &[f32], b: &[f32]) -> f32 {
            dot_impl::<16>(a, b)
        }
        match isa() {
            // SAFETY: `isa()` checked the features at run time.
            Isa::Avx512Vnni => return unsafe { avx512(a, b) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { avx2(a, b) },
            Isa::Portable => {}
        }
    }
    dot_impl::<8>(a, b)
}

/// How llama.cpp's AVX2 build (GCC 12) compiles a scalar `sum += a[i]·b[i]`
/// loop: as an in-order reduction in groups of four, each product rounded
/// and then added, and the last `n % 4` terms as fused multiply-adds; a
/// loop of fewer than four terms is all fused. (Read off its
/// `ggml_vec_dot_f32` tail and `ssm_conv`; its AVX-512 build fuses every
/// term, as far as Hearth's files have shown: written `0` below.)
const AVX2_BUILD_FUSES: usize = 4;

/// The grain of the llama.cpp build whose vectors are `W` lanes wide.
#[inline(always)]
const fn build_grain<const W: usize>() -> usize {
    if W == 8 {
        AVX2_BUILD_FUSES
    } else {
        0
    }
}

/// `Σ a[i]·b[i]` over the `n` `terms` in order onto `sum`, as a C loop that a
/// build compiled with grain `grain` sums them (`AVX2_BUILD_FUSES`; 0: all fused).
#[inline(always)]
fn sum_products(mut sum: f32, terms: impl Iterator<Item = (f32, f32)>, n: usize, grain: usize) -> f32 {
    let unfused = if grain == 0 { 0 } else { n - n % grain };
    for (i, (a, b)) in terms.enumerate() {
        sum = if i < unfused { sum + a * b } else { a.mul_add(b, sum) };
    }
    sum
}

/// One token of a causal depthwise convolution (llama.cpp's `ssm_conv`):
/// for each channel `c`, `output[c] = Σ_i window[i]·taps[c·k + i]` over its
/// last `k − 1` inputs (`past[c·(k−1)..]`, oldest first) and `input[c]`,
/// summed oldest first; then `input` joins the past. The sums are fused
/// multiply-adds where the kernels run AVX-512 (the native llama.cpp build's
/// compiler fuses `sumf += s·c`), and elsewhere as its AVX2 build's compiler
/// sums them (`AVX2_BUILD_FUSES`: four taps unfused, three fused): each
/// gives that build's bits.
pub fn causal_conv_step(past: &mut [f32], taps: &[f32], input: &[f32], output: &mut [f32]) {
    let channels = input.len();
    assert!(channels > 0 && output.len() == channels && taps.len().is_multiple_of(channels));
    let k = taps.len() / channels;
    assert!(k >= 2 && past.len() == channels * (k - 1));
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::isa::{isa, Isa};
        /// # Safety
        /// The CPU must have AVX2 and FMA. (The body is safe code.)
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<const W: usize>(past: &mut [f32], taps: &[f32], input: &[f32], output: &mut [f32]) {
            causal_conv_step_impl::<W>(past, taps, input, output)
        }
        match isa() {
            // SAFETY: `isa()` checked the features at run time.
            Isa::Avx512Vnni => return unsafe { avx2::<16>(past, taps, input, output) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { avx2::<8>(past, taps, input, output) },
            Isa::Portable => {}
        }
    }
    causal_conv_step_impl::<8>(past, taps, input, output)
}

#[inline(always)]
fn causal_conv_step_impl<const W: usize>(past: &mut [f32], taps: &[f32], input: &[f32], output: &mut [f32]) {
    let k = taps.len() / input.len();
    for (((past, taps), &x), out) in
        past.chunks_exact_mut(k - 1).zip(taps.chunks_exact(k)).zip(input).zip(output.iter_mut())
    {
        let window = past.iter().copied().chain(std::iter::once(x));
        *out = sum_products(0.0, window.zip(taps.iter().copied()), k, build_grain::<W>());
        past.copy_within(1.., 0);
        past[k - 2] = x;
    }
}

/// `gate = min(gate, limit) · σ(alpha · min(gate, limit)) · (clamp(up,
/// −limit, limit) + 1)`: gpt-oss's SwiGLU, as llama.cpp's `swiglu_oai` op
/// computes it, scalar code with libm's `expf` (nothing in it can fuse).
pub fn swiglu_oai(gate: &mut [f32], up: &[f32], alpha: f32, limit: f32) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = g.min(limit);
        let y = u.clamp(-limit, limit);
        let glu = x / (1.0 + (alpha * -x).exp());
        *g = glu * (y + 1.0);
    }
}

/// `gate = SiLU(gate) · up`, as `ggml_vec_swiglu_f32` on this CPU's
/// llama.cpp build: sixteen lanes and its AVX-512 `ggml_v_expf` where the
/// kernels run AVX-512, else eight and the AVX2 one.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::isa::{isa, Isa};
        /// # Safety
        /// The CPU must have AVX2 and FMA. (The body is safe code: any slices.)
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(gate: &mut [f32], up: &[f32]) {
            silu_mul_impl::<8>(gate, up)
        }
        match isa() {
            // SAFETY: the CPU has AVX2, FMA, F16C and AVX-512 F, BW, DQ and VL
            // (`isa()` checked them at run time); the kernel reads and writes only the first
            // `min(gate.len(), up.len())` values of each slice.
            Isa::Avx512Vnni => return unsafe { silu_mul_avx512(gate, up) },
            // SAFETY: the CPU has AVX2 and FMA (`isa()` checked them at run
            // time); the body is safe code, bounds-checked.
            Isa::Avx2 => return unsafe { avx2(gate, up) },
            Isa::Portable => {}
        }
    }
    silu_mul_impl::<8>(gate, up)
}

/// `x = SiLU(x)`, as `ggml_vec_silu_f32` on this CPU's llama.cpp build:
/// `silu_mul` with an up of ones (multiplying by one is exact), so the same
/// lanes, the same `ggml_v_expf` and the same libm tail.
pub fn silu(x: &mut [f32]) {
    const ONES: [f32; 512] = [1.0; 512];
    let n = x.len();
    // Whole vectors in every piece but the last, so the tail is the row's.
    for (i, piece) in x.chunks_mut(ONES.len()).enumerate() {
        let len = piece.len();
        debug_assert!(len == ONES.len() || i * ONES.len() + len == n);
        silu_mul(piece, &ONES[..len]);
    }
}

/// `silu_mul_impl::<16>` in AVX-512 registers, as llama.cpp's AVX-512 build
/// runs `ggml_vec_swiglu_f32`: whole vectors through its `ggml_v_expf`, the
/// tail through libm's `expf`.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW, DQ and VL. (Any
/// slices will do: the vectors read and written end by `n`, the shorter
/// length.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn silu_mul_avx512(gate: &mut [f32], up: &[f32]) {
    use std::arch::x86_64::*;
    let n = gate.len().min(up.len());
    let wide = n / 16 * 16;
    let (g, u) = (gate.as_mut_ptr(), up.as_ptr());
    let one = _mm512_set1_ps(1.0);
    for i in (0..wide).step_by(16) {
        let x = _mm512_loadu_ps(g.add(i));
        let e = super::exp::x86::expf512(_mm512_sub_ps(_mm512_setzero_ps(), x));
        _mm512_storeu_ps(g.add(i), _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_loadu_ps(u.add(i))));
    }
    for (g, u) in gate[wide..n].iter_mut().zip(&up[wide..n]) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}
multiversion! {
    /// `x *= alpha`.
    pub fn scale(x: &mut [f32], alpha: f32) => scale_impl
}
multiversion! {
    /// `y += x`.
    pub fn add(y: &mut [f32], x: &[f32]) => add_impl
}
multiversion! {
    /// `out = x / rms(x) · w`, the mean square summed in f64 as llama.cpp does.
    pub fn rms_norm(out: &mut [f32], x: &[f32], w: &[f32], eps: f32) => rms_norm_impl
}

/// `Σ a[i]·b[i]` as llama.cpp's tinyBLAS sums one output of an f32 matmul
/// of several rows (a prompt's, never a decode step's): one accumulator of
/// the build's width, a fused multiply-add per vector, then `hsum_w`. `None`
/// where tinyBLAS declines the shape (`k` not a multiple of the width) and
/// llama.cpp falls back to `dot`'s order.
pub fn dot_one_accumulator(a: &[f32], b: &[f32]) -> Option<f32> {
    let n = a.len();
    assert_eq!(n, b.len(), "a dot product of unequal lengths");
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::isa::{isa, Isa};
        /// # Safety
        /// The CPU must have AVX2 and FMA. (The body is safe code.)
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(a: &[f32], b: &[f32]) -> f32 {
            dot_one_accumulator_impl::<8>(a, b)
        }
        /// # Safety
        /// The CPU must have AVX-512 F. (The body is safe code.)
        #[target_feature(enable = "avx2,fma,avx512f")]
        unsafe fn avx512(a: &[f32], b: &[f32]) -> f32 {
            dot_one_accumulator_impl::<16>(a, b)
        }
        match isa() {
            // SAFETY: `isa()` checked the features at run time.
            Isa::Avx512Vnni => return n.is_multiple_of(16).then(|| unsafe { avx512(a, b) }),
            // SAFETY: as above.
            Isa::Avx2 => return n.is_multiple_of(8).then(|| unsafe { avx2(a, b) }),
            Isa::Portable => {}
        }
    }
    n.is_multiple_of(8).then(|| dot_one_accumulator_impl::<8>(a, b))
}

/// `dot_one_accumulator` in plain code at the width the kernels use: the
/// reference the vector builds are tested against.
#[cfg(test)]
pub(crate) fn dot_one_accumulator_portable(a: &[f32], b: &[f32]) -> Option<f32> {
    if crate::cpu::isa::isa() == crate::cpu::isa::Isa::Avx512Vnni {
        a.len().is_multiple_of(16).then(|| dot_one_accumulator_impl::<16>(a, b))
    } else {
        a.len().is_multiple_of(8).then(|| dot_one_accumulator_impl::<8>(a, b))
    }
}

#[inline(always)]
fn dot_one_accumulator_impl<const W: usize>(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; W];
    for (ca, cb) in a.chunks_exact(W).zip(b.chunks_exact(W)) {
        for l in 0..W {
            acc[l] = ca[l].mul_add(cb[l], acc[l]);
        }
    }
    hsum_w::<W>(&acc)
}

/// `ln Σ exp(x[i])`, as `max + ln Σ exp(x[i] − max)`: a sampled token's
/// log-probability over the whole vocabulary, once per token. The
/// exponentials are `ggml_v_expf`'s AVX2 form on every CPU, each lane's
/// terms summed in f64 and the lanes then in order, so the result does not
/// depend on the CPU. Entries of −∞ (forbidden tokens) add nothing; all −∞
/// gives −∞.
pub fn log_sum_exp(x: &[f32]) -> f32 {
    let max = max_impl(x);
    if max == f32::NEG_INFINITY || max.is_nan() {
        return max;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::isa::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (`has_avx2_fma`, checked at run
        // time); the kernel reads only `x`'s whole eight-value chunks.
        return max + unsafe { sum_exp_avx2(x, max) }.ln() as f32;
    }
    max + sum_exp_impl(x, max).ln() as f32
}

/// The largest value; eight lanes, so that it vectorises.
#[inline(always)]
fn max_impl(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            lanes[l] = if c[l] > lanes[l] { c[l] } else { lanes[l] };
        }
    }
    lanes.into_iter().chain(tail.iter().copied()).fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m })
}

/// `Σ exp(x[i] − max)` in f64: lane `l` sums the entries `i ≡ l (mod 8)`
/// of the whole chunks, then the lanes in order, then the tail.
fn sum_exp_impl(x: &[f32], max: f32) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            lanes[l] += super::exp::expf_lane(c[l] - max) as f64;
        }
    }
    sum_lanes_then_tail(lanes, tail, max)
}

fn sum_lanes_then_tail(lanes: [f64; 8], tail: &[f32], max: f32) -> f64 {
    let mut sum = lanes.iter().sum::<f64>();
    for &v in tail {
        sum += super::exp::expf_lane(v - max) as f64;
    }
    sum
}

/// `sum_exp_impl` in AVX2 registers: the same operations, eight lanes at a
/// time, the f64 sums in two four-lane registers.
///
/// # Safety
/// The CPU must have AVX2 and FMA. (Any slice will do: only whole chunks of
/// eight are loaded.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum_exp_avx2(x: &[f32], max: f32) -> f64 {
    use std::arch::x86_64::*;
    let wide = x.len() / 8 * 8;
    let m = _mm256_set1_ps(max);
    let (mut lo, mut hi) = (_mm256_setzero_pd(), _mm256_setzero_pd());
    for i in (0..wide).step_by(8) {
        let e = super::exp::x86::expf256(_mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(i)), m));
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(e)));
    }
    let mut lanes = [0f64; 8];
    _mm256_storeu_pd(lanes.as_mut_ptr(), lo);
    _mm256_storeu_pd(lanes.as_mut_ptr().add(4), hi);
    sum_lanes_then_tail(lanes, &x[wide..], max)
}

/// llama.cpp's `hsum_float_8` order.
#[inline(always)]
pub(crate) fn hsum8(a: [f32; 8]) -> f32 {
    let r = [a[4] + a[0], a[5] + a[1], a[6] + a[2], a[7] + a[3]];
    (r[0] + r[2]) + (r[1] + r[3])
}

/// A vector's horizontal sum in llama.cpp's order for its width: `hsum8`
/// for eight lanes; for sixteen, `_mm512_reduce_add_ps` as GCC expands it
/// (the halves added, then `hsum8`).
#[inline(always)]
pub(crate) fn hsum_w<const W: usize>(a: &[f32; W]) -> f32 {
    match W {
        8 => hsum8(std::array::from_fn(|l| a[l])),
        16 => hsum8(std::array::from_fn(|l| a[l + 8] + a[l])),
        _ => unreachable!("llama.cpp's x86 vectors are 8 or 16 lanes"),
    }
}

#[inline(always)]
fn dot_impl<const W: usize>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let step = 4 * W;
    let mut acc = [[0f32; W]; 4];
    let wide = n / step * step;
    for (ca, cb) in a[..wide].chunks_exact(step).zip(b[..wide].chunks_exact(step)) {
        for (j, acc) in acc.iter_mut().enumerate() {
            for l in 0..W {
                acc[l] = ca[j * W + l].mul_add(cb[j * W + l], acc[l]);
            }
        }
    }
    // GGML_F32x8/x16_REDUCE: 0+=2, 1+=3, 0+=1; then AVX2 adds the halves
    // and two `hadd`s, AVX-512 `_mm512_reduce_add_ps`.
    let v: [f32; W] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
    let s = if W == 8 {
        let t: [f32; 4] = std::array::from_fn(|l| v[l] + v[l + 4]);
        (t[0] + t[1]) + (t[2] + t[3])
    } else {
        hsum_w::<W>(&v)
    };
    // The rest one by one: `sumf += x[i]*y[i]` as the build compiled it.
    sum_products(s, a[wide..].iter().copied().zip(b[wide..].iter().copied()), n - wide, build_grain::<W>())
}

/// `ggml_vec_swiglu_f32` with `W` lanes: whole vectors through
/// `ggml_v_silu`, the tail through libm's `expf`.
#[inline(always)]
pub(crate) fn silu_mul_impl<const W: usize>(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len()) / W * W;
    for (g, u) in gate[..n].iter_mut().zip(&up[..n]) {
        *g = *g / (1.0 + expf_w::<W>(0.0 - *g)) * u;
    }
    for (g, u) in gate[n..].iter_mut().zip(&up[n..]) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

#[inline(always)]
fn scale_impl(x: &mut [f32], alpha: f32) {
    for x in x.iter_mut() {
        *x *= alpha;
    }
}

#[inline(always)]
fn add_impl(y: &mut [f32], x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += *x;
    }
}

#[inline(always)]
fn rms_norm_impl(out: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    // llama.cpp: squares in f32, summed in order in f64.
    let mut sum = 0f64;
    for v in x {
        sum += (v * v) as f64;
    }
    let mean = (sum / x.len() as f64) as f32;
    let s = 1.0 / (mean + eps).sqrt();
    for ((o, x), w) in out.iter_mut().zip(x).zip(w) {
        *o = (x * s) * w;
    }
}

#[cfg(test)]
mod tests;
