use super::*;
use crate::labels::{ThrottleReason, ViolationPolicy};

fn id() -> GpuIdentity {
    GpuIdentity {
        index: 2,
        uuid: "GPU-x".into(),
        model: "NVIDIA H100 80GB HBM3".into(),
        minor_number: 2,
        ..Default::default()
    }
}

fn find(out: &[Sample], metric: Metric) -> Vec<&Sample> {
    out.iter().filter(|s| s.metric == metric).collect()
}

#[test]
fn readings_map_to_labelled_series_and_absent_readings_are_omitted() {
    let r = GpuReadout {
        up: true,
        power_watts: Some(412.0),
        temperature_gpu_celsius: Some(61.0),
        clocks: ClockReadout {
            sm: Some(1.98e9),
            ..Default::default()
        },
        throttle_reasons: vec![
            (ThrottleReason::SwPowerCap, true),
            (ThrottleReason::GpuIdle, false),
        ],
        xid_counts: [(13, 2)].into(),
        ecc: Some(EccTotals {
            aggregate_uncorrected: 1.0,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut out = Vec::new();
    push_gpu_samples(&id(), &r, &mut out);
    assert!(out.iter().all(Sample::is_well_formed));
    let info = find(&out, Metric::GpuInfo);
    assert_eq!(info[0].label_values()[2], "NVIDIA H100 80GB HBM3");
    assert_eq!(info[0].label_values()[9], "nvidia2");
    assert_eq!(find(&out, Metric::GpuUp)[0].value, 1.0);
    assert_eq!(
        find(&out, Metric::GpuPower)[0].label_values(),
        ["2", "GPU-x"]
    );
    assert_eq!(find(&out, Metric::GpuPower)[0].value, 412.0);
    assert_eq!(
        find(&out, Metric::GpuTemperature).len(),
        1,
        "memory sensor absent"
    );
    assert_eq!(find(&out, Metric::GpuClock)[0].label_values()[2], "sm");
    assert!(
        find(&out, Metric::GpuMemoryUsed).is_empty(),
        "no reading, no series"
    );
    let reasons = find(&out, Metric::GpuThrottleReason);
    assert_eq!(
        (reasons[0].label_values()[2], reasons[0].value),
        ("sw_power_cap", 1.0)
    );
    assert_eq!(
        (reasons[1].label_values()[2], reasons[1].value),
        ("gpu_idle", 0.0)
    );
    let xid = find(&out, Metric::GpuXidErrors);
    assert_eq!((xid[0].label_values()[2], xid[0].value), ("13", 2.0));
    // The catalog's name and action for the code, beside (not on) the counter.
    let info = find(&out, Metric::GpuXidInfo);
    assert_eq!(
        info[0].label_values()[2..],
        [
            "13",
            "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
            "restart_app"
        ]
    );
    assert_eq!(find(&out, Metric::GpuEccErrors).len(), 4);
}

#[test]
fn the_drivers_gpu_total_is_served_where_it_answers_one() {
    // Blackwell with a driver that answers the NVLink 5 counters for the GPU as a whole
    // (aggregate scope) and not per link: the totals are served, no link is named.
    let link = |link| NvlinkReadout {
        link,
        up: true,
        errors: NvlinkErrors {
            symbol: Some(1.0),
            ..Default::default()
        },
    };
    let r = GpuReadout {
        up: true,
        nvlinks: vec![link(0), link(1)],
        nvlink_errors: NvlinkErrors {
            receive: Some(7.0),
            symbol: Some(40.0),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut out = Vec::new();
    push_gpu_samples(&id(), &r, &mut out);
    let totals: Vec<(&str, f64)> = find(&out, Metric::NvlinkErrors)
        .iter()
        .map(|s| (s.label_values()[2], s.value))
        .collect();
    // The driver's 40 symbol errors, not the links' 2; receive with no link reading it.
    assert_eq!(totals, [("receive", 7.0), ("symbol", 40.0)]);
    assert_eq!(find(&out, Metric::NvlinkLinkErrors).len(), 2);
}

#[test]
fn device_health_series_carry_their_labels() {
    let r = GpuReadout {
        up: true,
        ecc_enabled: Some(true),
        remapped_rows: Some(RemappedRowsReadout {
            uncorrectable: 2.0,
            pending: true,
            ..Default::default()
        }),
        throttle_violations: vec![(ViolationPolicy::Power, 12.5)],
        nvlinks: vec![
            NvlinkReadout {
                link: 3,
                up: true,
                errors: NvlinkErrors {
                    replay: Some(4.0),
                    recovery: Some(0.0),
                    ..Default::default()
                },
            },
            NvlinkReadout {
                link: 4,
                up: false,
                errors: NvlinkErrors {
                    replay: Some(1.0),
                    recovery: Some(0.0),
                    ..Default::default()
                },
            },
            NvlinkReadout {
                link: 5,
                up: true,
                errors: NvlinkErrors {
                    replay: Some(0.0),
                    recovery: Some(0.0),
                    ..Default::default()
                },
            },
        ],
        process_count: Some(2),
        processes: vec![ProcessReadout {
            pid: 42,
            container_id: "abc".into(),
            pod_uid: "0b7f1c52-aaaa-bbbb-cccc-0123456789ab".into(),
            gpu_instance: Some(1),
            compute_instance: Some(0),
            used_memory_bytes: 1e9,
            utilization: None,
        }],
        ..Default::default()
    };
    let mut out = Vec::new();
    push_gpu_samples(&id(), &r, &mut out);
    assert!(out.iter().all(Sample::is_well_formed));
    assert_eq!(find(&out, Metric::GpuEccEnabled)[0].value, 1.0);
    let rows = find(&out, Metric::GpuRemappedRows);
    assert_eq!(
        (rows[1].label_values()[2], rows[1].value),
        ("uncorrectable", 2.0)
    );
    assert_eq!(find(&out, Metric::GpuRemappedRowsPending)[0].value, 1.0);
    assert_eq!(find(&out, Metric::GpuRemappedRowsFailure)[0].value, 0.0);
    assert!(
        find(&out, Metric::GpuRetiredPages).is_empty(),
        "not reported, not exported"
    );
    assert_eq!(
        find(&out, Metric::GpuThrottleViolation)[0].label_values()[2],
        "power"
    );
    // Per GPU: links, links up, errors per type the links read (summed).
    assert_eq!(find(&out, Metric::NvlinkLinks)[0].value, 3.0);
    assert_eq!(find(&out, Metric::NvlinkLinksUp)[0].value, 2.0);
    let totals: Vec<(&str, f64)> = find(&out, Metric::NvlinkErrors)
        .iter()
        .map(|s| (s.label_values()[2], s.value))
        .collect();
    assert_eq!(totals, [("replay", 5.0), ("recovery", 0.0)]);
    // Per link only what is wrong: the link that is down, the counts that are not 0.
    let down: Vec<&str> = find(&out, Metric::NvlinkLinkDown)
        .iter()
        .map(|s| s.label_values()[2])
        .collect();
    assert_eq!(down, ["4"]);
    let errors: Vec<Vec<&str>> = find(&out, Metric::NvlinkLinkErrors)
        .iter()
        .map(|s| s.label_values()[2..].to_vec())
        .collect();
    assert_eq!(errors, [["3", "replay"], ["4", "replay"]]);
    assert_eq!(find(&out, Metric::GpuProcesses)[0].value, 2.0);
    let p = find(&out, Metric::ProcessMemoryUsed);
    assert_eq!(
        p[0].label_values()[2..],
        [
            "1",
            "0",
            "42",
            "abc",
            "0b7f1c52-aaaa-bbbb-cccc-0123456789ab"
        ]
    );
}

/// The maximum link beside the current one (the health rules compare them); a maximum
/// the driver does not report is left out, never 0.
#[test]
fn the_maximum_pcie_link_is_served_beside_the_current_one() {
    let r = GpuReadout {
        up: true,
        pcie_link_generation: Some(4.0),
        pcie_link_width: Some(8.0),
        pcie_link_max_generation: Some(5.0),
        pcie_link_max_width: Some(16.0),
        ..Default::default()
    };
    let mut out = Vec::new();
    push_gpu_samples(&id(), &r, &mut out);
    let one = |m: Metric| find(&out, m).iter().map(|s| s.value).collect::<Vec<_>>();
    assert_eq!(one(Metric::PcieLinkGeneration), [4.0]);
    assert_eq!(one(Metric::PcieLinkMaxGeneration), [5.0]);
    assert_eq!(one(Metric::PcieLinkWidth), [8.0]);
    assert_eq!(one(Metric::PcieLinkMaxWidth), [16.0]);
    let r = GpuReadout {
        pcie_link_max_width: None,
        ..r
    };
    let mut out = Vec::new();
    push_gpu_samples(&id(), &r, &mut out);
    assert!(find(&out, Metric::PcieLinkMaxWidth).is_empty());
}

/// Review of issue 16: a process NVML places in a GPU instance without naming its compute
/// instance keeps the GPU instance (its key, and so the pod holding that instance).
#[test]
fn incidents_are_served_beside_the_counter() {
    let r = GpuReadout {
        up: true,
        xid_counts: [(48, 7)].into(),
        xid_incidents: [(48, 2)].into(),
        ..Default::default()
    };
    let mut out = Vec::new();
    push_gpu_samples(&id(), &r, &mut out);
    let incidents = find(&out, Metric::GpuXidIncidents);
    assert_eq!(
        (incidents[0].label("xid"), incidents[0].value),
        (Some("48"), 2.0)
    );
    assert_eq!(find(&out, Metric::GpuXidErrors)[0].value, 7.0);
}

#[test]
fn an_xid_the_catalog_lacks_has_an_unknown_action() {
    let r = GpuReadout {
        up: true,
        xid_counts: [(9999, 1)].into(),
        ..Default::default()
    };
    let mut out = Vec::new();
    push_gpu_samples(&id(), &r, &mut out);
    let info = find(&out, Metric::GpuXidInfo);
    assert_eq!(info[0].label_values()[2..], ["9999", "", "unknown"]);
}

#[test]
fn a_process_with_only_a_gpu_instance_keeps_it() {
    let r = GpuReadout {
        up: true,
        processes: vec![ProcessReadout {
            pid: 7,
            gpu_instance: Some(3),
            compute_instance: None,
            used_memory_bytes: 1.0,
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut out = Vec::new();
    push_gpu_samples(&id(), &r, &mut out);
    let p = find(&out, Metric::ProcessMemoryUsed);
    assert_eq!(p[0].label_values()[2..5], ["3", "", "7"]);
    let mig = p[0].device.as_ref().and_then(|d| d.mig());
    assert_eq!(mig.map(|m| m.gpu_instance), Some(3));
}

/// The values the help text of `metric` lists in parentheses after `after`, without their
/// explanations: `sensor (gpu: the die, memory: HBM)` lists gpu and memory.
fn listed(metric: Metric, after: &str) -> Vec<&'static str> {
    let help = metric.def().help;
    let from = help
        .find(&format!("{after} ("))
        .unwrap_or_else(|| panic!("{help:?} lists no {after}"))
        + after.len()
        + 2;
    let list = &help[from..from + help[from..].find(')').unwrap()];
    list.split(", ")
        .map(|v| v.split(':').next().unwrap())
        .collect()
}

#[test]
fn label_values_are_those_the_catalog_help_names() {
    use crate::labels::*;
    assert_eq!(
        listed(Metric::GpuClock, "clock domain"),
        ClockDomain::ALL.map(ClockDomain::as_str)
    );
    assert_eq!(
        listed(Metric::GpuTemperature, "sensor"),
        TemperatureSensor::ALL.map(TemperatureSensor::as_str)
    );
    assert_eq!(
        listed(Metric::GpuEccErrors, "type"),
        EccErrorType::ALL.map(EccErrorType::as_str)
    );
    assert_eq!(
        listed(Metric::GpuEccErrors, "counter"),
        EccCounter::ALL.map(EccCounter::as_str)
    );
    assert_eq!(
        listed(Metric::GpuThrottleReason, "reports"),
        ThrottleReason::ALL.map(ThrottleReason::as_str)
    );
    assert_eq!(
        listed(Metric::GpuThrottleViolation, "policy"),
        ViolationPolicy::ALL.map(ViolationPolicy::as_str)
    );
    assert_eq!(
        listed(Metric::GpuFabricState, "state"),
        FabricState::ALL.map(FabricState::as_str)
    );
    assert_eq!(
        listed(Metric::GpuFabricHealth, "reports"),
        FabricHealthFlag::ALL.map(FabricHealthFlag::as_str)
    );
    assert_eq!(
        listed(Metric::GpuRetiredPages, "cause"),
        RetiredPageCause::ALL.map(RetiredPageCause::as_str)
    );
    assert_eq!(
        listed(Metric::GpuRemappedRows, "cause"),
        RemappedRowCause::ALL.map(RemappedRowCause::as_str)
    );
    assert_eq!(
        listed(Metric::NvlinkErrors, "type"),
        NvlinkErrorType::ALL.map(NvlinkErrorType::as_str)
    );
}

#[test]
fn a_lost_gpu_keeps_only_identity_up_and_its_xids() {
    let r = GpuReadout {
        up: false,
        power_watts: Some(412.0),
        xid_counts: [(79, 1)].into(),
        ..Default::default()
    };
    let mut out = Vec::new();
    push_gpu_samples(&id(), &r, &mut out);
    let metrics: Vec<Metric> = out.iter().map(|s| s.metric).collect();
    assert_eq!(
        metrics,
        [
            Metric::GpuInfo,
            Metric::GpuUp,
            Metric::GpuXidInfo,
            Metric::GpuXidErrors
        ]
    );
    assert_eq!(out[1].value, 0.0);
    // What to do about the XID that took it: reboot the node.
    assert_eq!(out[2].label("action"), Some("reboot"));
}

#[test]
fn mig_instances_get_their_own_series() {
    let r = GpuReadout {
        up: true,
        mig: vec![MigReadout {
            gpu_instance: 1,
            compute_instance: 0,
            profile: "3g.40gb".into(),
            mig_uuid: "MIG-1".into(),
            graphics_engine_active_ratio: Some(0.5),
            memory_used_bytes: None,
            memory_total_bytes: Some(4.0e10),
        }],
        ..Default::default()
    };
    let mut out = Vec::new();
    push_gpu_samples(&id(), &r, &mut out);
    assert!(out.iter().all(Sample::is_well_formed));
    let active = find(&out, Metric::MigGraphicsEngineActive);
    assert_eq!(
        active[0].label_values(),
        ["2", "GPU-x", "1", "0", "3g.40gb"]
    );
    assert!(find(&out, Metric::MigMemoryUsed).is_empty());
    assert_eq!(find(&out, Metric::MigInfo)[0].label_values()[5], "MIG-1");
}
