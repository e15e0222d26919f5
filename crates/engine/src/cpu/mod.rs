//! The CPU's kernels: quantized and float matrix × activations, attention
//! over the f16 KV cache, and the f32 vector operations of the forward pass.
//!
//! One file per block format says how to unpack a block; `block32` and
//! `block256` hold the dot-product kernels written once over those, in
//! llama.cpp's AVX2 orders with portable twins that compute the same
//! floating-point operations; `interleaved` and `interleaved_q4k` hold Q4_0,
//! IQ4_NL and Q4_K matrices eight rows to a group, as llama.cpp repacks them; `matrix` dispatches a matrix to its kernel;
//! `isa` is the one place that asks the CPU what it has.
//!
//! Every `unsafe fn` here says in `# Safety` which CPU features and which
//! slice lengths its caller must vouch for, and the safe functions check
//! their slices' lengths (and the ISA they are asked for) before any kernel
//! reads by pointer or unchecked index: a wrong length panics, on every ISA,
//! instead of reading past a slice.

// The kernels are the crate's unsafe code: each `unsafe` block must say why
// its CPU features and its lengths hold at that point, so that a change to
// a check or a caller shows up next to what relied on it.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod attention;
mod block256;
mod block32;
mod exp;
mod float;
mod interleaved;
mod interleaved_q4k;
mod iq4_nl;
mod iq4_xs;
pub mod isa;
mod matrix;
mod mxfp4;
mod prefetch;
mod q2_k;
mod q3_k;
mod q4_0;
mod q4_1;
mod q4_k;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6_k;
mod q8;
mod q8_0;
pub mod vec_ops;

pub use matrix::QuantMatrix;
pub(crate) use matrix::{dequantize, Activations};
pub(crate) use mxfp4::to_q8_0 as mxfp4_to_q8_0;

#[cfg(test)]
mod tests;
