//! f16 values as caches hold and save them: little-endian bytes, and
//! zeroed buffers.

use half::f16;

/// Little-endian bytes of f16 values, as caches are saved.
pub(crate) fn f16_bytes(x: &[f16]) -> Vec<u8> {
    x.iter().flat_map(|h| h.to_bits().to_le_bytes()).collect()
}

/// `n` zero f16 values, from memory the allocator hands out zeroed: large
/// buffers come straight from the kernel, so their pages are faulted in by
/// the first write rather than by a memset here (restoring a conversation
/// then overlaps them with checking its digest).
pub(super) fn zeroed_halves(n: usize) -> Vec<f16> {
    use half::vec::HalfBitsVecExt;
    vec![0u16; n].reinterpret_into()
}

/// f16 values to copy into a cache: in memory, or as the little-endian
/// bytes a saved cache holds (read in place, with no copy between).
pub(crate) trait Halves {
    fn count(&self) -> usize;
    fn at(&self, i: usize) -> f16;
    /// Copies values `from..from + dst.len()` into `dst`.
    fn copy_to(&self, from: usize, dst: &mut [f16]);
    fn to_vec(&self) -> Vec<f16> {
        (0..self.count()).map(|i| self.at(i)).collect()
    }
}

impl Halves for [f16] {
    fn count(&self) -> usize {
        self.len()
    }
    fn at(&self, i: usize) -> f16 {
        self[i]
    }
    fn copy_to(&self, from: usize, dst: &mut [f16]) {
        dst.copy_from_slice(&self[from..from + dst.len()]);
    }
    fn to_vec(&self) -> Vec<f16> {
        <[f16]>::to_vec(self)
    }
}

/// Little-endian f16 bytes seen as values.
#[repr(transparent)]
pub(crate) struct LeHalves([u8]);

impl LeHalves {
    /// `bytes` of even length.
    pub(crate) fn new(bytes: &[u8]) -> &LeHalves {
        debug_assert!(bytes.len().is_multiple_of(2));
        // SAFETY: `LeHalves` is a transparent wrapper around `[u8]`.
        unsafe { &*(bytes as *const [u8] as *const LeHalves) }
    }
}

impl Halves for LeHalves {
    fn count(&self) -> usize {
        self.0.len() / 2
    }
    fn at(&self, i: usize) -> f16 {
        f16::from_bits(u16::from_le_bytes([self.0[2 * i], self.0[2 * i + 1]]))
    }
    fn copy_to(&self, from: usize, dst: &mut [f16]) {
        let src = &self.0[2 * from..2 * (from + dst.len())];
        for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = f16::from_bits(u16::from_le_bytes([c[0], c[1]]));
        }
    }
}
