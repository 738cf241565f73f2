//! The `trace` source: watches the directories where training jobs drop profiler traces and
//! CUDA memory snapshots, analyses each new file in the background, and serves what the
//! analysis found as series of the `trace` subsystem (docs/traces.md, "The trace collector").
//!
//! Why a crate of its own, and not in the exporter or the engine: the source is the analysis
//! engine (`dgx-pixels-trace`) run on a schedule; it needs the engine's parser and analyses and
//! the metrics catalog, nothing of the daemon, and the engine needs none of the source's
//! dependencies (metrics, the simulated writer's temporary directories).
//!
//! How the parts connect:
//! - [`TraceOptions`]: the `[trace]` config table (strict, documented defaults).
//! - `watch`: the bounded directory listing, glob expansion and the completeness rules that
//!   decide when a file is ready (stable across two listings, retried on parse errors).
//! - `series`: the counters per job and rank that the analysed reports add to, bounded.
//! - `group`: the ranks of one job, analysed together (stragglers, variation across ranks)
//!   once all have arrived or after a timeout.
//! - `worker`: the one background thread (low priority) that lists, hands one file at a
//!   time to the [`Analyzer`] and publishes the finished series.
//! - [`analyzer`]: who analyses a file: in the daemon, a child process per file (the
//!   exporter's `trace-worker`), so a hostile file costs the child, not the daemon;
//!   [`InProcess`] for tests.
//! - [`Handoff`]: what a source leaves the one that replaces it on a reload (files waiting and
//!   in analysis, files finished, counters).
//! - [`SimulatedTraces`]: a simulated job dropping traces for the watcher (`--simulate`).
//! - [`TraceSource`]: the [`Source`] the runner polls; a poll only copies what the worker has
//!   published, so it never waits on a listing or an analysis.
//!
//! ```no_run
//! use dgx_pixels_metrics::Source;
//! use dgx_pixels_trace_source::{TraceOptions, TraceSource};
//! use std::time::Duration;
//!
//! let options = TraceOptions {
//!     directory: vec!["/var/lib/dgx-pixels/traces".into()],
//!     ..TraceOptions::default()
//! };
//! let mut source = TraceSource::start(options, Duration::from_secs(5))?;
//! let output = source.poll()?; // what the background analysis has finished so far
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod analyzer;
mod error;
mod group;
mod series;
mod simulated;
mod watch;
mod worker;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::{PollError, PollErrorKind, PollOutput, Sample, Source};
use serde::{Deserialize, Deserializer};

pub use analyzer::{
    Analysed, AnalysisFailure, AnalysisReply, AnalysisRequest, Analyzer, InProcess,
};
pub use error::TraceSourceError;
pub use series::{job_label, Outcome, MAX_JOB_BYTES};
pub use simulated::{SimulatedJob, SimulatedTraces, DEFAULT_KEEP, DEFAULT_PERIOD};
pub use watch::{glob_match, is_snapshot_name, is_trace_name};

/// Default largest trace file analysed: 1 GiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1 << 30;
/// Default largest memory snapshot read: 128 MiB (one is read whole, and its unpickled form is
/// several times its size; a snapshot with full history is tens of MB).
pub const DEFAULT_MAX_SNAPSHOT_BYTES: u64 = 128 << 20;
/// Default depth of subdirectories searched below each watched directory.
pub const DEFAULT_MAX_DEPTH: usize = 2;
/// Default bound on directory entries looked at per listing (all directories together).
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;
/// Default bound on the (job, rank) pairs with series; the least recently updated job goes
/// first.
pub const DEFAULT_MAX_RANKS: usize = 256;
/// Default number of times an unchanged file that fails to parse is tried.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default wait for the missing ranks of a job before it is analysed with those it has.
pub const DEFAULT_GROUP_TIMEOUT: Duration = Duration::from_secs(300);
/// Default bound on the decompressed text of one trace: 4 times the default
/// `max_file_bytes` (a `.json.gz` compresses about 10 to 30 times; a hostile one 1,000 times).
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: u64 = 4 << 30;
/// Default bound on the rows kept from one trace (GPU rows, launches, annotations): a trace
/// of 500,000 rows peaks at about 80 MiB while parsed and analysed (docs/performance.md), under
/// the chart's 128 MiB limit.
pub const DEFAULT_MAX_ROWS: u64 = 500_000;
/// Upper bound of `max_analysis_time` and `group_timeout`: a day.
pub const MAX_DURATION_SETTING: Duration = Duration::from_secs(86_400);
/// Default bound on the time one file's parse may take.
pub const DEFAULT_MAX_ANALYSIS_TIME: Duration = Duration::from_secs(600);
/// Default address-space limit of the process that analyses one file (`RLIMIT_AS`): 1 GiB.
/// A trace at the default `max_rows` peaks at about 80 MiB resident; the rest is room for
/// the allocator's and the binary's mappings (address space, not memory in use).
pub const DEFAULT_MAX_WORKER_MEMORY: u64 = 1 << 30;
/// Smallest `max_worker_memory` accepted: the exporter binary maps about 20 MiB before it
/// reads anything.
pub const MIN_WORKER_MEMORY: u64 = 64 << 20;

