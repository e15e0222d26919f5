//! GELU as llama.cpp's GEGLU takes it: looked up in a table over every f16
//! input, so the input and the result are rounded to f16.

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
