//! Counting the lines of one poll as they are read: each record's sequence number judged, its
//! message classified and its GPU event counted at once, so no queue between reading and
//! counting can overflow in a burst. Every count is bounded ([`MAX_SERIES`],
//! [`MAX_PENDING_EVENTS`]).

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use dgx_pixels_metrics::{XidLedger, XidOrigin};
use tracing::warn;

use super::{judge_seq, logged_at, Seq, MAX_PENDING_EVENTS};
use crate::directory::KnownGpu;
use crate::parse::{classify, parse_record, Event, Malformed};
use crate::reader::{fingerprint, Kind, Line};
use crate::state::{Progress, MAX_SERIES};

/// Counts by reason of one poll, and the XIDs to log.
#[derive(Default)]
pub(super) struct PollTally {
    pub(super) errors: BTreeMap<&'static str, u64>,
    /// XIDs counted per (GPU index, code) and how many NVML had already: logged once per poll.
    pub(super) xids: BTreeMap<(u32, u32), (u64, u64)>,
}

impl PollTally {
    fn error(&mut self, reason: &'static str) {
        *self.errors.entry(reason).or_insert(0) += 1;
    }
}

/// What one poll's reading counted.
#[derive(Default)]
pub(super) struct Counted {
    pub(super) tally: PollTally,
    /// Records read, valid or not (continuation lines are not records).
    pub(super) records: u64,
    /// Whether the progress moved, so the state file is due a write.
    pub(super) read_more: bool,
}

/// The progress of one path and what one poll counts into it.
pub(super) struct Ingest<'a> {
    pub(super) kind: Kind,
    pub(super) progress: &'a mut Progress,
    pub(super) window: &'a mut VecDeque<(u64, u64)>,
    pub(super) jump: &'a mut Option<u64>,
    /// Events waiting for the GPU list (bounded by [`MAX_PENDING_EVENTS`]).
    pub(super) pending: &'a mut VecDeque<(Event, Instant)>,
    /// The GPUs by PCI address; `None` while no GPU source has said.
    pub(super) gpus: Option<&'a [KnownGpu]>,
    pub(super) ledger: &'a XidLedger,
    /// When the poll started, and `CLOCK_MONOTONIC` then (see [`logged_at`]).
    pub(super) now: Instant,
    pub(super) mono: Option<u64>,
    pub(super) counted: Counted,
}

impl Ingest<'_> {
    /// Takes one line the reader read.
    pub(super) fn line(&mut self, line: Line<'_>) {
        match line {
            Line::Overrun => self.counted.tally.error("overrun"),
            Line::TooLong => {
                self.counted.records += 1;
                self.counted.tally.error("too_long");
            }
            // Continuation lines name the device; they never carry an XID.
            Line::Text(t) if t.first() == Some(&b' ') => {}
            Line::Text(t) => {
                self.counted.records += 1;
                self.record(t);
            }
        }
    }

    /// A record's first line: parsed, its sequence number judged, and its message's event
    /// counted when the kernel logged one.
    fn record(&mut self, t: &[u8]) {
        let tally = &mut self.counted.tally;
        let record = match parse_record(t) {
            Ok(r) => r,
            Err(Malformed::TooLong) => return tally.error("too_long"),
            Err(_) => return tally.error("malformed"),
        };
        self.counted.read_more = true;
        let seq = judge_seq(
            self.kind,
            self.progress,
            self.window,
            self.jump,
            record.seq,
            fingerprint(t),
        );
        match seq {
            Seq::New => {}
            Seq::Gap => tally.error("seq_gap"),
            Seq::Restart => tally.error("seq_restart"),
            Seq::Repeat => return tally.error("seq_repeat"),
            Seq::Replayed => return, // counted before this restart
            Seq::Bad => return tally.error("bad_seq"),
        }
        let event = match classify(record.message) {
            Ok(None) => return,
            Err(_) if !record.is_kernel() => return,
            Err(_) => return tally.error("malformed"),
            // Only the kernel logs at facility 0; anyone who may write to
            // /dev/kmsg can log a driver's words at another.
            Ok(Some(_)) if !record.is_kernel() => return tally.error("not_kernel"),
            Ok(Some(e)) => e,
        };
        self.event(event, record.timestamp_us);
    }

    /// Counts an SXid by switch and code, a GPU's event on its GPU (or keeps it pending while
    /// the GPUs are not known).
    fn event(&mut self, event: Event, timestamp_us: u64) {
        let tally = &mut self.counted.tally;
        match event {
            Event::SXid {
                pci,
                function,
                code,
            } => {
                let key = (format!("{pci}.{function}"), code);
                if !count(&mut self.progress.sxids, key) {
                    tally.error("too_many_series");
                }
            }
            event => {
                let at = logged_at(self.kind, timestamp_us, self.now, self.mono);
                match self.gpus {
                    Some(gpus) => resolve(event, at, gpus, self.progress, self.ledger, tally),
                    None => {
                        if self.pending.len() >= MAX_PENDING_EVENTS {
                            self.pending.pop_front();
                            tally.error("dropped");
                        }
                        self.pending.push_back((event, at));
                    }
                }
            }
        }
    }
}

/// Counts one GPU event: an XID in the ledger, a lost GPU in the progress.
pub(super) fn resolve(
    event: Event,
    at: Instant,
    gpus: &[KnownGpu],
    progress: &mut Progress,
    ledger: &XidLedger,
    tally: &mut PollTally,
) {
    let pci = match event {
        Event::Xid { pci, .. } | Event::FallenOffBus { pci } => pci,
        Event::SXid { .. } => return,
    };
    let Some(gpu) = gpus.iter().find(|g| g.pci == pci) else {
        return tally.error("unknown_gpu");
    };
    match event {
        Event::Xid { code, .. } => {
            if dgx_pixels_xid::lookup(code).is_none() {
                tally.error("unknown_xid");
            }
            if count(&mut progress.xids, (gpu.uuid.clone(), code)) {
                let new = ledger.record(&gpu.uuid, code, at, XidOrigin::KernelLog);
                let logged = tally.xids.entry((gpu.index, code)).or_insert((0, 0));
                logged.0 += 1;
                logged.1 += u64::from(!new);
            } else {
                tally.error("too_many_series");
            }
        }
        Event::FallenOffBus { .. } => {
            warn!(gpu = gpu.index, "kernel log: GPU has fallen off the bus");
            if !count(&mut progress.fallen, gpu.uuid.clone()) {
                tally.error("too_many_series");
            }
        }
        Event::SXid { .. } => {}
    }
}

/// Adds one to `key`; false (and nothing added) when it is a new key past [`MAX_SERIES`].
fn count<K: Ord>(map: &mut BTreeMap<K, u64>, key: K) -> bool {
    if map.len() >= MAX_SERIES && !map.contains_key(&key) {
        return false;
    }
    *map.entry(key).or_insert(0) += 1;
    true
}
