//! The `kmsg` source: reads the kernel log on each poll (never blocking), records the XIDs it
//! finds in the shared [`XidLedger`] and serves its own counts (SXids, fallen off the bus) and
//! self-metrics.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dgx_pixels_metrics::{
    Metric, PollError, PollErrorKind, PollOutput, Sample, Source, XidLedger, XidOrigin,
};
use tracing::{info, warn};

use crate::directory::{GpuDirectory, KnownGpu};
use crate::parse::Event;
use crate::reader::{Kind, Reader};
use crate::state::{self, Progress};
use crate::KmsgOptions;

mod ingest;
use ingest::{resolve, Counted, Ingest};

/// How often the state file is written at most while records arrive.
pub const STATE_INTERVAL: Duration = Duration::from_secs(5);
/// Events kept while no GPU source has said which GPU has which PCI address (at start, or
/// while NVML is down); past this, the oldest are dropped and counted (`reason="dropped"`).
pub const MAX_PENDING_EVENTS: usize = 1024;

/// Every `reason` of `dgx_pixels_kmsg_errors_total`, all served from the first poll.
pub const REASONS: [&str; 14] = [
    "malformed",
    "not_kernel",
    "bad_seq",
    "seq_gap",
    "seq_repeat",
    "seq_restart",
    "too_long",
    "overrun",
    "unknown_gpu",
    "unknown_xid",
    "dropped",
    "too_many_series",
    "read_error",
    "state_write",
];

/// What the readers of each kernel-log path have processed, shared by a source and its
/// successors after a reload (which builds the new source before stopping the old one), so a
/// restart in the process neither repeats nor skips records, and switching `[kmsg] path` away
/// and back does not count the first log again. Create one per process; it starts empty.
pub type SharedProgress = Arc<Mutex<Progresses>>;

/// Most kernel-log paths whose progress a process keeps; the least recently read is forgotten
/// past this (its state file stays).
pub const MAX_PATHS: usize = 16;

/// Sequence numbers at or above this are refused from any source (the kernel's count of
/// records since boot would take years at a million records a second to get here), so a
/// forged number near `u64::MAX` can never make every later record look already counted.
pub const MAX_SEQ: u64 = 1 << 48;
/// From a file or FIFO (not `/dev/kmsg`, whose numbers the kernel gives), a sequence number
/// more than this past the last one is refused unless the record after it continues from it,
/// and one more than this below the last one means the log started over.
pub const MAX_SEQ_JUMP: u64 = 1 << 24;

/// Records of the current numbering of a file or FIFO remembered (sequence number and the
/// hash of the line), so that one read again is told from a numbering that started over.
pub const SEQ_WINDOW: usize = 4096;

/// The progress per path (see [`SharedProgress`]).
#[derive(Debug, Default)]
pub struct Progresses {
    by_path: BTreeMap<PathBuf, Tracked>,
    /// Paths, least recently read first.
    order: VecDeque<PathBuf>,
}

impl Progresses {
    fn get_mut(&mut self, path: &Path) -> Option<&mut Tracked> {
        self.by_path.get_mut(path)
    }

    fn insert(&mut self, path: PathBuf, tracked: Tracked) {
        self.order.retain(|p| p != &path);
        while self.order.len() >= MAX_PATHS {
            if let Some(old) = self.order.pop_front() {
                self.by_path.remove(&old);
            }
        }
        self.order.push_back(path.clone());
        self.by_path.insert(path, tracked);
    }
}

/// The progress on one path and the events read but not yet mapped to a GPU.
#[derive(Debug)]
pub struct Tracked {
    progress: Progress,
    pending: VecDeque<(Event, Instant)>,
    /// Whether the state file can be written (checked once per process and path).
    writable: bool,
    /// A sequence number that jumped too far, held until the next record confirms it.
    jump: Option<u64>,
    /// The last [`SEQ_WINDOW`] records of the current numbering read from a file or FIFO
    /// (sequence number, hash of the line), in order.
    window: VecDeque<(u64, u64)>,
}

