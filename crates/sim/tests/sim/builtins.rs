//! The built-in scenarios: each loads and reads sensibly, their static facts, the README.

use dgx_pixels_sim::{GpuState, Node, Scenario, BUILTIN_SCENARIOS};

use super::{node, ok, secs};

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
    let readme = include_str!("../../scenarios/README.md");
    for name in dgx_pixels_sim::BUILTIN_SCENARIOS {
        let s = dgx_pixels_sim::Scenario::builtin(name).unwrap();
        let row = format!("| `{name}` | {} |", s.description());
        assert!(readme.contains(&row), "README lacks the row {row}");
    }
    let rows = readme.lines().filter(|l| l.starts_with("| `")).count();
    assert!(rows >= dgx_pixels_sim::BUILTIN_SCENARIOS.len());
}
