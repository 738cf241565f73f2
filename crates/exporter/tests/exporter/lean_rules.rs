//! The lean profile against the shipped rules (`deploy/prometheus/rules`) and the Fleet
//! dashboard (`grafana/dashboards/dgx-pixels-fleet.json`), through the real binary: every series
//! they select is served at lean wherever the default would serve it (issue 47; docs/metrics.md,
//! "Series budget").
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;
use crate::lean_profile::{identities, identity, labels};
use crate::series_budget::sample_lines;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use dgx_pixels_kubernetes::fake::{pod, FakeKubelet};
use dgx_pixels_sim::{Node, Scenario};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A label matcher of a selector: label, operator, value.
type Matcher = (String, &'static str, String);

/// A series selector the rules or the dashboard read: a metric name and the matchers whose
/// value is a literal (template placeholders such as `%q` are left out).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Selector {
    name: String,
    matchers: Vec<Matcher>,
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m: Vec<String> = self
            .matchers
            .iter()
            .map(|(l, op, v)| format!("{l}{op}\"{v}\""))
            .collect();
        write!(f, "{}{{{}}}", self.name, m.join(","))
    }
}

/// Every selector of an exporter metric in `text` (PromQL, or prose that names a metric: a
/// description's "see dgx_pixels_..." counts). Recorded series (`level:metric:operation`)
/// are the rules' own outputs, not inputs.
fn selectors(text: &str) -> Vec<Selector> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let next = ["dgx_pixels_", "process_"]
            .iter()
            .filter_map(|p| rest.find(p))
            .min();
        let Some(pos) = next else { break };
        let start = i + pos;
        let end = start
            + text[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(text.len() - start);
        i = end;
        // A bare prefix (`process_*` in a comment) names nothing.
        let bare = ["dgx_pixels_", "process_"].contains(&&text[start..end]);
        if bare || (start > 0 && word(bytes[start - 1])) || (end < text.len() && bytes[end] == b':')
        {
            continue;
        }
        let name = text[start..end].to_string();
        let mut matchers = Vec::new();
        if text[end..].starts_with('{') {
            if let Some(close) = text[end..].find('}') {
                for part in text[end + 1..end + close].split(',') {
                    let Some((label, op, value)) = ["!=", "=~", "!~", "="].iter().find_map(|op| {
                        part.split_once(op)
                            .map(|(l, v)| (l.trim().to_string(), *op, v.trim()))
                    }) else {
                        continue;
                    };
                    let value = value.replace("\\\"", "\"");
                    if let Some(v) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                        matchers.push((label, op, v.to_string()));
                    }
                }
                i = end + close;
            }
        }
        matchers.sort();
        out.push(Selector { name, matchers });
    }
    out
}

/// What the rules files and the Fleet dashboard's queries select, deduplicated.
fn referenced() -> BTreeSet<Selector> {
    let mut out = BTreeSet::new();
    let mut rules = 0;
    for entry in std::fs::read_dir(root().join("deploy/prometheus/rules")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        out.extend(selectors(&text));
        rules += 1;
    }
    assert!(rules >= 2, "rules files found: {rules}");
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("grafana/dashboards/dgx-pixels-fleet.json")).unwrap(),
    )
    .unwrap();
    fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            serde_json::Value::Object(o) => o.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }
    let mut texts = Vec::new();
    strings(&dashboard, &mut texts);
    for t in texts {
        out.extend(selectors(&t));
    }
    out
}

/// Whether the series `identity` (a sample line without its value) matches `sel`. A regular
/// expression that is not a plain alternation of names (a Grafana variable such as `$node`)
/// matches anything.
fn matches(sel: &Selector, identity: &str) -> bool {
    if identity.split('{').next() != Some(sel.name.as_str()) {
        return false;
    }
    let labels = labels(identity);
    sel.matchers.iter().all(|(label, op, want)| {
        let have = labels
            .iter()
            .find(|(k, _)| k == label)
            .map(|(_, v)| v.as_str())
            .unwrap_or("");
        let plain = want
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|');
        let alternatives = || want.split('|').any(|w| w == have);
        match *op {
            "=" => have == want,
            "!=" => have != want,
            "=~" => !plain || alternatives(),
            "!~" => !plain || !alternatives(),
            _ => unreachable!(),
        }
    })
}

