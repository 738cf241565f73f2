//! The daemon's `probes` source: a [`Source`] that runs probes politely and exports their last
//! results. The measurements themselves are dgx-pixels-probes'; this crate schedules them,
//! runs them in worker processes ([`worker::WorkerBackend`]) and turns them into series.
//!
//! Politeness rules, checked before every run (each skip is its own `outcome`):
//! - one probe at a time on the node (probes run one after another on the source's thread);
//! - without a current utilization reading (from the NVML/DCGM snapshot) a GPU is left alone
//!   (`skipped_no_utilization`): without proof that it is idle, it is not touched;
//! - a GPU a pod or HPC job holds (`skipped_held`), one with another process on it
//!   (`skipped_in_use`), one in MIG mode (`skipped_mig`), one above the busy threshold
//!   (`skipped_busy`) and one that has not read idle for the whole settle window
//!   (`skipped_settling`) are left alone;
//! - the worker checks compute mode, MIG and other processes again itself before it creates a
//!   context (`skipped_compute_mode`, ...) and while it runs: another process seen on the GPU
//!   makes the run `contended`, and its numbers are discarded (see [`dgx_pixels_probes::worker`]);
//! - after a run of duration d, that GPU is not probed again for d / duty_cycle, so probes
//!   hold each GPU at most `duty_cycle` of the time (0.5% by default); with `nccl_allreduce`
//!   on, the GPUs of its set split that budget with it ([`NODE_SHARE`]), so neither starves
//!   the other;
//! - a first pass reaches every kind early: each GPU runs each of its probe kinds once, one
//!   after another, as soon as it passes the checks, and takes the rests of those runs
//!   together after the last one (they are owed, not forgiven); GPUs start the rotation at
//!   staggered kinds, so the node has a result of every kind after K + N - 1 runs;
//! - probes whose buffers exceed the memory cap are not scheduled at all;
//! - a pair probe (`p2p_copy`) holds two GPUs: the peer passes the same checks, and both rest
//!   after the run;
//! - `storage_read` (a node probe of `[probes] storage_paths`) runs only while every GPU
//!   passes the checks;
//! - `nccl_allreduce` (a node probe, `[probes] nccl_allreduce`) holds every GPU of its set:
//!   it runs only while each of them passes the checks; the probe rests after it, its GPUs
//!   only until it ends (its rest is on its own share of their budget, not on their probes).
//!
//! With the [`worker::WorkerBackend`] (the daemon's), each run is a worker process whose
//! CUDA context ends with it: the daemon itself never creates one.
//!
//! At most one probe runs per poll, which keeps a poll short against the runner's deadline.

#![deny(missing_docs)]

mod outcome;
pub mod settings;
mod view;
pub mod worker;

pub use outcome::{GpuState, Outcome, NCCL_OUTCOMES, OUTCOMES, STATES, STORAGE_OUTCOMES};
pub use view::ViewUtilization;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dgx_pixels_metrics::histogram::Histogram;
use dgx_pixels_metrics::{DeviceKey, Metric, PollError, PollErrorKind, PollOutput, Sample, Source};

use dgx_pixels_probes::nccl::{self, AllReduce};
use dgx_pixels_probes::probe::{ProbeKind, ProbeSizes, ProbeUnit};
use dgx_pixels_probes::stats::summarize;
use dgx_pixels_probes::storage::{self, StorageRead};
use dgx_pixels_probes::ProbeError;

/// Default maximum fraction of GPU time spent in probes.
pub const DEFAULT_DUTY_CYCLE: f64 = 0.005;
/// Default utilization above which a GPU counts as busy.
pub const DEFAULT_BUSY_THRESHOLD: f64 = 0.05;
/// Default cap on the device memory one probe may allocate.
pub const DEFAULT_MEMORY_LIMIT_BYTES: u64 = 1 << 30;
/// How long to wait before trying a skipped GPU again.
pub const SKIP_RETRY: Duration = Duration::from_secs(30);
/// How long to wait before looking again at a GPU without a utilization reading: sooner than
/// [`SKIP_RETRY`], since at the daemon's start every GPU is without one until the first NVML
/// poll, and a look costs nothing (no worker).
pub const NO_READING_RETRY: Duration = Duration::from_secs(5);
/// How long to wait before looking for CUDA again after it was unavailable.
pub const UNAVAILABLE_RETRY: Duration = Duration::from_secs(60);
/// Buckets of the probe duration histogram, seconds.
pub const DURATION_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];
/// Results older than this many (per-GPU) probe rounds are dropped rather than served as if
/// they described the GPU now.
const MAX_AGE_ROUNDS: u32 = 3;

/// With `nccl_allreduce` on, the share of the duty cycle of each GPU of its set that the
/// all-reduce gets; the GPU's own probes get the rest. The all-reduce rests d / (duty_cycle x
/// NODE_SHARE) after a run of d, and the GPU's own probes d / (duty_cycle x (1 - NODE_SHARE)):
/// together they hold a GPU at most `duty_cycle` of the time, and a rest of one never delays
/// the other (an all-reduce's rest on its GPUs starved their own probes: issue 44).
pub const NODE_SHARE: f64 = 0.5;

/// Default time a GPU must read idle before it is probed.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(10);

fn settings_storage(paths: &[PathBuf]) -> Vec<StorageState> {
    let now = Instant::now();
    paths
        .iter()
        .map(|p| StorageState {
            path: p.clone(),
            label: p.display().to_string(),
            next_due: now,
            last: None,
            runs: BTreeMap::new(),
            failures: 0,
        })
        .collect()
}

/// Why `g` must be left alone now and when to look at it again; `None` when it may be
/// probed. Read from this poll's view of it ([`ProbeSource::observe`]).
fn skip_of(settings: &ScheduleSettings, g: &Gpu, now: Instant) -> Option<(Outcome, Duration)> {
    let idle_for = g
        .idle_since
        .map(|t| now.saturating_duration_since(t))
        .unwrap_or_default();
    let occupancy = g.occupancy;
    match g.reading {
        None => Some((Outcome::SkippedNoUtilization, NO_READING_RETRY)),
        Some(_) if occupancy.held => Some((Outcome::SkippedHeld, SKIP_RETRY)),
        Some(_) if occupancy.processes > 0 => Some((Outcome::SkippedInUse, SKIP_RETRY)),
        Some(_) if occupancy.mig => Some((Outcome::SkippedMig, SKIP_RETRY)),
        Some((_, u)) if u > settings.busy_threshold => Some((Outcome::SkippedBusy, SKIP_RETRY)),
        // Not idle for long enough yet: look again when it would be.
        Some(_) if idle_for < settings.settle => Some((
            Outcome::SkippedSettling,
            (settings.settle - idle_for).max(Duration::from_millis(100)),
        )),
        Some(_) => None,
    }
}

