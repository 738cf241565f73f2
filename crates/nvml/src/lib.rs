//! The NVML source: reads every GPU of the node through nvml-wrapper and maps the readings to
//! catalog samples with [`dgx_pixels_metrics::gpu::push_gpu_samples`].
//!
//! `libnvidia-ml.so.1` is loaded at run time (never linked), so the exporter builds and starts
//! on machines without a driver. When the library cannot be loaded or initialised, [`NvmlSource`]
//! returns an error at once and retries with exponential backoff (1 s doubling to 5 min), so a
//! GPU-less node neither spins nor floods the log; the exporter serves
//! `dgx_pixels_source_up{source="nvml"} 0` meanwhile.
//!
//! Each GPU is read by its own worker thread, and a poll waits for the workers only until its
//! deadline ([`NvmlOptions::gpu_deadline`]): a GPU whose call hangs, or that answers
//! `GPU_IS_LOST`, is reported with `dgx_pixels_gpu_up 0` and its readings are omitted while the
//! other GPUs carry on; when it answers again, so do its series. NVML answering `UNINITIALIZED`
//! (the driver was reloaded) makes the source initialise the library again.
//!
//! Readings come in three cadences (docs/metrics.md lists them):
//! - identity and maximum clocks, once per GPU;
//! - every poll: utilization, memory, BAR1, power, temperatures, clocks, P-state, fans,
//!   throttle reasons, ECC totals, remapped rows, PCIe link, NVLink totals (one
//!   `nvmlDeviceGetFieldValues` call reads twelve fields), processes, MIG instance memory;
//! - every [`NvmlOptions::slow_interval`]: the energy and PCIe replay counters (one field-values
//!   call; the total energy alone costs 2.5 ms per read on an H200), PCIe throughput (the driver
//!   samples it for ~20 ms per direction; not read while GPM measures it), NVLink per-link state
//!   and errors (on Blackwell the NVLink 5 counters for the GPU and per link, see `nvlink5.rs`),
//!   violation times, ECC mode, retired pages and the MIG layout.
//!
//! Every NVML call is counted and timed per function (`calls.rs`; served at full detail, and
//! [`call_stats`] for the benches).
//!
//! XID errors are counted by a thread blocked on an NVML event set (see `xid.rs`). Board power
//! is sampled many times a second by a thread per GPU (see `power.rs` and docs/power.md).
//! A thread of a dropped source (reload, driver reset) that is stuck in a library call keeps
//! its slot: the next source starts no twin beside it until the call returns (`stuck.rs`).
//!
//! On Hopper and newer, the profiling families (SM activity and occupancy, pipe and DRAM
//! activity, NVLink rates) and PCIe throughput come from GPM, over the interval between two
//! polls, unless DCGM provides them ([`NvmlOptions::profiling`], `gpm.rs`); on a GPU in MIG
//! mode, the ratio families per MIG instance too (`dgx_pixels_mig_*_ratio`).
//!
//! ```
//! use dgx_pixels_metrics::Source;
//! use dgx_pixels_nvml::NvmlSource;
//!
//! let mut source = NvmlSource::new(Some("/nonexistent/libnvidia-ml.so.1".into()));
//! let err = source.poll().unwrap_err();
//! assert_eq!(err.kind, "library_unavailable");
//! ```
#![deny(missing_docs)]

mod calls;
mod cgroup;
pub mod collector;
mod device;
mod fields;
mod gpm;
mod nvlink5;
pub mod peers;
mod power;
pub mod rail;
mod settings;
mod stuck;
mod xid;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::gpu::{
    push_gpu_samples, ActivityScope, GpuIdentity, GpuReadout, XidIncidents, DEFAULT_TOP_K,
};
use dgx_pixels_metrics::{
    Backoff, DeviceKey, Metric, PollError, PollErrorKind, PollOutput, Sample, Source, XidLedger,
};
use nvml_wrapper::Nvml;
use tracing::{info, warn};

pub use calls::{call_stats, CallStat};
pub use cgroup::{container_id, pod_uid, CgroupIds};
use device::{GpuPoll, GpuReader, ReaderOptions};
pub use gpm::GPM_FAMILIES;
use power::PowerSampler;
use stuck::{Role, Thread};
use xid::XidWatcher;

