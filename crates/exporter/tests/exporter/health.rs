//! Issue 19, "Done when" 1: for every health rule (`dgx_pixels_health::RULES`), the real binary
//! reading the `fault-health` scenario serves the verdict, action and reason while the fault
//! holds, and clears them as docs/health.md says: when the reading clears, after
//! `[health] clear_after`, or when the GPU is seen reset. Once through the fake NVML (the NVML
//! source's real code paths: field values, the slow readings, XID events) and once through the
//! simulated source. Each GPU of the scenario carries one fault (see the table at the top of
//! `crates/sim/scenarios/fault-health.toml`); the test watches every GPU's verdict until each
//! has gone through its expected sequence, then checks the sequence, when it cleared, and that
//! together the GPUs covered every rule of the table. The NVLink fabric rules (issue 32) are
//! covered the same way on `fault-fabric`, one GB200 NVL72 tray.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::collections::BTreeSet;
use std::io::Write;
use std::time::{Duration, Instant};

use common::*;

/// `[health] clear_after` in these tests: its minimum.
const CLEAR_AFTER: f64 = 10.0;

/// The exporter's settings: the minimum quiet period, and every poll fast.
const CONFIG: &str = r#"
[health]
clear_after = "10s"
[collector.health]
interval = "100ms"
[collector.nvml]
interval = "100ms"
[nvml]
slow_interval = "100ms"
[simulation]
interval = "100ms"
"#;

/// One verdict: `(state, action, reason)`.
type Verdict = (&'static str, &'static str, &'static str);

const HEALTHY: Verdict = ("healthy", "none", "none");

/// How a GPU's condition is expected to clear.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Clears {
    /// As soon as the reading stops showing it (a level, or the reset that sets it back).
    Promptly,
    /// `CLEAR_AFTER` after the condition was last seen.
    AfterQuietPeriod,
    /// Not within the scenario: the verdict holds to the end.
    Never,
}

/// What one GPU of fault-health must show.
struct Expect {
    gpu: usize,
    /// The verdicts in the order they must be seen, each at least once.
    sequence: &'static [Verdict],
    /// Verdicts that may show for a moment between them (and are otherwise ignored).
    transient: &'static [Verdict],
    /// Scenario seconds at which the condition stops (the fault's end, the reset, the last
    /// occurrence of an event).
    ends_at: f64,
    clears: Clears,
}

