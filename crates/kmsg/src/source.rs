//! The `kmsg` source: reads the kernel log on each poll (never blocking), records the XIDs it
//! finds in the shared [`XidLedger`] and serves its own counts (SXids, fallen off the bus) and
//! self-metrics.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dgx_pixels_metrics::{
    Metric, PollError, PollErrorKind, PollOutput, Sample, Source, XidLedger, XidOrigin,
};
use tracing::{info, warn};

use crate::parse::{classify, parse_record, Event, Malformed, PciAddress};
use crate::reader::{Kind, Line, Reader};
use crate::state::{self, Progress, MAX_SERIES};
use crate::KmsgOptions;

/// How often the state file is written at most while records arrive.
pub const STATE_INTERVAL: Duration = Duration::from_secs(5);
/// Events kept while no GPU source has said which GPU has which PCI address (at start, or
/// while NVML is down); past this, the oldest are dropped and counted (`reason="dropped"`).
pub const MAX_PENDING_EVENTS: usize = 1024;

/// Every `reason` of `dgx_pixels_kmsg_errors_total`, all served from the first poll.
pub const REASONS: [&str; 9] = [
    "malformed",
    "too_long",
    "overrun",
    "unknown_gpu",
    "unknown_xid",
    "dropped",
    "too_many_series",
    "read_error",
    "state_write",
];

/// A GPU as the GPU sources see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownGpu {
    /// Its PCI address.
    pub pci: PciAddress,
    /// Its index (`gpu` label).
    pub index: u32,
    /// Its uuid.
    pub uuid: String,
}

/// Which GPU has which PCI address: the exporter answers from the latest `dgx_pixels_gpu_info`
/// of the GPU sources.
pub trait GpuDirectory: Send {
    /// The GPUs known now; `None` while no GPU source has been read (events wait until then).
    fn gpus(&self) -> Option<Vec<KnownGpu>>;
}

/// What a reader of one path has processed, shared by a source and its successor after a
/// reload (which builds the new source before stopping the old one), so a restart in the
/// process neither repeats nor skips records. Create one per process; it starts empty.
pub type SharedProgress = Arc<Mutex<Option<Tracked>>>;

/// The progress on one path and the events read but not yet mapped to a GPU.
#[derive(Debug)]
pub struct Tracked {
    path: PathBuf,
    progress: Progress,
    pending: VecDeque<(Event, Instant)>,
    /// Whether the state file can be written (checked once per process and path).
    writable: bool,
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

    fn error(&mut self, reason: &'static str) {
        *self.errors.entry(reason).or_insert(0) += 1;
    }

    fn state_path(&self) -> Option<PathBuf> {
        self.options
            .state_directory
            .as_ref()
            .filter(|d| !d.as_os_str().is_empty())
            .map(|d| d.join(state::FILE_NAME))
    }

