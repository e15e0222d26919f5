//! f32 vector operations for the CPU forward pass.
//!
//! Each is written once, over eight-lane arrays with fused multiply-adds,
//! and compiled twice: for AVX2+FMA (chosen at run time) and portably. Both
//! builds perform the same floating-point operations in the same order, so
//! the results do not depend on the CPU, while an installed app still gets
//! vector code without being built for the machine it runs on.
//!
//! The orders are llama.cpp's x86 ones (its `ggml_vec_dot_f32`, tinyBLAS's
//! f32 tiles, `ggml_v_expf`, its RMS norm): a 135M-parameter model rounds
//! activations to 8 bits before every matmul, so a last-bit difference in a
//! norm or a softmax flips roundings and, a few layers on, the greedy token.

macro_rules! multiversion {
    ($(#[$m:meta])* pub fn $name:ident($($a:ident: $t:ty),*) $(-> $r:ty)? => $imp:ident) => {
        $(#[$m])*
        pub fn $name($($a: $t),*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($a: $t),*) $(-> $r)? {
                    $imp($($a),*)
                }
                if crate::cpu::isa::has_avx2_fma() {
                    // SAFETY: the CPU has AVX2 and FMA (checked at run time).
                    return unsafe { avx2($($a),*) };
                }
            }
            $imp($($a),*)
        }
    };
}

multiversion! {
    /// `Σ a[i]·b[i]` in `ggml_vec_dot_f32`'s order: four eight-lane
    /// accumulators over 32-value steps, then the rest one by one.
    pub fn dot(a: &[f32], b: &[f32]) -> f32 => dot_impl
}
/// `gate = SiLU(gate) · up`, as `ggml_vec_swiglu_f32` on this CPU's
/// llama.cpp build: sixteen lanes and its AVX-512 `ggml_v_expf` where the
/// kernels run AVX-512, else eight and the AVX2 one.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::isa::{isa, Isa};
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(gate: &mut [f32], up: &[f32]) {
            silu_mul_impl::<8>(gate, up)
        }
        match isa() {
            // SAFETY: the CPU has the ISA's features (checked at run time).
            Isa::Avx512Vnni => return unsafe { crate::cpu::attention::silu_mul_avx512(gate, up) },
            Isa::Avx2 => return unsafe { avx2(gate, up) },
            Isa::Portable => {}
        }
    }
    silu_mul_impl::<8>(gate, up)
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
fn dot_impl(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [[0f32; 8]; 4];
    let wide = n / 32 * 32;
    for (ca, cb) in a[..wide].chunks_exact(32).zip(b[..wide].chunks_exact(32)) {
        for (j, acc) in acc.iter_mut().enumerate() {
            for l in 0..8 {
                acc[l] = ca[j * 8 + l].mul_add(cb[j * 8 + l], acc[l]);
            }
        }
    }
    // GGML_F32x8_REDUCE: 0+=2, 1+=3, 0+=1, then (lo+hi) and two hadds.
    let v: [f32; 8] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
    let t: [f32; 4] = std::array::from_fn(|l| v[l] + v[l + 4]);
    let mut s = (t[0] + t[1]) + (t[2] + t[3]);
    for i in wide..n {
        s = a[i].mul_add(b[i], s);
    }
    s
}

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

/// `x[i] = exp(x[i] - max)` with `ggml_v_expf`, returning the sum as
/// `ggml_vec_soft_max_f32` forms it (`W` at a time, in f64); inlined into
/// each build of the softmax that calls it.
#[inline(always)]
pub(super) fn exp_sum_impl<const W: usize>(x: &mut [f32], max: f32) -> f64 {
    let mut sum = 0f64;
    let mut chunks = x.chunks_exact_mut(W);
    for c in &mut chunks {
        let v: [f32; W] = std::array::from_fn(|l| expf_w::<W>(c[l] - max));
        c.copy_from_slice(&v);
        sum += hsum_w::<W>(&v) as f64;
    }
    // llama.cpp pads rows to 256 with masked (zero) entries, so a tail is
    // still one SIMD block whose missing lanes add nothing.
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let mut v = [0f32; W];
        for (o, x) in v.iter_mut().zip(rest.iter_mut()) {
            *x = expf_w::<W>(*x - max);
            *o = *x;
        }
        sum += hsum_w::<W>(&v) as f64;
    }
    sum
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

/// GELU (tanh approximation, as Gemma uses) of gate, times up, in place.
pub fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    // llama.cpp's GEGLU: GELU looked up in a table over every f16 input
    // (`ggml_table_gelu_f16`), so the input and the result are rounded to f16.
    let table = gelu_f16_table();
    for (g, u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x * u
        } else {
            half::f16::from_bits(table[half::f16::from_f32(x).to_bits() as usize]).to_f32() * u
        };
    }
}

/// GELU (tanh form) of every f16 value, rounded to f16, as llama.cpp builds
/// its table (its C is compiled with contraction, so `1 + a·x·x` is fused).
fn gelu_f16_table() -> &'static [u16] {
    static TABLE: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        const COEF_A: f32 = 0.044715;
        (0..=u16::MAX)
            .map(|bits| {
                let x = half::f16::from_bits(bits).to_f32();
                let inner = SQRT_2_OVER_PI * x * (COEF_A * x).mul_add(x, 1.0);
                half::f16::from_f32(0.5 * x * (1.0 + inner.tanh())).to_bits()
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32) - 0.5)
            .collect()
    }

    #[test]
    fn vector_and_portable_builds_agree_bit_for_bit() {
        for n in [1, 7, 8, 31, 64, 65, 100, 576] {
            let (a, b) = (data(n, 1), data(n, 2));
            let want = dot_impl(&a, &b);
            assert_eq!(dot(&a, &b).to_bits(), want.to_bits(), "dot {n}");
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((want as f64 - exact).abs() < 1e-4, "dot {n}: {want} vs {exact}");
            let (mut o1, mut o2) = (vec![0f32; n], vec![0f32; n]);
            rms_norm(&mut o1, &a, &b, 1e-5);
            rms_norm_impl(&mut o2, &a, &b, 1e-5);
            assert_eq!(o1, o2);
        }
    }

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
        let mut v: Vec<f32> = (0..21).map(|i| -(i as f32) * 0.3).collect();
        let sum = exp_sum_impl::<8>(&mut v, 0.0);
        assert!((sum - v.iter().map(|x| *x as f64).sum::<f64>()).abs() < 1e-6);
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

    #[test]
    fn silu_in_each_build_matches_its_portable_order() {
        let (g, u) = (data(1536 + 13, 5), data(1536 + 13, 6));
        let g: Vec<f32> = g.iter().map(|x| x * 40.0).collect();
        let mut a = g.clone();
        silu_mul(&mut a, &u);
        let mut b = g.clone();
        if crate::cpu::attention::width() == 16 {
            silu_mul_impl::<16>(&mut b, &u);
        } else {
            silu_mul_impl::<8>(&mut b, &u);
        }
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    }

    #[test]
    fn rms_norm_normalises() {
        let x = data(576, 3);
        let w = vec![1f32; 576];
        let mut out = vec![0f32; 576];
        rms_norm(&mut out, &x, &w, 0.0);
        let ms: f64 = out.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 576.0;
        assert!((ms - 1.0).abs() < 1e-5, "{ms}");
    }
}
