//! The NVLink fabric (`nvmlDeviceGetGpuFabricInfoV`), from the simulator's fabric readout.

use std::ffi::c_uint;

use dgx_pixels_sim::labels::FabricHealthFlag;
use dgx_pixels_sim::{FabricReadout, GpuStatic};

use super::reading;
use crate::state::nvml_fn;
use crate::types::*;

/// Parts that know the call: Hopper and later answer it (`state` NOT_SUPPORTED without a
/// fabric); older ones answer `NOT_SUPPORTED`, as real drivers do.
fn knows_fabric(gpu: &GpuStatic) -> bool {
    ["Hopper", "Blackwell"]
        .iter()
        .any(|a| gpu.architecture.eq_ignore_ascii_case(a))
}

/// The UUID's 16 bytes from its text form (hex digits, dashes skipped).
fn uuid_bytes(text: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    let digits: Vec<u8> = text
        .bytes()
        .filter_map(|b| (b as char).to_digit(16).map(|d| d as u8))
        .collect();
    for (i, pair) in digits.chunks(2).take(16).enumerate() {
        out[i] = pair.iter().fold(0, |acc, d| (acc << 4) | d);
    }
    out
}

/// The driver's one-word summary of the flags.
fn summary(f: &FabricReadout) -> u8 {
    let holds = |flag| f.health.iter().any(|&(g, h)| g == flag && h);
    if holds(FabricHealthFlag::RouteUnhealthy)
        || holds(FabricHealthFlag::AccessTimeoutRecovery)
        || holds(FabricHealthFlag::IncorrectConfiguration)
    {
        GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY
    } else if holds(FabricHealthFlag::DegradedBandwidth) || holds(FabricHealthFlag::RouteRecovery) {
        GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY
    } else {
        GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
    }
}

nvml_fn! {
    /// Fabric state, cluster, clique and health, in the caller's struct version (v2 or v3,
    /// else `ARGUMENT_VERSION_MISMATCH`); a v2 struct is not written past its 36 bytes.
    fn nvmlDeviceGetGpuFabricInfoV(device: Device, info: *mut GpuFabricInfoV3) {
        if info.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller's struct holds at least the version field.
        let version: c_uint = unsafe { info.cast::<c_uint>().read_unaligned() };
        let v3 = crate::state::with_driver(|d, _| Ok(d.config.fabric_v3))?;
        if version != GPU_FABRIC_INFO_V2_VERSION && (version != GPU_FABRIC_INFO_V3_VERSION || !v3) {
            return Err(ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let v = reading(device, |dev, r| {
            if !knows_fabric(dev.gpu) {
                return Err(ERROR_NOT_SUPPORTED);
            }
            let mut v = GpuFabricInfoV3 {
                version,
                ..GpuFabricInfoV3::default()
            };
            if let Some(f) = &r.fabric {
                v.cluster_uuid = uuid_bytes(&f.cluster_uuid);
                v.status = f.status as NvmlReturn;
                v.clique_id = f.clique_id;
                v.state = f.state.map_or(GPU_FABRIC_STATE_NOT_SUPPORTED, |s| s.to_nvml());
                v.health_mask = FabricHealthFlag::encode(&f.health);
                v.health_summary = summary(f);
            }
            Ok(v)
        })?;
        let len = if version == GPU_FABRIC_INFO_V3_VERSION {
            std::mem::size_of::<GpuFabricInfoV3>()
        } else {
            std::mem::offset_of!(GpuFabricInfoV3, health_mask) + 4
        };
        // SAFETY: the caller's struct is `len` bytes for the version it gave.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&v as *const GpuFabricInfoV3).cast::<u8>(),
                info.cast::<u8>(),
                len,
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_text_is_its_bytes() {
        let b = uuid_bytes("0a1b2c3d-0000-0000-0000-00000000ffee");
        assert_eq!(b[..4], [0x0a, 0x1b, 0x2c, 0x3d]);
        assert_eq!(b[14..], [0xff, 0xee]);
    }
}