/// What a record's sequence number says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seq {
    /// The next one: process it.
    New,
    /// Past the next one (records are missing): process it, count the gap.
    Gap,
    /// At or below the last one, and not a record read before: the writer's numbering
    /// started over (a new boot, a rotated file). Process it, count it.
    Restart,
    /// A record read before, written again (a helper that replays the log): skip it, count it.
    Repeat,
    /// `/dev/kmsg` replaying its ring buffer to a new reader: skip what was processed.
    Replayed,
    /// Not a believable number: skip it, count it, never remember it.
    Bad,
}

/// Judges the record numbered `seq` whose line hashes to `fp` against what was read (see
/// [`MAX_SEQ`], [`MAX_SEQ_JUMP`], [`SEQ_WINDOW`] and docs/kmsg.md), and remembers it when it
/// is processed.
fn judge_seq(
    kind: Kind,
    progress: &mut Progress,
    window: &mut VecDeque<(u64, u64)>,
    jump: &mut Option<u64>,
    seq: u64,
    fp: u64,
) -> Seq {
    if seq >= MAX_SEQ {
        return Seq::Bad;
    }
    // The kernel numbers /dev/kmsg itself: one boot, one numbering, no repeats.
    let trusted = kind == Kind::CharDevice;
    let verdict = match progress.seq {
        None => {
            progress.start = Some((seq, fp));
            Seq::New
        }
        Some(last) if seq > last => {
            if trusted || seq - last <= MAX_SEQ_JUMP {
                *jump = None;
                if seq == last + 1 {
                    Seq::New
                } else {
                    Seq::Gap
                }
            } else {
                // A jump: believed once the next record continues from it (a filtered log can
                // skip millions of records; one garbled or forged number cannot).
                let confirmed = jump.is_some_and(|j| seq > j && seq - j <= MAX_SEQ_JUMP);
                *jump = if confirmed { None } else { Some(seq) };
                if confirmed {
                    Seq::Gap
                } else {
                    Seq::Bad
                }
            }
        }
        Some(_) if trusted => Seq::Replayed,
        Some(last) => {
            // At or below the last one: the same line read before is a repeat; another line
            // under a number read before, a number below the first one read of this
            // numbering, or one far below the last (after a jump) starts a new numbering.
            let known = window
                .binary_search_by_key(&seq, |&(s, _)| s)
                .ok()
                .map(|i| window[i].1)
                .or(progress.start.filter(|s| s.0 == seq).map(|s| s.1));
            let restart = match known {
                Some(read) => read != fp,
                None => {
                    progress.start.is_some_and(|(first, _)| seq < first)
                        || last - seq > MAX_SEQ_JUMP
                }
            };
            if !restart {
                return Seq::Repeat;
            }
            progress.start = Some((seq, fp));
            window.clear();
            *jump = None;
            Seq::Restart
        }
    };
    if matches!(verdict, Seq::New | Seq::Gap | Seq::Restart) {
        progress.seq = Some(seq);
        if !trusted {
            if window.len() >= SEQ_WINDOW {
                window.pop_front();
            }
            window.push_back((seq, fp));
        }
    }
    verdict
}

/// The source. See the crate docs.
pub struct KmsgSource {
    options: KmsgOptions,
    ledger: Arc<XidLedger>,
    directory: Box<dyn GpuDirectory>,
    shared: SharedProgress,
    reader: Option<Reader>,
    records: u64,
    errors: BTreeMap<&'static str, u64>,
    last_save: Option<Instant>,
    dirty: bool,
}

impl KmsgSource {
    /// A source reading `options.path`, recording XIDs in `ledger`, mapping addresses through
    /// `directory`, continuing from `shared` when it holds progress on the same path.
    pub fn new(
        options: KmsgOptions,
        ledger: Arc<XidLedger>,
        directory: Box<dyn GpuDirectory>,
        shared: SharedProgress,
    ) -> KmsgSource {
        KmsgSource {
            options,
            ledger,
            directory,
            shared,
            reader: None,
            records: 0,
            errors: REASONS.iter().map(|r| (*r, 0)).collect(),
            last_save: None,
            dirty: false,
        }
    }