/// Settings of the trace source. The daemon's `[trace]` config table deserializes into it
/// (unknown keys are errors; durations are humantime strings such as `"10m"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TraceOptions {
    /// `directory`: the directories to watch, one path or a list; a component may be a glob
    /// (`*`, `?`), e.g. `/data/profile_traces/iteration_*`. Empty = no trace source.
    #[serde(deserialize_with = "one_or_many")]
    pub directory: Vec<PathBuf>,
    /// `max_file_bytes`: larger files are not analysed (counted as `too_large`).
    pub max_file_bytes: u64,
    /// `max_snapshot_bytes`: larger memory snapshots are not read (counted as `too_large`).
    pub max_snapshot_bytes: u64,
    /// `max_depth`: subdirectories searched below each watched directory (0 = only its files).
    pub max_depth: usize,
    /// `max_entries`: directory entries looked at per listing, over all directories; the rest
    /// waits (logged once).
    pub max_entries: usize,
    /// `max_ranks`: (job, rank) pairs with series; past it the least recently updated job's
    /// series are dropped.
    pub max_ranks: usize,
    /// `max_attempts`: parses of an unchanged file before a parse error is final.
    pub max_attempts: u32,
    /// `max_analysis_time`: a parse running longer is stopped (counted as `timeout`).
    #[serde(deserialize_with = "de_duration")]
    pub max_analysis_time: Duration,
    /// `group_timeout`: how long after its last file a job missing ranks (fewer than its
    /// `distributedInfo.world_size`) waits before it is analysed with the ranks it has.
    #[serde(deserialize_with = "de_duration")]
    pub group_timeout: Duration,
    /// `max_event_bytes`: largest single JSON value (one event) accepted.
    pub max_event_bytes: usize,
    /// `max_decompressed_bytes`: largest decompressed text of a `.json.gz` (and of a
    /// `.json`) read; past it the file is counted as `over_limit`.
    pub max_decompressed_bytes: u64,
    /// `max_rows`: most rows (GPU rows, kernel launches, annotations) kept from one trace;
    /// past it the file is counted as `over_limit`.
    pub max_rows: u64,
    /// `max_worker_memory`: address-space limit (`RLIMIT_AS`, bytes) of the child process
    /// that analyses each file in the daemon; past it the file is counted as `out_of_memory`.
    pub max_worker_memory: u64,
    /// `analyze_existing`: also analyse the files already there, last modified more than 2 s
    /// before the source started (off: after a restart they would be counted a second time).
    pub analyze_existing: bool,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            directory: Vec::new(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_snapshot_bytes: DEFAULT_MAX_SNAPSHOT_BYTES,
            max_depth: DEFAULT_MAX_DEPTH,
            max_entries: DEFAULT_MAX_ENTRIES,
            max_ranks: DEFAULT_MAX_RANKS,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_analysis_time: DEFAULT_MAX_ANALYSIS_TIME,
            group_timeout: DEFAULT_GROUP_TIMEOUT,
            max_event_bytes: dgx_pixels_trace::DEFAULT_MAX_VALUE_BYTES,
            max_decompressed_bytes: DEFAULT_MAX_DECOMPRESSED_BYTES,
            max_rows: DEFAULT_MAX_ROWS,
            max_worker_memory: DEFAULT_MAX_WORKER_MEMORY,
            analyze_existing: false,
        }
    }
}

