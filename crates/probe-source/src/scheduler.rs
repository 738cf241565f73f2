//! The scheduler: [`ProbeSource`] picks at most one due probe per poll, checks that it may
//! run, runs it on the backend and records what came of it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use dgx_pixels_metrics::histogram::Histogram;
use dgx_pixels_metrics::{DeviceKey, PollError, PollErrorKind, PollOutput, Source};
use dgx_pixels_probes::probe::ProbeKind;
use dgx_pixels_probes::stats::summarize;
use dgx_pixels_probes::ProbeError;

use crate::backend::{Backend, GpuId, Occupancy, UtilizationView};
use crate::outcome::{GpuState, Outcome, NCCL_OUTCOMES, STORAGE_OUTCOMES};
use crate::schedule::*;
use crate::series::expected_nccl_bus_bandwidth;
use crate::state::*;

/// The `probes` source.
pub struct ProbeSource<B: Backend, U: UtilizationView> {
    pub(crate) backend: B,
    pub(crate) utilization: U,
    pub(crate) settings: ScheduleSettings,
    pub(crate) probes: Vec<ProbeKind>,
    pub(crate) started: Instant,
    pub(crate) gpus: Option<Vec<Gpu>>,
    pub(crate) unavailable: Option<(Instant, PollError)>,
    pub(crate) cursor: usize,
    /// Whether the last poll's step was a node probe's (`storage_read`, `nccl_allreduce`).
    pub(crate) node_last: bool,
    /// The highest peak RSS of any worker so far.
    pub(crate) worker_peak_rss: Option<u64>,
    pub(crate) storage: Vec<StorageState>,
    pub(crate) nccl: NcclState,
}

impl<B: Backend, U: UtilizationView> ProbeSource<B, U> {
    /// A source over `backend`, reading utilization from `utilization`.
    pub fn new(backend: B, utilization: U, settings: ScheduleSettings) -> Result<Self, ProbeError> {
        let probes = settings.validate()?;
        let settings_paths = settings.storage_paths.clone();
        Ok(ProbeSource {
            backend,
            utilization,
            settings,
            probes,
            started: Instant::now(),
            gpus: None,
            unavailable: None,
            cursor: 0,
            node_last: false,
            worker_peak_rss: None,
            storage: settings_storage(&settings_paths),
            nccl: NcclState::default(),
        })
    }

    /// One poll as at `now` ([`Source::poll`] is this at the wall clock's now): a caller with a
    /// clock of its own (a test, a simulation) drives the schedule without waiting for it.
    /// `now` must not go back between polls. What a backend reports it held a GPU for
    /// ([`Backend::held_for`]) is what the schedule counts; without it, the wall time of the
    /// call.
    pub fn poll_at(&mut self, now: Instant) -> Result<PollOutput, PollError> {
        self.discover(now)?;
        self.observe(now);
        self.step(now);
        Ok(PollOutput::samples(self.samples(now)))
    }

    fn discover(&mut self, now: Instant) -> Result<(), PollError> {
        if self.gpus.is_some() {
            return Ok(());
        }
        if let Some((at, e)) = &self.unavailable {
            if now.duration_since(*at) < UNAVAILABLE_RETRY {
                return Err(e.clone());
            }
        }
        match self.backend.discover() {
            Ok(ids) => {
                self.unavailable = None;
                let n = ids.len();
                let k = self.probes.len();
                let ordinals: Vec<usize> = ids.iter().map(|g| g.ordinal).collect();
                let members = nccl_members(&self.settings, &ordinals);
                let nccl_on = self.settings.nccl_allreduce && members.len() >= 2;
                self.gpus = Some(
                    ids.into_iter()
                        .enumerate()
                        .map(|(i, id)| Gpu {
                            key: Arc::new(DeviceKey::gpu(
                                u32::try_from(id.ordinal).unwrap_or(u32::MAX),
                                id.uuid.as_str(),
                            )),
                            id,
                            next_due: now,
                            // Staggered starts: the first runs on the node are of distinct
                            // kinds (and the first pass prefers kinds the node has no result
                            // of yet).
                            order: self.probes.clone(),
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
                            share: if nccl_on && members.contains(&i) {
                                1.0 - NODE_SHARE
                            } else {
                                1.0
                            },
                            last_error: None,
                            idle_since: None,
                            reading: None,
                            occupancy: Occupancy::default(),
                            state: GpuState::Pending,
                        })
                        .collect(),
                );
                Ok(())
            }
            Err(e) => {
                let kind = match e {
                    ProbeError::Unavailable(_) => PollErrorKind::CudaUnavailable,
                    _ => PollErrorKind::CudaError,
                };
                let err = PollError::new(kind, format!("probes: {e}"));
                self.unavailable = Some((now, err.clone()));
                Err(err)
            }
        }
    }

