//! Device enumeration, identity and readings, one submodule per group of NVML calls
//! ([`identity`], [`readings`], [`health`], [`links`], [`throttle`]); this module holds the
//! unit conversions and the checks they share.
//!
//! Units follow NVML: percent, milliwatts, millijoules, MHz, whole degrees Celsius, KB/s
//! (1000 bytes) for PCIe throughput; values are the simulator's rounded to the nearest unit.

use std::ffi::{c_uint, c_ulonglong};

use dgx_pixels_sim::{GpuReadout, GpuStatic};

use crate::state::{device_call, out, Access, Dev};
use crate::types::*;

mod fabric;
mod health;
mod identity;
mod links;
mod platform;
mod readings;
mod throttle;

pub use health::ecc_count;

/// A 0..1 ratio in whole percent.
pub fn percent(ratio: f64) -> c_uint {
    (ratio * 100.0).round().clamp(0.0, 100.0) as c_uint
}

/// Watts in milliwatts.
pub fn milliwatts(watts: f64) -> c_uint {
    (watts * 1000.0).round().max(0.0) as c_uint
}

/// Joules in millijoules.
pub fn millijoules(joules: f64) -> c_ulonglong {
    (joules * 1000.0).round().max(0.0) as c_ulonglong
}

/// Hertz in MHz.
pub fn megahertz(hz: f64) -> c_uint {
    (hz / 1e6).round().max(0.0) as c_uint
}

/// Degrees Celsius, whole.
pub fn celsius(c: f64) -> c_uint {
    c.round().max(0.0) as c_uint
}

/// Bytes per second in NVML's KB/s (1000 bytes, as the exporter reads it).
pub fn kilobytes_per_second(bps: f64) -> c_uint {
    (bps / 1000.0).round().clamp(0.0, f64::from(u32::MAX)) as c_uint
}

/// A count or size the readout holds as a float (whole numbers well below 2^53), as NVML's
/// integer.
pub fn whole(v: f64) -> u64 {
    v.round().max(0.0) as u64
}

/// A reading the readout has, or `NOT_SUPPORTED` (what NVML answers for one the part lacks).
pub fn supported<T>(v: Option<T>) -> Result<T, NvmlReturn> {
    v.ok_or(ERROR_NOT_SUPPORTED)
}

/// MIG-capable products: GPUs a scenario partitions, and the data-center parts that support it.
pub fn mig_capable(gpu: &GpuStatic) -> bool {
    const PARTS: &[&str] = &[
        "A100", "A30", "A800", "H100", "H200", "H800", "H20", "GH200", "B200", "B100", "GB200",
        "B300",
    ];
    gpu.mig.is_some() || PARTS.iter().any(|p| gpu.name.contains(p))
}

/// NVLink links NVML can address on this GPU.
pub fn nvlink_links(gpu: &GpuStatic) -> u32 {
    gpu.nvlink_count.min(NVLINK_MAX_LINKS)
}

/// `NOT_SUPPORTED` for MIG device handles (the query is about the whole GPU).
fn whole_gpu(dev: &Dev<'_>) -> Result<(), NvmlReturn> {
    match dev.handle.mig {
        Some(_) => Err(ERROR_NOT_SUPPORTED),
        None => Ok(()),
    }
}

/// A reading query on the whole GPU.
fn reading<T>(
    device: Device,
    f: impl FnOnce(&Dev<'_>, &GpuReadout) -> Result<T, NvmlReturn>,
) -> Result<T, NvmlReturn> {
    device_call(device, Access::Reading, |dev| {
        whole_gpu(dev)?;
        f(dev, dev.r()?)
    })
}

/// Writes a reading query's value to `p`.
///
/// # Safety
///
/// `p` must be null or valid for writes of `T`.
unsafe fn read_into<T>(
    device: Device,
    p: *mut T,
    f: impl FnOnce(&Dev<'_>, &GpuReadout) -> Result<T, NvmlReturn>,
) -> Result<(), NvmlReturn> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { out(p) }?;
    *p = reading(device, f)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_round_to_nearest() {
        assert_eq!(percent(0.934), 93);
        assert_eq!(percent(1.2), 100);
        assert_eq!(milliwatts(699.9996), 700_000);
        assert_eq!(millijoules(1.0005), 1001);
        assert_eq!(megahertz(1_979_600_000.0), 1980);
        assert_eq!(celsius(64.5), 65);
        assert_eq!(kilobytes_per_second(2.0e9), 2_000_000);
        assert_eq!(whole(85_899_345_920.0), 85_899_345_920);
    }
}
