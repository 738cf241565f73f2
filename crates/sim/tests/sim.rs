//! Behaviour of the simulator through its public API.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dgx_pixels_sim::labels::{ThrottleReason, ViolationPolicy};
use dgx_pixels_sim::{GpuReadout, GpuState, Node, Scenario, ScenarioError, BUILTIN_SCENARIOS};

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

// ---------------------------------------------------------------------------------------------
// Built-ins and static facts.

#[test]
fn every_builtin_parses_and_reads_sensibly() {
    assert!(BUILTIN_SCENARIOS.len() >= 7);
    for name in BUILTIN_SCENARIOS {
        let s = Scenario::load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.name(), *name);
        assert_eq!(s.origin(), format!("builtin:{name}"));
        assert!(!s.description().is_empty(), "{name} has no description");
        assert_eq!(Scenario::builtin(name), Some(s.clone()));
        let mut node = Node::new(s);
        assert!(node.gpu_count() >= 1);
        for t in [0.0, 0.05, 1.0, 37.3, 150.0, 600.0] {
            for g in 0..node.gpu_count() {
                let stat = node.gpu(g).unwrap().clone();
                let Some(GpuState::Ok(r)) = node.reading(g, secs(t)) else {
                    continue;
                };
                let r = r.readout;
                assert!(
                    (0.0..=1.0).contains(&r.utilization_ratio.unwrap()),
                    "{name}"
                );
                assert!(
                    (0.0..=1.0).contains(&r.memory_utilization_ratio.unwrap()),
                    "{name}"
                );
                assert!(
                    r.power_watts.unwrap() > 0.0
                        && r.power_watts.unwrap() <= stat.power_limit_watts
                );
                assert!(r.temperature_gpu_celsius.unwrap() > 0.0);
                assert!(r.temperature_gpu_celsius.unwrap() < stat.shutdown_temperature_celsius);
                assert!(r.clocks.sm.unwrap() <= stat.max_clocks.sm_hz);
                assert!(r.clocks.graphics.unwrap() <= stat.max_clocks.graphics_hz);
                match stat.memory_total_bytes {
                    Some(total) => assert_eq!(
                        r.memory_used_bytes.unwrap()
                            + r.memory_free_bytes.unwrap()
                            + r.memory_reserved_bytes.unwrap(),
                        total as f64
                    ),
                    None => assert_eq!(r.memory_used_bytes, None),
                }
            }
        }
    }
    assert_eq!(Scenario::builtin("nope"), None);
}

#[test]
fn dgx_h100_static_facts() {
    let n = node("dgx-h100");
    assert_eq!(n.gpu_count(), 8);
    assert_eq!(n.driver_version(), "550.54.15");
    assert_eq!(n.cuda_driver_version(), 12040);
    let mut uuids = Vec::new();
    for i in 0..8 {
        let g = n.gpu(i).unwrap();
        assert_eq!(g.index as usize, i);
        assert_eq!(g.minor_number as usize, i);
        assert_eq!(g.name, "NVIDIA H100 80GB HBM3");
        assert_eq!(g.architecture, "Hopper");
        assert_eq!(g.memory_total_bytes, Some(85_899_345_920));
        assert_eq!(g.power_limit_watts, 700.0);
        assert_eq!(g.max_clocks.sm_hz, 1.98e9);
        assert_eq!(g.max_clocks.memory_hz, 2.619e9);
        assert_eq!(g.nvlink_count, 18);
        assert_eq!(g.slowdown_temperature_celsius, 87.0);
        assert_eq!(g.mig, None);
        // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
        let parts: Vec<&str> = g.uuid.split('-').collect();
        assert_eq!(parts[0], "GPU");
        let lens: Vec<usize> = parts[1..].iter().map(|p| p.len()).collect();
        assert_eq!(lens, [8, 4, 4, 4, 12], "{}", g.uuid);
        assert!(parts[1..]
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit())));
        assert_eq!(g.pci_bus_id.len(), 16);
        assert!(!g.serial.is_empty());
        uuids.push(g.uuid.clone());
    }
    assert_eq!(n.gpu(0).unwrap().pci_bus_id, "00000000:18:00.0");
    assert_eq!(n.gpu(8), None);
    let mut sorted = uuids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 8, "UUIDs must be unique");
    // Deterministic from the seed; another seed gives other UUIDs.
    assert_eq!(node("dgx-h100").gpu(3), n.gpu(3));
    let text = Scenario::builtin_text("dgx-h100")
        .unwrap()
        .replace("seed = 4242", "seed = 4243");
    let other = Scenario::from_toml_str(&text, "x.toml").unwrap();
    assert_ne!(other.gpus()[3].uuid, n.gpu(3).unwrap().uuid);
}

#[test]
fn dgx_spark_has_no_framebuffer() {
    let mut n = node("dgx-spark");
    assert_eq!(n.gpu_count(), 1);
    let g = n.gpu(0).unwrap().clone();
    assert_eq!(g.name, "NVIDIA GB10");
    assert_eq!(g.memory_total_bytes, None);
    assert_eq!(g.nvlink_count, 0);
    assert!(g.power_limit_watts > 100.0 && g.power_limit_watts < 200.0);
    for t in [0.0, 30.0, 90.0, 500.0] {
        let r = ok(&mut n, 0, t);
        assert_eq!(r.memory_used_bytes, None);
        assert_eq!(r.memory_free_bytes, None);
        assert_eq!(r.memory_reserved_bytes, None);
        assert_eq!(r.temperature_memory_celsius, None);
        assert!(r.fan_speed_ratios.is_empty());
        assert_eq!(r.nvlink_transmit_bytes, None, "no NVLink, no counter");
        assert_eq!(r.nvlink_receive_bytes, None);
    }
}

