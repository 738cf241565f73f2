//! Device enumeration, identity and readings.
//!
//! Units follow NVML: percent, milliwatts, millijoules, MHz, whole degrees Celsius, KB/s
//! (1000 bytes) for PCIe throughput; values are the simulator's rounded to the nearest unit.

use std::ffi::{c_char, c_uint, c_ulonglong, CStr};

use dgx_pixels_sim::labels::{
    ClockDomain, EccCounter, EccErrorType, NvlinkErrorType, ThrottleReason, ViolationPolicy,
};
use dgx_pixels_sim::{ClockReadout, GpuReadout, GpuStatic};

use crate::state::{self, device_call, nvml_fn, out, write_str, Access, Dev, Handle};
use crate::types::*;

// ---------------------------------------------------------------------------------------------
// Units and capabilities.

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

// ---------------------------------------------------------------------------------------------
// Enumeration and identity.

nvml_fn! {
    /// Number of GPUs in the scenario.
    fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(device_count) }?;
        *p = state::with_driver(|d, _| Ok(d.node().gpu_count() as c_uint))?;
        Ok(())
    }
}

nvml_fn! {
    /// The handle of GPU `index` (`INVALID_ARGUMENT` when out of range). Works for a lost GPU.
    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut Device) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(device) }?;
        *p = state::gpu_handle_call(|node| {
            let gpu = index as usize;
            node.gpu(gpu).ok_or(ERROR_INVALID_ARGUMENT)?;
            Ok((gpu, Handle { gpu, mig: None }.to_ptr()))
        })?;
        Ok(())
    }
}

nvml_fn! {
    /// The handle of the GPU or MIG instance with this UUID (`NOT_FOUND` when none has it).
    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut Device) {
        if uuid.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: NVML contract: `uuid` is a NUL-terminated string.
        let wanted = unsafe { CStr::from_ptr(uuid) }
            .to_str()
            .map_err(|_| ERROR_INVALID_ARGUMENT)?;
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(device) }?;
        *p = state::gpu_handle_call(|node| {
            for gpu in 0..node.gpu_count() {
                let Some(g) = node.gpu(gpu) else { continue };
                if g.uuid == wanted {
                    return Ok((gpu, Handle { gpu, mig: None }.to_ptr()));
                }
                let mig = g.mig.iter().flatten().position(|m| m.uuid == wanted);
                if let Some(m) = mig {
                    return Ok((gpu, Handle { gpu, mig: Some(m) }.to_ptr()));
                }
            }
            Err(ERROR_NOT_FOUND)
        })?;
        Ok(())
    }
}

/// Writes an identity string of the device.
///
/// # Safety
///
/// `buf` must be null or valid for writes of `len` bytes.
unsafe fn identity_str(
    device: Device,
    buf: *mut c_char,
    len: c_uint,
    f: impl FnOnce(&Dev<'_>) -> Result<String, NvmlReturn>,
) -> Result<(), NvmlReturn> {
    if buf.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    let s = device_call(device, Access::Identity, f)?;
    // SAFETY: forwarded caller contract.
    unsafe { write_str(buf, len, &s) }
}

nvml_fn! {
    /// Product name; a MIG handle answers `<parent name> MIG <profile>`.
    fn nvmlDeviceGetName(device: Device, name: *mut c_char, length: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            identity_str(device, name, length, |dev| {
                Ok(match dev.mig {
                    Some(m) => format!("{} MIG {}", dev.gpu.name, m.profile),
                    None => dev.gpu.name.clone(),
                })
            })
        }
    }
}

nvml_fn! {
    /// `GPU-...` UUID, or the `MIG-...` UUID of a MIG handle.
    fn nvmlDeviceGetUUID(device: Device, uuid: *mut c_char, length: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            identity_str(device, uuid, length, |dev| {
                Ok(dev.mig.map_or_else(|| dev.gpu.uuid.clone(), |m| m.uuid.clone()))
            })
        }
    }
}

nvml_fn! {
    /// Board serial number.
    fn nvmlDeviceGetSerial(device: Device, serial: *mut c_char, length: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { identity_str(device, serial, length, |dev| Ok(dev.gpu.serial.clone())) }
    }
}

nvml_fn! {
    /// VBIOS version.
    fn nvmlDeviceGetVbiosVersion(device: Device, version: *mut c_char, length: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { identity_str(device, version, length, |dev| Ok(dev.gpu.vbios_version.clone())) }
    }
}

nvml_fn! {
    /// Board part number: not modelled by the simulator.
    fn nvmlDeviceGetBoardPartNumber(device: Device, part_number: *mut c_char, length: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { identity_str(device, part_number, length, |_| Err(ERROR_NOT_SUPPORTED)) }
    }
}

/// Writes an identity number of the device.
///
/// # Safety
///
/// `p` must be null or valid for writes.
unsafe fn identity_uint(
    device: Device,
    p: *mut c_uint,
    f: impl FnOnce(&Dev<'_>) -> Result<c_uint, NvmlReturn>,
) -> Result<(), NvmlReturn> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { out(p) }?;
    *p = device_call(device, Access::Identity, f)?;
    Ok(())
}

