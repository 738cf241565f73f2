//! The simulated node serves every family a real node with DCGM and probes would: DCGM
//! profiling from the simulator's profiling model, probe results from its benchmark model
//! through the real probe scheduler, and the scenario's cost table; `--no-collector.dcgm` and
//! `--no-collector.probes` turn the simulated families off.
//!
//! The daemon's scenario clock starts between spawning it and its readiness; a served value
//! must be exactly the simulator's at one of the 100 ms steps that window allows.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use dgx_pixels_sim::{Benchmark, GpuState, Node, Precision, Scenario, Transfer};

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// A daemon on `args` serving every series (these tests compare values with the simulator),
/// with the wall-clock window in which its scenario time started.
fn start_timed(args: &[&str]) -> (Daemon, f64, f64) {
    let before = unix(SystemTime::now());
    let mut all = args.to_vec();
    all.extend_from_slice(&["--metrics.detail", "full"]);
    let d = start(&all);
    let ready = unix(SystemTime::now());
    (d, before, ready)
}

/// Scenario times (100 ms steps) at which something measured at unix time `at`, give or take
/// `earlier` seconds before it, can have been read, for a clock started in `[before, ready]`.
fn steps(before: f64, ready: f64, at: f64, earlier: f64) -> Vec<Duration> {
    let lo = (at - earlier - ready - 0.1).max(0.0);
    let hi = at - before + 0.1;
    let mut out = Vec::new();
    let mut t = (lo * 10.0).floor() / 10.0;
    while t <= hi {
        out.push(Duration::from_secs_f64(t + 0.05));
        t += 0.1;
    }
    out
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12)
}

fn node() -> Node {
    Node::new(Scenario::builtin("dgx-h100").unwrap())
}

#[test]
fn profiling_and_probes_are_on_by_default_and_serve_the_simulators_values() {
    let (d, before, ready) = start_timed(&["--simulate", "dgx-h100"]);
    let (body, _) = wait_until(d.port, Duration::from_secs(10), |b| {
        b.contains("dgx_pixels_gpu_sm_active_ratio{")
    });
    let scraped = unix(SystemTime::now());
    let mut n = node();
    for gpu in [0usize, 5] {
        let g = n.gpu(gpu).unwrap().clone();
        let index = gpu.to_string();
        let l = [("gpu", index.as_str()), ("uuid", g.uuid.as_str())];
        let sm = value(&body, "dgx_pixels_gpu_sm_active_ratio", &l).unwrap();
        let tensor = value(&body, "dgx_pixels_gpu_tensor_pipe_active_ratio", &l).unwrap();
        let dram = value(&body, "dgx_pixels_gpu_dram_active_ratio", &l).unwrap();
        let nvlink = value(&body, "dgx_pixels_nvlink_transmit_bytes_per_second", &l).unwrap();
        let matched = steps(before, ready, scraped, 3.0).into_iter().any(|t| {
            let Some(GpuState::Ok(r)) = n.reading(gpu, t) else {
                return false;
            };
            let p = dgx_pixels_sim::profile(&g, &r);
            same(sm, p.sm_active)
                && same(tensor, p.tensor_active)
                && same(dram, p.dram_active)
                && same(nvlink, p.nvlink_tx_bytes_per_second.unwrap())
        });
        assert!(
            matched,
            "GPU {gpu}: sm {sm} tensor {tensor} dram {dram} nvlink {nvlink}"
        );
    }
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "probes")]),
        Some(1.0)
    );
    // The scenario's example price, without a config file.
    assert_eq!(
        value(
            &body,
            "dgx_pixels_cost_electricity_price_per_joule",
            &[("currency", "USD")]
        ),
        Some(0.15 / 3.6e6)
    );
    assert_eq!(
        value(&body, "dgx_pixels_cost_power_usage_effectiveness", &[]),
        Some(1.3)
    );
    assert!(body.contains("mode=\"simulated\""));
}

#[test]
fn the_demo_node_serves_probe_results_within_a_minute_and_says_why_busy_gpus_have_none() {
    // The README's first command, default settings and series profile: GPU 7 of dgx-h100 is
    // idle until 45 s into the cycle; the real scheduler measures it after the 10 s settle
    // window and leaves the seven training GPUs alone.
    let (d, _, _) = start_timed(&["--simulate", "dgx-h100"]);
    let (body, took) = wait_until(d.port, Duration::from_secs(60), |b| {
        b.contains("dgx_pixels_probe_gemm_flops{gpu=\"7\"")
    });
    assert!(
        body.contains("dgx_pixels_probe_gemm_flops{gpu=\"7\""),
        "no probe result within a minute:\n{body}"
    );
    assert!(
        took >= Duration::from_secs(9),
        "before the settle window: {took:?}"
    );
    let gemm = series(&body, "dgx_pixels_probe_gemm_flops");
    assert_eq!(gemm.len(), 1, "only the idle GPU is probed: {gemm:?}");
    let flops = value(&body, "dgx_pixels_probe_gemm_flops", &[("gpu", "7")]).unwrap();
    assert!(flops > 5e14, "an idle simulated H100 in bf16: {flops}");
    assert_eq!(
        value(&body, "dgx_pixels_probe_gpus", &[("state", "measured")]),
        Some(1.0)
    );
    let busy = value(&body, "dgx_pixels_probe_gpus", &[("state", "busy")]).unwrap();
    let pending = value(&body, "dgx_pixels_probe_gpus", &[("state", "pending")]).unwrap();
    assert_eq!(busy + pending, 7.0, "{body}");
    assert!(busy >= 1.0);
}

