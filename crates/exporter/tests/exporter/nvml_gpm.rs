//! Profiling metrics through NVML's GPM, the real binary on the fake libnvidia-ml (and the fake
//! libdcgm): without DCGM the profiling families come from `nvml` with the simulator's profile;
//! with DCGM they come from `dcgm` only; without GPM they are absent; the first poll serves
//! none; one GPU whose GPM fails keeps its other series and leaves the others alone.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::time::Duration;

use common::*;
use dgx_pixels_sim::{profile, GpuState, Node, Profile, Scenario};

/// The profiling families, each with the profile's value it must equal.
fn families(p: &Profile) -> [(&'static str, Option<f64>); 10] {
    [
        (
            "dgx_pixels_gpu_graphics_engine_active_ratio",
            Some(p.gr_engine_active),
        ),
        ("dgx_pixels_gpu_sm_active_ratio", Some(p.sm_active)),
        ("dgx_pixels_gpu_sm_occupancy_ratio", Some(p.sm_occupancy)),
        (
            "dgx_pixels_gpu_tensor_pipe_active_ratio",
            Some(p.tensor_active),
        ),
        ("dgx_pixels_gpu_dram_active_ratio", Some(p.dram_active)),
        ("dgx_pixels_gpu_fp64_pipe_active_ratio", Some(p.fp64_active)),
        ("dgx_pixels_gpu_fp32_pipe_active_ratio", Some(p.fp32_active)),
        ("dgx_pixels_gpu_fp16_pipe_active_ratio", Some(p.fp16_active)),
        (
            "dgx_pixels_nvlink_transmit_bytes_per_second",
            p.nvlink_tx_bytes_per_second,
        ),
        (
            "dgx_pixels_nvlink_receive_bytes_per_second",
            p.nvlink_rx_bytes_per_second,
        ),
    ]
}

/// Every series (`--metrics.detail full`): the FP pipes and NVLink rates are outside the default
/// series budget, and these tests compare every family with the simulator.
fn start_nvml(env: &[(&str, &str)], args: &[&str]) -> Daemon {
    let mut all = vec![
        "--nvml.library",
        fake_nvml_library(),
        "--metrics.detail",
        "full",
    ];
    all.extend_from_slice(args);
    let mut e = vec![("FAKE_NVML_PCIE_DELAY_MS", "0")];
    e.extend_from_slice(env);
    start_with_env(&all, &e)
}

/// The simulator's profile of every GPU of `scenario` at `t` seconds, with its uuid.
fn profiles(scenario: &str, t: u64) -> Vec<(String, Profile)> {
    let mut node = Node::new(Scenario::builtin(scenario).unwrap());
    (0..node.gpu_count())
        .map(|i| {
            let g = node.gpu(i).unwrap().clone();
            let Some(GpuState::Ok(r)) = node.reading(i, Duration::from_secs(t)) else {
                panic!("GPU {i} answers at {t} s")
            };
            (g.uuid.clone(), profile(&g, &r))
        })
        .collect()
}

fn labels(i: usize, uuid: &str) -> [(&'static str, String); 2] {
    [("gpu", i.to_string()), ("uuid", uuid.to_string())]
}

fn get_value(body: &str, name: &str, l: &[(&'static str, String)]) -> Option<f64> {
    let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
    value(body, name, &l)
}

#[test]
fn without_dcgm_the_profiling_families_come_from_gpm_with_the_simulators_profile() {
    // A frozen clock: both samples of every interval are at 60 s, so GPM's average is the
    // profile at 60 s exactly.
    let d = start_nvml(&[("FAKE_NVML_TIME", "60")], &[]);
    let (body, _) = wait_until(d.port, Duration::from_secs(10), |b| {
        series(b, "dgx_pixels_gpu_sm_active_ratio").len() == 8
    });
    for (i, (uuid, p)) in profiles("dgx-h100", 60).iter().enumerate() {
        let l = labels(i, uuid);
        for (name, want) in families(p) {
            let want = want.unwrap();
            let served = get_value(&body, name, &l).unwrap_or_else(|| panic!("{name} gpu {i}"));
            assert!(
                (served - want).abs() <= 1e-9 * want.abs().max(1.0),
                "{name} gpu {i}: served {served}, simulator {want}"
            );
        }
        // PCIe over the interval from GPM: the exact rate, not the driver's whole KB/s.
        let tx = get_value(&body, "dgx_pixels_pcie_transmit_bytes_per_second", &l).unwrap();
        assert!(
            (tx - p.pcie_tx_bytes_per_second).abs() <= 1e-6,
            "pcie tx gpu {i}: {tx} vs {}",
            p.pcie_tx_bytes_per_second
        );
    }
    // Only the nvml source serves them (no sim, no dcgm here), once per GPU.
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "nvml")]),
        Some(1.0)
    );
    assert!(series(&body, "dgx_pixels_source_up")
        .iter()
        .all(|l| !l.contains("\"dcgm\"") && !l.contains("\"sim\"")));
}

