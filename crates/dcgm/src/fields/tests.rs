#![allow(clippy::unwrap_used)]
use super::*;
use std::collections::HashSet;

#[test]
fn the_table_is_consistent() {
    let mut ids = HashSet::new();
    for f in KNOWN_FIELDS {
        assert!(ids.insert(f.id), "{} twice", f.id);
        assert!(f.name.starts_with("DCGM_FI_"));
        assert_eq!(f.profiling, (1001..=1012).contains(&f.id));
        // Base-unit fields (1600-1612) and only they replace a legacy field, of a lower id.
        assert_eq!(
            f.replaces.is_some(),
            (1600..=1612).contains(&f.id),
            "{}",
            f.name
        );
        assert!(f.replaces.is_none_or(|legacy| legacy < 1600), "{}", f.name);
        if let Some(m) = f.mapping {
            let def = m.metric.def();
            assert_eq!(&def.labels[..2], &["gpu", "uuid"], "{}", f.name);
            assert_eq!(def.labels.len(), 2 + m.labels.len(), "{}", f.name);
            assert!(
                def.sources.contains(&"dcgm"),
                "{} lacks source dcgm",
                def.name
            );
        }
    }
    assert_eq!(
        by_name("DCGM_FI_DEV_GPU_UTIL_RATIO").map(|f| f.id),
        Some(203)
    );
    // A catalog series is fed by one field, or by a base-unit field and its legacy field.
    for (i, a) in KNOWN_FIELDS.iter().enumerate() {
        for b in &KNOWN_FIELDS[i + 1..] {
            let (Some(ma), Some(mb)) = (a.mapping, b.mapping) else {
                continue;
            };
            if (ma.metric, ma.labels) == (mb.metric, mb.labels) {
                assert!(
                    b.replaces == Some(a.id) || a.replaces == Some(b.id),
                    "{} and {} feed the same series",
                    a.name,
                    b.name
                );
            }
        }
    }
}

/// DCGM 3's spelling, DCGM 4's, and the id, written out from docs/shared reference
/// dcgm.md's field table (DCGM 3.3.9 and 4.6 headers), not from this file's constants:
/// issue 43 found the alias test comparing the table with itself.
const DCGM_3_AND_4: [(&str, &str, u16); 25] = [
    ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", 203),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        112,
    ),
    (
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",
        140,
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", 150),
    (
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_BOARD_POWER_WATTS",
        155,
    ),
    (
        "DCGM_FI_DEV_POWER_USAGE_INSTANT",
        "DCGM_FI_DEV_BOARD_POWER_RAW_WATTS",
        157,
    ),
    ("DCGM_FI_DEV_PSTATE", "DCGM_FI_DEV_GPU_PSTATE", 190),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_PCIE_REPLAY_TOTAL",
        202,
    ),
    ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", 230),
    (
        "DCGM_FI_DEV_FB_USED_PERCENT",
        "DCGM_FI_DEV_FB_USED_RATIO",
        254,
    ),
    (
        "DCGM_FI_DEV_RETIRED_SBE",
        "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL",
        390,
    ),
    (
        "DCGM_FI_DEV_RETIRED_DBE",
        "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL",
        391,
    ),
    (
        "DCGM_FI_DEV_RETIRED_PENDING",
        "DCGM_FI_DEV_PAGE_RETIRED_PENDING",
        392,
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
        393,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",
        394,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_ROW_REMAP_FAILED",
        395,
    ),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",
        449,
    ),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
        1001,
    ),
    ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO", 1002),
    (
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_SM_OCCUPANCY_RATIO",
        1003,
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
        1004,
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_DRAM_UTIL_RATIO",
        1005,
    ),
    (
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "DCGM_FI_PROF_FP64_UTIL_RATIO",
        1006,
    ),
    (
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "DCGM_FI_PROF_FP32_UTIL_RATIO",
        1007,
    ),
    (
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "DCGM_FI_PROF_FP16_UTIL_RATIO",
        1008,
    ),
];