impl dgx_pixels_registry::TableOptions for TraceOptions {
    fn validate(
        &self,
        _: &dgx_pixels_registry::Check,
    ) -> Result<(), dgx_pixels_registry::SettingError> {
        TraceOptions::validate(self).map_err(|e| match e {
            TraceSourceError::Setting { key, why } => {
                dgx_pixels_registry::SettingError::new(format!("trace.{key}"), why)
            }
            other => dgx_pixels_registry::SettingError::new("trace", other.to_string()),
        })
    }
}

impl TraceOptions {
    /// Checks the values; the error names the key (`trace.KEY: why`).
    pub fn validate(&self) -> Result<(), TraceSourceError> {
        let positive = [
            ("max_file_bytes", self.max_file_bytes == 0),
            ("max_snapshot_bytes", self.max_snapshot_bytes == 0),
            ("max_entries", self.max_entries == 0),
            ("max_ranks", self.max_ranks == 0),
            ("max_attempts", self.max_attempts == 0),
            ("max_event_bytes", self.max_event_bytes == 0),
            ("max_analysis_time", self.max_analysis_time.is_zero()),
            ("max_decompressed_bytes", self.max_decompressed_bytes == 0),
            ("max_rows", self.max_rows == 0),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, zero)| *zero) {
            return Err(TraceSourceError::setting(key, "must be > 0"));
        }
        for (key, d) in [
            ("max_analysis_time", self.max_analysis_time),
            ("group_timeout", self.group_timeout),
        ] {
            if d > MAX_DURATION_SETTING {
                return Err(TraceSourceError::setting(
                    key,
                    format!(
                        "{} is over the maximum of {}",
                        humantime::format_duration(d),
                        humantime::format_duration(MAX_DURATION_SETTING)
                    ),
                ));
            }
        }
        if self.max_worker_memory < MIN_WORKER_MEMORY {
            return Err(TraceSourceError::setting(
                "max_worker_memory",
                format!(
                    "{} is under {MIN_WORKER_MEMORY} (the worker process could not start)",
                    self.max_worker_memory
                ),
            ));
        }
        if self.max_snapshot_bytes > dgx_pixels_trace::memory::MAX_SNAPSHOT_BYTES {
            return Err(TraceSourceError::setting(
                "max_snapshot_bytes",
                format!(
                    "over {} (the snapshot reader's own limit)",
                    dgx_pixels_trace::memory::MAX_SNAPSHOT_BYTES
                ),
            ));
        }
        if self.max_attempts > 16 {
            return Err(TraceSourceError::setting(
                "max_attempts",
                format!(
                    "{} is over 16 (each try waits twice as long as the last)",
                    self.max_attempts
                ),
            ));
        }
        if self.max_depth > 8 {
            return Err(TraceSourceError::setting(
                "max_depth",
                format!(
                    "{} is over 8 (each level multiplies the listing)",
                    self.max_depth
                ),
            ));
        }
        for d in &self.directory {
            if d.as_os_str().is_empty() {
                return Err(TraceSourceError::setting("directory", "an empty path"));
            }
            if d.to_str().is_none() {
                return Err(TraceSourceError::setting(
                    "directory",
                    format!("{} is not valid UTF-8", d.display()),
                ));
            }
        }
        Ok(())
    }
}

/// One path or a list of paths.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(PathBuf),
        Many(Vec<PathBuf>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(p) => vec![p],
        OneOrMany::Many(v) => v,
    })
}

/// A duration in humantime syntax ("500ms", "5s", "10m").
fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(s.trim()).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration {s:?} ({e}); use e.g. 500ms, 1s, 2m"
        ))
    })
}

/// What the worker hands to polls: the series it has finished, or why it cannot watch.
#[derive(Debug, Default)]
struct Published {
    samples: Vec<Sample>,
    error: Option<PollError>,
}

/// The state the worker and the polls share. The worker holds the lock only to swap in a
/// finished set of samples, never while listing or parsing.
#[derive(Debug, Default)]
struct Shared {
    published: Mutex<Published>,
    stop: Arc<AtomicBool>,
}

/// The `trace` source: a background worker watches and analyses, polls publish its results.
#[derive(Debug)]
pub struct TraceSource {
    shared: Arc<Shared>,
    worker: JoinHandle<()>,
}

