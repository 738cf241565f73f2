//! Against the fake libnvidia-ml on a Hopper node (dgx-h100): the NVLink 5 fields, answered
//! "not supported" in both scopes, are asked again after 2, then 4 ... slow readings (never
//! given up for good, and cheap where they never answer), and the legacy counters are served
//! as before.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use dgx_pixels_metrics::{Metric, Source};
use dgx_pixels_nvml::{call_stats, NvmlOptions, NvmlSource};

fn calls(function: &str) -> u64 {
    call_stats()
        .iter()
        .find(|s| s.function == function)
        .map_or(0, |s| s.calls)
}

// One test in this file: the fake reads its environment at init, for this process.
#[test]
fn hopper_is_asked_for_nvlink5_counters_after_growing_pauses() {
    let lib = common::fake_library();
    common::frozen_at("dgx-h100", "60");
    let mut s = NvmlSource::with_options(NvmlOptions {
        library: Some(lib),
        gpu_deadline: Duration::from_secs(10),
        slow_interval: Duration::ZERO,
        power_sample_interval: Duration::ZERO,
        profiling: false,
        ..NvmlOptions::default()
    });
    // Asked at readings 1 and 4 (then 9, after 4 skipped).
    let polls = 8;
    let mut out = Vec::new();
    for _ in 0..polls {
        out = s.poll().unwrap().samples;
    }
    let gpus = 8;
    assert_eq!(calls("nvmlDeviceGetFieldValues(nvlink)"), 2 * gpus);
    assert_eq!(calls("nvmlDeviceGetFieldValues(nvlink per link)"), 2 * gpus);
    // 18 links x 4 types, every slow reading.
    assert_eq!(
        calls("nvmlDeviceGetNvLinkErrorCounter"),
        polls * gpus * 18 * 4
    );
    let types: Vec<_> = out
        .iter()
        .filter(|x| x.metric == Metric::NvlinkErrors && x.label("gpu") == Some("0"))
        .map(|x| x.label("error_type").unwrap())
        .collect();
    assert_eq!(types, ["replay", "recovery", "crc_flit", "crc_data"]);
}
