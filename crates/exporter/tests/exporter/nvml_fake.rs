//! The real binary reading "GPUs" through NVML: `--nvml.library` points at our fake
//! libnvidia-ml (crates/fake-nvml), which answers from the simulator. Values served must equal
//! what the simulator defines for the same scenario and time.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use dgx_pixels_metrics::labels::{NvlinkErrorType, ThrottleReason, ViolationPolicy};
use dgx_pixels_sim::{GpuReadout, GpuState, Node, Scenario, BUILTIN_SCENARIOS};

/// Starts the daemon on the fake with the given scenario and extra fake settings, serving every
/// series (these tests compare readings; the series budget has its own test).
fn start_fake(scenario: &str, fake_env: &[(&str, &str)], args: &[&str]) -> Daemon {
    let mut env = vec![
        ("FAKE_NVML_SCENARIO", scenario),
        ("FAKE_NVML_PCIE_DELAY_MS", "0"),
    ];
    env.extend_from_slice(fake_env);
    let mut all = vec![
        "--nvml.library",
        fake_nvml_library(),
        "--metrics.detail",
        "full",
    ];
    all.extend_from_slice(args);
    start_with_env(&all, &env)
}

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

/// Polls /metrics until `check` holds or `timeout` passes; returns the last body.
fn wait_for(port: u16, timeout: Duration, check: impl Fn(&str) -> bool) -> (String, Duration) {
    let start = Instant::now();
    loop {
        let body = text(port);
        if check(&body) || start.elapsed() > timeout {
            return (body, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// fault-gpu-lost: GPU 3 falls off the bus with XID 79 at 30 s. Starting at 27 s, it must go to
/// `gpu_up 0` about 3 s later, not before, with its XID counted and the other GPUs untouched;
/// its readings are dropped, never frozen.
#[test]
fn the_lost_gpu_goes_down_at_its_scheduled_time_and_the_others_carry_on() {
    let started = Instant::now();
    let d = start_fake(
        "fault-gpu-lost",
        &[("FAKE_NVML_START", "27")],
        &["--collector.nvml.interval", "200ms"],
    );
    let gpu3 = [("gpu", "3")];
    let body = text(d.port);
    assert_eq!(value(&body, "dgx_pixels_gpu_up", &gpu3), Some(1.0));
    assert!(value(&body, "dgx_pixels_gpu_power_watts", &gpu3).is_some());
    let (body, _) = wait_for(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_up", &gpu3) == Some(0.0)
            && value(
                b,
                "dgx_pixels_gpu_xid_errors_total",
                &[("gpu", "3"), ("xid", "79")],
            )
            .is_some()
    });
    let elapsed = started.elapsed();
    assert_eq!(
        value(&body, "dgx_pixels_gpu_up", &gpu3),
        Some(0.0),
        "GPU 3 never went down"
    );
    assert!(
        elapsed >= Duration::from_millis(2_500),
        "down after {elapsed:?}: before its time"
    );
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_xid_errors_total",
            &[("gpu", "3"), ("xid", "79")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&body, "dgx_pixels_gpu_power_watts", &gpu3),
        None,
        "no frozen readings"
    );
    assert!(series(&body, "dgx_pixels_gpu_info")
        .iter()
        .any(|s| s.contains("gpu=\"3\",")));
    for other in ["0", "1", "2", "4", "5", "6", "7"] {
        assert_eq!(
            value(&body, "dgx_pixels_gpu_up", &[("gpu", other)]),
            Some(1.0)
        );
        assert!(value(&body, "dgx_pixels_gpu_power_watts", &[("gpu", other)]).is_some());
    }
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "nvml")]),
        Some(1.0)
    );
}

