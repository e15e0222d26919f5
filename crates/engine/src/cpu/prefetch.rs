//! Software prefetch for decoding, which streams each weight row once from
//! memory: while one row is computed, the row `AHEAD` rows later is asked
//! for (about one memory latency of work ahead), across task boundaries too.

/// How many weight rows ahead a decode step prefetches.
pub(crate) const AHEAD: usize = 8;

#[inline]
pub(crate) fn prefetch_row_ahead<B>(blocks: &[B], kb: usize, row: usize) {
    #[cfg(target_arch = "x86_64")]
    if (row + AHEAD + 1) * kb <= blocks.len() {
        let bytes = kb * std::mem::size_of::<B>();
        // SAFETY: `_mm_prefetch` is SSE, which every x86_64 CPU has; the row
        // `row + AHEAD` lies inside `blocks` (checked above), so every
        // pointer stays within its allocation; a prefetch reads nothing.
        unsafe {
            let p = blocks.as_ptr().add((row + AHEAD) * kb) as *const i8;
            for off in (0..bytes).step_by(64) {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.add(off));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (blocks, kb, row);
}