/// Settings of the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSettings {
    /// Probes to rotate through ([`ProbeKind::DAEMON_DEFAULT`] unless configured).
    pub probes: Vec<ProbeKind>,
    /// Maximum fraction of GPU time spent in probes (0 < d ≤ 1).
    pub duty_cycle: f64,
    /// Utilization (0–1) above which a GPU is left alone.
    pub busy_threshold: f64,
    /// Device memory one probe may allocate, bytes.
    pub memory_limit_bytes: u64,
    /// Workload sizes.
    pub sizes: ProbeSizes,
    /// How long a GPU must read idle (and free) before it is probed.
    pub settle: Duration,
    /// `storage_read` paths (`[probes] storage_paths`): read only while every GPU is idle.
    pub storage_paths: Vec<PathBuf>,
    /// Bytes one `storage_read` run reads at most.
    pub storage_read_bytes: u64,
    /// Whether the `nccl_allreduce` node probe runs.
    pub nccl_allreduce: bool,
    /// The CUDA ordinals of its GPUs; `None`: every GPU of the node.
    pub nccl_gpus: Option<Vec<usize>>,
    /// Its largest message, bytes per GPU.
    pub nccl_max_bytes: u64,
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        ScheduleSettings {
            probes: ProbeKind::DAEMON_DEFAULT.to_vec(),
            duty_cycle: DEFAULT_DUTY_CYCLE,
            busy_threshold: DEFAULT_BUSY_THRESHOLD,
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
            sizes: ProbeSizes::default(),
            settle: DEFAULT_SETTLE,
            storage_paths: Vec::new(),
            storage_read_bytes: storage::DEFAULT_READ_BYTES,
            nccl_allreduce: false,
            nccl_gpus: None,
            nccl_max_bytes: nccl::DEFAULT_MAX_BYTES,
        }
    }
}

/// Smallest accepted `duty_cycle`.
pub const MIN_DUTY_CYCLE: f64 = 1e-6;

impl ScheduleSettings {
    /// Checks ranges; returns the probes that fit the memory cap (an error when none does).
    pub fn validate(&self) -> Result<Vec<ProbeKind>, ProbeError> {
        // The lower bound keeps the pause after a probe (its duration / duty cycle) a
        // representable duration: 1e-6 already means one 20 ms probe every 5.5 hours.
        if !(self.duty_cycle >= MIN_DUTY_CYCLE && self.duty_cycle <= 1.0) {
            return Err(ProbeError::Config(format!(
                "probes.duty_cycle: {} must be in [0.000001, 1]",
                self.duty_cycle
            )));
        }
        if !(0.0..=1.0).contains(&self.busy_threshold) {
            return Err(ProbeError::Config(format!(
                "probes.busy_threshold: {} must be in [0, 1]",
                self.busy_threshold
            )));
        }
        self.sizes.validate()?;
        if !(storage::MIN_READ_BYTES..=storage::MAX_READ_BYTES).contains(&self.storage_read_bytes) {
            return Err(ProbeError::Config(format!(
                "probes.storage_read_bytes: {} must be between {} and {}",
                self.storage_read_bytes,
                storage::MIN_READ_BYTES,
                storage::MAX_READ_BYTES
            )));
        }
        if self.storage_paths.len() > storage::MAX_PATHS {
            return Err(ProbeError::Config(format!(
                "probes.storage_paths: {} paths, at most {} are read",
                self.storage_paths.len(),
                storage::MAX_PATHS
            )));
        }
        if let Some(p) = self.storage_paths.iter().find(|p| !p.is_absolute()) {
            return Err(ProbeError::Config(format!(
                "probes.storage_paths: {} is not an absolute path",
                p.display()
            )));
        }
        nccl::check_max_bytes(self.nccl_max_bytes)?;
        if self.nccl_max_bytes > self.memory_limit_bytes {
            return Err(ProbeError::Config(format!(
                "probes.nccl_max_bytes: {} is over probes.memory_limit_bytes ({})",
                self.nccl_max_bytes, self.memory_limit_bytes
            )));
        }
        if let Some(list) = &self.nccl_gpus {
            if list.len() < 2 {
                return Err(ProbeError::Config(format!(
                    "probes.nccl_gpus: an all-reduce needs two GPUs or more; {} listed",
                    list.len()
                )));
            }
            let twice = list
                .iter()
                .enumerate()
                .find(|(k, g)| list[..*k].contains(g));
            if let Some((_, g)) = twice {
                return Err(ProbeError::Config(format!(
                    "probes.nccl_gpus: GPU {g} is listed twice"
                )));
            }
        }
        let fit: Vec<ProbeKind> = self
            .probes
            .iter()
            .copied()
            .filter(|k| self.sizes.device_bytes(*k) <= self.memory_limit_bytes)
            .collect();
        if fit.is_empty() {
            return Err(ProbeError::Config(format!(
                "probes.memory_limit_bytes: {} is too small for every selected probe",
                self.memory_limit_bytes
            )));
        }
        Ok(fit)
    }
}

/// A GPU as the backend sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuId {
    /// CUDA ordinal.
    pub ordinal: usize,
    /// UUID in NVML notation (joins with NVML series).
    pub uuid: String,
    /// Model name.
    pub model: String,
}

/// What actually runs probes: CUDA in the daemon, a scripted fake in tests.
pub trait Backend: Send {
    /// The GPUs to probe; an error when CUDA is unavailable.
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError>;
    /// Runs one probe on one GPU and returns its measured values.
    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError>;

