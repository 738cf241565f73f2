//! The fault kinds that drive the health rules (issue 19, part 8): NVLink links down and
//! erring, a degraded PCIe link, the power brake, a GPU reset, and what memory errors do to
//! rows and pages; their validation; and the `fault-health` scenario's timeline, which the
//! exporter's health tests rely on.
//!
//! One module a topic; the helpers and the one-GPU scenario they share are here.
#![allow(clippy::unwrap_used)]

mod devices;
mod fabric_and_rail;
mod fault_health;
mod memory;
mod platform;
mod validation;

use std::time::Duration;

use dgx_pixels_sim::{GpuReadout, GpuState, Node, Scenario};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn ok(node: &mut Node, gpu: usize, t: f64) -> GpuReadout {
    match node.reading(gpu, secs(t)) {
        Some(GpuState::Ok(r)) => r.readout,
        other => panic!("GPU {gpu} at {t} s: expected a reading, got {other:?}"),
    }
}

/// A one-GPU H100 scenario under load (an optional architecture swap) with the given faults.
fn gpu(architecture: &str, faults: &str) -> Node {
    let text = format!("{GPU}\n{faults}").replace("\"Hopper\"", &format!("\"{architecture}\""));
    Node::new(Scenario::from_toml_str(&text, "custom.toml").unwrap())
}

fn hopper(faults: &str) -> Node {
    gpu("Hopper", faults)
}

fn error(faults: &str) -> String {
    Scenario::from_toml_str(&format!("{GPU}\n{faults}"), "f.toml")
        .unwrap_err()
        .to_string()
}

const GPU: &str = r#"
[node]
name = "custom"
seed = 3

[[gpus]]
name = "NVIDIA H100 80GB HBM3"
architecture = "Hopper"
memory_total_bytes = 85_899_345_920
power_limit_watts = 700.0
idle_power_watts = 70.0
max_power_watts = 735.0
max_graphics_clock_hz = 1_980_000_000
max_memory_clock_hz = 2_619_000_000
max_video_clock_hz = 1_545_000_000
nvlink_count = 4
slowdown_temperature_celsius = 87.0
shutdown_temperature_celsius = 92.0
thermal_resistance_celsius_per_watt = 0.06

[[phases]]
start_s = 0
utilization = 0.9
"#;
