//! RoPE's frequency schedules: the cos/sin tables each pass rotates queries
//! and keys by, with LongRoPE's factors, sections and YaRN, as llama.cpp builds them.

use super::config::YarnConfig;

/// A RoPE frequency schedule.
pub(super) struct RopeFreqs {
    pub(super) half: usize,
    /// `base^(-2 / head_dim)`: the angle shrinks by this from pair to pair.
    theta_scale: f32,
    factors: Option<Vec<f32>>,
    /// Linear position scaling (1 = none).
    pub(super) freq_scale: f32,
    /// Qwen 3.5's sections: pairs no section claims keep angle 0.
    pub(super) sections: Option<[usize; 4]>,
    /// YaRN's blend of scaled and unscaled angles, and its magnitude.
    pub(super) yarn: Option<YarnRamp>,
    /// What cos and sin are multiplied by without YaRN
    /// (`ModelConfig::rope_attn_factor`).
    pub(super) mscale: f32,
}

/// YaRN for one frequency base, as llama.cpp's `rope_yarn` applies it.
#[derive(Debug, Clone, Copy)]
pub(super) struct YarnRamp {
    /// The correction dimensions (`ggml_rope_yarn_corr_dims`): pairs
    /// below `low` keep their unscaled angle, pairs past `high` are fully
    /// scaled, those between are blended.
    low: f32,
    high: f32,
    ext_factor: f32,
    /// What cos and sin are multiplied by.
    mscale: f32,
}

impl YarnRamp {
    /// In f32 as ggml computes it: the correction dimensions in ggml-base
    /// (no FMA), the magnitude in `rope_yarn` (compiled with FMA, and
    /// GCC fuses `1 + 0.1 · ln(1 / freq_scale)`).
    pub(super) fn new(y: &YarnConfig, dims: usize, base: f32, freq_scale: f32) -> Self {
        let corr_dim = |rotations: f32| {
            dims as f32 * (y.original_context as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let low = corr_dim(y.beta_fast).floor().max(0.0);
        let high = corr_dim(y.beta_slow).ceil().min(dims as f32 - 1.0);
        let mscale = if y.ext_factor != 0.0 {
            y.attn_factor * 0.1f32.mul_add((1.0 / freq_scale).ln(), 1.0)
        } else {
            y.attn_factor
        };
        Self { low, high, ext_factor: y.ext_factor, mscale }
    }

    /// How much of pair `i`'s angle stays unscaled, times `ext_factor`.
    fn mix(&self, i: usize) -> f32 {
        let y = (i as f32 - self.low) / (self.high - self.low).max(0.001);
        (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor
    }
}

impl RopeFreqs {
    pub(super) fn new(head_dim: usize, base: f32, factors: Option<Vec<f32>>, freq_scale: f32) -> Self {
        Self {
            half: head_dim / 2,
            theta_scale: base.powf(-2.0 / head_dim as f32),
            factors,
            freq_scale,
            sections: None,
            yarn: None,
            mscale: 1.0,
        }
    }

    /// Whether pair `i` rotates: llama.cpp's IMROPE gives pair `i` the
    /// section of `i % Σ sections` in turn (time, height, width), and angle
    /// 0 where that section has run out. For text the three positions are
    /// the same, so a claimed pair rotates by the usual angle.
    fn rotates(&self, i: usize) -> bool {
        let Some(s) = self.sections else { return true };
        let sector = i % s.iter().sum::<usize>().max(1);
        match sector % 3 {
            0 => sector < 3 * s[0],
            1 => sector < 3 * s[1],
            _ => sector < 3 * s[2],
        }
    }

    /// cos/sin tables `[seq_len, head_dim / 2]` for positions
    /// `pos0..pos0 + seq_len`. The angle is built by repeated multiplication
    /// in f32, as llama.cpp's `rope_cache_init` builds it, so the tables
    /// match its to the bit.
    pub(super) fn tables(&self, pos0: usize, seq_len: usize) -> (Vec<f32>, Vec<f32>) {
        let mut cos = Vec::with_capacity(seq_len * self.half);
        let mut sin = Vec::with_capacity(seq_len * self.half);
        for p in pos0..pos0 + seq_len {
            let mut theta = p as f32;
            for i in 0..self.half {
                let ff = self.factors.as_ref().map_or(1.0, |f| f[i]);
                let extrapolated = theta / ff;
                let interpolated = self.freq_scale * extrapolated;
                match (&self.yarn, self.rotates(i)) {
                    (_, false) => {
                        cos.push(1.0);
                        sin.push(0.0);
                    }
                    (None, true) => {
                        cos.push(interpolated.cos() * self.mscale);
                        sin.push(interpolated.sin() * self.mscale);
                    }
                    (Some(y), true) => {
                        // GCC fuses the blend's first product into its sum.
                        let mix = if y.ext_factor != 0.0 { y.mix(i) } else { 0.0 };
                        let angle = interpolated.mul_add(1.0 - mix, extrapolated * mix);
                        cos.push(angle.cos() * y.mscale);
                        sin.push(angle.sin() * y.mscale);
                    }
                }
                theta *= self.theta_scale;
            }
        }
        (cos, sin)
    }
}
