//! Without CUDA (this test machine has no NVIDIA driver) every entry point reports
//! "unavailable" instead of panicking, which is what cudarc does when left unguarded.
#![allow(clippy::unwrap_used)]

use dgx_pixels_metrics::Source;
use dgx_pixels_probes::cuda::{availability, device_count, Gpu};
use dgx_pixels_probes::scheduler::{CudaBackend, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::{run_once, Environment, ProbeError, ProbeKind, ProbeSizes, RunOptions};

struct Idle;
impl UtilizationView for Idle {
    fn lookup(&self, _: &str) -> Option<(String, f64)> {
        Some(("0".into(), 0.0))
    }
}

fn no_driver_here() -> bool {
    let a = availability();
    if a.driver {
        eprintln!("a CUDA driver is present: this test only applies to machines without one");
    }
    !a.driver
}

#[test]
fn every_entry_point_reports_unavailable() {
    if !no_driver_here() {
        return;
    }
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
fn the_daemon_source_reports_down_and_keeps_answering() {
    if !no_driver_here() {
        return;
    }
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
