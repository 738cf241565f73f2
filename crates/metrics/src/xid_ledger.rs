//! The XID ledger: one count of XID events per GPU and code, fed by every origin that sees
//! them (NVML's event set or the simulated node, and the kernel log), so that one event the
//! driver reports both ways counts once.
//!
//! The exporter's wiring creates one ledger and hands it to the NVML (or simulated) source and
//! to the `kmsg` collector; it outlives both, so a reload that restarts either keeps the counts.
//! The GPU source serves the ledger's counts as `dgx_pixels_gpu_xid_errors_total`: a series is
//! still served by exactly one source, and kernel-log XIDs count even when NVML misses them.
//!
//! The rule: an event from one origin that matches (same GPU, same code) an unmatched event
//! from the other origin less than the window apart ([`XidLedger::DEFAULT_WINDOW`]) is the same
//! event. Each event is matched at most once, so a storm seen both ways counts each occurrence
//! once, and a storm seen one way only counts every occurrence.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use dgx_pixels_metrics::xid_ledger::{XidLedger, XidOrigin};
//!
//! let ledger = XidLedger::new(XidLedger::DEFAULT_WINDOW);
//! let t = Instant::now();
//! assert!(ledger.record("GPU-a", 79, t, XidOrigin::KernelLog));
//! // NVML delivers the same XID a second later: the same event.
//! assert!(!ledger.record("GPU-a", 79, t + Duration::from_secs(1), XidOrigin::Nvml));
//! assert_eq!(ledger.counts("GPU-a")[&79], 1);
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Where an XID event was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XidOrigin {
    /// NVML's critical-XID event set (or, on a simulated node, the simulator standing in for it).
    Nvml,
    /// The kernel log (`/dev/kmsg`): the driver's `NVRM: Xid` lines.
    KernelLog,
}

impl XidOrigin {
    fn slot(self) -> usize {
        match self {
            XidOrigin::Nvml => 0,
            XidOrigin::KernelLog => 1,
        }
    }
}

/// Most (GPU, code) pairs tracked: a node has at most a few dozen GPUs and each reports a
/// handful of codes; past this many, events of new pairs are still counted by nobody and
/// [`XidLedger::overflowed`] says how many.
pub const MAX_KEYS: usize = 4096;
/// Most unmatched events kept per (GPU, code) and origin: a storm seen one way only keeps the
/// latest ones (the older ones are past any sensible window long before this many arrive).
pub const MAX_PENDING: usize = 256;

#[derive(Debug, Default)]
struct Entry {
    /// Distinct events.
    count: u64,
    /// Events seen per origin (matched or not).
    seen: [u64; 2],
    /// Totals last reported per origin by [`XidLedger::record_total`].
    totals: [Option<u64>; 2],
    /// Unmatched events per origin, oldest first.
    pending: [VecDeque<Instant>; 2],
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<(String, u32), Entry>,
    duplicates: u64,
    overflowed: u64,
    /// Per GPU uuid: whether NVML's event set accepted it (absent: not tried yet).
    nvml_watching: HashMap<String, bool>,
    /// Whether a kernel-log reader is reading the log now.
    kernel_log_reading: bool,
}

/// One XID count per GPU (by uuid) and code, deduplicated across origins (see the module docs).
#[derive(Debug)]
pub struct XidLedger {
    window: Duration,
    inner: Mutex<Inner>,
}

impl Default for XidLedger {
    fn default() -> Self {
        XidLedger::new(XidLedger::DEFAULT_WINDOW)
    }
}

impl XidLedger {
    /// How far apart two reports of one event may be: the driver prints the kernel-log line
    /// and signals NVML's event set in the same interrupt handler; 10 s covers a busy reader
    /// polling once a second while a storm of one code repeats no faster than every few seconds.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

