//! Against the fake libnvidia-ml (crates/fake-nvml) answering `NOT_SUPPORTED` to
//! `nvmlDeviceGetMPSComputeRunningProcesses_v3` (`FAKE_NVML_MPS=0`, as drivers without it do),
//! on dgx-a100-mig: each GPU is asked once, not every poll, and the source stays up.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use dgx_pixels_metrics::{Metric, Source};
use dgx_pixels_nvml::{call_stats, NvmlOptions, NvmlSource};

#[test]
fn a_gpu_without_the_mps_call_is_asked_once() {
    let lib = common::fake_library();
    common::frozen_at("dgx-a100-mig", "60");
    std::env::set_var("FAKE_NVML_MPS", "0");
    let mut s = NvmlSource::with_options(NvmlOptions {
        library: Some(lib),
        gpu_deadline: Duration::from_secs(10),
        power_sample_interval: Duration::ZERO,
        profiling: false,
        ..NvmlOptions::default()
    });
    for _ in 0..4 {
        let out = s.poll().unwrap().samples;
        let on = |g: u32| {
            out.iter()
                .filter(|x| {
                    x.metric == Metric::ProcessMemoryUsed && x.device.as_ref().unwrap().index() == g
                })
                .count()
        };
        // The time-sliced GPU's compute processes stay; the MPS clients cannot be listed.
        assert_eq!(on(4), 2);
        assert_eq!(on(5), 0);
    }
    let asked = call_stats()
        .into_iter()
        .find(|c| c.function == "nvmlDeviceGetMPSComputeRunningProcesses_v3")
        .map_or(0, |c| c.calls);
    // Once per GPU (eight), on the first poll.
    assert_eq!(asked, 8);
}
