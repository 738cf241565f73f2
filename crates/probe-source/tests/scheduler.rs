//! The daemon's probe scheduler against a scripted backend: politeness rules and metrics.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_probe_source::{Backend, GpuId, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::{ProbeError, ProbeKind, ProbeSizes, WorkerFailure};

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(usize, ProbeKind)>>>);

struct Fake {
    log: Log,
    run_time: Duration,
    fail: Option<ProbeKind>,
}

impl Backend for Fake {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok(vec![
            GpuId {
                ordinal: 0,
                uuid: "GPU-a".into(),
                model: "NVIDIA H100 80GB HBM3".into(),
            },
            GpuId {
                ordinal: 1,
                uuid: "GPU-b".into(),
                model: "NVIDIA GB10".into(),
            },
        ])
    }
    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        self.log.0.lock().unwrap().push((gpu.ordinal, kind));
        std::thread::sleep(self.run_time);
        if self.fail == Some(kind) {
            return Err(ProbeError::Cuda(
                "cublasGemmEx: CUBLAS_STATUS_EXECUTION_FAILED".into(),
            ));
        }
        Ok(match kind.unit() {
            dgx_pixels_probes::ProbeUnit::Flops => vec![690e12, 700e12, 710e12],
            dgx_pixels_probes::ProbeUnit::BytesPerSecond => vec![3.0e12, 2.9e12, 3.1e12],
            dgx_pixels_probes::ProbeUnit::Seconds => vec![5e-6, 4e-6, 6e-6],
        })
    }
}

#[derive(Clone, Default)]
struct Util(Arc<Mutex<HashMap<String, (u32, f64)>>>);
impl UtilizationView for Util {
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)> {
        self.0.lock().unwrap().get(uuid).cloned()
    }
}

fn value(samples: &[Sample], metric: Metric, labels: &[&str]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            // The device key's labels, then the sample's own.
            let device = s
                .device
                .iter()
                .flat_map(|d| [d.index().to_string(), d.uuid().to_string()]);
            s.metric == metric
                && device
                    .chain(s.labels.iter().cloned())
                    .eq(labels.iter().copied())
        })
        .map(|s| s.value)
}

fn source(
    run_time: Duration,
    fail: Option<ProbeKind>,
    duty: f64,
) -> (ProbeSource<Fake, Util>, Log, Util) {
    let log = Log::default();
    let util = Util::default();
    let s = ProbeSource::new(
        Fake {
            log: log.clone(),
            run_time,
            fail,
        },
        util.clone(),
        ScheduleSettings {
            probes: vec![
                ProbeKind::GemmBf16,
                ProbeKind::CopyD2D,
                ProbeKind::LaunchLatency,
            ],
            duty_cycle: duty,
            settle: Duration::ZERO,
            ..Default::default()
        },
    )
    .unwrap();
    (s, log, util)
}

#[test]
fn busy_and_unknown_gpus_are_skipped_idle_ones_probed() {
    let (mut s, log, util) = source(Duration::from_millis(1), None, 0.005);
    // NVML calls GPU-a index 3 (CUDA ordinal 0): the exported gpu label follows NVML.
    util.0.lock().unwrap().insert("GPU-a".into(), (3, 0.0));
    // GPU-b has no reading yet.
    let samples = s.poll().unwrap().samples;
    let samples2 = s.poll().unwrap().samples;
    assert_eq!(
        *log.0.lock().unwrap(),
        [(0, ProbeKind::GemmBf16)],
        "only the idle GPU ran"
    );
    assert_eq!(
        value(
            &samples,
            Metric::ProbeRuns,
            &["3", "GPU-a", "gemm_bf16", "ok"]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, Metric::ProbeGemm, &["3", "GPU-a", "gemm_bf16"]),
        Some(700e12),
        "median"
    );
    let frac = value(
        &samples,
        Metric::ProbePeakFraction,
        &["3", "GPU-a", "gemm_bf16"],
    )
    .unwrap();
    assert!((frac - 700.0 / 989.4).abs() < 1e-9);
    // GPU-b starts its rotation one kind on (staggered starts: the node's first runs are of
    // distinct kinds), and its skip counts against that kind.
    assert_eq!(
        value(
            &samples2,
            Metric::ProbeRuns,
            &["1", "GPU-b", "copy_d2d", "skipped_no_utilization"]
        ),
        Some(1.0)
    );
    // Unknown model: no fraction, but the result itself is exported.
    util.0.lock().unwrap().insert("GPU-b".into(), (1, 0.9));
    assert_eq!(
        value(
            &samples2,
            Metric::ProbePeakFraction,
            &["1", "GPU-b", "gemm_bf16"]
        ),
        None
    );
    // Every outcome series exists from the start (so rate() works), zero where nothing happened.
    assert_eq!(
        value(
            &samples,
            Metric::ProbeRuns,
            &["3", "GPU-a", "copy_d2d", "error"]
        ),
        Some(0.0)
    );
    // The duration histogram has the run.
    let count = samples
        .iter()
        .find(|x| x.metric == Metric::ProbeDuration && x.labels[0] == "gemm_bf16")
        .and_then(|x| x.histogram.as_ref())
        .map(|h| h.count as f64);
    assert_eq!(count, Some(1.0));
    assert!(samples.iter().all(Sample::is_well_formed));
}