    /// Runs a pair probe ([`ProbeKind::needs_peer`]) from `gpu` to `peer`. The default: the
    /// backend runs none (an error, so the scheduler serves nothing for it).
    fn run_pair(
        &mut self,
        gpu: &GpuId,
        peer: &GpuId,
        kind: ProbeKind,
    ) -> Result<Vec<f64>, ProbeError> {
        let _ = (gpu, peer);
        Err(ProbeError::Config(format!(
            "{kind}: this backend runs no pair probes"
        )))
    }

    /// Runs `storage_read` on `path`, one of `allowed`, reading at most `bytes`. The default:
    /// the backend reads no storage.
    fn read_storage(
        &mut self,
        path: &Path,
        allowed: &[PathBuf],
        bytes: u64,
    ) -> Result<StorageRead, ProbeError> {
        let _ = (allowed, bytes);
        Err(ProbeError::Config(format!(
            "storage_read of {}: this backend reads no storage",
            path.display()
        )))
    }

    /// Runs `nccl_allreduce` over `gpus` (in rank order) up to `max_bytes` per GPU. The
    /// default: the backend runs no NCCL.
    fn run_nccl(&mut self, gpus: &[GpuId], max_bytes: u64) -> Result<AllReduce, ProbeError> {
        let _ = (gpus, max_bytes);
        Err(ProbeError::Config(
            "nccl_allreduce: this backend runs no NCCL".into(),
        ))
    }

    /// How long the last [`Backend::run`] held the GPU, where the backend knows it better than
    /// the wall clock around the call: a simulated GPU answers at once but models the time a
    /// real run takes, which sets the pause before the next probe (the duty cycle) and the
    /// duration histogram. `None` (the default): the wall time of the call.
    fn held_for(&self) -> Option<Duration> {
        None
    }

    /// Peak resident memory of the process that did the last call, where it was another
    /// process (a worker); `None` (the default) for in-process backends.
    fn worker_peak_rss_bytes(&self) -> Option<u64> {
        None
    }
}

/// The CUDA backend: opens the GPU, runs 1 warm-up and 3 measured iterations, releases it.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    /// Workload sizes.
    pub sizes: ProbeSizes,
}

impl Backend for CudaBackend {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok(dgx_pixels_probes::cuda::list_devices()?
            .into_iter()
            .map(|(ordinal, uuid, model)| GpuId {
                ordinal,
                uuid,
                model,
            })
            .collect())
    }

    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        let mut g = dgx_pixels_probes::cuda::Gpu::open(gpu.ordinal)?;
        let values = g.run(kind, &self.sizes, 42, 1, 3, &mut || {});
        g.release()?;
        values
    }

    fn run_pair(
        &mut self,
        gpu: &GpuId,
        peer: &GpuId,
        _: ProbeKind,
    ) -> Result<Vec<f64>, ProbeError> {
        let mut g = dgx_pixels_probes::cuda::Gpu::open(gpu.ordinal)?;
        let p = match dgx_pixels_probes::cuda::Gpu::open(peer.ordinal) {
            Ok(p) => p,
            Err(e) => {
                let _ = g.release();
                return Err(e);
            }
        };
        let values = g.run_peer(&p, &self.sizes, 1, 3, &mut || {});
        let released = g.release().and(p.release());
        let values = values?;
        released.map(|()| values)
    }

    fn read_storage(
        &mut self,
        path: &Path,
        allowed: &[PathBuf],
        bytes: u64,
    ) -> Result<StorageRead, ProbeError> {
        storage::read_throughput(path, allowed, bytes)
    }
}

/// Utilization and exported GPU index of a GPU, by UUID, from the latest telemetry snapshot.
pub trait UtilizationView: Send {
    /// `(exported GPU index, utilization 0–1)` when a current reading exists.
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)>;

    /// Who else is on the GPU, from the same snapshot. The default (a view that knows only
    /// utilization) says nobody: the worker checks processes again itself.
    fn occupancy(&self, uuid: &str) -> Occupancy {
        let _ = uuid;
        Occupancy::default()
    }
}

/// Who else is on a GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// A pod or HPC job holds it (attribution).
    pub held: bool,
    /// Processes other than the exporter's own workers with a context on it.
    pub processes: usize,
    /// It is in MIG mode.
    pub mig: bool,
}

#[derive(Debug)]
struct LastResult {
    value: f64,
    at: SystemTime,
    measured: Instant,
}

#[derive(Debug)]
struct Gpu {
    id: GpuId,
    /// The key of the GPU's series: the index the telemetry exports (the CUDA ordinal until a
    /// reading says otherwise) and the uuid.
    key: Arc<DeviceKey>,
    next_due: Instant,
    /// Its rotation: every enabled kind once, in the order it runs them (the first pass
    /// reorders what is left of it, [`first_pass_pick`]).
    order: Vec<ProbeKind>,
    next_probe: usize,
    results: BTreeMap<ProbeKind, LastResult>,
    /// The pair probe's last result from this GPU to each peer, by the peer's position.
    pairs: BTreeMap<usize, LastResult>,
    /// Which peer the next pair probe starts looking at (an offset among the others).
    next_peer: usize,
    runs: BTreeMap<(ProbeKind, Outcome), u64>,
    durations: BTreeMap<ProbeKind, Histogram>,
    busy: Duration,
    /// Own runs left in its first pass (each probe kind once, without rests between).
    first_pass: usize,
    /// Runs it may still be held without a rest while its first pass lasts (its own and
    /// those it joins as a pair probe's peer): at most 2 K, whatever its peers do.
    free_holds: usize,
    /// The rests of its first pass, taken together when the pass ends.
    owed: Duration,
    /// Its own probes' share of the duty cycle (1, or 1 - [`NODE_SHARE`] in the NCCL set).
    share: f64,
    last_error: Option<String>,
    /// Since when it has read idle and free (none while it does not).
    idle_since: Option<Instant>,
    /// This poll's view of it ([`ProbeSource::observe`]): `(exported index, utilization)` and
    /// who else is on it, read once per poll and used by the step.
    reading: Option<(u32, f64)>,
    occupancy: Occupancy,
    /// What its last attempt found.
    state: GpuState,
}

