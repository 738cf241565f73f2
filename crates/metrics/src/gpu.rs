//! The mapping from one GPU's readings to catalog samples, shared by every GPU source (NVML,
//! the simulator) so that they expose the same series for the same facts.
//!
//! A source fills a [`GpuReadout`] with what the device answered (`None` for a reading it does
//! not support or did not return) and calls [`push_gpu_samples`]. Readings that are `None` are
//! omitted, never exported as 0. The readout types and the label values ([`crate::labels`])
//! live in `dgx-pixels-readout`, which the simulator shares without the catalog; they are
//! re-exported here.

pub use crate::incidents::XidIncidents;
pub use dgx_pixels_readout::{
    cuda_version_string, ClockReadout, EccTotals, FabricReadout, GpuIdentity, GpuReadout,
    MigReadout, NvlinkErrors, NvlinkReadout, PlatformReadout, PowerSamples, PowerTally,
    ProcessActivity, ProcessReadout, ProcessUtilization, RailPortReadout, RemappedRowsReadout,
    RetiredPages, POWER_BUCKETS_WATTS,
};

mod activity;
mod power;
pub use activity::{cap_activity, ActivityScope, DEFAULT_TOP_K, OTHER_PID};
use power::push_power_samples;

use std::sync::Arc;

use crate::catalog::Metric;
use crate::device::{DeviceKey, MigInstance};
use crate::labels::{
    ClockDomain, EccCounter, EccErrorType, NvlinkErrorType, RemappedRowCause, RetiredPageCause,
    TemperatureSensor,
};
use crate::snapshot::Sample;

