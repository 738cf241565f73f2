//! Utilization, memory, BAR1, power, energy, temperature, clocks, P-state and fans.

use std::ffi::{c_uint, c_ulonglong};

use dgx_pixels_sim::labels::ClockDomain;
use dgx_pixels_sim::{ClockReadout, GpuReadout};

use super::{
    celsius, megahertz, millijoules, milliwatts, percent, read_into, reading, supported, whole,
};
use crate::state::{device_call, nvml_fn, out, Access, Dev};
use crate::types::*;

nvml_fn! {
    /// GPU and memory utilization in percent.
    fn nvmlDeviceGetUtilizationRates(device: Device, utilization: *mut Utilization) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, utilization, |_, r| {
                Ok(Utilization {
                    gpu: percent(supported(r.utilization_ratio)?),
                    memory: percent(supported(r.memory_utilization_ratio)?),
                })
            })
        }
    }
}

/// Sampling period of the video engine counters, microseconds.
const VIDEO_SAMPLING_PERIOD_US: c_uint = 167_000;

/// Encoder or decoder utilization.
///
/// # Safety
///
/// Pointers must be null or valid for writes.
unsafe fn video_utilization(
    device: Device,
    utilization: *mut c_uint,
    period: *mut c_uint,
    pick: fn(&GpuReadout) -> Option<f64>,
) -> Result<(), NvmlReturn> {
    // SAFETY: forwarded caller contract.
    let (u, p) = unsafe { (out(utilization)?, out(period)?) };
    *u = reading(device, |_, r| Ok(percent(supported(pick(r))?)))?;
    *p = VIDEO_SAMPLING_PERIOD_US;
    Ok(())
}

nvml_fn! {
    /// Video encoder utilization (percent) and its sampling period (µs).
    fn nvmlDeviceGetEncoderUtilization(device: Device, utilization: *mut c_uint, sampling_period_us: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            video_utilization(device, utilization, sampling_period_us, |r| {
                r.encoder_utilization_ratio
            })
        }
    }
}

nvml_fn! {
    /// Video decoder utilization (percent) and its sampling period (µs).
    fn nvmlDeviceGetDecoderUtilization(device: Device, utilization: *mut c_uint, sampling_period_us: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            video_utilization(device, utilization, sampling_period_us, |r| {
                r.decoder_utilization_ratio
            })
        }
    }
}

/// `(total, reserved, free, used)` of the GPU, or of the MIG instance for a MIG handle.
fn memory(dev: &Dev<'_>) -> Result<(u64, u64, u64, u64), NvmlReturn> {
    let r = dev.r()?;
    if let Some(m) = dev.mig {
        let used = r
            .mig
            .iter()
            .find(|x| x.gpu_instance == m.gpu_instance && x.compute_instance == m.compute_instance)
            .and_then(|x| x.memory_used_bytes)
            .map_or(0, whole)
            .min(m.memory_total_bytes);
        return Ok((m.memory_total_bytes, 0, m.memory_total_bytes - used, used));
    }
    match (
        r.memory_total_bytes,
        r.memory_reserved_bytes,
        r.memory_free_bytes,
        r.memory_used_bytes,
    ) {
        (Some(total), reserved, Some(free), Some(used)) => Ok((
            whole(total),
            reserved.map_or(0, whole),
            whole(free),
            whole(used),
        )),
        _ => Err(ERROR_NOT_SUPPORTED),
    }
}

nvml_fn! {
    /// Memory (v1): `used` includes the driver's reserve, as in real NVML.
    fn nvmlDeviceGetMemoryInfo(device: Device, memory_out: *mut Memory) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(memory_out) }?;
        *p = device_call(device, Access::Reading, |dev| {
            let (total, _, free, _) = memory(dev)?;
            Ok(Memory {
                total,
                free,
                used: total - free,
            })
        })?;
        Ok(())
    }
}

nvml_fn! {
    /// Memory (v2): the caller must set `version` to `0x02000028`.
    fn nvmlDeviceGetMemoryInfo_v2(device: Device, memory_out: *mut MemoryV2) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(memory_out) }?;
        if p.version != MEMORY_V2_VERSION {
            return Err(ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, reserved, free, used) = device_call(device, Access::Reading, memory)?;
        *p = MemoryV2 {
            version: MEMORY_V2_VERSION,
            total,
            reserved,
            free,
            used,
        };
        Ok(())
    }
}

nvml_fn! {
    /// BAR1 aperture (`NOT_SUPPORTED` on parts without one).
    fn nvmlDeviceGetBAR1MemoryInfo(device: Device, bar1_memory: *mut Bar1Memory) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, bar1_memory, |_, r| {
                match (r.bar1_total_bytes, r.bar1_used_bytes) {
                    (Some(total), Some(used)) => {
                        let (total, used) = (whole(total), whole(used));
                        let used = used.min(total);
                        Ok(Bar1Memory {
                            bar1_total: total,
                            bar1_free: total - used,
                            bar1_used: used,
                        })
                    }
                    _ => Err(ERROR_NOT_SUPPORTED),
                }
            })
        }
    }
}

