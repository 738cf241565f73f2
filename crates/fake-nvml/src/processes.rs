//! Running processes, per-process utilization, and accounting (disabled).

use std::ffi::{c_uint, c_ulonglong};
use std::time::Duration;

use dgx_pixels_sim::{GpuReadout, GpuState, Node, Scenario};

use crate::config::ClockMode;
use crate::device::{percent, whole};
use crate::state::{self, device_call, nvml_fn, out, Access, Dev, Driver};
use crate::types::*;

/// The compute processes a handle sees: all of the GPU's, or those of one MIG instance. On a
/// GPU shared through MPS (`mode = "mps"`) its processes are MPS clients: `mps` picks which
/// list is asked for, the MPS call's (`true`) or the compute call's.
fn compute_processes(dev: &Dev<'_>, mps: bool) -> Result<Vec<ProcessInfo>, NvmlReturn> {
    let r = dev.r()?;
    if dev.gpu.mps != mps {
        return Ok(Vec::new());
    }
    Ok(r.processes
        .iter()
        .filter(|p| match dev.mig {
            Some(m) => {
                p.gpu_instance == Some(m.gpu_instance)
                    && p.compute_instance == Some(m.compute_instance)
            }
            None => true,
        })
        .map(|p| ProcessInfo {
            pid: p.pid,
            used_gpu_memory: whole(p.used_memory_bytes),
            gpu_instance_id: p.gpu_instance.unwrap_or(NO_INSTANCE),
            compute_instance_id: p.compute_instance.unwrap_or(NO_INSTANCE),
        })
        .collect())
}

/// The two-call protocol: with `infos` null or `*count` too small, answer
/// `INSUFFICIENT_SIZE` and the count needed (or success when there is nothing to list).
///
/// # Safety
///
/// `count` must be null or valid; `infos` null or valid for `*count` entries.
unsafe fn fill<T: Copy>(list: &[T], count: *mut c_uint, infos: *mut T) -> Result<(), NvmlReturn> {
    // SAFETY: forwarded caller contract.
    let count = unsafe { out(count) }?;
    let needed = c_uint::try_from(list.len()).unwrap_or(c_uint::MAX);
    if infos.is_null() || *count < needed {
        let short = needed > 0;
        *count = needed;
        return if short {
            Err(ERROR_INSUFFICIENT_SIZE)
        } else {
            Ok(())
        };
    }
    // SAFETY: `infos` has room for `*count >= list.len()` entries.
    unsafe { std::ptr::copy_nonoverlapping(list.as_ptr(), infos, list.len()) };
    *count = needed;
    Ok(())
}

