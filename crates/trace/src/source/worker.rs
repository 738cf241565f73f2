//! The one background thread: lists the directories every interval, analyses the ready files
//! one at a time at the lowest CPU priority, and publishes the series after each file.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dgx_pixels_metrics::{PollError, PollErrorKind};

use super::group::Groups;
use super::series::{job_label, Outcome, Series};
use super::watch::{is_snapshot_name, Ready, Watcher};
use super::{Shared, TraceOptions};
use crate::analysis::{analyze_ranks, rank_from_name, AnalyzeOptions, RankAnalysis};
use crate::memory::{read_snapshot_with, SnapshotOptions, SnapshotReport};
use crate::parse::{parse_file, ParseOptions, CANCELLED};
use crate::pickle::Limits;
use crate::TraceError;

/// Starts the worker.
/// Starts the worker. Files last modified more than [`EXISTING_MARGIN`] before now that its
/// first listing finds were there before the source: left alone unless `analyze_existing`.
pub(super) fn spawn(
    options: TraceOptions,
    interval: Duration,
    shared: Arc<Shared>,
) -> std::io::Result<JoinHandle<()>> {
    // Taken here, not on the thread: a file written just after `start` returns is new.
    let started = SystemTime::now()
        .checked_sub(EXISTING_MARGIN)
        .unwrap_or(UNIX_EPOCH);
    std::thread::Builder::new()
        .name("trace-analysis".into())
        .spawn(move || {
            lower_priority();
            Worker::new(options, interval, shared, started).run();
        })
}

/// How far before the start a file must have been modified to count as already there: file
/// systems stamp modification times from a coarse clock that can lag the system time by a
/// tick, so a file written just after the start may carry an earlier time.
pub const EXISTING_MARGIN: Duration = Duration::from_secs(2);

/// Puts the calling thread at the lowest CPU priority: `SCHED_IDLE` (it runs when nothing
/// else wants the CPU), else nice 19. Linux applies both per thread, so the daemon's other
/// threads keep theirs.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority with PRIO_PROCESS and who = 0 changes the nice value of the
        // calling thread (Linux: per thread); it takes no pointers.
        let nice = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param that outlives
        // the call. An unprivileged thread may always switch to SCHED_IDLE.
        let idle = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
        tracing::debug!(
            nice_19 = nice == 0,
            sched_idle = idle == 0,
            "trace analysis thread priority lowered"
        );
    }
}

struct Worker {
    options: TraceOptions,
    interval: Duration,
    shared: Arc<Shared>,
    watcher: Watcher,
    series: Series,
    groups: Groups,
    /// The last directory errors logged (logged again only when they change).
    logged: Vec<String>,
    truncated_logged: bool,
}

impl Worker {
    fn new(
        options: TraceOptions,
        interval: Duration,
        shared: Arc<Shared>,
        started: SystemTime,
    ) -> Worker {
        Worker {
            watcher: Watcher::new(options.clone(), started),
            series: Series::new(options.max_ranks),
            groups: Groups::new(options.max_ranks, options.group_timeout),
            options,
            interval,
            shared,
            logged: Vec::new(),
            truncated_logged: false,
        }
    }

    fn stopped(&self) -> bool {
        self.shared.stop.load(Ordering::Relaxed)
    }

    fn run(mut self) {
        while !self.stopped() {
            let started = Instant::now();
            self.once();
            // Sleep out the interval; Drop unparks to stop at once.
            while !self.stopped() {
                let left = self.interval.saturating_sub(started.elapsed());
                if left.is_zero() {
                    break;
                }
                std::thread::park_timeout(left);
            }
        }
    }

    /// One listing and the analysis of what it found ready.
    fn once(&mut self) {
        let scan = self.watcher.scan();
        if scan.unreadable != self.logged {
            for e in &scan.unreadable {
                tracing::warn!("trace directory {e}");
            }
            self.logged = scan.unreadable.clone();
        }
        if scan.truncated && !self.truncated_logged {
            tracing::warn!(
                max_entries = self.options.max_entries,
                "trace directories hold more than [trace] max_entries entries; the rest is not looked at"
            );
        }
        self.truncated_logged = scan.truncated;
        for path in &scan.too_large {
            tracing::warn!(
                file = %path.display(),
                max_file_bytes = self.options.max_file_bytes,
                "trace file not analysed: larger than [trace] max_file_bytes"
            );
            self.series.count(Outcome::TooLarge);
        }
        let error = scan.all_unreadable.then(|| {
            PollError::new(
                PollErrorKind::DirectoryUnreadable,
                format!(
                    "no trace directory can be read: {}",
                    scan.unreadable.join("; ")
                ),
            )
        });
        self.publish(error.clone());
        for ready in &scan.ready {
            if self.stopped() {
                return;
            }
            self.analyse(ready);
            self.publish(error.clone());
        }
        if self.groups.evaluate(Instant::now()) > 0 {
            self.publish(error);
        }
    }