#[test]
fn the_duty_cycle_spaces_runs_after_the_first_pass_and_busy_gpus_wait() {
    // 20 ms runs at a 10% duty cycle: a GPU's first pass runs its 3 kinds back to back, then
    // it takes their rests together, at least 3 x 200 ms.
    let (mut s, log, util) = source(Duration::from_millis(20), None, 0.1);
    util.0.lock().unwrap().insert("GPU-a".into(), (0, 0.0));
    util.0.lock().unwrap().insert("GPU-b".into(), (1, 0.5));
    let t = std::time::Instant::now();
    while log.0.lock().unwrap().len() < 3 && t.elapsed() < Duration::from_secs(5) {
        s.poll().unwrap();
    }
    let third = std::time::Instant::now();
    assert_eq!(
        *log.0.lock().unwrap(),
        [
            (0, ProbeKind::GemmBf16),
            (0, ProbeKind::CopyD2D),
            (0, ProbeKind::LaunchLatency)
        ],
        "the first pass: each kind once"
    );
    while third.elapsed() < Duration::from_millis(300) {
        s.poll().unwrap();
    }
    assert_eq!(
        log.0.lock().unwrap().len(),
        3,
        "a run came before the first pass's rests were taken"
    );
    let samples = s.poll().unwrap().samples;
    // GPU-b was busy (0.5 > 0.05): skipped once (on copy_d2d, where its staggered rotation
    // starts), then left alone for the retry period.
    assert_eq!(
        value(
            &samples,
            Metric::ProbeRuns,
            &["1", "GPU-b", "copy_d2d", "skipped_busy"]
        ),
        Some(1.0)
    );
    assert!(log.0.lock().unwrap().iter().all(|(g, _)| *g == 0));
    // The next run is due the three rests after the pass (>= 600 ms, longer when the machine
    // is loaded and the 20 ms runs took longer): wait for it rather than guessing when.
    while log.0.lock().unwrap().len() < 4 && third.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
        s.poll().unwrap();
    }
    assert!(third.elapsed() >= Duration::from_millis(600));
    let runs = log.0.lock().unwrap().clone();
    assert_eq!(runs[3], (0, ProbeKind::GemmBf16), "probes rotate");
    let samples = s.poll().unwrap().samples;
    let duty = value(&samples, Metric::ProbeDutyCycle, &["0", "GPU-a"]).unwrap();
    assert!(duty > 0.0 && duty <= 0.2, "{duty}");
}

#[test]
fn a_failing_probe_counts_an_error_and_exports_no_result() {
    let (mut s, _log, util) = source(Duration::ZERO, Some(ProbeKind::GemmBf16), 1.0);
    util.0.lock().unwrap().insert("GPU-a".into(), (0, 0.0));
    util.0.lock().unwrap().insert("GPU-b".into(), (1, 0.0));
    let mut samples = Vec::new();
    // The first pass: each of the 3 kinds once on each of the 2 GPUs.
    for _ in 0..6 {
        samples = s.poll().unwrap().samples;
    }
    assert_eq!(
        value(
            &samples,
            Metric::ProbeRuns,
            &["0", "GPU-a", "gemm_bf16", "error"]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, Metric::ProbeGemm, &["0", "GPU-a", "gemm_bf16"]),
        None
    );
    // Other probes on the same GPU still work.
    assert_eq!(
        value(
            &samples,
            Metric::ProbeBandwidth,
            &["0", "GPU-a", "copy_d2d"]
        ),
        Some(3.0e12)
    );
}