/// The library NVML is loaded from unless a path is configured.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// Settings of the NVML source. The daemon's `[nvml]` config table deserializes into it
/// (unknown keys are errors, durations are humantime strings such as `"5s"`); the fields that
/// are not keys of the table come from elsewhere: `gpu_deadline` from the collector's timeout,
/// `procfs` from `[path]`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NvmlOptions {
    /// `library`: path of libnvidia-ml; unset loads [`DEFAULT_LIBRARY`] through the dynamic
    /// loader's search path.
    pub library: Option<PathBuf>,
    /// How long a poll waits for each GPU before reporting it as not answering (not a key:
    /// the daemon derives it from the collector's timeout).
    #[serde(skip)]
    pub gpu_deadline: Duration,
    /// `slow_interval`: how often slow readings (the energy and PCIe replay counters, PCIe
    /// throughput, NVLink links, violation times, ECC mode, retired pages, MIG layout) are
    /// re-read; default 5 s.
    #[serde(deserialize_with = "dgx_pixels_settings::duration")]
    pub slow_interval: Duration,
    /// `processes_per_gpu`: at most this many processes per GPU get a
    /// `process_memory_used_bytes` series (largest memory first); default 10.
    #[serde(rename = "processes_per_gpu")]
    pub max_processes_per_gpu: usize,
    /// `process_activity`: which GPUs get per-process activity series
    /// (`process_utilization_ratio`): `shared` (default: GPUs with more than one compute
    /// process), `all` or `off`.
    pub process_activity: ProcessActivity,
    /// `process_activity_top_k`: at most this many processes per GPU get activity series (the
    /// most SM-active), the rest summed under `pid="other"`; default 3.
    pub process_activity_top_k: usize,
    /// `xid_quiet_period`: XIDs of one code on one GPU less than this apart are one incident
    /// (`dgx_pixels_gpu_xid_incidents_total`); default 3 min.
    #[serde(deserialize_with = "dgx_pixels_settings::duration")]
    pub xid_quiet_period: Duration,
    /// Where procfs is mounted, to map processes to containers (not a key: the daemon's
    /// `[path] procfs`).
    #[serde(skip)]
    pub procfs: PathBuf,
    /// `sysfs`: where sysfs is mounted, read for the rail NICs (`class/infiniband`) and the
    /// PCIe topology that maps each to its nearest GPU (`bus/pci/devices`); default `/sys`.
    pub sysfs: PathBuf,
    /// `[nvml.rails]`: GPU-to-NIC pins, a GPU's PCI address (`"0000:07:00.0"`, NVML's
    /// `"00000000:07:00.0"` too) to its rail NIC's name under `class/infiniband`
    /// (`"mlx5_0"`); a pinned GPU gets that NIC whatever the PCIe topology says (docs/health.md,
    /// `rail_port_down`). Default: none, every rail by topology.
    pub rails: BTreeMap<String, String>,
    /// Read the profiling families through GPM where the GPU has it (not a key: the daemon
    /// turns it off when DCGM provides every one of [`GPM_FAMILIES`]); default true.
    #[serde(skip)]
    pub profiling: bool,
    /// `power_sample_interval`: how often each GPU's power is sampled between polls
    /// (docs/power.md); `0s` turns fast power sampling off; default 100 ms (10 Hz).
    #[serde(deserialize_with = "dgx_pixels_settings::duration")]
    pub power_sample_interval: Duration,
    /// `power_window`: the peak and minimum of the power samples cover this much recent time;
    /// default 30 s.
    #[serde(deserialize_with = "dgx_pixels_settings::duration")]
    pub power_window: Duration,
    /// Read the energy and PCIe replay counters at every poll, as before issue 36, instead of
    /// every `slow_interval` (not a key: the latency bench's "before"); default false.
    #[doc(hidden)]
    #[serde(skip)]
    pub counters_every_poll: bool,
}

/// [`NvmlOptions::process_activity`]: which GPUs get per-process activity series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessActivity {
    /// GPUs with more than one compute process.
    #[default]
    Shared,
    /// Every GPU with a compute process.
    All,
    /// None: NVML's process-utilization samples are not read.
    Off,
}