    fn state_path(&self) -> Option<PathBuf> {
        self.options
            .state_directory
            .as_ref()
            .filter(|d| !d.as_os_str().is_empty())
            .map(|d| d.join(state::file_name(&self.options.path)))
    }

    /// The progress to continue from: the state file's when it is of this boot and path,
    /// else none (and whether the state file can be written).
    fn start(&self) -> Result<Tracked, PollError> {
        let boot = state::boot_id(&self.options.boot_id_path).map_err(|e| {
            PollError::new(
                PollErrorKind::FileUnreadable,
                format!(
                    "cannot read the boot id from {}: {e}",
                    self.options.boot_id_path.display()
                ),
            )
        })?;
        let path_text = self.options.path.display().to_string();
        let fresh = || Progress {
            boot_id: boot.clone(),
            path: path_text.clone(),
            ..Default::default()
        };
        let Some(path) = self.state_path() else {
            warn!(kmsg = %self.options.path.display(), "no [kmsg] state_directory: restarts are not replay-protected; counting kernel-log records from now");
            return Ok(self.tracked(fresh(), false));
        };
        let loaded = match state::load(&path) {
            // Before per-path state files, every log's state was `kmsg.state`.
            Ok(None) => path
                .parent()
                .map(|d| state::load(&d.join(state::FILE_NAME)))
                .unwrap_or(Ok(None)),
            other => other,
        };
        let progress = match loaded {
            Ok(Some(p)) if p.boot_id == boot && p.path == path_text => {
                info!(state = %path.display(), seq = ?p.seq, "kmsg: resuming after the last record counted in this boot");
                p
            }
            Ok(Some(p)) if p.boot_id == boot => {
                info!(state = %path.display(), was = %p.path, "kmsg: the state is of another kernel log; counting this one from its start");
                fresh()
            }
            Ok(Some(_)) => {
                info!(state = %path.display(), "kmsg: new boot; counting its kernel log from the start");
                fresh()
            }
            Ok(None) => fresh(),
            Err(e) => {
                warn!(error = %e, "kmsg: state file unusable; counting this boot's kernel log from the start");
                fresh()
            }
        };
        let writable = std::fs::create_dir_all(path.parent().unwrap_or(&path))
            .and_then(|()| state::save(&path, &progress));
        if let Err(e) = &writable {
            warn!(state = %path.display(), error = %e, "kmsg: cannot write the state file: restarts are not replay-protected; counting kernel-log records from now");
        }
        let writable = writable.is_ok();
        let progress = if writable { progress } else { fresh() };
        Ok(self.tracked(progress, writable))
    }

    fn tracked(&self, progress: Progress, writable: bool) -> Tracked {
        // What a previous process counted is counted again in the ledger (a no-op when this
        // process's ledger already has it).
        for ((uuid, code), n) in &progress.xids {
            self.ledger.seed(uuid, *code, XidOrigin::KernelLog, *n);
        }
        Tracked {
            progress,
            pending: VecDeque::new(),
            writable,
            jump: None,
            window: VecDeque::new(),
        }
    }
}

/// `CLOCK_MONOTONIC` in microseconds: the clock of `/dev/kmsg` timestamps.
fn monotonic_us() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } == 0;
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    ok.then(|| secs * 1_000_000 + nanos / 1000)
}

/// When a record was logged: its kernel timestamp on `/dev/kmsg`; when it was read otherwise
/// (a file's timestamps may come from anywhere).
fn logged_at(kind: Kind, timestamp_us: u64, now: Instant, mono_us: Option<u64>) -> Instant {
    match (kind, mono_us) {
        (Kind::CharDevice, Some(m)) if timestamp_us <= m => now
            .checked_sub(Duration::from_micros(m - timestamp_us))
            .unwrap_or(now),
        _ => now,
    }
}

