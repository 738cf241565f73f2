//! What the scheduler remembers of each GPU and node probe between polls, and the rules read
//! from it: whether a GPU may be probed now, how long it rests after a run, which kind its
//! first pass runs next.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use dgx_pixels_metrics::histogram::Histogram;
use dgx_pixels_metrics::DeviceKey;
use dgx_pixels_probes::nccl::AllReduce;
use dgx_pixels_probes::probe::ProbeKind;
use dgx_pixels_probes::ProbeError;

use crate::backend::{GpuId, Occupancy};
use crate::outcome::{GpuState, Outcome};
use crate::schedule::{ScheduleSettings, DURATION_BUCKETS, NO_READING_RETRY, SKIP_RETRY};

#[derive(Debug)]
pub(crate) struct LastResult {
    pub(crate) value: f64,
    pub(crate) at: SystemTime,
    pub(crate) measured: Instant,
}

#[derive(Debug)]
pub(crate) struct Gpu {
    pub(crate) id: GpuId,
    /// The key of the GPU's series: the index the telemetry exports (the CUDA ordinal until a
    /// reading says otherwise) and the uuid.
    pub(crate) key: Arc<DeviceKey>,
    pub(crate) next_due: Instant,
    /// Its rotation: every enabled kind once, in the order it runs them (the first pass
    /// reorders what is left of it, [`first_pass_pick`]).
    pub(crate) order: Vec<ProbeKind>,
    pub(crate) next_probe: usize,
    pub(crate) results: BTreeMap<ProbeKind, LastResult>,
    /// The pair probe's last result from this GPU to each peer, by the peer's position.
    pub(crate) pairs: BTreeMap<usize, LastResult>,
    /// Which peer the next pair probe starts looking at (an offset among the others).
    pub(crate) next_peer: usize,
    pub(crate) runs: BTreeMap<(ProbeKind, Outcome), u64>,
    pub(crate) durations: BTreeMap<ProbeKind, Histogram>,
    pub(crate) busy: Duration,
    /// Own runs left in its first pass (each probe kind once, without rests between).
    pub(crate) first_pass: usize,
    /// Runs it may still be held without a rest while its first pass lasts (its own and
    /// those it joins as a pair probe's peer): at most 2 K, whatever its peers do.
    pub(crate) free_holds: usize,
    /// The rests of its first pass, taken together when the pass ends.
    pub(crate) owed: Duration,
    /// Its own probes' share of the duty cycle (1, or 1 - [`NODE_SHARE`](crate::NODE_SHARE) in the NCCL set).
    pub(crate) share: f64,
    pub(crate) last_error: Option<String>,
    /// Since when it has read idle and free (none while it does not).
    pub(crate) idle_since: Option<Instant>,
    /// This poll's view of it ([`ProbeSource::observe`](crate::ProbeSource::observe)): `(exported index, utilization)` and
    /// who else is on it, read once per poll and used by the step.
    pub(crate) reading: Option<(u32, f64)>,
    pub(crate) occupancy: Occupancy,
    /// What its last attempt found.
    pub(crate) state: GpuState,
}

impl Gpu {
    /// GPU `i` of the `n` discovered at `now`, rotating through `probes`, its own probes on
    /// `share` of the duty cycle.
    pub(crate) fn new(
        id: GpuId,
        i: usize,
        n: usize,
        probes: &[ProbeKind],
        share: f64,
        now: Instant,
    ) -> Gpu {
        let k = probes.len();
        Gpu {
            key: Arc::new(DeviceKey::gpu(
                u32::try_from(id.ordinal).unwrap_or(u32::MAX),
                id.uuid.as_str(),
            )),
            id,
            next_due: now,
            // Staggered starts: the first runs on the node are of distinct kinds (and the
            // first pass prefers kinds the node has no result of yet).
            order: probes.to_vec(),
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
            share,
            last_error: None,
            idle_since: None,
            reading: None,
            occupancy: Occupancy::default(),
            state: GpuState::Pending,
        }
    }

    /// Keys its series by the index the telemetry exports for it, once a reading says it.
    pub(crate) fn follow_index(&mut self) {
        if let Some((gpu, _)) = self.reading {
            if self.key.index() != gpu {
                self.key = Arc::new(DeviceKey::gpu(gpu, self.id.uuid.as_str()));
            }
        }
    }

    /// Passes over a pair probe on a node without a second GPU: it does not apply here, nor
    /// to the first pass, which it ends if it was the last kind left (of `k`).
    pub(crate) fn pass_over(&mut self, k: usize, now: Instant) {
        self.next_probe = (self.next_probe + 1) % k;
        self.first_pass = self.first_pass.saturating_sub(1);
        if self.first_pass == 0 {
            self.next_due = self.next_due.max(now) + std::mem::take(&mut self.owed);
        }
    }

    /// Records that `kind` was not run: `outcome` says why; look again at `retry_at`.
    pub(crate) fn record_skip(&mut self, kind: ProbeKind, outcome: Outcome, retry_at: Instant) {
        *self.runs.entry((kind, outcome)).or_default() += 1;
        self.state = outcome.state();
        self.next_due = retry_at;
    }

    /// Counts `took` of GPU time held by a run of `kind`.
    pub(crate) fn count_held(&mut self, kind: ProbeKind, took: Duration) {
        self.busy += took;
        self.durations
            .entry(kind)
            .or_insert_with(|| Histogram::new(DURATION_BUCKETS))
            .observe(took.as_secs_f64());
    }

