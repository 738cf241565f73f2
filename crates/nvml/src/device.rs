//! Reading one GPU: identity once, fast readings every poll, slow readings on their own cadence.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::gpu::{
    cap_activity, cuda_version_string, ActivityScope, ClockReadout, EccTotals, FabricReadout,
    GpuIdentity, GpuReadout, MigReadout, NvlinkErrors, NvlinkReadout, PlatformReadout,
    ProcessActivity, ProcessReadout, ProcessUtilization, RailPortReadout, RemappedRowsReadout,
    RetiredPages,
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

use crate::calls::{timed, Function as F};
use crate::{cgroup, fields};

mod readings;

use readings::{read_fast, read_slow};

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
    /// How often slow readings (energy and PCIe replay counters, PCIe throughput, NVLink
    /// links, violation times, page retirement, ECC mode, MIG layout) are re-read.
    pub slow_interval: Duration,
    /// At most this many processes per GPU get their own series.
    pub max_processes: usize,
    /// Which GPUs get per-process activity series.
    pub activity_scope: ActivityScope,
    /// At most this many processes per GPU get their own activity series.
    pub activity_top_k: usize,
    /// Where procfs is mounted, to map processes to containers.
    pub procfs: PathBuf,
    /// The node's rail NICs, scanned once for all GPUs (sysfs).
    pub rails: Arc<crate::rail::Rails>,
    /// Read the energy and PCIe replay counters every poll, as before issue 36 (the latency
    /// bench's "before"); otherwise they are slow readings.
    pub counters_every_poll: bool,
}

/// Readings that are re-read on the slow cadence.
#[derive(Debug, Default)]
struct Slow {
    /// The counters of [`fields::Batch::Slow`] (energy, PCIe replays).
    counters: fields::Fields,
    pcie_tx: Option<f64>,
    pcie_rx: Option<f64>,
    nvlinks: Vec<NvlinkReadout>,
    /// The GPU's NVLink 5 totals (aggregate scope), where answered.
    nvlink_errors: NvlinkErrors,
    violations: Vec<(ViolationPolicy, f64)>,
    ecc_enabled: Option<bool>,
    retired_pages: Option<RetiredPages>,
    /// `(gpu instance, compute instance, profile, MIG uuid, MIG index)`.
    mig: Vec<(u32, u32, String, String, u32)>,
    fabric: Option<FabricReadout>,
    platform: Option<PlatformReadout>,
    /// The ports of the GPU's rail NIC (sysfs, not NVML).
    rail: Vec<RailPortReadout>,
}

/// Identity, maximum clocks and the maximum PCIe link: read once.
#[derive(Debug)]
struct Static {
    identity: GpuIdentity,
    max_clocks: ClockReadout,
    fans: u32,
    /// Highest PCIe generation and width the GPU and its slot support (not the current link,
    /// which trains down and is read every poll).
    pcie_max_generation: Option<f64>,
    pcie_max_width: Option<f64>,
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
    /// Container id and pod UID per pid, read once per process.
    containers: HashMap<u32, cgroup::CgroupIds>,
    /// NVML's timestamp (µs) of the newest process-utilization sample read (the next call asks
    /// only for samples after it), and whether the GPU said it never answers them.
    activity: (u64, bool),
    /// Whether the GPU or driver said it never lists MPS clients (not asked again).
    no_mps: bool,
    /// Whether GPM measures PCIe throughput now (its values replace the driver's).
    pcie_from_gpm: Arc<AtomicBool>,
    /// Which NVLink error counters the GPU answers (legacy call, NVLink 5 fields).
    nvlink_support: NvlinkSupport,
}

/// What a GPU said of its NVLink error counters: the legacy call's "not supported" is not
/// asked again (a Blackwell GPU would otherwise answer 72 legacy calls "not supported" every
/// slow reading), nor is the legacy call on a GPU that answered the NVLink 5 counters.
#[derive(Debug, Default, Clone, Copy)]
struct NvlinkSupport {
    /// The per-link error counter call answered link 0 "not supported" for every type.
    legacy_unsupported: bool,
    /// The NVLink 5 counters' scopes, asked again after a refusal (see `nvlink5.rs`).
    nvlink5: crate::nvlink5::Support,
}

/// Collects results, noting loss and unsupported readings.
struct Check<'a> {
    index: u32,
    lost: bool,
    uninitialized: bool,
    unanswered: &'a mut HashSet<String>,
}

