//! The gated delta rule (llama.cpp's `gated_delta_net`): a value head's
//! state decayed, corrected and read token by token, a tile of rows at a
//! time, portably and in registers.

use super::dot_impl;

#[cfg(target_arch = "x86_64")]
mod delta_x86;

/// One token's inputs to the gated delta rule for one value head.
pub struct DeltaToken<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub decay: f32,
    pub beta: f32,
}

/// State rows a tile of `delta_rule` holds while every token passes through it.
const DELTA_TILE_ROWS: usize = 16;

/// The gated delta rule for one value head over `tokens` in order, as
/// llama.cpp's `gated_delta_net` computes it token by token: `s` holds the
/// state's columns (row `m` of `s` is column `m` of S, `d × d` in all),
/// decayed by each token's `decay`, corrected towards its `v` along its `k`
/// with strength `beta`, then read along its `q` into `out[t]`, scaled. The
/// dot products in `ggml_vec_dot_f32`'s order for this CPU's build (as
/// `dot`), the update as `ggml_vec_mad_f32`'s fused multiply-adds.
pub fn delta_rule(s: &mut [f32], tokens: &[DeltaToken], scale: f32, out: &mut [&mut [f32]]) {
    let Some(first) = tokens.first() else { return };
    let d = first.k.len();
    assert!(s.len() == d * d && out.len() == tokens.len());
    for (t, o) in tokens.iter().zip(out.iter()) {
        assert!(t.q.len() == d && t.k.len() == d && t.v.len() == d && o.len() == d);
    }
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::isa::{isa, Isa};
        /// # Safety
        /// The CPU must have AVX2 and FMA. (The body is safe code.)
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(s: &mut [f32], tokens: &[DeltaToken], scale: f32, out: &mut [&mut [f32]]) {
            delta_rule_impl::<8>(s, tokens, scale, out)
        }
        /// # Safety
        /// The CPU must have AVX-512 F. (The body is safe code.)
        #[target_feature(enable = "avx2,fma,avx512f")]
        unsafe fn avx512(s: &mut [f32], tokens: &[DeltaToken], scale: f32, out: &mut [&mut [f32]]) {
            delta_rule_impl::<16>(s, tokens, scale, out)
        }
        match isa() {
            // SAFETY: `isa()` checked the features at run time; every
            // vector is `d` long (asserted above), a multiple of 64.
            Isa::Avx512Vnni if d.is_multiple_of(64) => return unsafe { delta_x86::avx512(s, tokens, scale, out) },
            // SAFETY: `isa()` checked the features at run time.
            Isa::Avx512Vnni => return unsafe { avx512(s, tokens, scale, out) },
            // SAFETY: `isa()` checked the features at run time; every
            // vector is `d` long (asserted above), a multiple of 32.
            Isa::Avx2 if d.is_multiple_of(32) => return unsafe { delta_x86::avx2(s, tokens, scale, out) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { avx2(s, tokens, scale, out) },
            Isa::Portable => {}
        }
    }
    delta_rule_impl::<8>(s, tokens, scale, out)
}

#[inline(always)]
fn delta_rule_impl<const W: usize>(s: &mut [f32], tokens: &[DeltaToken], scale: f32, out: &mut [&mut [f32]]) {
    // llama.cpp makes four passes over the whole state per token (decay,
    // the dot products with k, the update, the dot products with q), but
    // each of a row's steps reads only that row, and a row's tokens only
    // its own earlier steps: done a tile of rows at a time for every token,
    // the same operations in the same order give the same bits, with the
    // tile in L1 throughout rather than the whole state passing through L2
    // four times a token.
    let d = tokens[0].k.len();
    for (tile_index, tile) in s.chunks_mut(DELTA_TILE_ROWS * d).enumerate() {
        let first = tile_index * DELTA_TILE_ROWS;
        for (t, o) in tokens.iter().zip(out.iter_mut()) {
            for (i, row) in tile.chunks_exact_mut(d).enumerate() {
                let m = first + i;
                for x in row.iter_mut() {
                    *x *= t.decay;
                }
                let dm = (t.v[m] - dot_impl::<W>(row, t.k)) * t.beta;
                for (x, &ki) in row.iter_mut().zip(t.k) {
                    *x = ki.mul_add(dm, *x);
                }
                o[m] = dot_impl::<W>(row, t.q) * scale;
            }
        }
    }
}
