//! The series budget (docs/metrics.md, "Series budget"), through the real binary: at most 60
//! series per GPU (a MIG instance counting as one) by default on the simulated DGX H100 (DCGM
//! profiling and probes included, once every default probe has a result), on every built-in
//! scenario through its faults, and on the fake libnvidia-ml, the full detail profile
//! serving what the default trims (both serving the exporter's own `process_*` families),
//! `dgx_pixels_exporter_series` agreeing with the lines served, and no series with more than
//! 15 labels with every attribution option on.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use dgx_pixels_kubernetes::fake::{pod, FakeKubelet};
use dgx_pixels_kubernetes::fake_api::FakeApiServer;
use dgx_pixels_sim::{Node, Scenario};

/// The budget of issue 20.
const PER_GPU: usize = 60;
/// The budget of a simulated node with its own probe defaults, every kind (issue 44;
/// docs/metrics.md, "Series budget").
const DEMO_PER_GPU: usize = 75;
/// Mimir's default is 30 labels per series; we keep half of that.
const MAX_LABELS: usize = 15;
const WAIT: Duration = Duration::from_secs(60);

/// Families a job reports (textfiles, the simulated workload, profiler traces): their series
/// are the job's, not the exporter's per-GPU telemetry, and grow with what the job writes.
/// And the holders' series, three per pod or job on the GPU ([`HOLDER_FAMILIES`]), which
/// [`per_gpu`] counts apart.
pub(crate) fn jobs_family(name: &str) -> bool {
    [
        "dgx_pixels_workload_",
        "dgx_pixels_trace_",
        "dgx_pixels_quality_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
        || HOLDER_FAMILIES.contains(&name)
}

/// One series each per holder of a GPU (docs/metrics.md, "Series budget").
pub(crate) const HOLDER_FAMILIES: &[&str] = &[
    "dgx_pixels_gpu_pod_info",
    "dgx_pixels_gpu_hpc_job_info",
    "dgx_pixels_gpu_allocated_idle_seconds_total",
    "dgx_pixels_gpu_allocated_idle_energy_joules_total",
];

/// The value of label `name` in sample line `line`.
pub(crate) fn label(line: &str, name: &str) -> Option<String> {
    line.split(&format!("{name}=\""))
        .nth(1)
        .map(|rest| rest.split('"').next().unwrap_or_default().to_string())
}

/// Each sample line of an exposition with its metric name.
pub(crate) fn sample_lines(body: &str) -> impl Iterator<Item = (&str, &str)> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| (l.split(['{', ' ']).next().unwrap_or_default(), l))
}

/// The holders' series of each GPU uuid, and the holders (pod or job label values) they name.
pub(crate) fn holder_series(
    body: &str,
) -> BTreeMap<String, (usize, std::collections::BTreeSet<String>)> {
    let mut out: BTreeMap<String, (usize, std::collections::BTreeSet<String>)> = BTreeMap::new();
    for (name, line) in sample_lines(body) {
        if !HOLDER_FAMILIES.contains(&name) {
            continue;
        }
        if let Some(uuid) = label(line, "uuid") {
            let e = out.entry(uuid).or_default();
            e.0 += 1;
            let holder = [label(line, "pod"), label(line, "hpc_job")]
                .into_iter()
                .flatten()
                .filter(|v| !v.is_empty())
                .collect::<Vec<_>>()
                .join("/");
            e.1.insert(holder);
        }
    }
    out
}

/// Sample lines per GPU uuid, without the jobs' families. A MIG instance counts as a GPU of its
/// own: series of one (a `gpu_instance` label not empty) count under `uuid/gpu_instance`.
pub(crate) fn per_gpu(body: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (name, line) in sample_lines(body) {
        if jobs_family(name) {
            continue;
        }
        if let Some(uuid) = label(line, "uuid") {
            let key = match label(line, "gpu_instance") {
                Some(gi) if !gi.is_empty() => format!("{uuid}/{gi}"),
                _ => uuid,
            };
            *out.entry(key).or_default() += 1;
        }
    }
    out
}

pub(crate) fn samples(body: &str) -> usize {
    body.lines().filter(|l| !l.starts_with('#')).count()
}