#[test]
fn probes_over_the_memory_cap_are_not_scheduled() {
    let settings = ScheduleSettings {
        probes: vec![ProbeKind::GemmFp32, ProbeKind::LaunchLatency],
        memory_limit_bytes: 512 << 20,
        sizes: ProbeSizes::default(),
        ..Default::default()
    };
    // 3 × 8192² × 4 bytes = 768 MiB > 512 MiB: only launch latency fits.
    assert_eq!(settings.validate().unwrap(), [ProbeKind::LaunchLatency]);
    let none = ScheduleSettings {
        probes: vec![ProbeKind::GemmFp32],
        memory_limit_bytes: 1,
        ..Default::default()
    };
    assert!(none
        .validate()
        .unwrap_err()
        .to_string()
        .contains("memory_limit_bytes"));
    let bad = ScheduleSettings {
        duty_cycle: 0.0,
        ..Default::default()
    };
    assert!(bad.validate().is_err());
}

type Answers = Vec<Result<Vec<f64>, ProbeError>>;

/// A backend whose next answers are scripted (errors the worker reports).
struct Scripted {
    log: Log,
    answers: Arc<Mutex<Answers>>,
}

impl Backend for Scripted {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok(vec![GpuId {
            ordinal: 0,
            uuid: "GPU-a".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
        }])
    }
    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        self.log.0.lock().unwrap().push((gpu.ordinal, kind));
        let mut a = self.answers.lock().unwrap();
        if a.is_empty() {
            Ok(vec![700e12; 3])
        } else {
            a.remove(0)
        }
    }
}

/// Utilization plus who else is on the GPU.
#[derive(Clone, Default)]
struct Occupied {
    util: Util,
    occupancy: Arc<Mutex<dgx_pixels_probe_source::Occupancy>>,
}

impl UtilizationView for Occupied {
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)> {
        self.util.lookup(uuid)
    }
    fn occupancy(&self, _: &str) -> dgx_pixels_probe_source::Occupancy {
        *self.occupancy.lock().unwrap()
    }
}

fn scripted(
    settle: Duration,
    answers: Answers,
) -> (ProbeSource<Scripted, Occupied>, Log, Occupied) {
    let log = Log::default();
    let view = Occupied::default();
    view.util.0.lock().unwrap().insert("GPU-a".into(), (0, 0.0));
    let s = ProbeSource::new(
        Scripted {
            log: log.clone(),
            answers: Arc::new(Mutex::new(answers)),
        },
        view.clone(),
        ScheduleSettings {
            probes: vec![ProbeKind::GemmBf16],
            duty_cycle: 1.0,
            settle,
            ..Default::default()
        },
    )
    .unwrap();
    (s, log, view)
}

fn state(samples: &[Sample], state: &str) -> f64 {
    samples
        .iter()
        .find(|s| s.metric == Metric::ProbeGpus && s.labels == [state])
        .map(|s| s.value)
        .unwrap_or_else(|| panic!("no dgx_pixels_probe_gpus{{state={state:?}}}"))
}

#[test]
fn a_gpu_is_probed_only_after_reading_idle_for_the_settle_window() {
    for settle_ms in [150u64, 400] {
        let (mut s, log, _) = scripted(Duration::from_millis(settle_ms), vec![]);
        let out = s.poll().unwrap().samples;
        assert!(log.0.lock().unwrap().is_empty(), "not settled yet");
        assert_eq!(
            value(
                &out,
                Metric::ProbeRuns,
                &["0", "GPU-a", "gemm_bf16", "skipped_settling"]
            ),
            Some(1.0)
        );
        assert_eq!(state(&out, "settling"), 1.0);
        assert_eq!(state(&out, "measured"), 0.0);
        // Polls before the window ends do not run it either (the retry waits for the window).
        std::thread::sleep(Duration::from_millis(settle_ms / 3));
        s.poll().unwrap();
        assert!(log.0.lock().unwrap().is_empty());
        std::thread::sleep(Duration::from_millis(settle_ms));
        let out = s.poll().unwrap().samples;
        assert_eq!(log.0.lock().unwrap().len(), 1, "ran once settled");
        assert_eq!(state(&out, "measured"), 1.0);
        assert_eq!(state(&out, "settling"), 0.0);
    }
}

