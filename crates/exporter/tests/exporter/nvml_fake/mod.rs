//! The real binary reading "GPUs" through NVML: `--nvml.library` points at our fake
//! libnvidia-ml (crates/fake-nvml), which answers from the simulator. Values served must equal
//! what the simulator defines for the same scenario and time.
//!
//! One module a topic; starting the daemon on the fake NVML is here.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod failures;
mod readings;
mod values;

use crate::common;

use common::*;

/// Starts the daemon on the fake with the given scenario and extra fake settings, serving every
/// series (these tests compare readings; the series budget has its own test).
fn start_fake(scenario: &str, fake_env: &[(&str, &str)], args: &[&str]) -> Daemon {
    let mut env = vec![
        ("FAKE_NVML_SCENARIO", scenario),
        ("FAKE_NVML_PCIE_DELAY_MS", "0"),
    ];
    env.extend_from_slice(fake_env);
    let mut all = vec![
        "--nvml.library",
        fake_nvml_library(),
        "--metrics.detail",
        "full",
    ];
    all.extend_from_slice(args);
    start_with_env(&all, &env)
}
