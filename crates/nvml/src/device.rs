//! Reading one GPU: identity once, fast readings every poll, slow readings on their own cadence.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::gpu::{
    cuda_version_string, ClockReadout, EccTotals, GpuIdentity, GpuReadout, MigReadout,
    NvlinkReadout, ProcessReadout, RemappedRowsReadout, RetiredPages,
};
use dgx_pixels_metrics::labels::{NvlinkErrorType, ThrottleReason, ViolationPolicy};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformancePolicy, RetirementCause,
    TemperatureSensor,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};
use tracing::debug;

use crate::{cgroup, fields};

/// Throttle reasons as NVML names them, with ours.
const THROTTLE_REASONS: &[(ThrottleReasons, ThrottleReason)] = &[
    (ThrottleReasons::GPU_IDLE, ThrottleReason::GpuIdle),
    (
        ThrottleReasons::APPLICATIONS_CLOCKS_SETTING,
        ThrottleReason::ApplicationsClocksSetting,
    ),
    (ThrottleReasons::SW_POWER_CAP, ThrottleReason::SwPowerCap),
    (ThrottleReasons::HW_SLOWDOWN, ThrottleReason::HwSlowdown),
    (ThrottleReasons::SYNC_BOOST, ThrottleReason::SyncBoost),
    (
        ThrottleReasons::SW_THERMAL_SLOWDOWN,
        ThrottleReason::SwThermalSlowdown,
    ),
    (
        ThrottleReasons::HW_THERMAL_SLOWDOWN,
        ThrottleReason::HwThermalSlowdown,
    ),
    (
        ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN,
        ThrottleReason::HwPowerBrakeSlowdown,
    ),
];

const VIOLATION_POLICIES: &[(PerformancePolicy, ViolationPolicy)] = &[
    (PerformancePolicy::Power, ViolationPolicy::Power),
    (PerformancePolicy::Thermal, ViolationPolicy::Thermal),
    (PerformancePolicy::SyncBoost, ViolationPolicy::SyncBoost),
    (PerformancePolicy::BoardLimit, ViolationPolicy::BoardLimit),
    (
        PerformancePolicy::LowUtilization,
        ViolationPolicy::LowUtilization,
    ),
    (PerformancePolicy::Reliability, ViolationPolicy::Reliability),
];

const NVLINK_ERRORS: &[(ErrorCounter, NvlinkErrorType)] = &[
    (ErrorCounter::DlReplay, NvlinkErrorType::Replay),
    (ErrorCounter::DlRecovery, NvlinkErrorType::Recovery),
    (ErrorCounter::DlCrcFlit, NvlinkErrorType::CrcFlit),
    (ErrorCounter::DlCrcData, NvlinkErrorType::CrcData),
];

/// NVML's maximum number of NVLink links per GPU (NVML_NVLINK_MAX_LINKS).
const MAX_NVLINKS: u32 = 18;

/// What a poll of one GPU came to.
#[derive(Debug)]
pub enum GpuPoll {
    /// The GPU answered; `identity` is set on the poll that discovered it.
    Read {
        identity: Option<GpuIdentity>,
        readout: Box<GpuReadout>,
    },
    /// The GPU answered GPU_IS_LOST.
    Lost { identity: Option<GpuIdentity> },
    /// The library answered UNINITIALIZED: it needs to be initialised again.
    Uninitialized,
    /// The GPU could not be opened or identified.
    Failed(String),
}

/// Settings of a GPU reader.
#[derive(Debug, Clone)]
pub struct ReaderOptions {
    /// How often slow readings (PCIe throughput, NVLink links, violation times, page
    /// retirement, ECC mode, MIG layout) are re-read.
    pub slow_interval: Duration,
    /// At most this many processes per GPU get their own series.
    pub max_processes: usize,
    /// Where procfs is mounted, to map processes to containers.
    pub procfs: PathBuf,
}