    /// Follows how long each GPU has read idle and free, for the settle window.
    fn observe(&mut self, now: Instant) {
        let Some(gpus) = self.gpus.as_mut() else {
            return;
        };
        for g in gpus {
            g.reading = self.utilization.lookup(&g.id.uuid);
            g.occupancy = self.utilization.occupancy(&g.id.uuid);
            let free = g.occupancy;
            let idle = matches!(g.reading, Some((_, u)) if u <= self.settings.busy_threshold)
                && !free.held
                && free.processes == 0
                && !free.mig;
            if !idle {
                g.idle_since = None;
            } else if g.idle_since.is_none() {
                g.idle_since = Some(now);
            }
        }
    }

    /// Runs at most one due probe (or records one skip): a due storage path first, then
    /// `nccl_allreduce`, then a GPU probe, except right after a node probe, when a due GPU
    /// probe goes first.
    fn step(&mut self, now: Instant) {
        // After a node probe a due GPU probe goes first, so a node probe due at every poll (a
        // short read at a high duty cycle) cannot starve the GPU probes.
        let gpu_due = self
            .gpus
            .as_ref()
            .is_some_and(|g| g.iter().any(|g| g.next_due <= now));
        if !(self.node_last && gpu_due) && self.step_node(now) {
            self.node_last = true;
            return;
        }
        self.node_last = false;
        let probes = self.probes.clone();
        let Some(gpus) = self.gpus.as_mut() else {
            return;
        };
        let n = gpus.len();
        let Some(i) = (0..n)
            .map(|k| (self.cursor + k) % n)
            .find(|&i| gpus[i].next_due <= now)
        else {
            return;
        };
        self.cursor = (i + 1) % n.max(1);
        if gpus[i].first_pass > 0 {
            first_pass_pick(&self.settings, gpus, i, now);
        }
        let kind = gpus[i].order[gpus[i].next_probe % probes.len()];
        {
            let g = &mut gpus[i];
            if let Some((gpu, _)) = g.reading {
                if g.key.index() != gpu {
                    g.key = Arc::new(DeviceKey::gpu(gpu, g.id.uuid.as_str()));
                }
            }
        }
        let mut skip = skip_of(&self.settings, &gpus[i], now);
        let mut peer = None;
        if skip.is_none() && kind.needs_peer() {
            if n < 2 {
                // Nothing to pair with: the probe does not apply to this node (nor to its
                // first pass, which it ends if it was the last kind left).
                let g = &mut gpus[i];
                g.next_probe = (g.next_probe + 1) % probes.len();
                g.first_pass = g.first_pass.saturating_sub(1);
                if g.first_pass == 0 {
                    g.next_due = g.next_due.max(now) + std::mem::take(&mut g.owed);
                }
                return;
            }
            // Each GPU against each peer in turn; a peer that must be left alone is passed
            // over for the next free one, and with none free the GPU waits as the first one
            // in turn says.
            let start = gpus[i].next_peer;
            let candidate = |m: usize| (i + 1 + (start + m) % (n - 1)) % n;
            match (0..n - 1).find(|&m| skip_of(&self.settings, &gpus[candidate(m)], now).is_none())
            {
                Some(m) => {
                    peer = Some(candidate(m));
                    gpus[i].next_peer = (start + m + 1) % (n - 1);
                }
                None => {
                    skip = skip_of(&self.settings, &gpus[candidate(0)], now)
                        .map(|(outcome, _)| (outcome, SKIP_RETRY));
                }
            }
        }
        if let Some((outcome, retry)) = skip {
            let g = &mut gpus[i];
            *g.runs.entry((kind, outcome)).or_default() += 1;
            g.state = outcome.state();
            g.next_due = now + retry;
            return;
        }
        // The run starts at `now` (the poll's moment); `wall` only measures the call, for a
        // backend that does not say how long it held the GPU.
        let wall = Instant::now();
        let result = match peer {
            Some(j) => {
                let peer_id = gpus[j].id.clone();
                self.backend.run_pair(&gpus[i].id, &peer_id, kind)
            }
            None => self.backend.run(&gpus[i].id, kind),
        };
        if let Some(rss) = self.backend.worker_peak_rss_bytes() {
            self.worker_peak_rss = Some(self.worker_peak_rss.unwrap_or(0).max(rss));
        }
        let took = self.backend.held_for().unwrap_or_else(|| wall.elapsed());
        let end = now + took.max(wall.elapsed());
        let g = &mut gpus[i];
        g.busy += took;
        g.durations
            .entry(kind)
            .or_insert_with(|| Histogram::new(DURATION_BUCKETS))
            .observe(took.as_secs_f64());
        let value = result.and_then(|v| {
            summarize(&v)
                .map(|s| s.median)
                .ok_or_else(|| ProbeError::Cuda("the probe returned no finite value".into()))
        });
        let mut polite = false;
        match value {
            Ok(v) => {
                *g.runs.entry((kind, Outcome::Ok)).or_default() += 1;
                g.state = GpuState::Measured;
                let r = LastResult {
                    value: v,
                    at: SystemTime::now(),
                    measured: end,
                };
                match peer {
                    Some(j) => g.pairs.insert(j, r),
                    None => g.results.insert(kind, r),
                };
                g.last_error = None;
            }
            Err(e) => {
                let outcome = Outcome::of_error(&e);
                *g.runs.entry((kind, outcome)).or_default() += 1;
                g.state = outcome.state();
                if outcome.is_skip() || outcome == Outcome::Contended {
                    // Polite, not broken: the previous result still describes the GPU until
                    // it ages out. A skip held the GPU for no time; look again later.
                    tracing::debug!(gpu = g.key.index(), uuid = %g.id.uuid, probe = %kind, outcome = outcome.as_str(), "probe not run: {e}");
                    g.idle_since = None;
                    polite = true;
                    if outcome.is_skip() {
                        g.next_due = now + SKIP_RETRY;
                        return;
                    }
                } else {
                    // A failed probe leaves no result: the previous one no longer describes
                    // the GPU.
                    match peer {
                        Some(j) => g.pairs.remove(&j),
                        None => g.results.remove(&kind),
                    };
                    let msg = e.to_string();
                    if g.last_error.as_deref() != Some(&msg) {
                        tracing::warn!(gpu = g.key.index(), uuid = %g.id.uuid, probe = %kind, outcome = outcome.as_str(), "probe failed: {msg}");
                    }
                    g.last_error = Some(msg);
                }
            }
        }
        g.next_probe = (g.next_probe + 1) % probes.len();
        let duty = self.settings.duty_cycle;
        g.rest_after(took, end, duty, true);
        // The peer was held as long: it rests as long (after any rest it already had), on
        // its own budget.
        if let Some(p) = peer.and_then(|j| gpus.get_mut(j)) {
            p.busy += took;
            p.rest_after(took, end, duty, false);
            if polite {
                p.idle_since = None;
            }
        }
    }