#[test]
fn the_selector_parser_reads_names_and_literal_matchers() {
    let sels = selectors(
        "rate(dgx_pixels_gpu_ecc_errors_total{error_type=\"uncorrected\", counter=\"volatile\"}[10m]) \
         * on (uuid) gpu:dgx_pixels_gpu_energy_joules:rate5m \
         printf \"dgx_pixels_gpu_xid_info{instance=%q,uuid=%q}\" process_open_fds \
         x_dgx_pixels_not_a_name # the process_* families",
    );
    let shown: Vec<String> = sels.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "dgx_pixels_gpu_ecc_errors_total{counter=\"volatile\",error_type=\"uncorrected\"}",
            "dgx_pixels_gpu_xid_info{}",
            "process_open_fds{}",
        ]
    );
    let line =
        "dgx_pixels_gpu_throttle_reason{gpu=\"0\",uuid=\"U\",reason=\"hw_thermal_slowdown\"}";
    let thermal = selectors(
        "dgx_pixels_gpu_throttle_reason{reason=~\"hw_thermal_slowdown|sw_thermal_slowdown\", node=~\"$node\"}",
    );
    assert!(matches(&thermal[0], line));
    assert!(!matches(
        &selectors("dgx_pixels_gpu_throttle_reason{reason=\"gpu_idle\"}")[0],
        line
    ));
}

/// A daemon configuration the rules test runs at lean and at full side by side.
struct Run {
    name: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// The catalog row of each sample name (a histogram's `_bucket`, `_sum` and `_count` too).
fn rows() -> BTreeMap<String, dgx_pixels_metrics::catalog::Metric> {
    use dgx_pixels_metrics::catalog::{Kind, CATALOG};
    let mut out = BTreeMap::new();
    for def in CATALOG {
        out.insert(def.name.to_string(), def.metric);
        if def.kind == Kind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                out.insert(format!("{}{suffix}", def.name), def.metric);
            }
        }
    }
    out
}

/// The series of a full-detail exposition that the default profile would serve of the same
/// readings (the catalog's own policy, `serves`; a family outside the catalog, a job's, is
/// served by every profile): what the shipped rules are written against, since the default's
/// series that come and go read as 0 when absent (docs/metrics.md, "Series budget").
fn default_of_full(
    body: &str,
    rows: &BTreeMap<String, dgx_pixels_metrics::catalog::Metric>,
) -> BTreeSet<String> {
    use dgx_pixels_metrics::catalog::{serves, Detail};
    sample_lines(body)
        .filter(|(name, line)| {
            let Some(metric) = rows.get(*name) else {
                return true;
            };
            let labels = labels(line);
            let value = line
                .rsplit_once(' ')
                .and_then(|(_, v)| v.parse::<f64>().ok())
                .unwrap_or(1.0);
            serves(
                Detail::Default,
                *metric,
                |n| labels.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str()),
                value,
            )
        })
        .map(|(_, line)| identity(line))
        .collect()
}