/// Readings that are re-read on the slow cadence.
#[derive(Debug, Default)]
struct Slow {
    pcie_tx: Option<f64>,
    pcie_rx: Option<f64>,
    nvlinks: Vec<NvlinkReadout>,
    violations: Vec<(ViolationPolicy, f64)>,
    ecc_enabled: Option<bool>,
    retired_pages: Option<RetiredPages>,
    /// `(gpu instance, compute instance, profile, MIG uuid, MIG index)`.
    mig: Vec<(u32, u32, String, String, u32)>,
}

/// Identity and maximum clocks: read once.
#[derive(Debug)]
struct Static {
    identity: GpuIdentity,
    max_clocks: ClockReadout,
    fans: u32,
}

/// The state a GPU's reader keeps between polls.
#[derive(Debug)]
pub struct GpuReader {
    index: u32,
    options: ReaderOptions,
    statics: Option<Static>,
    slow: Option<(Instant, Slow)>,
    /// Readings the GPU did not answer, logged once each.
    unanswered: HashSet<String>,
    containers: HashMap<u32, Option<String>>,
}

/// Collects results, noting loss and unsupported readings.
struct Check<'a> {
    index: u32,
    lost: bool,
    uninitialized: bool,
    unanswered: &'a mut HashSet<String>,
}

impl Check<'_> {
    fn get<T>(&mut self, what: &str, r: Result<T, NvmlError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(NvmlError::GpuLost) => {
                self.lost = true;
                None
            }
            Err(NvmlError::Uninitialized) => {
                self.uninitialized = true;
                None
            }
            Err(e) => {
                if !self.unanswered.contains(what) {
                    debug!(gpu = self.index, reading = what, error = %e, "reading not available; omitted");
                    self.unanswered.insert(what.to_string());
                }
                None
            }
        }
    }
}

fn mhz(v: u32) -> f64 {
    f64::from(v) * 1e6
}

impl GpuReader {
    /// A reader for GPU `index`.
    pub fn new(index: u32, options: ReaderOptions) -> GpuReader {
        GpuReader {
            index,
            options,
            statics: None,
            slow: None,
            unanswered: HashSet::new(),
            containers: HashMap::new(),
        }
    }

    /// Polls the GPU once.
    pub fn poll(&mut self, nvml: &Nvml) -> GpuPoll {
        let dev = match nvml.device_by_index(self.index) {
            Ok(d) => d,
            Err(NvmlError::GpuLost) => return GpuPoll::Lost { identity: None },
            Err(NvmlError::Uninitialized) => return GpuPoll::Uninitialized,
            Err(e) => return GpuPoll::Failed(format!("nvmlDeviceGetHandleByIndex: {e}")),
        };
        let mut discovered = None;
        if self.statics.is_none() {
            match self.read_static(nvml, &dev) {
                Ok((s, false)) => {
                    discovered = Some(s.identity.clone());
                    self.statics = Some(s);
                }
                // Lost, but its identity answered: report it down; read the rest when it returns.
                Ok((s, true)) => {
                    return GpuPoll::Lost {
                        identity: Some(s.identity),
                    }
                }
                Err(NvmlError::GpuLost) => return GpuPoll::Lost { identity: None },
                Err(NvmlError::Uninitialized) => return GpuPoll::Uninitialized,
                Err(e) => return GpuPoll::Failed(format!("identity: {e}")),
            }
        }
        let now = Instant::now();
        let due = self
            .slow
            .as_ref()
            .is_none_or(|(at, _)| now.duration_since(*at) >= self.options.slow_interval);
        let mut check = Check {
            index: self.index,
            lost: false,
            uninitialized: false,
            unanswered: &mut self.unanswered,
        };
        if due {
            let slow = read_slow(&dev, &mut check);
            self.slow = Some((now, slow));
        }
        let mut readout = match (&self.statics, &self.slow) {
            (Some(st), Some((_, slow))) => read_fast(nvml, &dev, st, slow, &mut check),
            _ => GpuReadout::default(),
        };
        let (lost, uninitialized) = (check.lost, check.uninitialized);
        if uninitialized {
            return GpuPoll::Uninitialized;
        }
        if lost {
            // Never mix readings from before the loss with a lost GPU; re-read slow ones on return.
            self.slow = None;
            return GpuPoll::Lost {
                identity: discovered,
            };
        }
        self.processes(&dev, &mut readout);
        GpuPoll::Read {
            identity: discovered,
            readout: Box::new(readout),
        }
    }

