//! Every rule of `fault-health` holds and clears, through the NVML and the simulated source.

use crate::common;

use std::time::Instant;

use common::*;

use super::{
    check_coverage, check_through, watch, Clears, Expect, Source, FABRIC_RULES, HEALTHY, RAIL_RULES,
};

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

/// Through the fake NVML: the NVML source's field values, slow readings and XID events.
#[test]
fn every_health_rule_holds_and_clears_through_the_nvml_source() {
    check_through("fault-health", Source::FakeNvml, watch_and_check);
}

/// Through the simulated node (`--simulate`), which serves the same readings itself.
#[test]
fn every_health_rule_holds_and_clears_through_the_simulated_source() {
    check_through("fault-health", Source::Simulated, watch_and_check);
}