pub(crate) fn probe_results(body: &str) -> usize {
    [
        "dgx_pixels_probe_gemm_flops{",
        "dgx_pixels_probe_bandwidth_bytes_per_second{",
        "dgx_pixels_probe_launch_latency_seconds{",
    ]
    .iter()
    .map(|p| body.lines().filter(|l| l.starts_with(p)).count())
    .sum()
}

/// A real node's default probes (the four of `ProbeKind::DAEMON_DEFAULT`, no node probes:
/// a simulated node's own defaults run every kind) run at once on every GPU, busy or not, so
/// the steady state comes fast.
pub(crate) fn eager_probes() -> tempfile::NamedTempFile {
    eager("probes = \"gemm_bf16,copy_d2d,copy_h2d,launch_latency\"\nnccl_allreduce = false\nstorage_paths = []\n")
}

/// As [`eager_probes`], with `[probes]` keys `extra` added.
pub(crate) fn eager(extra: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        f.path(),
        format!("[probes]\nduty_cycle = 1.0\nbusy_threshold = 1.0\nsettle = \"0s\"\n{extra}[collector.probes]\ninterval = \"200ms\"\n"),
    )
    .unwrap();
    f
}

/// The simulated node once every GPU has a result of each of a real node's 4 default probes.
fn simulated(detail: &str) -> String {
    let config = eager_probes();
    let d = start(&[
        "--simulate",
        "dgx-h100",
        "--config.file",
        config.path().to_str().unwrap(),
        "--metrics.detail",
        detail,
    ]);
    let (body, _) = wait_until(d.port, WAIT, |b| probe_results(b) == 8 * 4);
    assert_eq!(
        probe_results(&body),
        8 * 4,
        "the default probes never all ran:\n{body}"
    );
    body
}

#[test]
fn the_simulated_node_serves_at_most_60_series_per_gpu_and_full_detail_serves_the_rest() {
    let default = simulated("default");
    let counts = per_gpu(&default);
    assert_eq!(counts.len(), 8, "{counts:?}");
    for (uuid, n) in &counts {
        assert!(*n <= PER_GPU, "{uuid}: {n} series\n{default}");
    }
    // What the default keeps: every GPU's verdict, active throttle reasons only, the SM clock.
    assert_eq!(series(&default, "dgx_pixels_gpu_health_state").len(), 8);
    assert!(default.contains("clock=\"sm\""));
    assert!(!default.contains("clock=\"video\""));
    assert!(!default.contains("counter=\"aggregate\""));
    assert!(!default.contains("dgx_pixels_gpu_bar1_used_bytes{"));
    assert!(!default.contains("outcome=\"ok\""));
    // The row-remap flags only while set (none on this healthy node).
    assert!(!default.contains("dgx_pixels_gpu_remapped_rows_pending{"));
    assert!(!default.contains("dgx_pixels_gpu_remapped_rows_failure{"));

    let full = simulated("full");
    let full_counts = per_gpu(&full);
    for (uuid, n) in &counts {
        assert!(
            full_counts[uuid] > *n + 20,
            "{uuid}: full {}",
            full_counts[uuid]
        );
    }
    assert_eq!(series(&full, "dgx_pixels_gpu_health_state").len(), 8 * 4);
    // The exporter's own process families (docs/metrics.md, "The exporter's own process") and
    // scrape counters: node-level, one series each, in both profiles.
    for body in [&default, &full] {
        for name in dgx_pixels_metrics::catalog::STANDARD_PROCESS_NAMES {
            assert_eq!(series(body, name).len(), 1, "{name}");
        }
        assert_eq!(series(body, "dgx_pixels_exporter_scrapes_total").len(), 4);
    }
    for needle in [
        "clock=\"video\"",
        "counter=\"aggregate\"",
        "dgx_pixels_gpu_bar1_used_bytes{",
        "dgx_pixels_pcie_link_max_width{",
        "dgx_pixels_probe_duration_seconds_bucket{",
        "outcome=\"ok\"",
        "dgx_pixels_gpu_remapped_rows_pending{",
        "dgx_pixels_gpu_remapped_rows_failure{",
    ] {
        assert!(full.contains(needle), "full detail lacks {needle}");
    }
}

