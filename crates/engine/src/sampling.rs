//! Turning logits into the next token.
//!
//! The order follows llama.cpp's default chain, so settings mean the same in
//! both programs:
//!
//! 1. forbidden tokens get −∞ (done by the sampler loop before this);
//! 2. repetition, presence and frequency penalties over the last
//!    `penalty_window` tokens;
//! 3. if `temperature == 0`: the arg-max, and stop;
//! 4. top-k, then top-p, then min-p, each narrowing the candidates;
//! 5. temperature scales what is left;
//! 6. softmax, and one draw from the seeded RNG.

use crate::error::{EngineError, Result};

/// User-facing sampling settings. `validate` says which field is out of range.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// `None` disables top-k.
    pub top_k: Option<usize>,
    /// 1.0 disables top-p.
    pub top_p: f32,
    /// 0.0 disables min-p.
    pub min_p: f32,
    /// 1.0 disables the repetition penalty.
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_window: usize,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: Some(40),
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_window: 64,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: always the most likely token.
    pub fn greedy() -> Self {
        Self { temperature: 0.0, top_k: None, top_p: 1.0, min_p: 0.0, ..Self::default() }
    }

    pub fn validate(&self) -> Result<()> {
        let finite = |field, v: f32| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(EngineError::setting(field, "must be a finite number"))
            }
        };
        finite("temperature", self.temperature)?;
        finite("top_p", self.top_p)?;
        finite("min_p", self.min_p)?;
        finite("repeat_penalty", self.repeat_penalty)?;
        finite("presence_penalty", self.presence_penalty)?;
        finite("frequency_penalty", self.frequency_penalty)?;
        if self.temperature < 0.0 {
            return Err(EngineError::setting(
                "temperature",
                format!("{} is negative; use 0 for greedy", self.temperature),
            ));
        }
        if self.temperature > 100.0 {
            return Err(EngineError::setting("temperature", format!("{} is above 100", self.temperature)));
        }
        if self.top_k == Some(0) {
            return Err(EngineError::setting("top_k", "must be at least 1 when top-k is on"));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(EngineError::setting("top_p", format!("{} is outside (0, 1]", self.top_p)));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(EngineError::setting("min_p", format!("{} is outside [0, 1]", self.min_p)));
        }
        if self.repeat_penalty <= 0.0 {
            return Err(EngineError::setting(
                "repeat_penalty",
                format!("{} must be positive (1 is off)", self.repeat_penalty),
            ));
        }
        if !(-2.0..=2.0).contains(&self.presence_penalty) {
            return Err(EngineError::setting(
                "presence_penalty",
                format!("{} is outside [-2, 2]", self.presence_penalty),
            ));
        }
        if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            return Err(EngineError::setting(
                "frequency_penalty",
                format!("{} is outside [-2, 2]", self.frequency_penalty),
            ));
        }
        Ok(())
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// No repetition, presence or frequency penalty changes the logits.
    pub fn penalties_inactive(&self) -> bool {
        self.repeat_penalty == 1.0 && self.presence_penalty == 0.0 && self.frequency_penalty == 0.0
    }
}

/// A small, fast PRNG whose stream is fixed by this code, so a seed gives the
/// same tokens on every platform and every future version of Hearth.
#[derive(Debug, Clone)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        // SplitMix64 expands the seed, as xoshiro's authors recommend.
        let mut s = seed;
        let mut next = || {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Self { state: [next(), next(), next(), next()] }
    }

    /// xoshiro256**.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Greedy choice per row of `logits` (`[batch, vocab]`) on the logits' own
/// device, with `forbidden` tokens excluded: on a GPU only the chosen ids
/// cross back to the host, not the whole vocabulary's logits.
pub fn greedy_on_device(logits: &candle_core::Tensor, forbidden: &[u32]) -> candle_core::Result<Vec<u32>> {
    let (_, vocab) = logits.dims2()?;
    let logits = if forbidden.is_empty() {
        logits.clone()
    } else {
        let mut mask = vec![0f32; vocab];
        for &t in forbidden.iter().filter(|&&t| (t as usize) < vocab) {
            mask[t as usize] = f32::NEG_INFINITY;
        }
        logits.broadcast_add(&candle_core::Tensor::from_vec(mask, vocab, logits.device())?)?
    };
    logits.argmax(candle_core::D::Minus1)?.to_vec1::<u32>()
}

/// Picks the next token from `logits` (modified in place) given the recent
/// tokens the penalties apply to.
pub fn sample(logits: &mut [f32], recent: &[u32], params: &SamplingParams, rng: &mut Rng) -> u32 {
    apply_penalties(logits, recent, params);
    if params.is_greedy() {
        return argmax(logits);
    }
    let mut cands: Vec<(u32, f32)> =
        logits.iter().enumerate().filter(|(_, l)| **l > f32::NEG_INFINITY).map(|(i, &l)| (i as u32, l)).collect();
    if cands.is_empty() {
        return argmax(logits);
    }
    // Ties broken by id, so the order is total and reproducible.
    let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if let Some(k) = params.top_k {
        if k < cands.len() {
            cands.select_nth_unstable_by(k - 1, by_logit);
            cands.truncate(k);
        }
    }
    cands.sort_unstable_by(by_logit);
    if params.top_p < 1.0 {
        let probs = softmax(&cands, 1.0);
        let mut cum = 0.0;
        let mut keep = cands.len();
        for (i, p) in probs.iter().enumerate() {
            cum += p;
            if cum >= params.top_p as f64 {
                keep = i + 1;
                break;
            }
        }
        cands.truncate(keep.max(1));
    }
    if params.min_p > 0.0 {
        let max = cands[0].1;
        let threshold = max + (params.min_p as f64).ln() as f32;
        cands.retain(|c| c.1 >= threshold);
    }
    let probs = softmax(&cands, params.temperature);
    let r = rng.next_f64();
    let mut cum = 0.0;
    for (c, p) in cands.iter().zip(&probs) {
        cum += p;
        if r < cum {
            return c.0;
        }
    }
    cands[cands.len() - 1].0
}

