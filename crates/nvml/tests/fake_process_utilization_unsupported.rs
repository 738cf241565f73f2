//! Against the fake libnvidia-ml (crates/fake-nvml) answering `NOT_SUPPORTED` to
//! `nvmlDeviceGetProcessUtilization` (`FAKE_NVML_PROCESS_UTILIZATION=0`, as vGPUs and some
//! drivers do), on dgx-a100-mig with its shared GPUs 4 and 5: no activity series, and each
//! GPU is asked once, not every poll.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use dgx_pixels_metrics::{Metric, Source};
use dgx_pixels_nvml::{call_stats, NvmlOptions, NvmlSource};

#[test]
fn a_gpu_without_process_utilization_is_asked_once() {
    let lib = common::fake_library();
    common::frozen_at("dgx-a100-mig", "60");
    std::env::set_var("FAKE_NVML_PROCESS_UTILIZATION", "0");
    let mut s = NvmlSource::with_options(NvmlOptions {
        library: Some(lib),
        gpu_deadline: Duration::from_secs(10),
        power_sample_interval: Duration::ZERO,
        profiling: false,
        ..NvmlOptions::default()
    });
    for _ in 0..4 {
        let out = s.poll().unwrap().samples;
        assert!(!out.iter().any(|x| x.metric == Metric::ProcessUtilization));
        // The GPU's other process series stay.
        assert_eq!(
            out.iter()
                .filter(|x| x.metric == Metric::ProcessMemoryUsed
                    && x.device.as_ref().unwrap().index() == 4)
                .count(),
            2
        );
    }
    let asked = call_stats()
        .into_iter()
        .find(|c| c.function == "nvmlDeviceGetProcessUtilization")
        .map_or(0, |c| c.calls);
    // Only GPUs 4 (time-sliced) and 5 (MPS) are shared; the size query of each one's first
    // poll answered NOT_SUPPORTED.
    assert_eq!(asked, 2);
}
