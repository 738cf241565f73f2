//! Behaviour of the simulator through its public API.
//!
//! One module a topic; the helpers and the one-GPU scenario they share are here.
#![allow(clippy::unwrap_used)]

mod builtins;
mod determinism;
mod errors;
mod faults;
mod physics;
mod telemetry;

use std::time::Duration;

use dgx_pixels_sim::{GpuReadout, GpuState, Node, Scenario, ScenarioError};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn node(name: &str) -> Node {
    Node::new(Scenario::builtin(name).unwrap())
}

fn ok(node: &mut Node, gpu: usize, t: f64) -> GpuReadout {
    match node.reading(gpu, secs(t)) {
        Some(GpuState::Ok(r)) => r.readout,
        other => panic!("GPU {gpu} at {t} s: expected a reading, got {other:?}"),
    }
}

/// A one-GPU H100-like scenario with the given extra TOML (phases, faults).
fn custom(extra: &str) -> Node {
    let text = format!("{GPU}\n{extra}");
    Node::new(Scenario::from_toml_str(&text, "custom.toml").unwrap())
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
idle_graphics_clock_hz = 345_000_000
nvlink_count = 18
slowdown_temperature_celsius = 87.0
shutdown_temperature_celsius = 92.0
thermal_resistance_celsius_per_watt = 0.06
thermal_time_constant_s = 30.0
"#;

fn assert_send<T: Send>() {}

#[test]
fn node_is_send() {
    assert_send::<Node>();
    assert_send::<Scenario>();
    assert_send::<ScenarioError>();
}