/// Every pair of the independent list: both spellings name the same known field, the old
/// one being its name, with the id the reference gives; the alias table holds exactly
/// these pairs; a field list of all 25 in either spelling reads the same.
#[test]
fn all_25_dcgm_4_names_match_an_independent_list_of_both_spellings() {
    let mut old_list = String::new();
    let mut new_list = String::new();
    for (old, new, id) in DCGM_3_AND_4 {
        let o = by_name(old).unwrap_or_else(|| panic!("{old}"));
        let n = by_name(new).unwrap_or_else(|| panic!("{new}"));
        assert_eq!((o.id, n.id), (id, id), "{old} / {new}");
        assert_eq!(o.name, old, "{new}: the old spelling is the field's name");
        // As dcgm-exporter's default list types them.
        let kind = if [202, 390, 391, 393, 394, 449].contains(&id) {
            "counter"
        } else {
            "gauge"
        };
        old_list.push_str(&format!("{old}, {kind}, x\n"));
        new_list.push_str(&format!("{new}, {kind}, x\n"));
    }
    let mut listed: Vec<(&str, u16)> = DCGM_3_AND_4.iter().map(|(_, n, id)| (*n, *id)).collect();
    listed.extend(EXPORTER_4_10.iter().map(|(_, n, id)| (*n, *id)));
    let mut table = ALIASES.to_vec();
    listed.sort();
    table.sort();
    assert_eq!(table, listed);
    let (a, b) = (
        parse_field_list(&old_list, "old.csv").unwrap(),
        parse_field_list(&new_list, "new.csv").unwrap(),
    );
    assert_eq!(a.fields.len(), 25);
    assert_eq!(a, b);
    assert!(b.skipped.is_empty(), "{:?}", b.skipped);
}

/// A field list written with DCGM 4's names reads as the same fields, under the same
/// names, as the old spelling; every alias names a known field, once.
#[test]
fn a_field_list_with_dcgm_4_names_reads_as_the_old_one() {
    let mut seen = HashSet::new();
    for (alias, id) in ALIASES {
        assert!(seen.insert(*alias), "{alias} twice");
        let f = by_name(alias).unwrap_or_else(|| panic!("{alias}"));
        assert_eq!(f.id, *id, "{alias}");
        assert!(by_id(*id).is_some_and(|k| k.name != *alias), "{alias}");
    }
    let old = "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_POWER_USAGE, gauge, p\n\
               DCGM_FI_DEV_XID_ERRORS, gauge, x\nDCGM_FI_DEV_RETIRED_PENDING, gauge, r\n\
               DCGM_FI_PROF_SM_ACTIVE, gauge, s\nDCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, c\n";
    let new = "DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, t\nDCGM_FI_DEV_BOARD_POWER_WATTS, gauge, p\n\
               DCGM_FI_DEV_XID_ERROR, gauge, x\nDCGM_FI_DEV_PAGE_RETIRED_PENDING, gauge, r\n\
               DCGM_FI_PROF_SM_UTIL_RATIO, gauge, s\nDCGM_FI_DEV_PCIE_REPLAY_TOTAL, counter, c\n";
    let (a, b) = (
        parse_field_list(old, "old.csv").unwrap(),
        parse_field_list(new, "new.csv").unwrap(),
    );
    assert_eq!(a, b);
    assert!(b.skipped.is_empty(), "{:?}", b.skipped);
}

#[test]
fn defaults_are_profiling_unless_device_metrics_are_asked_for() {
    let prof = default_fields(false);
    assert_eq!(prof.len(), 12);
    assert!(prof.iter().all(|f| f.profiling));
    let all = default_fields(true);
    assert!(all
        .iter()
        .any(|f| f.metric() == Some(Metric::GpuUtilization)));
    assert!(all.len() > prof.len());
    // The legacy ids every DCGM has, never the base-unit ones (DCGM 4.6.1 and later).
    let ids: Vec<u16> = all.iter().map(|f| f.id).collect();
    assert!(ids.contains(&100) && ids.contains(&156) && ids.contains(&191));
    assert!(ids.iter().all(|id| *id < 1600), "{ids:?}");
}