    /// A ledger matching events less than `window` apart.
    pub fn new(window: Duration) -> XidLedger {
        XidLedger {
            window,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one event of `code` on GPU `uuid` seen by `origin` at `at`. Returns whether it
    /// counted as a new event (false: it is the other origin's event, already counted, or the
    /// ledger is full).
    pub fn record(&self, uuid: &str, code: u32, at: Instant, origin: XidOrigin) -> bool {
        let mut inner = self.lock();
        let window = self.window;
        let Some(entry) = entry(&mut inner, uuid, code) else {
            return false;
        };
        let new = record_in(entry, at, origin, window);
        if !new {
            inner.duplicates += 1;
        }
        new
    }

    /// Records what a source that reports running totals (the simulated node) has seen of
    /// `code` on GPU `uuid`: the growth since its last report, as events at `at`. A total that
    /// went down (the reporter started over) counts from zero again.
    pub fn record_total(&self, uuid: &str, code: u32, total: u64, at: Instant, origin: XidOrigin) {
        let mut inner = self.lock();
        let window = self.window;
        let Some(entry) = entry(&mut inner, uuid, code) else {
            return;
        };
        let last = entry.totals[origin.slot()].unwrap_or(0);
        let new = if total >= last { total - last } else { total };
        entry.totals[origin.slot()] = Some(total);
        let mut duplicates = 0;
        for _ in 0..new {
            if !record_in(entry, at, origin, window) {
                duplicates += 1;
            }
        }
        inner.duplicates += duplicates;
    }

    /// Raises the events `origin` has seen of `code` on `uuid` to at least `seen`, counting the
    /// difference as distinct events: how a kernel-log reader restores what it counted before a
    /// restart (its state file), without counting it again when it is restarted in-process.
    pub fn seed(&self, uuid: &str, code: u32, origin: XidOrigin, seen: u64) {
        let mut inner = self.lock();
        let Some(entry) = entry(&mut inner, uuid, code) else {
            return;
        };
        let have = &mut entry.seen[origin.slot()];
        if seen > *have {
            entry.count += seen - *have;
            *have = seen;
        }
    }

    /// Notes whether NVML's event set watches GPU `uuid` for XIDs (it accepted the GPU's
    /// registration, or refused it).
    pub fn set_nvml_watching(&self, uuid: &str, watching: bool) {
        let mut inner = self.lock();
        if inner.nvml_watching.len() < MAX_KEYS || inner.nvml_watching.contains_key(uuid) {
            inner.nvml_watching.insert(uuid.to_string(), watching);
        }
    }

    /// Notes whether a kernel-log reader reads the kernel log now (its last poll succeeded).
    pub fn set_kernel_log_reading(&self, reading: bool) {
        self.lock().kernel_log_reading = reading;
    }

    /// Whether GPU `uuid`'s XIDs are observed by some origin: `Some(false)` when NVML refused
    /// to watch it and no kernel log is read, `None` while NVML has not said yet.
    pub fn observed(&self, uuid: &str) -> Option<bool> {
        let inner = self.lock();
        if inner.kernel_log_reading {
            return Some(true);
        }
        inner.nvml_watching.get(uuid).copied()
    }

    /// Distinct events per code on GPU `uuid`.
    pub fn counts(&self, uuid: &str) -> BTreeMap<u32, u64> {
        self.lock()
            .entries
            .iter()
            .filter(|((u, _), e)| u == uuid && e.count > 0)
            .map(|((_, code), e)| (*code, e.count))
            .collect()
    }

    /// Events that matched one of the other origin and were not counted again.
    pub fn duplicates(&self) -> u64 {
        self.lock().duplicates
    }

    /// Events not counted because the ledger already tracks [`MAX_KEYS`] (GPU, code) pairs.
    pub fn overflowed(&self) -> u64 {
        self.lock().overflowed
    }
}

fn entry<'a>(inner: &'a mut Inner, uuid: &str, code: u32) -> Option<&'a mut Entry> {
    let key = (uuid.to_string(), code);
    if !inner.entries.contains_key(&key) && inner.entries.len() >= MAX_KEYS {
        inner.overflowed += 1;
        return None;
    }
    Some(inner.entries.entry(key).or_default())
}

