//! Every metric the shipped Prometheus rules read is one the exporter serves (a catalog row) or
//! one the workload contract in docs/workloads.md defines: a renamed metric must not leave an
//! alert silently watching nothing.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;

use dgx_pixels_metrics::catalog::{Kind, CATALOG};

/// The metric names a rule file reads: every `dgx_pixels_*` name, and every `process_*` name
/// that starts a word (the exporter's own process families; not the tail of
/// `dgx_pixels_process_*`).
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for prefix in ["dgx_pixels_", "process_"] {
        out.extend(names_with(text, prefix));
    }
    out
}

fn names_with(text: &str, prefix: &str) -> BTreeSet<String> {
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find(prefix) {
        let start = i + pos;
        let end = start
            + text[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(text.len() - start);
        // Recording-rule names (level:metric:operations) are outputs, not inputs; a prefix
        // inside a longer word is not a name of its own, nor is a bare one (`process_*` in prose).
        let preceded = start > 0 && (bytes[start - 1] == b':' || word(bytes[start - 1]));
        if !preceded && end > start + prefix.len() {
            out.insert(text[start..end].to_string());
        }
        i = end;
    }
    out
}

#[test]
fn process_names_are_read_as_words() {
    let names = names_in("# process_* families\nprocess_open_fds / process_max_fds and dgx_pixels_process_memory_used_bytes > 0 or job:process_x:rate");
    let want = [
        "dgx_pixels_process_memory_used_bytes",
        "process_max_fds",
        "process_open_fds",
    ];
    assert_eq!(names.into_iter().collect::<Vec<_>>(), want);
}

/// The metrics the workload contract defines: the rows of docs/workloads.md's tables whose first
/// cell is a metric name and whose second starts with its type; a histogram also defines its
/// `_bucket`, `_sum` and `_count` series. Prose that merely mentions a name defines nothing.
fn contract_names(markdown: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in markdown.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(name), Some(kind)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Some(name) = name
            .strip_prefix("`dgx_pixels_")
            .and_then(|n| n.strip_suffix('`'))
            .filter(|n| {
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
        else {
            continue;
        };
        let name = format!("dgx_pixels_{name}");
        if kind.starts_with("histogram") {
            for suffix in ["_bucket", "_sum", "_count"] {
                out.insert(format!("{name}{suffix}"));
            }
        } else if !(kind.starts_with("counter") || kind.starts_with("gauge")) {
            continue;
        }
        out.insert(name);
    }
    out
}

#[test]
fn the_contract_parser_reads_definitions_not_mentions() {
    let md = "Use `dgx_pixels_workload_not_defined_total` in prose.\n\
              | `dgx_pixels_workload_images_generated_total` | counter | Images. |\n\
              | `dgx_pixels_workload_latency_seconds` | histogram | Latency. |\n\
              | `dgx_pixels_cost_x{currency}` | `a / b` |\n";
    let names: Vec<String> = contract_names(md).into_iter().collect();
    assert_eq!(
        names,
        [
            "dgx_pixels_workload_images_generated_total",
            "dgx_pixels_workload_latency_seconds",
            "dgx_pixels_workload_latency_seconds_bucket",
            "dgx_pixels_workload_latency_seconds_count",
            "dgx_pixels_workload_latency_seconds_sum",
        ]
    );
}

#[test]
fn rules_read_only_metrics_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let contract =
        contract_names(&std::fs::read_to_string(root.join("docs/workloads.md")).unwrap());
    assert!(
        contract.contains("dgx_pixels_workload_images_generated_total") && contract.len() > 15,
        "docs/workloads.md's metric tables not found: {contract:?}"
    );
    let mut known: BTreeSet<String> = BTreeSet::new();
    for def in CATALOG {
        known.insert(def.name.to_string());
        if def.kind == Kind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                known.insert(format!("{}{suffix}", def.name));
            }
        }
    }
    let mut checked = 0;
    for entry in std::fs::read_dir(root.join("deploy/prometheus/rules")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for name in names_in(&text) {
            checked += 1;
            assert!(
                known.contains(&name) || contract.contains(&name),
                "{} reads {name}, which neither the catalog nor docs/workloads.md defines",
                path.display()
            );
        }
    }
    assert!(checked > 10, "rules found: {checked}");
}

/// The lean profile (`--metrics.detail=lean`) keeps every catalog row the shipped rules and the
/// Fleet dashboard read: a row left out of `LEAN` would leave an alert or a panel without data
/// on a lean node. (The exporter's `lean_profile` tests check the series themselves, label
/// values included, through the binary.)
#[test]
fn the_lean_profile_keeps_every_row_the_rules_and_the_fleet_dashboard_read() {
    use dgx_pixels_metrics::catalog::lean;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut texts = vec![(
        "grafana/dashboards/dgx-pixels-fleet.json".to_string(),
        std::fs::read_to_string(root.join("grafana/dashboards/dgx-pixels-fleet.json")).unwrap(),
    )];
    for entry in std::fs::read_dir(root.join("deploy/prometheus/rules")).unwrap() {
        let path = entry.unwrap().path();
        texts.push((
            path.display().to_string(),
            std::fs::read_to_string(&path).unwrap(),
        ));
    }
    let mut checked = 0;
    for (file, text) in &texts {
        for name in names_in(text) {
            let Some(def) = CATALOG.iter().find(|d| {
                d.name == name
                    || (d.kind == Kind::Histogram
                        && ["_bucket", "_sum", "_count"]
                            .iter()
                            .any(|s| format!("{}{s}", d.name) == name))
            }) else {
                continue; // a job's family (docs/workloads.md): served whatever the profile
            };
            checked += 1;
            assert!(
                lean(def.metric).is_some(),
                "{file} reads {name}, which the lean profile does not serve (crates/metrics/src/catalog/detail.rs, LEAN)"
            );
        }
    }
    assert!(checked > 40, "catalog rows read: {checked}");
}
