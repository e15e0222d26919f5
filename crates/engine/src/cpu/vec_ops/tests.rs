//! The vector operations against their portable orders and against f64.

use super::*;

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32) - 0.5)
        .collect()
}

#[test]
fn log_sum_exp_is_the_f64_one_and_the_same_on_every_cpu() {
    for n in [1, 7, 8, 9, 64, 1000, 49_152] {
        let mut x: Vec<f32> = data(n, 3).iter().map(|v| v * 40.0).collect();
        if n > 8 {
            x[3] = f32::NEG_INFINITY;
            x[n - 1] = f32::NEG_INFINITY;
        }
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let want = max as f64 + x.iter().map(|&v| ((v - max) as f64).exp()).sum::<f64>().ln();
        let got = log_sum_exp(&x);
        assert!((got as f64 - want).abs() < 1e-5 * want.abs().max(1.0), "{n}: {got} vs {want}");
        assert_eq!(got.to_bits(), (max + sum_exp_impl(&x, max).ln() as f32).to_bits(), "{n}: the portable sum");
    }
    assert_eq!(log_sum_exp(&[f32::NEG_INFINITY; 20]), f32::NEG_INFINITY);
    assert_eq!(log_sum_exp(&[0.0; 16]), 16f32.ln());
}

#[test]
fn vector_and_portable_builds_agree_bit_for_bit() {
    for n in [1, 7, 8, 31, 64, 65, 100, 576] {
        let (a, b) = (data(n, 1), data(n, 2));
        let want = if crate::cpu::isa::isa() == crate::cpu::isa::Isa::Avx512Vnni {
            dot_impl::<16>(&a, &b)
        } else {
            dot_impl::<8>(&a, &b)
        };
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
fn silu_in_each_build_matches_its_portable_order() {
    let (g, u) = (data(1536 + 13, 5), data(1536 + 13, 6));
    let g: Vec<f32> = g.iter().map(|x| x * 40.0).collect();
    let mut a = g.clone();
    silu_mul(&mut a, &u);
    let mut b = g.clone();
    if crate::cpu::isa::isa() >= crate::cpu::isa::Isa::Avx512Vnni {
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