#[test]
fn the_first_poll_serves_no_gpm_value() {
    // A 3 s interval: between the first poll (ready) and the second, no interval exists yet.
    let d = start_nvml(
        &[("FAKE_NVML_TIME", "60")],
        &["--collector.nvml.interval", "3s"],
    );
    let first = text(d.port);
    assert_eq!(series(&first, "dgx_pixels_gpu_up").len(), 8, "{first}");
    assert!(
        series(&first, "dgx_pixels_gpu_sm_active_ratio").is_empty(),
        "a value before any interval: {:?}",
        series(&first, "dgx_pixels_gpu_sm_active_ratio")
    );
    let (second, _) = wait_until(d.port, Duration::from_secs(8), |b| {
        series(b, "dgx_pixels_gpu_sm_active_ratio").len() == 8
    });
    assert_eq!(
        series(&second, "dgx_pixels_gpu_sm_active_ratio").len(),
        8,
        "the second poll has an interval"
    );
}

#[test]
fn with_dcgm_they_come_from_dcgm_only() {
    // NVML and DCGM frozen at different times, so the value tells which source served it; GPM
    // failing on GPU 2 would be logged if NVML read GPM at all.
    let d = start_nvml(
        &[
            ("FAKE_NVML_TIME", "60"),
            ("FAKE_DCGM_TIME", "200"),
            ("FAKE_NVML_GPM_FAIL_GPU", "2"),
        ],
        &["--collector.dcgm", "--dcgm.library", fake_dcgm_library()],
    );
    wait_until(d.port, Duration::from_secs(10), |b| {
        series(b, "dgx_pixels_gpu_sm_active_ratio").len() == 8
    });
    // Several NVML polls later: GPM, were it read, would have an interval by now.
    std::thread::sleep(Duration::from_millis(2500));
    let body = text(d.port);
    let dcgm = profiles("dgx-h100", 200);
    let nvml = profiles("dgx-h100", 60);
    for (i, ((uuid, want), (_, other))) in dcgm.iter().zip(&nvml).enumerate() {
        let l = labels(i, uuid);
        for ((name, w), (_, o)) in families(want).into_iter().zip(families(other)) {
            let served = get_value(&body, name, &l).unwrap_or_else(|| panic!("{name} gpu {i}"));
            let (w, o) = (w.unwrap(), o.unwrap());
            assert!(
                (served - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{name} gpu {i}: served {served}, DCGM's {w}, GPM's {o}"
            );
        }
    }
    let mut keys: Vec<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.rsplit_once(' ').unwrap().0)
        .collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "a series is served twice");
    let logs = stop_and_logs(d);
    assert!(!logs.contains("GPM"), "NVML read GPM beside DCGM: {logs}");
}

#[test]
fn without_gpm_the_profiling_families_are_absent() {
    for (scenario, env, logged) in [
        (
            "dgx-h100",
            vec![("FAKE_NVML_GPM", "0")],
            "no GPM on this GPU",
        ),
        // Ampere: no GPM.
        ("dgx-a100-mig", vec![], "no GPM on this GPU"),
        // The driver refuses it (NVML_ERROR_NO_PERMISSION): a warning per GPU, once.
        ("dgx-h100", vec![("FAKE_NVML_GPM", "denied")], "GPM denied"),
    ] {
        let mut env = env;
        env.extend([("FAKE_NVML_TIME", "60"), ("FAKE_NVML_SCENARIO", scenario)]);
        let d = start_nvml(&env, &["--collector.nvml.interval", "200ms"]);
        std::thread::sleep(Duration::from_millis(1200));
        let body = text(d.port);
        assert_eq!(series(&body, "dgx_pixels_gpu_up").len(), 8, "{scenario}");
        for (name, _) in families(&profiles("dgx-h100", 60)[0].1) {
            assert!(
                series(&body, name).is_empty(),
                "{scenario}: {name} served without GPM: {:?}",
                series(&body, name)
            );
        }
        // PCIe throughput falls back to the driver's sample (whole KB/s).
        let tx = value(
            &body,
            "dgx_pixels_pcie_transmit_bytes_per_second",
            &[("gpu", "0")],
        )
        .unwrap();
        assert_eq!(tx % 1000.0, 0.0, "{scenario}: {tx}");
        let logs = stop_and_logs(d);
        assert_eq!(
            logs.matches(logged).count(),
            8,
            "{scenario}: once per GPU: {logs}"
        );
    }
}

#[test]
fn a_gpu_whose_gpm_fails_keeps_its_other_series_and_leaves_the_others_alone() {
    let d = start_nvml(
        &[("FAKE_NVML_TIME", "60"), ("FAKE_NVML_GPM_FAIL_GPU", "2")],
        &["--collector.nvml.interval", "200ms"],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(10), |b| {
        series(b, "dgx_pixels_gpu_sm_active_ratio").len() == 7
    });
    let sm = series(&body, "dgx_pixels_gpu_sm_active_ratio");
    assert_eq!(sm.len(), 7, "{sm:?}");
    assert!(sm.iter().all(|l| !l.contains("gpu=\"2\"")), "{sm:?}");
    assert_eq!(
        value(&body, "dgx_pixels_gpu_up", &[("gpu", "2")]),
        Some(1.0)
    );
    assert!(value(&body, "dgx_pixels_gpu_power_watts", &[("gpu", "2")]).is_some());
    let logs = stop_and_logs(d);
    assert_eq!(
        logs.matches("GPM reading failed").count(),
        1,
        "logged once: {logs}"
    );
}

