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

mod book;
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
mod workers;
mod xid;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::gpu::{ActivityScope, XidIncidents, DEFAULT_TOP_K};
use dgx_pixels_metrics::{Backoff, PollError, PollErrorKind, PollOutput, Source, XidLedger};
use nvml_wrapper::Nvml;
use tracing::{info, warn};

use book::Book;
pub use calls::{call_stats, CallStat};
pub use cgroup::{container_id, pod_uid, CgroupIds};
use device::GpuPoll;
pub use gpm::GPM_FAMILIES;
use workers::Loaded;

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

/// The NVML source. See the crate docs.
pub struct NvmlSource {
    options: NvmlOptions,
    loaded: Option<Loaded>,
    backoff: Backoff,
    last_error: String,
    poll_number: u64,
    /// What is kept of each GPU between polls.
    book: Book,
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
            book: Book::new(options.xid_quiet_period),
            options,
            loaded: None,
            backoff: Backoff::new(),
            last_error: String::new(),
            poll_number: 0,
        }
    }

    /// Records and counts XIDs in `ledger` (the exporter's one ledger, which the kernel-log
    /// reader also feeds) instead of a ledger of its own.
    pub fn with_xid_ledger(mut self, ledger: Arc<XidLedger>) -> NvmlSource {
        self.book.ledger = ledger;
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
                self.loaded = Some(Loaded::start(
                    &self.options,
                    &self.book.ledger,
                    Arc::new(nvml),
                    count,
                ));
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
        loaded.start_waiting(&self.book.ledger);
        let loaded = &*loaded;
        self.poll_number += 1;
        let number = self.poll_number;
        let asked = loaded.ask(number, &self.book);
        let deadline = self.options.gpu_deadline;
        let mut answers = loaded.collect(number, asked, Instant::now() + deadline);
        let results = &answers.results;
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
            let book = &mut self.book;
            let mut readout = book.readout(index, answers.results.remove(&index), deadline);
            book.annotate(index, &mut readout, loaded.power.as_ref(), now);
            let profile = answers.profiles.remove(&index);
            let gpm_late = answers.gpm_missing.contains(&index);
            book.note_gpm(index, gpm_late, deadline);
            if let Some(p) = &profile {
                p.apply(&mut readout);
            }
            book.push(index, &readout, profile.as_ref(), gpm_late, &mut out);
        }
        calls::push_samples(&mut out);
        Ok(PollOutput::samples(out))
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