/// What each run served over `window`, scraped every 1.5 s: the full daemon's series that the
/// default profile would serve of them ([`default_of_full`]), and the lean daemon's series. The
/// lean daemon is scraped 60 s longer, for what comes late on a loaded machine (the first
/// trace analysis, a probe round: 20 s once fell short of fault-ecc's first trace analysis
/// with the exporter's tests on 6 threads), which only ever adds to what lean is found to serve.
fn served_by_run(
    runs: &[Run],
    window: Duration,
) -> Vec<(String, BTreeSet<String>, BTreeSet<String>)> {
    let rows = rows();
    std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .flat_map(|run| ["full", "lean"].map(move |p| (run, p)))
            .map(|(run, p)| {
                let rows = &rows;
                s.spawn(move || {
                    let mut args: Vec<&str> = run.args.iter().map(String::as_str).collect();
                    args.extend(["--metrics.detail", p]);
                    let env: Vec<(&str, &str)> = run
                        .env
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    let d = start_with_env(&args, &env);
                    let mut seen = BTreeSet::new();
                    let extra = if p == "lean" {
                        Duration::from_secs(60)
                    } else {
                        Duration::ZERO
                    };
                    let until = Instant::now() + window + extra;
                    while Instant::now() < until {
                        let body = text(d.port);
                        if p == "full" {
                            seen.extend(default_of_full(&body, rows));
                        } else {
                            seen.extend(identities(&body));
                        }
                        std::thread::sleep(Duration::from_millis(1500));
                    }
                    seen
                })
            })
            .collect();
        let mut results = handles.into_iter().map(|h| h.join().unwrap());
        runs.iter()
            .map(|run| {
                let full = results.next().unwrap();
                let lean = results.next().unwrap();
                (run.name.clone(), full, lean)
            })
            .collect()
    })
}