#[test]
fn a_busy_reading_restarts_the_settle_window() {
    let (mut s, log, view) = scripted(Duration::from_millis(300), vec![]);
    s.poll().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    view.util.0.lock().unwrap().insert("GPU-a".into(), (0, 0.9));
    s.poll().unwrap();
    view.util.0.lock().unwrap().insert("GPU-a".into(), (0, 0.0));
    std::thread::sleep(Duration::from_millis(150));
    s.poll().unwrap();
    assert!(
        log.0.lock().unwrap().is_empty(),
        "350 ms since the first idle reading, but only 150 since the last busy one"
    );
}

#[test]
fn held_in_use_and_mig_gpus_are_never_probed() {
    use dgx_pixels_probe_source::Occupancy;
    for (occupancy, outcome, st) in [
        (
            Occupancy {
                held: true,
                ..Default::default()
            },
            "skipped_held",
            "held",
        ),
        (
            Occupancy {
                processes: 2,
                ..Default::default()
            },
            "skipped_in_use",
            "in_use",
        ),
        (
            Occupancy {
                mig: true,
                ..Default::default()
            },
            "skipped_mig",
            "mig",
        ),
    ] {
        let (mut s, log, view) = scripted(Duration::ZERO, vec![]);
        *view.occupancy.lock().unwrap() = occupancy;
        let out = s.poll().unwrap().samples;
        assert!(log.0.lock().unwrap().is_empty(), "{outcome}");
        assert_eq!(
            value(
                &out,
                Metric::ProbeRuns,
                &["0", "GPU-a", "gemm_bf16", outcome]
            ),
            Some(1.0),
            "{outcome}"
        );
        assert_eq!(state(&out, st), 1.0);
    }
}

#[test]
fn a_contended_run_is_counted_and_not_served() {
    let (mut s, log, _) = scripted(Duration::ZERO, vec![Err(ProbeError::Contended(1))]);
    let out = s.poll().unwrap().samples;
    assert_eq!(log.0.lock().unwrap().len(), 1);
    assert_eq!(
        value(
            &out,
            Metric::ProbeRuns,
            &["0", "GPU-a", "gemm_bf16", "contended"]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&out, Metric::ProbeRuns, &["0", "GPU-a", "gemm_bf16", "ok"]),
        Some(0.0)
    );
    assert!(
        out.iter().all(|x| x.metric != Metric::ProbeGemm),
        "a collision is not the GPU's capability"
    );
    assert_eq!(state(&out, "contended"), 1.0);
}

#[test]
fn worker_failures_are_their_own_outcomes_and_drop_the_result() {
    for (kind, outcome) in [
        (WorkerFailure::Timeout, "timeout"),
        (WorkerFailure::Crashed, "crashed"),
        (WorkerFailure::BadReply, "error"),
        (WorkerFailure::OutputTooLarge, "error"),
    ] {
        let (mut s, _, _) = scripted(
            Duration::ZERO,
            vec![
                Ok(vec![700e12; 3]),
                Err(ProbeError::Worker {
                    kind,
                    message: "x".into(),
                }),
            ],
        );
        let out = s.poll().unwrap().samples;
        assert!(out.iter().any(|x| x.metric == Metric::ProbeGemm));
        // Duty cycle 1: the next run is due at once.
        std::thread::sleep(Duration::from_millis(5));
        let out = s.poll().unwrap().samples;
        assert_eq!(
            value(
                &out,
                Metric::ProbeRuns,
                &["0", "GPU-a", "gemm_bf16", outcome]
            ),
            Some(1.0),
            "{kind}"
        );
        assert!(
            out.iter().all(|x| x.metric != Metric::ProbeGemm),
            "{kind}: the old result no longer describes the GPU"
        );
        assert_eq!(state(&out, "failed"), 1.0);
    }
}