/// The own labels of a series that has only its device's.
const NO_LABELS: [&str; 0] = [];

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// Appends the samples of one GPU to `out`, all sharing one [`DeviceKey`].
pub fn push_gpu_samples(id: &GpuIdentity, r: &GpuReadout, out: &mut Vec<Sample>) {
    let key = Arc::new(DeviceKey::gpu(id.index, id.uuid.as_str()));
    let minor = id.minor_number.to_string();
    let cuda = id.cuda_driver_version.as_str();
    let device = format!("nvidia{}", id.minor_number);
    out.push(Sample::of(
        &key,
        Metric::GpuInfo,
        [
            &id.model,
            &id.serial,
            &id.pci_bus_id,
            &id.vbios_version,
            &id.driver_version,
            cuda,
            &minor,
            &device,
        ],
        1.0,
    ));
    out.push(Sample::of(&key, Metric::GpuUp, NO_LABELS, flag(r.up)));
    for (xid, count) in &r.xid_counts {
        let code = xid.to_string();
        // What NVIDIA says the code is and what to do about it, once per code on this GPU
        // (not copied onto the counter, whose series stays one per code).
        let (mnemonic, action) = match dgx_pixels_xid::lookup(*xid) {
            Some(e) => (e.mnemonic, e.action.as_str()),
            None => ("", dgx_pixels_xid::Action::Unknown.as_str()),
        };
        out.push(Sample::of(
            &key,
            Metric::GpuXidInfo,
            [code.as_str(), mnemonic, action],
            1.0,
        ));
        if let Some(n) = r.xid_incidents.get(xid) {
            out.push(Sample::of(
                &key,
                Metric::GpuXidIncidents,
                [code.as_str()],
                *n as f64,
            ));
        }
        out.push(Sample::of(
            &key,
            Metric::GpuXidErrors,
            [code],
            *count as f64,
        ));
    }
    if !r.up {
        return;
    }
    let mut gauge = |metric: Metric, value: Option<f64>| {
        if let Some(v) = value {
            out.push(Sample::of(&key, metric, NO_LABELS, v));
        }
    };
    gauge(Metric::GpuUtilization, r.utilization_ratio);
    gauge(Metric::GpuMemoryUtilization, r.memory_utilization_ratio);
    gauge(Metric::GpuEncoderUtilization, r.encoder_utilization_ratio);
    gauge(Metric::GpuDecoderUtilization, r.decoder_utilization_ratio);
    gauge(Metric::GpuBar1Used, r.bar1_used_bytes);
    gauge(Metric::GpuBar1Total, r.bar1_total_bytes);
    gauge(Metric::GpuEccEnabled, r.ecc_enabled.map(flag));
    gauge(Metric::PcieReplays, r.pcie_replays);
    gauge(Metric::PcieLinkGeneration, r.pcie_link_generation);
    gauge(Metric::PcieLinkWidth, r.pcie_link_width);
    gauge(Metric::PcieLinkMaxGeneration, r.pcie_link_max_generation);
    gauge(Metric::PcieLinkMaxWidth, r.pcie_link_max_width);
    gauge(Metric::GpuProcesses, r.process_count.map(|n| n as f64));
    if let Some(p) = r.retired_pages {
        gauge(Metric::GpuRetiredPagesPending, Some(flag(p.pending)));
    }
    if let Some(rr) = r.remapped_rows {
        gauge(Metric::GpuRemappedRowsPending, Some(flag(rr.pending)));
        gauge(Metric::GpuRemappedRowsFailure, Some(flag(rr.failure)));
    }
    gauge(Metric::GpuMemoryUsed, r.memory_used_bytes);
    gauge(Metric::GpuMemoryFree, r.memory_free_bytes);
    gauge(Metric::GpuMemoryReserved, r.memory_reserved_bytes);
    gauge(Metric::GpuMemoryTotal, r.memory_total_bytes);
    gauge(Metric::GpuPower, r.power_watts);
    gauge(Metric::GpuPowerLimit, r.power_limit_watts);
    gauge(Metric::GpuEnergy, r.energy_joules);
    gauge(
        Metric::GpuPerformanceState,
        r.performance_state.map(f64::from),
    );
    gauge(Metric::PcieTransmit, r.pcie_transmit_bytes_per_second);
    gauge(Metric::PcieReceive, r.pcie_receive_bytes_per_second);
    gauge(Metric::NvlinkTransmit, r.nvlink_transmit_bytes);
    gauge(Metric::NvlinkReceive, r.nvlink_receive_bytes);

    if let Some(p) = &r.power_samples {
        push_power_samples(&key, p, out);
    }

    let mut labelled = |metric: Metric, labels: &[&str], value: f64| {
        out.push(Sample::of(&key, metric, labels.iter().copied(), value));
    };
    if let Some(action) = r.recovery_action {
        labelled(Metric::GpuRecoveryAction, &[action.as_str()], 1.0);
    }
    if let Some(fabric) = &r.fabric {
        push_fabric(fabric, &mut labelled);
    }
    if let Some(p) = &r.platform {
        let [slot, tray, host, module] =
            [p.slot, p.tray, p.host_id, p.module_id].map(|n| n.to_string());
        labelled(
            Metric::GpuPlatformInfo,
            &[&p.chassis_serial, &slot, &tray, &host, &module],
            1.0,
        );
    }
    for p in &r.rail_ports {
        let port = p.port.to_string();
        let labels = [p.device.as_str(), port.as_str()];
        labelled(Metric::GpuRailPortUp, &labels, if p.up { 1.0 } else { 0.0 });
        if let Some(rate) = p.rate_bytes_per_second {
            labelled(Metric::GpuRailPortRate, &labels, rate);
        }
        if let Some(n) = p.link_downed {
            labelled(Metric::GpuRailLinkDowned, &labels, n);
        }
    }
    for sensor in TemperatureSensor::ALL {
        if let Some(v) = r.temperature(sensor) {
            labelled(Metric::GpuTemperature, &[sensor.as_str()], v);
        }
    }
    for (metric, clocks) in [
        (Metric::GpuClock, &r.clocks),
        (Metric::GpuClockMax, &r.max_clocks),
    ] {
        for domain in ClockDomain::ALL {
            if let Some(v) = clocks.get(domain) {
                labelled(metric, &[domain.as_str()], v);
            }
        }
    }
    for (fan, v) in r.fan_speed_ratios.iter().enumerate() {
        labelled(Metric::GpuFanSpeed, &[&fan.to_string()], *v);
    }
    for (reason, active) in &r.throttle_reasons {
        labelled(Metric::GpuThrottleReason, &[reason.as_str()], flag(*active));
    }
    if let Some(e) = r.ecc {
        for counter in EccCounter::ALL {
            for error_type in EccErrorType::ALL {
                labelled(
                    Metric::GpuEccErrors,
                    &[error_type.as_str(), counter.as_str()],
                    e.get(error_type, counter),
                );
            }
        }
    }
    if let Some(p) = r.retired_pages {
        for cause in RetiredPageCause::ALL {
            labelled(Metric::GpuRetiredPages, &[cause.as_str()], p.get(cause));
        }
    }
    if let Some(rr) = r.remapped_rows {
        for cause in RemappedRowCause::ALL {
            labelled(Metric::GpuRemappedRows, &[cause.as_str()], rr.get(cause));
        }
    }
    for (policy, seconds) in &r.throttle_violations {
        labelled(Metric::GpuThrottleViolation, &[policy.as_str()], *seconds);
    }
    // NVLink at fleet scale: per-GPU totals, and per-link series only for the links that are
    // down or have counted errors (18 links x 5 series per GPU would be most of a node's
    // series, almost all of them 1 or 0).
    if !r.nvlinks.is_empty() {
        let up = r.nvlinks.iter().filter(|l| l.up).count();
        labelled(Metric::NvlinkLinks, &[], r.nvlinks.len() as f64);
        labelled(Metric::NvlinkLinksUp, &[], up as f64);
        for kind in NvlinkErrorType::ALL {
            let per_link = r.nvlinks.iter().filter_map(|l| l.errors.get(kind));
            // The driver's total for the whole GPU where it answers one; else absent when no
            // link reads this type, a sum of what the links report otherwise.
            let total = r.nvlink_errors.get(kind).or_else(|| {
                per_link.fold(None, |acc: Option<f64>, v| Some(acc.unwrap_or(0.0) + v))
            });
            if let Some(total) = total {
                labelled(Metric::NvlinkErrors, &[kind.as_str()], total);
            }
        }
    }
    for l in &r.nvlinks {
        let link = l.link.to_string();
        if !l.up {
            labelled(Metric::NvlinkLinkDown, &[&link], 1.0);
        }
        for (kind, v) in l.errors.iter() {
            if v > 0.0 {
                labelled(Metric::NvlinkLinkErrors, &[&link, kind.as_str()], v);
            }
        }
    }
    for p in &r.processes {
        // A process in a MIG instance is that instance's: its key names it, so the attribution
        // join finds the pod holding the instance.
        let mig = p.gpu_instance.map(|gpu_instance| MigInstance {
            gpu_instance,
            compute_instance: p.compute_instance,
        });
        out.push(Sample::of(
            &Arc::new(key.with_mig(mig)),
            Metric::ProcessMemoryUsed,
            [p.pid.to_string(), p.container_id.clone(), p.pod_uid.clone()],
            p.used_memory_bytes,
        ));
    }
    activity::push_activity_samples(&key, &r.process_activity, out);
    for m in &r.mig {
        let instance = Arc::new(key.with_mig(Some(MigInstance {
            gpu_instance: m.gpu_instance,
            compute_instance: Some(m.compute_instance),
        })));
        out.push(Sample::of(
            &instance,
            Metric::MigInfo,
            [&m.profile, &m.mig_uuid],
            1.0,
        ));
        for (metric, v) in [
            (
                Metric::MigGraphicsEngineActive,
                m.graphics_engine_active_ratio,
            ),
            (Metric::MigMemoryUsed, m.memory_used_bytes),
            (Metric::MigMemoryTotal, m.memory_total_bytes),
        ] {
            if let Some(v) = v {
                out.push(Sample::of(&instance, metric, [&m.profile], v));
            }
        }
    }
}

/// The fabric's three families: info, state (with the registration's outcome) and the health
/// flags the driver reports.
fn push_fabric(f: &FabricReadout, labelled: &mut impl FnMut(Metric, &[&str], f64)) {
    let clique = f.clique_id.to_string();
    labelled(Metric::GpuFabricInfo, &[&f.cluster_uuid, &clique], 1.0);
    if let Some(state) = f.state {
        let status = fabric_status(f.status);
        labelled(Metric::GpuFabricState, &[state.as_str(), &status], 1.0);
    }
    for (flag, holds) in &f.health {
        labelled(
            Metric::GpuFabricHealth,
            &[flag.as_str()],
            if *holds { 1.0 } else { 0.0 },
        );
    }
}

/// The `status` label: `success`, or NVML's return code (a small number; anything past 999 is
/// `nvml_other`, so a garbage value cannot add label values without bound).
pub fn fabric_status(code: u32) -> String {
    match code {
        0 => "success".to_string(),
        1..=999 => format!("nvml_{code}"),
        _ => "nvml_other".to_string(),
    }
}

#[cfg(test)]
mod tests {
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
}