/// The most series any GPU of each built-in scenario serves over `window` of scrapes with the
/// probe settings of `config` (scenarios side by side).
fn most_per_gpu(
    config: &tempfile::NamedTempFile,
    window: Duration,
) -> Vec<(String, BTreeMap<String, usize>)> {
    let path = config.path().to_str().unwrap();
    scrape_builtin_scenarios(
        &["--config.file", path],
        window,
        |name, most: &mut BTreeMap<String, usize>, body| {
            for (gpu, n) in per_gpu(body) {
                let m = most.entry(gpu).or_default();
                *m = (*m).max(n);
            }
            // The holders' series, counted apart: three per holder.
            for (gpu, (n, holders)) in holder_series(body) {
                assert!(n <= 3 * holders.len(), "{name}: {gpu}: {n} for {holders:?}");
            }
        },
    )
}

/// Every built-in scenario, faults included, within the budget through its timeline (faults
/// between 3 and 12 s, XIDs whose series stay; the demo scenarios' jobs from 30 s, with their
/// processes), a real node's default probes on as above.
#[test]
fn every_builtin_scenario_serves_at_most_60_series_per_gpu_throughout() {
    let most = most_per_gpu(&eager_probes(), Duration::from_secs(40));
    for (name, counts) in &most {
        eprintln!("{name}: at most {:?} series per GPU", counts.values().max());
        assert!(!counts.is_empty(), "{name}: no GPU series");
        for (gpu, n) in counts {
            assert!(*n <= PER_GPU, "{name}: {gpu} served {n} series");
        }
    }
    // dgx-a100-mig: 8 GPUs and 10 MIG instances.
    assert_devices(
        &most,
        &[
            ("fault-health", 15),
            ("dgx-b200", 8),
            ("gb200-nvl72-tray", 4),
            ("dgx-a100-mig", 8 + 7 + 3),
        ],
    );
}

/// A simulated node's own probe defaults (every kind, `p2p_copy` with its n - 1 pair series,
/// the node probes; issue 44) cost more than a real node's: at most [`DEMO_PER_GPU`] on every
/// built-in scenario, over 45 s: every kind run on every GPU, and the jobs of `dgx-h100`,
/// `dgx-b200` and `gb200-nvl72-tray` started after their 30 s between jobs.
#[test]
fn every_builtin_scenario_with_every_probe_kind_serves_at_most_75_series_per_gpu() {
    let most = most_per_gpu(&eager(""), Duration::from_secs(45));
    for (name, counts) in &most {
        eprintln!("{name}: at most {:?} series per GPU", counts.values().max());
        assert!(!counts.is_empty(), "{name}: no GPU series");
        for (gpu, n) in counts {
            assert!(*n <= DEMO_PER_GPU, "{name}: {gpu} served {n} series");
        }
    }
    // Every kind did run (in the 30 s between jobs; the job's process then leaves the GPUs
    // alone, as on hardware): the GPUs probed most serve more than a real node's default allows.
    let h100 = &most.iter().find(|m| m.0 == "dgx-h100").unwrap().1;
    assert!(h100.values().any(|n| *n > PER_GPU), "{h100:?}");
}

/// The self-metric counts what is served, family by family, itself included.
#[test]
fn exporter_series_counts_every_served_line() {
    let body = simulated("default");
    let counted: f64 = series(&body, "dgx_pixels_exporter_series")
        .iter()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum();
    assert_eq!(counted as usize, samples(&body), "{body}");
    assert_eq!(
        value(
            &body,
            "dgx_pixels_exporter_series",
            &[("family", "dgx_pixels_gpu_health_state")]
        ),
        Some(8.0)
    );
}