/// fault-xid-storm: GPU 2 reports XID 13 every 2 s from 10 s. Every occurrence is counted
/// (repeats included) by the event thread, matching the simulator's schedule.
#[test]
fn every_xid_occurrence_is_counted() {
    // The fake's clock starts at nvmlInit, inside the daemon's startup: start counting before.
    let started = Instant::now();
    let d = start_fake(
        "fault-xid-storm",
        &[("FAKE_NVML_START", "9")],
        &["--collector.nvml.interval", "200ms"],
    );
    let labels = [("gpu", "2"), ("xid", "13")];
    let (body, _) = wait_for(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_xid_errors_total", &labels).is_some_and(|v| v >= 3.0)
    });
    let elapsed = started.elapsed().as_secs_f64();
    let served = value(&body, "dgx_pixels_gpu_xid_errors_total", &labels).unwrap();
    // Occurrences at 10, 12, 14 s scenario time = 1, 3, 5 s after start.
    let expected_max = ((9.0 + elapsed - 10.0) / 2.0).floor() + 1.0;
    assert!(
        served >= 3.0 && served <= expected_max,
        "served {served} after {elapsed:.1}s"
    );
    assert!(
        elapsed >= 4.5,
        "3 XIDs after {elapsed:.1}s: faster than scheduled"
    );
    // GPUs without faults report no XID series.
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_xid_errors_total",
            &[("gpu", "0"), ("xid", "13")]
        ),
        None
    );
}

/// A GPU whose NVML calls hang is reported down after the poll's deadline; scrapes, the other
/// GPUs and the source itself keep working.
#[test]
fn a_hung_gpu_is_reported_down_and_never_blocks_the_others() {
    let d = start_fake(
        "dgx-h100",
        &[
            ("FAKE_NVML_HANG_GPU", "5"),
            ("FAKE_NVML_HANG_AFTER", "2"),
            // The energy counter, which shows GPU 0 still read, is a slow reading.
            ("DGX_PIXELS_NVML__SLOW_INTERVAL", "200ms"),
        ],
        &[
            "--collector.nvml.interval",
            "200ms",
            "--collector.nvml.timeout",
            "500ms",
        ],
    );
    let (body, _) = wait_for(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_up", &[("gpu", "5")]) == Some(0.0)
    });
    assert_eq!(
        value(&body, "dgx_pixels_gpu_up", &[("gpu", "5")]),
        Some(0.0)
    );
    assert_eq!(
        value(&body, "dgx_pixels_gpu_power_watts", &[("gpu", "5")]),
        None
    );
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "nvml")]),
        Some(1.0)
    );
    // Polls keep completing (energy keeps rising on the others) and scrapes stay fast.
    let before = value(&body, "dgx_pixels_gpu_energy_joules_total", &[("gpu", "0")]).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let t = Instant::now();
    let later = text(d.port);
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "scrape took {:?}",
        t.elapsed()
    );
    let after = value(
        &later,
        "dgx_pixels_gpu_energy_joules_total",
        &[("gpu", "0")],
    )
    .unwrap();
    assert!(after > before, "GPU 0 still polled: {before} -> {after}");
    assert_eq!(
        value(&later, "dgx_pixels_gpu_up", &[("gpu", "5")]),
        Some(0.0)
    );
}

/// Regression (hardening round 2, item 9): a GPU whose NVML calls hang from the first poll
/// was left out entirely, though the log said "reporting gpu_up 0"; it is served as down, with
/// its index (its uuid was never read).
#[test]
fn a_gpu_hung_from_startup_is_served_as_down() {
    let d = start_fake(
        "dgx-h100",
        &[("FAKE_NVML_HANG_GPU", "5"), ("FAKE_NVML_HANG_AFTER", "0")],
        &[
            "--collector.nvml.interval",
            "200ms",
            "--collector.nvml.timeout",
            "500ms",
        ],
    );
    let (body, _) = wait_for(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_up", &[("gpu", "0")]) == Some(1.0)
    });
    assert!(
        series(&body, "dgx_pixels_gpu_up").contains(&"dgx_pixels_gpu_up{gpu=\"5\",uuid=\"\"} 0"),
        "{:?}",
        series(&body, "dgx_pixels_gpu_up")
    );
    assert!(series(&body, "dgx_pixels_gpu_info")
        .iter()
        .all(|s| !s.contains("gpu=\"5\"")));
    assert_eq!(series(&body, "dgx_pixels_gpu_up").len(), 8);
}