/// Every series the shipped rules and the Fleet dashboard select is served at lean wherever
/// full serves it: every built-in scenario (faults, MIG, GB200 fabric, rails), the simulated
/// DGX H100 with every probe kind, textfiles (an LLM server's families, a broken file), an
/// expected GPU count the node misses, and the fake libnvidia-ml with a pod on a GPU and the
/// fake DCGM with a stalled field (stale readings). A selector full serves nowhere here is
/// not lean's fault; the list of those is pinned below, so it cannot grow unnoticed.
#[test]
fn every_series_the_rules_and_the_fleet_dashboard_read_is_served_at_lean() {
    let wanted = referenced();
    assert!(wanted.len() > 60, "{} selectors", wanted.len());

    let dir = tempfile::tempdir().unwrap();
    // Textfiles: an LLM server's families and a job's end (the Fleet dashboard's annotations),
    // and a file that fails validation (DgxPixelsTextfileError).
    let textfiles = dir.path().join("textfiles");
    std::fs::create_dir(&textfiles).unwrap();
    std::fs::write(
        textfiles.join("llm.prom"),
        "# TYPE dgx_pixels_workload_output_tokens_total counter\n\
         dgx_pixels_workload_output_tokens_total{uuid=\"GPU-x\",model=\"m\"} 10\n\
         # TYPE dgx_pixels_workload_time_to_first_token_seconds histogram\n\
         dgx_pixels_workload_time_to_first_token_seconds_bucket{model=\"m\",le=\"+Inf\"} 1\n\
         dgx_pixels_workload_time_to_first_token_seconds_sum{model=\"m\"} 0.1\n\
         dgx_pixels_workload_time_to_first_token_seconds_count{model=\"m\"} 1\n\
         # TYPE dgx_pixels_workload_time_per_output_token_seconds histogram\n\
         dgx_pixels_workload_time_per_output_token_seconds_bucket{model=\"m\",le=\"+Inf\"} 1\n\
         dgx_pixels_workload_time_per_output_token_seconds_sum{model=\"m\"} 0.01\n\
         dgx_pixels_workload_time_per_output_token_seconds_count{model=\"m\"} 1\n\
         # TYPE dgx_pixels_workload_job_end_timestamp_seconds gauge\n\
         dgx_pixels_workload_job_end_timestamp_seconds{job_id=\"j\"} 1700000000\n",
    )
    .unwrap();
    std::fs::write(textfiles.join("broken.prom"), "not a metric{\n").unwrap();
    // The simulated DGX H100 with every probe kind at once, a trace every 5 s, and 9 GPUs
    // expected of its 8 (the node verdict).
    let config = dir.path().join("h100.toml");
    std::fs::write(
        &config,
        "[probes]\nduty_cycle = 1.0\nbusy_threshold = 1.0\nsettle = \"0s\"\n\
         [collector.probes]\ninterval = \"200ms\"\n\
         [health]\nexpected_gpus = 9\n\
         [simulation]\ntrace_period = \"5s\"\n",
    )
    .unwrap();
    // The fake NVML with a pod on GPU 2 (dgx_pixels_gpu_pod_info) and the fake DCGM, whose SM
    // activity stops updating after 1 s (dgx_pixels_gpu_stale_readings).
    let socket = dir.path().join("kubelet.sock");
    let kubelet = FakeKubelet::start(&socket).unwrap();
    let node = Node::new(Scenario::builtin("dgx-h100").unwrap());
    kubelet.set_pods(vec![pod(
        "ml",
        "train-0",
        "trainer",
        "nvidia.com/gpu",
        &[&node.gpu(2).unwrap().uuid],
    )]);

    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut runs = vec![
        Run {
            name: "dgx-h100 (every probe, textfiles, 9 GPUs expected)".into(),
            args: s(&[
                "--simulate",
                "dgx-h100",
                "--config.file",
                config.to_str().unwrap(),
                "--textfile.directory",
                textfiles.to_str().unwrap(),
            ]),
            env: vec![],
        },
        Run {
            name: "fake NVML (no XID events) and DCGM, a pod".into(),
            args: s(&[
                "--nvml.library",
                fake_nvml_library(),
                "--collector.dcgm",
                "--dcgm.library",
                fake_dcgm_library(),
                "--collector.dcgm.interval",
                "200ms",
                "--collector.kubernetes",
                "--kubernetes.pod-resources-socket",
                socket.to_str().unwrap(),
                "--collector.kubernetes.interval",
                "200ms",
            ]),
            env: [
                ("FAKE_NVML_SCENARIO", "dgx-h100"),
                ("FAKE_NVML_PCIE_DELAY_MS", "0"),
                ("FAKE_NVML_TIME", "60"),
                ("FAKE_DCGM_TIME", "60"),
                ("FAKE_DCGM_STALL_FIELDS", "1002"),
                ("FAKE_DCGM_STALL_AFTER", "1"),
                // No XID events: the verdict is unknown (xid_unobserved).
                ("FAKE_NVML_XID_EVENTS", "0"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        },
    ];
    for name in dgx_pixels_sim::BUILTIN_SCENARIOS {
        if *name != "dgx-h100" {
            runs.push(Run {
                name: name.to_string(),
                args: s(&["--simulate", name]),
                env: vec![],
            });
        }
    }
    let served = served_by_run(&runs, Duration::from_secs(45));
    drop(kubelet);

    let mut dropped = Vec::new();
    let mut unreached = Vec::new();
    for sel in &wanted {
        let mut reached = false;
        for (run, full, lean) in &served {
            if full.iter().any(|id| matches(sel, id)) {
                reached = true;
                if !lean.iter().any(|id| matches(sel, id)) {
                    dropped.push(format!("{sel} ({run})"));
                }
            }
        }
        if !reached {
            unreached.push(sel.to_string());
        }
    }
    assert!(
        dropped.is_empty(),
        "the rules or the Fleet dashboard read what lean does not serve:\n{}",
        dropped.join("\n")
    );
    // Selectors no run here reaches even at full detail (not lean's fault): each is a state
    // neither the simulator nor the fakes enter. A fabric registration that completed with an
    // error (the simulator's fabric faults leave it in progress, whose status reads success);
    // lean serves every dgx_pixels_gpu_fabric_state_info series the default does, and the
    // in-progress one is checked above through state!="completed".
    let expected_unreached: &[&str] = &["dgx_pixels_gpu_fabric_state_info{status!=\"success\"}"];
    assert_eq!(
        unreached, expected_unreached,
        "selectors full serves nowhere here"
    );
}
