//! Checks of the catalog table itself.
use super::*;
use std::collections::HashSet;

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[test]
fn ids_index_their_own_rows() {
    for (i, def) in CATALOG.iter().enumerate() {
        assert_eq!(def.metric as usize, i);
        assert_eq!(def.metric.def().name, def.name);
    }
}

#[test]
fn names_follow_the_naming_rules() {
    let subsystems = [
        "gpu", "mig", "nvlink", "pcie", "process", "probe", "workload", "quality", "cost",
        "source", "exporter", "textfile", "kmsg", "nvswitch", "trace", "nvml", "node",
    ];
    let mut seen = HashSet::new();
    for def in CATALOG {
        assert!(seen.insert(def.name), "{} defined twice", def.name);
        assert!(valid_name(def.name), "{}", def.name);
        // The one exception to the prefix, name by name (checked below).
        let rest = match def.name.strip_prefix("dgx_pixels_") {
            Some(rest) => rest,
            None if STANDARD_PROCESS_NAMES.contains(&def.name) => "exporter_",
            None => panic!("{} is not under dgx_pixels_", def.name),
        };
        // A subsystem of the list, or the name of a collector that serves the row (a new
        // collector's own metrics need no edit here).
        assert!(
            subsystems
                .iter()
                .chain(def.sources)
                .any(|s| rest.starts_with(&format!("{s}_"))),
            "{} has no known subsystem",
            def.name
        );
        assert_eq!(
            def.kind == Kind::Counter,
            def.name.ends_with("_total"),
            "{}: counters and only counters end in _total",
            def.name
        );
        if let Some(unit) = def.unit.suffix() {
            assert!(
                def.family_name().ends_with(&format!("_{unit}")),
                "{} must end with its unit {unit}",
                def.name
            );
        }
        assert!(!def.name.contains("percent") && !def.name.contains("mhz"));
        assert!(!def.help.is_empty() && !def.help.contains('\n') && !def.help.contains('\\'));
        for label in def.labels {
            assert!(valid_name(label) && !label.starts_with("__"), "{label}");
            for target_label in ["instance", "job"] {
                assert_ne!(
                    *label, target_label,
                    "{}: {target_label} belongs to Prometheus (it would become exported_{target_label})",
                    def.name
                );
            }
            assert_ne!(
                *label, "node",
                "{}: node is added by configuration",
                def.name
            );
        }
        if rest.starts_with("gpu_") || rest.starts_with("mig_") || rest.starts_with("pcie_") {
            assert_eq!(&def.labels[..2], &["gpu", "uuid"], "{}", def.name);
        }
        assert!(!def.sources.is_empty());
    }
}

#[test]
fn required_names_are_present() {
    for name in [
        "dgx_pixels_gpu_info",
        "dgx_pixels_gpu_up",
        "dgx_pixels_gpu_utilization_ratio",
        "dgx_pixels_gpu_memory_used_bytes",
        "dgx_pixels_gpu_memory_total_bytes",
        "dgx_pixels_gpu_power_watts",
        "dgx_pixels_gpu_power_limit_watts",
        "dgx_pixels_gpu_energy_joules_total",
        "dgx_pixels_gpu_temperature_celsius",
        "dgx_pixels_gpu_clock_hertz",
        "dgx_pixels_gpu_xid_errors_total",
        "dgx_pixels_source_up",
        "dgx_pixels_source_poll_duration_seconds",
        "dgx_pixels_source_last_success_timestamp_seconds",
        "dgx_pixels_exporter_build_info",
    ] {
        assert!(Metric::by_name(name).is_some(), "{name} missing");
    }
    assert_eq!(
        Metric::GpuTemperature.def().labels,
        &["gpu", "uuid", "sensor"]
    );
    assert_eq!(Metric::GpuClock.def().labels, &["gpu", "uuid", "clock"]);
    assert_eq!(Metric::GpuXidErrors.def().labels, &["gpu", "uuid", "xid"]);
    assert_eq!(Metric::SourceUp.def().labels, &["source"]);
}