impl Source for KmsgSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let shared = Arc::clone(&self.shared);
        let mut guard = shared.lock().unwrap_or_else(PoisonError::into_inner);
        self.track(&mut guard)?;
        let Some(tracked) = guard.get_mut(&self.options.path) else {
            return Err(PollError::new(PollErrorKind::Config, "kmsg: no progress"));
        };
        if self.reader.is_none() {
            self.open(tracked)?;
        }
        let (now, mono) = (Instant::now(), monotonic_us());
        // Known before reading, so events are counted as they are read: no queue between
        // reading and counting that a burst could overflow.
        let gpus = self.directory.gpus();
        let (read, counted) = self.read_log(tracked, gpus.as_deref(), now, mono);
        let pending_empty = tracked.pending.is_empty();
        let writable = tracked.writable;
        drop(guard);
        self.account(read, counted)?;
        // The state is written only with nothing pending, so it never claims a record whose
        // event is not counted yet.
        let due = self.last_save.is_none_or(|t| t.elapsed() >= STATE_INTERVAL);
        if writable && self.dirty && due && pending_empty {
            self.save_state();
            self.last_save = Some(Instant::now());
        }
        let guard = shared.lock().unwrap_or_else(PoisonError::into_inner);
        let progress = guard.by_path.get(&self.options.path).map(|t| &t.progress);
        Ok(PollOutput::samples(self.samples(progress, gpus.as_deref())))
    }
}

impl KmsgSource {
    /// Makes this path the most recently read of `progresses`, starting its progress (from
    /// the state file, or afresh) when the process has none for it.
    fn track(&self, progresses: &mut Progresses) -> Result<(), PollError> {
        if progresses.get_mut(&self.options.path).is_none() {
            let tracked = self.start()?;
            progresses.insert(self.options.path.clone(), tracked);
        } else {
            let path = self.options.path.clone();
            progresses.order.retain(|p| p != &path);
            progresses.order.push_back(path);
        }
        Ok(())
    }

    /// Opens the kernel log where `tracked` says reading continues.
    fn open(&mut self, tracked: &Tracked) -> Result<(), PollError> {
        // Without a state file, what the log holds now was logged before we started.
        let from_end = !tracked.writable && tracked.progress.seq.is_none();
        let opened = if from_end {
            Reader::open(&self.options.path, true).map(|r| (r, false))
        } else {
            // A regular file read before continues after its last line read: a restart
            // or reload reads nothing twice and skips nothing.
            Reader::open_at(&self.options.path, tracked.progress.position.as_ref())
        };
        let (reader, resumed) = opened.map_err(|e| {
            PollError::new(
                PollErrorKind::FileUnreadable,
                format!(
                    "cannot open the kernel log {}: {e}; reading /dev/kmsg needs CAP_SYSLOG (or root) when kernel.dmesg_restrict=1 (see docs/kmsg.md)",
                    self.options.path.display()
                ),
            )
        })?;
        info!(path = %self.options.path.display(), kind = ?reader.kind(), from_end, resumed, "kmsg: reading the kernel log");
        self.reader = Some(reader);
        Ok(())
    }

    /// Reads what the log holds for one poll (at most [`READ_BUDGET`]), counting into
    /// `tracked` as it goes; events read before the GPU list was known go first, in order.
    fn read_log(
        &mut self,
        tracked: &mut Tracked,
        gpus: Option<&[KnownGpu]>,
        now: Instant,
        mono: Option<u64>,
    ) -> (io::Result<()>, Counted) {
        let Tracked {
            progress,
            pending,
            jump,
            window,
            ..
        } = tracked;
        let mut counted = Counted::default();
        if let Some(gpus) = gpus {
            while let Some((event, at)) = pending.pop_front() {
                resolve(event, at, gpus, progress, &self.ledger, &mut counted.tally);
            }
        }
        let Some(reader) = self.reader.as_mut() else {
            return (Ok(()), counted);
        };
        let mut ingest = Ingest {
            kind: reader.kind(),
            progress,
            window,
            jump,
            pending,
            gpus,
            ledger: &self.ledger,
            now,
            mono,
            counted,
        };
        let read = reader.read(Instant::now() + READ_BUDGET, |line| ingest.line(line));
        // How far a regular file was read: every line up to there is accounted for above.
        if let Some(at) = reader.position() {
            ingest.counted.read_more |= ingest.progress.position != Some(at);
            ingest.progress.position = Some(at);
        }
        (read, ingest.counted)
    }

