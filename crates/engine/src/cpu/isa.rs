//! Which instruction sets the kernels may use, detected once at run time.
//!
//! An installed app is not built for the machine it runs on, so every
//! kernel is compiled for several ISAs and picks one here. A binary may cap
//! the choice before the first kernel runs (`cap_isa`; the CLI and the app
//! take `HEARTH_ISA`: `portable`, `avx2` or `avx512`), to compare the paths
//! on one machine.

/// The instruction sets the x86 kernels are written for, smallest first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Isa {
    /// Plain Rust: every architecture.
    Portable,
    /// AVX2 with FMA and F16C: the x86 kernels' baseline.
    Avx2,
    /// AVX-512 (F, BW, DQ, VL) with VNNI, on top of AVX2: Zen 4 and Intel
    /// server parts since Ice Lake.
    Avx512Vnni,
}

impl Isa {
    /// The name `HEARTH_ISA` takes and benchmarks print.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512",
        }
    }

    /// The ISA a name (`portable`, `avx2`, `avx512`, any case) stands for.
    pub fn parse(s: &str) -> Option<Self> {
        [Isa::Portable, Isa::Avx2, Isa::Avx512Vnni].into_iter().find(|i| i.name().eq_ignore_ascii_case(s.trim()))
    }
}

static CAP: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
static CHOSEN: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();

/// Caps the ISA the kernels run with. Only the first call before any kernel
/// runs has an effect (the choice is then fixed for the process); returns
/// whether this one did.
pub fn cap_isa(cap: Isa) -> bool {
    CAP.set(cap).is_ok() && CHOSEN.get().is_none()
}

/// The ISA the kernels run with: the best this CPU has, within the cap.
pub fn isa() -> Isa {
    *CHOSEN.get_or_init(|| {
        // The crate's own unit tests run under `HEARTH_ISA` as the binaries do.
        #[cfg(test)]
        if let Some(cap) = std::env::var("HEARTH_ISA").ok().and_then(|s| Isa::parse(&s)) {
            cap_isa(cap);
        }
        detected().min(CAP.get().copied().unwrap_or(Isa::Avx512Vnni))
    })
}

/// The best ISA this CPU has.
pub fn detected() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 =
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
        let avx512 = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni");
        match (avx2, avx512) {
            (true, true) => Isa::Avx512Vnni,
            (true, false) => Isa::Avx2,
            _ => Isa::Portable,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Isa::Portable
    }
}

/// Panics unless the kernels may run `want`'s instructions: it is at most
/// `isa()`, which never exceeds what `detected()` found on this CPU.
///
/// The kernels' safe entry points take the ISA as an argument (their
/// callers pass `isa()`); they check it here, once per call, before they
/// call an `unsafe` kernel that needs its features.
#[inline]
#[track_caller]
pub(crate) fn assert_available(want: Isa) {
    assert!(want <= isa(), "the {} kernels need instructions this CPU lacks (or that are capped)", want.name());
}

/// AVX2 with FMA and F16C.
pub fn has_avx2_fma() -> bool {
    isa() >= Isa::Avx2
}

/// AVX-512 with VNNI.
pub fn has_avx512_vnni() -> bool {
    isa() >= Isa::Avx512Vnni
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_are_no_cap() {
        for i in [Isa::Portable, Isa::Avx2, Isa::Avx512Vnni] {
            assert_eq!(Isa::parse(i.name()), Some(i));
        }
        assert_eq!(Isa::parse(" AVX2 "), Some(Isa::Avx2));
        assert_eq!(Isa::parse("sse9"), None);
        assert!(isa() <= detected());
    }
}