/// The matching rule on one (GPU, code) entry; true when the event is new.
fn record_in(entry: &mut Entry, at: Instant, origin: XidOrigin, window: Duration) -> bool {
    let mine = origin.slot();
    let other = 1 - mine;
    entry.seen[mine] += 1;
    let close = |t: &Instant| {
        let gap = if *t > at { *t - at } else { at - *t };
        gap <= window
    };
    // Events of the other origin too old to match anything from here on are forgotten.
    while entry.pending[other]
        .front()
        .is_some_and(|t| at.saturating_duration_since(*t) > window)
    {
        entry.pending[other].pop_front();
    }
    if let Some(i) = entry.pending[other].iter().position(close) {
        entry.pending[other].remove(i);
        return false;
    }
    entry.count += 1;
    let pending = &mut entry.pending[mine];
    if pending.len() >= MAX_PENDING {
        pending.pop_front();
    }
    pending.push_back(at);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 28, item 17: a GPU NVML refused to watch is observed only while the kernel log
    /// is read; one NVML has not answered for yet is not known either way.
    #[test]
    fn observed_says_whether_any_origin_sees_a_gpus_xids() {
        let l = XidLedger::default();
        assert_eq!(l.observed("GPU-a"), None);
        l.set_nvml_watching("GPU-a", false);
        l.set_nvml_watching("GPU-b", true);
        assert_eq!(l.observed("GPU-a"), Some(false));
        assert_eq!(l.observed("GPU-b"), Some(true));
        l.set_kernel_log_reading(true);
        assert_eq!(l.observed("GPU-a"), Some(true));
        assert_eq!(l.observed("GPU-c"), Some(true));
        l.set_kernel_log_reading(false);
        assert_eq!(l.observed("GPU-a"), Some(false));
    }

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// Issue 19, part 2: one event seen through NVML and the kernel log counts once, in either
    /// order; events only one origin saw all count; codes and GPUs never match each other.
    #[test]
    fn an_event_seen_both_ways_counts_once() {
        let l = XidLedger::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert!(l.record("GPU-a", 79, at(t0, 0), XidOrigin::Nvml));
        assert!(!l.record("GPU-a", 79, at(t0, 900), XidOrigin::KernelLog));
        // Kernel log first this time.
        assert!(l.record("GPU-a", 79, at(t0, 20_000), XidOrigin::KernelLog));
        assert!(!l.record("GPU-a", 79, at(t0, 21_000), XidOrigin::Nvml));
        // Another GPU, another code: new events.
        assert!(l.record("GPU-b", 79, at(t0, 21_000), XidOrigin::KernelLog));
        assert!(l.record("GPU-a", 13, at(t0, 21_000), XidOrigin::KernelLog));
        assert_eq!(l.counts("GPU-a"), [(13, 1), (79, 2)].into());
        assert_eq!(l.counts("GPU-b"), [(79, 1)].into());
        assert_eq!(l.duplicates(), 2);
    }

    #[test]
    fn events_farther_apart_than_the_window_are_two() {
        let l = XidLedger::new(Duration::from_secs(10));
        let t0 = Instant::now();
        l.record("GPU-a", 48, at(t0, 0), XidOrigin::Nvml);
        assert!(l.record("GPU-a", 48, at(t0, 10_001), XidOrigin::KernelLog));
        assert_eq!(l.counts("GPU-a")[&48], 2);
    }

    /// A storm seen both ways pairs event for event; a storm seen one way counts every one;
    /// an origin's own repeats never match each other.
    #[test]
    fn storms_match_one_to_one() {
        let l = XidLedger::new(Duration::from_secs(10));
        let t0 = Instant::now();
        for i in 0..5 {
            l.record("GPU-a", 13, at(t0, i * 2000), XidOrigin::Nvml);
        }
        for i in 0..5 {
            l.record("GPU-a", 13, at(t0, i * 2000 + 300), XidOrigin::KernelLog);
        }
        assert_eq!(l.counts("GPU-a")[&13], 5);
        for i in 0..3 {
            l.record("GPU-a", 13, at(t0, 60_000 + i), XidOrigin::KernelLog);
        }
        assert_eq!(l.counts("GPU-a")[&13], 8);
    }

    #[test]
    fn totals_count_their_growth_and_seeds_are_idempotent() {
        let l = XidLedger::default();
        let t = Instant::now();
        l.record_total("GPU-a", 13, 3, t, XidOrigin::Nvml);
        l.record_total("GPU-a", 13, 5, t, XidOrigin::Nvml);
        assert_eq!(l.counts("GPU-a")[&13], 5);
        // The reporter started over: what it reports now is new.
        l.record_total("GPU-a", 13, 1, t, XidOrigin::Nvml);
        assert_eq!(l.counts("GPU-a")[&13], 6);
        l.seed("GPU-a", 31, XidOrigin::KernelLog, 4);
        l.seed("GPU-a", 31, XidOrigin::KernelLog, 4);
        l.seed("GPU-a", 31, XidOrigin::KernelLog, 2);
        assert_eq!(l.counts("GPU-a")[&31], 4);
    }

    #[test]
    fn memory_is_bounded() {
        let l = XidLedger::default();
        let t = Instant::now();
        for code in 0..(MAX_KEYS as u32 + 10) {
            l.record("GPU-a", code, t, XidOrigin::KernelLog);
        }
        assert_eq!(l.overflowed(), 10);
        for i in 0..(MAX_PENDING as u64 * 3) {
            l.record("GPU-a", 1, at(t, i), XidOrigin::KernelLog);
        }
        let inner = l.lock();
        let e = &inner.entries[&("GPU-a".to_string(), 1)];
        assert_eq!(e.pending[1].len(), MAX_PENDING);
    }
}