impl Gpu {
    /// Records that a run held the GPU until `end` for `took` of GPU time (`own`: a run of
    /// its own rather than as a peer) and sets when it may be probed again: `took / (duty_cycle
    /// x share)` after the run, or after the rest it already had to take, so that the rests
    /// add up. During its first pass the rest is owed instead, and all of it is taken after
    /// the pass's last run: at every moment a GPU comes due, its own probes have held it at
    /// most `duty_cycle x share` of the time since the start.
    fn rest_after(&mut self, took: Duration, end: Instant, duty_cycle: f64, own: bool) {
        self.free_holds = self.free_holds.saturating_sub(1);
        if own {
            self.first_pass = self.first_pass.saturating_sub(1);
        }
        let pause = took.div_f64(duty_cycle * self.share);
        let from = self.next_due.max(end);
        if self.first_pass > 0 && self.free_holds > 0 {
            self.owed += pause;
            self.next_due = from;
        } else {
            self.next_due = from + pause + std::mem::take(&mut self.owed);
        }
    }
}

/// Whether `g` has a result of `kind` (for `p2p_copy`, with any peer).
fn has_result(g: &Gpu, kind: ProbeKind) -> bool {
    if kind.needs_peer() {
        !g.pairs.is_empty()
    } else {
        g.results.contains_key(&kind)
    }
}

/// Moves to the front of what is left of GPU `i`'s first pass the kind the fewest GPUs of the
/// node have a result of (the earliest in its rotation on a tie), so that the node's first
/// runs reach every kind within K of them, not K + N - 1 (issue 44: the simulated node's
/// first minute shows every probe). A pair kind waits while no peer may be probed.
fn first_pass_pick(settings: &ScheduleSettings, gpus: &mut [Gpu], i: usize, now: Instant) {
    let n = gpus.len();
    let k = gpus[i].order.len();
    let left = gpus[i].first_pass.min(k);
    let peer_free = (0..n).any(|j| j != i && skip_of(settings, &gpus[j], now).is_none());
    let start = gpus[i].next_probe;
    let best = (0..left)
        .map(|j| (j, gpus[i].order[(start + j) % k]))
        .filter(|(_, kind)| peer_free || !kind.needs_peer())
        .min_by_key(|(j, kind)| (gpus.iter().filter(|g| has_result(g, *kind)).count(), *j));
    if let Some((j, _)) = best {
        gpus[i].order.swap(start % k, (start + j) % k);
    }
}

/// The positions among `ordinals` (the node's GPUs, in order) of the `nccl_allreduce` set:
/// `nccl_gpus`, or every GPU. Fewer than two: the probe does not apply to this node.
fn nccl_members(settings: &ScheduleSettings, ordinals: &[usize]) -> Vec<usize> {
    match &settings.nccl_gpus {
        Some(list) => list
            .iter()
            .filter_map(|o| ordinals.iter().position(|g| g == o))
            .collect(),
        None => (0..ordinals.len()).collect(),
    }
}

/// One `storage_read` path's schedule and last result.
#[derive(Debug)]
struct StorageState {
    path: PathBuf,
    /// The `path` label: the configured path as written.
    label: String,
    next_due: Instant,
    /// `(bytes per second, direct, when measured)`.
    last: Option<(f64, bool, Instant)>,
    runs: BTreeMap<Outcome, u64>,
    /// Runs failed in a row: each doubles the wait before the next ([`storage_backoff`]).
    failures: u32,
}

/// Wait after the first failed `storage_read` of a path; it doubles with each failure in a
/// row up to [`STORAGE_BACKOFF_MAX`]. A path that fails at once (missing, refused, a full
/// disk) otherwise came due again at once: 110 worker processes in 40 s.
pub const STORAGE_BACKOFF_BASE: Duration = Duration::from_secs(10);
/// Longest wait between failed `storage_read` runs of a path.
pub const STORAGE_BACKOFF_MAX: Duration = Duration::from_secs(30 * 60);

/// The wait after `failures` failed runs in a row (none after a success).
pub fn storage_backoff(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => STORAGE_BACKOFF_BASE
            .saturating_mul(1u32 << (n - 1).min(16))
            .min(STORAGE_BACKOFF_MAX),
    }
}

/// `nccl_allreduce`'s schedule and last result.
#[derive(Debug, Default)]
struct NcclState {
    next_due: Option<Instant>,
    /// The result, when it was measured, and how long it stays fresh.
    last: Option<(AllReduce, Instant, Duration)>,
    /// The expected bus bandwidth of the set ([`expected_nccl_bus_bandwidth`]), bytes per
    /// second.
    expected: Option<f64>,
    runs: BTreeMap<Outcome, u64>,
}

/// GPUs of the baseboard the expected NCCL figures were measured on: an HGX 8-GPU board, whose
/// SXM GPUs all meet on its NVSwitches.
pub const NCCL_BASEBOARD_GPUS: usize = 8; // fact: nccl.baseboard-gpus

/// The bus bandwidth the set `ids` is expected to reach, if its figure applies: the set is the
/// node's whole 8-GPU baseboard (`whole_node`: every GPU the node has) of one part with a
/// published figure. The figures are ring all-reduces over all 8 NVSwitch-connected GPUs; the
/// table lists only SXM parts, which come 8 to a board only on NVSwitch baseboards. A subset
/// or another GPU count has a different ring, so it gets no figure rather than a guessed one.
/// The NVLink links up are not looked at: a link down must lower the ratio, not hide it.
pub fn expected_nccl_bus_bandwidth(ids: &[GpuId], whole_node: bool) -> Option<f64> {
    if !whole_node || ids.len() != NCCL_BASEBOARD_GPUS {
        return None;
    }
    ids.iter()
        .map(|g| dgx_pixels_probes::peaks::nccl_ring_bus_bandwidth(&g.model))
        .reduce(|a, b| a.zip(b).filter(|(a, b)| a == b).map(|(a, _)| a))
        .flatten()
}

/// The `probes` source.
pub struct ProbeSource<B: Backend, U: UtilizationView> {
    backend: B,
    utilization: U,
    settings: ScheduleSettings,
    probes: Vec<ProbeKind>,
    started: Instant,
    gpus: Option<Vec<Gpu>>,
    unavailable: Option<(Instant, PollError)>,
    cursor: usize,
    /// Whether the last poll's step was a node probe's (`storage_read`, `nccl_allreduce`).
    node_last: bool,
    /// The highest peak RSS of any worker so far.
    worker_peak_rss: Option<u64>,
    storage: Vec<StorageState>,
    nccl: NcclState,
}

