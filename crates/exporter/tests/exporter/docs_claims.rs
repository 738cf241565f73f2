//! The docs name only what exists (issue 43, "docs checked by a script"): every repository
//! path a doc names exists, every `dgx_pixels_*` metric it names is in the catalog
//! (docs/metrics.md, itself checked against the catalog) or is one of the names the docs
//! define as not served by us (workload textfile names, DCGM fields outside the catalog), every
//! dotted flag it names is in the `--help` of the binary or of a subcommand, and every
//! `[section] key` it names is a key the config parser knows.
//!
//! Each check reads the Markdown the way a reader does (code spans and prose alike) and
//! reports every finding with its file and line, so a stale doc fails CI at once.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::BIN;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every Markdown document a reader is sent to: README, CONTRIBUTING, docs/, the chart's.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs = vec![
        PathBuf::from("README.md"),
        PathBuf::from("CONTRIBUTING.md"),
        PathBuf::from("helm/dgx-pixels-exporter/README.md"),
    ];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(&root).unwrap().to_path_buf())
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

/// `(document, line number, line)` of every document.
fn lines() -> Vec<(String, usize, String)> {
    let root = root();
    documents()
        .into_iter()
        .flat_map(|doc| {
            let text = std::fs::read_to_string(root.join(&doc)).unwrap();
            let name = doc.display().to_string();
            text.lines()
                .enumerate()
                .map(|(i, l)| (name.clone(), i + 1, l.to_string()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The tokens of `line` that start with `start` at a word boundary (the character before is
/// none of `before`), continued while `part` holds.
fn tokens<'a>(
    line: &'a str,
    start: &str,
    before: impl Fn(char) -> bool,
    part: impl Fn(char) -> bool,
) -> Vec<(&'a str, Option<char>)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = line[from..].find(start) {
        let at = from + i;
        from = at + start.len();
        if line[..at].chars().next_back().is_some_and(&before) {
            continue;
        }
        let len = line[at..]
            .char_indices()
            .find(|&(_, c)| !part(c))
            .map_or(line.len() - at, |(j, _)| j);
        let token = &line[at..at + len];
        out.push((token, line[at + len..].chars().next()));
        from = at + len.max(start.len());
    }
    out
}

/// The paths `docs/examples/add-a-collector.diff` creates: the worked example names them
/// before they exist.
fn paths_the_worked_example_creates() -> BTreeSet<String> {
    let diff = std::fs::read_to_string(root().join("docs/examples/add-a-collector.diff"))
        .unwrap_or_default();
    diff.lines()
        .filter_map(|l| l.strip_prefix("+++ b/"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_repository_path_a_doc_names_exists() {
    let root = root();
    let created = paths_the_worked_example_creates();
    let prefixes = [
        "crates/",
        "deploy/",
        "helm/",
        "grafana/",
        "systemd/",
        "docs/",
        "scripts/",
        "tests/",
        "bench/",
        "examples/",
        ".ci/",
    ];
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, n, line) in lines() {
        let doc_dir = Path::new(&doc)
            .parent()
            .unwrap_or(Path::new(""))
            .to_path_buf();
        for prefix in prefixes {
            let before = |c: char| c.is_ascii_alphanumeric() || "_./-@".contains(c);
            let part = |c: char| c.is_ascii_alphanumeric() || "_./-*{}<>$".contains(c);
            for (token, _) in tokens(&line, prefix, before, part) {
                let path = token.trim_end_matches(['.', '-']);
                // Patterns and placeholders (`crates/*/src`, `NAME.rs`) name no one path.
                let placeholder = path.chars().any(|c| "*{}<>$".contains(c))
                    || path
                        .split(['/', '.'])
                        .any(|w| w.len() > 2 && w.chars().all(|c| c.is_ascii_uppercase()));
                if placeholder || path.len() <= prefix.len() {
                    continue;
                }
                checked += 1;
                let found = root.join(path).exists()
                    || root.join(&doc_dir).join(path).exists()
                    || created.contains(path.trim_end_matches('/'));
                if !found {
                    missing.push(format!("{doc}:{n}: {path}"));
                }
            }
        }
    }
    assert!(
        checked > 200,
        "only {checked} paths found: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "paths that do not exist:\n{}",
        missing.join("\n")
    );
}

/// Names the docs define as not served from the catalog: the workload textfile names jobs
/// write (docs/workloads.md's schema, served as written), DCGM fields outside the catalog
/// (served as `dgx_pixels_dcgm_<field>`), and crate names.
fn not_in_the_catalog(name: &str) -> bool {
    name.starts_with("dgx_pixels_workload_")
        || name.starts_with("dgx_pixels_quality_")
        || name.starts_with("dgx_pixels_dcgm_")
}

#[test]
fn every_metric_a_doc_names_is_in_the_catalog() {
    let metrics = std::fs::read_to_string(root().join("docs/metrics.md")).unwrap();
    let catalog: BTreeSet<&str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("| `dgx_pixels_"))
        .filter_map(|l| l.split('`').next())
        .collect();
    assert!(catalog.len() > 100, "catalog not found in docs/metrics.md");
    let known = |name: &str| {
        let bare = name.trim_start_matches("dgx_pixels_");
        catalog.contains(bare)
            || ["_bucket", "_sum", "_count", "_created"]
                .iter()
                .any(|s| bare.strip_suffix(s).is_some_and(|b| catalog.contains(b)))
    };
    let mut unknown = Vec::new();
    let mut checked = 0;
    for (doc, n, line) in lines() {
        let before = |c: char| c.is_ascii_alphanumeric() || "_:@".contains(c);
        let part = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
        for (name, next) in tokens(&line, "dgx_pixels_", before, part) {
            // A recording rule (`x:dgx_pixels_...:y`), a pattern (`dgx_pixels_mig_*`), a
            // Rust path (`dgx_pixels_settings::file`) or a bare prefix names no metric.
            if next.is_some_and(|c| ":*{".contains(c)) || name.ends_with('_') {
                continue;
            }
            checked += 1;
            if !known(name) && !not_in_the_catalog(name) {
                unknown.push(format!("{doc}:{n}: {name}"));
            }
        }
    }
    assert!(
        checked > 300,
        "only {checked} metric names found: is the scan broken?"
    );
    assert!(
        unknown.is_empty(),
        "metrics the catalog does not have:\n{}",
        unknown.join("\n")
    );
}

/// Every flag of the binary and of its subcommands, from their `--help`.
fn flags() -> BTreeSet<String> {
    let help = |args: &[&str]| {
        let out = Command::new(BIN).args(args).arg("--help").output().unwrap();
        assert!(out.status.success(), "{args:?} --help failed");
        String::from_utf8(out.stdout).unwrap()
    };
    let mut text = String::new();
    for args in [
        &[][..],
        &["docs"],
        &["probe"],
        &["probe", "run"],
        &["probe", "compare"],
        &["trace"],
        &["trace", "analyze"],
        &["trace", "compare"],
        &["npd-check"],
    ] {
        text.push_str(&help(args));
    }
    let before = |c: char| c.is_ascii_alphanumeric() || c == '-';
    let part = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c);
    text.lines()
        .flat_map(|l| tokens(l, "--", before, part))
        .map(|(t, _)| t.trim_end_matches('.').to_string())
        .collect()
}

/// Dotted flags of other tools that the docs name, with whose they are.
const OTHER_TOOLS_FLAGS: &[(&str, &str)] = &[
    ("--config.custom-plugin-monitor", "node-problem-detector's"),
    ("--web.enable-otlp-receiver", "Prometheus 3's"),
];

/// The flags `docs/examples/add-a-collector.diff` adds: the worked example names them before
/// they exist.
fn flags_the_worked_example_adds() -> BTreeSet<String> {
    let diff = std::fs::read_to_string(root().join("docs/examples/add-a-collector.diff"))
        .unwrap_or_default();
    let before = |c: char| c.is_ascii_alphanumeric() || c == '-';
    let part = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c);
    let mut flags: BTreeSet<String> = diff
        .lines()
        .filter(|l| l.starts_with('+'))
        .flat_map(|l| {
            tokens(l, "--", before, part)
                .into_iter()
                .map(|(t, _)| t.trim_end_matches(['.', '-']).to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    for line in diff.lines() {
        // A flag's descriptor, `name: "storage.max-paths",` (dotted), or the collector's own,
        // `name: "storage",`, which makes `--collector.storage`.
        if let Some(name) = line
            .trim_start_matches('+')
            .trim()
            .strip_prefix("name: \"")
            .and_then(|r| r.strip_suffix("\","))
        {
            if name.contains('.') {
                flags.insert(format!("--{name}"));
            } else {
                flags.insert(format!("--collector.{name}"));
            }
        }
    }
    flags
}

#[test]
fn every_dotted_flag_a_doc_names_is_in_help() {
    let mut flags = flags();
    flags.extend(flags_the_worked_example_adds());
    flags.extend(OTHER_TOOLS_FLAGS.iter().map(|(f, _)| f.to_string()));
    assert!(flags.contains("--web.listen-address"), "{flags:?}");
    let mut unknown = Vec::new();
    let mut checked = 0;
    for (doc, n, line) in lines() {
        let before = |c: char| c.is_ascii_alphanumeric() || "-_".contains(c);
        let part = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c);
        for (flag, next) in tokens(&line, "--", before, part) {
            let flag = flag.trim_end_matches(['.', '-']);
            // Dotted flags are ours (the Prometheus convention); other tools' flags
            // (`--hpc-job-mapping-dir` of dcgm-exporter, cargo's) have none. A flag followed
            // by `*` or `<` is a pattern.
            if flag.len() <= 2
                || !flag[2..].contains('.')
                || next.is_some_and(|c| "*<{".contains(c))
            {
                continue;
            }
            // `--no-collector.X` is the negation clap documents once, as `--[no-]collector.X`.
            let positive = flag.replacen("--no-", "--", 1);
            checked += 1;
            if !flags.contains(flag) && !flags.contains(&positive) {
                unknown.push(format!("{doc}:{n}: {flag}"));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} flags found: is the scan broken?"
    );
    assert!(
        unknown.is_empty(),
        "flags --help does not have:\n{}",
        unknown.join("\n")
    );
}

/// Whether the config parser knows `key` of `section`: it names a key it does not know as an
/// "unknown field"; a known key given a value of no type any key takes is another error.
fn knows(section: &str, key: &str) -> bool {
    let file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::fs::write(
        file.path(),
        format!("[{section}]\n{key} = {{ docs_claims_probe = 1 }}\n"),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["--config.file", file.path().to_str().unwrap()])
        .args(["--web.listen-address", "127.0.0.1:1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "[{section}] {key}: started: {stderr}"
    );
    !stderr.contains("unknown field")
}

#[test]
fn every_config_key_a_doc_names_parses() {
    let mut named = BTreeSet::new();
    for (doc, n, line) in lines() {
        let mut rest = line.as_str();
        while let Some(i) = rest.find("`[") {
            rest = &rest[i + 2..];
            let Some((section, after)) = rest.split_once("] ") else {
                break;
            };
            let key: String = after
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let section_ok = !section.is_empty()
                && section
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || "_.".contains(c));
            if section_ok && !key.is_empty() {
                named.insert((section.to_string(), key, format!("{doc}:{n}")));
            }
        }
    }
    assert!(named.len() > 20, "only {} keys found", named.len());
    let mut seen = BTreeSet::new();
    let mut unknown = Vec::new();
    for (section, key, at) in named {
        if !seen.insert((section.clone(), key.clone())) {
            continue;
        }
        if !knows(&section, &key) {
            unknown.push(format!("{at}: [{section}] {key}"));
        }
    }
    assert!(
        unknown.is_empty(),
        "config keys the parser does not know:\n{}",
        unknown.join("\n")
    );
}