    /// Records what a run of `kind` (with the GPU at `peer` for a pair probe) that ended at
    /// `end` came to: its value, or the error it met.
    pub(crate) fn record_run(
        &mut self,
        kind: ProbeKind,
        peer: Option<usize>,
        value: Result<f64, ProbeError>,
        end: Instant,
        now: Instant,
    ) -> Recorded {
        let e = match value {
            Ok(v) => {
                *self.runs.entry((kind, Outcome::Ok)).or_default() += 1;
                self.state = GpuState::Measured;
                let r = LastResult {
                    value: v,
                    at: SystemTime::now(),
                    measured: end,
                };
                match peer {
                    Some(j) => self.pairs.insert(j, r),
                    None => self.results.insert(kind, r),
                };
                self.last_error = None;
                return Recorded::Ran { polite: false };
            }
            Err(e) => e,
        };
        let outcome = Outcome::of_error(&e);
        *self.runs.entry((kind, outcome)).or_default() += 1;
        self.state = outcome.state();
        if outcome.is_skip() || outcome == Outcome::Contended {
            // Polite, not broken: the previous result still describes the GPU until it ages
            // out. A skip held the GPU for no time; look again later.
            tracing::debug!(gpu = self.key.index(), uuid = %self.id.uuid, probe = %kind, outcome = outcome.as_str(), "probe not run: {e}");
            self.idle_since = None;
            if outcome.is_skip() {
                self.next_due = now + SKIP_RETRY;
                return Recorded::Skipped;
            }
            return Recorded::Ran { polite: true };
        }
        // A failed probe leaves no result: the previous one no longer describes the GPU.
        match peer {
            Some(j) => self.pairs.remove(&j),
            None => self.results.remove(&kind),
        };
        let msg = e.to_string();
        if self.last_error.as_deref() != Some(&msg) {
            tracing::warn!(gpu = self.key.index(), uuid = %self.id.uuid, probe = %kind, outcome = outcome.as_str(), "probe failed: {msg}");
        }
        self.last_error = Some(msg);
        Recorded::Ran { polite: false }
    }

    /// Records that a run held the GPU until `end` for `took` of GPU time (`own`: a run of
    /// its own rather than as a peer) and sets when it may be probed again: `took / (duty_cycle
    /// x share)` after the run, or after the rest it already had to take, so that the rests
    /// add up. During its first pass the rest is owed instead, and all of it is taken after
    /// the pass's last run: at every moment a GPU comes due, its own probes have held it at
    /// most `duty_cycle x share` of the time since the start.
    pub(crate) fn rest_after(&mut self, took: Duration, end: Instant, duty_cycle: f64, own: bool) {
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

/// What a run left to do after [`Gpu::record_run`].
pub(crate) enum Recorded {
    /// The worker left the GPU alone: nothing was held, nobody rests.
    Skipped,
    /// It held the GPU (and its peer): they rest. `polite`: it was discarded as contended.
    Ran {
        /// Another process used the GPU during the run.
        polite: bool,
    },
}

/// The peer of GPU `i`'s pair probe: each peer in turn, one that must be left alone passed
/// over for the next free one. With none free, the skip of the first in turn (retried after
/// [`SKIP_RETRY`]).
pub(crate) fn pick_peer(
    settings: &ScheduleSettings,
    gpus: &mut [Gpu],
    i: usize,
    now: Instant,
) -> Result<usize, Option<(Outcome, Duration)>> {
    let n = gpus.len();
    let start = gpus[i].next_peer;
    let candidate = |m: usize| (i + 1 + (start + m) % (n - 1)) % n;
    match (0..n - 1).find(|&m| skip_of(settings, &gpus[candidate(m)], now).is_none()) {
        Some(m) => {
            gpus[i].next_peer = (start + m + 1) % (n - 1);
            Ok(candidate(m))
        }
        None => {
            Err(skip_of(settings, &gpus[candidate(0)], now)
                .map(|(outcome, _)| (outcome, SKIP_RETRY)))
        }
    }
}

/// Whether `g` has a result of `kind` (for `p2p_copy`, with any peer).
pub(crate) fn has_result(g: &Gpu, kind: ProbeKind) -> bool {
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
pub(crate) fn first_pass_pick(
    settings: &ScheduleSettings,
    gpus: &mut [Gpu],
    i: usize,
    now: Instant,
) {
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
pub(crate) fn nccl_members(settings: &ScheduleSettings, ordinals: &[usize]) -> Vec<usize> {
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
pub(crate) struct StorageState {
    pub(crate) path: PathBuf,
    /// The `path` label: the configured path as written.
    pub(crate) label: String,
    pub(crate) next_due: Instant,
    /// `(bytes per second, direct, when measured)`.
    pub(crate) last: Option<(f64, bool, Instant)>,
    pub(crate) runs: BTreeMap<Outcome, u64>,
    /// Runs failed in a row: each doubles the wait before the next ([`storage_backoff`](crate::storage_backoff)).
    pub(crate) failures: u32,
}

/// `nccl_allreduce`'s schedule and last result.
#[derive(Debug, Default)]
pub(crate) struct NcclState {
    pub(crate) next_due: Option<Instant>,
    /// The result, when it was measured, and how long it stays fresh.
    pub(crate) last: Option<(AllReduce, Instant, Duration)>,
    /// The expected bus bandwidth of the set ([`expected_nccl_bus_bandwidth`](crate::expected_nccl_bus_bandwidth)), bytes per
    /// second.
    pub(crate) expected: Option<f64>,
    pub(crate) runs: BTreeMap<Outcome, u64>,
}

pub(crate) fn settings_storage(paths: &[PathBuf]) -> Vec<StorageState> {
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
/// probed. Read from this poll's view of it ([`ProbeSource::observe`](crate::ProbeSource::observe)).
pub(crate) fn skip_of(
    settings: &ScheduleSettings,
    g: &Gpu,
    now: Instant,
) -> Option<(Outcome, Duration)> {
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
