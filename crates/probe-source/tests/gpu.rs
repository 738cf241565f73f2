//! The probes on a real GPU: a one-shot run and the daemon's source both produce measurements,
//! in range for any NVIDIA data-center GPU.
//!
//! Needs a GPU host (CUDA driver and at least one GPU; cuBLAS for the GEMM), so these are
//! `#[ignore]`d and named `gpu_*`: `scripts/test` runs them with `--ignored` where a GPU is
//! present and reports them as not run elsewhere, where `tests/no_cuda.rs` runs instead
//! (docs/testing.md). Run by hand: `cargo test -p dgx-pixels-probes --test gpu -- --ignored`.
#![allow(clippy::unwrap_used)]

use dgx_pixels_metrics::{Metric, Source};
use dgx_pixels_probe_source::{CudaBackend, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::cuda::{availability, device_count, list_devices};
use dgx_pixels_probes::{run_once, Environment, ProbeKind, ProbeSizes, ProbeUnit, RunOptions};

/// Fails (never passes quietly) when run where no GPU can be used.
fn require_gpu() -> usize {
    let a = availability();
    assert!(
        a.driver,
        "this test needs an NVIDIA driver and a GPU, and libcuda.so.1 does not load here: \
         scripts/test runs the no_driver_* tests on such a machine instead"
    );
    let n = device_count().unwrap();
    assert!(n > 0, "the CUDA driver loads but sees no GPU");
    n
}

/// Small sizes: the test checks that probes measure, not how fast the GPU is.
fn small() -> ProbeSizes {
    ProbeSizes {
        gemm_n_16bit: 1024,
        gemm_n_32bit: 1024,
        gemm_n_64bit: 512,
        copy_bytes: 16 << 20,
        host_copy_bytes: 8 << 20,
        launches: 100,
        target_seconds: 0.005,
    }
}

#[test]
#[ignore = "environment: gpu (needs an NVIDIA driver and a GPU; scripts/test runs it on a GPU host)"]
fn gpu_probes_produce_results_on_every_gpu() {
    let n = require_gpu();
    let mut probes = vec![
        ProbeKind::CopyD2D,
        ProbeKind::CopyH2D,
        ProbeKind::LaunchLatency,
    ];
    if availability().cublas {
        probes.push(ProbeKind::GemmFp32);
    }
    let opts = RunOptions {
        probes: probes.clone(),
        gpus: None,
        warmup: 1,
        iterations: 3,
        seed: 42,
        sizes: small(),
    };
    let (results, failures) = run_once(&opts, Environment::default(), &mut |_| {}).unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(
        results.results.len(),
        n * probes.len(),
        "every probe on every GPU"
    );
    let devices = list_devices().unwrap();
    for r in &results.results {
        assert_eq!(r.values.len(), 3, "{}: 3 recorded iterations", r.probe);
        assert!(r.uuid.starts_with("GPU-"), "{}: uuid {}", r.probe, r.uuid);
        assert!(devices.iter().any(|(o, u, _)| *o == r.gpu && *u == r.uuid));
        let median = r.summary.as_ref().unwrap().median;
        // Ranges any NVIDIA GPU since Volta meets, far from zero and from absurd.
        let plausible = match r.unit {
            ProbeUnit::Flops => (1e11..1e16).contains(&median),
            ProbeUnit::BytesPerSecond => (1e9..1e13).contains(&median),
            ProbeUnit::Seconds => (1e-7..1e-3).contains(&median),
        };
        assert!(
            plausible,
            "{} on GPU {}: median {median} {:?}",
            r.probe, r.gpu, r.unit
        );
    }
}

/// Every GPU idle, as the daemon's NVML readings would say.
struct Idle;
impl UtilizationView for Idle {
    fn lookup(&self, _: &str) -> Option<(u32, f64)> {
        Some((0, 0.0))
    }
}

#[test]
#[ignore = "environment: gpu (needs an NVIDIA driver and a GPU; scripts/test runs it on a GPU host)"]
fn gpu_the_daemon_source_serves_measurements() {
    require_gpu();
    let mut source = ProbeSource::new(
        CudaBackend { sizes: small() },
        Idle,
        ScheduleSettings {
            probes: vec![ProbeKind::LaunchLatency, ProbeKind::CopyD2D],
            duty_cycle: 1.0,
            settle: std::time::Duration::ZERO,
            ..ScheduleSettings::default()
        },
    )
    .unwrap();
    // Each poll runs at most one due probe; with a duty cycle of 1 the next is due after as
    // long as the last one took.
    let mut samples = Vec::new();
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        samples = source.poll().unwrap().samples;
        let has = |m: Metric| samples.iter().any(|s| s.metric == m);
        if has(Metric::ProbeLaunchLatency) && has(Metric::ProbeBandwidth) {
            break;
        }
    }
    let latency: Vec<f64> = samples
        .iter()
        .filter(|s| s.metric == Metric::ProbeLaunchLatency)
        .map(|s| s.value)
        .collect();
    assert!(!latency.is_empty(), "no launch latency served: {samples:?}");
    assert!(
        latency.iter().all(|v| (1e-7..1e-3).contains(v)),
        "{latency:?}"
    );
    let bandwidth: Vec<f64> = samples
        .iter()
        .filter(|s| s.metric == Metric::ProbeBandwidth)
        .map(|s| s.value)
        .collect();
    assert!(!bandwidth.is_empty(), "no bandwidth served");
    assert!(
        bandwidth.iter().all(|v| (1e9..1e13).contains(v)),
        "{bandwidth:?}"
    );
    let ok_runs: f64 = samples
        .iter()
        .filter(|s| s.metric == Metric::ProbeRuns && s.label("outcome") == Some("ok"))
        .map(|s| s.value)
        .sum();
    assert!(ok_runs >= 2.0, "runs counted as ok: {ok_runs}");
    assert!(
        !samples
            .iter()
            // Every outcome is served, 0 included: a failed run is a count above 0.
            .any(|s| s.metric == Metric::ProbeRuns
                && s.label("outcome") == Some("error")
                && s.value > 0.0),
        "no failed run: {samples:?}"
    );
}
