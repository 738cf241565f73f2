//! The one background thread: lists the directories every interval, analyses the ready files
//! one at a time at the lowest CPU priority, and publishes the series after each file.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dgx_pixels_metrics::{PollError, PollErrorKind};

use super::analyzer::{Analysed, AnalysisFailure, AnalysisRequest, Analyzer};
use super::group::Groups;
use super::series::{job_label, Outcome, Series};
use super::watch::{is_snapshot_name, Ready, Watcher};
use super::{Handoff, Shared, TraceOptions};
use dgx_pixels_trace::analysis::rank_from_name;

/// Starts the worker. Files last modified more than [`EXISTING_MARGIN`] before now that its
/// first listing finds were there before the source: left alone unless `analyze_existing`.
/// With `handoff`, the state of the source this one replaces is taken over when that one
/// stops (see [`Handoff`]), and this one's state is left there when it stops.
pub(super) fn spawn(
    options: TraceOptions,
    interval: Duration,
    shared: Arc<Shared>,
    analyzer: Arc<dyn Analyzer>,
    handoff: Option<Arc<Handoff>>,
) -> std::io::Result<JoinHandle<()>> {
    // Taken here, not on the thread: a file written just after `start` returns is new.
    let started = SystemTime::now()
        .checked_sub(EXISTING_MARGIN)
        .unwrap_or(UNIX_EPOCH);
    let ticket = handoff.map(|h| {
        let waits_for = h.register();
        (h, waits_for)
    });
    let spawned = std::thread::Builder::new()
        .name("trace-analysis".into())
        .spawn({
            let ticket = ticket.clone();
            move || {
                lower_priority();
                let mut worker = Worker::new(options, interval, shared, started, analyzer);
                let Some((handoff, waits_for)) = ticket else {
                    worker.run();
                    return;
                };
                // Leaves the state for the next source even if the worker panics.
                let mut guard = Deposit {
                    handoff,
                    worker: None,
                };
                if let Some(kept) = guard.handoff.wait_take(waits_for, &worker.shared.stop) {
                    worker.adopt(kept);
                }
                worker.handoff = Some(Arc::clone(&guard.handoff));
                worker.run();
                guard.worker = Some(worker);
            }
        });
    if spawned.is_err() {
        if let Some((h, _)) = &ticket {
            h.deregister(None);
        }
    }
    spawned
}

/// Hands the stopped worker's state over (or just says it stopped) when dropped.
struct Deposit {
    handoff: Arc<Handoff>,
    worker: Option<Worker>,
}

impl Drop for Deposit {
    fn drop(&mut self) {
        let kept = self.worker.take().map(Worker::into_kept);
        self.handoff.deregister(kept);
    }
}

/// What one source leaves the next across a reload.
#[derive(Debug)]
pub(super) struct Kept {
    watcher: Watcher,
    series: Series,
    groups: Groups,
}

