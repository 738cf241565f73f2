//! The pair probe (`p2p_copy`) in the daemon's scheduler: each GPU against each peer in turn,
//! both GPUs under the politeness rules, the worst peer served per GPU.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_probe_source::{Backend, GpuId, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::{ProbeError, ProbeKind};

/// Pairs run, as (from, to) CUDA ordinals.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(usize, usize)>>>);

/// `gpus` GPUs; a copy touching `slow` runs at 300 GB/s, the others at 380 GB/s.
struct Pairs {
    gpus: usize,
    slow: usize,
    log: Log,
}

impl Backend for Pairs {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok((0..self.gpus)
            .map(|i| GpuId {
                ordinal: i,
                uuid: format!("GPU-{i}"),
                model: "NVIDIA H100 80GB HBM3".into(),
            })
            .collect())
    }
    fn run(&mut self, _: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        panic!("{kind} is a pair probe: run_pair, not run")
    }
    fn run_pair(
        &mut self,
        gpu: &GpuId,
        peer: &GpuId,
        kind: ProbeKind,
    ) -> Result<Vec<f64>, ProbeError> {
        assert_eq!(kind, ProbeKind::P2pCopy);
        assert_ne!(gpu.ordinal, peer.ordinal);
        self.log.0.lock().unwrap().push((gpu.ordinal, peer.ordinal));
        let v = if gpu.ordinal == self.slow || peer.ordinal == self.slow {
            300e9
        } else {
            380e9
        };
        Ok(vec![v * 0.99, v, v * 1.01])
    }
}

/// Utilization by UUID; a GPU not listed reads idle.
#[derive(Clone, Default)]
struct Util(Arc<Mutex<HashMap<String, f64>>>);
impl UtilizationView for Util {
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)> {
        let i = uuid.strip_prefix("GPU-")?.parse().ok()?;
        Some((i, self.0.lock().unwrap().get(uuid).copied().unwrap_or(0.0)))
    }
}

fn source(gpus: usize, slow: usize, util: &Util) -> (ProbeSource<Pairs, Util>, Log) {
    let log = Log::default();
    let s = ProbeSource::new(
        Pairs {
            gpus,
            slow,
            log: log.clone(),
        },
        util.clone(),
        ScheduleSettings {
            probes: vec![ProbeKind::P2pCopy],
            duty_cycle: 1.0,
            settle: Duration::ZERO,
            ..Default::default()
        },
    )
    .unwrap();
    (s, log)
}

/// Polls until `done` says so (each poll runs at most one probe), returning the last samples.
fn poll_until(s: &mut ProbeSource<Pairs, Util>, mut done: impl FnMut() -> bool) -> Vec<Sample> {
    let start = Instant::now();
    loop {
        let samples = s.poll().unwrap().samples;
        if done() {
            return samples;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not done in 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `(own labels, value)` of every sample of `metric` on GPU `gpu`.
fn of(samples: &[Sample], metric: Metric, gpu: u32) -> Vec<(Vec<String>, f64)> {
    samples
        .iter()
        .filter(|s| s.metric == metric && s.device.as_ref().is_some_and(|d| d.index() == gpu))
        .map(|s| (s.labels.to_vec(), s.value))
        .collect()
}

#[test]
fn each_gpu_meets_each_peer_in_turn_and_the_degraded_one_is_everyones_worst_peer() {
    let util = Util::default();
    let (mut s, log) = source(4, 2, &util);
    let distinct = |runs: &[(usize, usize)]| {
        let mut sorted = runs.to_vec();
        sorted.sort();
        sorted.dedup();
        sorted.len()
    };
    let samples = poll_until(&mut s, || distinct(&log.0.lock().unwrap()) >= 12);
    // Every ordered pair is measured, and none waits long: a peer resting from its last run is
    // passed over for the next free one, so the order depends on the runs' durations, but all
    // 12 pairs come within two rounds, 24 runs (a scheduler that starved a pair would not).
    let runs = log.0.lock().unwrap().clone();
    assert!(
        runs.len() <= 24,
        "{} runs for 12 pairs: {runs:?}",
        runs.len()
    );
    for gpu in 0..4u32 {
        let worst = of(&samples, Metric::ProbeP2pWorstBandwidth, gpu);
        let pairs = of(&samples, Metric::ProbeP2pBandwidth, gpu);
        assert_eq!(pairs.len(), 3, "GPU {gpu}: {pairs:?}");
        assert_eq!(worst.len(), 1, "one worst series per GPU: {worst:?}");
        let (labels, v) = &worst[0];
        assert_eq!(*v, 300e9, "median of the slowest pair");
        if gpu != 2 {
            assert_eq!(labels, &["2"], "GPU {gpu}'s worst peer is the degraded GPU");
        }
        assert!(of(&samples, Metric::ProbeBandwidth, gpu).is_empty());
        // Against the H100's 450 GB/s per direction of NVLink.
        let fraction = of(&samples, Metric::ProbePeakFraction, gpu);
        assert_eq!(fraction.len(), 1);
        assert_eq!(fraction[0].0, ["p2p_copy"]);
        assert!(
            (fraction[0].1 - 300.0 / 450.0).abs() < 1e-12,
            "{fraction:?}"
        );
    }
    assert!(samples.iter().all(Sample::is_well_formed));
}

#[test]
fn a_busy_peer_is_passed_over_and_with_no_free_peer_the_gpu_waits() {
    let util = Util::default();
    util.0.lock().unwrap().insert("GPU-3".into(), 0.9);
    let (mut s, log) = source(4, 9, &util);
    let samples = poll_until(&mut s, || log.0.lock().unwrap().len() >= 6);
    let runs = log.0.lock().unwrap().clone();
    assert!(
        runs.iter().all(|(a, b)| *a != 3 && *b != 3),
        "the busy GPU is in no pair: {runs:?}"
    );
    assert_eq!(
        of(&samples, Metric::ProbeP2pBandwidth, 0).len(),
        2,
        "GPU 0 measured its two free peers"
    );
    // Two GPUs, the peer busy: nothing runs, and the GPU's skip says why.
    let util = Util::default();
    util.0.lock().unwrap().insert("GPU-1".into(), 0.9);
    let (mut s, log) = source(2, 9, &util);
    let mut samples = Vec::new();
    for _ in 0..4 {
        samples = s.poll().unwrap().samples;
    }
    assert!(log.0.lock().unwrap().is_empty());
    let skipped = of(&samples, Metric::ProbeRuns, 0)
        .into_iter()
        .find(|(l, _)| l == &["p2p_copy", "skipped_busy"])
        .map(|(_, v)| v);
    assert_eq!(skipped, Some(1.0));
    // A single GPU has no pair: the probe does not apply and nothing is counted.
    let (mut s, log) = source(1, 9, &Util::default());
    let samples = s.poll().unwrap().samples;
    assert!(log.0.lock().unwrap().is_empty());
    assert!(of(&samples, Metric::ProbeRuns, 0)
        .iter()
        .all(|(_, v)| *v == 0.0));
}