    /// Identity, maximum clocks and fan count; the flag says the GPU answered GPU_IS_LOST to
    /// some of them (its identity is still good).
    fn read_static(&mut self, nvml: &Nvml, dev: &Device<'_>) -> Result<(Static, bool), NvmlError> {
        let mut check = Check {
            index: self.index,
            lost: false,
            uninitialized: false,
            unanswered: &mut self.unanswered,
        };
        let uuid = dev.uuid()?;
        let identity = GpuIdentity {
            index: self.index,
            uuid,
            model: check.get("name", dev.name()).unwrap_or_default(),
            serial: check.get("serial", dev.serial()).unwrap_or_default(),
            pci_bus_id: check
                .get("pci_info", dev.pci_info())
                .map(|p| p.bus_id)
                .unwrap_or_default(),
            vbios_version: check
                .get("vbios_version", dev.vbios_version())
                .unwrap_or_default(),
            driver_version: check
                .get("driver_version", nvml.sys_driver_version())
                .unwrap_or_default(),
            cuda_driver_version: check
                .get("cuda_driver_version", nvml.sys_cuda_driver_version())
                .and_then(|v| u32::try_from(v).ok())
                .map(cuda_version_string)
                .unwrap_or_default(),
            minor_number: check
                .get("minor_number", dev.minor_number())
                .unwrap_or(self.index),
        };
        let mut max = |c: Clock, what: &str| check.get(what, dev.max_clock_info(c)).map(mhz);
        let max_clocks = ClockReadout {
            graphics: max(Clock::Graphics, "max_clock_graphics"),
            sm: max(Clock::SM, "max_clock_sm"),
            memory: max(Clock::Memory, "max_clock_memory"),
            video: max(Clock::Video, "max_clock_video"),
        };
        let fans = check.get("num_fans", dev.num_fans()).unwrap_or(0);
        if check.uninitialized {
            return Err(NvmlError::Uninitialized);
        }
        let lost = check.lost;
        Ok((
            Static {
                identity,
                max_clocks,
                fans,
            },
            lost,
        ))
    }

    /// Compute processes, largest memory first, bounded; container ids cached per pid.
    fn processes(&mut self, dev: &Device<'_>, readout: &mut GpuReadout) {
        let mut check = Check {
            index: self.index,
            lost: false,
            uninitialized: false,
            unanswered: &mut self.unanswered,
        };
        let Some(mut procs) = check.get("processes", dev.running_compute_processes()) else {
            return;
        };
        readout.process_count = Some(procs.len());
        let used = |p: &nvml_wrapper::struct_wrappers::device::ProcessInfo| match p.used_gpu_memory
        {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        };
        procs.sort_by_key(|p| std::cmp::Reverse(used(p).unwrap_or(0)));
        procs.truncate(self.options.max_processes);
        self.containers
            .retain(|pid, _| procs.iter().any(|p| p.pid == *pid));
        let procfs = &self.options.procfs;
        readout.processes = procs
            .iter()
            .filter_map(|p| {
                let bytes = used(p)?;
                let container = self
                    .containers
                    .entry(p.pid)
                    .or_insert_with(|| cgroup::container_id_of(procfs, p.pid))
                    .clone()
                    .unwrap_or_default();
                Some(ProcessReadout {
                    pid: p.pid,
                    container_id: container,
                    gpu_instance: p.gpu_instance_id,
                    compute_instance: p.compute_instance_id,
                    used_memory_bytes: bytes as f64,
                })
            })
            .collect();
    }
}