impl Kept {
    /// Takes in what a source older than this one left (it stopped only after this one's
    /// source had given up waiting for it): the newer files state stands, the counts add.
    pub(super) fn merge_older(&mut self, older: Kept) {
        let mut series = older.series;
        std::mem::swap(&mut series, &mut self.series);
        self.series.absorb(series);
    }
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
    analyzer: Arc<dyn Analyzer>,
    /// Where a source stopped after this one started leaves its state (taken late).
    handoff: Option<Arc<Handoff>>,
    watcher: Watcher,
    series: Series,
    groups: Groups,
    /// Trace-named files the last listing did not look at.
    unlisted: usize,
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
        analyzer: Arc<dyn Analyzer>,
    ) -> Worker {
        Worker {
            watcher: Watcher::new(options.clone(), started),
            series: Series::new(options.max_ranks),
            groups: Groups::new(options.max_ranks, options.group_timeout),
            options,
            interval,
            shared,
            analyzer,
            handoff: None,
            unlisted: 0,
            logged: Vec::new(),
            truncated_logged: false,
        }
    }

    /// Takes over the state of the source this one replaces: its waiting and finished files,
    /// its counters and its jobs' ranks (under this one's bounds).
    fn adopt(&mut self, kept: Kept) {
        self.watcher.adopt(kept.watcher);
        let mut series = kept.series;
        series.set_max_ranks(self.options.max_ranks);
        series.absorb(std::mem::replace(&mut self.series, Series::new(1)));
        self.series = series;
        let mut groups = kept.groups;
        groups.reconfigure(self.options.max_ranks, self.options.group_timeout);
        self.groups = groups;
        tracing::debug!(
            pending = self.watcher.pending(),
            "trace source took over the state of the one it replaces"
        );
    }

    fn into_kept(self) -> Kept {
        Kept {
            watcher: self.watcher,
            series: self.series,
            groups: self.groups,
        }
    }

    fn stopped(&self) -> bool {
        self.shared.stop.load(Ordering::Relaxed)
    }

    fn run(&mut self) {
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
        // A source that stopped only after this one gave up waiting for it.
        if let Some(kept) = self.handoff.as_ref().and_then(|h| h.take_late()) {
            self.adopt(kept);
        }
        let scan = self.watcher.scan();
        self.unlisted = scan.unlisted;
        for (path, why) in &scan.skipped {
            tracing::debug!(file = %path.display(), outcome = why.as_str(), "trace file name left alone");
            self.series.count(*why);
        }
        if scan.unreadable != self.logged {
            for e in &scan.unreadable {
                tracing::warn!("trace directory {e}");
            }
            self.logged = scan.unreadable.clone();
        }
        if scan.truncated && !self.truncated_logged {
            tracing::warn!(
                max_entries = self.options.max_entries,
                read = self.options.max_entries.saturating_mul(super::watch::READ_FACTOR),
                "trace directories hold more entries than a listing reads (16 x [trace] max_entries); the rest is not read"
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
        let mut samples = self.series.samples(self.watcher.pending(), self.unlisted);
        self.groups.samples(&mut samples);
        if let Ok(mut p) = self.shared.published.lock() {
            p.samples = samples;
            p.error = error;
        }
    }

    /// Analyses one file (through the analyzer: in the daemon, a child process), as `trace
    /// analyze FILE` does, and records the outcome.
    fn analyse(&mut self, ready: &Ready) {
        let started = Instant::now();
        let snapshot = ready
            .path
            .file_name()
            .is_some_and(|n| is_snapshot_name(&n.to_string_lossy()));
        let request = AnalysisRequest {
            path: ready.path.clone(),
            snapshot,
            dev: ready.id.key.dev,
            ino: ready.id.key.ino,
            max_event_bytes: self.options.max_event_bytes,
            max_decompressed_bytes: self.options.max_decompressed_bytes,
            max_rows: self.options.max_rows,
            max_snapshot_bytes: self.options.max_snapshot_bytes,
            max_analysis_ms: u64::try_from(self.options.max_analysis_time.as_millis())
                .unwrap_or(u64::MAX),
        };
        let result = self.analyzer.analyse(&request, &self.shared.stop);
        self.series
            .cost(started.elapsed().as_secs_f64(), ready.id.size);
        // A file that changed after the listing was still being written: what the analysis
        // read is not the version listed, and counting it would count the file again once
        // it is stable (and add its times twice). It is analysed again when stable.
        if result.is_ok() && super::watch::FileId::now(&ready.path) != Some(ready.id) {
            tracing::debug!(file = %ready.path.display(), "trace file changed while it was analysed; it is analysed again once stable");
            return;
        }
        let (outcome, retry, why) = match result {
            Ok(Analysed::Snapshot(report)) => {
                let rank = rank_from_name(&ready.path).map_or(String::new(), |r| r.to_string());
                self.series.snapshot(&job_label(&ready.job), &rank, &report);
                (Outcome::Analysed, false, String::new())
            }
            Ok(Analysed::Trace(world, ranks)) => {
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
            // Shutting down or replaced by a reload: neither analysed nor failed; the file
            // stays waiting (for the next source).
            Err(AnalysisFailure {
                cancelled: true, ..
            }) => return,
            Err(f) if self.stopped() => {
                tracing::debug!(file = %ready.path.display(), "trace analysis ended by the stop: {}", f.message);
                return;
            }
            Err(f) => (f.outcome, f.retry, f.message),
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