#[test]
fn dcgm_exporter_csv_maps_known_fields_and_derives_the_rest() {
    let csv = "# Format\n# DCGM FIELD, Prometheus metric type, help message\n\n\
        DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).\n\
        DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.\n\
        DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries, all lanes.\n\
        DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.\n\
        DCGM_FI_DRIVER_VERSION, label, Driver Version\n\
        DCGM_FI_DEV_NVLINK_BANDWIDTH_L0, counter, The number of bytes of active NVLink rx or tx data.\n";
    let list = parse_field_list(csv, "f.csv").unwrap();
    let ids: Vec<u16> = list.fields.iter().map(|f| f.id).collect();
    assert_eq!(ids, [100, 230, 202, 1004]);
    assert_eq!(list.fields[0].metric(), Some(Metric::GpuClock));
    let Target::Extra(xid) = &list.fields[1].target else {
        panic!()
    };
    assert_eq!(xid.name, "dgx_pixels_dcgm_dev_xid_errors");
    assert_eq!(xid.help, "Value of the last XID error encountered.");
    let Target::Extra(replay) = &list.fields[2].target else {
        panic!()
    };
    assert_eq!(replay.name, "dgx_pixels_dcgm_dev_pcie_replay_counter_total");
    assert_eq!(replay.kind, Kind::Counter);
    assert_eq!(replay.help, "Total number of PCIe retries, all lanes.");
    assert!(list.fields[3].profiling);
    assert_eq!(list.skipped.len(), 2, "{:?}", list.skipped);
    assert!(list.skipped[0].starts_with("f.csv:8: DCGM_FI_DRIVER_VERSION"));
    assert!(list.skipped[1].starts_with("f.csv:9: DCGM_FI_DEV_NVLINK_BANDWIDTH_L0 is not a field"));
}

#[test]
fn errors_keep_their_messages() {
    let csv = |text: &str| parse_field_list(text, "f.csv").unwrap_err().to_string();
    assert_eq!(
        csv("DCGM_FI_DEV_SM_CLOCK\n"),
        "field list f.csv:1: expected `DCGM_FI_NAME, type, help`, got \"DCGM_FI_DEV_SM_CLOCK\""
    );
    assert_eq!(
        csv("\nDCGM_FI_DEV_SM_CLOCK, histogram, x\n"),
        "field list f.csv:2: type \"histogram\" of DCGM_FI_DEV_SM_CLOCK; expected gauge, counter or label"
    );
    assert_eq!(
        csv("sm_clock, gauge, x\n"),
        "field list f.csv:1: \"sm_clock\" is not a DCGM field name (DCGM_FI_...)"
    );
    assert_eq!(csv("# none\n"), "field list f.csv: no usable DCGM field");
    let family = |name: &str, kind: Kind, help: &str| {
        ExtraFamily::new(name, kind, help).unwrap_err().to_string()
    };
    assert_eq!(
        family("foo", Kind::Gauge, ""),
        "\"foo\" is not a valid dgx_pixels_ metric name"
    );
    assert_eq!(
        family("dgx_pixels_source_poll_errors_total", Kind::Counter, ""),
        "dgx_pixels_source_poll_errors_total is already a catalog metric"
    );
    assert_eq!(
        family("dgx_pixels_x", Kind::Counter, ""),
        "dgx_pixels_x: counters and only counters end in _total"
    );
    assert_eq!(
        family("dgx_pixels_x", Kind::Gauge, "a\\b"),
        "dgx_pixels_x: help must be one line without backslashes"
    );
}

#[test]
fn bad_lines_name_file_and_line() {
    for (text, want) in [
        ("DCGM_FI_DEV_SM_CLOCK\n", "f.csv:1: expected"),
        (
            "\nDCGM_FI_DEV_SM_CLOCK, histogram, x\n",
            "f.csv:2: type \"histogram\"",
        ),
        (
            "sm_clock, gauge, x\n",
            "f.csv:1: \"sm_clock\" is not a DCGM field name",
        ),
        ("# only comments\n", "f.csv: no usable DCGM field"),
    ] {
        let e = parse_field_list(text, "f.csv").unwrap_err().to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

/// dcgm-exporter 4.10.0's names of the PCIe and NVLink profiling rates, the old names and the
/// ids, written out from its release notes (renamed; "custom collectors can still use the old
/// names"; ids 1009-1012 in DCGM v3.3.9 and v4.6.0 `dcgm_fields.h`).
const EXPORTER_4_10: [(&str, &str, u16); 4] = [
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
        1009,
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
        1010,
    ),
    (
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND",
        1011,
    ),
    (
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND",
        1012,
    ),
];

#[test]
fn the_exporter_4_10_rate_names_read_as_the_old_ones() {
    let mut old_list = String::new();
    let mut new_list = String::new();
    for (old, new, id) in EXPORTER_4_10 {
        assert_eq!(
            by_name(new).map(|f| (f.id, f.name)),
            Some((id, old)),
            "{new}"
        );
        old_list.push_str(&format!("{old}, gauge, x\n"));
        new_list.push_str(&format!("{new}, gauge, x\n"));
    }
    let (a, b) = (
        parse_field_list(&old_list, "old.csv").unwrap(),
        parse_field_list(&new_list, "new.csv").unwrap(),
    );
    assert_eq!(a, b);
    assert_eq!(b.fields.len(), 4);
    assert!(b.fields.iter().all(|f| f.profiling && f.metric().is_some()));
    assert!(b.skipped.is_empty(), "{:?}", b.skipped);
}

/// A metric and its label values after `gpu` and `uuid`.
type Series = (Metric, &'static [&'static str]);