#[test]
fn dgx_a100_mig_has_instances_on_gpus_0_and_1_only() {
    let mut n = node("dgx-a100-mig");
    assert_eq!(n.gpu_count(), 8);
    assert_eq!(n.gpu(0).unwrap().name, "NVIDIA A100-SXM4-80GB");
    assert_eq!(n.gpu(0).unwrap().nvlink_count, 12);
    assert_eq!(n.gpu(0).unwrap().max_clocks.sm_hz, 1.41e9);
    let g0 = n.gpu(0).unwrap().mig.clone().unwrap();
    assert_eq!(g0.len(), 7);
    assert!(g0.iter().all(|m| m.profile == "1g.10gb"));
    let g1 = n.gpu(1).unwrap().mig.clone().unwrap();
    let profiles: Vec<&str> = g1.iter().map(|m| m.profile.as_str()).collect();
    assert_eq!(profiles, ["3g.40gb", "2g.20gb", "2g.20gb"]);
    for i in 2..8 {
        assert_eq!(n.gpu(i).unwrap().mig, None);
    }
    let mut uuids: Vec<&str> = g0.iter().chain(&g1).map(|m| m.uuid.as_str()).collect();
    assert!(uuids.iter().all(|u| u.starts_with("MIG-") && u.len() == 40));
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 10);

    for t in [10.0, 150.0] {
        let r0 = ok(&mut n, 0, t);
        assert_eq!(r0.mig.len(), 7);
        let ids: Vec<u32> = r0.mig.iter().map(|m| m.gpu_instance).collect();
        let expected: Vec<u32> = g0.iter().map(|m| m.gpu_instance).collect();
        assert_eq!(ids, expected);
        for (m, s) in r0.mig.iter().zip(&g0) {
            let active = m.graphics_engine_active_ratio.unwrap();
            assert!(active > 0.0 && active <= 1.0);
            let used = m.memory_used_bytes.unwrap();
            assert!(used > 0.0 && used <= s.memory_total_bytes as f64);
            assert_eq!(m.memory_total_bytes, Some(s.memory_total_bytes as f64));
            assert_eq!(
                (m.profile.as_str(), m.mig_uuid.as_str()),
                (s.profile.as_str(), s.uuid.as_str())
            );
        }
        let sum: f64 = r0.mig.iter().map(|m| m.memory_used_bytes.unwrap()).sum();
        assert_eq!(r0.memory_used_bytes, Some(sum));
        assert_eq!(ok(&mut n, 1, t).mig.len(), 3);
        for i in 2..8 {
            assert!(ok(&mut n, i, t).mig.is_empty());
        }
    }
    // Instances get busier when the inference phase does.
    let quiet: f64 = ok(&mut n, 1, 60.0)
        .mig
        .iter()
        .map(|m| m.graphics_engine_active_ratio.unwrap())
        .sum();
    let busy: f64 = ok(&mut n, 1, 200.0)
        .mig
        .iter()
        .map(|m| m.graphics_engine_active_ratio.unwrap())
        .sum();
    assert!(busy > quiet * 1.5, "quiet {quiet} busy {busy}");
}

// ---------------------------------------------------------------------------------------------
// Determinism.

#[test]
fn same_time_gives_same_reading() {
    let mut n = node("dgx-h100");
    let a = n.reading(2, secs(123.45)).unwrap();
    let b = n.reading(2, secs(123.45)).unwrap();
    assert_eq!(a, b);
    // Other GPUs and other queries in between change nothing.
    n.reading(5, secs(400.0));
    n.reading(2, secs(10.0));
    n.reading(2, secs(999.0));
    assert_eq!(n.reading(2, secs(123.45)).unwrap(), a);
}

#[test]
fn fresh_node_and_incrementally_advanced_node_agree() {
    for name in ["dgx-h100", "fault-thermal", "dgx-a100-mig"] {
        let mut inc = node(name);
        let mut last = Vec::new();
        for s in 0..=300 {
            last = inc.readings(secs(s as f64 * 0.7));
        }
        let mut fresh = node(name);
        assert_eq!(fresh.readings(secs(300.0 * 0.7)), last, "{name}");
        // Going back in time recomputes from zero and still agrees.
        let back = inc.readings(secs(33.3));
        assert_eq!(node(name).readings(secs(33.3)), back, "{name}");
    }
}

#[test]
fn readings_vary_between_gpus_and_over_time() {
    let mut n = node("dgx-h100");
    let a = ok(&mut n, 0, 100.0);
    let b = ok(&mut n, 1, 100.0);
    let c = ok(&mut n, 0, 101.0);
    assert_ne!(a.utilization_ratio.unwrap(), b.utilization_ratio.unwrap());
    assert_ne!(a.utilization_ratio.unwrap(), c.utilization_ratio.unwrap());
    // Noise stays small: a few percent around the phase target.
    for g in 0..8 {
        let r = ok(&mut n, g, 100.0);
        assert!(
            (0.85..=1.0).contains(&r.utilization_ratio.unwrap()),
            "{}",
            r.utilization_ratio.unwrap()
        );
    }
}

