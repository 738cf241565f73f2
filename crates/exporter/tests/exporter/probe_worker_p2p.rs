//! The `p2p_copy` probe end to end on the fake CUDA driver and the fake NVML: the daemon runs
//! each GPU against each peer in turn, each pair in one worker holding both GPUs, serves the
//! pairs at full detail and each GPU's worst peer, and a degraded NVLink shows as the GPU that
//! is every other GPU's worst peer, at the simulator's modeled bandwidth.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{fake_cuda_dir, fake_nvml_library, start_with_env, value, wait_until};

const SCENARIO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/p2p-node.toml");
const TIME: &str = "30";

/// The simulator's bandwidth of a copy from `gpu` to `peer` in the scenario.
fn model(gpu: usize, peer: usize) -> f64 {
    let mut node = dgx_pixels_sim::Node::new(dgx_pixels_sim::Scenario::load(SCENARIO).unwrap());
    node.peer_expected(gpu, peer, Duration::from_secs(TIME.parse().unwrap()))
        .unwrap()
}

#[test]
fn every_pair_is_measured_by_a_worker_and_the_degraded_gpu_is_every_gpus_worst_peer() {
    let state = tempfile::tempdir().unwrap();
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        "[probes]\nprobes = \"p2p_copy\"\nduty_cycle = 1.0\nsettle = \"0s\"\n\
         [collector.probes]\ninterval = \"100ms\"\n[collector.nvml]\ninterval = \"200ms\"\n",
    )
    .unwrap();
    let state_dir = state.path().to_str().unwrap().to_string();
    let lib_dir = fake_cuda_dir().to_str().unwrap().to_string();
    let daemon = start_with_env(
        &[
            "--config.file",
            config.path().to_str().unwrap(),
            "--collector.probes",
            "--no-collector.dcgm",
            "--nvml.library",
            fake_nvml_library(),
            "--metrics.detail",
            "full",
        ],
        &[
            ("FAKE_NVML_SCENARIO", SCENARIO),
            ("FAKE_NVML_TIME", TIME),
            ("FAKE_CUDA_SCENARIO", SCENARIO),
            ("FAKE_CUDA_TIME", TIME),
            ("FAKE_CUDA_STATE_DIR", &state_dir),
            ("FAKE_NVML_CUDA_STATE_DIR", &state_dir),
            ("LD_LIBRARY_PATH", &lib_dir),
        ],
    );
    let pair = |body: &str, gpu: usize, peer: usize| {
        value(
            body,
            "dgx_pixels_probe_p2p_bandwidth_bytes_per_second",
            &[("gpu", &gpu.to_string()), ("peer_gpu", &peer.to_string())],
        )
    };
    let all = |body: &str| {
        (0..4).all(|g| {
            (0..4)
                .filter(|p| *p != g)
                .all(|p| pair(body, g, p).is_some())
        })
    };
    let (body, took) = wait_until(daemon.port, Duration::from_secs(90), all);
    assert!(all(&body), "not every pair measured in {took:?}:\n{body}");
    for gpu in 0..4 {
        for peer in (0..4).filter(|p| *p != gpu) {
            let got = pair(&body, gpu, peer).unwrap();
            let want = model(gpu, peer);
            assert!(
                (got / want - 1.0).abs() < 0.01,
                "{gpu} -> {peer}: {got} vs the model's {want}"
            );
        }
        let worst = |peer: &str| {
            value(
                &body,
                "dgx_pixels_probe_p2p_worst_bandwidth_bytes_per_second",
                &[("gpu", &gpu.to_string()), ("peer_gpu", peer)],
            )
        };
        if gpu != 2 {
            let v =
                worst("2").unwrap_or_else(|| panic!("GPU {gpu}'s worst peer is not 2:\n{body}"));
            // 12 links of 18: two thirds of a healthy pair.
            let healthy = model(0, 1);
            assert!((v / healthy - 12.0 / 18.0).abs() < 0.02, "{v} vs {healthy}");
        }
    }
    // The daemon itself never held a context; every run was a worker's.
    let pid = daemon.child.id();
    let own = format!("ctx.{pid}.");
    assert!(std::fs::read_dir(state.path())
        .unwrap()
        .flatten()
        .all(|e| !e.file_name().to_string_lossy().starts_with(&own)));
    assert_eq!(
        value(&body, "dgx_pixels_probe_gpus", &[("state", "measured")]),
        Some(4.0)
    );
}
