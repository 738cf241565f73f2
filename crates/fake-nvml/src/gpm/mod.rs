//! GPM (GPU Performance Monitoring, Hopper and newer): the support query, sample buffers
//! ([`samples`]) and metrics between two samples, answered from the simulator's profiling model
//! averaged over the samples' interval ([`model`]).
//!
//! Which GPUs answer: Hopper and Blackwell parts, unless `FAKE_NVML_GPM=0`; older parts and
//! MIG device handles answer `NOT_SUPPORTED` to sampling and 0 to the support query. With
//! `FAKE_NVML_GPM=denied` sampling answers `NO_PERMISSION`.
//! `FAKE_NVML_GPM_FAIL_GPU=N` makes GPU N's sampling fail (`NVML_ERROR_UNKNOWN`).
//! `nvmlGpmMigSampleGet` samples one GPU instance of a GPU in MIG mode (through the GPU's
//! handle, as NVML takes it): the instance's metrics follow its modelled activity
//! ([`model::averaged_mig`]). The streaming calls are not exported (nvml-wrapper reports a
//! missing symbol as an error of that call only).

use std::ffi::{c_char, c_uint, c_void, CStr};

use crate::config::Gpm;
use crate::state::{self, device_call_mut, nvml_fn, out, Handle};
use crate::types::*;

mod model;
mod samples;

pub use model::METRIC_MAX;
use model::{has_gpm, MODELLED};

/// `NVML_GPM_SUPPORT_VERSION`.
pub const GPM_SUPPORT_VERSION: c_uint = 1;
/// `NVML_GPM_METRICS_GET_VERSION`.
pub const GPM_METRICS_GET_VERSION: c_uint = 1;

/// `nvmlGpmSupport_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GpmSupport {
    pub version: c_uint,
    pub is_supported_device: c_uint,
}

/// The names and unit of a metric in `nvmlGpmMetric_t` (NVML's own strings; null if unknown).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GpmMetricInfo {
    pub short_name: *const c_char,
    pub long_name: *const c_char,
    pub unit: *const c_char,
}

/// `nvmlGpmMetric_t`: the caller sets `metric_id`; each gets its own return code.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GpmMetric {
    pub metric_id: c_uint,
    pub nvml_return: NvmlReturn,
    pub value: f64,
    pub info: GpmMetricInfo,
}

/// `nvmlGpmMetricsGet_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GpmMetricsGet {
    pub version: c_uint,
    pub num_metrics: c_uint,
    pub sample1: *mut c_void,
    pub sample2: *mut c_void,
    pub metrics: [GpmMetric; METRIC_MAX as usize],
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::size_of;
    assert!(size_of::<GpmSupport>() == 8);
    assert!(size_of::<GpmMetric>() == 40);
    assert!(size_of::<GpmMetricsGet>() == 24 + 40 * 210);
};

/// Short name, long name and unit of the modelled ids, in [`MODELLED`] order.
const INFO: [(&CStr, &CStr, &CStr); 12] = [
    (c"GRACT", c"Graphics activity", c"%"),
    (c"SMACT", c"SM activity", c"%"),
    (c"SMOCC", c"SM occupancy", c"%"),
    (c"TENSOR", c"Any tensor pipe activity", c"%"),
    (c"DRAMA", c"DRAM bandwidth utilization", c"%"),
    (c"FP64A", c"FP64 pipe activity", c"%"),
    (c"FP32A", c"FP32 pipe activity", c"%"),
    (c"FP16A", c"FP16 pipe activity", c"%"),
    (c"PCITX", c"PCIe transmit", c"MiB/sec"),
    (c"PCIRX", c"PCIe receive", c"MiB/sec"),
    (c"NVLRX", c"NVLink receive, all links", c"MiB/sec"),
    (c"NVLTX", c"NVLink transmit, all links", c"MiB/sec"),
];

/// Whether the GPU behind `h` answers GPM under the driver's configuration.
fn supported(d: &state::Driver, h: Handle) -> bool {
    d.config.gpm != Gpm::Off && h.mig.is_none() && d.node().gpu(h.gpu).is_some_and(has_gpm)
}

