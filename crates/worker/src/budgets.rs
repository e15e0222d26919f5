//! How much memory and disk the conversations' caches may take: the user's
//! setting, with its bounds.

use crate::error::{AppError, AppResult, ErrorKind};

/// How much memory and disk conversation caches may take. Past either, the
/// least recently used caches go first (from memory they go only to disk,
/// where every finished turn is already saved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct CacheBudgets {
    pub memory_mb: u32,
    /// 0 saves nothing to disk.
    pub disk_mb: u32,
}

impl Default for CacheBudgets {
    /// An eighth of the machine's memory (512 MB to 8 GB; 2 GB where it
    /// cannot be read), and 8 GB of disk.
    fn default() -> Self {
        let memory_mb = total_memory_mb().map_or(2048, |m| (m / 8).clamp(512, 8192));
        Self { memory_mb, disk_mb: 8192 }
    }
}

/// Physical memory in bytes, on every platform (`sysinfo`; None where it reads 0).
pub fn total_memory_bytes() -> Option<u64> {
    let mut system = sysinfo::System::new();
    system.refresh_memory_specifics(sysinfo::MemoryRefreshKind::nothing().with_ram());
    Some(system.total_memory()).filter(|&b| b > 0)
}

/// Physical memory in MB, on every platform (`sysinfo`; None where it reads 0).
pub(crate) fn total_memory_mb() -> Option<u32> {
    u32::try_from(total_memory_bytes()? / (1024 * 1024)).ok()
}

impl CacheBudgets {
    pub fn validate(&self) -> AppResult<()> {
        if !(64..=1 << 20).contains(&self.memory_mb) {
            return Err(AppError::new(ErrorKind::InvalidSettings, "the memory budget must be between 64 MB and 1 TB"));
        }
        if self.disk_mb > 1 << 24 {
            return Err(AppError::new(ErrorKind::InvalidSettings, "the disk budget must be at most 16 TB"));
        }
        Ok(())
    }
}
