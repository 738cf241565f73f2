//! Without CUDA every entry point reports "unavailable" instead of panicking, which is what
//! cudarc does when left unguarded.
//!
//! These tests need a machine without an NVIDIA driver, so they are `#[ignore]`d and named
//! `no_driver_*`: `scripts/test` runs them with `--ignored` where `libcuda.so.1` does not load
//! and reports them as not run on a GPU host, where `tests/gpu.rs` runs instead
//! (docs/testing.md). Run by hand: `cargo test -p dgx-pixels-probes --test no_cuda -- --ignored`.
#![allow(clippy::unwrap_used)]

use dgx_pixels_metrics::Source;
use dgx_pixels_probe_source::{CudaBackend, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::cuda::{availability, device_count, Gpu};
use dgx_pixels_probes::{run_once, Environment, ProbeError, ProbeKind, ProbeSizes, RunOptions};

struct Idle;
impl UtilizationView for Idle {
    fn lookup(&self, _: &str) -> Option<(u32, f64)> {
        Some((0, 0.0))
    }
}

/// Fails (never passes quietly) when run where a CUDA driver loads.
fn require_no_driver() {
    assert!(
        !availability().driver,
        "this test needs a machine without an NVIDIA driver, and libcuda.so.1 loads here: \
         scripts/test runs the gpu_* tests on such a machine instead"
    );
}

#[test]
#[ignore = "environment: no-driver (needs a machine without an NVIDIA driver; scripts/test runs it there)"]
fn no_driver_every_entry_point_reports_unavailable() {
    require_no_driver();
    let err = device_count().unwrap_err();
    assert!(matches!(err, ProbeError::Unavailable(_)), "{err:?}");
    assert!(err.to_string().contains("libcuda.so.1"), "{err}");
    assert!(matches!(
        Gpu::open(0).unwrap_err(),
        ProbeError::Unavailable(_)
    ));
    let opts = RunOptions {
        probes: vec![ProbeKind::GemmBf16, ProbeKind::CopyD2D],
        gpus: None,
        warmup: 1,
        iterations: 3,
        seed: 42,
        sizes: ProbeSizes::default(),
    };
    let err = run_once(&opts, Environment::default(), &mut |_| {}).unwrap_err();
    assert!(err.to_string().starts_with("CUDA unavailable:"), "{err}");
}

#[test]
#[ignore = "environment: no-driver (needs a machine without an NVIDIA driver; scripts/test runs it there)"]
fn no_driver_the_daemon_source_reports_down_and_keeps_answering() {
    require_no_driver();
    let mut source = ProbeSource::new(
        CudaBackend {
            sizes: ProbeSizes::default(),
        },
        Idle,
        ScheduleSettings::default(),
    )
    .unwrap();
    for _ in 0..3 {
        let e = source.poll().unwrap_err();
        assert_eq!(e.kind, "cuda_unavailable");
        assert!(e.message.contains("libcuda.so.1"), "{}", e.message);
    }
}
