//! NVLink: the fabric rules on `fault-fabric`, and Blackwell's NVLink 5 error counters.

use crate::common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::*;

use super::{
    check_coverage, check_through, config_file, owned, start_on_fake_nvml, start_simulated,
    verdict, watch, Clears, Expect, Source, FABRIC_RULES, HEALTHY,
};

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

/// Issue 32: the NVLink fabric rules through the fake NVML's `nvmlDeviceGetGpuFabricInfoV`
/// and the NVML source's slow readings.
#[test]
fn every_fabric_rule_holds_and_clears_through_the_nvml_source() {
    check_through("fault-fabric", Source::FakeNvml, watch_and_check_fabric);
}

/// Issue 32: the fabric rules through the simulated node.
#[test]
fn every_fabric_rule_holds_and_clears_through_the_simulated_source() {
    check_through("fault-fabric", Source::Simulated, watch_and_check_fabric);
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