fn read_slow(dev: &Device<'_>, check: &mut Check<'_>) -> Slow {
    // PCIe throughput: the driver samples each direction for about 20 ms per call.
    let pcie_tx = check
        .get(
            "pcie_throughput_tx",
            dev.pcie_throughput(PcieUtilCounter::Send),
        )
        .map(|kb| f64::from(kb) * 1e3);
    let pcie_rx = check
        .get(
            "pcie_throughput_rx",
            dev.pcie_throughput(PcieUtilCounter::Receive),
        )
        .map(|kb| f64::from(kb) * 1e3);
    let mut nvlinks = Vec::new();
    for link in 0..MAX_NVLINKS {
        let l = dev.link_wrapper_for(link);
        // A link the GPU does not have answers INVALID_ARGUMENT or NOT_SUPPORTED: stop there.
        let up = match l.is_active() {
            Ok(up) => up,
            Err(NvmlError::GpuLost) => {
                check.lost = true;
                break;
            }
            Err(_) => break,
        };
        let errors = NVLINK_ERRORS
            .iter()
            .filter_map(|(counter, name)| {
                check
                    .get(&format!("nvlink_{name}_errors"), l.error_counter(*counter))
                    .map(|v| (*name, v as f64))
            })
            .collect();
        nvlinks.push(NvlinkReadout { link, up, errors });
    }
    let violations = VIOLATION_POLICIES
        .iter()
        .filter_map(|(policy, name)| {
            check
                .get(&format!("violation_{name}"), dev.violation_status(*policy))
                .map(|v| (*name, v.violation_time as f64 / 1e9))
        })
        .collect();
    let ecc_enabled = check
        .get("ecc_mode", dev.is_ecc_enabled())
        .map(|m| m.currently_enabled);
    let retired_pages = {
        let sbe = check
            .get(
                "retired_pages",
                dev.retired_pages(RetirementCause::MultipleSingleBitEccErrors),
            )
            .map(|v| v.len() as f64);
        let dbe = sbe.and_then(|_| {
            check
                .get(
                    "retired_pages",
                    dev.retired_pages(RetirementCause::DoubleBitEccError),
                )
                .map(|v| v.len() as f64)
        });
        let pending =
            dbe.and_then(|_| check.get("retired_pages_pending", dev.are_pages_pending_retired()));
        match (sbe, dbe, pending) {
            (Some(single_bit_ecc), Some(double_bit_ecc), Some(pending)) => Some(RetiredPages {
                single_bit_ecc,
                double_bit_ecc,
                pending,
            }),
            _ => None,
        }
    };
    let mig = read_mig_layout(dev, check);
    Slow {
        pcie_tx,
        pcie_rx,
        nvlinks,
        violations,
        ecc_enabled,
        retired_pages,
        mig,
    }
}

fn read_mig_layout(
    dev: &Device<'_>,
    check: &mut Check<'_>,
) -> Vec<(u32, u32, String, String, u32)> {
    let enabled = check
        .get("mig_mode", dev.mig_mode())
        .is_some_and(|m| m.current == 1);
    if !enabled {
        return Vec::new();
    }
    let max = check
        .get("mig_device_count", dev.mig_device_count())
        .unwrap_or(0);
    let mut out = Vec::new();
    for i in 0..max {
        let Ok(mig) = dev.mig_device_by_index(i) else {
            continue; // NOT_FOUND: no instance in this slot.
        };
        let (gi, ci) = mig_ids(&mig);
        let (Some(gi), Some(ci)) = (gi, ci) else {
            continue;
        };
        let name = mig.name().unwrap_or_default();
        // MIG device names end in "MIG <profile>", e.g. "NVIDIA A100-SXM4-80GB MIG 1g.10gb".
        let profile = name
            .rsplit_once("MIG ")
            .map(|(_, p)| p.trim().to_string())
            .unwrap_or_default();
        let uuid = mig.uuid().unwrap_or_default();
        out.push((gi, ci, profile, uuid, i));
    }
    out
}

/// GPU and compute instance ids of a MIG device (raw calls: nvml-wrapper does not wrap them).
fn mig_ids(mig: &Device<'_>) -> (Option<u32>, Option<u32>) {
    let nvml = mig.nvml();
    // SAFETY: plain getters writing one unsigned int, with a live MIG device handle.
    let handle = unsafe { mig.handle() };
    let read = |sym: Result<&unsafe extern "C" fn(_, *mut u32) -> u32, _>| -> Option<u32> {
        let f = sym.ok()?;
        let mut v = 0u32;
        nvml_try(unsafe { f(handle, &mut v) }).ok().map(|()| v)
    };
    (
        read(nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref()),
        read(nvml.lib().nvmlDeviceGetComputeInstanceId.as_ref()),
    )
}