#[test]
fn the_fake_nvml_node_serves_at_most_60_series_per_gpu() {
    let d = start_with_env(
        &["--nvml.library", fake_nvml_library()],
        &[
            ("FAKE_NVML_SCENARIO", "dgx-h100"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ("FAKE_NVML_TIME", "60"),
        ],
    );
    let (body, _) = wait_until(d.port, WAIT, |b| {
        series(b, "dgx_pixels_gpu_health_state").len() == 8
    });
    assert_eq!(series(&body, "dgx_pixels_gpu_health_state").len(), 8);
    let counts = per_gpu(&body);
    assert_eq!(counts.len(), 8, "{counts:?}");
    for (uuid, n) in &counts {
        assert!(*n <= PER_GPU, "{uuid}: {n} series\n{body}");
    }
    // Fast power samples are in the budget; that they are instantaneous goes without saying.
    assert!(body.contains("dgx_pixels_gpu_power_sample_watts_bucket{"));
    assert!(!body.contains("dgx_pixels_gpu_power_sample_info{"));
}

/// Every attribution option at once (node name, pods on a GPU and on a MIG instance, an HPC
/// job, MIG, the most pod labels `[kubernetes] pod_labels` takes): the longest series stays
/// within 15 labels.
#[test]
fn no_series_carries_more_than_15_labels_with_every_attribution_on() {
    let node = Node::new(Scenario::builtin("dgx-a100-mig").unwrap());
    let uuid = |i: usize| node.gpu(i).unwrap().uuid.clone();
    let mig = node.gpu(1).unwrap().mig.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let jobs = dir.path().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    for gpu in 0..8 {
        std::fs::write(jobs.join(gpu.to_string()), "4242\n").unwrap();
    }
    let kubelet = FakeKubelet::start(&socket).unwrap();
    // Every key the allow-list takes, all set on the pod.
    let keys: Vec<String> = (0..dgx_pixels_kubernetes::podlabels::keys::MAX_KEYS)
        .map(|k| format!("example.com/key-{k}"))
        .collect();
    std::fs::write(dir.path().join("token"), "t").unwrap();
    let api = FakeApiServer::start("t").unwrap();
    let labels: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
    api.set_pod("ml", "train-0", "dgx-01", &labels);
    let keys = keys.join(",");
    kubelet.set_pods(vec![
        pod("ml", "train-0", "trainer", "nvidia.com/gpu", &[&uuid(2)]),
        pod(
            "inf",
            "llm-0",
            "server",
            "nvidia.com/mig-3g.40gb",
            &[&mig[0].uuid],
        ),
    ]);
    let env = fake_nvml_at_60s_with_account("dgx-a100-mig", dir.path());
    let d = start_with_kubelet(
        &socket,
        &[
            "--node.name",
            "dgx-01",
            "--collector.kubernetes.interval",
            "200ms",
            "--hpc.job-mapping-dir",
            jobs.to_str().unwrap(),
            "--collector.hpc.interval",
            "200ms",
            "--metrics.detail",
            "full",
            "--kubernetes.pod-labels",
            &keys,
            "--kubernetes.node-name",
            "dgx-01",
            "--kubernetes.api-server",
            &api.url(),
        ],
        &env,
    );
    let attributed = |b: &str| {
        b.contains("pod=\"llm-0\"")
            && b.contains("pod=\"train-0\"")
            && b.contains("hpc_job=")
            && b.contains("label_example_com_key_7=\"v\"")
    };
    let (body, _) = wait_until(d.port, WAIT, attributed);
    assert!(attributed(&body), "{body}");
    let (most, line) = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| (l.matches("=\"").count(), l))
        .max_by_key(|(n, _)| *n)
        .unwrap();
    assert!(most <= MAX_LABELS, "{most} labels: {line}");
    // The pod info series with every pod label is that longest kind of line: exactly 15.
    let info = body
        .lines()
        .find(|l| {
            l.starts_with("dgx_pixels_gpu_pod_info{") && l.contains("label_example_com_key_0")
        })
        .unwrap();
    assert_eq!(info.matches("=\"").count(), MAX_LABELS, "{info}");
    // The attribution really is on the longest series' kind of line: a GPU info series
    // carries the node, the pod and the job.
    assert!(body.lines().any(|l| l.starts_with("dgx_pixels_gpu_info{")
        && l.contains("node=\"dgx-01\"")
        && l.contains("pod=\"train-0\"")
        && l.contains("hpc_job=\"4242\"")));
}
