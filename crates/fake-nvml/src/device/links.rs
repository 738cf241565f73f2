//! PCIe throughput, replays and link state; NVLink state and error counters.

use std::ffi::{c_uint, c_ulonglong};

use dgx_pixels_sim::labels::NvlinkErrorType;
use dgx_pixels_sim::GpuStatic;

use super::{kilobytes_per_second, nvlink_links, read_into, reading, supported, whole};
use crate::state::{self, nvml_fn, out};
use crate::types::*;

nvml_fn! {
    /// PCIe throughput in KB/s; sleeps `FAKE_NVML_PCIE_DELAY_MS` like the real ~20 ms sample.
    fn nvmlDeviceGetPcieThroughput(device: Device, counter: c_uint, value: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let v = unsafe { out(value) }?;
        if counter != PCIE_UTIL_TX && counter != PCIE_UTIL_RX {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        let delay = reading(device, |_, _| Ok(()))
            .and_then(|()| state::with_driver(|d, _| Ok(d.config.pcie_delay)))?;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        *v = reading(device, |_, r| {
            Ok(kilobytes_per_second(supported(if counter == PCIE_UTIL_TX {
                r.pcie_transmit_bytes_per_second
            } else {
                r.pcie_receive_bytes_per_second
            })?))
        })?;
        Ok(())
    }
}

nvml_fn! {
    /// PCIe replays: the simulated links never replay.
    fn nvmlDeviceGetPcieReplayCounter(device: Device, value: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, value, |_, _| Ok(0)) }
    }
}

/// A PCIe link reading of the readout, as NVML's integer (`NOT_SUPPORTED` for parts not
/// attached by PCIe).
fn link(v: Option<f64>) -> Result<c_uint, NvmlReturn> {
    Ok(c_uint::try_from(whole(supported(v)?)).unwrap_or(c_uint::MAX))
}

nvml_fn! {
    /// Current PCIe generation: the simulator's, which a `pcie_degraded` fault lowers.
    fn nvmlDeviceGetCurrPcieLinkGeneration(device: Device, curr_link_gen: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, curr_link_gen, |_, r| link(r.pcie_link_generation)) }
    }
}

nvml_fn! {
    /// Current PCIe width in lanes: the simulator's, which a `pcie_degraded` fault lowers.
    fn nvmlDeviceGetCurrPcieLinkWidth(device: Device, curr_link_width: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, curr_link_width, |_, r| link(r.pcie_link_width)) }
    }
}

nvml_fn! {
    /// Highest PCIe generation the GPU and its slot support.
    fn nvmlDeviceGetMaxPcieLinkGeneration(device: Device, max_link_gen: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, max_link_gen, |_, r| link(r.pcie_link_max_generation)) }
    }
}

nvml_fn! {
    /// Highest PCIe generation the GPU supports (the simulated slots never limit it, so the
    /// same as `nvmlDeviceGetMaxPcieLinkGeneration`).
    fn nvmlDeviceGetGpuMaxPcieLinkGeneration(device: Device, max_link_gen_device: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, max_link_gen_device, |_, r| link(r.pcie_link_max_generation)) }
    }
}

nvml_fn! {
    /// Widest PCIe link, in lanes, the GPU and its slot support.
    fn nvmlDeviceGetMaxPcieLinkWidth(device: Device, max_link_width: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { read_into(device, max_link_width, |_, r| link(r.pcie_link_max_width)) }
    }
}

/// Checks an NVLink link number: `NOT_SUPPORTED` without NVLink, `INVALID_ARGUMENT` for a link
/// the GPU does not have (so callers can stop at the first one, as with the real library).
fn check_link(gpu: &GpuStatic, link: c_uint) -> Result<(), NvmlReturn> {
    if gpu.nvlink_count == 0 {
        return Err(ERROR_NOT_SUPPORTED);
    }
    if link >= nvlink_links(gpu) {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    Ok(())
}

nvml_fn! {
    /// Whether NVLink `link` is active, as the simulator says (an `nvlink_down` fault takes
    /// links down).
    fn nvmlDeviceGetNvLinkState(device: Device, link: c_uint, is_active: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, is_active, |dev, r| {
                check_link(dev.gpu, link)?;
                let up = r.nvlinks.iter().find(|l| l.link == link).is_some_and(|l| l.up);
                Ok(if up { FEATURE_ENABLED } else { FEATURE_DISABLED })
            })
        }
    }
}

nvml_fn! {
    /// NVLink error counters of the readout; the ECC data counter (4), which the exporter does
    /// not read, is 0.
    fn nvmlDeviceGetNvLinkErrorCounter(device: Device, link: c_uint, counter: c_uint, counter_value: *mut c_ulonglong) {
        let legacy_everywhere = crate::state::with_driver(|d, _| Ok(d.config.nvlink_legacy_on_blackwell))?;
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, counter_value, |dev, r| {
                check_link(dev.gpu, link)?;
                if counter >= NVLINK_ERROR_COUNTER_COUNT {
                    return Err(ERROR_INVALID_ARGUMENT);
                }
                // Blackwell's driver answers this call "not supported": its NVLink 5 counters
                // are field values (fields.rs). Unless told to answer 0, as a driver might.
                if !dev.gpu.nvlink_error_types().contains(&NvlinkErrorType::Replay) {
                    return if legacy_everywhere { Ok(0) } else { Err(ERROR_NOT_SUPPORTED) };
                }
                let Some(kind) = NvlinkErrorType::LEGACY.get(counter as usize) else {
                    return Ok(0);
                };
                let errors = r.nvlinks.iter().find(|l| l.link == link).map(|l| l.errors);
                Ok(errors.and_then(|e| e.get(*kind)).map_or(0, whole))
            })
        }
    }
}
