//! Every built-in scenario frozen at 60 s: each GPU's served values equal the simulator's.

use crate::common;

use std::time::Duration;

use dgx_pixels_metrics::labels::{NvlinkErrorType, ThrottleReason, ViolationPolicy};
use dgx_pixels_sim::{GpuReadout, GpuState, Node, Scenario, BUILTIN_SCENARIOS};

use common::*;

use super::start_fake;

fn node(scenario: &str) -> Node {
    Node::new(Scenario::builtin(scenario).unwrap())
}

fn reading(n: &mut Node, gpu: usize, t: f64) -> Option<GpuReadout> {
    match n.reading(gpu, Duration::from_secs_f64(t)) {
        Some(GpuState::Ok(r)) => Some(r.readout),
        _ => None,
    }
}

fn close(a: f64, b: f64, tolerance: f64, what: &str) {
    assert!(
        (a - b).abs() <= tolerance,
        "{what}: served {a}, simulator {b}"
    );
}

const FROZEN_AT: f64 = 60.0;

/// Every built-in scenario, frozen at 60 s: each GPU's values equal the simulator's, within
/// the resolution NVML reports in (mW, mJ, MHz, whole degrees).
#[test]
fn served_values_equal_the_simulator_for_every_builtin_scenario() {
    for scenario in BUILTIN_SCENARIOS {
        let d = start_fake(scenario, &[("FAKE_NVML_TIME", "60")], &[]);
        let body = text(d.port);
        let mut n = node(scenario);
        assert_eq!(
            value(&body, "dgx_pixels_source_up", &[("source", "nvml")]),
            Some(1.0),
            "{scenario}"
        );
        for i in 0..n.gpu_count() {
            let g = n.gpu(i).unwrap().clone();
            let gpu = i.to_string();
            let l = [("gpu", gpu.as_str())];
            let info = series(&body, "dgx_pixels_gpu_info");
            let info = info
                .iter()
                .find(|s| s.contains(&format!("gpu=\"{i}\",")))
                .unwrap();
            assert!(info.contains(&format!("uuid=\"{}\"", g.uuid)), "{info}");
            assert!(info.contains(&format!("model=\"{}\"", g.name)), "{info}");
            assert!(
                info.contains(&format!("pci_bus_id=\"{}\"", g.pci_bus_id)),
                "{info}"
            );
            assert!(info.contains(&format!("driver_version=\"{}\"", n.driver_version())));
            let Some(r) = reading(&mut n, i, FROZEN_AT) else {
                // Lost at this time: up 0, identity kept, no readings.
                assert_eq!(
                    value(&body, "dgx_pixels_gpu_up", &l),
                    Some(0.0),
                    "{scenario}"
                );
                assert_eq!(value(&body, "dgx_pixels_gpu_power_watts", &l), None);
                continue;
            };
            let what = |m: &str| format!("{scenario} GPU {i} {m}");
            assert_eq!(value(&body, "dgx_pixels_gpu_up", &l), Some(1.0));
            let served = |name: &str| value(&body, name, &l);
            close(
                served("dgx_pixels_gpu_power_watts").unwrap(),
                r.power_watts.unwrap(),
                0.001,
                &what("power"),
            );
            close(
                served("dgx_pixels_gpu_energy_joules_total").unwrap(),
                r.energy_joules.unwrap(),
                0.001,
                &what("energy"),
            );
            close(
                served("dgx_pixels_gpu_power_limit_watts").unwrap(),
                g.power_limit_watts,
                0.001,
                &what("power limit"),
            );
            close(
                served("dgx_pixels_gpu_utilization_ratio").unwrap(),
                r.utilization_ratio.unwrap(),
                0.01,
                &what("utilization"),
            );
            match r.memory_used_bytes {
                Some(used) => {
                    assert_eq!(served("dgx_pixels_gpu_memory_used_bytes"), Some(used));
                    assert_eq!(
                        served("dgx_pixels_gpu_memory_total_bytes"),
                        g.memory_total_bytes.map(|b| b as f64)
                    );
                    assert_eq!(
                        served("dgx_pixels_gpu_memory_free_bytes"),
                        r.memory_free_bytes
                    );
                    assert_eq!(
                        served("dgx_pixels_gpu_memory_reserved_bytes"),
                        r.memory_reserved_bytes
                    );
                }
                None => {
                    // Unified memory (GB10): no framebuffer series at all, never zeros.
                    for name in [
                        "dgx_pixels_gpu_memory_used_bytes",
                        "dgx_pixels_gpu_memory_total_bytes",
                        "dgx_pixels_gpu_memory_free_bytes",
                        "dgx_pixels_gpu_bar1_total_bytes",
                    ] {
                        assert_eq!(served(name), None, "{}", what(name));
                    }
                }
            }
            let temp = value(
                &body,
                "dgx_pixels_gpu_temperature_celsius",
                &[l[0], ("sensor", "gpu")],
            );
            close(
                temp.unwrap(),
                r.temperature_gpu_celsius.unwrap(),
                1.0,
                &what("temperature"),
            );
            let mem_temp = value(
                &body,
                "dgx_pixels_gpu_temperature_celsius",
                &[l[0], ("sensor", "memory")],
            );
            assert_eq!(
                mem_temp.is_some(),
                r.temperature_memory_celsius.is_some(),
                "{}",
                what("memory sensor")
            );
            for (clock, hz) in [
                ("graphics", r.clocks.graphics.unwrap()),
                ("sm", r.clocks.sm.unwrap()),
                ("memory", r.clocks.memory.unwrap()),
            ] {
                let v = value(
                    &body,
                    "dgx_pixels_gpu_clock_hertz",
                    &[l[0], ("clock", clock)],
                );
                close(v.unwrap(), hz, 1e6, &what(clock));
            }
            let sm_max = value(
                &body,
                "dgx_pixels_gpu_clock_max_hertz",
                &[l[0], ("clock", "sm")],
            );
            close(
                sm_max.unwrap(),
                g.max_clocks.sm_hz,
                1e6,
                &what("max sm clock"),
            );
            let cap = value(
                &body,
                "dgx_pixels_gpu_throttle_reason",
                &[l[0], ("reason", "sw_power_cap")],
            );
            assert_eq!(
                cap,
                r.throttle_reason(ThrottleReason::SwPowerCap)
                    .map(|on| if on { 1.0 } else { 0.0 }),
                "{}",
                what("power cap")
            );
            for (kind, counter, v) in [
                ("corrected", "volatile", r.ecc.unwrap().volatile_corrected),
                (
                    "uncorrected",
                    "volatile",
                    r.ecc.unwrap().volatile_uncorrected,
                ),
                (
                    "uncorrected",
                    "aggregate",
                    r.ecc.unwrap().aggregate_uncorrected,
                ),
            ] {
                let served = value(
                    &body,
                    "dgx_pixels_gpu_ecc_errors_total",
                    &[l[0], ("error_type", kind), ("counter", counter)],
                );
                assert_eq!(served, Some(v), "{}", what("ecc"));
            }
            let rows = value(
                &body,
                "dgx_pixels_gpu_remapped_rows",
                &[l[0], ("cause", "uncorrectable")],
            );
            assert_eq!(
                rows,
                r.remapped_rows.map(|rows| rows.uncorrectable),
                "{}",
                what("remapped rows")
            );
            if g.nvlink_count > 0 {
                // Totals over all links (scopeId UINT_MAX), in KiB: within one KiB per link.
                let tx = value(&body, "dgx_pixels_nvlink_transmit_bytes_total", &l).unwrap();
                close(
                    tx,
                    r.nvlink_transmit_bytes.unwrap(),
                    1024.0 * f64::from(g.nvlink_count),
                    &what("nvlink tx"),
                );
                let links = r.nvlinks.len() as f64;
                let up = r.nvlinks.iter().filter(|k| k.up).count() as f64;
                assert_eq!(
                    value(&body, "dgx_pixels_nvlink_links", &l),
                    Some(f64::from(g.nvlink_count)),
                    "{}",
                    what("links")
                );
                assert_eq!(links, f64::from(g.nvlink_count), "{}", what("links read"));
                assert_eq!(
                    value(&body, "dgx_pixels_nvlink_links_up", &l),
                    Some(up),
                    "{}",
                    what("links up")
                );
                // Per-link series only for links that are down or have errors.
                let down = series(&body, "dgx_pixels_nvlink_link_down")
                    .iter()
                    .filter(|s| s.contains(&format!("gpu=\"{i}\",")))
                    .count() as f64;
                assert_eq!(down, links - up, "{}", what("links down"));
                // The error totals per type: the legacy four up to Hopper, the NVLink 5 ones
                // (field values) on Blackwell, each the sum over the links.
                for kind in NvlinkErrorType::ALL {
                    let want = r
                        .nvlinks
                        .iter()
                        .filter_map(|k| k.errors.get(kind))
                        .fold(None, |a: Option<f64>, v| Some(a.unwrap_or(0.0) + v));
                    assert_eq!(
                        value(
                            &body,
                            "dgx_pixels_nvlink_errors_total",
                            &[l[0], ("error_type", kind.as_str())]
                        ),
                        want,
                        "{}",
                        what(kind.as_str())
                    );
                    assert_eq!(
                        want.is_some(),
                        g.nvlink_error_types().contains(&kind),
                        "{}",
                        what(kind.as_str())
                    );
                }
            } else {
                assert_eq!(
                    value(&body, "dgx_pixels_nvlink_transmit_bytes_total", &l),
                    None
                );
            }
            let violation = value(
                &body,
                "dgx_pixels_gpu_throttle_violation_seconds_total",
                &[l[0], ("policy", "power")],
            );
            close(
                violation.unwrap(),
                r.violation_seconds(ViolationPolicy::Power).unwrap(),
                1e-6,
                &what("power violation"),
            );
            assert_eq!(
                value(&body, "dgx_pixels_gpu_processes", &l),
                Some(r.processes.len() as f64),
                "{}",
                what("processes")
            );
            for p in &r.processes {
                let pid = p.pid.to_string();
                let served = value(
                    &body,
                    "dgx_pixels_process_memory_used_bytes",
                    &[l[0], ("pid", &pid)],
                );
                assert_eq!(
                    served,
                    Some(p.used_memory_bytes),
                    "{}",
                    what("process memory")
                );
            }
            // MIG: per-instance identity and memory, parent series continue.
            let instances = g.mig.clone().unwrap_or_default();
            let served_instances = series(&body, "dgx_pixels_mig_info")
                .into_iter()
                .filter(|s| s.contains(&format!("gpu=\"{i}\",")))
                .count();
            assert_eq!(
                served_instances,
                instances.len(),
                "{}",
                what("MIG instances")
            );
            for (inst, m) in instances.iter().zip(&r.mig) {
                let gi = inst.gpu_instance.to_string();
                let labels = [
                    l[0],
                    ("gpu_instance", gi.as_str()),
                    ("mig_profile", inst.profile.as_str()),
                ];
                assert_eq!(
                    value(&body, "dgx_pixels_mig_memory_used_bytes", &labels),
                    m.memory_used_bytes,
                    "{}",
                    what("MIG memory")
                );
                assert_eq!(
                    value(&body, "dgx_pixels_mig_memory_total_bytes", &labels),
                    Some(inst.memory_total_bytes as f64)
                );
                assert_eq!(
                    value(
                        &body,
                        "dgx_pixels_mig_info",
                        &[l[0], ("mig_uuid", inst.uuid.as_str())]
                    ),
                    Some(1.0)
                );
            }
        }
    }
}