#[test]
fn worker_skips_are_outcomes_and_wait_before_retrying() {
    use dgx_pixels_probes::worker::Skip;
    for (skip, outcome, st) in [
        (Skip::ComputeMode, "skipped_compute_mode", "compute_mode"),
        (Skip::InUse, "skipped_in_use", "in_use"),
        (Skip::Mig, "skipped_mig", "mig"),
    ] {
        let (mut s, log, _) = scripted(
            Duration::ZERO,
            vec![Err(ProbeError::Skipped(skip, "x".into()))],
        );
        let out = s.poll().unwrap().samples;
        assert_eq!(
            value(
                &out,
                Metric::ProbeRuns,
                &["0", "GPU-a", "gemm_bf16", outcome]
            ),
            Some(1.0)
        );
        assert_eq!(state(&out, st), 1.0);
        s.poll().unwrap();
        assert_eq!(log.0.lock().unwrap().len(), 1, "not asked again at once");
    }
}

#[test]
fn every_state_is_served_and_they_add_up_to_the_gpus() {
    let (mut s, _, _) = source(Duration::from_millis(1), None, 0.005);
    let out = s.poll().unwrap().samples;
    let states: Vec<_> = out
        .iter()
        .filter(|x| x.metric == Metric::ProbeGpus)
        .collect();
    assert_eq!(states.len(), dgx_pixels_probe_source::STATES.len());
    assert_eq!(states.iter().map(|x| x.value).sum::<f64>(), 2.0);
    // Neither GPU has a reading: no proof they are idle.
    assert_eq!(state(&out, "no_utilization"), 1.0, "{states:?}");
    assert_eq!(state(&out, "pending"), 1.0, "the second GPU waits its turn");
}

/// A GEMM so large its buffer size saturates (dgx-pixels-probes' `device_bytes`) is over the
/// memory cap, not wrapped under it; a duty cycle under the minimum names its key.
#[test]
fn a_huge_gemm_is_refused_and_a_tiny_duty_cycle_names_its_key() {
    let sizes = ProbeSizes {
        gemm_n_64bit: i32::MAX as usize,
        ..ProbeSizes::default()
    };
    let settings = ScheduleSettings {
        probes: vec![ProbeKind::GemmFp64],
        sizes,
        ..Default::default()
    };
    assert!(settings.validate().is_err());
    let tiny = ScheduleSettings {
        duty_cycle: 1e-20,
        ..Default::default()
    };
    let e = tiny.validate().unwrap_err().to_string();
    assert!(e.contains("probes.duty_cycle"), "{e}");
}

/// An idle 8-GPU H100 node whose runs hold the GPUs as long as the simulator models
/// (`dgx_pixels_sim`: 330 ms per GPU probe and pair, 150 ms per GPU + 100 ms per size for an
/// all-reduce, a 256 MiB read at 12 GB/s): what `--simulate` gives the scheduler, without a clock.
struct Node8 {
    held: Duration,
    runs: Log,
}

const RUN_HELD: Duration = Duration::from_millis(330);
const NCCL_HELD: Duration = Duration::from_millis(150 * 8 + 100 * 3);

impl Backend for Node8 {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok((0..8)
            .map(|i| GpuId {
                ordinal: i,
                uuid: format!("GPU-{i}"),
                model: "NVIDIA H100 80GB HBM3".into(),
            })
            .collect())
    }
    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        self.runs.0.lock().unwrap().push((gpu.ordinal, kind));
        self.held = RUN_HELD;
        Ok(match kind.unit() {
            dgx_pixels_probes::ProbeUnit::Flops => vec![700e12; 3],
            dgx_pixels_probes::ProbeUnit::BytesPerSecond => vec![3.0e12; 3],
            dgx_pixels_probes::ProbeUnit::Seconds => vec![5e-6; 3],
        })
    }
    fn run_pair(
        &mut self,
        gpu: &GpuId,
        _: &GpuId,
        kind: ProbeKind,
    ) -> Result<Vec<f64>, ProbeError> {
        self.runs.0.lock().unwrap().push((gpu.ordinal, kind));
        self.held = RUN_HELD;
        Ok(vec![380e9; 3])
    }
    fn read_storage(
        &mut self,
        path: &std::path::Path,
        _: &[std::path::PathBuf],
        bytes: u64,
    ) -> Result<dgx_pixels_probes::storage::StorageRead, ProbeError> {
        self.held = Duration::from_secs_f64(bytes as f64 / 12e9);
        Ok(dgx_pixels_probes::storage::StorageRead {
            file: path.to_path_buf(),
            bytes,
            bytes_per_second: 12e9,
            direct: true,
        })
    }
    fn run_nccl(
        &mut self,
        gpus: &[GpuId],
        max_bytes: u64,
    ) -> Result<dgx_pixels_probes::nccl::AllReduce, ProbeError> {
        self.held = NCCL_HELD;
        Ok(dgx_pixels_probes::nccl::AllReduce {
            gpus: gpus.len(),
            version: "fake".into(),
            sizes: vec![dgx_pixels_probes::nccl::SizeResult {
                bytes: max_bytes,
                algbw: 211e9,
                busbw: 370e9,
                busbw_values: vec![370e9],
            }],
        })
    }
    fn held_for(&self) -> Option<Duration> {
        Some(self.held)
    }
}