fn apply_penalties(logits: &mut [f32], recent: &[u32], p: &SamplingParams) {
    if p.penalties_inactive() {
        return;
    }
    let window = &recent[recent.len().saturating_sub(p.penalty_window)..];
    let mut counts: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
    for &t in window {
        *counts.entry(t).or_default() += 1;
    }
    for (&t, &n) in &counts {
        let Some(l) = logits.get_mut(t as usize) else { continue };
        if *l == f32::NEG_INFINITY {
            continue;
        }
        *l = if *l > 0.0 { *l / p.repeat_penalty } else { *l * p.repeat_penalty };
        *l -= p.presence_penalty + p.frequency_penalty * n as f32;
    }
}

/// The highest logit; the lowest id among equals, as llama.cpp picks.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

fn softmax(cands: &[(u32, f32)], temperature: f32) -> Vec<f64> {
    let max = cands.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max) as f64;
    let t = temperature as f64;
    let exps: Vec<f64> = cands.iter().map(|c| ((c.1 as f64 - max) / t).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod device_tests {
    use super::*;

    #[test]
    fn greedy_on_device_matches_the_host_sampler() {
        let rows: Vec<Vec<f32>> =
            (0..3).map(|r| (0..500).map(|i| ((i * 7919 + r * 31) % 997) as f32 / 10.0).collect()).collect();
        let t = candle_core::Tensor::new(rows.clone(), &candle_core::Device::Cpu).unwrap();
        let forbidden = [argmax(&rows[0]), argmax(&rows[2])];
        let on_device = greedy_on_device(&t, &forbidden).unwrap();
        for (row, got) in rows.iter().zip(on_device) {
            let mut row = row.clone();
            forbidden.iter().for_each(|&f| row[f as usize] = f32::NEG_INFINITY);
            assert_eq!(got, argmax(&row));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(logits: &[f32], p: &SamplingParams, n: usize) -> Vec<u32> {
        let mut rng = Rng::new(p.seed);
        (0..n).map(|_| sample(&mut logits.to_vec(), &[], p, &mut rng)).collect()
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(sample(&mut [1.0, 3.0, 3.0, 2.0], &[], &SamplingParams::greedy(), &mut Rng::new(0)), 1);
    }

    #[test]
    fn the_same_seed_gives_the_same_draws() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let p = SamplingParams { temperature: 1.0, top_k: None, top_p: 1.0, min_p: 0.0, seed: 9, ..Default::default() };
        assert_eq!(draws(&logits, &p, 100), draws(&logits, &p, 100));
        assert_ne!(draws(&logits, &p, 100), draws(&logits, &SamplingParams { seed: 10, ..p.clone() }, 100));
    }

    #[test]
    fn top_k_top_p_and_min_p_narrow_the_candidates() {
        let logits = [5.0, 4.0, 3.0, 0.0, -1.0];
        let base =
            SamplingParams { temperature: 5.0, top_k: None, top_p: 1.0, min_p: 0.0, seed: 1, ..Default::default() };
        let all = draws(&logits, &base, 400);
        assert!(all.contains(&4), "a hot temperature reaches every token");
        let k2 = draws(&logits, &SamplingParams { top_k: Some(2), ..base.clone() }, 400);
        assert!(k2.iter().all(|&t| t < 2) && k2.contains(&1));
        // top-p is applied before temperature: at T=1 the top token alone holds ~0.66.
        let p = draws(&logits, &SamplingParams { top_p: 0.5, ..base.clone() }, 100);
        assert!(p.iter().all(|&t| t == 0));
        // min-p 0.3 keeps tokens within ln(0.3) ≈ -1.2 of the best logit.
        let m = draws(&logits, &SamplingParams { min_p: 0.3, ..base.clone() }, 400);
        assert!(m.iter().all(|&t| t < 2) && m.contains(&1));
    }

    #[test]
    fn penalties_push_down_recent_tokens() {
        let p = SamplingParams { repeat_penalty: 2.0, ..SamplingParams::greedy() };
        assert_eq!(sample(&mut [3.0, 2.0], &[0], &p, &mut Rng::new(0)), 1, "3/2 < 2");
        let p = SamplingParams { presence_penalty: 1.5, ..SamplingParams::greedy() };
        assert_eq!(sample(&mut [3.0, 2.0], &[0], &p, &mut Rng::new(0)), 1);
        let p = SamplingParams { frequency_penalty: 0.4, ..SamplingParams::greedy() };
        assert_eq!(sample(&mut [3.0, 2.0], &[0, 0], &p, &mut Rng::new(0)), 0, "0.8 is not enough");
        assert_eq!(sample(&mut [3.0, 2.0], &[0, 0, 0], &p, &mut Rng::new(0)), 1);
        let p = SamplingParams { repeat_penalty: 2.0, penalty_window: 1, ..SamplingParams::greedy() };
        assert_eq!(sample(&mut [3.0, 2.0], &[0, 1], &p, &mut Rng::new(0)), 0, "token 0 is outside the window");
    }
}
