//! What the source serves: its state turned into samples at each poll, results that have
//! aged out left out.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dgx_pixels_metrics::{Metric, Sample};
use dgx_pixels_probes::probe::{ProbeKind, ProbeUnit};

use crate::backend::{Backend, GpuId, UtilizationView};
use crate::outcome::{NCCL_OUTCOMES, OUTCOMES, STATES, STORAGE_OUTCOMES};
use crate::schedule::{MAX_AGE_ROUNDS, SKIP_RETRY};
use crate::scheduler::ProbeSource;
use crate::state::Gpu;

/// GPUs of the baseboard the expected NCCL figures were measured on: an HGX 8-GPU board, whose
/// SXM GPUs all meet on its NVSwitches.
pub const NCCL_BASEBOARD_GPUS: usize = 8; // fact: nccl.baseboard-gpus

/// The bus bandwidth the set `ids` is expected to reach, if its figure applies: the set is the
/// node's whole 8-GPU baseboard (`whole_node`: every GPU the node has) of one part with a
/// published figure. The figures are ring all-reduces over all 8 NVSwitch-connected GPUs; the
/// table lists only SXM parts, which come 8 to a board only on NVSwitch baseboards. A subset
/// or another GPU count has a different ring, so it gets no figure rather than a guessed one.
/// The NVLink links up are not looked at: a link down must lower the ratio, not hide it.
pub fn expected_nccl_bus_bandwidth(ids: &[GpuId], whole_node: bool) -> Option<f64> {
    if !whole_node || ids.len() != NCCL_BASEBOARD_GPUS {
        return None;
    }
    ids.iter()
        .map(|g| dgx_pixels_probes::peaks::nccl_ring_bus_bandwidth(&g.model))
        .reduce(|a, b| a.zip(b).filter(|(a, b)| a == b).map(|(a, _)| a))
        .flatten()
}

impl<B: Backend, U: UtilizationView> ProbeSource<B, U> {
    fn nccl_samples(&self, now: Instant, out: &mut Vec<Sample>) {
        if !self.settings.nccl_allreduce {
            return;
        }
        for outcome in NCCL_OUTCOMES {
            let n = self.nccl.runs.get(outcome).copied().unwrap_or(0);
            out.push(Sample::new(
                Metric::ProbeNcclRuns,
                [outcome.as_str()],
                n as f64,
            ));
        }
        if let Some(e) = self.nccl.expected {
            out.push(Sample::new(
                Metric::ProbeNcclExpectedBusBandwidth,
                [] as [&str; 0],
                e,
            ));
        }
        let Some((r, at, max_age)) = &self.nccl.last else {
            return;
        };
        if now.duration_since(*at) > *max_age {
            return;
        }
        out.push(Sample::new(
            Metric::ProbeNcclGpus,
            [] as [&str; 0],
            r.gpus as f64,
        ));
        if let Some(l) = r.largest() {
            out.push(Sample::new(
                Metric::ProbeNcclLargestBusBandwidth,
                [] as [&str; 0],
                l.busbw,
            ));
        }
        for size in &r.sizes {
            let label = size.bytes.to_string();
            out.push(Sample::new(
                Metric::ProbeNcclBusBandwidth,
                [label.as_str()],
                size.busbw,
            ));
            out.push(Sample::new(
                Metric::ProbeNcclAlgorithmBandwidth,
                [label.as_str()],
                size.algbw,
            ));
        }
    }

    fn storage_samples(&self, out: &mut Vec<Sample>) {
        for s in &self.storage {
            if let Some((bps, direct, _)) = s.last {
                let direct = if direct { "true" } else { "false" };
                out.push(Sample::new(
                    Metric::ProbeStorageRead,
                    [s.label.as_str(), direct],
                    bps,
                ));
            }
            for outcome in STORAGE_OUTCOMES {
                let n = s.runs.get(outcome).copied().unwrap_or(0);
                out.push(Sample::new(
                    Metric::ProbeStorageRuns,
                    [s.label.as_str(), outcome.as_str()],
                    n as f64,
                ));
            }
        }
    }