/// Processes map to containers through /proc/PID/cgroup (here a fixture procfs).
#[test]
fn process_memory_carries_the_container_id() {
    let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let procfs = std::env::temp_dir().join(format!("dgx-pixels-procfs-{}", std::process::id()));
    // dgx-h100's simulated processes have pid 20000 + 100 * GPU index.
    std::fs::create_dir_all(procfs.join("20100")).unwrap();
    std::fs::write(
        procfs.join("20100/cgroup"),
        format!("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{id}.scope\n"),
    )
    .unwrap();
    let d = start_fake(
        "dgx-h100",
        &[("FAKE_NVML_TIME", "60")],
        &["--path.procfs", procfs.to_str().unwrap()],
    );
    let body = text(d.port);
    std::fs::remove_dir_all(&procfs).unwrap();
    let with = value(
        &body,
        "dgx_pixels_process_memory_used_bytes",
        &[("pid", "20100"), ("container_id", id)],
    );
    assert!(
        with.is_some_and(|v| v > 0.0),
        "{:?}",
        series(&body, "dgx_pixels_process_memory_used_bytes")
    );
    let host = value(
        &body,
        "dgx_pixels_process_memory_used_bytes",
        &[("pid", "20000"), ("container_id", "")],
    );
    assert!(
        host.is_some(),
        "a process without a container has an empty container_id"
    );
}

/// Readings a GPU does not support are omitted and logged once per GPU and reading at debug
/// level, not on every poll.
#[test]
fn unsupported_readings_are_logged_once_per_gpu_and_reading() {
    use std::io::Read;
    let mut d = start_fake(
        "dgx-spark",
        &[("FAKE_NVML_TIME", "60")],
        &["--collector.nvml.interval", "100ms", "--log.level", "debug"],
    );
    let body = text(d.port);
    assert_eq!(
        value(&body, "dgx_pixels_gpu_memory_total_bytes", &[("gpu", "0")]),
        None
    );
    std::thread::sleep(Duration::from_millis(800)); // several more polls
    let _ = d.child.kill();
    let mut log = String::new();
    d.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    let memory: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reading not available") && l.contains("reading=memory_info"))
        .collect();
    assert_eq!(memory.len(), 1, "{memory:#?}");
    assert!(memory[0].contains("gpu=0"), "{}", memory[0]);
}

/// Issue 32, slice 2: where each GPU of a GB200 NVL72 tray sits, from the fake NVML's
/// `nvmlDeviceGetPlatformInfo` (struct v2) through the NVML source's slow readings, and the same
/// from the simulated node: one info series per GPU in the default profile; none on a part the
/// driver places nowhere.
#[test]
fn the_gb200_tray_serves_where_each_gpu_sits() {
    let want = |body: &str, source: &str| {
        for gpu in 0..4u32 {
            let module = (gpu + 1).to_string();
            let gpu = gpu.to_string();
            assert_eq!(
                value(
                    body,
                    "dgx_pixels_gpu_platform_info",
                    &[
                        ("gpu", gpu.as_str()),
                        ("chassis_serial", "1823124000137"),
                        ("slot", "12"),
                        ("tray", "5"),
                        ("host_id", "1"),
                        ("module_id", module.as_str()),
                    ]
                ),
                Some(1.0),
                "{source} GPU {gpu}: {body}"
            );
        }
        assert_eq!(
            series(body, "dgx_pixels_gpu_platform_info").len(),
            4,
            "{source}"
        );
    };
    let d = start_with_env(
        &["--nvml.library", fake_nvml_library()],
        &[
            ("FAKE_NVML_SCENARIO", "gb200-nvl72-tray"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        series(b, "dgx_pixels_gpu_platform_info").len() == 4
    });
    want(&body, "nvml");
    let d = start(&["--simulate", "gb200-nvl72-tray", "--no-collector.probes"]);
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        series(b, "dgx_pixels_gpu_platform_info").len() == 4
    });
    want(&body, "sim");
    let d = start(&["--simulate", "dgx-h100", "--no-collector.probes"]);
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        !series(b, "dgx_pixels_gpu_up").is_empty()
    });
    assert!(series(&body, "dgx_pixels_gpu_platform_info").is_empty());
}