/// The rows without the `dgx_pixels_` prefix are exactly client_golang's process collector's
/// families on Linux (prometheus/client_golang, prometheus/process_collector.go), with its
/// types and units, about the exporter's own process: no labels, served by the `exporter`
/// source, in every profile.
#[test]
fn the_unprefixed_rows_are_exactly_client_golangs_process_families() {
    let client_golang = [
        ("process_cpu_seconds_total", Kind::Counter, Unit::Seconds),
        ("process_open_fds", Kind::Gauge, Unit::None),
        ("process_max_fds", Kind::Gauge, Unit::None),
        ("process_virtual_memory_bytes", Kind::Gauge, Unit::Bytes),
        ("process_virtual_memory_max_bytes", Kind::Gauge, Unit::Bytes),
        ("process_resident_memory_bytes", Kind::Gauge, Unit::Bytes),
        ("process_start_time_seconds", Kind::Gauge, Unit::Seconds),
    ];
    let unprefixed: Vec<&MetricDef> = CATALOG
        .iter()
        .filter(|d| !d.name.starts_with("dgx_pixels_"))
        .collect();
    assert_eq!(
        unprefixed.iter().map(|d| d.name).collect::<Vec<_>>(),
        client_golang.iter().map(|c| c.0).collect::<Vec<_>>()
    );
    assert_eq!(
        STANDARD_PROCESS_NAMES,
        client_golang.iter().map(|c| c.0).collect::<Vec<_>>()
    );
    for (def, (name, kind, unit)) in unprefixed.iter().zip(client_golang) {
        assert_eq!((def.name, def.kind, def.unit), (name, kind, unit));
        assert!(def.labels.is_empty(), "{name}");
        assert_eq!(def.sources, &["exporter"], "{name}");
        assert!(detail::policy(def.metric).is_none(), "{name} is trimmed");
    }
}

#[test]
fn attribution_labels_appear_only_on_the_attribution_rows() {
    // The encoder appends them to device series whose rows have none; the rows that do are
    // the attribution sources' info series and the allocated-idle counters, which carry
    // the holder they were counted for (a holder joined at encoding time could be newer).
    let holder_counters = [Metric::GpuAllocatedIdle, Metric::GpuAllocatedIdleEnergy];
    // An attribution source's own health counters are about the source, not a device.
    let source_health = [
        Metric::SourceReadErrors,
        Metric::SourceSeriesDropped,
        Metric::KubernetesPodLabelsUp,
        Metric::KubernetesPodLabelsDropped,
    ];
    for def in CATALOG {
        if source_health.contains(&def.metric) {
            assert!(
                !def.labels
                    .iter()
                    .any(|l| crate::attribution::ATTRIBUTION_LABELS.contains(l)),
                "{}",
                def.name
            );
            continue;
        }
        let has = def
            .labels
            .iter()
            .any(|l| crate::attribution::ATTRIBUTION_LABELS.contains(l));
        assert_eq!(
            has,
            def.sources
                .iter()
                .all(|s| ["kubernetes", "hpc"].contains(s))
                || holder_counters.contains(&def.metric),
            "{}",
            def.name
        );
    }
    for m in holder_counters {
        assert!(m
            .def()
            .labels
            .ends_with(crate::attribution::ATTRIBUTION_LABELS));
    }
}

#[test]
fn openmetrics_names_are_sliced_at_compile_time() {
    let energy = Metric::GpuEnergy.def();
    assert_eq!(energy.openmetrics_name, "dgx_pixels_gpu_energy_joules");
    assert_eq!(energy.family_name(), "dgx_pixels_gpu_energy_joules");
    assert_eq!(energy.openmetrics_base, "dgx_pixels_gpu_energy");
    let xid = Metric::GpuXidErrors.def();
    assert_eq!(xid.openmetrics_name, "dgx_pixels_gpu_xid_errors");
    assert_eq!(xid.openmetrics_base, "dgx_pixels_gpu_xid_errors");
    let pcie = Metric::PcieTransmit.def();
    assert_eq!(pcie.openmetrics_base, "dgx_pixels_pcie_transmit");
    for def in CATALOG {
        // What prometheus-client writes back: base, `_`, unit; counters add `_total`.
        let rebuilt = match def.unit.suffix() {
            Some(unit) => format!("{}_{unit}", def.openmetrics_base),
            None => def.openmetrics_base.to_string(),
        };
        assert_eq!(rebuilt, def.openmetrics_name, "{}", def.name);
        let total = if def.kind == Kind::Counter {
            "_total"
        } else {
            ""
        };
        assert_eq!(format!("{rebuilt}{total}"), def.name);
    }
}

#[test]
fn markdown_lists_every_metric() {
    let md = markdown();
    for def in CATALOG {
        assert!(md.contains(&format!("| `{}` |", def.name)), "{}", def.name);
    }
}
