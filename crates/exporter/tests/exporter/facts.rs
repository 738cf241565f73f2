//! docs/facts.md and the code hold each other both ways (issue 43): every constant tagged
//! `// fact: ID` has a row with the same value, every row has exactly one tagged constant,
//! and every row has a kind and a source (a row of kind `ours` says why it is safe). The
//! Prometheus rules' thresholds are tagged `# fact: ID` on their line the same way (a PromQL
//! comment inside a multi-line expression, a YAML comment after a one-line one).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const KINDS: &[&str] = &["sourced", "measured", "derived", "ours"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, `target` left out.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The value of a constant's line: the expression after its last `=`, `:` or `,` (`bf16:
/// 989.4 * T,`, `const X: f64 = 200e9;`, `(&["A100"], 300e9),`), a product of numbers and the
/// unit constants the tables use.
fn value(code: &str) -> Option<f64> {
    let code = code
        .trim()
        .trim_end_matches([',', ';'])
        .trim_end_matches(')');
    let expr = code.rsplit(['=', ':', ',']).next()?;
    expr.split('*')
        .map(|factor| match factor.trim() {
            "T" => Some(1e12),
            "G" => Some(1e9),
            n => n.replace('_', "").parse::<f64>().ok(),
        })
        .product::<Option<f64>>()
}

/// The value of a rule threshold's line: its last number (`... peer_median_ratio < 0.8`,
/// `(count by (model) (x) >= 3)`).
fn rule_value(code: &str) -> Option<f64> {
    code.split(|c: char| c.is_whitespace() || "()".contains(c))
        .rfind(|t| !t.is_empty())?
        .parse()
        .ok()
}

/// The shipped Prometheus rule files (the Helm chart's copies are checked equal to them by
/// scripts/check-deploy.sh, so they are not read twice).
fn rule_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/prometheus/rules"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    files.sort();
    files
}

/// `id -> (value, where)` of every tagged constant and rule threshold.
fn tagged() -> BTreeMap<String, Vec<(Option<f64>, String)>> {
    let mut files = Vec::new();
    sources(&root().join("crates"), &mut files);
    files.extend(rule_files());
    let mut tags: BTreeMap<String, Vec<(Option<f64>, String)>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let rules = file.extension().is_some_and(|e| e != "rs");
        let (tag, value): (&str, fn(&str) -> Option<f64>) = if rules {
            ("# fact: ", rule_value)
        } else {
            ("// fact: ", value)
        };
        for (i, line) in text.lines().enumerate() {
            let Some((code, id)) = line.split_once(tag) else {
                continue;
            };
            // An id is lower-case words, digits, dots and dashes (this file's own mentions of
            // the tag are none).
            let id = id.trim();
            let well_formed = !id.is_empty()
                && id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c));
            if !well_formed {
                continue;
            }
            let at = format!(
                "{}:{}",
                file.strip_prefix(root()).unwrap_or(&file).display(),
                i + 1
            );
            tags.entry(id.trim().to_string())
                .or_default()
                .push((value(code), at));
        }
    }
    tags
}

/// `id -> (value, kind, source)` of docs/facts.md's table.
fn rows() -> BTreeMap<String, (f64, String, String)> {
    let text = std::fs::read_to_string(root().join("docs/facts.md")).unwrap();
    // The constants' table; the tables kept as data files follow it, each held by its own test.
    let text = text
        .split("\n## Tables kept as data")
        .next()
        .unwrap_or_default();
    let mut rows = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "docs/facts.md: not 4 cells: {line}");
        let id = cells[0].trim_matches('`').to_string();
        let v: f64 = cells[1]
            .parse()
            .unwrap_or_else(|_| panic!("docs/facts.md: {id}: value {:?}", cells[1]));
        let previous = rows.insert(id.clone(), (v, cells[2].to_string(), cells[3].to_string()));
        assert!(previous.is_none(), "docs/facts.md: {id} twice");
    }
    rows
}

#[test]
fn every_fact_in_the_code_has_its_row_and_every_row_its_constant() {
    let tags = tagged();
    let rows = rows();
    assert!(rows.len() >= 40, "{} rows", rows.len());
    let mut wrong = Vec::new();
    for (id, places) in &tags {
        if places.len() != 1 {
            wrong.push(format!("{id}: tagged {} times: {places:?}", places.len()));
        }
        let (v, at) = &places[0];
        match (rows.get(id), v) {
            (None, _) => wrong.push(format!("{at}: {id} has no row in docs/facts.md")),
            (Some(_), None) => wrong.push(format!("{at}: {id}: no value on the tagged line")),
            (Some((row, _, _)), Some(v)) if (row - v).abs() > 1e-9 * row.abs().max(1.0) => wrong
                .push(format!(
                    "{at}: {id} is {v} in the code, {row} in docs/facts.md"
                )),
            _ => {}
        }
    }
    for id in rows.keys() {
        if !tags.contains_key(id) {
            wrong.push(format!("docs/facts.md: {id} tags no constant"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_row_has_a_kind_and_a_source_and_heuristics_say_why_they_are_safe() {
    for (id, (_, kind, source)) in rows() {
        assert!(KINDS.contains(&kind.as_str()), "{id}: kind {kind:?}");
        assert!(source.len() >= 20, "{id}: no real source: {source:?}");
        if kind == "ours" {
            assert!(
                source.contains("Why") || source.contains("no verdict"),
                "{id}: a heuristic must say why it cannot fire on a healthy node: {source}"
            );
        }
    }
}

#[test]
fn the_rules_thresholds_are_tagged() {
    let tags = tagged();
    for id in [
        "nccl.peer-median-low",
        "nccl.peer-group-min-nodes",
        "nccl.expected-low",
        "p2p.pair-node-median-low",
        "p2p.node-min-pairs",
        "probe.peak-fraction-low",
    ] {
        let places = tags.get(id).map(Vec::as_slice).unwrap_or_default();
        assert!(
            places
                .iter()
                .any(|(_, at)| at.starts_with("deploy/prometheus/rules/")),
            "{id}: not tagged in deploy/prometheus/rules: {places:?}"
        );
    }
    assert_eq!(
        rule_value("instance:x:peer_median_ratio < 0.8  "),
        Some(0.8)
    );
    assert_eq!(
        rule_value("          (count by (model, nccl_gpus) (x) >= 3)  "),
        Some(3.0)
    );
    assert_eq!(rule_value("      - record: a:b:c"), None);
}

#[test]
fn values_are_read_off_the_tagged_lines() {
    assert_eq!(value("        bf16: 989.4 * T,"), Some(989.4e12));
    assert_eq!(value("pub const X: f64 = 200e9;"), Some(200e9));
    assert_eq!(value("    (&[\"NVIDIA B200\"], 900e9),"), Some(900e9));
    assert_eq!(value("        450e9,"), Some(450e9));
    assert_eq!(value("const XID: u32 = 79;"), Some(79.0));
    assert_eq!(value("    x: something(),"), None);
}