/// The base-unit fields, written out from go-dcgm tag v1.4611.0 `pkg/dcgm/dcgm_fields.h`
/// (DCGM 4.6.1; legacy pairs from that tag's `base_unit_fields_test.go`), not from this
/// file's constants: name, id, legacy id, and the metric and labels they are served under
/// (`None`: a `dgx_pixels_dcgm_*` family), in the metric's unit with factor 1.
const BASE_UNITS: [(&str, u16, u16, Option<Series>); 13] = [
    (
        "DCGM_FI_DEV_BAR1_CAPACITY_BYTES",
        1600,
        90,
        Some((Metric::GpuBar1Total, &[])),
    ),
    (
        "DCGM_FI_DEV_BAR1_USED_BYTES",
        1601,
        92,
        Some((Metric::GpuBar1Used, &[])),
    ),
    ("DCGM_FI_DEV_BAR1_FREE_BYTES", 1602, 93, None),
    (
        "DCGM_FI_DEV_SM_CLOCK_HERTZ",
        1603,
        100,
        Some((Metric::GpuClock, &["sm"])),
    ),
    (
        "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",
        1604,
        101,
        Some((Metric::GpuClock, &["memory"])),
    ),
    (
        "DCGM_FI_DEV_VIDEO_CLOCK_HERTZ",
        1605,
        102,
        Some((Metric::GpuClock, &["video"])),
    ),
    ("DCGM_FI_DEV_SM_APP_CLOCK_HERTZ", 1606, 110, None),
    ("DCGM_FI_DEV_MEMORY_APP_CLOCK_HERTZ", 1607, 111, None),
    (
        "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ",
        1608,
        113,
        Some((Metric::GpuClockMax, &["sm"])),
    ),
    (
        "DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ",
        1609,
        114,
        Some((Metric::GpuClockMax, &["memory"])),
    ),
    (
        "DCGM_FI_DEV_VIDEO_MAX_CLOCK_HERTZ",
        1610,
        115,
        Some((Metric::GpuClockMax, &["video"])),
    ),
    (
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
        1611,
        156,
        Some((Metric::GpuEnergy, &[])),
    ),
    (
        "DCGM_FI_DEV_FAN_SPEED_RATIO",
        1612,
        191,
        Some((Metric::GpuFanSpeed, &["0"])),
    ),
];