impl<B: Backend, U: UtilizationView> ProbeSource<B, U> {
    /// A source over `backend`, reading utilization from `utilization`.
    pub fn new(backend: B, utilization: U, settings: ScheduleSettings) -> Result<Self, ProbeError> {
        let probes = settings.validate()?;
        let settings_paths = settings.storage_paths.clone();
        Ok(ProbeSource {
            backend,
            utilization,
            settings,
            probes,
            started: Instant::now(),
            gpus: None,
            unavailable: None,
            cursor: 0,
            node_last: false,
            worker_peak_rss: None,
            storage: settings_storage(&settings_paths),
            nccl: NcclState::default(),
        })
    }

    /// One poll as at `now` ([`Source::poll`] is this at the wall clock's now): a caller with a
    /// clock of its own (a test, a simulation) drives the schedule without waiting for it.
    /// `now` must not go back between polls. What a backend reports it held a GPU for
    /// ([`Backend::held_for`]) is what the schedule counts; without it, the wall time of the
    /// call.
    pub fn poll_at(&mut self, now: Instant) -> Result<PollOutput, PollError> {
        self.discover(now)?;
        self.observe(now);
        self.step(now);
        Ok(PollOutput::samples(self.samples(now)))
    }

    fn discover(&mut self, now: Instant) -> Result<(), PollError> {
        if self.gpus.is_some() {
            return Ok(());
        }
        if let Some((at, e)) = &self.unavailable {
            if now.duration_since(*at) < UNAVAILABLE_RETRY {
                return Err(e.clone());
            }
        }
        match self.backend.discover() {
            Ok(ids) => {
                self.unavailable = None;
                let n = ids.len();
                let k = self.probes.len();
                let ordinals: Vec<usize> = ids.iter().map(|g| g.ordinal).collect();
                let members = nccl_members(&self.settings, &ordinals);
                let nccl_on = self.settings.nccl_allreduce && members.len() >= 2;
                self.gpus = Some(
                    ids.into_iter()
                        .enumerate()
                        .map(|(i, id)| Gpu {
                            key: Arc::new(DeviceKey::gpu(
                                u32::try_from(id.ordinal).unwrap_or(u32::MAX),
                                id.uuid.as_str(),
                            )),
                            id,
                            next_due: now,
                            // Staggered starts: the first runs on the node are of distinct
                            // kinds (and the first pass prefers kinds the node has no result
                            // of yet).
                            order: self.probes.clone(),
                            next_probe: i * k / n.max(1),
                            results: BTreeMap::new(),
                            pairs: BTreeMap::new(),
                            next_peer: 0,
                            runs: BTreeMap::new(),
                            durations: BTreeMap::new(),
                            busy: Duration::ZERO,
                            first_pass: k,
                            free_holds: 2 * k,
                            owed: Duration::ZERO,
                            share: if nccl_on && members.contains(&i) {
                                1.0 - NODE_SHARE
                            } else {
                                1.0
                            },
                            last_error: None,
                            idle_since: None,
                            reading: None,
                            occupancy: Occupancy::default(),
                            state: GpuState::Pending,
                        })
                        .collect(),
                );
                Ok(())
            }
            Err(e) => {
                let kind = match e {
                    ProbeError::Unavailable(_) => PollErrorKind::CudaUnavailable,
                    _ => PollErrorKind::CudaError,
                };
                let err = PollError::new(kind, format!("probes: {e}"));
                self.unavailable = Some((now, err.clone()));
                Err(err)
            }
        }
    }

    /// Follows how long each GPU has read idle and free, for the settle window.
    fn observe(&mut self, now: Instant) {
        let Some(gpus) = self.gpus.as_mut() else {
            return;
        };
        for g in gpus {
            g.reading = self.utilization.lookup(&g.id.uuid);
            g.occupancy = self.utilization.occupancy(&g.id.uuid);
            let free = g.occupancy;
            let idle = matches!(g.reading, Some((_, u)) if u <= self.settings.busy_threshold)
                && !free.held
                && free.processes == 0
                && !free.mig;
            if !idle {
                g.idle_since = None;
            } else if g.idle_since.is_none() {
                g.idle_since = Some(now);
            }
        }
    }