nvml_fn! {
    /// NVML index (a MIG handle answers its parent's).
    fn nvmlDeviceGetIndex(device: Device, index: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { identity_uint(device, index, |dev| Ok(dev.gpu.index)) }
    }
}

nvml_fn! {
    /// Minor number of `/dev/nvidiaN`.
    fn nvmlDeviceGetMinorNumber(device: Device, minor_number: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { identity_uint(device, minor_number, |dev| Ok(dev.gpu.minor_number)) }
    }
}

/// `(domain, bus, device, function)` of an NVML bus id such as `00000000:18:00.0`.
pub fn parse_bus_id(id: &str) -> Option<(u32, u32, u32, u32)> {
    let (domain, rest) = id.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    Some((hex(domain)?, hex(bus)?, hex(device)?, hex(function)?))
}

/// PCI device id (`device << 16 | 0x10DE`) of known products; 0 for others.
fn pci_device_id(gpu: &GpuStatic) -> c_uint {
    const IDS: &[(&str, u32)] = &[
        ("H100 80GB HBM3", 0x2330),
        ("A100-SXM4-80GB", 0x20B2),
        ("A100-SXM4-40GB", 0x20B0),
    ];
    IDS.iter()
        .find(|(n, _)| gpu.name.contains(n))
        .map_or(0, |(_, id)| (id << 16) | 0x10DE)
}

nvml_fn! {
    /// Board id: derived from the PCI location, unique per GPU of a scenario.
    fn nvmlDeviceGetBoardId(device: Device, board_id: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            identity_uint(device, board_id, |dev| {
                let (domain, bus, d, _) =
                    parse_bus_id(&dev.gpu.pci_bus_id).ok_or(ERROR_UNKNOWN)?;
                Ok((domain << 16) | (bus << 8) | d)
            })
        }
    }
}

fn fill_chars(dst: &mut [c_char], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().chain(std::iter::repeat(0))) {
        *d = b as c_char;
    }
    if let Some(last) = dst.last_mut() {
        *last = 0;
    }
}

nvml_fn! {
    /// PCI location and ids.
    fn nvmlDeviceGetPciInfo_v3(device: Device, pci: *mut PciInfo) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(pci) }?;
        *p = device_call(device, Access::Identity, |dev| {
            let (domain, bus, d, function) =
                parse_bus_id(&dev.gpu.pci_bus_id).ok_or(ERROR_UNKNOWN)?;
            let id = pci_device_id(dev.gpu);
            let mut info = PciInfo {
                bus_id_legacy: [0; 16],
                domain,
                bus,
                device: d,
                pci_device_id: id,
                pci_sub_system_id: id,
                bus_id: [0; 32],
            };
            let legacy = format!("{:04X}:{bus:02X}:{d:02X}.{function:X}", domain & 0xFFFF);
            fill_chars(&mut info.bus_id_legacy, &legacy);
            fill_chars(&mut info.bus_id, &dev.gpu.pci_bus_id);
            Ok(info)
        })?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Utilization, memory, power, temperature, clocks.

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

// ---------------------------------------------------------------------------------------------
// ECC, retired pages, remapped rows.

nvml_fn! {
    /// ECC mode, current and pending (the same: a mode change is not modelled).
    fn nvmlDeviceGetEccMode(device: Device, current: *mut c_uint, pending: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let (c, p) = unsafe { (out(current)?, out(pending)?) };
        let enabled = reading(device, |_, r| supported(r.ecc_enabled))?;
        let mode = if enabled { FEATURE_ENABLED } else { FEATURE_DISABLED };
        *c = mode;
        *p = mode;
        Ok(())
    }
}

/// The ECC counter for `(error type, counter type)`.
pub fn ecc_count(
    r: &GpuReadout,
    error_type: c_uint,
    counter_type: c_uint,
) -> Result<c_ulonglong, NvmlReturn> {
    let error_type = match error_type {
        MEMORY_ERROR_CORRECTED => EccErrorType::Corrected,
        MEMORY_ERROR_UNCORRECTED => EccErrorType::Uncorrected,
        _ => return Err(ERROR_INVALID_ARGUMENT),
    };
    let counter = match counter_type {
        ECC_VOLATILE => EccCounter::Volatile,
        ECC_AGGREGATE => EccCounter::Aggregate,
        _ => return Err(ERROR_INVALID_ARGUMENT),
    };
    Ok(whole(supported(r.ecc)?.get(error_type, counter)))
}

nvml_fn! {
    /// Total ECC errors of one type and counter.
    fn nvmlDeviceGetTotalEccErrors(device: Device, error_type: c_uint, counter_type: c_uint, ecc_counts: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, ecc_counts, |_, r| ecc_count(r, error_type, counter_type))
        }
    }
}