/// Each base-unit field is its own field under its own id, served under the metric the list
/// above gives with factor 1; where the table knows its legacy field too, both feed the same
/// series, the legacy one converted from its unit (MHz, mJ, percent) by the factor the
/// headers' units give.
#[test]
fn base_unit_fields_are_their_own_ids_served_under_the_same_metric() {
    for (name, id, legacy, served) in BASE_UNITS {
        let f = by_name(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!((f.id, f.name, f.replaces), (id, name, Some(legacy)));
        assert!(!f.profiling);
        match (served, f.mapping) {
            (Some((metric, labels)), Some(m)) => {
                assert_eq!(
                    (m.metric, m.labels, m.scale),
                    (metric, labels, 1.0),
                    "{name}"
                )
            }
            (None, None) => {}
            other => panic!("{name}: {other:?}"),
        }
        let Some(old) = by_id(legacy) else { continue };
        let (Some(m), Some(o)) = (f.mapping, old.mapping) else {
            panic!("{name}: the legacy field {legacy} is mapped, this one is not")
        };
        assert_eq!((m.metric, m.labels), (o.metric, o.labels), "{name}");
        let legacy_unit = match legacy {
            100 | 101 => 1e6, // MHz
            156 => 1e-3,      // mJ
            191 => 1e-2,      // percent
            other => panic!("legacy {other}: give its unit"),
        };
        assert_eq!(o.scale, legacy_unit, "{}", old.name);
    }
    // The legacy ids of unmapped or unknown legacy fields are not in the table as other fields.
    for legacy in [90, 92, 93, 102, 110, 111, 113, 114, 115] {
        assert!(by_id(legacy).is_none(), "{legacy}");
    }
}

/// A list naming a base-unit field and its legacy field watches the base-unit one, whichever
/// comes first, and says which line it skipped; the series is served once.
#[test]
fn a_base_unit_field_wins_over_its_legacy_field() {
    let legacy_first = "DCGM_FI_DEV_SM_CLOCK, gauge, MHz\n\
        DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, mJ\n\
        DCGM_FI_DEV_FAN_SPEED, gauge, percent\n\
        DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, Hz\n\
        DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL, counter, J\n\
        DCGM_FI_DEV_FAN_SPEED_RATIO, gauge, ratio\n";
    let list = parse_field_list(legacy_first, "a.csv").unwrap();
    let ids: Vec<u16> = list.fields.iter().map(|f| f.id).collect();
    assert_eq!(ids, [1603, 1611, 1612]);
    assert_eq!(
        list.skipped,
        [
            "a.csv:1: DCGM_FI_DEV_SM_CLOCK (100) is served by DCGM_FI_DEV_SM_CLOCK_HERTZ (1603), \
             its base-unit replacement, named at a.csv:4",
            "a.csv:2: DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (156) is served by \
             DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL (1611), its base-unit replacement, named at a.csv:5",
            "a.csv:3: DCGM_FI_DEV_FAN_SPEED (191) is served by DCGM_FI_DEV_FAN_SPEED_RATIO (1612), \
             its base-unit replacement, named at a.csv:6",
        ]
    );
    let base_first = "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ, gauge, Hz\n\
        DCGM_FI_DEV_GPU_UTIL, gauge, percent\n\
        DCGM_FI_DEV_MEM_CLOCK, gauge, MHz\n";
    let list = parse_field_list(base_first, "b.csv").unwrap();
    let ids: Vec<u16> = list.fields.iter().map(|f| f.id).collect();
    assert_eq!(ids, [1604, 203]);
    assert_eq!(
        list.skipped,
        [
            "b.csv:3: DCGM_FI_DEV_MEM_CLOCK (101) is served by DCGM_FI_DEV_MEMORY_CLOCK_HERTZ \
          (1604), its base-unit replacement, named at b.csv:1"
        ]
    );
    // One field per catalog series.
    let mut series: Vec<_> = list.fields.iter().filter_map(|f| f.metric()).collect();
    series.dedup();
    assert_eq!(series.len(), 2);
}

/// Base-unit fields with no catalog row become families named after them, in their own
/// (base) unit, with the CSV's type and help.
#[test]
fn unmapped_base_unit_fields_are_families_in_their_unit() {
    let csv = "DCGM_FI_DEV_BAR1_FREE_BYTES, gauge, Free BAR1 (in B).\n\
        DCGM_FI_DEV_SM_APP_CLOCK_HERTZ, gauge, SM application clock (in Hz).\n";
    let list = parse_field_list(csv, "f.csv").unwrap();
    let names: Vec<String> = list
        .fields
        .iter()
        .map(|f| match &f.target {
            Target::Extra(x) => x.name.clone(),
            Target::Catalog(m) => panic!("{m:?}"),
        })
        .collect();
    assert_eq!(
        names,
        [
            "dgx_pixels_dcgm_dev_bar1_free_bytes",
            "dgx_pixels_dcgm_dev_sm_app_clock_hertz"
        ]
    );
}

/// dcgm-exporter's own rows (`DCGM_EXP_*`, shipped commented out) are skipped with a reason,
/// not refused: a list with one uncommented still loads.
#[test]
fn dcgm_exporter_rows_are_skipped_not_refused() {
    let csv = "DCGM_EXP_XID_ERRORS_COUNT, gauge, Count of XID Errors within user-specified time window (see xid-count-window-size param).\n\
        DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n";
    let list = parse_field_list(csv, "f.csv").unwrap();
    assert_eq!(list.fields.len(), 1);
    assert_eq!(
        list.skipped,
        ["f.csv:1: DCGM_EXP_XID_ERRORS_COUNT is a dcgm-exporter metric, not a DCGM field"]
    );
    let e = parse_field_list("DCGM_EXP_x, gauge, x\n", "f.csv").unwrap_err();
    assert!(
        e.to_string()
            .contains("\"DCGM_EXP_x\" is not a DCGM field name"),
        "{e}"
    );
}