    /// Runs at most one due probe (or records one skip): a due storage path first, then
    /// `nccl_allreduce`, then a GPU probe, except right after a node probe, when a due GPU
    /// probe goes first.
    fn step(&mut self, now: Instant) {
        // After a node probe a due GPU probe goes first, so a node probe due at every poll (a
        // short read at a high duty cycle) cannot starve the GPU probes.
        let gpu_due = self
            .gpus
            .as_ref()
            .is_some_and(|g| g.iter().any(|g| g.next_due <= now));
        if !(self.node_last && gpu_due) && self.step_node(now) {
            self.node_last = true;
            return;
        }
        self.node_last = false;
        let probes = self.probes.clone();
        let Some(gpus) = self.gpus.as_mut() else {
            return;
        };
        let n = gpus.len();
        let Some(i) = (0..n)
            .map(|k| (self.cursor + k) % n)
            .find(|&i| gpus[i].next_due <= now)
        else {
            return;
        };
        self.cursor = (i + 1) % n.max(1);
        if gpus[i].first_pass > 0 {
            first_pass_pick(&self.settings, gpus, i, now);
        }
        let kind = gpus[i].order[gpus[i].next_probe % probes.len()];
        {
            let g = &mut gpus[i];
            if let Some((gpu, _)) = g.reading {
                if g.key.index() != gpu {
                    g.key = Arc::new(DeviceKey::gpu(gpu, g.id.uuid.as_str()));
                }
            }
        }
        let mut skip = skip_of(&self.settings, &gpus[i], now);
        let mut peer = None;
        if skip.is_none() && kind.needs_peer() {
            if n < 2 {
                // Nothing to pair with: the probe does not apply to this node (nor to its
                // first pass, which it ends if it was the last kind left).
                let g = &mut gpus[i];
                g.next_probe = (g.next_probe + 1) % probes.len();
                g.first_pass = g.first_pass.saturating_sub(1);
                if g.first_pass == 0 {
                    g.next_due = g.next_due.max(now) + std::mem::take(&mut g.owed);
                }
                return;
            }
            // Each GPU against each peer in turn; a peer that must be left alone is passed
            // over for the next free one, and with none free the GPU waits as the first one
            // in turn says.
            let start = gpus[i].next_peer;
            let candidate = |m: usize| (i + 1 + (start + m) % (n - 1)) % n;
            match (0..n - 1).find(|&m| skip_of(&self.settings, &gpus[candidate(m)], now).is_none())
            {
                Some(m) => {
                    peer = Some(candidate(m));
                    gpus[i].next_peer = (start + m + 1) % (n - 1);
                }
                None => {
                    skip = skip_of(&self.settings, &gpus[candidate(0)], now)
                        .map(|(outcome, _)| (outcome, SKIP_RETRY));
                }
            }
        }
        if let Some((outcome, retry)) = skip {
            let g = &mut gpus[i];
            *g.runs.entry((kind, outcome)).or_default() += 1;
            g.state = outcome.state();
            g.next_due = now + retry;
            return;
        }
        // The run starts at `now` (the poll's moment); `wall` only measures the call, for a
        // backend that does not say how long it held the GPU.
        let wall = Instant::now();
        let result = match peer {
            Some(j) => {
                let peer_id = gpus[j].id.clone();
                self.backend.run_pair(&gpus[i].id, &peer_id, kind)
            }
            None => self.backend.run(&gpus[i].id, kind),
        };
        if let Some(rss) = self.backend.worker_peak_rss_bytes() {
            self.worker_peak_rss = Some(self.worker_peak_rss.unwrap_or(0).max(rss));
        }
        let took = self.backend.held_for().unwrap_or_else(|| wall.elapsed());
        let end = now + took.max(wall.elapsed());
        let g = &mut gpus[i];
        g.busy += took;
        g.durations
            .entry(kind)
            .or_insert_with(|| Histogram::new(DURATION_BUCKETS))
            .observe(took.as_secs_f64());
        let value = result.and_then(|v| {
            summarize(&v)
                .map(|s| s.median)
                .ok_or_else(|| ProbeError::Cuda("the probe returned no finite value".into()))
        });
        let mut polite = false;
        match value {
            Ok(v) => {
                *g.runs.entry((kind, Outcome::Ok)).or_default() += 1;
                g.state = GpuState::Measured;
                let r = LastResult {
                    value: v,
                    at: SystemTime::now(),
                    measured: end,
                };
                match peer {
                    Some(j) => g.pairs.insert(j, r),
                    None => g.results.insert(kind, r),
                };
                g.last_error = None;
            }
            Err(e) => {
                let outcome = Outcome::of_error(&e);
                *g.runs.entry((kind, outcome)).or_default() += 1;
                g.state = outcome.state();
                if outcome.is_skip() || outcome == Outcome::Contended {
                    // Polite, not broken: the previous result still describes the GPU until
                    // it ages out. A skip held the GPU for no time; look again later.
                    tracing::debug!(gpu = g.key.index(), uuid = %g.id.uuid, probe = %kind, outcome = outcome.as_str(), "probe not run: {e}");
                    g.idle_since = None;
                    polite = true;
                    if outcome.is_skip() {
                        g.next_due = now + SKIP_RETRY;
                        return;
                    }
                } else {
                    // A failed probe leaves no result: the previous one no longer describes
                    // the GPU.
                    match peer {
                        Some(j) => g.pairs.remove(&j),
                        None => g.results.remove(&kind),
                    };
                    let msg = e.to_string();
                    if g.last_error.as_deref() != Some(&msg) {
                        tracing::warn!(gpu = g.key.index(), uuid = %g.id.uuid, probe = %kind, outcome = outcome.as_str(), "probe failed: {msg}");
                    }
                    g.last_error = Some(msg);
                }
            }
        }
        g.next_probe = (g.next_probe + 1) % probes.len();
        let duty = self.settings.duty_cycle;
        g.rest_after(took, end, duty, true);
        // The peer was held as long: it rests as long (after any rest it already had), on
        // its own budget.
        if let Some(p) = peer.and_then(|j| gpus.get_mut(j)) {
            p.busy += took;
            p.rest_after(took, end, duty, false);
            if polite {
                p.idle_since = None;
            }
        }
    }

    /// Runs `storage_read` on the first due path when every GPU may be probed (idle, free,
    /// settled: the node's jobs are not reading their data); true when it ran or was skipped.
    fn step_storage(&mut self, now: Instant) -> bool {
        let Some(k) = self.storage.iter().position(|s| s.next_due <= now) else {
            return false;
        };
        let gpus = self.gpus.as_deref().unwrap_or_default();
        // Look again when the first GPU in the way would allow it (the end of its settle
        // window, or the skip retry), as nccl_allreduce does.
        let busy = gpus
            .iter()
            .filter_map(|g| skip_of(&self.settings, g, now))
            .map(|(_, retry)| retry)
            .max();
        let allowed = self.settings.storage_paths.clone();
        let bytes = self.settings.storage_read_bytes;
        let s = &mut self.storage[k];
        if let Some(retry) = busy {
            *s.runs.entry(Outcome::SkippedBusy).or_default() += 1;
            s.next_due = now + retry;
            return true;
        }
        let wall = Instant::now();
        let result = self.backend.read_storage(&s.path, &allowed, bytes);
        let took = self.backend.held_for().unwrap_or_else(|| wall.elapsed());
        let end = now + took.max(wall.elapsed());
        match result {
            Ok(r) => {
                *s.runs.entry(Outcome::Ok).or_default() += 1;
                s.last = Some((r.bytes_per_second, r.direct, end));
            }
            Err(e) => {
                let outcome = Outcome::of_error(&e).within(STORAGE_OUTCOMES);
                *s.runs.entry(outcome).or_default() += 1;
                s.last = None;
                s.failures = s.failures.saturating_add(1);
                // Logged on the first failure and then ever more rarely, as runs back off.
                if s.failures.is_power_of_two() {
                    tracing::warn!(
                        path = %s.label,
                        outcome = outcome.as_str(),
                        failures = s.failures,
                        "storage_read failed: {e}; next try in {:?}",
                        storage_backoff(s.failures)
                    );
                }
            }
        }
        if s.last.is_some() {
            s.failures = 0;
        }
        s.next_due = end
            + took
                .div_f64(self.settings.duty_cycle)
                .max(storage_backoff(s.failures));
        true
    }