nvml_fn! {
    /// ECC errors by memory location: all simulated errors are in device memory.
    fn nvmlDeviceGetMemoryErrorCounter(device: Device, error_type: c_uint, counter_type: c_uint, location_type: c_uint, count: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, count, |_, r| {
                let total = ecc_count(r, error_type, counter_type)?;
                match location_type {
                    MEMORY_LOCATION_DEVICE_MEMORY => Ok(total),
                    l if l < MEMORY_LOCATION_COUNT => Ok(0),
                    _ => Err(ERROR_INVALID_ARGUMENT),
                }
            })
        }
    }
}

/// Retired pages, on the parts that retire pages (before Ampere): the simulator retires none,
/// so no addresses are ever written.
///
/// # Safety
///
/// `page_count` must be null or valid for reads and writes.
unsafe fn retired_pages(
    device: Device,
    cause: c_uint,
    page_count: *mut c_uint,
) -> Result<(), NvmlReturn> {
    // SAFETY: forwarded caller contract.
    let n = unsafe { out(page_count) }?;
    if cause >= PAGE_RETIREMENT_CAUSE_COUNT {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    reading(device, |_, r| supported(r.retired_pages))?;
    *n = 0;
    Ok(())
}

nvml_fn! {
    /// Retired page addresses (`NOT_SUPPORTED` on Ampere and later, which remap rows).
    fn nvmlDeviceGetRetiredPages(device: Device, cause: c_uint, page_count: *mut c_uint, addresses: *mut c_ulonglong) {
        let _ = addresses;
        // SAFETY: forwarded caller contract.
        unsafe { retired_pages(device, cause, page_count) }
    }
}

nvml_fn! {
    /// Retired page addresses and timestamps (`NOT_SUPPORTED` on Ampere and later).
    fn nvmlDeviceGetRetiredPages_v2(device: Device, cause: c_uint, page_count: *mut c_uint, addresses: *mut c_ulonglong, timestamps: *mut c_ulonglong) {
        let _ = (addresses, timestamps);
        // SAFETY: forwarded caller contract.
        unsafe { retired_pages(device, cause, page_count) }
    }
}

nvml_fn! {
    /// Whether pages are pending retirement (`NOT_SUPPORTED` on Ampere and later).
    fn nvmlDeviceGetRetiredPagesPendingStatus(device: Device, is_pending: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, is_pending, |_, r| {
                Ok(c_uint::from(supported(r.retired_pages)?.pending))
            })
        }
    }
}

nvml_fn! {
    /// Remapped rows (Ampere and later with ECC memory).
    fn nvmlDeviceGetRemappedRows(device: Device, corr_rows: *mut c_uint, unc_rows: *mut c_uint, is_pending: *mut c_uint, failure_occurred: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let (c, u, p, f) = unsafe {
            (out(corr_rows)?, out(unc_rows)?, out(is_pending)?, out(failure_occurred)?)
        };
        let rows = reading(device, |_, r| supported(r.remapped_rows))?;
        *c = c_uint::try_from(whole(rows.correctable)).unwrap_or(c_uint::MAX);
        *u = c_uint::try_from(whole(rows.uncorrectable)).unwrap_or(c_uint::MAX);
        *p = c_uint::from(rows.pending);
        *f = c_uint::from(rows.failure);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// PCIe and NVLink.

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

nvml_fn! {
    /// Current PCIe generation (`NOT_SUPPORTED` for parts not attached by PCIe).
    fn nvmlDeviceGetCurrPcieLinkGeneration(device: Device, curr_link_gen: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, curr_link_gen, |dev, _| {
                dev.gpu.pcie_link.map(|l| l.generation).ok_or(ERROR_NOT_SUPPORTED)
            })
        }
    }
}

nvml_fn! {
    /// Current PCIe width in lanes (`NOT_SUPPORTED` for parts not attached by PCIe).
    fn nvmlDeviceGetCurrPcieLinkWidth(device: Device, curr_link_width: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, curr_link_width, |dev, _| {
                dev.gpu.pcie_link.map(|l| l.width).ok_or(ERROR_NOT_SUPPORTED)
            })
        }
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
    /// Whether NVLink `link` is active: every link the GPU has is.
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
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, counter_value, |dev, r| {
                check_link(dev.gpu, link)?;
                if counter >= NVLINK_ERROR_COUNTER_COUNT {
                    return Err(ERROR_INVALID_ARGUMENT);
                }
                let Some(kind) = NvlinkErrorType::ALL.get(counter as usize) else {
                    return Ok(0);
                };
                let errors = r.nvlinks.iter().find(|l| l.link == link).map(|l| &l.errors);
                let count = errors.into_iter().flatten().find(|(k, _)| k == kind);
                Ok(count.map_or(0, |(_, v)| whole(*v)))
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Clock event (throttle) reasons and violations.

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

    #[test]
    fn bus_ids_parse() {
        assert_eq!(parse_bus_id("00000000:18:00.0"), Some((0, 0x18, 0, 0)));
        assert_eq!(parse_bus_id("0000000F:01:00.1"), Some((0xF, 1, 0, 1)));
        assert_eq!(parse_bus_id("garbage"), None);
    }
}