impl ProcessActivity {
    fn scope(self) -> ActivityScope {
        match self {
            ProcessActivity::Shared => ActivityScope::Shared,
            ProcessActivity::All => ActivityScope::All,
            ProcessActivity::Off => ActivityScope::Off,
        }
    }
}

/// Default [`NvmlOptions::power_sample_interval`]: 10 Hz.
pub const DEFAULT_POWER_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// Default [`NvmlOptions::power_window`].
pub const DEFAULT_POWER_WINDOW: Duration = Duration::from_secs(30);

impl Default for NvmlOptions {
    fn default() -> NvmlOptions {
        NvmlOptions {
            library: None,
            gpu_deadline: Duration::from_secs(1),
            slow_interval: Duration::from_secs(5),
            max_processes_per_gpu: 10,
            process_activity: ProcessActivity::Shared,
            process_activity_top_k: DEFAULT_TOP_K,
            xid_quiet_period: XidIncidents::DEFAULT_QUIET,
            procfs: PathBuf::from("/proc"),
            sysfs: PathBuf::from("/sys"),
            rails: BTreeMap::new(),
            profiling: true,
            power_sample_interval: DEFAULT_POWER_SAMPLE_INTERVAL,
            power_window: DEFAULT_POWER_WINDOW,
            counters_every_poll: false,
        }
    }
}

/// What a worker thread sends back: a GPU's basic reading, or its GPM reading, for a poll.
enum Reply {
    Basic(u32, u64, GpuPoll),
    Gpm(u32, u64, Option<gpm::GpmReading>),
}

/// A GPU's basic reading thread: its requests (the poll number) and whether it is in a call.
type ReaderWorker = (mpsc::Sender<u64>, Arc<AtomicBool>);

/// A GPU's GPM thread: its requests (the poll number, whether the GPU answered its last basic
/// reading, and its MIG layout as last read) and whether it is in a call.
type GpmWorker = (
    mpsc::Sender<(u64, bool, Vec<gpm::MigSlot>)>,
    Arc<AtomicBool>,
);

/// One GPU's worker threads: the basic reading, and GPM on a thread of its own, so a GPU whose
/// GPM calls hang loses its profiling families only, never its other readings.
struct Worker {
    /// The GPU's NVML index.
    index: u32,
    reader: Thread<ReaderWorker>,
    /// GPM, when it is read.
    gpm: Thread<GpmWorker>,
    /// Set by the GPM thread while GPM measures PCIe throughput: the reader then skips the
    /// driver's PCIe throughput calls, which sample for 20 ms each and whose values GPM's
    /// replace anyway.
    pcie_from_gpm: Arc<AtomicBool>,
}

struct Loaded {
    nvml: Arc<Nvml>,
    workers: Vec<Worker>,
    replies: mpsc::Receiver<Reply>,
    /// For workers started later (their old thread was stuck in a call).
    reply_tx: mpsc::Sender<Reply>,
    reader_options: ReaderOptions,
    /// Stops the XID thread when dropped.
    xid: Thread<XidWatcher>,
    /// Fast power sampling, when on; stops its threads when dropped.
    power: Option<PowerSampler>,
}

impl Loaded {
    /// Starts the threads that waited for a stuck call of a dropped source to return.
    fn start_waiting(&mut self, ledger: &Arc<XidLedger>) {
        for w in &mut self.workers {
            let (index, pcie) = (w.index, &w.pcie_from_gpm);
            w.reader.retry((Role::Reader, index), || {
                spawn_reader(
                    index,
                    &self.nvml,
                    &self.reply_tx,
                    &self.reader_options,
                    pcie,
                )
            });
            w.gpm.retry((Role::Gpm, index), || {
                spawn_gpm_worker(index, &self.nvml, &self.reply_tx, pcie)
            });
        }
        let gpus = self.workers.len() as u32;
        self.xid.retry((Role::Xid, 0), || {
            Some(XidWatcher::spawn(
                self.nvml.clone(),
                (0..gpus).collect(),
                ledger.clone(),
            ))
        });
        if let Some(p) = self.power.as_mut() {
            p.start_waiting();
        }
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // Threads in a call stay there: the next source must not start their like beside them.
        for w in &self.workers {
            if let Some((_, busy)) = w.reader.up() {
                stuck::leave((Role::Reader, w.index), busy);
            }
            if let Some((_, busy)) = w.gpm.up() {
                stuck::leave((Role::Gpm, w.index), busy);
            }
        }
    }
}