/// `dgx-b200` with 9 symbol and 2 post-FEC errors on GPU 0's link 5 from 1 s.
fn nvlink5_scenario() -> PathBuf {
    let text = Scenario::builtin_text("dgx-b200").unwrap();
    let faults = "[[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 5\n\
                  error_type = \"symbol\"\nerrors = 9\nat_s = 1\n\
                  [[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 5\n\
                  error_type = \"effective\"\nerrors = 2\nat_s = 1\n";
    let path = std::env::temp_dir().join(format!("nvlink5-exporter-{}.toml", std::process::id()));
    std::fs::write(&path, format!("{text}\n{faults}")).unwrap();
    path
}

/// Blackwell through the real binary, on the fake NVML and simulated: the NVLink 5 counters
/// as per-GPU totals, the erring link named (symbol errors only at full detail), no legacy
/// types.
#[test]
fn blackwell_serves_nvlink5_error_counters() {
    let path = nvlink5_scenario();
    let scenario = path.to_str().unwrap();
    let check = |body: &str, source: &str, full: bool| {
        let gpu0 = |t: &str| {
            value(
                body,
                "dgx_pixels_nvlink_errors_total",
                &[("gpu", "0"), ("error_type", t)],
            )
        };
        assert_eq!(gpu0("symbol"), Some(9.0), "{source}");
        assert_eq!(gpu0("effective"), Some(2.0), "{source}");
        assert_eq!(gpu0("receive"), Some(0.0), "{source}");
        assert_eq!(gpu0("replay"), None, "{source}");
        // Four totals by default (the budget), all six at full detail.
        assert_eq!(gpu0("link_integrity"), full.then_some(0.0), "{source}");
        let per_link = value(
            body,
            "dgx_pixels_nvlink_link_errors_total",
            &[("gpu", "0"), ("link", "5"), ("error_type", "symbol")],
        );
        // Symbol errors per link only at full detail; the others in both profiles.
        assert_eq!(per_link, full.then_some(9.0), "{source}");
        let per_link = value(
            body,
            "dgx_pixels_nvlink_link_errors_total",
            &[("gpu", "0"), ("link", "5"), ("error_type", "effective")],
        );
        assert_eq!(per_link, Some(2.0), "{source}");
    };
    let ready = |b: &str| !series(b, "dgx_pixels_nvlink_errors_total").is_empty();
    for full in [false, true] {
        let detail = if full { "full" } else { "default" };
        let d = start_with_env(
            &[
                "--nvml.library",
                fake_nvml_library(),
                "--metrics.detail",
                detail,
            ],
            &[
                ("FAKE_NVML_SCENARIO", scenario),
                ("FAKE_NVML_TIME", "60"),
                ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ],
        );
        let (body, _) = wait_until(d.port, Duration::from_secs(15), ready);
        check(&body, "nvml", full);
    }
    let d = start(&[
        "--simulate",
        scenario,
        "--no-collector.probes",
        "--metrics.detail",
        "full",
    ]);
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        ready(b)
            && value(
                b,
                "dgx_pixels_nvlink_errors_total",
                &[("gpu", "0"), ("error_type", "symbol")],
            ) == Some(9.0)
    });
    check(&body, "sim", true);
    std::fs::remove_file(&path).unwrap();
}