/// Compute processes of a device.
///
/// # Safety
///
/// As for [`fill`].
unsafe fn compute(
    device: Device,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> Result<(), NvmlReturn> {
    if count.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    let (mut list, handle) = device_call(device, Access::Reading, |dev| {
        Ok((compute_processes(dev, false)?, dev.handle))
    })?;
    // Processes holding the GPU through the fake CUDA driver (FAKE_NVML_CUDA_STATE_DIR).
    if handle.mig.is_none() {
        if let Some(dir) = state::with_driver(|d, _| Ok(d.config.cuda_state_dir.clone()))? {
            for (pid, bytes) in crate::cuda_contexts::holders(&dir, handle.gpu) {
                if !list.iter().any(|p| p.pid == pid) {
                    list.push(ProcessInfo {
                        pid,
                        used_gpu_memory: bytes,
                        gpu_instance_id: NO_INSTANCE,
                        compute_instance_id: NO_INSTANCE,
                    });
                }
            }
        }
    }
    // SAFETY: forwarded caller contract.
    unsafe { fill(&list, count, infos) }
}

/// MPS client processes: those of a GPU the scenario shares through MPS, none elsewhere (as
/// NVML answers for a GPU without an MPS server); `NOT_SUPPORTED` with `FAKE_NVML_MPS=0`.
///
/// # Safety
///
/// As for [`fill`].
unsafe fn mps(
    device: Device,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> Result<(), NvmlReturn> {
    if count.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    let answers = state::with_driver(|d, _| Ok(d.config.mps))?;
    let list = device_call(device, Access::Reading, |dev| {
        if !answers {
            return Err(ERROR_NOT_SUPPORTED);
        }
        compute_processes(dev, true)
    })?;
    // SAFETY: forwarded caller contract.
    unsafe { fill(&list, count, infos) }
}

/// Graphics processes: the simulated workloads are compute only.
///
/// # Safety
///
/// As for [`fill`].
unsafe fn graphics(
    device: Device,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> Result<(), NvmlReturn> {
    if count.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    device_call(device, Access::Reading, |_| Ok(()))?;
    // SAFETY: forwarded caller contract.
    unsafe { fill(&[], count, infos) }
}

nvml_fn! {
    /// Compute processes (two-call protocol).
    fn nvmlDeviceGetComputeRunningProcesses_v3(device: Device, info_count: *mut c_uint, infos: *mut ProcessInfo) {
        // SAFETY: forwarded caller contract.
        unsafe { compute(device, info_count, infos) }
    }
}

nvml_fn! {
    /// Compute processes, `_v2` (same struct as `_v3`).
    fn nvmlDeviceGetComputeRunningProcesses_v2(device: Device, info_count: *mut c_uint, infos: *mut ProcessInfo) {
        // SAFETY: forwarded caller contract.
        unsafe { compute(device, info_count, infos) }
    }
}

nvml_fn! {
    /// MPS client processes (two-call protocol).
    fn nvmlDeviceGetMPSComputeRunningProcesses_v3(device: Device, info_count: *mut c_uint, infos: *mut ProcessInfo) {
        // SAFETY: forwarded caller contract.
        unsafe { mps(device, info_count, infos) }
    }
}

nvml_fn! {
    /// Graphics processes: always none.
    fn nvmlDeviceGetGraphicsRunningProcesses_v3(device: Device, info_count: *mut c_uint, infos: *mut ProcessInfo) {
        // SAFETY: forwarded caller contract.
        unsafe { graphics(device, info_count, infos) }
    }
}

nvml_fn! {
    /// Graphics processes, `_v2`: always none.
    fn nvmlDeviceGetGraphicsRunningProcesses_v2(device: Device, info_count: *mut c_uint, infos: *mut ProcessInfo) {
        // SAFETY: forwarded caller contract.
        unsafe { graphics(device, info_count, infos) }
    }
}

/// The processes' samples in reading `r` (percent, unstamped): each process of a time-sliced
/// GPU its share, any other process its GPU's (or MIG instance's) activity.
fn samples_of(r: &GpuReadout) -> Vec<ProcessUtilizationSample> {
    // A utilization the readout lacks counts as idle.
    let pct = |v: Option<f64>| percent(v.unwrap_or(0.0));
    r.processes
        .iter()
        .map(|p| {
            // A time-sliced GPU's processes each have their own share (the simulator's).
            if let Some(u) = p.utilization {
                return ProcessUtilizationSample {
                    pid: p.pid,
                    time_stamp: 0,
                    sm_util: percent(u.sm),
                    mem_util: percent(u.memory),
                    enc_util: percent(u.encoder),
                    dec_util: percent(u.decoder),
                };
            }
            let activity = r
                .mig
                .iter()
                .find(|m| Some(m.gpu_instance) == p.gpu_instance)
                .map_or(r.utilization_ratio, |m| m.graphics_engine_active_ratio);
            ProcessUtilizationSample {
                pid: p.pid,
                time_stamp: 0,
                sm_util: pct(activity),
                mem_util: pct(r.memory_utilization_ratio),
                enc_util: pct(r.encoder_utilization_ratio),
                dec_util: pct(r.decoder_utilization_ratio),
            }
        })
        .collect()
}

/// The scenario time of sample tick `tick_us` (wall clock), read at wall time `now_us` and
/// scenario time `now`: on a running clock as far before `now` as the tick is before `now_us`.
/// A frozen clock has stood at `now` since the buffer was first read (`since_us`) and ran
/// before: the GPU's history from before the caller started, as a real driver's buffer holds
/// it. `None` for a tick before the scenario began (no sample).
fn tick_time(
    frozen: bool,
    now: Duration,
    now_us: u64,
    since_us: u64,
    tick_us: u64,
) -> Option<Duration> {
    let back = if frozen { since_us } else { now_us }.saturating_sub(tick_us);
    now.checked_sub(Duration::from_micros(back))
}

/// GPU `gpu`'s samples newer than `last_seen` from its buffer, brought up to date from the
/// samples' own copy of the node (a size query's fill call excepted, see `process_samples`).
fn buffered(
    d: &mut Driver,
    gpu: usize,
    now: Duration,
    size_query: bool,
    last_seen: u64,
) -> Result<Vec<ProcessUtilizationSample>, NvmlReturn> {
    let now_us = state::unix_micros();
    let frozen = matches!(d.config.clock, ClockMode::Frozen(_));
    let node = match d.process_node.as_mut() {
        Some(n) => n,
        None => {
            let scenario = Scenario::load(&d.config.scenario).map_err(|_| ERROR_UNKNOWN)?;
            d.process_node.insert(Node::new(scenario))
        }
    };
    let buffer = d.process_samples.entry(gpu).or_default();
    let since_us = buffer.since_us().unwrap_or(now_us);
    Ok(buffer.answer(now_us, size_query, last_seen, |tick| {
        match tick_time(frozen, now, now_us, since_us, tick).and_then(|t| node.reading(gpu, t)) {
            Some(GpuState::Ok(r)) => samples_of(&r.readout),
            // Before the scenario, or the GPU was lost: no sample.
            _ => Vec::new(),
        }
    }))
}

nvml_fn! {
    /// Per-process utilization (percent) from the GPU's sample buffer (`process_samples`: one
    /// sample per process every 200 ms, each stamped with its own time, the last 20 s kept,
    /// history from before the first call included): those newer than
    /// `last_seen_time_stamp` (0: the whole buffer). `NOT_FOUND` when there is no such sample,
    /// as in NVML.
    fn nvmlDeviceGetProcessUtilization(device: Device, utilization: *mut ProcessUtilizationSample, process_samples_count: *mut c_uint, last_seen_time_stamp: c_ulonglong) {
        if process_samples_count.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        let answers = state::with_driver(|d, _| Ok(d.config.process_utilization))?;
        // Session, handle, hang and lost-GPU checks, as for every reading.
        let gpu = device_call(device, Access::Reading, |dev| {
            if dev.handle.mig.is_some() || !answers {
                return Err(ERROR_NOT_SUPPORTED);
            }
            Ok(dev.handle.gpu)
        })?;
        let samples = state::with_driver(|d, now| {
            buffered(d, gpu, now, utilization.is_null(), last_seen_time_stamp)
        })?;
        if samples.is_empty() {
            return Err(ERROR_NOT_FOUND);
        }
        // SAFETY: forwarded caller contract.
        unsafe { fill(&samples, process_samples_count, utilization) }
    }
}

nvml_fn! {
    /// Accounting mode: disabled.
    fn nvmlDeviceGetAccountingMode(device: Device, mode: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(mode) }?;
        device_call(device, Access::Reading, |_| Ok(()))?;
        *p = FEATURE_DISABLED;
        Ok(())
    }
}

nvml_fn! {
    /// Accounting pids: `NOT_SUPPORTED` while accounting is disabled.
    fn nvmlDeviceGetAccountingPids(device: Device, count: *mut c_uint, pids: *mut c_uint) {
        let _ = pids;
        if count.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        device_call(device, Access::Reading, |_| Err(ERROR_NOT_SUPPORTED))
    }
}

nvml_fn! {
    /// Accounting stats: `NOT_SUPPORTED` while accounting is disabled.
    fn nvmlDeviceGetAccountingStats(device: Device, pid: c_uint, stats: *mut AccountingStats) {
        let _ = pid;
        if stats.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        device_call(device, Access::Reading, |_| Err(ERROR_NOT_SUPPORTED))
    }
}

nvml_fn! {
    /// Accounting buffer size: `NOT_SUPPORTED` while accounting is disabled.
    fn nvmlDeviceGetAccountingBufferSize(device: Device, buffer_size: *mut c_uint) {
        if buffer_size.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        device_call(device, Access::Reading, |_| Err(ERROR_NOT_SUPPORTED))
    }
}