/// The NVML source. See the crate docs.
pub struct NvmlSource {
    options: NvmlOptions,
    loaded: Option<Loaded>,
    backoff: Backoff,
    last_error: String,
    poll_number: u64,
    identities: BTreeMap<u32, GpuIdentity>,
    /// GPUs currently reported as not answering (to log transitions once).
    stalled: HashSet<u32>,
    /// GPUs whose GPM reading is missing (hung or late), to log transitions once.
    gpm_stalled: HashSet<u32>,
    /// Whether each GPU answered its last basic reading (GPM starts afresh after one it did not).
    answered: HashMap<u32, bool>,
    /// Each GPU's MIG layout as last read (empty when not in MIG mode), for GPM per instance.
    mig_layouts: HashMap<u32, Vec<gpm::MigSlot>>,
    /// XID counts over time, turned into incidents.
    incidents: XidIncidents,
    /// Where XID events are recorded and counted (shared with the kernel log reader).
    ledger: Arc<XidLedger>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource")
            .field("options", &self.options)
            .field("loaded", &self.loaded.is_some())
            .finish()
    }
}

impl NvmlSource {
    /// A source loading NVML from `library`, or from [`DEFAULT_LIBRARY`] through the dynamic
    /// loader's search path, with default options.
    pub fn new(library: Option<PathBuf>) -> NvmlSource {
        NvmlSource::with_options(NvmlOptions {
            library,
            ..NvmlOptions::default()
        })
    }

    /// A source with the given options.
    pub fn with_options(options: NvmlOptions) -> NvmlSource {
        NvmlSource {
            incidents: XidIncidents::new(options.xid_quiet_period),
            options,
            loaded: None,
            backoff: Backoff::new(),
            last_error: String::new(),
            poll_number: 0,
            identities: BTreeMap::new(),
            stalled: HashSet::new(),
            gpm_stalled: HashSet::new(),
            answered: HashMap::new(),
            mig_layouts: HashMap::new(),
            ledger: Arc::default(),
        }
    }

    /// Records and counts XIDs in `ledger` (the exporter's one ledger, which the kernel-log
    /// reader also feeds) instead of a ledger of its own.
    pub fn with_xid_ledger(mut self, ledger: Arc<XidLedger>) -> NvmlSource {
        self.ledger = ledger;
        self
    }