/// Every probe the product has on an idle 8-GPU node: each GPU kind (every GEMM precision,
/// the three copies, launch latency, `p2p_copy`), `nccl_allreduce` and one storage path, at
/// the default duty cycle and settle window.
fn node8() -> (ProbeSource<Node8, Util>, Log) {
    let runs = Log::default();
    let util = Util::default();
    for i in 0..8 {
        util.0.lock().unwrap().insert(format!("GPU-{i}"), (i, 0.0));
    }
    let s = ProbeSource::new(
        Node8 {
            held: Duration::ZERO,
            runs: runs.clone(),
        },
        util,
        ScheduleSettings {
            probes: ProbeKind::ALL.to_vec(),
            storage_paths: vec!["/scratch".into()],
            nccl_allreduce: true,
            ..Default::default()
        },
    )
    .unwrap();
    (s, runs)
}

/// The kind each served result family stands for: `(probe, sample)` pairs of one poll.
fn kinds_served(out: &[Sample]) -> Vec<String> {
    let mut kinds: Vec<String> = out
        .iter()
        .filter_map(|x| match x.metric {
            Metric::ProbeGemm | Metric::ProbeBandwidth => x.labels.first().cloned(),
            Metric::ProbeLaunchLatency => Some("launch_latency".into()),
            Metric::ProbeP2pWorstBandwidth => Some("p2p_copy".into()),
            Metric::ProbeNcclLargestBusBandwidth => Some("nccl_allreduce".into()),
            Metric::ProbeStorageRead => Some("storage_read".into()),
            _ => None,
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// Issue 44: with NCCL and storage on, the node-level rest after an all-reduce (d /
/// duty_cycle, 300 s here) held every GPU back: no GPU result at all for minutes. Now a first
/// pass reaches every kind within the bound docs/probes.md states ("First pass"): the settle
/// window plus two polls per GPU run and node probe it takes, 2 (max(K, N) + m) polls for K
/// GPU kinds on N GPUs and m node probes (each first-pass run takes a kind the node has no
/// result of yet; with the staggered starts alone it took K + N - 1 runs).
#[test]
fn issue_44_every_kind_within_the_first_pass_bound_and_no_gpu_left_pending() {
    let (mut s, runs) = node8();
    let t0 = std::time::Instant::now();
    let poll = Duration::from_secs(1);
    let (k, n, m) = (ProbeKind::ALL.len(), 8, 2);
    let bound = dgx_pixels_probe_source::DEFAULT_SETTLE + poll * (2 * (k.max(n) + m)) as u32;
    let mut first: std::collections::BTreeMap<String, Duration> = Default::default();
    let mut out = Vec::new();
    let mut t = Duration::ZERO;
    while t <= bound {
        out = s.poll_at(t0 + t).unwrap().samples;
        for kind in kinds_served(&out) {
            first.entry(kind).or_insert(t);
        }
        t += poll;
    }
    let mut want: Vec<String> = ProbeKind::ALL.iter().map(|k| k.name().into()).collect();
    want.extend(["nccl_allreduce".into(), "storage_read".into()]);
    want.sort();
    eprintln!("first result of each kind (s after start): {first:?}");
    assert_eq!(
        first.keys().cloned().collect::<Vec<_>>(),
        want,
        "a result of every kind within {bound:?}: {first:?}"
    );
    assert_eq!(state(&out, "pending"), 0.0, "no GPU left pending");
    assert_eq!(state(&out, "measured"), 8.0, "every GPU measured");
    // The node's first K GPU runs are K different kinds (with the staggered starts alone, 2
    // of the 10 kinds waited for a GPU's second run: 17 runs).
    let runs = runs.0.lock().unwrap().clone();
    let mut first: Vec<ProbeKind> = runs.iter().take(k).map(|(_, kind)| *kind).collect();
    first.sort_by_key(|kind| kind.name());
    first.dedup();
    assert_eq!(first.len(), k, "the first {k} runs: {runs:?}");
}

/// Issue 44, after the first pass: the all-reduce and the GPUs' own probes share each GPU's
/// duty budget ([`dgx_pixels_probe_source::NODE_SHARE`]): over 4 hours of 10 s polls neither
/// starves (the old scheduler ran no GPU probe while the all-reduce came due every 301.5 s),
/// and each GPU's `dgx_pixels_probe_duty_cycle_ratio` stays within the bound docs/probes.md
/// states: `duty_cycle x T + B` of GPU time by time T, B the first pass's burst (2 K runs held
/// without a rest) plus one all-reduce; back at `duty_cycle` once the pass's rests are taken.
#[test]
fn issue_44_the_all_reduce_and_the_gpu_probes_share_the_duty_budget() {
    let (mut s, runs) = node8();
    let t0 = std::time::Instant::now();
    let duty = dgx_pixels_probe_source::DEFAULT_DUTY_CYCLE;
    let burst = RUN_HELD * (2 * ProbeKind::ALL.len()) as u32 + NCCL_HELD;
    let hours = 4;
    let mut out = Vec::new();
    for t in (10..=hours * 3600u64).step_by(10) {
        out = s.poll_at(t0 + Duration::from_secs(t)).unwrap().samples;
        let held_max = duty * t as f64 + burst.as_secs_f64();
        for x in out.iter().filter(|x| x.metric == Metric::ProbeDutyCycle) {
            // The ratio is over the time since the source started, a moment before t0.
            assert!(x.value * t as f64 <= held_max * 1.001, "{t} s: {x:?}");
        }
    }
    let runs = runs.0.lock().unwrap().clone();
    let nccl = value(&out, Metric::ProbeNcclRuns, &["ok"]).unwrap();
    // The all-reduce: 1.5 s held, rests 1.5 s / (0.005 x 1/2) = 600 s.
    assert!(nccl >= 20.0, "{nccl} all-reduces in {hours} h");
    for g in 0..8 {
        // Its own probes: 330 ms held, rests 132 s (plus the pair runs it joins as a peer),
        // on 10 s polls: 80 or 81 runs each (the old scheduler: 6).
        let own = runs.iter().filter(|(o, _)| *o == g).count();
        assert!(own >= 60, "GPU {g}: {own} runs in {hours} h");
        let ratio = value(
            &out,
            Metric::ProbeDutyCycle,
            &[&g.to_string(), &format!("GPU-{g}")],
        )
        .unwrap();
        assert!(ratio <= duty * 1.05, "GPU {g}: {ratio}");
    }
}

/// At the daemon's start no GPU has a reading yet (NVML's first poll has not published): a
/// GPU skipped for that is looked at again after `NO_READING_RETRY` (5 s), not the 30 s of the
/// other skips, so the first probes do not wait half a minute for nothing.
#[test]
fn a_gpu_without_a_reading_yet_is_looked_at_again_within_seconds() {
    use dgx_pixels_probe_source::{NO_READING_RETRY, SKIP_RETRY};
    assert!(NO_READING_RETRY < SKIP_RETRY);
    let (mut s, log, view) = scripted(Duration::ZERO, vec![]);
    view.util.0.lock().unwrap().clear();
    let out = s.poll().unwrap().samples;
    assert_eq!(state(&out, "no_utilization"), 1.0);
    // The reading arrives; the GPU waits out its retry, then is probed.
    view.util.0.lock().unwrap().insert("GPU-a".into(), (0, 0.0));
    s.poll().unwrap();
    assert!(log.0.lock().unwrap().is_empty(), "not asked again at once");
    std::thread::sleep(NO_READING_RETRY + Duration::from_millis(200));
    s.poll().unwrap();
    assert_eq!(
        log.0.lock().unwrap().len(),
        1,
        "probed once its retry passed"
    );
}
