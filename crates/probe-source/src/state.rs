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

use crate::backend::{GpuId, Occupancy};
use crate::outcome::{GpuState, Outcome};
use crate::schedule::{ScheduleSettings, NO_READING_RETRY, SKIP_RETRY};

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
    /// Its own probes' share of the duty cycle (1, or 1 - [`NODE_SHARE`] in the NCCL set).
    pub(crate) share: f64,
    pub(crate) last_error: Option<String>,
    /// Since when it has read idle and free (none while it does not).
    pub(crate) idle_since: Option<Instant>,
    /// This poll's view of it ([`ProbeSource::observe`]): `(exported index, utilization)` and
    /// who else is on it, read once per poll and used by the step.
    pub(crate) reading: Option<(u32, f64)>,
    pub(crate) occupancy: Occupancy,
    /// What its last attempt found.
    pub(crate) state: GpuState,
}

impl Gpu {
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
    /// Runs failed in a row: each doubles the wait before the next ([`storage_backoff`]).
    pub(crate) failures: u32,
}

/// `nccl_allreduce`'s schedule and last result.
#[derive(Debug, Default)]
pub(crate) struct NcclState {
    pub(crate) next_due: Option<Instant>,
    /// The result, when it was measured, and how long it stays fresh.
    pub(crate) last: Option<(AllReduce, Instant, Duration)>,
    /// The expected bus bandwidth of the set ([`expected_nccl_bus_bandwidth`]), bytes per
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
/// probed. Read from this poll's view of it ([`ProbeSource::observe`]).
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