    /// The progress to continue from: this process's on the same path and boot, else the
    /// state file's, else none (and whether the state file can be written).
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
        let progress = match state::load(&path) {
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
            path: self.options.path.clone(),
            progress,
            pending: VecDeque::new(),
            writable,
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
    fn name(&self) -> &'static str {
        "kmsg"
    }

    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let shared = Arc::clone(&self.shared);
        let mut guard = shared.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.as_ref().is_none_or(|t| t.path != self.options.path) {
            *guard = Some(self.start()?);
        }
        let Some(tracked) = guard.as_mut() else {
            return Err(PollError::new(PollErrorKind::Config, "kmsg: no progress"));
        };
        if self.reader.is_none() {
            // Without a state file, what the log holds now was logged before we started.
            let from_end = !tracked.writable && tracked.progress.seq.is_none();
            let reader = Reader::open(&self.options.path, from_end).map_err(|e| {
                PollError::new(
                    PollErrorKind::FileUnreadable,
                    format!(
                        "cannot open the kernel log {}: {e}; reading /dev/kmsg needs CAP_SYSLOG (or root) when kernel.dmesg_restrict=1 (see docs/kmsg.md)",
                        self.options.path.display()
                    ),
                )
            })?;
            info!(path = %self.options.path.display(), kind = ?reader.kind(), from_end, "kmsg: reading the kernel log");
            self.reader = Some(reader);
        }
        let (now, mono) = (Instant::now(), monotonic_us());
        let mut errors: Vec<&'static str> = Vec::new();
        let mut records = 0u64;
        let Tracked {
            progress, pending, ..
        } = tracked;
        let mut read_more = false;
        let read = match self.reader.as_mut() {
            Some(reader) => {
                let kind = reader.kind();
                reader.read(|line| match line {
                    Line::Overrun => errors.push("overrun"),
                    Line::TooLong => {
                        records += 1;
                        errors.push("too_long");
                    }
                    // Continuation lines name the device; they never carry an XID.
                    Line::Text(t) if t.first() == Some(&b' ') => {}
                    Line::Text(t) => {
                        records += 1;
                        let record = match parse_record(t) {
                            Ok(r) => r,
                            Err(Malformed::TooLong) => return errors.push("too_long"),
                            Err(_) => return errors.push("malformed"),
                        };
                        if progress.seq.is_some_and(|s| record.seq <= s) {
                            return; // counted before this restart
                        }
                        progress.seq = Some(record.seq);
                        read_more = true;
                        match classify(record.message) {
                            Ok(None) => {}
                            Err(_) => errors.push("malformed"),
                            Ok(Some(Event::SXid {
                                pci,
                                function,
                                code,
                            })) => {
                                let key = (format!("{pci}.{function}"), code);
                                if !count(&mut progress.sxids, key) {
                                    errors.push("too_many_series");
                                }
                            }
                            Ok(Some(event)) => {
                                if pending.len() >= MAX_PENDING_EVENTS {
                                    pending.pop_front();
                                    errors.push("dropped");
                                }
                                let at = logged_at(kind, record.timestamp_us, now, mono);
                                pending.push_back((event, at));
                            }
                        }
                    }
                })
            }
            None => Ok(()),
        };
        self.records += records;
        self.dirty |= read_more;
        if let Err(e) = read {
            self.reader = None;
            errors.push("read_error");
            for r in errors {
                self.error(r);
            }
            return Err(PollError::new(
                PollErrorKind::ReadFailed,
                format!(
                    "reading the kernel log {}: {e}",
                    self.options.path.display()
                ),
            ));
        }
        // Map the events to GPUs once a GPU source has said which GPU is where.
        let gpus = self.directory.gpus();
        if let Some(gpus) = &gpus {
            while let Some((event, at)) = pending.pop_front() {
                let pci = match event {
                    Event::Xid { pci, .. } | Event::FallenOffBus { pci } => pci,
                    Event::SXid { .. } => continue,
                };
                let Some(gpu) = gpus.iter().find(|g| g.pci == pci) else {
                    errors.push("unknown_gpu");
                    continue;
                };
                match event {
                    Event::Xid { code, .. } => {
                        if dgx_pixels_xid::lookup(code).is_none() {
                            errors.push("unknown_xid");
                        }
                        if count(&mut progress.xids, (gpu.uuid.clone(), code)) {
                            let new = self
                                .ledger
                                .record(&gpu.uuid, code, at, XidOrigin::KernelLog);
                            warn!(
                                gpu = gpu.index,
                                xid = code,
                                already_from_nvml = !new,
                                "XID error in the kernel log"
                            );
                        } else {
                            errors.push("too_many_series");
                        }
                    }
                    Event::FallenOffBus { .. } => {
                        warn!(gpu = gpu.index, "kernel log: GPU has fallen off the bus");
                        if !count(&mut progress.fallen, gpu.uuid.clone()) {
                            errors.push("too_many_series");
                        }
                    }
                    Event::SXid { .. } => {}
                }
            }
        }
        // The state is written only with nothing pending, so it never claims a record whose
        // event is not counted yet.
        let due = self.last_save.is_none_or(|t| t.elapsed() >= STATE_INTERVAL);
        if tracked_writable(&guard) && self.dirty && due && pending_empty(&guard) {
            if let (Some(path), Some(t)) = (self.state_path(), guard.as_ref()) {
                match state::save(&path, &t.progress) {
                    Ok(()) => self.dirty = false,
                    Err(e) => {
                        warn!(state = %path.display(), error = %e, "kmsg: cannot write the state file");
                        errors.push("state_write");
                    }
                }
                self.last_save = Some(Instant::now());
            }
        }
        for r in errors {
            self.error(r);
        }
        Ok(PollOutput::samples(self.samples(
            guard.as_ref().map(|t| &t.progress),
            gpus.as_deref(),
        )))
    }
}

fn tracked_writable(t: &Option<Tracked>) -> bool {
    t.as_ref().is_some_and(|t| t.writable)
}

fn pending_empty(t: &Option<Tracked>) -> bool {
    t.as_ref().is_none_or(|t| t.pending.is_empty())
}

/// Adds one to `key`; false (and nothing added) when it is a new key past [`MAX_SERIES`].
fn count<K: Ord>(map: &mut BTreeMap<K, u64>, key: K) -> bool {
    if map.len() >= MAX_SERIES && !map.contains_key(&key) {
        return false;
    }
    *map.entry(key).or_insert(0) += 1;
    true
}

impl KmsgSource {
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
        if !self.dirty {
            return;
        }
        let guard = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if let (Some(path), Some(t)) = (self.state_path(), guard.as_ref()) {
            if t.writable && t.pending.is_empty() && t.path == self.options.path {
                let _ = state::save(&path, &t.progress);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/dev/kmsg` record is timed by its kernel timestamp, so one replayed from long ago
    /// cannot match a fresh NVML event; a file's records are timed when read.
    #[test]
    fn records_are_timed_by_the_kernel_clock_on_the_device_only() {
        let now = Instant::now();
        let mono = Some(100_000_000); // 100 s since boot
        let old = logged_at(Kind::CharDevice, 40_000_000, now, mono);
        assert_eq!(now.duration_since(old), Duration::from_secs(60));
        assert_eq!(logged_at(Kind::Regular, 40_000_000, now, mono), now);
        assert_eq!(logged_at(Kind::Fifo, 40_000_000, now, mono), now);
        // A timestamp from the future (another clock): when it was read.
        assert_eq!(logged_at(Kind::CharDevice, 200_000_000, now, mono), now);
        assert_eq!(logged_at(Kind::CharDevice, 1, now, None), now);
        assert!(monotonic_us().is_some_and(|m| m > 0));
    }
}
