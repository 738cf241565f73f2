//! `[[time_slicing]]`: GPUs shared by several processes, each with its weight's part of the
//! work and memory.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dgx_pixels_sim::{GpuReadout, GpuState, Node, Scenario};

const GPUS: &str = r#"
[node]
name = "shared"
seed = 3

[[gpus]]
count = 2
name = "NVIDIA H100 80GB HBM3"
architecture = "Hopper"
memory_total_bytes = 85_899_345_920
power_limit_watts = 700.0
idle_power_watts = 70.0
max_graphics_clock_hz = 1_980_000_000
max_memory_clock_hz = 2_619_000_000
max_video_clock_hz = 1_545_000_000
slowdown_temperature_celsius = 87.0
shutdown_temperature_celsius = 92.0

[[phases]]
start_s = 0
utilization = 0.8
memory_used_ratio = 0.5
noise = 0.0
spread = 0.0
"#;

fn ok(node: &mut Node, gpu: usize, t: f64) -> GpuReadout {
    match node.reading(gpu, Duration::from_secs_f64(t)) {
        Some(GpuState::Ok(r)) => r.readout,
        other => panic!("GPU {gpu}: expected a reading, got {other:?}"),
    }
}

fn scenario(extra: &str) -> Result<Scenario, String> {
    Scenario::from_toml_str(&format!("{GPUS}\n{extra}"), "shared.toml").map_err(|e| e.to_string())
}

#[test]
fn each_process_gets_its_weights_part_of_activity_and_memory() {
    let mut node = Node::new(scenario("[[time_slicing]]\ngpus = [1]\nweights = [3, 1]").unwrap());
    let r = ok(&mut node, 1, 30.0);
    let base = dgx_pixels_sim::process_id(1);
    let pids: Vec<u32> = r.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [base, base + 1]);
    assert_eq!(r.process_count, Some(2));
    let (a, b) = (
        r.processes[0].utilization.unwrap(),
        r.processes[1].utilization.unwrap(),
    );
    let gpu = r.utilization_ratio.unwrap();
    assert!((a.sm - 0.75 * gpu).abs() < 1e-9, "{a:?} of {gpu}");
    assert!((b.sm - 0.25 * gpu).abs() < 1e-9, "{b:?} of {gpu}");
    // The processes' memory adds up to the GPU's, split 3:1 (to the MiB).
    let used: Vec<f64> = r.processes.iter().map(|p| p.used_memory_bytes).collect();
    assert_eq!(used.iter().sum::<f64>(), r.memory_used_bytes.unwrap());
    assert!((used[0] / used[1] - 3.0).abs() < 1e-3, "{used:?}");
    // GPU 0 is not shared: one process, no per-process share.
    let r0 = ok(&mut node, 0, 30.0);
    assert_eq!(r0.processes.len(), 1);
    assert!(r0.processes[0].utilization.is_none());
}

#[test]
fn the_built_in_mig_node_time_slices_gpu_4_between_two_processes() {
    let mut node = Node::new(Scenario::builtin("dgx-a100-mig").unwrap());
    assert_eq!(node.gpu(4).unwrap().process_weights, [0.7, 0.3]);
    let r = ok(&mut node, 4, 60.0);
    assert_eq!(r.processes.len(), 2);
    let sm: f64 = r.processes.iter().map(|p| p.utilization.unwrap().sm).sum();
    assert!((sm - r.utilization_ratio.unwrap()).abs() < 1e-9);
}

#[test]
fn bad_tables_are_refused_with_the_key() {
    for (extra, expect) in [
        (
            "[[time_slicing]]\ngpus = [0]\nweights = [1]",
            "time_slicing[0].weights: expected 2 to 16 weights",
        ),
        (
            "[[time_slicing]]\ngpus = [0]\nweights = [1, 0]",
            "time_slicing[0].weights: expected weights > 0",
        ),
        (
            "[[time_slicing]]\ngpus = [2]\nweights = [1, 1]",
            "time_slicing[0].gpus: GPU index 2 out of range",
        ),
        (
            "[[time_slicing]]\ngpus = []\nweights = [1, 1]",
            "time_slicing[0].gpus: expected at least one GPU index",
        ),
        (
            "[[time_slicing]]\ngpus = [0]\nweights = [1, 1]\n[[time_slicing]]\ngpus = [0]\nweights = [1, 1]",
            "time_slicing[1].gpus: GPU 0 already has a [[time_slicing]] entry",
        ),
        (
            "[[mig]]\ngpu = 0\nprofiles = [\"1g.10gb\"]\n[[time_slicing]]\ngpus = [0]\nweights = [1, 1]",
            "time_slicing[0].gpus: GPU 0 is in MIG mode",
        ),
        (
            "[[time_slicing]]\ngpus = [0]\nweights = [1, 1]\nshare = 1",
            "share",
        ),
    ] {
        let err = scenario(extra).unwrap_err();
        assert!(err.contains(expect), "{extra}: {err}");
    }
}