    fn library_name(&self) -> String {
        self.options
            .library
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| DEFAULT_LIBRARY.to_string())
    }

    fn load(&mut self) -> Result<(), PollError> {
        let now = Instant::now();
        if !self.backoff.ready(now) {
            return Err(PollError::new(
                PollErrorKind::LibraryUnavailable,
                format!(
                    "{}; next attempt in {:.0}s",
                    self.last_error,
                    self.backoff.remaining(now).as_secs_f64().ceil()
                ),
            ));
        }
        let mut builder = Nvml::builder();
        match &self.options.library {
            Some(path) => builder.lib_path(path.as_os_str()),
            None => builder.lib_path(OsStr::new(DEFAULT_LIBRARY)),
        };
        let loaded = builder
            .init()
            .and_then(|nvml| nvml.device_count().map(|n| (nvml, n)));
        match loaded {
            Ok((nvml, count)) => {
                info!(library = %self.library_name(), gpus = count, "NVML loaded");
                self.loaded = Some(self.start(Arc::new(nvml), count));
                self.backoff = Backoff::new();
                Ok(())
            }
            Err(e) => {
                let wait = self.backoff.failed(now);
                self.last_error = format!(
                    "NVML unavailable: cannot load or initialise {} ({e}); is the NVIDIA driver installed and the device visible?",
                    self.library_name()
                );
                Err(PollError::new(
                    PollErrorKind::LibraryUnavailable,
                    format!(
                        "{}; next attempt in {:.0}s",
                        self.last_error,
                        wait.as_secs_f64()
                    ),
                ))
            }
        }
    }

    /// Starts one worker per GPU and the XID thread (each unless the same thread of a dropped
    /// source is still stuck in a call, see `stuck.rs`).
    fn start(&self, nvml: Arc<Nvml>, count: u32) -> Loaded {
        let (reply_tx, replies) = mpsc::channel::<Reply>();
        let reader_options = ReaderOptions {
            slow_interval: self.options.slow_interval,
            max_processes: self.options.max_processes_per_gpu,
            activity_scope: self.options.process_activity.scope(),
            activity_top_k: self.options.process_activity_top_k,
            procfs: self.options.procfs.clone(),
            // A scan serves every GPU's slow reading of one interval.
            rails: Arc::new(
                rail::Rails::new(self.options.sysfs.clone(), self.options.slow_interval / 2)
                    .with_pins(&self.options.rails),
            ),
            counters_every_poll: self.options.counters_every_poll,
        };
        let workers: Vec<Worker> = (0..count)
            .map(|index| {
                let pcie = Arc::new(AtomicBool::new(false));
                Worker {
                    index,
                    reader: Thread::start((Role::Reader, index), || {
                        spawn_reader(index, &nvml, &reply_tx, &reader_options, &pcie)
                    }),
                    gpm: if self.options.profiling {
                        Thread::start((Role::Gpm, index), || {
                            spawn_gpm_worker(index, &nvml, &reply_tx, &pcie)
                        })
                    } else {
                        Thread::Off
                    },
                    pcie_from_gpm: pcie,
                }
            })
            .collect();
        let xid = Thread::start((Role::Xid, 0), || {
            Some(XidWatcher::spawn(
                nvml.clone(),
                (0..count).collect(),
                self.ledger.clone(),
            ))
        });
        let o = &self.options;
        let power = (!o.power_sample_interval.is_zero())
            .then(|| PowerSampler::spawn(&nvml, count, o.power_sample_interval, o.power_window));
        Loaded {
            nvml,
            workers,
            replies,
            reply_tx,
            reader_options,
            xid,
            power,
        }
    }
}