    fn publish(&self, error: Option<PollError>) {
        let mut samples = self.series.samples(self.watcher.pending());
        self.groups.samples(&mut samples);
        if let Ok(mut p) = self.shared.published.lock() {
            p.samples = samples;
            p.error = error;
        }
    }

    /// Parses and analyses one file, as `trace analyze FILE` does, and records the outcome.
    fn analyse(&mut self, ready: &Ready) {
        let started = Instant::now();
        let snapshot = ready
            .path
            .file_name()
            .is_some_and(|n| is_snapshot_name(&n.to_string_lossy()));
        let deadline = started.checked_add(self.options.max_analysis_time);
        let opts = ParseOptions {
            max_value_bytes: self.options.max_event_bytes,
            progress: None,
            cancel: Some(Arc::clone(&self.shared.stop)),
            deadline,
            max_text_bytes: self.options.max_decompressed_bytes,
            max_rows: self.options.max_rows,
            listed: Some(ready.id.key),
        };
        let snapshot_opts = SnapshotOptions {
            max_bytes: self.options.max_snapshot_bytes,
            limits: Limits {
                max_bytes: 0,
                max_depth: 0,
                deadline,
                cancel: Some(Arc::clone(&self.shared.stop)),
            },
            listed: Some(ready.id.key),
        };
        let result = catch_unwind(AssertUnwindSafe(|| {
            if snapshot {
                return read_snapshot_with(&ready.path, &snapshot_opts).map(Analysed::Snapshot);
            }
            parse_file(&ready.path, &opts).and_then(|t| {
                let world = t.world_size;
                analyze_ranks(std::slice::from_ref(&t), &AnalyzeOptions::default())
                    .map(|ranks| Analysed::Trace(world, ranks))
            })
        }));
        self.series
            .cost(started.elapsed().as_secs_f64(), ready.id.size);
        let (outcome, retry, why) = match result {
            Ok(Ok(Analysed::Snapshot(report))) => {
                let rank = rank_from_name(&ready.path).map_or(String::new(), |r| r.to_string());
                self.series.snapshot(&job_label(&ready.job), &rank, &report);
                (Outcome::Analysed, false, String::new())
            }
            Ok(Ok(Analysed::Trace(world, ranks))) => {
                let job = job_label(&ready.job);
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                for rank in ranks {
                    self.series.add(&job, &rank.report, now);
                    self.groups.add(&job, world, rank, Instant::now());
                }
                (Outcome::Analysed, false, String::new())
            }
            Ok(Err(e)) => {
                if self.stopped() && is_cancelled(&e) {
                    return; // shutting down: neither analysed nor failed
                }
                let (o, retry) = classify(&e);
                (o, retry, e.to_string())
            }
            Err(panic) => (
                Outcome::InternalError,
                false,
                dgx_pixels_metrics::panic_message(panic.as_ref()).to_string(),
            ),
        };
        if self.watcher.finished(ready, !retry) {
            if outcome != Outcome::Analysed {
                tracing::warn!(file = %ready.path.display(), outcome = outcome.as_str(), "trace file not analysed: {why}");
            }
            self.series.count(outcome);
        } else {
            tracing::debug!(file = %ready.path.display(), "trace file incomplete, will retry: {why}");
        }
    }
}

/// What one file gave.
enum Analysed {
    /// A trace: its world size and its rank(s).
    Trace(Option<u64>, Vec<RankAnalysis>),
    /// A memory snapshot.
    Snapshot(SnapshotReport),
}

fn is_cancelled(e: &TraceError) -> bool {
    matches!(e, TraceError::Io { source, .. } if source.to_string().contains(CANCELLED))
}

/// The outcome of a failed analysis and whether trying the unchanged file again may help (a
/// file still being written).
pub(super) fn classify(e: &TraceError) -> (Outcome, bool) {
    use std::io::ErrorKind;
    match e {
        TraceError::Truncated { .. } => (Outcome::Truncated, true),
        TraceError::Json { .. } => (Outcome::ParseError, true),
        TraceError::Io { source, .. } => match source.kind() {
            ErrorKind::TimedOut => (Outcome::Timeout, false),
            // A corrupt gzip stream (possibly one still being written).
            ErrorKind::InvalidData | ErrorKind::InvalidInput => (Outcome::ParseError, true),
            ErrorKind::NotFound => (Outcome::Unreadable, false),
            _ => (Outcome::Unreadable, true),
        },
        TraceError::NotATrace { .. } => (Outcome::NotATrace, false),
        // A snapshot pickled into place may be incomplete.
        TraceError::Snapshot { .. } => (Outcome::ParseError, true),
        TraceError::ValueTooLarge { .. } | TraceError::Input(_) => (Outcome::ParseError, false),
        TraceError::OverLimit { .. } => (Outcome::OverLimit, false),
        TraceError::Replaced { .. } => (Outcome::Replaced, false),
    }
}
