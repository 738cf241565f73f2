//! Which GPUs run what, how often: busy GPUs skipped, the duty cycle, failures, the memory cap.

use std::time::Duration;

use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_probe_source::ScheduleSettings;
use dgx_pixels_probes::{ProbeKind, ProbeSizes};

use super::{source, value};

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