    /// Runs the node probe that has waited longest (a storage path, or `nccl_allreduce`), so
    /// one due at every poll does not starve the other; true when one ran or was skipped.
    fn step_node(&mut self, now: Instant) -> bool {
        let storage = self
            .storage
            .iter()
            .map(|s| s.next_due)
            .filter(|t| *t <= now)
            .min();
        let nccl = self
            .settings
            .nccl_allreduce
            .then(|| self.nccl.next_due.unwrap_or(self.started))
            .filter(|t| *t <= now);
        match (storage, nccl) {
            (Some(s), Some(n)) if n < s => self.step_nccl(now) || self.step_storage(now),
            _ => self.step_storage(now) || self.step_nccl(now),
        }
    }

    /// Runs `nccl_allreduce` when it is due and every GPU of its set may be probed; true when
    /// it ran or was skipped.
    fn step_nccl(&mut self, now: Instant) -> bool {
        if !self.settings.nccl_allreduce || self.nccl.next_due.is_some_and(|t| t > now) {
            return false;
        }
        let Some(gpus) = self.gpus.as_mut() else {
            return false;
        };
        let ordinals: Vec<usize> = gpus.iter().map(|g| g.id.ordinal).collect();
        let members = nccl_members(&self.settings, &ordinals);
        if members.len() < 2 {
            // Not this node's probe (one GPU, or the listed ones are missing).
            return false;
        }
        let runs = &mut self.nccl.runs;
        if let Some((outcome, retry)) = members
            .iter()
            .find_map(|&i| skip_of(&self.settings, &gpus[i], now))
        {
            *runs.entry(outcome).or_default() += 1;
            self.nccl.next_due = Some(now + retry);
            return true;
        }
        let ids: Vec<GpuId> = members.iter().map(|&i| gpus[i].id.clone()).collect();
        let whole_node = members.len() == gpus.len();
        self.nccl.expected = expected_nccl_bus_bandwidth(&ids, whole_node);
        let wall = Instant::now();
        let result = self.backend.run_nccl(&ids, self.settings.nccl_max_bytes);
        if let Some(rss) = self.backend.worker_peak_rss_bytes() {
            self.worker_peak_rss = Some(self.worker_peak_rss.unwrap_or(0).max(rss));
        }
        let took = self.backend.held_for().unwrap_or_else(|| wall.elapsed());
        let end = now + took.max(wall.elapsed());
        // Its own share of its GPUs' budget ([`NODE_SHARE`]).
        let pause = took.div_f64(self.settings.duty_cycle * NODE_SHARE);
        let rest = end + pause;
        let mut retry = None;
        match result {
            Ok(r) => {
                *runs.entry(Outcome::Ok).or_default() += 1;
                // Fresh for three of its rounds, as the GPU probes' results.
                let max_age = (took + pause).max(SKIP_RETRY) * MAX_AGE_ROUNDS;
                self.nccl.last = Some((r, end, max_age));
            }
            Err(e) => {
                let outcome = Outcome::of_error(&e).within(NCCL_OUTCOMES);
                *runs.entry(outcome).or_default() += 1;
                if outcome == Outcome::SkippedNoNccl {
                    tracing::debug!("nccl_allreduce not run: {e}");
                    retry = Some(UNAVAILABLE_RETRY);
                } else if outcome.is_skip() {
                    tracing::debug!(outcome = outcome.as_str(), "nccl_allreduce not run: {e}");
                    retry = Some(SKIP_RETRY);
                } else if outcome == Outcome::Contended {
                    tracing::debug!("nccl_allreduce contended: {e}");
                } else {
                    self.nccl.last = None;
                    tracing::warn!(outcome = outcome.as_str(), "nccl_allreduce failed: {e}");
                }
            }
        }
        if let Some(retry) = retry {
            self.nccl.next_due = Some(now + retry);
            return true;
        }
        self.nccl.next_due = Some(rest);
        // Every GPU of the set was held as long, on the all-reduce's share of its budget: it
        // is free for its own probes once the run ends, not after the all-reduce's rest.
        for &i in &members {
            let g = &mut gpus[i];
            g.busy += took;
            g.next_due = g.next_due.max(end);
        }
        true
    }

    fn nccl_samples(&self, now: Instant, out: &mut Vec<Sample>) {
        if !self.settings.nccl_allreduce {
            return;
        }
        for outcome in NCCL_OUTCOMES {
            let n = self.nccl.runs.get(outcome).copied().unwrap_or(0);
            out.push(Sample::new(
                Metric::ProbeNcclRuns,
                [outcome.as_str()],
                n as f64,
            ));
        }
        if let Some(e) = self.nccl.expected {
            out.push(Sample::new(
                Metric::ProbeNcclExpectedBusBandwidth,
                [] as [&str; 0],
                e,
            ));
        }
        let Some((r, at, max_age)) = &self.nccl.last else {
            return;
        };
        if now.duration_since(*at) > *max_age {
            return;
        }
        out.push(Sample::new(
            Metric::ProbeNcclGpus,
            [] as [&str; 0],
            r.gpus as f64,
        ));
        if let Some(l) = r.largest() {
            out.push(Sample::new(
                Metric::ProbeNcclLargestBusBandwidth,
                [] as [&str; 0],
                l.busbw,
            ));
        }
        for size in &r.sizes {
            let label = size.bytes.to_string();
            out.push(Sample::new(
                Metric::ProbeNcclBusBandwidth,
                [label.as_str()],
                size.busbw,
            ));
            out.push(Sample::new(
                Metric::ProbeNcclAlgorithmBandwidth,
                [label.as_str()],
                size.algbw,
            ));
        }
    }