#[test]
fn probe_results_are_the_simulators_benchmarks_at_the_time_they_ran() {
    let mut cfg = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    // Probe busy GPUs too, often: gemm_bf16 on every GPU, then copy_h2d.
    write!(
        cfg,
        "[probes]\nbusy_threshold = 1.0\nsettle = \"0s\"\nduty_cycle = 0.5\nprobes = \"gemm_bf16,copy_h2d\"\n\
         [cost]\ncurrency = \"EUR\"\nelectricity_price_per_kwh = 0.3\ngpu_cost_per_hour = 2.0\n"
    )
    .unwrap();
    let (d, before, ready) = start_timed(&[
        "--simulate",
        "dgx-h100",
        "--config.file",
        cfg.path().to_str().unwrap(),
        "--collector.probes.interval",
        "100ms",
    ]);
    // GPU 0's own copy (the first pass starts the GPUs at staggered kinds: another GPU's
    // copy_h2d comes first).
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        value(
            b,
            "dgx_pixels_probe_bandwidth_bytes_per_second",
            &[("gpu", "0"), ("probe", "copy_h2d")],
        )
        .is_some()
    });
    let mut n = node();
    let g = n.gpu(0).unwrap().clone();
    for (kind, family, bench) in [
        (
            "gemm_bf16",
            "dgx_pixels_probe_gemm_flops",
            Benchmark::Gemm(Precision::Bf16),
        ),
        (
            "copy_h2d",
            "dgx_pixels_probe_bandwidth_bytes_per_second",
            Benchmark::Copy(Transfer::HostToDevice),
        ),
    ] {
        let l = [("gpu", "0"), ("uuid", g.uuid.as_str()), ("probe", kind)];
        let served = value(&body, family, &l).unwrap_or_else(|| panic!("{kind}: {body}"));
        let at = value(&body, "dgx_pixels_probe_last_run_timestamp_seconds", &l).unwrap();
        let matched = steps(before, ready, at, 0.5).into_iter().any(|t| {
            let Ok(run) = n.benchmark(0, t, bench) else {
                return false;
            };
            let mut v = run.values.clone();
            v.sort_by(f64::total_cmp);
            same(served, v[v.len() / 2])
        });
        assert!(matched, "{kind}: served {served}");
    }
    // GEMM against the published peak, and the modelled time each run held the GPU.
    let fraction = value(
        &body,
        "dgx_pixels_probe_peak_fraction_ratio",
        &[("gpu", "0"), ("probe", "gemm_bf16")],
    )
    .unwrap();
    assert!((0.3..0.9).contains(&fraction), "{fraction}");
    let l = [("gpu", "0"), ("probe", "gemm_bf16")];
    let sum = value(&body, "dgx_pixels_probe_duration_seconds_sum", &l).unwrap();
    let count = value(&body, "dgx_pixels_probe_duration_seconds_count", &l).unwrap();
    assert!(count >= 1.0 && same(sum, 0.33 * count), "{sum} {count}");
    // The config file's [cost] wins over the scenario's.
    assert!(body.contains("dgx_pixels_cost_electricity_price_per_joule{currency=\"EUR\"}"));
    assert!(!body.contains("currency=\"USD\""));
}

#[test]
fn no_collector_flags_turn_the_simulated_families_off() {
    let d = start(&[
        "--simulate",
        "dgx-h100",
        "--no-collector.dcgm",
        "--no-collector.probes",
    ]);
    let (body, _) = wait_until(d.port, Duration::from_secs(10), |b| {
        b.contains("dgx_pixels_gpu_power_watts{")
    });
    assert!(!body.contains("dgx_pixels_gpu_sm_active_ratio"), "{body}");
    assert!(!body.contains("dgx_pixels_nvlink_transmit_bytes_per_second"));
    assert!(!body.contains("dgx_pixels_probe_"));
    assert!(!body.contains("source=\"probes\""));
    // Nothing warns that they were ignored: they were not.
    let logs = stop_and_logs(d);
    assert!(!logs.contains("--simulate replaces"), "{logs}");
}