/// The cycle repeats, and its only idle window is the one it declares: the first 30 s of each
/// cycle, between jobs, every GPU idle with no process (issue 44: the window the node probes
/// and the pair probe need); busy the rest of the cycle.
#[test]
fn workload_repeats_and_is_idle_only_between_jobs_on_dgx_h100() {
    let mut n = node("dgx-h100");
    let repeat = n.scenario().repeat_after().unwrap().as_secs_f64();
    for t in [5.0, 100.0, 190.0, 335.0] {
        let a = ok(&mut n, 4, t).utilization_ratio.unwrap();
        let b = ok(&mut n, 4, t + 3.0 * repeat).utilization_ratio.unwrap();
        assert!((a - b).abs() < 0.1, "t={t}: {a} vs {b}");
    }
    for s in 0..(2 * repeat as u64) {
        let between_jobs = (s as f64 % repeat) < 30.0;
        for g in 0..8 {
            let r = ok(&mut n, g, s as f64);
            let u = r.utilization_ratio.unwrap();
            if between_jobs {
                assert_eq!(u, 0.0, "GPU {g} busy at {s} s, between jobs");
                assert!(r.processes.is_empty(), "GPU {g}: a process between jobs");
            } else if (g < 7 && s as f64 % repeat >= 32.0) || s as f64 % repeat >= 53.0 {
                assert!(u > 0.1, "GPU {g} idle at {s} s");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Physics.

#[test]
fn energy_is_monotonic_and_the_integral_of_power() {
    let mut n = node("dgx-h100");
    let mut prev = ok(&mut n, 0, 0.0).energy_joules.unwrap();
    assert!(prev > 0.0, "energy starts at a since-driver-load offset");
    let start = prev;
    let mut trapezoid = 0.0;
    let mut prev_power = ok(&mut n, 0, 0.0).power_watts.unwrap();
    for i in 1..=6000 {
        let t = i as f64 * 0.1;
        let r = ok(&mut n, 0, t);
        assert!(r.energy_joules.unwrap() >= prev, "energy went down at {t}");
        prev = r.energy_joules.unwrap();
        trapezoid += 0.5 * (prev_power + r.power_watts.unwrap()) * 0.1;
        prev_power = r.power_watts.unwrap();
    }
    let measured = prev - start;
    assert!(
        (measured - trapezoid).abs() < 0.01 * trapezoid,
        "energy {measured} J vs integral {trapezoid} J"
    );
    // Coarser: 1 s samples, within 2%.
    let mut coarse = 0.0;
    for s in 0..600 {
        let p0 = ok(&mut n, 0, s as f64).power_watts.unwrap();
        let p1 = ok(&mut n, 0, s as f64 + 1.0).power_watts.unwrap();
        coarse += 0.5 * (p0 + p1);
    }
    assert!(
        (measured - coarse).abs() < 0.02 * coarse,
        "{measured} vs {coarse}"
    );
    // Continuous between steps: a millisecond adds about a millisecond of power (in steady
    // training, where the 1 s average is the power of the moment).
    let a = ok(&mut n, 0, 100.0);
    let b = ok(&mut n, 0, 100.001);
    assert!(
        (b.energy_joules.unwrap() - a.energy_joules.unwrap() - a.power_watts.unwrap() * 0.001)
            .abs()
            < 1e-3
    );
}

#[test]
fn power_rises_with_utilization_and_never_exceeds_the_limit() {
    let mut phases = String::new();
    for (i, u) in [0.0, 0.2, 0.4, 0.6, 0.8, 1.0].iter().enumerate() {
        phases += &format!(
            "[[phases]]\nstart_s = {}\nutilization = {u}\nspread = 0\nnoise = 0\n",
            i * 60
        );
    }
    let mut n = custom(&phases);
    let mut last = 0.0;
    for i in 0..6 {
        let r = ok(&mut n, 0, i as f64 * 60.0 + 30.0);
        assert!(
            r.power_watts.unwrap() > last,
            "phase {i}: {} <= {last}",
            r.power_watts.unwrap()
        );
        assert!(r.power_watts.unwrap() <= 700.0);
        last = r.power_watts.unwrap();
    }
    for s in 0..3600 {
        let r = ok(&mut n, 0, s as f64 * 0.1);
        assert!(r.power_watts.unwrap() <= 700.0 && r.power_watts.unwrap() > 0.0);
    }
    let idle = ok(&mut n, 0, 30.0);
    assert_eq!(idle.throttle_reason(ThrottleReason::GpuIdle), Some(true));
    assert_eq!(
        idle.throttle_reason(ThrottleReason::SwPowerCap),
        Some(false)
    );
    assert_eq!(idle.performance_state.unwrap(), 8);
    assert!(idle.clocks.sm.unwrap() < 0.5e9);
    assert!((idle.power_watts.unwrap() - 70.0).abs() < 2.0);
    let mid = ok(&mut n, 0, 150.0);
    assert_eq!(
        (
            mid.throttle_reason(ThrottleReason::GpuIdle),
            mid.throttle_reason(ThrottleReason::SwPowerCap)
        ),
        (Some(false), Some(false))
    );
    assert_eq!(mid.performance_state.unwrap(), 0);
    assert_eq!(mid.clocks.sm.unwrap(), 1.98e9);
    // 100% would draw 735 W: capped at the limit, clocks reduced proportionally.
    let full = ok(&mut n, 0, 330.0);
    assert_eq!(full.throttle_reason(ThrottleReason::SwPowerCap), Some(true));
    assert!(full.power_watts.unwrap() > 690.0 && full.power_watts.unwrap() <= 700.0);
    assert!(full.clocks.sm.unwrap() < 1.98e9 && full.clocks.sm.unwrap() > 1.7e9);
    assert_eq!(full.clocks.memory, Some(2.619e9), "memory clock is steady");
    assert_eq!(idle.clocks.memory, Some(2.619e9));
}

#[test]
fn temperature_lags_power() {
    let mut n = custom("[[phases]]\nstart_s = 100\nutilization = 1.0\nspread = 0\nnoise = 0\n");
    let before = ok(&mut n, 0, 99.9);
    // Idle equilibrium from the start: 25 C + 0.06 C/W x 70 W.
    assert!((ok(&mut n, 0, 0.0).temperature_gpu_celsius.unwrap() - 29.2).abs() < 0.5);
    assert!((before.temperature_gpu_celsius.unwrap() - 29.2).abs() < 0.5);
    let loaded = ok(&mut n, 0, 101.0);
    let steady = 25.0 + 0.06 * loaded.power_watts.unwrap();
    let rise = steady - before.temperature_gpu_celsius.unwrap();
    assert!(rise > 30.0);
    // One second after the step, well below the steady state (tau = 30 s: about 3% of the way).
    let first = loaded.temperature_gpu_celsius.unwrap() - before.temperature_gpu_celsius.unwrap();
    assert!(first > 0.0 && first < 0.1 * rise, "rose {first} of {rise}");
    // Half way after about tau * ln 2.
    let half = ok(&mut n, 0, 100.0 + 30.0 * std::f64::consts::LN_2)
        .temperature_gpu_celsius
        .unwrap();
    assert!((half - (before.temperature_gpu_celsius.unwrap() + rise / 2.0)).abs() < 0.05 * rise);
    // Within 1% after 6 tau, and rising monotonically on the way.
    let mut prev = before.temperature_gpu_celsius.unwrap();
    for s in 1..=180 {
        let t = ok(&mut n, 0, 100.0 + s as f64)
            .temperature_gpu_celsius
            .unwrap();
        assert!(t >= prev - 1e-9);
        prev = t;
    }
    assert!((prev - steady).abs() < 0.01 * rise, "{prev} vs {steady}");
    let mem = ok(&mut n, 0, 280.0).temperature_memory_celsius.unwrap();
    assert!(mem > prev);
}

#[test]
fn thermal_fault_throttles_inside_its_window_only() {
    let mut n = node("fault-thermal");
    let before = ok(&mut n, 5, 19.0);
    assert_eq!(
        (
            before.throttle_reason(ThrottleReason::HwThermalSlowdown),
            before.throttle_reason(ThrottleReason::SwThermalSlowdown)
        ),
        (Some(false), Some(false))
    );
    assert_eq!(
        before.throttle_reason(ThrottleReason::HwSlowdown),
        Some(false)
    );
    let normal_clock = before.clocks.sm.unwrap();
    for t in [60.0, 90.0, 119.9] {
        let r = ok(&mut n, 5, t);
        assert_eq!(
            r.throttle_reason(ThrottleReason::HwThermalSlowdown),
            Some(true),
            "at {t}"
        );
        assert_eq!(
            r.throttle_reason(ThrottleReason::SwThermalSlowdown),
            Some(true),
            "at {t}"
        );
        assert_eq!(
            r.throttle_reason(ThrottleReason::HwSlowdown),
            Some(true),
            "at {t}"
        );
        assert!(r.temperature_gpu_celsius.unwrap() > 87.0, "at {t}");
        assert!(
            r.temperature_gpu_celsius.unwrap() < 92.0,
            "at {t}: no shutdown"
        );
        assert!(
            r.clocks.sm.unwrap() < 0.8 * normal_clock,
            "at {t}: {}",
            r.clocks.sm.unwrap()
        );
        assert!(r.power_watts.unwrap() < before.power_watts.unwrap());
    }
    // Cooling restored at 120 s: back to normal within a few time constants.
    let after = ok(&mut n, 5, 300.0);
    assert_eq!(
        (
            after.throttle_reason(ThrottleReason::HwThermalSlowdown),
            after.throttle_reason(ThrottleReason::SwThermalSlowdown)
        ),
        (Some(false), Some(false))
    );
    assert!(after.clocks.sm.unwrap() > 0.95 * normal_clock);
    assert!(after.temperature_gpu_celsius.unwrap() < 70.0);
    // Other GPUs are never thermally throttled.
    for s in (0..300).step_by(5) {
        for g in [0, 4, 6] {
            let r = ok(&mut n, g, s as f64);
            assert_eq!(
                (
                    r.throttle_reason(ThrottleReason::HwThermalSlowdown),
                    r.throttle_reason(ThrottleReason::SwThermalSlowdown)
                ),
                (Some(false), Some(false))
            );
        }
    }
}

#[test]
fn nvlink_counters_integrate_the_rate() {
    let mut n = custom(
        "[[phases]]\nstart_s = 0\nutilization = 0.5\nnoise = 0\n\
         nvlink_tx_bytes_per_second = 1.0e9\nnvlink_rx_bytes_per_second = 2.0e9\n",
    );
    let mut prev = 0.0;
    for s in 0..=100 {
        let r = ok(&mut n, 0, s as f64 * 0.35);
        assert!(r.nvlink_transmit_bytes.unwrap() >= prev);
        prev = r.nvlink_transmit_bytes.unwrap();
    }
    let r = ok(&mut n, 0, 10.0);
    assert!((r.nvlink_transmit_bytes.unwrap() - 1.0e10).abs() < 1e3);
    assert!((r.nvlink_receive_bytes.unwrap() - 2.0e10).abs() < 1e3);
}

#[test]
fn memory_follows_the_workload() {
    let mut n = custom(
        "[[phases]]\nstart_s = 10\nutilization = 0.5\nmemory_used_ratio = 0.5\n\
         [[phases]]\nstart_s = 20\nutilization = 0.5\nmemory_used_bytes = 1_073_741_824\n",
    );
    let idle = ok(&mut n, 0, 5.0);
    assert_eq!(idle.memory_used_bytes, Some(0.0));
    let reserved = idle.memory_reserved_bytes.unwrap();
    assert!(reserved > 0.0 && reserved < 1_073_741_824.0);
    let half = ok(&mut n, 0, 15.0);
    let usable = 85_899_345_920.0 - reserved;
    let used = half.memory_used_bytes.unwrap();
    assert!((used - usable / 2.0).abs() < 2.0 * 1024.0 * 1024.0);
    assert_eq!(half.memory_free_bytes, Some(usable - used));
    assert_eq!(ok(&mut n, 0, 25.0).memory_used_bytes, Some(1_073_741_824.0));
}

// ---------------------------------------------------------------------------------------------
// Faults.

#[test]
fn xid_79_makes_the_gpu_lost_at_exactly_the_fault_time() {
    let mut n = node("fault-gpu-lost");
    assert!(matches!(n.reading(3, secs(29.999)), Some(GpuState::Ok(_))));
    assert!(matches!(
        n.reading(3, Duration::from_nanos(29_999_999_999)),
        Some(GpuState::Ok(_))
    ));
    for t in [30.0, 30.05, 100.0, 100_000.0] {
        assert_eq!(
            n.reading(3, secs(t)),
            Some(GpuState::Lost {
                since: Duration::from_secs(30),
                xid: 79
            }),
            "at {t}"
        );
        for g in (0..8).filter(|g| *g != 3) {
            let r = ok(&mut n, g, t.min(1000.0));
            assert!(r.xid_counts.is_empty());
        }
    }
    assert_eq!(n.reading(8, secs(1.0)), None);
    assert_eq!(n.readings(secs(40.0)).len(), 8);
}

#[test]
fn a_lost_gpu_can_recover_and_its_counters_keep_their_values() {
    let mut n = custom(
        "[[phases]]\nstart_s = 0\nutilization = 0.9\n\
         [[faults]]\nkind = \"lost\"\ngpu = 0\nat_s = 10\nrecover_at_s = 20\n",
    );
    let before = ok(&mut n, 0, 9.95);
    assert!(matches!(
        n.reading(0, secs(10.0)),
        Some(GpuState::Lost { xid: 79, .. })
    ));
    assert!(matches!(
        n.reading(0, secs(19.99)),
        Some(GpuState::Lost { .. })
    ));
    let after = ok(&mut n, 0, 20.0);
    assert_eq!(after.xid_counts.get(&79), Some(&1));
    assert!(before.xid_counts.is_empty());
    assert!(after.energy_joules.unwrap() >= before.energy_joules.unwrap());
    // No energy is used while lost (at most the step in progress when it was lost).
    assert!(after.energy_joules.unwrap() - before.energy_joules.unwrap() < 700.0 * 0.2);
    // It cooled down while off the bus.
    assert!(after.temperature_gpu_celsius.unwrap() < before.temperature_gpu_celsius.unwrap() - 5.0);
    assert!(ok(&mut n, 0, 30.0).energy_joules.unwrap() > after.energy_joules.unwrap());
}

#[test]
fn xid_counts_count_repeats() {
    let mut n = node("fault-xid-storm");
    assert!(ok(&mut n, 2, 9.9).xid_counts.is_empty());
    assert_eq!(ok(&mut n, 2, 10.0).xid_counts.get(&13), Some(&1));
    assert_eq!(ok(&mut n, 2, 11.9).xid_counts.get(&13), Some(&1));
    assert_eq!(ok(&mut n, 2, 12.0).xid_counts.get(&13), Some(&2));
    assert_eq!(ok(&mut n, 2, 30.0).xid_counts.get(&13), Some(&11));
    assert_eq!(ok(&mut n, 2, 10_000.0).xid_counts.get(&13), Some(&100));
    // Every 7 s from 15 s, without end.
    assert_eq!(ok(&mut n, 4, 85.0).xid_counts.get(&31), Some(&11));
    assert_eq!(ok(&mut n, 4, 1_000.0).xid_counts.get(&31), Some(&141));
    let r1 = ok(&mut n, 1, 60.0);
    assert_eq!(r1.xid_counts.get(&48), Some(&1));
    assert_eq!(r1.xid_counts.len(), 1);
    assert_eq!(r1.ecc.unwrap().volatile_uncorrected, 1.0);
    assert!(ok(&mut n, 0, 1_000.0).xid_counts.is_empty());
    // Counts never go down.
    let mut prev = 0;
    for s in 0..300 {
        let c = ok(&mut n, 6, s as f64)
            .xid_counts
            .get(&31)
            .copied()
            .unwrap_or(0);
        assert!(c >= prev);
        prev = c;
    }
}

#[test]
fn ecc_counters_are_cumulative() {
    let mut n = node("fault-ecc");
    let ecc = |n: &mut Node, gpu, t| ok(n, gpu, t).ecc.unwrap();
    let mut prev = ecc(&mut n, 2, 0.0);
    assert_eq!(prev, Default::default());
    for s in 1..=200 {
        let e = ecc(&mut n, 2, s as f64);
        assert!(e.volatile_corrected >= prev.volatile_corrected);
        assert!(e.volatile_uncorrected >= prev.volatile_uncorrected);
        assert!(e.aggregate_corrected >= e.volatile_corrected);
        assert!(e.aggregate_uncorrected >= e.volatile_uncorrected);
        prev = e;
    }
    // One corrected error every 15 s from 10 s.
    assert_eq!(ecc(&mut n, 2, 100.0).volatile_corrected, 7.0);
    assert_eq!(ecc(&mut n, 2, 89.9).volatile_uncorrected, 0.0);
    let at = ok(&mut n, 2, 90.0);
    assert_eq!(at.ecc.unwrap().volatile_uncorrected, 1.0);
    assert_eq!(at.xid_counts.get(&94), Some(&1));
    assert_eq!(ecc(&mut n, 6, 1_000.0).volatile_corrected, 20.0);
    assert_eq!(ecc(&mut n, 0, 1_000.0), Default::default());
}

// ---------------------------------------------------------------------------------------------
// Errors.

fn err(text: &str) -> ScenarioError {
    match Scenario::from_toml_str(text, "bad.toml") {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e,
    }
}

fn assert_err(e: &ScenarioError, line: usize, key: &str, detail: &str) {
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(msg.starts_with("scenario bad.toml "), "{msg}");
    assert!(
        msg.contains(&format!(" line {line}: ")),
        "line {line}: {msg}"
    );
    assert!(msg.contains(&format!("key {key}: ")), "key {key}: {msg}");
    assert!(msg.contains(detail), "{detail}: {msg}");
    assert_eq!(e.line(), Some(line), "{msg}");
    assert_eq!(e.key(), Some(key), "{msg}");
    assert_eq!(e.origin(), Some("bad.toml"));
}

/// Line number (1-based) of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

#[test]
fn error_out_of_range_value_names_line_and_key() {
    let text = format!(
        "{GPU}\n[[gpus]]\ncount = 2\n{}",
        &GPU[GPU.find("name = \"NVIDIA").unwrap()..]
    )
    .replacen("power_limit_watts = 700.0", "power_limit_watts = 700.0", 1);
    // Make the second [[gpus]] table's power limit negative.
    let idx = text.rfind("power_limit_watts = 700.0").unwrap();
    let text = format!(
        "{}power_limit_watts = -5{}",
        &text[..idx],
        &text[idx + 25..]
    );
    let e = err(&text);
    let line = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("power_limit_watts"))
        .nth(1)
        .unwrap()
        .0
        + 1;
    assert_err(
        &e,
        line,
        "gpus[1].power_limit_watts",
        "expected a number > 0",
    );
    assert_eq!(
        e.to_string(),
        format!(
            "scenario bad.toml line {line}: key gpus[1].power_limit_watts: expected a number > 0"
        )
    );
}

#[test]
fn error_ratio_out_of_range() {
    let text = format!("{GPU}\n[[phases]]\nstart_s = 0\nutilization = 1.5\n");
    assert_err(
        &err(&text),
        line_of(&text, "utilization = 1.5"),
        "phases[0].utilization",
        "between 0 and 1",
    );
    let text = format!("{GPU}\n[[phases]]\nstart_s = -1\nutilization = 0.5\n");
    assert_err(
        &err(&text),
        line_of(&text, "start_s = -1"),
        "phases[0].start_s",
        "seconds",
    );
    let text = format!("{GPU}\n[[phases]]\nstart_s = nan\nutilization = 0.5\n");
    assert_err(
        &err(&text),
        line_of(&text, "start_s = nan"),
        "phases[0].start_s",
        "seconds",
    );
}

#[test]
fn error_syntax() {
    let text = format!("{GPU}\n[[phases]]\nstart_s = 0\nutilization = = 0.5\n");
    let e = err(&text);
    assert_err(&e, line_of(&text, "= = 0.5"), "phases[0].utilization", "");
    let text = format!("{GPU}\n[[phases]\nstart_s = 0\n");
    let e = err(&text);
    assert_eq!(e.line(), Some(line_of(&text, "[[phases]")), "{e}");
    assert!(e.to_string().starts_with("scenario bad.toml line "), "{e}");
}

#[test]
fn error_wrong_type() {
    let text = format!("{GPU}\n[[phases]]\nstart_s = 0\nutilization = \"high\"\n");
    assert_err(
        &err(&text),
        line_of(&text, "\"high\""),
        "phases[0].utilization",
        "invalid type",
    );
    let text = GPU.replace("nvlink_count = 18", "nvlink_count = 1.5");
    assert_err(
        &err(&text),
        line_of(&text, "nvlink_count"),
        "gpus[0].nvlink_count",
        "invalid type",
    );
}

#[test]
fn error_unknown_key() {
    let text = GPU.replace("nvlink_count = 18", "nvlink_count = 18\nnvlinks = 18");
    let e = err(&text);
    assert_err(
        &e,
        line_of(&text, "nvlinks ="),
        "gpus[0].nvlinks",
        "unknown field `nvlinks`",
    );
    let text =
        format!("{GPU}\n[[faults]]\nkind = \"xid\"\ngpu = 0\nat_s = 1\nxid = 13\nwhen = 3\n");
    assert_err(
        &err(&text),
        line_of(&text, "when = 3"),
        "faults[0].when",
        "unknown field",
    );
    let text = format!("{GPU}\n[extra]\nx = 1\n");
    assert_err(
        &err(&text),
        line_of(&text, "[extra]"),
        "extra",
        "unknown field `extra`",
    );
    let text = format!("{GPU}\n[[faults]]\nkind = \"meteor\"\ngpu = 0\nat_s = 1\n");
    assert_err(
        &err(&text),
        line_of(&text, "meteor"),
        "faults[0].kind",
        "unknown variant",
    );
}

#[test]
fn error_gpu_index_out_of_range() {
    let text = format!("{GPU}\n[[faults]]\nkind = \"xid\"\ngpu = 3\nat_s = 1\nxid = 13\n");
    assert_err(
        &err(&text),
        line_of(&text, "gpu = 3"),
        "faults[0].gpu",
        "out of range",
    );
    let text = format!("{GPU}\n[[phases]]\nstart_s = 0\ngpus = [0, 1]\nutilization = 0.5\n");
    assert_err(
        &err(&text),
        line_of(&text, "gpus = [0, 1]"),
        "phases[0].gpus",
        "GPU index 1 out of range",
    );
    let text = format!("{GPU}\n[[mig]]\ngpu = 9\nprofiles = [\"1g.10gb\"]\n");
    assert_err(
        &err(&text),
        line_of(&text, "gpu = 9"),
        "mig[0].gpu",
        "out of range",
    );
}

#[test]
fn error_missing_and_inconsistent_keys() {
    let text = GPU.replace("power_limit_watts = 700.0\n", "");
    let e = err(&text);
    assert_eq!(e.key(), Some("gpus[0].power_limit_watts"), "{e}");
    assert!(
        e.to_string().contains("missing field `power_limit_watts`"),
        "{e}"
    );
    assert!(e.line().is_some(), "{e}");

    let text = format!("{GPU}\n[[faults]]\nkind = \"thermal\"\ngpu = 0\nat_s = 10\n");
    assert_err(
        &err(&text),
        line_of(&text, "[[faults]]"),
        "faults[0].until_s",
        "need until_s",
    );
    let text = format!("{GPU}\n[[faults]]\nkind = \"thermal\"\ngpu = 0\nat_s = 10\nuntil_s = 5\n");
    assert_err(
        &err(&text),
        line_of(&text, "until_s = 5"),
        "faults[0].until_s",
        "after at_s",
    );
    let text =
        format!("{GPU}\n[[faults]]\nkind = \"xid\"\ngpu = 0\nat_s = 10\nxid = 13\nuntil_s = 20\n");
    assert_err(
        &err(&text),
        line_of(&text, "until_s = 20"),
        "faults[0].until_s",
        "not used by faults of kind \"xid\"",
    );
    let text = format!("{GPU}\n[[mig]]\ngpu = 0\nprofiles = [\"4g.40gb\", \"4g.40gb\"]\n");
    assert_err(
        &err(&text),
        line_of(&text, "profiles"),
        "mig[0].profiles",
        "7",
    );
    let text = format!("{GPU}\n[[mig]]\ngpu = 0\nprofiles = [\"big\"]\n");
    assert_err(
        &err(&text),
        line_of(&text, "profiles"),
        "mig[0].profiles",
        "not a MIG profile",
    );
    let text = GPU.replace(
        "idle_graphics_clock_hz = 345_000_000",
        "idle_graphics_clock_hz = 3_000_000_000",
    );
    assert_err(
        &err(&text),
        line_of(&text, "idle_graphics"),
        "gpus[0].idle_graphics_clock_hz",
        "at most",
    );
    let text = format!(
        "{GPU}\n[workload]\nrepeat_after_s = 60\n[[phases]]\nstart_s = 60\nutilization = 0.5\n"
    );
    assert_err(
        &err(&text),
        line_of(&text, "start_s = 60"),
        "phases[0].start_s",
        "before workload.repeat_after_s",
    );
}

#[test]
fn error_for_a_file_names_the_path() {
    let dir = std::env::temp_dir().join(format!("dgx-pixels-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        format!("{GPU}\n[[phases]]\nstart_s = 0\nutilization = 0.5\n"),
    )
    .unwrap();
    let s = Scenario::load(good.to_str().unwrap()).unwrap();
    assert_eq!(s.name(), "custom");
    assert_eq!(s.origin(), good.to_str().unwrap());
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, GPU.replace("seed = 3", "seed = \"three\"")).unwrap();
    let e = Scenario::load(bad.to_str().unwrap()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "scenario {} line 4: key node.seed: ",
            bad.display()
        )),
        "{msg}"
    );
    // A directory exists but cannot be read as a file.
    let e = Scenario::load(dir.to_str().unwrap()).unwrap_err();
    assert!(matches!(e, ScenarioError::Read { .. }), "{e}");
    assert!(e.to_string().contains(dir.to_str().unwrap()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_scenario_lists_the_builtins() {
    let e = Scenario::load("foo").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("unknown scenario \"foo\": not a built-in (dgx-h100, dgx-a100-mig, "),
        "{msg}"
    );
    assert!(msg.ends_with(") and no such file"), "{msg}");
    for name in BUILTIN_SCENARIOS {
        assert!(msg.contains(name), "{msg}");
    }
    assert!(matches!(
        Scenario::load(""),
        Err(ScenarioError::Unknown { .. })
    ));
    assert!(matches!(
        Scenario::load("/no/such/dir/x.toml"),
        Err(ScenarioError::Unknown { .. })
    ));
}

/// Mangled versions of every built-in never panic: they load (and run) or give an error.
#[test]
fn mangled_scenarios_never_panic() {
    let replacements = [
        "",
        "x = ",
        "= 1",
        "-1",
        "0",
        "nan",
        "inf",
        "-inf",
        "1e300",
        "\"s\"",
        "[",
        "[[gpus]]",
        "99999999999",
    ];
    let mut errors = 0;
    for name in BUILTIN_SCENARIOS {
        let text = Scenario::builtin_text(name).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for i in 0..lines.len() {
            for rep in replacements {
                let mut mangled = lines.clone();
                let new_line = match lines[i].split_once('=') {
                    Some((k, _)) if !rep.is_empty() && !rep.starts_with('[') => {
                        format!("{k}= {rep}")
                    }
                    _ => rep.to_string(),
                };
                mangled[i] = &new_line;
                match Scenario::from_toml_str(&mangled.join("\n"), "m.toml") {
                    Ok(s) => {
                        let mut n = Node::new(s);
                        for t in [0.0, 25.0, 95.0] {
                            let _ = n.readings(secs(t));
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        let msg = e.to_string();
                        assert!(msg.starts_with("scenario m.toml"), "{msg}");
                        assert!(!msg.contains('\n'), "{msg}");
                    }
                }
            }
        }
    }
    assert!(errors > 100);
}

/// The model advances in 100 ms steps (the documented STEP): between two steps a reading holds
/// the earlier step's state, with only the energy counter extended linearly at that step's power;
/// at every 100 ms boundary of a transient the state moves on. A 50 ms step breaks the first
/// half, a 200 ms step the second.
#[test]
fn state_advances_every_100_ms_and_holds_in_between() {
    let mut n = node("dgx-h100");
    let mut changed = 0;
    // 20 boundaries while GPU 0 heats up after its workload starts.
    for k in 50..70u64 {
        let t = Duration::from_millis(100 * k);
        let at = |n: &mut Node, d: Duration| match n.reading(0, d) {
            Some(GpuState::Ok(r)) => r,
            other => panic!("{other:?}"),
        };
        let g0 = at(&mut n, t);
        let r0 = &g0.readout;
        for mid in [1, 50, 99] {
            let r = at(&mut n, t + Duration::from_millis(mid)).readout;
            assert_eq!(
                (
                    r.temperature_gpu_celsius.unwrap(),
                    r.power_watts.unwrap(),
                    r.utilization_ratio.unwrap(),
                    r.clocks
                ),
                (
                    r0.temperature_gpu_celsius.unwrap(),
                    r0.power_watts.unwrap(),
                    r0.utilization_ratio.unwrap(),
                    r0.clocks
                ),
                "{k}00 ms + {mid} ms: held from the step"
            );
            let want = r0.energy_joules.unwrap() + g0.power_instant_watts * mid as f64 / 1000.0;
            assert!(
                (r.energy_joules.unwrap() - want).abs() < 1e-6,
                "{k}00 ms + {mid} ms: energy {} want {want}",
                r.energy_joules.unwrap()
            );
        }
        let next = at(&mut n, t + Duration::from_millis(100)).readout;
        if next.temperature_gpu_celsius.unwrap() != r0.temperature_gpu_celsius.unwrap() {
            changed += 1;
        }
    }
    assert_eq!(
        changed, 20,
        "the temperature moves at every 100 ms boundary"
    );
}

// ---------------------------------------------------------------------------------------------
// Readings added for NVML's full device telemetry.

#[test]
fn violation_time_accumulates_only_while_throttled() {
    let mut n = node("fault-thermal");
    // Before the cooling failure at 20 s there is no thermal violation.
    assert_eq!(
        ok(&mut n, 5, 19.0)
            .violation_seconds(ViolationPolicy::Thermal)
            .unwrap(),
        0.0
    );
    let a = ok(&mut n, 5, 60.0)
        .violation_seconds(ViolationPolicy::Thermal)
        .unwrap();
    let b = ok(&mut n, 5, 90.0)
        .violation_seconds(ViolationPolicy::Thermal)
        .unwrap();
    assert!(a > 0.0);
    assert!(
        (b - a - 30.0).abs() < 0.11,
        "throttled throughout: {a} -> {b}"
    );
    let end = ok(&mut n, 5, 300.0)
        .violation_seconds(ViolationPolicy::Thermal)
        .unwrap();
    let later = ok(&mut n, 5, 400.0)
        .violation_seconds(ViolationPolicy::Thermal)
        .unwrap();
    assert_eq!(end, later, "no thermal violation after cooling is restored");
    assert_eq!(
        ok(&mut n, 0, 300.0)
            .violation_seconds(ViolationPolicy::Thermal)
            .unwrap(),
        0.0
    );

    // dgx-h100 training demands more than the 700 W limit: power violation grows with time capped.
    let mut h = node("dgx-h100");
    let mut prev = 0.0;
    for t in [60.0, 90.0, 120.0] {
        let r = ok(&mut h, 0, t);
        assert_eq!(r.throttle_reason(ThrottleReason::SwPowerCap), Some(true));
        assert!(
            r.violation_seconds(ViolationPolicy::Power).unwrap() > prev,
            "at {t}"
        );
        prev = r.violation_seconds(ViolationPolicy::Power).unwrap();
    }
}

#[test]
fn processes_hold_the_memory_in_use() {
    let mut h = node("dgx-h100");
    let r = ok(&mut h, 3, 60.0);
    assert_eq!(r.processes.len(), 1);
    assert_eq!(Some(r.processes[0].used_memory_bytes), r.memory_used_bytes);
    assert_eq!(r.processes[0].gpu_instance, None);

    let mut m = node("dgx-a100-mig");
    let r = ok(&mut m, 1, 60.0);
    assert_eq!(r.processes.len(), 3, "one per busy MIG instance");
    for (p, inst) in r.processes.iter().zip(&r.mig) {
        assert_eq!(p.gpu_instance, Some(inst.gpu_instance));
        assert_eq!(Some(p.used_memory_bytes), inst.memory_used_bytes);
    }
    let pids: std::collections::HashSet<u32> = r.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids.len(), 3);
}

#[test]
fn remapped_rows_follow_uncorrectable_errors() {
    let mut n = node("fault-ecc");
    let before = ok(&mut n, 2, 89.9);
    assert_eq!(before.remapped_rows, Some(Default::default()));
    assert_eq!(
        before.retired_pages, None,
        "Hopper remaps rows, retires no pages"
    );
    let after = ok(&mut n, 2, 90.0).remapped_rows.unwrap();
    assert_eq!(after.uncorrectable, 1.0);
    assert!(after.pending && !after.failure);
}

#[test]
fn parts_before_ampere_retire_pages_instead_of_remapping_rows() {
    let text = format!("{GPU}\n").replace("\"Hopper\"", "\"Volta\"");
    let mut n = Node::new(Scenario::from_toml_str(&text, "volta.toml").unwrap());
    let r = ok(&mut n, 0, 10.0);
    assert_eq!(r.remapped_rows, None);
    assert_eq!(r.retired_pages, Some(Default::default()));
}

#[test]
fn discrete_parts_have_bar1_and_a_pcie_link_unified_memory_parts_do_not() {
    let h = node("dgx-h100");
    let g = h.gpu(0).unwrap();
    assert_eq!(g.bar1_total_bytes, Some(128 << 30));
    assert_eq!(g.pcie_link.map(|l| (l.generation, l.width)), Some((5, 16)));
    let a = node("dgx-a100-mig");
    assert_eq!(a.gpu(0).unwrap().pcie_link.map(|l| l.generation), Some(4));
    let mut s = node("dgx-spark");
    assert_eq!(s.gpu(0).unwrap().bar1_total_bytes, None);
    assert_eq!(s.gpu(0).unwrap().pcie_link, None);
    assert_eq!(ok(&mut s, 0, 10.0).bar1_used_bytes, None);
}

#[test]
fn a_scenario_may_carry_a_cost_table_kept_as_written() {
    let h100 = Scenario::builtin("dgx-h100").unwrap();
    let cost = h100.cost().expect("dgx-h100 has an example price");
    assert_eq!(cost.get("currency").and_then(|v| v.as_str()), Some("USD"));
    assert!(cost.contains_key("electricity_price_per_kwh"));
    assert!(Scenario::builtin("dgx-a100-mig").unwrap().cost().is_none());
}

/// The scenarios README's table says what each built-in shows: its `[node] description`,
/// word for word, and every built-in has a row.
#[test]
fn the_scenarios_readme_table_is_each_builtins_description() {
    let readme = include_str!("../scenarios/README.md");
    for name in dgx_pixels_sim::BUILTIN_SCENARIOS {
        let s = dgx_pixels_sim::Scenario::builtin(name).unwrap();
        let row = format!("| `{name}` | {} |", s.description());
        assert!(readme.contains(&row), "README lacks the row {row}");
    }
    let rows = readme.lines().filter(|l| l.starts_with("| `")).count();
    assert!(rows >= dgx_pixels_sim::BUILTIN_SCENARIOS.len());
}
