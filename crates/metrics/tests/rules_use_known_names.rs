//! Every metric the shipped Prometheus rules read is one the exporter serves (a catalog row) or
//! one the workload contract in docs/workloads.md defines: a renamed metric must not leave an
//! alert silently watching nothing.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;

use dgx_pixels_metrics::catalog::{Kind, CATALOG};

fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("dgx_pixels_") {
        let start = i + pos;
        let end = start
            + text[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(text.len() - start);
        // Recording-rule names (level:metric:operations) are outputs, not inputs.
        let in_record_name = start > 0 && bytes[start - 1] == b':';
        if !in_record_name {
            out.insert(text[start..end].to_string());
        }
        i = end;
    }
    out
}

#[test]
fn rules_read_only_metrics_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let contract = std::fs::read_to_string(root.join("docs/workloads.md")).unwrap();
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
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name);
            assert!(
                known.contains(&name) || contract.contains(&name) || contract.contains(base),
                "{} reads {name}, which neither the catalog nor docs/workloads.md defines",
                path.display()
            );
        }
    }
    assert!(checked > 10, "rules found: {checked}");
}