    pub(crate) fn samples(&self, now: Instant) -> Vec<Sample> {
        let mut out = Vec::new();
        self.storage_samples(&mut out);
        self.nccl_samples(now, &mut out);
        let Some(gpus) = &self.gpus else {
            return out;
        };
        if let Some(rss) = self.worker_peak_rss {
            out.push(Sample::new(
                Metric::ProbeWorkerPeakRss,
                [] as [&str; 0],
                rss as f64,
            ));
        }
        for state in STATES {
            let n = gpus.iter().filter(|g| g.state == *state).count();
            out.push(Sample::new(Metric::ProbeGpus, [state.as_str()], n as f64));
        }
        let elapsed = now.duration_since(self.started).as_secs_f64();
        for g in gpus {
            let key = &g.key;
            let max_age = self.round_estimate(g) * MAX_AGE_ROUNDS;
            for (kind, r) in &g.results {
                if now.duration_since(r.measured) > max_age {
                    continue;
                }
                let name = kind.name();
                match kind.unit() {
                    ProbeUnit::Flops => {
                        out.push(Sample::of(key, Metric::ProbeGemm, [name], r.value))
                    }
                    ProbeUnit::BytesPerSecond => {
                        out.push(Sample::of(key, Metric::ProbeBandwidth, [name], r.value))
                    }
                    ProbeUnit::Seconds => out.push(Sample::of(
                        key,
                        Metric::ProbeLaunchLatency,
                        [] as [&str; 0],
                        r.value,
                    )),
                }
                if let Some(f) = dgx_pixels_probes::peaks::fraction(&g.id.model, *kind, r.value) {
                    out.push(Sample::of(key, Metric::ProbePeakFraction, [name], f));
                }
                let ts =
                    r.at.duration_since(UNIX_EPOCH)
                        .map(|d| d.as_secs_f64())
                        .unwrap_or(0.0);
                out.push(Sample::of(key, Metric::ProbeLastRun, [name], ts));
            }
            out.push(Sample::of(
                key,
                Metric::ProbeGpuState,
                [g.state.as_str()],
                1.0,
            ));
            self.pair_samples(gpus, g, now, &mut out);
            for kind in &self.probes {
                for outcome in OUTCOMES {
                    let n = g.runs.get(&(*kind, *outcome)).copied().unwrap_or(0);
                    out.push(Sample::of(
                        key,
                        Metric::ProbeRuns,
                        [kind.name(), outcome.as_str()],
                        n as f64,
                    ));
                }
                if let Some(h) = g.durations.get(kind) {
                    out.extend(h.samples(Some(key), Metric::ProbeDuration, [kind.name()]));
                }
            }
            if elapsed > 0.0 {
                out.push(Sample::of(
                    key,
                    Metric::ProbeDutyCycle,
                    [] as [&str; 0],
                    g.busy.as_secs_f64() / elapsed,
                ));
            }
        }
        out
    }

    /// The pair probe's series of `g`: each fresh pair at full detail, the worst peer always.
    /// A GPU meets each peer once per n - 1 of its rounds, so a pair ages out after that many
    /// times the single probes' limit.
    fn pair_samples(&self, gpus: &[Gpu], g: &Gpu, now: Instant, out: &mut Vec<Sample>) {
        let peers = u32::try_from(gpus.len().saturating_sub(1))
            .unwrap_or(u32::MAX)
            .max(1);
        let max_age = self.round_estimate(g) * MAX_AGE_ROUNDS * peers;
        let mut worst: Option<(f64, String)> = None;
        let mut last: Option<SystemTime> = None;
        for (j, r) in &g.pairs {
            let Some(peer) = gpus.get(*j) else { continue };
            if now.duration_since(r.measured) > max_age {
                continue;
            }
            let label = peer.key.index().to_string();
            out.push(Sample::of(
                &g.key,
                Metric::ProbeP2pBandwidth,
                [label.as_str()],
                r.value,
            ));
            if worst.as_ref().is_none_or(|(v, _)| r.value < *v) {
                worst = Some((r.value, label));
            }
            last = last.max(Some(r.at));
        }
        if let Some((v, label)) = worst {
            out.push(Sample::of(
                &g.key,
                Metric::ProbeP2pWorstBandwidth,
                [label.as_str()],
                v,
            ));
            // The worst peer against the part's per-direction NVLink bandwidth.
            if let Some(f) = dgx_pixels_probes::peaks::fraction(&g.id.model, ProbeKind::P2pCopy, v)
            {
                out.push(Sample::of(
                    &g.key,
                    Metric::ProbePeakFraction,
                    [ProbeKind::P2pCopy.name()],
                    f,
                ));
            }
        }
        if let Some(at) = last {
            let ts = at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            out.push(Sample::of(
                &g.key,
                Metric::ProbeLastRun,
                [ProbeKind::P2pCopy.name()],
                ts,
            ));
        }
    }

    /// Time for one rotation through every probe on `g`, from its recorded durations.
    fn round_estimate(&self, g: &Gpu) -> Duration {
        let per_run: f64 = g
            .durations
            .values()
            .map(|h| h.mean().unwrap_or(0.0))
            .fold(0.0, f64::max);
        let pace =
            Duration::from_secs_f64(per_run / (self.settings.duty_cycle * g.share)).max(SKIP_RETRY);
        pace * self.probes.len() as u32
    }
}
