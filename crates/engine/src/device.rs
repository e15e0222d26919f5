//! Which device runs the model: a GPU when the build and the machine have
//! one, else the CPU, unless the user says otherwise.

use std::fmt;
use std::str::FromStr;

use candle_core::Device;

use crate::error::{EngineError, Result};

/// The user's choice of device (`auto`, `cpu`, `cuda`, `cuda:N`, `metal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// Metal on macOS, CUDA when present, else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda(usize),
    Metal,
}

impl DeviceChoice {
    /// Opens the device. An explicit GPU choice that this build or machine
    /// cannot honour is an error, not a silent fall back to the CPU.
    pub fn open(self) -> Result<Device> {
        match self {
            Self::Cpu => Ok(Device::Cpu),
            Self::Auto => Ok(auto()),
            Self::Cuda(ordinal) => cuda(ordinal),
            Self::Metal => metal(),
        }
    }
}

fn auto() -> Device {
    if let Ok(d) = metal() {
        return d;
    }
    if candle_core::utils::cuda_is_available() {
        if let Ok(d) = cuda(0) {
            return d;
        }
    }
    Device::Cpu
}

fn unavailable(what: &str, feature: &str) -> EngineError {
    EngineError::InvalidSetting { field: "device", reason: format!("{what} is not available: this build of Hearth has no {what} support (cargo feature `{feature}`) or this machine has no such GPU") }
}

fn cuda(ordinal: usize) -> Result<Device> {
    if !cfg!(feature = "cuda") {
        return Err(unavailable("CUDA", "cuda"));
    }
    Device::new_cuda(ordinal).map_err(|e| EngineError::InvalidSetting {
        field: "device",
        reason: format!("CUDA device {ordinal}: {}", first_line(&e)),
    })
}

fn metal() -> Result<Device> {
    if !cfg!(feature = "metal") {
        return Err(unavailable("Metal", "metal"));
    }
    Device::new_metal(0)
        .map_err(|e| EngineError::InvalidSetting { field: "device", reason: format!("Metal: {}", first_line(&e)) })
}

/// A candle error's message without the backtrace that follows it.
fn first_line(e: &candle_core::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

impl FromStr for DeviceChoice {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        Ok(match s.as_str() {
            "auto" | "" => Self::Auto,
            "cpu" => Self::Cpu,
            "cuda" | "gpu" => Self::Cuda(0),
            "metal" => Self::Metal,
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Self::Cuda(n),
                _ => {
                    return Err(EngineError::InvalidSetting {
                        field: "device",
                        reason: format!("{s:?} is not one of auto, cpu, cuda, cuda:N, metal"),
                    })
                }
            },
        })
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
            Self::Metal => f.write_str("metal"),
        }
    }
}

/// A short name for a device, for status lines, benchmarks and replay
/// records: on the CPU with the ISA its kernels run, which decides the bits.
pub fn describe(device: &Device) -> String {
    match device {
        Device::Cpu => format!("cpu ({})", crate::cpu::isa::isa().name()),
        Device::Cuda(_) => "cuda".into(),
        Device::Metal(_) => "metal".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_and_print_back() {
        for s in ["auto", "cpu", "cuda:0", "cuda:3", "metal"] {
            assert_eq!(s.parse::<DeviceChoice>().unwrap().to_string(), s);
        }
        assert_eq!("CUDA".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cuda(0));
        assert!("tpu".parse::<DeviceChoice>().is_err());
        assert!("cuda:x".parse::<DeviceChoice>().is_err());
    }

    #[test]
    fn cpu_always_opens_and_auto_falls_back_to_it() {
        assert!(DeviceChoice::Cpu.open().unwrap().is_cpu());
        let auto = DeviceChoice::Auto.open().unwrap();
        if !cfg!(any(feature = "cuda", feature = "metal")) {
            assert!(auto.is_cpu());
            let err = DeviceChoice::Cuda(0).open().unwrap_err().to_string();
            assert!(err.contains("cuda"), "{err}");
        }
    }
}
