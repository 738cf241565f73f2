//! The scheduler: [`ProbeSource`] picks at most one due probe per poll, checks that it may
//! run, runs it on the backend and records what came of it.

use std::time::{Duration, Instant};

use dgx_pixels_metrics::{PollError, PollErrorKind, PollOutput, Source};
use dgx_pixels_probes::probe::ProbeKind;
use dgx_pixels_probes::stats::summarize;
use dgx_pixels_probes::ProbeError;

use crate::backend::{Backend, GpuId, UtilizationView};
use crate::outcome::{Outcome, NCCL_OUTCOMES, STORAGE_OUTCOMES};
use crate::schedule::{
    storage_backoff, ScheduleSettings, MAX_AGE_ROUNDS, NODE_SHARE, SKIP_RETRY, UNAVAILABLE_RETRY,
};
use crate::series::expected_nccl_bus_bandwidth;
use crate::state::{
    first_pass_pick, nccl_members, pick_peer, settings_storage, skip_of, Gpu, NcclState, Recorded,
    StorageState,
};

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
                let ordinals: Vec<usize> = ids.iter().map(|g| g.ordinal).collect();
                let members = nccl_members(&self.settings, &ordinals);
                let nccl_on = self.settings.nccl_allreduce && members.len() >= 2;
                let gpus = ids.into_iter().enumerate().map(|(i, id)| {
                    let share = if nccl_on && members.contains(&i) {
                        1.0 - NODE_SHARE
                    } else {
                        1.0
                    };
                    Gpu::new(id, i, n, &self.probes, share, now)
                });
                self.gpus = Some(gpus.collect());
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
        if let Some(i) = self.next_gpu(now) {
            self.step_gpu(i, now);
        }
    }

    /// The first due GPU from the cursor on; the cursor moves past it.
    fn next_gpu(&mut self, now: Instant) -> Option<usize> {
        let gpus = self.gpus.as_ref()?;
        let n = gpus.len();
        let i = (0..n)
            .map(|k| (self.cursor + k) % n)
            .find(|&i| gpus[i].next_due <= now)?;
        self.cursor = (i + 1) % n.max(1);
        Some(i)
    }

    /// Runs GPU `i`'s next probe, or records why it was left alone.
    fn step_gpu(&mut self, i: usize, now: Instant) {
        let Some((kind, peer)) = self.admit(i, now) else {
            return;
        };
        let Some(gpus) = self.gpus.as_ref() else {
            return;
        };
        let gpu = gpus[i].id.clone();
        let peer_id = peer.map(|j| gpus[j].id.clone());
        let (result, took, end) = self.timed(now, |b| match &peer_id {
            Some(p) => b.run_pair(&gpu, p, kind),
            None => b.run(&gpu, kind),
        });
        self.note_worker_rss();
        let duty = self.settings.duty_cycle;
        let k = self.probes.len();
        let Some(gpus) = self.gpus.as_mut() else {
            return;
        };
        let g = &mut gpus[i];
        g.count_held(kind, took);
        let value = result.and_then(|v| {
            summarize(&v)
                .map(|s| s.median)
                .ok_or_else(|| ProbeError::Cuda("the probe returned no finite value".into()))
        });
        let Recorded::Ran { polite } = g.record_run(kind, peer, value, end, now) else {
            return;
        };
        g.next_probe = (g.next_probe + 1) % k;
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

    /// The kind GPU `i` runs next and its peer for a pair probe, when it may run now.
    /// Otherwise `None`, the skip recorded (or a pair probe without a peer on the node passed
    /// over).
    fn admit(&mut self, i: usize, now: Instant) -> Option<(ProbeKind, Option<usize>)> {
        let k = self.probes.len();
        let gpus = self.gpus.as_mut()?;
        if gpus[i].first_pass > 0 {
            first_pass_pick(&self.settings, gpus, i, now);
        }
        let kind = gpus[i].order[gpus[i].next_probe % k];
        gpus[i].follow_index();
        let mut skip = skip_of(&self.settings, &gpus[i], now);
        let mut peer = None;
        if skip.is_none() && kind.needs_peer() {
            if gpus.len() < 2 {
                gpus[i].pass_over(k, now);
                return None;
            }
            match pick_peer(&self.settings, gpus, i, now) {
                Ok(j) => peer = Some(j),
                Err(s) => skip = s,
            }
        }
        if let Some((outcome, retry)) = skip {
            gpus[i].record_skip(kind, outcome, now + retry);
            return None;
        }
        Some((kind, peer))
    }

    /// Runs `call` on the backend as of `now`: its result, the GPU time it held and when it
    /// ended. The run starts at `now` (the poll's moment); the wall clock only measures the
    /// call, for a backend that does not say how long it held the GPU.
    fn timed<T>(&mut self, now: Instant, call: impl FnOnce(&mut B) -> T) -> (T, Duration, Instant) {
        let wall = Instant::now();
        let result = call(&mut self.backend);
        let took = self.backend.held_for().unwrap_or_else(|| wall.elapsed());
        (result, took, now + took.max(wall.elapsed()))
    }

    /// Keeps the highest peak RSS of the workers so far.
    fn note_worker_rss(&mut self) {
        if let Some(rss) = self.backend.worker_peak_rss_bytes() {
            self.worker_peak_rss = Some(self.worker_peak_rss.unwrap_or(0).max(rss));
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
        if let Some(retry) = busy {
            let s = &mut self.storage[k];
            *s.runs.entry(Outcome::SkippedBusy).or_default() += 1;
            s.next_due = now + retry;
            return true;
        }
        let path = self.storage[k].path.clone();
        let (result, took, end) = self.timed(now, |b| b.read_storage(&path, &allowed, bytes));
        let s = &mut self.storage[k];
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
        let Some(gpus) = self.gpus.as_ref() else {
            return false;
        };
        let ordinals: Vec<usize> = gpus.iter().map(|g| g.id.ordinal).collect();
        let members = nccl_members(&self.settings, &ordinals);
        if members.len() < 2 {
            // Not this node's probe (one GPU, or the listed ones are missing).
            return false;
        }
        if let Some((outcome, retry)) = members
            .iter()
            .find_map(|&i| skip_of(&self.settings, &gpus[i], now))
        {
            *self.nccl.runs.entry(outcome).or_default() += 1;
            self.nccl.next_due = Some(now + retry);
            return true;
        }
        let ids: Vec<GpuId> = members.iter().map(|&i| gpus[i].id.clone()).collect();
        let whole_node = members.len() == gpus.len();
        self.nccl.expected = expected_nccl_bus_bandwidth(&ids, whole_node);
        let max_bytes = self.settings.nccl_max_bytes;
        let (result, took, end) = self.timed(now, |b| b.run_nccl(&ids, max_bytes));
        self.note_worker_rss();
        // Its own share of its GPUs' budget ([`NODE_SHARE`]).
        let pause = took.div_f64(self.settings.duty_cycle * NODE_SHARE);
        let rest = end + pause;
        let mut retry = None;
        let runs = &mut self.nccl.runs;
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
        let gpus = self.gpus.iter_mut().flatten();
        for g in gpus
            .enumerate()
            .filter(|(i, _)| members.contains(i))
            .map(|(_, g)| g)
        {
            g.busy += took;
            g.next_due = g.next_due.max(end);
        }
        true
    }
}

impl<B: Backend, U: UtilizationView> Source for ProbeSource<B, U> {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        self.poll_at(Instant::now())
    }
}
