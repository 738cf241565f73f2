//! Clock event (throttle) reasons and violation times.

use std::ffi::{c_uint, c_ulonglong};

use dgx_pixels_sim::labels::{ThrottleReason, ViolationPolicy};
use dgx_pixels_sim::GpuReadout;

use super::{read_into, supported};
use crate::state::{self, nvml_fn};
use crate::types::*;

/// NVML's bit for a clock event reason.
pub fn reason_bit(reason: ThrottleReason) -> c_ulonglong {
    match reason {
        ThrottleReason::GpuIdle => REASON_GPU_IDLE,
        ThrottleReason::ApplicationsClocksSetting => REASON_APPLICATIONS_CLOCKS_SETTING,
        ThrottleReason::SwPowerCap => REASON_SW_POWER_CAP,
        ThrottleReason::HwSlowdown => REASON_HW_SLOWDOWN,
        ThrottleReason::SyncBoost => REASON_SYNC_BOOST,
        ThrottleReason::SwThermalSlowdown => REASON_SW_THERMAL_SLOWDOWN,
        ThrottleReason::HwThermalSlowdown => REASON_HW_THERMAL_SLOWDOWN,
        ThrottleReason::HwPowerBrakeSlowdown => REASON_HW_POWER_BRAKE_SLOWDOWN,
    }
}

/// The current clock event reasons as NVML bits.
pub fn reason_bits(r: &GpuReadout) -> c_ulonglong {
    r.throttle_reasons
        .iter()
        .filter(|(_, on)| *on)
        .fold(0, |acc, (reason, _)| acc | reason_bit(*reason))
}

nvml_fn! {
    /// Current clock throttle reasons (the deprecated name).
    fn nvmlDeviceGetCurrentClocksThrottleReasons(device: Device, reasons: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, reasons, |_, r| Ok(reason_bits(r))) }
    }
}

nvml_fn! {
    /// Current clock event reasons.
    fn nvmlDeviceGetCurrentClocksEventReasons(device: Device, reasons: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, reasons, |_, r| Ok(reason_bits(r))) }
    }
}

nvml_fn! {
    /// Supported clock throttle reasons (the deprecated name).
    fn nvmlDeviceGetSupportedClocksThrottleReasons(device: Device, reasons: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, reasons, |_, _| Ok(REASONS_SUPPORTED)) }
    }
}

nvml_fn! {
    /// Supported clock event reasons.
    fn nvmlDeviceGetSupportedClocksEventReasons(device: Device, reasons: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, reasons, |_, _| Ok(REASONS_SUPPORTED)) }
    }
}

nvml_fn! {
    /// Time held down by the power limit (policy 0) or temperature (policy 1), in ns.
    fn nvmlDeviceGetViolationStatus(device: Device, perf_policy_type: c_uint, viol_time: *mut ViolationTime) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, viol_time, |_, r| {
                let policy = match perf_policy_type {
                    PERF_POLICY_POWER => ViolationPolicy::Power,
                    PERF_POLICY_THERMAL => ViolationPolicy::Thermal,
                    p if p <= PERF_POLICY_MAX => return Err(ERROR_NOT_SUPPORTED),
                    _ => return Err(ERROR_INVALID_ARGUMENT),
                };
                let seconds = supported(r.violation_seconds(policy))?;
                Ok(ViolationTime {
                    reference_time: state::unix_micros(),
                    violation_time: (seconds * 1e9).round().max(0.0) as c_ulonglong,
                })
            })
        }
    }
}