    fn storage_samples(&self, out: &mut Vec<Sample>) {
        for s in &self.storage {
            if let Some((bps, direct, _)) = s.last {
                let direct = if direct { "true" } else { "false" };
                out.push(Sample::new(
                    Metric::ProbeStorageRead,
                    [s.label.as_str(), direct],
                    bps,
                ));
            }
            for outcome in STORAGE_OUTCOMES {
                let n = s.runs.get(outcome).copied().unwrap_or(0);
                out.push(Sample::new(
                    Metric::ProbeStorageRuns,
                    [s.label.as_str(), outcome.as_str()],
                    n as f64,
                ));
            }
        }
    }

    fn samples(&self, now: Instant) -> Vec<Sample> {
        let mut out = Vec::new();
        self.storage_samples(&mut out);
        self.nccl_samples(now, &mut out);
        let Some(gpus) = &self.gpus else {
            return out;
        };
        if let Some(rss) = self.worker_peak_rss {
            out.push(Sample::new(
                Metric::ProbeWorkerPeakRss,
                [] as [&str; 0],
                rss as f64,
            ));
        }
        for state in STATES {
            let n = gpus.iter().filter(|g| g.state == *state).count();
            out.push(Sample::new(Metric::ProbeGpus, [state.as_str()], n as f64));
        }
        let elapsed = now.duration_since(self.started).as_secs_f64();
        for g in gpus {
            let key = &g.key;
            let max_age = self.round_estimate(g) * MAX_AGE_ROUNDS;
            for (kind, r) in &g.results {
                if now.duration_since(r.measured) > max_age {
                    continue;
                }
                let name = kind.name();
                match kind.unit() {
                    ProbeUnit::Flops => {
                        out.push(Sample::of(key, Metric::ProbeGemm, [name], r.value))
                    }
                    ProbeUnit::BytesPerSecond => {
                        out.push(Sample::of(key, Metric::ProbeBandwidth, [name], r.value))
                    }
                    ProbeUnit::Seconds => out.push(Sample::of(
                        key,
                        Metric::ProbeLaunchLatency,
                        [] as [&str; 0],
                        r.value,
                    )),
                }
                if let Some(f) = dgx_pixels_probes::peaks::fraction(&g.id.model, *kind, r.value) {
                    out.push(Sample::of(key, Metric::ProbePeakFraction, [name], f));
                }
                let ts =
                    r.at.duration_since(UNIX_EPOCH)
                        .map(|d| d.as_secs_f64())
                        .unwrap_or(0.0);
                out.push(Sample::of(key, Metric::ProbeLastRun, [name], ts));
            }
            out.push(Sample::of(
                key,
                Metric::ProbeGpuState,
                [g.state.as_str()],
                1.0,
            ));
            self.pair_samples(gpus, g, now, &mut out);
            for kind in &self.probes {
                for outcome in OUTCOMES {
                    let n = g.runs.get(&(*kind, *outcome)).copied().unwrap_or(0);
                    out.push(Sample::of(
                        key,
                        Metric::ProbeRuns,
                        [kind.name(), outcome.as_str()],
                        n as f64,
                    ));
                }
                if let Some(h) = g.durations.get(kind) {
                    out.extend(h.samples(Some(key), Metric::ProbeDuration, [kind.name()]));
                }
            }
            if elapsed > 0.0 {
                out.push(Sample::of(
                    key,
                    Metric::ProbeDutyCycle,
                    [] as [&str; 0],
                    g.busy.as_secs_f64() / elapsed,
                ));
            }
        }
        out
    }

    /// The pair probe's series of `g`: each fresh pair at full detail, the worst peer always.
    /// A GPU meets each peer once per n - 1 of its rounds, so a pair ages out after that many
    /// times the single probes' limit.
    fn pair_samples(&self, gpus: &[Gpu], g: &Gpu, now: Instant, out: &mut Vec<Sample>) {
        let peers = u32::try_from(gpus.len().saturating_sub(1))
            .unwrap_or(u32::MAX)
            .max(1);
        let max_age = self.round_estimate(g) * MAX_AGE_ROUNDS * peers;
        let mut worst: Option<(f64, String)> = None;
        let mut last: Option<SystemTime> = None;
        for (j, r) in &g.pairs {
            let Some(peer) = gpus.get(*j) else { continue };
            if now.duration_since(r.measured) > max_age {
                continue;
            }
            let label = peer.key.index().to_string();
            out.push(Sample::of(
                &g.key,
                Metric::ProbeP2pBandwidth,
                [label.as_str()],
                r.value,
            ));
            if worst.as_ref().is_none_or(|(v, _)| r.value < *v) {
                worst = Some((r.value, label));
            }
            last = last.max(Some(r.at));
        }
        if let Some((v, label)) = worst {
            out.push(Sample::of(
                &g.key,
                Metric::ProbeP2pWorstBandwidth,
                [label.as_str()],
                v,
            ));
            // The worst peer against the part's per-direction NVLink bandwidth.
            if let Some(f) = dgx_pixels_probes::peaks::fraction(&g.id.model, ProbeKind::P2pCopy, v)
            {
                out.push(Sample::of(
                    &g.key,
                    Metric::ProbePeakFraction,
                    [ProbeKind::P2pCopy.name()],
                    f,
                ));
            }
        }
        if let Some(at) = last {
            let ts = at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            out.push(Sample::of(
                &g.key,
                Metric::ProbeLastRun,
                [ProbeKind::P2pCopy.name()],
                ts,
            ));
        }
    }

    /// Time for one rotation through every probe on `g`, from its recorded durations.
    fn round_estimate(&self, g: &Gpu) -> Duration {
        let per_run: f64 = g
            .durations
            .values()
            .map(|h| h.mean().unwrap_or(0.0))
            .fold(0.0, f64::max);
        let pace =
            Duration::from_secs_f64(per_run / (self.settings.duty_cycle * g.share)).max(SKIP_RETRY);
        pace * self.probes.len() as u32
    }
}

impl<B: Backend, U: UtilizationView> Source for ProbeSource<B, U> {
    fn name(&self) -> &'static str {
        "probes"
    }

    fn poll(&mut self) -> Result<PollOutput, PollError> {
        self.poll_at(Instant::now())
    }
}
