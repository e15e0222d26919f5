//! Which instruction sets the kernels may use, detected once at run time.
//!
//! An installed app is not built for the machine it runs on, so every
//! kernel is compiled for several ISAs and picks one here.

/// AVX2 with FMA and F16C: the x86 kernels' baseline.
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static DETECTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *DETECTED.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
