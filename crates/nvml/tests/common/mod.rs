//! What the tests against the fake libnvidia-ml share.
#![allow(dead_code, clippy::unwrap_used)] // each test file uses a subset; a panic is the report

use std::path::PathBuf;

/// The fake libnvidia-ml (crates/fake-nvml), built once per test process (fake-support).
pub fn fake_library() -> PathBuf {
    fake_support::Fake::Nvml.build().unwrap()
}

/// Sets the fake driver's environment for this process: scenario `scenario` (a built-in name
/// or a file) frozen at `time_s` seconds, PCIe counters without their delay. The fake reads its
/// environment once, at init: one test per file that calls this.
pub fn frozen_at(scenario: impl AsRef<std::ffi::OsStr>, time_s: &str) {
    std::env::set_var("FAKE_NVML_SCENARIO", scenario);
    std::env::set_var("FAKE_NVML_TIME", time_s);
    std::env::set_var("FAKE_NVML_PCIE_DELAY_MS", "0");
}

/// An NVML source on the fake driver `lib` taking its slow readings at every poll, as the
/// NVLink and fabric tests want them.
pub fn every_poll_slow(lib: PathBuf) -> dgx_pixels_nvml::NvmlSource {
    dgx_pixels_nvml::NvmlSource::with_options(dgx_pixels_nvml::NvmlOptions {
        library: Some(lib),
        gpu_deadline: std::time::Duration::from_secs(10),
        slow_interval: std::time::Duration::ZERO,
        power_sample_interval: std::time::Duration::ZERO,
        profiling: false,
        ..dgx_pixels_nvml::NvmlOptions::default()
    })
}

/// Calls of NVML function `function` (its `calls.rs` name) made so far in this process.
pub fn calls(function: &str) -> u64 {
    dgx_pixels_nvml::call_stats()
        .iter()
        .find(|s| s.function == function)
        .map_or(0, |s| s.calls)
}

/// `dgx-b200` with 9 symbol errors on GPU 0's link 5 from 1 s, written to a file for
/// `FAKE_NVML_SCENARIO`, which the caller removes.
pub fn b200_with_symbol_errors(name: &str) -> PathBuf {
    let text = dgx_pixels_sim::Scenario::builtin_text("dgx-b200").unwrap();
    let fault = "[[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 5\n\
                 error_type = \"symbol\"\nerrors = 9\nat_s = 1\n";
    let path = std::env::temp_dir().join(format!("{name}-{}.toml", std::process::id()));
    std::fs::write(&path, format!("{text}\n{fault}")).unwrap();
    path
}

/// `(error_type, value)` of `dgx_pixels_nvlink_errors_total` for GPU `gpu`.
pub fn nvlink_errors<'a>(out: &'a [dgx_pixels_metrics::Sample], gpu: &str) -> Vec<(&'a str, f64)> {
    out.iter()
        .filter(|s| {
            s.metric == dgx_pixels_metrics::Metric::NvlinkErrors && s.label("gpu") == Some(gpu)
        })
        .map(|s| (s.label("error_type").unwrap(), s.value))
        .collect()
}

/// `(gpu, link, error_type, value)` of `dgx_pixels_nvlink_link_errors_total`.
pub fn nvlink_link_errors(
    out: &[dgx_pixels_metrics::Sample],
) -> Vec<(String, String, String, f64)> {
    out.iter()
        .filter(|s| s.metric == dgx_pixels_metrics::Metric::NvlinkLinkErrors)
        .map(|s| {
            let l = |n| s.label(n).unwrap().to_string();
            (l("gpu"), l("link"), l("error_type"), s.value)
        })
        .collect()
}

/// The NVLink 5 totals of a B200 with 9 symbol errors on one link (`gpu0`) and without.
pub fn nvlink5_totals(symbol: f64) -> Vec<(&'static str, f64)> {
    vec![
        ("receive", 0.0),
        ("link_integrity", 0.0),
        ("transmit_discard", 0.0),
        ("recovery_failed", 0.0),
        ("effective", 0.0),
        ("symbol", symbol),
    ]
}

/// The last of `polls` polls of the fake dgx-b200 with symbol errors (scenario file `name`),
/// every reading slow, with the fake's environment `env` (`FAKE_NVML_NVLINK5_SCOPE`, ...) on top
/// of a fixed clock and no PCIe delay. For one test per process: the fake reads its environment
/// at init.
pub fn b200_after_polls(
    name: &str,
    env: &[(&str, &str)],
    polls: u64,
) -> Vec<dgx_pixels_metrics::Sample> {
    use dgx_pixels_metrics::Source;
    let lib = fake_library();
    let path = b200_with_symbol_errors(name);
    std::env::set_var("FAKE_NVML_SCENARIO", &path);
    for (k, v) in env {
        std::env::set_var(k, v);
    }
    std::env::set_var("FAKE_NVML_TIME", "60");
    std::env::set_var("FAKE_NVML_PCIE_DELAY_MS", "0");
    let mut s = every_poll_slow(lib);
    let mut out = Vec::new();
    for _ in 0..polls {
        out = s.poll().unwrap().samples;
    }
    std::fs::remove_file(&path).unwrap();
    out
}