impl Source for NvmlSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        if self.loaded.is_none() {
            self.load()?;
        }
        let Some(loaded) = self.loaded.as_mut() else {
            return Err(PollError::new(
                PollErrorKind::LibraryUnavailable,
                "NVML not loaded",
            ));
        };
        loaded.start_waiting(&self.ledger);
        let loaded = &*loaded;
        self.poll_number += 1;
        let number = self.poll_number;
        let mut asked = 0usize;
        for (requests, busy) in loaded.workers.iter().filter_map(|w| w.reader.up()) {
            // A worker still busy with an earlier poll is stuck in the library: do not queue.
            if !busy.swap(true, Ordering::AcqRel) {
                if requests.send(number).is_ok() {
                    asked += 1;
                } else {
                    busy.store(false, Ordering::Release);
                }
            }
        }
        let mut gpm_asked = 0usize;
        let mut gpm_missing: HashSet<u32> = HashSet::new();
        for w in &loaded.workers {
            let Some((requests, busy)) = w.gpm.up() else {
                continue;
            };
            // A GPM thread still busy with an earlier poll is stuck in the library: its
            // families are missing, the GPU's other readings are not.
            gpm_missing.insert(w.index);
            if !busy.swap(true, Ordering::AcqRel) {
                let answered = self.answered.get(&w.index).copied().unwrap_or(true);
                let layout = self.mig_layouts.get(&w.index).cloned().unwrap_or_default();
                if requests.send((number, answered, layout)).is_ok() {
                    gpm_asked += 1;
                } else {
                    busy.store(false, Ordering::Release);
                }
            }
        }
        let deadline = Instant::now() + self.options.gpu_deadline;
        let mut results: BTreeMap<u32, GpuPoll> = BTreeMap::new();
        let mut profiles: BTreeMap<u32, gpm::GpmReading> = BTreeMap::new();
        let mut gpm_answers = 0usize;
        while results.len() < asked || gpm_answers < gpm_asked {
            let left = deadline.saturating_duration_since(Instant::now());
            match loaded.replies.recv_timeout(left) {
                Ok(Reply::Basic(index, n, result)) if n == number => {
                    results.insert(index, result);
                }
                Ok(Reply::Gpm(index, n, profile)) if n == number => {
                    gpm_answers += 1;
                    gpm_missing.remove(&index);
                    if let Some(p) = profile {
                        profiles.insert(index, p);
                    }
                }
                Ok(_) => {} // a late answer to an earlier poll: already reported as stalled
                Err(_) => break,
            }
        }
        if !results.is_empty()
            && results
                .values()
                .all(|r| matches!(r, GpuPoll::Uninitialized))
        {
            // The driver was reloaded under us: initialise again on the next poll.
            warn!("NVML answered UNINITIALIZED; initialising the library again");
            self.loaded = None;
            return Err(PollError::new(
                PollErrorKind::Uninitialized,
                "NVML answered UNINITIALIZED (driver reloaded?); initialising again",
            ));
        }
        let mut out = Vec::with_capacity(loaded.workers.len() * 64);
        let now = Instant::now();
        for index in loaded.workers.iter().map(|w| w.index) {
            let mut readout = match results.remove(&index) {
                Some(GpuPoll::Read { identity, readout }) => {
                    if let Some(id) = identity {
                        self.identities.insert(index, id);
                    }
                    if self.stalled.remove(&index) {
                        info!(gpu = index, "GPU answers again");
                    }
                    *readout
                }
                Some(GpuPoll::Lost { identity }) => {
                    if let Some(id) = identity {
                        self.identities.insert(index, id);
                    }
                    if self.stalled.insert(index) {
                        warn!(gpu = index, "GPU is lost (GPU_IS_LOST); reporting gpu_up 0");
                    }
                    GpuReadout::default()
                }
                Some(GpuPoll::Failed(why)) => {
                    if self.stalled.insert(index) {
                        warn!(gpu = index, error = %why, "GPU cannot be read");
                    }
                    GpuReadout::default()
                }
                Some(GpuPoll::Uninitialized) | None => {
                    if self.stalled.insert(index) {
                        warn!(
                            gpu = index,
                            deadline = ?self.options.gpu_deadline,
                            "GPU did not answer within the deadline; reporting gpu_up 0"
                        );
                    }
                    GpuReadout::default()
                }
            };
            if let Some(id) = self.identities.get(&index) {
                readout.xid_counts = self.ledger.counts(&id.uuid);
            }
            readout.xid_incidents = self.incidents.observe(index, &readout.xid_counts, now);
            if readout.up {
                readout.power_samples = loaded.power.as_ref().and_then(|p| p.samples(index));
            }
            self.answered.insert(index, readout.up);
            if readout.up {
                let layout = readout.mig.iter();
                let layout =
                    layout.map(|m| (m.gpu_instance, m.compute_instance, m.profile.clone()));
                self.mig_layouts.insert(index, layout.collect());
            }
            let profile = profiles.remove(&index);
            let gpm_late = gpm_missing.contains(&index);
            if gpm_late && self.gpm_stalled.insert(index) {
                warn!(
                    gpu = index,
                    deadline = ?self.options.gpu_deadline,
                    "GPM did not answer within the deadline; its profiling families are left out"
                );
            } else if !gpm_late && self.gpm_stalled.remove(&index) {
                info!(gpu = index, "GPM answers again");
            }
            if let Some(p) = &profile {
                p.apply(&mut readout);
            }
            match self.identities.get(&index) {
                Some(id) => {
                    push_gpu_samples(id, &readout, &mut out);
                    if let Some(observed) = self.ledger.observed(&id.uuid) {
                        out.push(Sample::of(
                            &Arc::new(DeviceKey::gpu(id.index, id.uuid.as_str())),
                            Metric::GpuXidObserved,
                            [] as [&str; 0],
                            if observed { 1.0 } else { 0.0 },
                        ));
                    }
                    if let Some(p) = &profile {
                        p.push(id, &mut out);
                    }
                    if gpm_late {
                        // Visible per GPU: the profiling families are missing, not zero.
                        out.push(Sample::of(
                            &Arc::new(DeviceKey::gpu(id.index, id.uuid.as_str())),
                            Metric::GpuStaleReadings,
                            ["nvml"],
                            GPM_FAMILIES.len() as f64,
                        ));
                    }
                }
                // Never answered (hung or failing since the library was loaded): its uuid is
                // unknown, but the GPU exists and is down, so say that much.
                None => out.push(Sample::of(
                    &Arc::new(DeviceKey::gpu(index, "")),
                    Metric::GpuUp,
                    [] as [&str; 0],
                    0.0,
                )),
            }
        }
        calls::push_samples(&mut out);
        Ok(PollOutput::samples(out))
    }
}

