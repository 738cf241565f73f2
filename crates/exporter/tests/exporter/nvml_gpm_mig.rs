//! End to end: the real binary on the fake libnvidia-ml with examples/scenarios/h100-mig.toml
//! (two H100 in MIG mode, 3 + 7 instances). Without DCGM the profiling ratios of every MIG
//! instance come from GPM (`nvmlGpmMigSampleGet`), with the MIG labels of the instance's other
//! series; with DCGM providing the profiling families, GPM is not read at all (one source per
//! series), and DCGM does not watch MIG instances, so there are none.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::time::Duration;

use common::*;
use dgx_pixels_sim::{GpuState, Node, Scenario};

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/scenarios/h100-mig.toml"
);
const FAMILIES: [&str; 8] = [
    "dgx_pixels_mig_graphics_engine_active_ratio",
    "dgx_pixels_mig_sm_active_ratio",
    "dgx_pixels_mig_sm_occupancy_ratio",
    "dgx_pixels_mig_tensor_pipe_active_ratio",
    "dgx_pixels_mig_dram_active_ratio",
    "dgx_pixels_mig_fp64_pipe_active_ratio",
    "dgx_pixels_mig_fp32_pipe_active_ratio",
    "dgx_pixels_mig_fp16_pipe_active_ratio",
];

/// The label set of a series line (between the braces).
fn label_set(line: &str) -> &str {
    line.split_once('{')
        .and_then(|(_, rest)| rest.rsplit_once('}'))
        .unwrap()
        .0
}

#[test]
fn without_dcgm_each_mig_instance_serves_its_profiling_ratios_from_gpm() {
    let d = start_with_env(
        &["--nvml.library", fake_nvml_library(), "--no-collector.dcgm"],
        &[
            ("FAKE_NVML_SCENARIO", SCENARIO),
            ("FAKE_NVML_TIME", "60"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(10), |b| {
        FAMILIES.iter().all(|f| series(b, f).len() == 10)
    });
    // Every family on each of the ten instances, under the labels of the instance's memory
    // series: gpu, uuid, gpu_instance, compute_instance, mig_profile.
    let memory: Vec<&str> = series(&body, "dgx_pixels_mig_memory_used_bytes")
        .into_iter()
        .map(label_set)
        .collect();
    assert_eq!(memory.len(), 10, "{memory:?}");
    for f in FAMILIES {
        let mut got: Vec<&str> = series(&body, f).into_iter().map(label_set).collect();
        got.sort_unstable();
        let mut want = memory.clone();
        want.sort_unstable();
        assert_eq!(got, want, "{f}");
    }
    // The values are the instances' own: the modelled activity of each (frozen clock).
    let mut node = Node::new(Scenario::load(SCENARIO).unwrap());
    for gpu in 0..2 {
        let uuid = node.gpu(gpu).unwrap().uuid.clone();
        let Some(GpuState::Ok(r)) = node.reading(gpu, Duration::from_secs(60)) else {
            panic!()
        };
        for m in &r.readout.mig {
            let gi = m.gpu_instance.to_string();
            let v = value(
                &body,
                FAMILIES[0],
                &[
                    ("uuid", &uuid),
                    ("gpu_instance", &gi),
                    ("mig_profile", &m.profile),
                ],
            )
            .unwrap();
            let want = m.graphics_engine_active_ratio.unwrap();
            assert!((v - want).abs() < 1e-9, "GPU {gpu} GI {gi}: {v} vs {want}");
        }
    }
    stop_and_logs(d);
}

#[test]
fn with_dcgm_providing_the_profiling_families_gpm_is_not_read_per_instance_either() {
    let d = start_with_env(
        &[
            "--nvml.library",
            fake_nvml_library(),
            "--collector.dcgm",
            "--dcgm.library",
            fake_dcgm_library(),
        ],
        &[
            ("FAKE_NVML_SCENARIO", SCENARIO),
            ("FAKE_DCGM_SCENARIO", SCENARIO),
            ("FAKE_NVML_TIME", "60"),
            ("FAKE_DCGM_TIME", "60"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    );
    wait_until(d.port, Duration::from_secs(10), |b| {
        series(b, "dgx_pixels_gpu_sm_active_ratio").len() == 2
    });
    // Several NVML polls later: GPM, were it read, would have an interval by now.
    std::thread::sleep(Duration::from_millis(2500));
    let body = text(d.port);
    assert_eq!(
        series(&body, "dgx_pixels_gpu_sm_active_ratio").len(),
        2,
        "DCGM serves them"
    );
    assert_eq!(series(&body, "dgx_pixels_mig_memory_used_bytes").len(), 10);
    for f in FAMILIES {
        assert!(series(&body, f).is_empty(), "{f}: {:?}", series(&body, f));
    }
    stop_and_logs(d);
}