const EXPECT: &[Expect] = &[
    Expect {
        gpu: 0,
        sequence: &[HEALTHY],
        transient: &[],
        ends_at: 0.0,
        clears: Clears::Never,
    },
    Expect {
        gpu: 1,
        sequence: &[HEALTHY, ("degraded", "restart_app", "xid_13"), HEALTHY],
        transient: &[],
        ends_at: 3.0,
        clears: Clears::AfterQuietPeriod,
    },
    Expect {
        gpu: 2,
        sequence: &[
            HEALTHY,
            ("unhealthy", "reset_gpu", "ecc_double_bit"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 3,
        sequence: &[HEALTHY, ("unhealthy", "reboot", "gpu_lost"), HEALTHY],
        // XID 79 arrives by event: it may be counted a poll before the GPU is found lost.
        transient: &[("unhealthy", "reboot", "xid_79")],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 4,
        sequence: &[HEALTHY, ("degraded", "drain_p2p", "nvlink_down"), HEALTHY],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 5,
        sequence: &[
            HEALTHY,
            ("degraded", "check_hardware", "pcie_width_degraded"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 6,
        sequence: &[
            HEALTHY,
            ("degraded", "check_hardware", "hw_slowdown"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 6.0,
        clears: Clears::AfterQuietPeriod,
    },
    Expect {
        gpu: 7,
        sequence: &[
            HEALTHY,
            ("degraded", "check_hardware", "nvlink_errors"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 5.0,
        clears: Clears::AfterQuietPeriod,
    },
    Expect {
        gpu: 8,
        sequence: &[
            HEALTHY,
            ("degraded", "check_hardware", "pcie_generation_degraded"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 6.0,
        clears: Clears::AfterQuietPeriod,
    },
    Expect {
        gpu: 9,
        sequence: &[
            HEALTHY,
            ("degraded", "reset_gpu", "row_remap_pending"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 10,
        // The reset at 12 s clears the ECC counters but not a failed remap.
        sequence: &[
            HEALTHY,
            ("unhealthy", "contact_support", "row_remap_failure"),
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Never,
    },
    Expect {
        gpu: 11,
        sequence: &[
            HEALTHY,
            ("degraded", "check_hardware", "thermal_slowdown"),
            HEALTHY,
        ],
        transient: &[],
        // Hot from about 5.5 s until the fault ends at 7 s; it cools within 0.2 s.
        ends_at: 7.0,
        clears: Clears::AfterQuietPeriod,
    },
    Expect {
        gpu: 12,
        sequence: &[
            HEALTHY,
            ("degraded", "reset_gpu", "retired_pages_pending"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 13,
        sequence: &[
            HEALTHY,
            ("unhealthy", "reset_gpu", "ecc_double_bit"),
            HEALTHY,
        ],
        // The NVML source reads the ECC counters every poll but page retirement on its slow
        // cadence: for up to one slow interval after the reset it still reports the page
        // pending.
        transient: &[("degraded", "reset_gpu", "retired_pages_pending")],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 14,
        sequence: &[
            HEALTHY,
            ("unhealthy", "drain_and_reset", "driver_recovery_action"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
];

/// The value of label `key` in one exposition line.
fn label<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!("{key}=\""))? + key.len() + 2;
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

/// GPU `gpu`'s verdict in `body` (served with `--metrics.detail full`: every state, the
/// action "none" too), `None` while the health series are not served yet. Exactly one state is
/// 1 and there is one action series.
fn verdict(body: &str, gpu: usize) -> Option<Owned> {
    let gpu_label = format!("gpu=\"{gpu}\"");
    let of_gpu = |name: &str| -> Vec<&str> {
        series(body, name)
            .into_iter()
            .filter(|l| l.contains(&gpu_label))
            .collect()
    };
    let states = of_gpu("dgx_pixels_gpu_health_state");
    if states.is_empty() {
        return None;
    }
    assert_eq!(states.len(), 4, "GPU {gpu}: {states:?}");
    let on: Vec<&str> = states
        .iter()
        .filter(|l| l.ends_with(" 1"))
        .filter_map(|l| label(l, "state"))
        .collect();
    assert_eq!(on.len(), 1, "GPU {gpu}: {states:?}");
    let actions = of_gpu("dgx_pixels_gpu_health_action_info");
    assert_eq!(actions.len(), 1, "GPU {gpu}: {actions:?}");
    Some((
        on[0].to_string(),
        label(actions[0], "action").unwrap().to_string(),
        label(actions[0], "reason").unwrap().to_string(),
    ))
}

/// A verdict as served.
type Owned = (String, String, String);

fn owned((s, a, r): Verdict) -> Owned {
    (s.to_string(), a.to_string(), r.to_string())
}

/// What one GPU showed: each change of verdict with the seconds since the daemon was started.
#[derive(Debug, Default)]
struct Seen {
    changes: Vec<(Owned, f64)>,
}

impl Seen {
    fn record(&mut self, v: Owned, at: f64) {
        if self.changes.last().map(|(last, _)| last) != Some(&v) {
            self.changes.push((v, at));
        }
    }

    /// The changes without the tolerated transients.
    fn filtered(&self, e: &Expect) -> Vec<(Owned, f64)> {
        let mut out: Vec<(Owned, f64)> = Vec::new();
        for (v, at) in &self.changes {
            if e.transient.iter().any(|t| owned(*t) == *v) {
                continue;
            }
            if out.last().map(|(last, _)| last) != Some(v) {
                out.push((v.clone(), *at));
            }
        }
        out
    }
}

fn config_file() -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(CONFIG.as_bytes()).unwrap();
    f
}

/// The rules `fault-fabric` covers (on a GB200 NVL72 tray); `fault-health` covers the others.
const FABRIC_RULES: &[&str] = &[
    "clique_split",
    "fabric_not_ready",
    "fabric_unhealthy",
    "fabric_degraded_bandwidth",
];

/// What each GPU of fault-fabric must show (the table at the top of
/// `crates/sim/scenarios/fault-fabric.toml`).
const EXPECT_FABRIC: &[Expect] = &[
    Expect {
        gpu: 0,
        sequence: &[HEALTHY, ("degraded", "drain_p2p", "clique_split"), HEALTHY],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 1,
        sequence: &[
            HEALTHY,
            ("unhealthy", "drain_p2p", "fabric_not_ready"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 2,
        sequence: &[
            HEALTHY,
            ("unhealthy", "drain_p2p", "fabric_unhealthy"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 3,
        sequence: &[
            HEALTHY,
            ("degraded", "check_hardware", "fabric_degraded_bandwidth"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
];

/// Watches a daemon serving fault-health (started at `spawned`) until every GPU went through
/// its sequence, then checks sequences, clearing times and rule coverage. `ready` is how long
/// the daemon took to be ready: the scenario's clock started before that.
fn watch_and_check(d: &Daemon, spawned: Instant, ready: f64, source: &str) {
    let (seen, last_body) = watch(d, spawned, ready, source, EXPECT);
    check_fault_health(&last_body, source);
    // Every rule of the table but the fabric ones was the reason of some GPU's verdict.
    // (The node rule is covered by fewer_gpus_than_expected_is_an_unhealthy_node, the rail rules
    // on fault-rail and by a_gpu_whose_rail_port_is_down_is_degraded_until_it_is_up, the NCCL
    // node rule by probe_worker_nccl.rs.)
    check_coverage(&seen, source, |r| {
        !FABRIC_RULES.contains(&r)
            && !RAIL_RULES.contains(&r)
            && !["gpu_count_below_expected", "nccl_bus_bandwidth_low"].contains(&r)
    });
}

/// The rules `fault-rail` covers.
const RAIL_RULES: &[&str] = &["rail_port_down", "rail_port_slow"];

/// What each GPU of fault-rail must show (the table at the top of
/// `crates/sim/scenarios/fault-rail.toml`).
const EXPECT_RAIL: &[Expect] = &[
    Expect {
        gpu: 0,
        sequence: &[HEALTHY],
        transient: &[],
        ends_at: 0.0,
        clears: Clears::Never,
    },
    Expect {
        gpu: 1,
        sequence: &[
            HEALTHY,
            ("degraded", "check_hardware", "rail_port_down"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 2,
        sequence: &[
            HEALTHY,
            ("degraded", "check_hardware", "rail_port_slow"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 3,
        sequence: &[HEALTHY],
        transient: &[],
        ends_at: 0.0,
        clears: Clears::Never,
    },
];

/// Watches a daemon serving fault-fabric: each fabric rule holds and clears with its fault.
fn watch_and_check_fabric(d: &Daemon, spawned: Instant, ready: f64, source: &str) {
    let (seen, body) = watch(d, spawned, ready, source, EXPECT_FABRIC);
    check_coverage(&seen, source, |r| FABRIC_RULES.contains(&r));
    // The tray's four GPUs are in one clique; the fabric state is served by default detail
    // too, here at full detail with every health flag.
    assert_eq!(
        series(&body, "dgx_pixels_gpu_fabric_info").len(),
        4,
        "{source}"
    );
    assert!(series(&body, "dgx_pixels_gpu_fabric_info")
        .iter()
        .all(|l| l.contains("clique_id=\"32766\"")));
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_fabric_state_info",
            &[("gpu", "1"), ("state", "completed"), ("status", "success")]
        ),
        Some(1.0),
        "{source}"
    );
    assert_eq!(
        series(&body, "dgx_pixels_gpu_fabric_health").len(),
        4 * 5,
        "{source}"
    );
}

/// Watches until every GPU of `expect` went through its sequence and checks the sequences and
/// clearing times; returns what each GPU showed and the last body served.
fn watch(
    d: &Daemon,
    spawned: Instant,
    ready: f64,
    source: &str,
    expect: &[Expect],
) -> (Vec<Seen>, String) {
    let deadline = Duration::from_secs(60);
    let mut seen: Vec<Seen> = (0..expect.len()).map(|_| Seen::default()).collect();
    let mut last_body;
    loop {
        last_body = text(d.port);
        let at = spawned.elapsed().as_secs_f64();
        for e in expect {
            if let Some(v) = verdict(&last_body, e.gpu) {
                seen[e.gpu].record(v, at);
            }
        }
        let complete = expect
            .iter()
            .all(|e| seen[e.gpu].filtered(e).len() >= e.sequence.len());
        // Past the last fault's end too, so a verdict that should hold can be seen to hold.
        if (complete && at > 14.0) || spawned.elapsed() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let report = |e: &Expect| format!("{source} GPU {}: saw {:?}", e.gpu, seen[e.gpu].changes);

    for e in expect {
        let got = seen[e.gpu].filtered(e);
        let verdicts: Vec<&Owned> = got.iter().map(|(v, _)| v).collect();
        let want: Vec<Owned> = e.sequence.iter().copied().map(owned).collect();
        assert_eq!(verdicts, want.iter().collect::<Vec<_>>(), "{}", report(e));
        if e.sequence.len() < 2 {
            continue;
        }
        // The fault shows no earlier than it starts (3 s into the scenario, whose clock
        // started after the spawn).
        let (_, faulty_at) = got[1];
        assert!(faulty_at >= 3.0, "{} at {faulty_at:.1} s", report(e));
        match e.clears {
            Clears::Never => {}
            Clears::Promptly => {
                let (_, cleared_at) = got[2];
                // Not before the reading clears, and without waiting for a quiet period.
                assert!(cleared_at >= e.ends_at, "{}", report(e));
                assert!(
                    cleared_at < e.ends_at + ready + 3.0,
                    "{} (cleared at {cleared_at:.1} s)",
                    report(e)
                );
                assert!(cleared_at < e.ends_at + CLEAR_AFTER, "{}", report(e));
            }
            Clears::AfterQuietPeriod => {
                let (_, cleared_at) = got[2];
                // The condition was last seen by a poll no earlier than 0.3 s before it ended.
                assert!(
                    cleared_at >= e.ends_at - 0.3 + CLEAR_AFTER,
                    "{} (cleared at {cleared_at:.1} s, too early)",
                    report(e)
                );
                assert!(
                    cleared_at < e.ends_at + CLEAR_AFTER + ready + 3.0,
                    "{} (cleared at {cleared_at:.1} s, too late)",
                    report(e)
                );
            }
        }
    }

    (seen, last_body)
}

/// What fault-health leaves after its resets and link faults.
fn check_fault_health(last_body: &str, source: &str) {
    let last_body = last_body.to_string();
    // After the resets at 12 s: GPU 10's remap failure outlasted the reset that set its ECC
    // counter back; GPU 13's page stays retired, no longer pending.
    let uncorrected_volatile = |gpu: &str| {
        value(
            &last_body,
            "dgx_pixels_gpu_ecc_errors_total",
            &[
                ("gpu", gpu),
                ("error_type", "uncorrected"),
                ("counter", "volatile"),
            ],
        )
    };
    assert_eq!(uncorrected_volatile("10"), Some(0.0), "{source}");
    assert_eq!(
        value(
            &last_body,
            "dgx_pixels_gpu_remapped_rows_failure",
            &[("gpu", "10")]
        ),
        Some(1.0),
        "{source}"
    );
    assert_eq!(uncorrected_volatile("13"), Some(0.0), "{source}");
    assert_eq!(
        value(
            &last_body,
            "dgx_pixels_gpu_retired_pages",
            &[("gpu", "13"), ("cause", "double_bit_ecc")]
        ),
        Some(1.0),
        "{source}"
    );
    assert_eq!(
        value(
            &last_body,
            "dgx_pixels_gpu_retired_pages_pending",
            &[("gpu", "13")]
        ),
        Some(0.0),
        "{source}"
    );
    // The maximum link is served beside the current one, which is back at it.
    assert_eq!(
        value(
            &last_body,
            "dgx_pixels_pcie_link_max_width",
            &[("gpu", "5")]
        ),
        Some(16.0),
        "{source}"
    );
    assert_eq!(
        value(&last_body, "dgx_pixels_pcie_link_width", &[("gpu", "5")]),
        Some(16.0),
        "{source}"
    );
}

/// Every rule of the table that `covered` selects was the reason of some GPU's verdict (the
/// XID rule as `xid_<code>`), and no reason was seen that is not such a rule.
fn check_coverage(seen: &[Seen], source: &str, covered: impl Fn(&str) -> bool) {
    let reasons: BTreeSet<String> = seen
        .iter()
        .flat_map(|s| s.changes.iter().map(|((_, _, r), _)| r.clone()))
        .filter(|r| r != "none")
        .map(|r| match r.strip_prefix("xid_") {
            Some(code) if code.parse::<u32>().is_ok() => "xid_<code>".to_string(),
            _ => r,
        })
        .collect();
    let rules: BTreeSet<String> = dgx_pixels_health::RULES
        .iter()
        .filter(|r| covered(r.reason))
        .map(|r| r.reason.to_string())
        .collect();
    let uncovered: Vec<&String> = rules.difference(&reasons).collect();
    assert!(
        uncovered.is_empty(),
        "{source}: rules no GPU of the scenario showed: {uncovered:?}"
    );
    let unknown: Vec<&String> = reasons.difference(&rules).collect();
    assert!(
        unknown.is_empty(),
        "{source}: reasons not in RULES: {unknown:?}"
    );
}

/// A daemon on the fake NVML serving `scenario`, at full detail with the rules' config; also
/// the spawn time and how long it took to be ready.
fn start_on_fake_nvml(scenario: &str, config: &tempfile::NamedTempFile) -> (Daemon, Instant, f64) {
    let spawned = Instant::now();
    let d = start_with_env(
        &[
            "--nvml.library",
            fake_nvml_library(),
            "--config.file",
            config.path().to_str().unwrap(),
            "--metrics.detail",
            "full",
        ],
        &[
            ("FAKE_NVML_SCENARIO", scenario),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    );
    let ready = spawned.elapsed().as_secs_f64();
    (d, spawned, ready)
}

/// A daemon simulating `scenario` (no probes or DCGM), as [`start_on_fake_nvml`].
fn start_simulated(scenario: &str, config: &tempfile::NamedTempFile) -> (Daemon, Instant, f64) {
    let spawned = Instant::now();
    let d = start(&[
        "--simulate",
        scenario,
        "--config.file",
        config.path().to_str().unwrap(),
        "--no-collector.probes",
        "--no-collector.dcgm",
        "--metrics.detail",
        "full",
    ]);
    let ready = spawned.elapsed().as_secs_f64();
    (d, spawned, ready)
}

/// Through the fake NVML: the NVML source's field values, slow readings and XID events.
#[test]
fn every_health_rule_holds_and_clears_through_the_nvml_source() {
    let config = config_file();
    let (d, spawned, ready) = start_on_fake_nvml("fault-health", &config);
    watch_and_check(&d, spawned, ready, "nvml");
}

/// Through the simulated node (`--simulate`), which serves the same readings itself.
#[test]
fn every_health_rule_holds_and_clears_through_the_simulated_source() {
    let config = config_file();
    let (d, spawned, ready) = start_simulated("fault-health", &config);
    watch_and_check(&d, spawned, ready, "sim");
}

/// Issue 32: the NVLink fabric rules through the fake NVML's `nvmlDeviceGetGpuFabricInfoV`
/// and the NVML source's slow readings.
#[test]
fn every_fabric_rule_holds_and_clears_through_the_nvml_source() {
    let config = config_file();
    let (d, spawned, ready) = start_on_fake_nvml("fault-fabric", &config);
    watch_and_check_fabric(&d, spawned, ready, "nvml");
}

/// Issue 32: the fabric rules through the simulated node.
#[test]
fn every_fabric_rule_holds_and_clears_through_the_simulated_source() {
    let config = config_file();
    let (d, spawned, ready) = start_simulated("fault-fabric", &config);
    watch_and_check_fabric(&d, spawned, ready, "sim");
}

/// Issue 32: the rail NIC rules through the simulated node, which serves each GPU's rail
/// as the NVML source serves the NIC it finds in sysfs (the NVML path is covered with a fake
/// sysfs tree by a_gpu_whose_rail_port_is_down_is_degraded_until_it_is_up).
#[test]
fn every_rail_rule_holds_and_clears_through_the_simulated_source() {
    let config = config_file();
    let (d, spawned, ready) = start_simulated("fault-rail", &config);
    let (seen, body) = watch(&d, spawned, ready, "sim", EXPECT_RAIL);
    check_coverage(&seen, "sim", |r| RAIL_RULES.contains(&r));
    // One port per GPU, up at 400 Gb/s again, GPU 1's having gone down once.
    assert_eq!(series(&body, "dgx_pixels_gpu_rail_port_up").len(), 4);
    for gpu in ["0", "1", "2", "3"] {
        let device = format!("mlx5_{gpu}");
        let at = [("gpu", gpu), ("device", device.as_str()), ("port", "1")];
        assert_eq!(value(&body, "dgx_pixels_gpu_rail_port_up", &at), Some(1.0));
        assert_eq!(
            value(&body, "dgx_pixels_gpu_rail_port_rate_bytes_per_second", &at),
            Some(50e9)
        );
    }
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_rail_link_downed_total",
            &[("gpu", "1")]
        ),
        Some(1.0)
    );
}

/// Issue 28, item 17: with NVML's XID events refused (`FAKE_NVML_XID_EVENTS=0`) and the kmsg
/// collector off, every GPU says its XIDs are not observed (`dgx_pixels_gpu_xid_observed` 0,
/// served in the default profile) and is `unknown` with reason `xid_unobserved`, never
/// `healthy`, also in an XID storm (fault-xid-storm: GPU 2 storms XID 13). With the events
/// accepted, no such series is served in the default profile and a quiet GPU is healthy.
#[test]
fn a_gpu_whose_xids_nobody_observes_is_never_healthy() {
    for (scenario, events) in [
        ("fault-xid-storm", "0"),
        ("dgx-h100", "0"),
        ("dgx-h100", "1"),
    ] {
        let d = start_with_env(
            &["--nvml.library", fake_nvml_library()],
            &[
                ("FAKE_NVML_SCENARIO", scenario),
                ("FAKE_NVML_START", "40"),
                ("FAKE_NVML_XID_EVENTS", events),
                ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ],
        );
        let check = |b: &str| {
            (0..4).all(|g| {
                let g = g.to_string();
                let state = |s: &str| {
                    value(
                        b,
                        "dgx_pixels_gpu_health_state",
                        &[("gpu", g.as_str()), ("state", s)],
                    )
                };
                let observed = value(b, "dgx_pixels_gpu_xid_observed", &[("gpu", g.as_str())]);
                if events == "0" {
                    observed == Some(0.0)
                        && state("unknown") == Some(1.0)
                        && value(
                            b,
                            "dgx_pixels_gpu_health_action_info",
                            &[("gpu", g.as_str()), ("reason", "xid_unobserved")],
                        ) == Some(1.0)
                } else {
                    observed.is_none() && state("healthy") == Some(1.0)
                }
            })
        };
        let (body, _) = wait_until(d.port, Duration::from_secs(15), check);
        assert!(
            check(&body),
            "{scenario} events={events}:\n{}",
            body.lines()
                .filter(|l| l.contains("health") || l.contains("xid_observed"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert!(
            series(&body, "dgx_pixels_gpu_health_state")
                .iter()
                .all(|l| !l.contains("state=\"healthy\"") || events == "1"),
            "{scenario}: no GPU is healthy while its XIDs are unseen"
        );
    }
}

/// Issue 32, item 2: with `[health] expected_gpus` set, a node that shows fewer GPUs is
/// unhealthy at node level (`gpu_count_below_expected`, action reboot), through the config
/// file, the health collector and the default profile; with as many it is healthy. Without the
/// setting no node series is served.
#[test]
fn fewer_gpus_than_expected_is_an_unhealthy_node() {
    let node = |b: &str, state: &str, action: &str, reason: &str| {
        value(
            b,
            "dgx_pixels_node_health_action_info",
            &[("state", state), ("action", action), ("reason", reason)],
        ) == Some(1.0)
    };
    for (expected, unhealthy) in [(9, true), (8, false)] {
        let mut config = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        write!(config, "[health]\nexpected_gpus = {expected}\n").unwrap();
        let d = start(&[
            "--simulate",
            "dgx-h100",
            "--config.file",
            config.path().to_str().unwrap(),
            "--no-collector.probes",
        ]);
        let check = |b: &str| {
            value(b, "dgx_pixels_node_gpus_visible", &[]) == Some(8.0)
                && if unhealthy {
                    node(b, "unhealthy", "reboot", "gpu_count_below_expected")
                } else {
                    node(b, "healthy", "none", "none")
                }
        };
        let (body, _) = wait_until(d.port, Duration::from_secs(15), check);
        assert!(check(&body), "expected_gpus = {expected}: {body}");
        assert_eq!(
            value(&body, "dgx_pixels_node_gpus_expected", &[]),
            Some(f64::from(expected))
        );
        assert_eq!(series(&body, "dgx_pixels_node_health_action_info").len(), 1);
    }
    let d = start(&["--simulate", "dgx-h100", "--no-collector.probes"]);
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        !series(b, "dgx_pixels_gpu_health_state").is_empty()
    });
    assert!(series(&body, "dgx_pixels_node_health_action_info").is_empty());
}

/// Issue 32, slice 2, item 3: `expected_gpus = "discover"` keeps the GPUs visible at the first
/// start in `[health] state_directory`, so the next start of the real binary, on a node that
/// lost GPUs meanwhile (dgx-h100's 8, then fault-rail's 4), expects the 8 and is unhealthy; a
/// broken state file serves no node verdict and is left as it was.
#[test]
fn a_discovered_gpu_count_is_kept_across_a_restart() {
    let state = tempfile::tempdir().unwrap();
    let mut config = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    write!(
        config,
        "[health]\nexpected_gpus = \"discover\"\nstate_directory = {:?}\n",
        state.path().to_str().unwrap()
    )
    .unwrap();
    let run = |scenario: &str| {
        start(&[
            "--simulate",
            scenario,
            "--config.file",
            config.path().to_str().unwrap(),
            "--no-collector.probes",
        ])
    };
    let node_is = |b: &str, state: &str, reason: &str| {
        value(
            b,
            "dgx_pixels_node_health_action_info",
            &[("state", state), ("reason", reason)],
        ) == Some(1.0)
    };
    let file = state.path().join("expected-gpus");
    {
        let d = run("dgx-h100");
        let check = |b: &str| {
            value(b, "dgx_pixels_node_gpus_expected", &[]) == Some(8.0)
                && node_is(b, "healthy", "none")
        };
        let (body, _) = wait_until(d.port, Duration::from_secs(15), check);
        assert!(check(&body), "{body}");
    }
    let kept = std::fs::read_to_string(&file).unwrap();
    assert!(kept.contains("\ngpus 8\n"), "{kept}");
    // Restarted on a node with 4 of them.
    {
        let d = run("fault-rail");
        let check = |b: &str| {
            value(b, "dgx_pixels_node_gpus_visible", &[]) == Some(4.0)
                && node_is(b, "unhealthy", "gpu_count_below_expected")
        };
        let (body, _) = wait_until(d.port, Duration::from_secs(15), check);
        assert!(check(&body), "{body}");
        assert_eq!(
            value(&body, "dgx_pixels_node_gpus_expected", &[]),
            Some(8.0)
        );
    }
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        kept,
        "fewer never lower it"
    );
    // A file this exporter did not write: an unknown node verdict, the GPUs still judged, the
    // file kept.
    std::fs::write(&file, "gpus many\n").unwrap();
    let d = run("dgx-h100");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        series(b, "dgx_pixels_gpu_health_state").len() == 8
    });
    assert_eq!(series(&body, "dgx_pixels_gpu_health_state").len(), 8);
    // Its node verdict is unknown, never healthy: the count cannot be established.
    let node = series(&body, "dgx_pixels_node_health_action_info");
    assert_eq!(node.len(), 1, "{node:?}");
    assert!(
        node[0].contains(r#"state="unknown""#) && node[0].contains("expected_gpus_unknown"),
        "{node:?}"
    );
    let logs = stop_and_logs(d);
    assert!(
        logs.contains("the expected GPU count cannot be read") && logs.contains("expected-gpus"),
        "{logs}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "gpus many\n");
}

/// A fake sysfs tree under `root` that puts mlx5_0 beside GPU 0 (port 1 in `first`: state,
/// physical state) and mlx5_1, active, beside GPU 1; GPUs 2-7 have no NIC under their root
/// complex.
fn two_rails(root: &std::path::Path, first: (&str, &str)) {
    use dgx_pixels_nvml::rail::fake;
    fake::gpu(root, "17", "01", "0000:18:00.0");
    fake::nic(root, "mlx5_0", "17", "01", "0000:19:00.0", first.0, first.1);
    fake::gpu(root, "29", "01", "0000:2a:00.0");
    fake::nic(
        root,
        "mlx5_1",
        "29",
        "01",
        "0000:2b:00.0",
        "4: ACTIVE",
        "5: LinkUp",
    );
}

/// The fake NVML's dgx-h100 at full detail, reading the fake sysfs tree at `root`, with
/// `extra` appended to the config; the config file lives as long as the second value.
fn start_on_sysfs(
    root: &std::path::Path,
    extra: &str,
) -> (common::Daemon, tempfile::NamedTempFile) {
    let mut config = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    let text = CONFIG.replace(
        "[nvml]\n",
        &format!("[nvml]\nsysfs = {:?}\n", root.to_str().unwrap()),
    ) + extra;
    config.write_all(text.as_bytes()).unwrap();
    let d = start_with_env(
        &[
            "--nvml.library",
            fake_nvml_library(),
            "--config.file",
            config.path().to_str().unwrap(),
            "--metrics.detail",
            "full",
        ],
        &[
            ("FAKE_NVML_SCENARIO", "dgx-h100"),
            ("FAKE_NVML_TIME", "100"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    );
    (d, config)
}

/// Issue 32, item 3: a GPU whose rail NIC port is down is degraded (`rail_port_down`) while
/// it is down, through the real binary: the fake NVML's dgx-h100 GPUs and a fake sysfs tree
/// (`[nvml] sysfs`) that puts mlx5_0 beside GPU 0 and mlx5_1 beside GPU 1 (GPUs 2-7 have no
/// NIC under their root complex: no rail, healthy).
#[test]
fn a_gpu_whose_rail_port_is_down_is_degraded_until_it_is_up() {
    use dgx_pixels_nvml::rail::fake;
    let sysfs = tempfile::tempdir().unwrap();
    let root = sysfs.path();
    two_rails(root, ("1: DOWN", "3: Disabled"));
    let (d, _config) = start_on_sysfs(root, "");
    let gpu_is = |b: &str, gpu: usize, want: Verdict| verdict(b, gpu) == Some(owned(want));
    let degraded = ("degraded", "check_hardware", "rail_port_down");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        gpu_is(b, 0, degraded) && gpu_is(b, 1, HEALTHY)
    });
    assert!(gpu_is(&body, 0, degraded), "{body}");
    assert!(gpu_is(&body, 1, HEALTHY), "{body}");
    let up = |gpu: &str, device: &str| {
        value(
            &body,
            "dgx_pixels_gpu_rail_port_up",
            &[("gpu", gpu), ("device", device), ("port", "1")],
        )
    };
    assert_eq!(up("0", "mlx5_0"), Some(0.0));
    assert_eq!(up("1", "mlx5_1"), Some(1.0));
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_rail_port_rate_bytes_per_second",
            &[("gpu", "1")]
        ),
        Some(50e9)
    );
    assert!(series(&body, "dgx_pixels_gpu_rail_port_up")
        .iter()
        .all(|l| l.contains("gpu=\"0\"") || l.contains("gpu=\"1\"")));
    // The port comes back: the verdict clears at the next slow reading.
    fake::set_port(root, "mlx5_0", "4: ACTIVE", "5: LinkUp");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| gpu_is(b, 0, HEALTHY));
    assert!(gpu_is(&body, 0, HEALTHY), "{body}");
    // mlx5_1 retrains at 200 Gb/s beside mlx5_0's 400: GPU 1 is slow, GPU 0 not.
    fake::set_rate(root, "mlx5_1", "200 Gb/sec (4X HDR)");
    let slow = ("degraded", "check_hardware", "rail_port_slow");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| gpu_is(b, 1, slow));
    assert!(gpu_is(&body, 1, slow), "{body}");
    assert!(gpu_is(&body, 0, HEALTHY), "{body}");
    fake::set_rate(root, "mlx5_1", "400 Gb/sec (4X NDR)");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| gpu_is(b, 1, HEALTHY));
    assert!(gpu_is(&body, 1, HEALTHY), "{body}");
}

/// Issue 43, item 2: two GPUs and two NICs behind one PCIe switch (DGX A100's layout): GPU 1's
/// rail is the second NIC, so mlx5_1 going down degrades GPU 1, not GPU 0 (before, both GPUs
/// got mlx5_0 and mlx5_1 belonged to none: nothing fired). Then `[nvml.rails]` pins GPU 0 to
/// mlx5_1, and a pin that is no PCI address is refused naming the file and the key.
#[test]
fn the_second_nic_of_a_shared_switch_reaches_the_second_gpu() {
    use dgx_pixels_nvml::rail::fake;
    let sysfs = tempfile::tempdir().unwrap();
    let root = sysfs.path();
    // The fake NVML's dgx-h100 GPUs 0 and 1 are at 18:00.0 and 2a:00.0.
    fake::dgx_a100_switch(
        root,
        "10",
        ["0000:18:00.0", "0000:2a:00.0"],
        [("mlx5_0", "0000:1c:00.0"), ("mlx5_1", "0000:2d:00.0")],
    );
    fake::set_port(root, "mlx5_1", "1: DOWN", "3: Disabled");
    let run = |extra: &str| start_on_sysfs(root, extra);
    let gpu_is = |b: &str, gpu: usize, want: Verdict| verdict(b, gpu) == Some(owned(want));
    let degraded = ("degraded", "check_hardware", "rail_port_down");
    let up = |body: &str, gpu: &str, device: &str| {
        value(
            body,
            "dgx_pixels_gpu_rail_port_up",
            &[("gpu", gpu), ("device", device), ("port", "1")],
        )
    };
    let (d, _config) = run("");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        gpu_is(b, 1, degraded) && gpu_is(b, 0, HEALTHY)
    });
    assert!(gpu_is(&body, 1, degraded), "{body}");
    assert!(gpu_is(&body, 0, HEALTHY), "{body}");
    assert_eq!(up(&body, "0", "mlx5_0"), Some(1.0));
    assert_eq!(up(&body, "1", "mlx5_1"), Some(0.0));
    assert_eq!(series(&body, "dgx_pixels_gpu_rail_port_up").len(), 2);
    drop(d);
    // Pinned: GPU 0 to the down NIC, GPU 1 to the other.
    let pins = "[nvml.rails]\n\"0000:18:00.0\" = \"mlx5_1\"\n\"00000000:2A:00.0\" = \"mlx5_0\"\n";
    let (d, _config) = run(pins);
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        gpu_is(b, 0, degraded) && gpu_is(b, 1, HEALTHY)
    });
    assert!(gpu_is(&body, 0, degraded), "{body}");
    assert!(gpu_is(&body, 1, HEALTHY), "{body}");
    assert_eq!(up(&body, "0", "mlx5_1"), Some(0.0));
    assert_eq!(up(&body, "1", "mlx5_0"), Some(1.0));
    drop(d);
    // A pin that is no PCI address: refused at start, naming the file and the key.
    let mut bad = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    bad.write_all(b"[nvml.rails]\ngpu0 = \"mlx5_0\"\n").unwrap();
    let out = std::process::Command::new(BIN)
        .args([
            "--config.file",
            bad.path().to_str().unwrap(),
            "--web.listen-address",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&bad.path().display().to_string())
            && err.contains("nvml.rails.\"gpu0\": is no PCI address"),
        "{err}"
    );
}

/// Issue 42, item 2: a FIFO in a rail NIC's sysfs tree (every GPU's poll thread opened every
/// NIC's files blocking: all 8 GPUs went `gpu_up 0`, unhealthy, reboot) costs nothing now:
/// every GPU stays up and healthy, and the NIC's other files and the other NIC are still read.
#[test]
fn a_fifo_in_a_rail_nic_tree_stalls_no_gpu() {
    let sysfs = tempfile::tempdir().unwrap();
    let root = sysfs.path();
    two_rails(root, ("4: ACTIVE", "5: LinkUp"));
    let counter = root.join("class/infiniband/mlx5_0/ports/1/counters/link_downed");
    std::fs::remove_file(&counter).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(&counter)
        .status()
        .unwrap()
        .success());
    let (d, _config) = start_on_sysfs(root, "");
    let all_healthy =
        |b: &str| (0..8).all(|g| verdict(b, g) == Some(owned(HEALTHY))) && b.contains("mlx5_1");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), all_healthy);
    assert!(all_healthy(&body), "{body}");
    for gpu in 0..8 {
        let g = gpu.to_string();
        assert_eq!(
            value(&body, "dgx_pixels_gpu_up", &[("gpu", &g)]),
            Some(1.0),
            "{body}"
        );
    }
    let port = |gpu: &str, name: &str| value(&body, name, &[("gpu", gpu), ("port", "1")]);
    assert_eq!(port("0", "dgx_pixels_gpu_rail_port_up"), Some(1.0));
    assert_eq!(
        port("0", "dgx_pixels_gpu_rail_port_rate_bytes_per_second"),
        Some(50e9)
    );
    assert_eq!(port("1", "dgx_pixels_gpu_rail_port_up"), Some(1.0));
    // The stuck counter is left out, not served as 0.
    assert!(!series(&body, "dgx_pixels_gpu_rail_link_downed_total")
        .iter()
        .any(|l| l.contains("mlx5_0")));
}

/// Issue 32: on Blackwell the NVLink 5 counters feed `nvlink_errors`. dgx-b200 with GPU 2
/// counting `recovery_failed` errors from 3 s and GPU 3 counting `symbol` errors (which forward
/// error correction fixes on every healthy NVLink 5 link) all along: GPU 2 turns degraded with
/// check_hardware, GPU 3's symbol errors are served and it stays healthy. Through the fake NVML
/// (the field-values call per link) and `--simulate`.
#[test]
fn nvlink5_recovery_failures_degrade_a_blackwell_gpu_and_symbol_errors_do_not() {
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sim/scenarios/dgx-b200.toml"
    ))
    .unwrap();
    let mut scenario = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    write!(
        scenario,
        "{base}\n[[faults]]\nkind = \"nvlink_errors\"\ngpu = 2\nlink = 5\n\
         error_type = \"recovery_failed\"\nerrors = 1\nat_s = 3\n\n\
         [[faults]]\nkind = \"nvlink_errors\"\ngpu = 3\nlink = 0\nerror_type = \"symbol\"\n\
         errors = 40\nat_s = 1\nrepeat_every_s = 1\ncount = 60\n"
    )
    .unwrap();
    let path = scenario.path().to_str().unwrap();
    let config = config_file();
    let degraded = owned(("degraded", "check_hardware", "nvlink_errors"));
    for (d, source) in [
        start_on_fake_nvml(path, &config).0,
        start_simulated(path, &config).0,
    ]
    .into_iter()
    .zip(["nvml", "sim"])
    {
        let (body, took) = wait_until(d.port, Duration::from_secs(30), |b| {
            verdict(b, 2).as_ref() == Some(&degraded)
        });
        assert_eq!(
            verdict(&body, 2),
            Some(degraded.clone()),
            "{source} after {took:?}"
        );
        let symbol = value(
            &body,
            "dgx_pixels_nvlink_errors_total",
            &[("gpu", "3"), ("error_type", "symbol")],
        );
        assert!(symbol.is_some_and(|v| v > 0.0), "{source}: {symbol:?}");
        assert_eq!(verdict(&body, 3), Some(owned(HEALTHY)), "{source}");
        drop(d);
    }
}