fn read_fast(
    nvml: &Nvml,
    dev: &Device<'_>,
    st: &Static,
    slow: &Slow,
    check: &mut Check<'_>,
) -> GpuReadout {
    let util = check.get("utilization", dev.utilization_rates());
    let mem = check.get("memory_info", dev.memory_info());
    let bar1 = check.get("bar1_memory_info", dev.bar1_memory_info());
    let reasons = check.get("throttle_reasons", dev.current_throttle_reasons());
    // SAFETY: the handle is only passed back to NVML while `dev` is alive.
    let handle = unsafe { dev.handle() };
    let f = match fields::read(nvml, handle) {
        Ok((f, unanswered)) => {
            for id in unanswered {
                check.get::<()>(&format!("field_{id}"), Err(NvmlError::NotSupported));
            }
            f
        }
        Err(e) => {
            check.get::<()>("field_values", Err(e));
            fields::Fields::default()
        }
    };
    let mut clock = |c: Clock, what: &str| check.get(what, dev.clock_info(c)).map(mhz);
    let clocks = ClockReadout {
        graphics: clock(Clock::Graphics, "clock_graphics"),
        sm: clock(Clock::SM, "clock_sm"),
        memory: clock(Clock::Memory, "clock_memory"),
        video: clock(Clock::Video, "clock_video"),
    };
    let fan_speed_ratios = (0..st.fans)
        .filter_map(|i| check.get("fan_speed", dev.fan_speed(i)))
        .map(|p| f64::from(p) / 100.0)
        .collect();
    let ecc = if slow.ecc_enabled == Some(true) {
        match (
            f.ecc_sbe_volatile,
            f.ecc_dbe_volatile,
            f.ecc_sbe_aggregate,
            f.ecc_dbe_aggregate,
        ) {
            (Some(vc), Some(vu), Some(ac), Some(au)) => Some(EccTotals {
                volatile_corrected: vc,
                volatile_uncorrected: vu,
                aggregate_corrected: ac,
                aggregate_uncorrected: au,
            }),
            // The field API is missing on old drivers: fall back to the getter.
            _ => {
                let mut total = |e: MemoryError, c: EccCounter, what: &str| {
                    check
                        .get(what, dev.total_ecc_errors(e, c))
                        .map(|v| v as f64)
                };
                match (
                    total(MemoryError::Corrected, EccCounter::Volatile, "ecc_cv"),
                    total(MemoryError::Uncorrected, EccCounter::Volatile, "ecc_uv"),
                    total(MemoryError::Corrected, EccCounter::Aggregate, "ecc_ca"),
                    total(MemoryError::Uncorrected, EccCounter::Aggregate, "ecc_ua"),
                ) {
                    (Some(vc), Some(vu), Some(ac), Some(au)) => Some(EccTotals {
                        volatile_corrected: vc,
                        volatile_uncorrected: vu,
                        aggregate_corrected: ac,
                        aggregate_uncorrected: au,
                    }),
                    _ => None,
                }
            }
        }
    } else {
        None
    };
    let remapped_rows = match (
        f.remapped_correctable,
        f.remapped_uncorrectable,
        f.remapped_pending,
        f.remapped_failure,
    ) {
        (Some(c), Some(u), Some(p), Some(x)) => Some(RemappedRowsReadout {
            correctable: c,
            uncorrectable: u,
            pending: p > 0.0,
            failure: x > 0.0,
        }),
        _ => None,
    };
    let mig = slow
        .mig
        .iter()
        .map(|(gi, ci, profile, uuid, slot)| {
            let memory = dev
                .mig_device_by_index(*slot)
                .and_then(|m| m.memory_info())
                .ok();
            MigReadout {
                gpu_instance: *gi,
                compute_instance: *ci,
                profile: profile.clone(),
                mig_uuid: uuid.clone(),
                // Engine activity per instance needs DCGM profiling; NVML has none.
                graphics_engine_active_ratio: None,
                memory_used_bytes: memory.as_ref().map(|m| m.used as f64),
                memory_total_bytes: memory.as_ref().map(|m| m.total as f64),
            }
        })
        .collect();
    GpuReadout {
        up: true,
        utilization_ratio: util.as_ref().map(|u| f64::from(u.gpu) / 100.0),
        memory_utilization_ratio: util.as_ref().map(|u| f64::from(u.memory) / 100.0),
        encoder_utilization_ratio: check
            .get("encoder_utilization", dev.encoder_utilization())
            .map(|u| f64::from(u.utilization) / 100.0),
        decoder_utilization_ratio: check
            .get("decoder_utilization", dev.decoder_utilization())
            .map(|u| f64::from(u.utilization) / 100.0),
        memory_used_bytes: mem.as_ref().map(|m| m.used as f64),
        memory_free_bytes: mem.as_ref().map(|m| m.free as f64),
        memory_reserved_bytes: mem.as_ref().map(|m| m.reserved as f64),
        memory_total_bytes: mem.as_ref().map(|m| m.total as f64),
        bar1_used_bytes: bar1.as_ref().map(|b| b.used as f64),
        bar1_total_bytes: bar1.as_ref().map(|b| b.total as f64),
        power_watts: check
            .get("power_usage", dev.power_usage())
            .map(|mw| f64::from(mw) / 1e3),
        power_limit_watts: check
            .get("enforced_power_limit", dev.enforced_power_limit())
            .map(|mw| f64::from(mw) / 1e3),
        energy_joules: f.energy_millijoules.map(|mj| mj / 1e3),
        temperature_gpu_celsius: check
            .get("temperature", dev.temperature(TemperatureSensor::Gpu))
            .map(f64::from),
        temperature_memory_celsius: f.memory_temperature_celsius,
        clocks,
        max_clocks: st.max_clocks,
        performance_state: check
            .get("performance_state", dev.performance_state())
            .map(|p| p.as_c())
            .filter(|p| *p <= 15),
        fan_speed_ratios,
        throttle_reasons: reasons
            .map(|t| {
                THROTTLE_REASONS
                    .iter()
                    .map(|(bit, name)| (*name, t.contains(*bit)))
                    .collect()
            })
            .unwrap_or_default(),
        xid_counts: Default::default(),
        ecc,
        ecc_enabled: slow.ecc_enabled,
        retired_pages: slow.retired_pages,
        remapped_rows,
        throttle_violations: slow.violations.clone(),
        pcie_transmit_bytes_per_second: slow.pcie_tx,
        pcie_receive_bytes_per_second: slow.pcie_rx,
        pcie_replays: f.pcie_replays,
        pcie_link_generation: check
            .get("pcie_link_generation", dev.current_pcie_link_gen())
            .map(f64::from),
        pcie_link_width: check
            .get("pcie_link_width", dev.current_pcie_link_width())
            .map(f64::from),
        // NVLink fields are in KiB.
        nvlink_transmit_bytes: f.nvlink_tx_kib.map(|k| k * 1024.0),
        nvlink_receive_bytes: f.nvlink_rx_kib.map(|k| k * 1024.0),
        nvlinks: slow.nvlinks.clone(),
        process_count: None,
        processes: Vec::new(),
        mig,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_reasons_are_spelled_as_nvml_names_them() {
        // Our label value is NVML's flag name in lower case: a misspelling on either side fails.
        for (bit, reason) in THROTTLE_REASONS {
            let name = reason.as_str().to_ascii_uppercase();
            assert_eq!(ThrottleReasons::from_name(&name), Some(*bit), "{reason}");
        }
        let ours: Vec<ThrottleReason> = THROTTLE_REASONS.iter().map(|(_, r)| *r).collect();
        assert_eq!(ours, ThrottleReason::ALL, "every reason, in export order");
    }
}