nvml_fn! {
    /// Whether a device supports GPM (version-checked struct).
    fn nvmlGpmQueryDeviceSupport(device: Device, gpm_support: *mut GpmSupport) {
        // SAFETY: NVML contract for out-parameters.
        let s = unsafe { out(gpm_support) }?;
        if s.version != GPM_SUPPORT_VERSION {
            return Err(ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        state::gpm_hang(device);
        s.is_supported_device = device_call_mut(device, |d, h, _| Ok(supported(d, h).into()))?;
        Ok(())
    }
}

nvml_fn! {
    /// A new sample buffer.
    fn nvmlGpmSampleAlloc(gpm_sample: *mut *mut c_void) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(gpm_sample) }?;
        *p = samples::alloc()?;
        Ok(())
    }
}

nvml_fn! {
    /// Frees a sample buffer.
    fn nvmlGpmSampleFree(gpm_sample: *mut c_void) {
        samples::free(gpm_sample)
    }
}

nvml_fn! {
    /// Reads GPU counters into a sample buffer: here, which GPU and when.
    fn nvmlGpmSampleGet(device: Device, gpm_sample: *mut c_void) {
        if !samples::is_live(gpm_sample) {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        state::gpm_hang(device);
        let taken = device_call_mut(device, |d, h, now| {
            if !supported(d, h) {
                return Err(ERROR_NOT_SUPPORTED);
            }
            if d.config.gpm == Gpm::Denied {
                return Err(ERROR_NO_PERMISSION);
            }
            if d.config.gpm_fail_gpu.is_some_and(|g| g as usize == h.gpu) {
                return Err(ERROR_UNKNOWN);
            }
            take(d, h, None, now)
        })?;
        samples::fill(gpm_sample, taken)
    }
}

/// The sample of GPU `h` (instance `gpu_instance`) at `now`, once the GPU's GPM is known to
/// answer: `GPU_IS_LOST` for a lost GPU.
fn take(
    d: &mut state::Driver,
    h: Handle,
    gpu_instance: Option<u32>,
    now: std::time::Duration,
) -> Result<samples::Taken, NvmlReturn> {
    match d.state(h.gpu, now) {
        Some(dgx_pixels_sim::GpuState::Ok(_)) => Ok(samples::Taken {
            gpu: h.gpu,
            gpu_instance,
            at: now,
        }),
        Some(dgx_pixels_sim::GpuState::Lost { .. }) => Err(ERROR_GPU_IS_LOST),
        None => Err(ERROR_INVALID_ARGUMENT),
    }
}

nvml_fn! {
    /// Reads one MIG GPU instance's counters into a sample buffer, through its GPU's handle:
    /// `INVALID_ARGUMENT` for an instance the GPU does not have (or a GPU not in MIG mode).
    fn nvmlGpmMigSampleGet(device: Device, gpu_instance_id: c_uint, gpm_sample: *mut c_void) {
        if !samples::is_live(gpm_sample) {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        state::gpm_hang(device);
        let taken = device_call_mut(device, |d, h, now| {
            if !supported(d, h) {
                return Err(ERROR_NOT_SUPPORTED);
            }
            if d.config.gpm == Gpm::Denied {
                return Err(ERROR_NO_PERMISSION);
            }
            if d.config.gpm_fail_gpu.is_some_and(|g| g as usize == h.gpu) {
                return Err(ERROR_UNKNOWN);
            }
            let has = d.node().gpu(h.gpu).and_then(|g| g.mig.as_ref()).is_some_and(|m| {
                m.iter().any(|i| i.gpu_instance == gpu_instance_id)
            });
            if !has {
                return Err(ERROR_INVALID_ARGUMENT);
            }
            take(d, h, Some(gpu_instance_id), now)
        })?;
        samples::fill(gpm_sample, taken)
    }
}

nvml_fn! {
    /// Metrics between two samples of one GPU, each with its own return code: the modelled ids
    /// answer the profile averaged over the interval, other known ids `NOT_SUPPORTED`, ids out
    /// of range `INVALID_ARGUMENT`.
    fn nvmlGpmMetricsGet(metrics_get: *mut GpmMetricsGet) {
        // SAFETY: NVML contract for in/out structs.
        let req = unsafe { out(metrics_get) }?;
        if req.version != GPM_METRICS_GET_VERSION {
            return Err(ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        if req.num_metrics > METRIC_MAX {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        let (a, b) = (samples::taken(req.sample1)?, samples::taken(req.sample2)?);
        // Two samples of one GPU, or of one instance of it.
        if (a.gpu, a.gpu_instance) != (b.gpu, b.gpu_instance) {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        let values = state::with_driver(|d, _| {
            let node = match d.gpm.as_mut() {
                Some(n) => n,
                None => {
                    let scenario = dgx_pixels_sim::Scenario::load(&d.config.scenario)
                        .map_err(|_| ERROR_UNKNOWN)?;
                    d.gpm.insert(dgx_pixels_sim::Node::new(scenario))
                }
            };
            match a.gpu_instance {
                None => model::averaged(node, a.gpu, a.at, b.at),
                Some(gi) => model::averaged_mig(node, a.gpu, gi, a.at, b.at),
            }
        })?;
        for m in &mut req.metrics[..req.num_metrics as usize] {
            answer(m, &values);
        }
        Ok(())
    }
}

/// Fills one metric of a request from the averaged answers.
fn answer(m: &mut GpmMetric, values: &[Option<f64>; 12]) {
    let none = std::ptr::null();
    m.info = GpmMetricInfo {
        short_name: none,
        long_name: none,
        unit: none,
    };
    m.value = 0.0;
    let Some(i) = MODELLED.iter().position(|id| *id == m.metric_id) else {
        m.nvml_return = if m.metric_id == 0 || m.metric_id >= METRIC_MAX {
            ERROR_INVALID_ARGUMENT
        } else {
            ERROR_NOT_SUPPORTED
        };
        return;
    };
    let (short, long, unit) = INFO[i];
    m.info = GpmMetricInfo {
        short_name: short.as_ptr(),
        long_name: long.as_ptr(),
        unit: unit.as_ptr(),
    };
    match values[i] {
        Some(v) => {
            m.value = v;
            m.nvml_return = SUCCESS;
        }
        None => m.nvml_return = ERROR_NOT_SUPPORTED,
    }
}

/// Scenario time a sample buffer read at, in nanoseconds; `u64::MAX` for a buffer that is not
/// live and filled. Not NVML: lets tests compute the interval a metrics request averaged.
#[no_mangle]
pub extern "C" fn fake_nvml_gpm_sample_time_ns(gpm_sample: *mut c_void) -> u64 {
    samples::taken(gpm_sample)
        .map(|t| u64::try_from(t.at.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(u64::MAX)
}

/// Live GPM sample buffers. Not NVML: lets tests check that every buffer is freed.
#[no_mangle]
pub extern "C" fn fake_nvml_gpm_live_samples() -> u64 {
    samples::live() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(id: u32) -> GpmMetric {
        GpmMetric {
            metric_id: id,
            nvml_return: 12345,
            value: -1.0,
            info: GpmMetricInfo {
                short_name: std::ptr::null(),
                long_name: std::ptr::null(),
                unit: std::ptr::null(),
            },
        }
    }

    #[test]
    fn each_metric_gets_its_own_return_code() {
        let mut values = [Some(50.0); 12];
        values[11] = None; // no NVLink
        let mut m = metric(model::SM_UTIL);
        answer(&mut m, &values);
        assert_eq!((m.nvml_return, m.value), (SUCCESS, 50.0));
        assert!(!m.info.short_name.is_null());
        let mut m = metric(model::NVLINK_TOTAL_TX_PER_SEC);
        answer(&mut m, &values);
        assert_eq!(m.nvml_return, ERROR_NOT_SUPPORTED, "a part without links");
        let mut m = metric(40); // NVJPG 0: known, not modelled
        answer(&mut m, &values);
        assert_eq!((m.nvml_return, m.value), (ERROR_NOT_SUPPORTED, 0.0));
        for id in [0, METRIC_MAX, u32::MAX] {
            let mut m = metric(id);
            answer(&mut m, &values);
            assert_eq!(m.nvml_return, ERROR_INVALID_ARGUMENT, "{id}");
        }
    }
}