nvml_fn! {
    /// GPU core temperature (sensor 0, the only one).
    fn nvmlDeviceGetTemperature(device: Device, sensor_type: c_uint, temp: *mut c_uint) {
        if sensor_type != TEMPERATURE_GPU {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, temp, |_, r| Ok(celsius(supported(r.temperature_gpu_celsius)?))) }
    }
}

nvml_fn! {
    /// Power draw in milliwatts.
    fn nvmlDeviceGetPowerUsage(device: Device, power: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, power, |_, r| Ok(milliwatts(supported(r.power_watts)?))) }
    }
}

nvml_fn! {
    /// Enforced power limit in milliwatts.
    fn nvmlDeviceGetEnforcedPowerLimit(device: Device, limit: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, limit, |_, r| Ok(milliwatts(supported(r.power_limit_watts)?))) }
    }
}

nvml_fn! {
    /// Power management limit in milliwatts (the enforced limit: no other limit is modelled).
    fn nvmlDeviceGetPowerManagementLimit(device: Device, limit: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, limit, |_, r| Ok(milliwatts(supported(r.power_limit_watts)?))) }
    }
}

nvml_fn! {
    /// Energy since the driver loaded, millijoules.
    fn nvmlDeviceGetTotalEnergyConsumption(device: Device, energy: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, energy, |_, r| Ok(millijoules(supported(r.energy_joules)?))) }
    }
}

fn pick_clock(clocks: &ClockReadout, kind: c_uint) -> Result<c_uint, NvmlReturn> {
    let domain = match kind {
        CLOCK_GRAPHICS => ClockDomain::Graphics,
        CLOCK_SM => ClockDomain::Sm,
        CLOCK_MEM => ClockDomain::Memory,
        CLOCK_VIDEO => ClockDomain::Video,
        _ => return Err(ERROR_INVALID_ARGUMENT),
    };
    Ok(megahertz(supported(clocks.get(domain))?))
}

nvml_fn! {
    /// Current clock in MHz.
    fn nvmlDeviceGetClockInfo(device: Device, kind: c_uint, clock: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, clock, |_, r| pick_clock(&r.clocks, kind)) }
    }
}

nvml_fn! {
    /// Maximum clock in MHz.
    fn nvmlDeviceGetMaxClockInfo(device: Device, kind: c_uint, clock: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, clock, |_, r| pick_clock(&r.max_clocks, kind)) }
    }
}

nvml_fn! {
    /// Clock by id: current, or the maximum for the application/boost ids.
    fn nvmlDeviceGetClock(device: Device, kind: c_uint, clock_id: c_uint, clock_mhz: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, clock_mhz, |_, r| match clock_id {
                CLOCK_ID_CURRENT => pick_clock(&r.clocks, kind),
                1..=CLOCK_ID_CUSTOMER_BOOST_MAX => pick_clock(&r.max_clocks, kind),
                _ => Err(ERROR_INVALID_ARGUMENT),
            })
        }
    }
}

nvml_fn! {
    /// Performance state (0 under load, 8 idle).
    fn nvmlDeviceGetPerformanceState(device: Device, p_state: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, p_state, |_, r| supported(r.performance_state)) }
    }
}

nvml_fn! {
    /// Number of fans (`NOT_SUPPORTED` on passively cooled parts).
    fn nvmlDeviceGetNumFans(device: Device, num_fans: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, num_fans, |_, r| match r.fan_speed_ratios.len() {
                0 => Err(ERROR_NOT_SUPPORTED),
                n => Ok(c_uint::try_from(n).unwrap_or(c_uint::MAX)),
            })
        }
    }
}

nvml_fn! {
    /// Fan speed in percent of its maximum.
    fn nvmlDeviceGetFanSpeed_v2(device: Device, fan: c_uint, speed: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, speed, |_, r| {
                if r.fan_speed_ratios.is_empty() {
                    return Err(ERROR_NOT_SUPPORTED);
                }
                let ratio = r.fan_speed_ratios.get(fan as usize).ok_or(ERROR_INVALID_ARGUMENT)?;
                Ok(percent(*ratio))
            })
        }
    }
}

nvml_fn! {
    /// Speed of fan 0 in percent.
    fn nvmlDeviceGetFanSpeed(device: Device, speed: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, speed, |_, r| {
                r.fan_speed_ratios.first().map(|v| percent(*v)).ok_or(ERROR_NOT_SUPPORTED)
            })
        }
    }
}