    /// Adds one poll's counts to the source's, logs its XIDs, and says whether the kernel log
    /// is being read: a read error closes the reader (reopened at the next poll) and fails
    /// the poll.
    fn account(&mut self, read: io::Result<()>, counted: Counted) -> Result<(), PollError> {
        for ((gpu, xid), (n, from_nvml)) in &counted.tally.xids {
            warn!(
                gpu,
                xid,
                count = n,
                already_from_nvml = from_nvml,
                "XID error in the kernel log"
            );
        }
        self.records += counted.records;
        self.dirty |= counted.read_more;
        for (reason, n) in counted.tally.errors {
            *self.errors.entry(reason).or_insert(0) += n;
        }
        // Says whether the GPUs' XIDs are observed, for the health verdict.
        self.ledger.set_kernel_log_reading(read.is_ok());
        if let Err(e) = read {
            self.reader = None;
            *self.errors.entry("read_error").or_insert(0) += 1;
            return Err(PollError::new(
                PollErrorKind::ReadFailed,
                format!(
                    "reading the kernel log {}: {e}",
                    self.options.path.display()
                ),
            ));
        }
        Ok(())
    }
}

/// How long one poll reads at most; the rest of a backlog is read by the next polls (nothing
/// is dropped: `/dev/kmsg` keeps it until the kernel overwrites it, counted as `overrun`).
pub const READ_BUDGET: Duration = Duration::from_millis(250);

impl KmsgSource {
    /// Writes this path's progress to its state file, counting a failure.
    fn save_state(&mut self) {
        let Some(path) = self.state_path() else {
            return;
        };
        let saved = {
            let guard = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
            match guard.by_path.get(&self.options.path) {
                Some(t) if t.writable && t.pending.is_empty() => {
                    Some(state::save(&path, &t.progress))
                }
                _ => None,
            }
        };
        match saved {
            Some(Ok(())) => self.dirty = false,
            Some(Err(e)) => {
                warn!(state = %path.display(), error = %e, "kmsg: cannot write the state file");
                *self.errors.entry("state_write").or_insert(0) += 1;
            }
            None => {}
        }
    }

    fn samples(&self, progress: Option<&Progress>, gpus: Option<&[KnownGpu]>) -> Vec<Sample> {
        let mut out = vec![
            Sample::new(
                Metric::KmsgRecordsRead,
                [] as [&str; 0],
                self.records as f64,
            ),
            Sample::new(
                Metric::KmsgXidDuplicates,
                [] as [&str; 0],
                self.ledger.duplicates() as f64,
            ),
        ];
        for (reason, n) in &self.errors {
            out.push(Sample::new(Metric::KmsgErrors, [*reason], *n as f64));
        }
        let Some(p) = progress else {
            return out;
        };
        for ((pci, code), n) in &p.sxids {
            out.push(Sample::new(
                Metric::NvswitchSxidErrors,
                [pci.clone(), code.to_string()],
                *n as f64,
            ));
        }
        for (uuid, n) in &p.fallen {
            if let Some(g) = gpus.and_then(|g| g.iter().find(|g| &g.uuid == uuid)) {
                out.push(Sample::for_gpu(
                    g.index,
                    uuid,
                    Metric::GpuFallenOffBus,
                    &[],
                    *n as f64,
                ));
            }
        }
        out
    }
}

impl Drop for KmsgSource {
    /// A last write of the state, so a stop loses nothing counted (best effort).
    fn drop(&mut self) {
        // A successor (a reload) says so again at its first poll.
        self.ledger.set_kernel_log_reading(false);
        if self.dirty {
            self.save_state();
        }
    }
}

#[cfg(test)]
mod tests;