impl TraceSource {
    /// Checks `options` and starts the worker thread, which lists the directories every
    /// `interval` and analyses in process (tests; the daemon uses [`TraceSource::start_with`]).
    pub fn start(
        options: TraceOptions,
        interval: Duration,
    ) -> Result<TraceSource, TraceSourceError> {
        TraceSource::start_with(options, interval, Arc::new(InProcess), None)
    }

    /// Like [`TraceSource::start`], with the analyzer that analyses each file and, across
    /// reloads, the [`Handoff`] through which this source takes over the state of the one it
    /// replaces (and leaves its own when it stops).
    pub fn start_with(
        options: TraceOptions,
        interval: Duration,
        analyzer: Arc<dyn Analyzer>,
        handoff: Option<Arc<Handoff>>,
    ) -> Result<TraceSource, TraceSourceError> {
        options.validate()?;
        if options.directory.is_empty() {
            return Err(TraceSourceError::setting(
                "directory",
                "no directory to watch",
            ));
        }
        let shared = Arc::new(Shared::default());
        let worker = worker::spawn(options, interval, Arc::clone(&shared), analyzer, handoff)
            .map_err(TraceSourceError::Thread)?;
        Ok(TraceSource { shared, worker })
    }
}

/// How long a new source waits for the one it replaces to stop and leave its state before it
/// starts listing on its own (the old one's state is then taken at a later listing).
pub const HANDOFF_WAIT: Duration = Duration::from_secs(10);

/// What a stopped source leaves the next across a reload: the files waiting (the one in
/// analysis included: a stop cancels its analysis and it stays waiting), the files finished,
/// the counters and the jobs' ranks. A reload builds the new source before it stops the old
/// one: the new worker waits (at most [`HANDOFF_WAIT`]) until every older source has stopped
/// and left its state, then takes it over. Held by the exporter for the life of the process.
#[derive(Debug, Default)]
pub struct Handoff {
    inner: Mutex<HandoffInner>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct HandoffInner {
    /// Sources started and not yet stopped.
    live: usize,
    kept: Option<worker::Kept>,
}

impl Handoff {
    fn lock(&self) -> std::sync::MutexGuard<'_, HandoffInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A source starts: whether others are still running (to wait for).
    fn register(&self) -> bool {
        let mut g = self.lock();
        g.live += 1;
        g.live > 1
    }

    /// A source stopped, leaving `kept` (merged over anything older left there).
    fn deregister(&self, kept: Option<worker::Kept>) {
        let mut g = self.lock();
        g.live = g.live.saturating_sub(1);
        if let Some(mut kept) = kept {
            if let Some(older) = g.kept.take() {
                kept.merge_older(older);
            }
            g.kept = Some(kept);
        }
        drop(g);
        self.changed.notify_all();
    }

    /// Waits until the older sources have stopped (when `wait`), at most [`HANDOFF_WAIT`] or
    /// until `stop`, and takes what they left.
    fn wait_take(&self, wait: bool, stop: &AtomicBool) -> Option<worker::Kept> {
        let until = Instant::now() + HANDOFF_WAIT;
        let mut g = self.lock();
        while wait && g.live > 1 && !stop.load(Ordering::Relaxed) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    "the trace source it replaces has not stopped after {HANDOFF_WAIT:?}; its files are taken over when it does"
                );
                break;
            }
            // Short waits: the stop flag is not signalled through the condvar.
            let (next, _) = self
                .changed
                .wait_timeout(g, left.min(Duration::from_millis(100)))
                .unwrap_or_else(PoisonError::into_inner);
            g = next;
        }
        g.kept.take()
    }

    /// What an older source left after this one stopped waiting for it.
    fn take_late(&self) -> Option<worker::Kept> {
        self.lock().kept.take()
    }
}

impl Drop for TraceSource {
    fn drop(&mut self) {
        // The worker stops at its next check (a running parse is cancelled at its next read).
        self.shared.stop.store(true, Ordering::Relaxed);
        self.worker.thread().unpark();
    }
}

impl Source for TraceSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        if self.worker.is_finished() {
            return Err(PollError::new(
                PollErrorKind::Runtime,
                "the trace worker thread has stopped",
            ));
        }
        let published = self.shared.published.lock().map_err(|_| {
            PollError::new(PollErrorKind::Runtime, "the trace worker thread panicked")
        })?;
        match &published.error {
            Some(e) => Err(e.clone()),
            None => Ok(PollOutput::samples(published.samples.clone())),
        }
    }
}

#[cfg(test)]
mod tests;
