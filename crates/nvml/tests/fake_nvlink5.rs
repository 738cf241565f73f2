//! Against the fake libnvidia-ml on a Blackwell node (dgx-b200 with symbol errors on GPU 0's
//! link 5): the NVLink 5 counters are read as field values, one batch per GPU and slow reading,
//! and served in place of the legacy types, whose call the GPU answered "not supported" once
//! and is not asked again.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_nvml::{call_stats, NvmlOptions, NvmlSource};
use dgx_pixels_sim::Scenario;

fn calls(function: &str) -> u64 {
    call_stats()
        .iter()
        .find(|s| s.function == function)
        .map_or(0, |s| s.calls)
}

fn errors<'a>(out: &'a [Sample], gpu: &str) -> Vec<(&'a str, f64)> {
    out.iter()
        .filter(|s| s.metric == Metric::NvlinkErrors && s.label("gpu") == Some(gpu))
        .map(|s| (s.label("error_type").unwrap(), s.value))
        .collect()
}

// One test in this file: the fake reads its environment at init, for this process.
#[test]
fn blackwell_serves_the_nvlink5_counters_read_per_link_as_fields() {
    let lib = common::fake_library();
    let text = Scenario::builtin_text("dgx-b200").unwrap();
    let fault = "[[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 5\n\
                 error_type = \"symbol\"\nerrors = 9\nat_s = 1\n";
    let path = std::env::temp_dir().join(format!("nvlink5-{}.toml", std::process::id()));
    std::fs::write(&path, format!("{text}\n{fault}")).unwrap();
    std::env::set_var("FAKE_NVML_SCENARIO", &path);
    std::env::set_var("FAKE_NVML_TIME", "60");
    std::env::set_var("FAKE_NVML_PCIE_DELAY_MS", "0");
    // Every poll takes the slow readings.
    let mut s = NvmlSource::with_options(NvmlOptions {
        library: Some(lib),
        gpu_deadline: Duration::from_secs(10),
        slow_interval: Duration::ZERO,
        power_sample_interval: Duration::ZERO,
        profiling: false,
        ..NvmlOptions::default()
    });
    let polls = 3;
    let mut out = Vec::new();
    for _ in 0..polls {
        out = s.poll().unwrap().samples;
    }
    std::fs::remove_file(&path).unwrap();
    let gpus = 8;
    let nvlink5 = [
        ("receive", 0.0),
        ("link_integrity", 0.0),
        ("transmit_discard", 0.0),
        ("recovery_failed", 0.0),
        ("effective", 0.0),
    ];
    let mut gpu0 = nvlink5.to_vec();
    gpu0.push(("symbol", 9.0));
    assert_eq!(errors(&out, "0"), gpu0);
    let mut gpu1 = nvlink5.to_vec();
    gpu1.push(("symbol", 0.0));
    assert_eq!(errors(&out, "1"), gpu1);
    // The link is named where it counted errors.
    assert!(out.iter().any(|x| x.metric == Metric::NvlinkLinkErrors
        && x.label("gpu") == Some("0")
        && x.label("link") == Some("5")
        && x.label("error_type") == Some("symbol")
        && x.value == 9.0));
    // One batch per GPU and slow reading; the legacy call only for link 0 of the first reading.
    assert_eq!(calls("nvmlDeviceGetFieldValues(nvlink)"), polls * gpus);
    assert_eq!(calls("nvmlDeviceGetNvLinkErrorCounter"), 4 * gpus);
}