    /// Runs `storage_read` on the first due path when every GPU may be probed (idle, free,
    /// settled: the node's jobs are not reading their data); true when it ran or was skipped.
    fn step_storage(&mut self, now: Instant) -> bool {
        let Some(k) = self.storage.iter().position(|s| s.next_due <= now) else {
            return false;
        };
        let gpus = self.gpus.as_deref().unwrap_or_default();
        // Look again when the first GPU in the way would allow it (the end of its settle
        // window, or the skip retry), as nccl_allreduce does.
        let busy = gpus
            .iter()
            .filter_map(|g| skip_of(&self.settings, g, now))
            .map(|(_, retry)| retry)
            .max();
        let allowed = self.settings.storage_paths.clone();
        let bytes = self.settings.storage_read_bytes;
        let s = &mut self.storage[k];
        if let Some(retry) = busy {
            *s.runs.entry(Outcome::SkippedBusy).or_default() += 1;
            s.next_due = now + retry;
            return true;
        }
        let wall = Instant::now();
        let result = self.backend.read_storage(&s.path, &allowed, bytes);
        let took = self.backend.held_for().unwrap_or_else(|| wall.elapsed());
        let end = now + took.max(wall.elapsed());
        match result {
            Ok(r) => {
                *s.runs.entry(Outcome::Ok).or_default() += 1;
                s.last = Some((r.bytes_per_second, r.direct, end));
            }
            Err(e) => {
                let outcome = Outcome::of_error(&e).within(STORAGE_OUTCOMES);
                *s.runs.entry(outcome).or_default() += 1;
                s.last = None;
                s.failures = s.failures.saturating_add(1);
                // Logged on the first failure and then ever more rarely, as runs back off.
                if s.failures.is_power_of_two() {
                    tracing::warn!(
                        path = %s.label,
                        outcome = outcome.as_str(),
                        failures = s.failures,
                        "storage_read failed: {e}; next try in {:?}",
                        storage_backoff(s.failures)
                    );
                }
            }
        }
        if s.last.is_some() {
            s.failures = 0;
        }
        s.next_due = end
            + took
                .div_f64(self.settings.duty_cycle)
                .max(storage_backoff(s.failures));
        true
    }