impl Check<'_> {
    /// Calls NVML function `f` (timed, see `calls.rs`) and collects its result as [`Check::get`].
    fn call<T>(
        &mut self,
        f: F,
        what: &str,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        self.get(what, timed(f, call))
    }

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
    pub fn new(index: u32, options: ReaderOptions, pcie_from_gpm: Arc<AtomicBool>) -> GpuReader {
        GpuReader {
            index,
            options,
            statics: None,
            slow: None,
            unanswered: HashSet::new(),
            containers: HashMap::new(),
            activity: (0, false),
            no_mps: false,
            nvlink_support: NvlinkSupport::default(),
            pcie_from_gpm,
        }
    }

    /// Polls the GPU once.
    pub fn poll(&mut self, nvml: &Nvml) -> GpuPoll {
        let dev = match timed(F::HandleByIndex, || nvml.device_by_index(self.index)) {
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
            let pcie = !self.pcie_from_gpm.load(Ordering::Acquire);
            let counters = !self.options.counters_every_poll;
            let mut slow = read_slow(
                nvml,
                &dev,
                &mut check,
                pcie,
                counters,
                &mut self.nvlink_support,
            );
            if let Some(st) = &self.statics {
                slow.rail = self.options.rails.ports_for(&st.identity.pci_bus_id);
            }
            self.slow = Some((now, slow));
        }
        let mut readout = match (&self.statics, &self.slow) {
            (Some(st), Some((_, slow))) => {
                let batch = if self.options.counters_every_poll {
                    fields::Batch::All
                } else {
                    fields::Batch::Poll
                };
                read_fast(nvml, &dev, st, slow, batch, &mut check)
            }
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

    /// Identity, maximum clocks, fan count and maximum PCIe link; the flag says the GPU answered GPU_IS_LOST to
    /// some of them (its identity is still good).
    fn read_static(&mut self, nvml: &Nvml, dev: &Device<'_>) -> Result<(Static, bool), NvmlError> {
        let mut check = Check {
            index: self.index,
            lost: false,
            uninitialized: false,
            unanswered: &mut self.unanswered,
        };
        let uuid = timed(F::Uuid, || dev.uuid())?;
        let identity = GpuIdentity {
            index: self.index,
            uuid,
            model: check
                .call(F::Name, "name", || dev.name())
                .unwrap_or_default(),
            serial: check
                .call(F::Serial, "serial", || dev.serial())
                .unwrap_or_default(),
            pci_bus_id: check
                .call(F::PciInfo, "pci_info", || dev.pci_info())
                .map(|p| p.bus_id)
                .unwrap_or_default(),
            vbios_version: check
                .call(F::VbiosVersion, "vbios_version", || dev.vbios_version())
                .unwrap_or_default(),
            driver_version: check
                .call(F::DriverVersion, "driver_version", || {
                    nvml.sys_driver_version()
                })
                .unwrap_or_default(),
            cuda_driver_version: check
                .call(F::CudaDriverVersion, "cuda_driver_version", || {
                    nvml.sys_cuda_driver_version()
                })
                .and_then(|v| u32::try_from(v).ok())
                .map(cuda_version_string)
                .unwrap_or_default(),
            minor_number: check
                .call(F::MinorNumber, "minor_number", || dev.minor_number())
                .unwrap_or(self.index),
        };
        let mut max = |c: Clock, what: &str| {
            check
                .call(F::MaxClockInfo, what, || dev.max_clock_info(c))
                .map(mhz)
        };
        let max_clocks = ClockReadout {
            graphics: max(Clock::Graphics, "max_clock_graphics"),
            sm: max(Clock::SM, "max_clock_sm"),
            memory: max(Clock::Memory, "max_clock_memory"),
            video: max(Clock::Video, "max_clock_video"),
        };
        let fans = check
            .call(F::NumFans, "num_fans", || dev.num_fans())
            .unwrap_or(0);
        let pcie_max_generation = check
            .call(F::MaxPcieLinkGeneration, "pcie_link_max_generation", || {
                dev.max_pcie_link_gen()
            })
            .map(f64::from);
        let pcie_max_width = check
            .call(F::MaxPcieLinkWidth, "pcie_link_max_width", || {
                dev.max_pcie_link_width()
            })
            .map(f64::from);
        if check.uninitialized {
            return Err(NvmlError::Uninitialized);
        }
        let lost = check.lost;
        Ok((
            Static {
                identity,
                max_clocks,
                fans,
                pcie_max_generation,
                pcie_max_width,
            },
            lost,
        ))
    }

    /// Compute processes and MPS clients, largest memory first, bounded; container ids cached
    /// per pid.
    fn processes(&mut self, dev: &Device<'_>, readout: &mut GpuReadout) {
        let mut check = Check {
            index: self.index,
            lost: false,
            uninitialized: false,
            unanswered: &mut self.unanswered,
        };
        let Some(mut procs) = check.call(F::ComputeRunningProcesses, "processes", || {
            dev.running_compute_processes()
        }) else {
            return;
        };
        // Under MPS the clients are listed apart (the compute list has the MPS server, if
        // anything): without them a GPU shared through MPS would look idle or unshared.
        let clients = mps_clients(dev, &mut self.no_mps, &mut check);
        merge_by_pid(&mut procs, clients);
        // The exporter's own probe workers are not users of the GPU (in the same PID
        // namespace; docs/probes.md says what happens across namespaces).
        procs.retain(|p| !dgx_pixels_worker::is_ours(p.pid));
        readout.process_count = Some(procs.len());
        let used = |p: &nvml_wrapper::struct_wrappers::device::ProcessInfo| match p.used_gpu_memory
        {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        };
        // Not in MIG mode: each instance's activity is its own series, and one process per
        // instance shares nothing.
        let mig_mode = !readout.mig.is_empty() || procs.iter().any(|p| p.gpu_instance_id.is_some());
        let mut activity = read_activity(
            mig_mode,
            &self.options,
            &mut self.activity,
            dev,
            &procs,
            &mut check,
        );
        procs.sort_by_key(|p| std::cmp::Reverse(used(p).unwrap_or(0)));
        procs.truncate(self.options.max_processes);
        self.containers.retain(|pid, _| {
            procs.iter().any(|p| p.pid == *pid) || activity.iter().any(|a| a.pid == Some(*pid))
        });
        let procfs = &self.options.procfs;
        for a in &mut activity {
            if let Some(pid) = a.pid {
                let ids = self
                    .containers
                    .entry(pid)
                    .or_insert_with(|| cgroup::ids_of(procfs, pid));
                a.container_id = ids.container_id.clone();
                a.pod_uid = ids.pod_uid.clone();
            }
        }
        readout.process_activity = activity;
        readout.processes = procs
            .iter()
            .filter_map(|p| {
                let bytes = used(p)?;
                let ids = self
                    .containers
                    .entry(p.pid)
                    .or_insert_with(|| cgroup::ids_of(procfs, p.pid));
                Some(ProcessReadout {
                    pid: p.pid,
                    container_id: ids.container_id.clone(),
                    pod_uid: ids.pod_uid.clone(),
                    gpu_instance: p.gpu_instance_id,
                    compute_instance: p.compute_instance_id,
                    used_memory_bytes: bytes as f64,
                    utilization: None,
                })
            })
            .collect();
    }
}

/// MPS client processes; none when the GPU or driver never lists them (`NOT_SUPPORTED`, no
/// symbol, no permission: `*never` set, not asked again).
fn mps_clients(
    dev: &Device<'_>,
    never: &mut bool,
    check: &mut Check<'_>,
) -> Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo> {
    if *never {
        return Vec::new();
    }
    match timed(F::MpsComputeRunningProcesses, || {
        dev.mps_running_compute_processes()
    }) {
        Err(
            e @ (NvmlError::NotSupported
            | NvmlError::NoPermission
            | NvmlError::FailedToLoadSymbol(_)),
        ) => {
            *never = true;
            debug!(gpu = check.index, error = %e, "no MPS client list; not asked again");
            Vec::new()
        }
        r => check.get("mps_processes", r).unwrap_or_default(),
    }
}

/// Adds `more` to `procs`, each pid once (a process NVML lists in both keeps its first entry).
fn merge_by_pid(
    procs: &mut Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>,
    more: Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>,
) {
    for p in more {
        if !procs.iter().any(|q| q.pid == p.pid) {
            procs.push(p);
        }
    }
}

/// Per-process activity from NVML's process-utilization samples newer than `state.0` (NVML's
/// timestamp, µs, of the newest sample read before; moved on), capped (container ids still
/// empty). A GPU or driver that never answers (`NOT_SUPPORTED`, no symbol, no permission;
/// `state.1` set) is not asked again. Nothing in MIG mode, when the scope leaves the GPU out,
/// on the first answer (NVML's whole buffer, from before we started) or when NVML has no new
/// sample (`NOT_FOUND`, or an empty answer): the series are omitted, never served as 0.
fn read_activity(
    mig_mode: bool,
    options: &ReaderOptions,
    state: &mut (u64, bool),
    dev: &Device<'_>,
    procs: &[nvml_wrapper::struct_wrappers::device::ProcessInfo],
    check: &mut Check<'_>,
) -> Vec<ProcessActivity> {
    let (scope, top_k) = (options.activity_scope, options.activity_top_k);
    let wanted = match scope {
        ActivityScope::Off => false,
        ActivityScope::All => !procs.is_empty(),
        ActivityScope::Shared => procs.len() > 1,
    };
    if !wanted || mig_mode || state.1 {
        return Vec::new();
    }
    let samples = match timed(F::ProcessUtilization, || {
        dev.process_utilization_stats(state.0)
    }) {
        // No sample since the last call: nothing to say, and nothing wrong.
        Err(NvmlError::NotFound) => return Vec::new(),
        Err(
            e @ (NvmlError::NotSupported
            | NvmlError::NoPermission
            | NvmlError::FailedToLoadSymbol(_)),
        ) => {
            state.1 = true;
            debug!(gpu = check.index, error = %e, "no per-process utilization; not asked again");
            return Vec::new();
        }
        r => check.get("process_utilization", r).unwrap_or_default(),
    };
    let newest = samples.iter().map(|s| s.timestamp).max().unwrap_or(0);
    let first = state.0 == 0;
    state.0 = state.0.max(newest);
    if first {
        // The first answer is NVML's whole buffer, samples from before this exporter (or this
        // GPU's reader) started: it only sets where the next interval begins.
        return Vec::new();
    }
    let activity = mean_per_process(&samples, procs);
    cap_activity(activity, Some(procs.len()), scope, top_k)
}

/// One entry per running process with samples: the mean of its samples since the last read
/// (NVML may buffer several per process), NVML's percent as ratios. Samples of processes no
/// longer running (NVML keeps them in its buffer a while) and of our own probe workers (not in
/// `procs`) are left out.
fn mean_per_process(
    samples: &[nvml_wrapper::struct_wrappers::device::ProcessUtilizationSample],
    procs: &[nvml_wrapper::struct_wrappers::device::ProcessInfo],
) -> Vec<ProcessActivity> {
    let mut sums: HashMap<u32, (ProcessUtilization, u32)> = HashMap::new();
    let ratio = |pct: u32| (f64::from(pct) / 100.0).clamp(0.0, 1.0);
    for s in samples {
        if !procs.iter().any(|p| p.pid == s.pid) {
            continue;
        }
        let (sum, n) = sums.entry(s.pid).or_default();
        sum.sm += ratio(s.sm_util);
        sum.memory += ratio(s.mem_util);
        sum.encoder += ratio(s.enc_util);
        sum.decoder += ratio(s.dec_util);
        *n += 1;
    }
    sums.into_iter()
        .map(|(pid, (sum, n))| {
            let n = f64::from(n.max(1));
            let p = procs.iter().find(|p| p.pid == pid);
            ProcessActivity {
                pid: Some(pid),
                container_id: String::new(),
                pod_uid: String::new(),
                gpu_instance: p.and_then(|p| p.gpu_instance_id),
                compute_instance: p.and_then(|p| p.compute_instance_id),
                utilization: ProcessUtilization {
                    sm: sum.sm / n,
                    memory: sum.memory / n,
                    encoder: sum.encoder / n,
                    decoder: sum.decoder / n,
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper::struct_wrappers::device::{ProcessInfo, ProcessUtilizationSample};

    #[test]
    fn mps_clients_join_the_compute_list_once_per_pid() {
        let info = |pid, bytes| ProcessInfo {
            pid,
            used_gpu_memory: UsedGpuMemory::Used(bytes),
            gpu_instance_id: None,
            compute_instance_id: None,
        };
        let mut procs = vec![info(1, 10), info(2, 20)];
        merge_by_pid(&mut procs, vec![info(2, 99), info(3, 30), info(3, 31)]);
        let got: Vec<(u32, u64)> = procs
            .iter()
            .map(|p| match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => (p.pid, b),
                UsedGpuMemory::Unavailable => (p.pid, 0),
            })
            .collect();
        assert_eq!(got, [(1, 10), (2, 20), (3, 30)]);
    }

    #[test]
    fn each_running_process_gets_the_mean_of_its_samples_as_ratios() {
        let proc_info = |pid| ProcessInfo {
            pid,
            used_gpu_memory: UsedGpuMemory::Used(1),
            gpu_instance_id: None,
            compute_instance_id: None,
        };
        let sample = |pid, timestamp, sm_util, dec_util| ProcessUtilizationSample {
            pid,
            timestamp,
            sm_util,
            mem_util: 10,
            enc_util: 0,
            dec_util,
        };
        let samples = [
            sample(7, 1, 40, 0),
            sample(7, 2, 60, 20),
            sample(8, 2, 25, 0),
            // Gone since (NVML keeps its samples a while), or one of our probe workers.
            sample(9, 2, 90, 0),
            // NVML never answers over 100 %; a ratio never exceeds 1.
            sample(8, 3, 250, 0),
        ];
        let mut got = mean_per_process(&samples, &[proc_info(7), proc_info(8)]);
        got.sort_by_key(|a| a.pid);
        let by: Vec<_> = got
            .iter()
            .map(|a| {
                (
                    a.pid,
                    a.utilization.sm,
                    a.utilization.memory,
                    a.utilization.decoder,
                )
            })
            .collect();
        assert_eq!(
            by,
            [
                (Some(7), 0.5, 0.1, 0.1),
                (Some(8), (0.25 + 1.0) / 2.0, 0.1, 0.0)
            ]
        );
    }

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
