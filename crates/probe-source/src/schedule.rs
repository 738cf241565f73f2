//! How politely probes run: the scheduler's settings, their defaults and checks, and the
//! pauses it keeps (retries, duty cycle shares, the storage back-off).

use std::path::PathBuf;
use std::time::Duration;

use dgx_pixels_probes::nccl;
use dgx_pixels_probes::probe::{ProbeKind, ProbeSizes};
use dgx_pixels_probes::storage;
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
pub(crate) const MAX_AGE_ROUNDS: u32 = 3;

/// With `nccl_allreduce` on, the share of the duty cycle of each GPU of its set that the
/// all-reduce gets; the GPU's own probes get the rest. The all-reduce rests d / (duty_cycle x
/// NODE_SHARE) after a run of d, and the GPU's own probes d / (duty_cycle x (1 - NODE_SHARE)):
/// together they hold a GPU at most `duty_cycle` of the time, and a rest of one never delays
/// the other (an all-reduce's rest on its GPUs starved their own probes: issue 44).
pub const NODE_SHARE: f64 = 0.5;

/// Default time a GPU must read idle before it is probed.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(10);

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