#[test]
fn on_a_running_clock_each_value_is_the_profile_over_its_interval() {
    // Scenario time = 61 s + the daemon's age; polls every 500 ms. A value scraped at scenario
    // time s covers an interval between two polls that ended before s and began one interval
    // earlier (a few with a late poll): it lies within the profile's range over that window.
    let spawned = std::time::Instant::now();
    let d = start_nvml(
        &[("FAKE_NVML_START", "61")],
        &["--collector.nvml.interval", "500ms"],
    );
    let mut node = Node::new(Scenario::builtin("dgx-h100").unwrap());
    let g = node.gpu(5).unwrap().clone();
    let mut seen = Vec::new();
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(700));
        let body = text(d.port);
        let now = 61.0 + spawned.elapsed().as_secs_f64();
        let Some(served) = value(&body, "dgx_pixels_gpu_sm_active_ratio", &[("gpu", "5")]) else {
            continue; // the first poll: no interval yet
        };
        // The window, with slack for a late poll on a loaded machine and for the scrape.
        let (from, to) = ((now - 3.0).max(61.0), now + 0.2);
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        let mut t = from;
        while t <= to {
            if let Some(GpuState::Ok(r)) = node.reading(5, Duration::from_secs_f64(t)) {
                let v = profile(&g, &r).sm_active;
                (lo, hi) = (lo.min(v), hi.max(v));
            }
            t += 0.01;
        }
        assert!(
            served >= lo - 1e-9 && served <= hi + 1e-9,
            "sm_active {served} outside the profile's range [{lo}, {hi}] over [{from:.2}, {to:.2}] s"
        );
        seen.push(served);
    }
    assert!(seen.len() >= 4, "served on most scrapes: {seen:?}");
    seen.dedup();
    assert!(seen.len() > 1, "the value follows the clock: {seen:?}");
}

/// Issue 28, item 16: a GPU whose GPM calls hang (its other NVML calls answer) keeps
/// `gpu_up` 1, its health verdict and every other reading; only its profiling families go
/// missing, said by `dgx_pixels_gpu_stale_readings{source="nvml"}` (10, in the default profile
/// too), while every other GPU keeps its GPM readings. For GPU 2 and GPU 0, over several polls.
#[test]
fn a_gpu_whose_gpm_hangs_loses_only_its_profiling_families() {
    for hung in ["2", "0"] {
        let d = start_with_env(
            &[
                "--nvml.library",
                fake_nvml_library(),
                "--collector.nvml.interval",
                "200ms",
            ],
            &[
                ("FAKE_NVML_TIME", "60"),
                ("FAKE_NVML_GPM_HANG_GPU", hung),
                ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ],
        );
        let ok = |b: &str| {
            series(b, "dgx_pixels_gpu_sm_active_ratio").len() == 7
                && value(
                    b,
                    "dgx_pixels_gpu_stale_readings",
                    &[("gpu", hung), ("source", "nvml")],
                ) == Some(10.0)
                && value(
                    b,
                    "dgx_pixels_gpu_health_state",
                    &[("gpu", hung), ("state", "healthy")],
                ) == Some(1.0)
        };
        let (body, _) = wait_until(d.port, Duration::from_secs(15), ok);
        assert!(ok(&body), "GPU {hung}:\n{body}");
        // Several polls later (each waits out the deadline for GPM only): still up.
        std::thread::sleep(Duration::from_secs(3));
        let body = text(d.port);
        assert!(ok(&body), "GPU {hung} later:\n{body}");
        let sm = series(&body, "dgx_pixels_gpu_sm_active_ratio");
        assert!(
            sm.iter().all(|l| !l.contains(&format!("gpu=\"{hung}\""))),
            "{sm:?}"
        );
        for gpu in 0..8 {
            let g = gpu.to_string();
            assert_eq!(
                value(&body, "dgx_pixels_gpu_up", &[("gpu", &g)]),
                Some(1.0),
                "{g}"
            );
        }
        assert!(value(&body, "dgx_pixels_gpu_power_watts", &[("gpu", hung)]).is_some());
        assert!(value(&body, "dgx_pixels_gpu_utilization_ratio", &[("gpu", hung)]).is_some());
        assert_eq!(
            value(&body, "dgx_pixels_source_up", &[("source", "nvml")]),
            Some(1.0)
        );
        let logs = stop_and_logs(d);
        assert_eq!(
            logs.matches("GPM did not answer within the deadline")
                .count(),
            1,
            "logged once: {logs}"
        );
    }
}