/// Starts GPU `index`'s basic reading thread; `None` (logged) when it cannot start.
fn spawn_reader(
    index: u32,
    nvml: &Arc<Nvml>,
    reply_tx: &mpsc::Sender<Reply>,
    options: &ReaderOptions,
    pcie_from_gpm: &Arc<AtomicBool>,
) -> Option<ReaderWorker> {
    let (requests, rx) = mpsc::channel::<u64>();
    let busy = Arc::new(AtomicBool::new(false));
    let (nvml, reply_tx, busy2) = (nvml.clone(), reply_tx.clone(), busy.clone());
    let mut reader = GpuReader::new(index, options.clone(), Arc::clone(pcie_from_gpm));
    let spawned = thread::Builder::new()
        .name(format!("nvml-gpu{index}"))
        .spawn(move || {
            // Ends when the source drops its sender (library reloaded or source gone).
            while let Ok(poll) = rx.recv() {
                let result = reader.poll(&nvml);
                busy2.store(false, Ordering::Release);
                if reply_tx.send(Reply::Basic(index, poll, result)).is_err() {
                    return;
                }
            }
        });
    match spawned {
        Ok(_) => Some((requests, busy)),
        Err(e) => {
            warn!(gpu = index, error = %e, "cannot start a worker thread; GPU not read");
            None
        }
    }
}

/// Starts GPU `index`'s GPM thread; `None` (logged) when it cannot start.
fn spawn_gpm_worker(
    index: u32,
    nvml: &Arc<Nvml>,
    reply_tx: &mpsc::Sender<Reply>,
    pcie_from_gpm: &Arc<AtomicBool>,
) -> Option<GpmWorker> {
    let (requests, rx) = mpsc::channel::<(u64, bool, Vec<gpm::MigSlot>)>();
    let busy = Arc::new(AtomicBool::new(false));
    let (nvml, reply_tx, busy2) = (nvml.clone(), reply_tx.clone(), busy.clone());
    let pcie = Arc::clone(pcie_from_gpm);
    let mut gpm = gpm::GpmReader::new(index, true);
    let spawned = thread::Builder::new()
        .name(format!("nvml-gpm{index}"))
        .spawn(move || {
            while let Ok((poll, answered, layout)) = rx.recv() {
                let profile = gpm.poll(&nvml, answered, &layout);
                busy2.store(false, Ordering::Release);
                let measured = profile
                    .as_ref()
                    .is_some_and(|p| p.pcie_tx.is_some() && p.pcie_rx.is_some());
                pcie.store(measured, Ordering::Release);
                if reply_tx.send(Reply::Gpm(index, poll, profile)).is_err() {
                    return;
                }
            }
        });
    match spawned {
        Ok(_) => Some((requests, busy)),
        Err(e) => {
            warn!(gpu = index, error = %e, "cannot start a GPM thread; no GPM readings");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_fails_fast_names_the_library_and_backs_off() {
        let mut s = NvmlSource::new(Some("/nonexistent/libnvidia-ml.so.1".into()));
        let first = s.poll().unwrap_err();
        assert_eq!(first.kind, "library_unavailable");
        assert!(
            first.message.contains("/nonexistent/libnvidia-ml.so.1"),
            "{first}"
        );
        assert!(first.message.contains("next attempt in 1s"), "{first}");
        // Within the backoff window no new attempt is made: same cause, remaining wait.
        let second = s.poll().unwrap_err();
        assert!(second.message.starts_with(&s.last_error), "{second}");
        assert_eq!(
            s.backoff.next_delay(),
            Duration::from_secs(2),
            "no second attempt yet"
        );
    }
}