    /// Runs the node probe that has waited longest (a storage path, or `nccl_allreduce`), so
    /// one due at every poll does not starve the other; true when one ran or was skipped.
    fn step_node(&mut self, now: Instant) -> bool {
        let storage = self
            .storage
            .iter()
            .map(|s| s.next_due)
            .filter(|t| *t <= now)
            .min();
        let nccl = self
            .settings
            .nccl_allreduce
            .then(|| self.nccl.next_due.unwrap_or(self.started))
            .filter(|t| *t <= now);
        match (storage, nccl) {
            (Some(s), Some(n)) if n < s => self.step_nccl(now) || self.step_storage(now),
            _ => self.step_storage(now) || self.step_nccl(now),
        }
    }

    /// Runs `nccl_allreduce` when it is due and every GPU of its set may be probed; true when
    /// it ran or was skipped.
    fn step_nccl(&mut self, now: Instant) -> bool {
        if !self.settings.nccl_allreduce || self.nccl.next_due.is_some_and(|t| t > now) {
            return false;
        }
        let Some(gpus) = self.gpus.as_mut() else {
            return false;
        };
        let ordinals: Vec<usize> = gpus.iter().map(|g| g.id.ordinal).collect();
        let members = nccl_members(&self.settings, &ordinals);
        if members.len() < 2 {
            // Not this node's probe (one GPU, or the listed ones are missing).
            return false;
        }
        let runs = &mut self.nccl.runs;
        if let Some((outcome, retry)) = members
            .iter()
            .find_map(|&i| skip_of(&self.settings, &gpus[i], now))
        {
            *runs.entry(outcome).or_default() += 1;
            self.nccl.next_due = Some(now + retry);
            return true;
        }
        let ids: Vec<GpuId> = members.iter().map(|&i| gpus[i].id.clone()).collect();
        let whole_node = members.len() == gpus.len();
        self.nccl.expected = expected_nccl_bus_bandwidth(&ids, whole_node);
        let wall = Instant::now();
        let result = self.backend.run_nccl(&ids, self.settings.nccl_max_bytes);
        if let Some(rss) = self.backend.worker_peak_rss_bytes() {
            self.worker_peak_rss = Some(self.worker_peak_rss.unwrap_or(0).max(rss));
        }
        let took = self.backend.held_for().unwrap_or_else(|| wall.elapsed());
        let end = now + took.max(wall.elapsed());
        // Its own share of its GPUs' budget ([`NODE_SHARE`]).
        let pause = took.div_f64(self.settings.duty_cycle * NODE_SHARE);
        let rest = end + pause;
        let mut retry = None;
        match result {
            Ok(r) => {
                *runs.entry(Outcome::Ok).or_default() += 1;
                // Fresh for three of its rounds, as the GPU probes' results.
                let max_age = (took + pause).max(SKIP_RETRY) * MAX_AGE_ROUNDS;
                self.nccl.last = Some((r, end, max_age));
            }
            Err(e) => {
                let outcome = Outcome::of_error(&e).within(NCCL_OUTCOMES);
                *runs.entry(outcome).or_default() += 1;
                if outcome == Outcome::SkippedNoNccl {
                    tracing::debug!("nccl_allreduce not run: {e}");
                    retry = Some(UNAVAILABLE_RETRY);
                } else if outcome.is_skip() {
                    tracing::debug!(outcome = outcome.as_str(), "nccl_allreduce not run: {e}");
                    retry = Some(SKIP_RETRY);
                } else if outcome == Outcome::Contended {
                    tracing::debug!("nccl_allreduce contended: {e}");
                } else {
                    self.nccl.last = None;
                    tracing::warn!(outcome = outcome.as_str(), "nccl_allreduce failed: {e}");
                }
            }
        }
        if let Some(retry) = retry {
            self.nccl.next_due = Some(now + retry);
            return true;
        }
        self.nccl.next_due = Some(rest);
        // Every GPU of the set was held as long, on the all-reduce's share of its budget: it
        // is free for its own probes once the run ends, not after the all-reduce's rest.
        for &i in &members {
            let g = &mut gpus[i];
            g.busy += took;
            g.next_due = g.next_due.max(end);
        }
        true
    }
}

impl<B: Backend, U: UtilizationView> Source for ProbeSource<B, U> {
    fn name(&self) -> &'static str {
        "probes"
    }

    fn poll(&mut self) -> Result<PollOutput, PollError> {
        self.poll_at(Instant::now())
    }
}
