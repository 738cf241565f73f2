//! End to end: the real binary on the fake libnvidia-ml (dgx-a100-mig: GPUs 0 and 1 in MIG
//! mode, 2-7 training) with a fake kubelet on a unix socket and an HPC job directory, checked
//! through /metrics.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::time::Duration;

use common::*;
use dgx_pixels_kubernetes::fake::{pod, FakeKubelet};
use dgx_pixels_sim::{Node, Scenario};

const WAIT: Duration = Duration::from_secs(10);

fn pod_labels(ns: &str, p: &str, c: &str) -> String {
    format!("namespace=\"{ns}\",pod=\"{p}\",container=\"{c}\"")
}

#[test]
fn pods_and_jobs_label_gpu_mig_and_process_series_and_follow_changes() {
    let node = Node::new(Scenario::builtin("dgx-a100-mig").unwrap());
    let uuid = |i: usize| node.gpu(i).unwrap().uuid.clone();
    let mig = node.gpu(1).unwrap().mig.clone().unwrap();
    let (mig_uuid, mig_gi) = (mig[0].uuid.clone(), mig[0].gpu_instance.to_string());

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let jobs = dir.path().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    std::fs::write(jobs.join("3"), "4242\n").unwrap();
    let kubelet = FakeKubelet::start(&socket).unwrap();
    let mut pods = vec![
        pod("ml", "train-0", "trainer", GPU, &[&uuid(2)]),
        pod(
            "inf",
            "llm-0",
            "server",
            "nvidia.com/mig-3g.40gb",
            &[&mig_uuid],
        ),
    ];
    pods.extend(alice_and_bob(&uuid(4)));
    kubelet.set_pods(pods);

    let d = start_with_kubelet(
        &socket,
        &[
            "--collector.kubernetes.interval",
            "200ms",
            "--hpc.job-mapping-dir",
            jobs.to_str().unwrap(),
            "--collector.hpc.interval",
            "200ms",
        ],
        &fake_nvml_at_60s("dgx-a100-mig"),
    );
    let train = pod_labels("ml", "train-0", "trainer");
    let (body, _) = wait_until(d.port, WAIT, |b| {
        b.contains(&train) && b.contains("hpc_job=\"4242\"")
    });
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "kubernetes")]),
        Some(1.0)
    );
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "hpc")]),
        Some(1.0)
    );
    // A whole GPU held by one pod: its device series and its processes carry the pod.
    let power2 = series(&body, "dgx_pixels_gpu_power_watts")
        .into_iter()
        .find(|l| l.contains(&format!("uuid=\"{}\"", uuid(2))))
        .unwrap();
    assert!(
        power2.contains(&format!("uuid=\"{}\",{train}}}", uuid(2))),
        "{power2}"
    );
    let procs2: Vec<_> = series(&body, "dgx_pixels_process_memory_used_bytes")
        .into_iter()
        .filter(|l| l.contains(&format!("uuid=\"{}\"", uuid(2))))
        .collect();
    assert!(!procs2.is_empty());
    assert!(
        procs2
            .iter()
            .all(|l| l.contains("pid=\"20200\"") && l.contains(&train)),
        "{procs2:?}"
    );
    // An HPC job on GPU 3.
    let power3 = series(&body, "dgx_pixels_gpu_power_watts")
        .into_iter()
        .find(|l| l.contains(&format!("uuid=\"{}\"", uuid(3))))
        .unwrap();
    assert!(power3.ends_with(&format!(
        "hpc_job=\"4242\"}} {}",
        power3.rsplit(' ').next().unwrap()
    )));
    // A MIG instance: its mig series carry the pod; GPU 1's whole-device series do not.
    let mig_mem = series(&body, "dgx_pixels_mig_memory_used_bytes")
        .into_iter()
        .find(|l| l.contains(&format!("uuid=\"{}\",gpu_instance=\"{mig_gi}\"", uuid(1))))
        .unwrap();
    assert!(
        mig_mem.contains(&pod_labels("inf", "llm-0", "server")),
        "{mig_mem}"
    );
    assert!(series(&body, "dgx_pixels_gpu_power_watts")
        .iter()
        .any(|l| l.contains(&format!("uuid=\"{}\"}}", uuid(1)))));
    // A time-sliced GPU: both pods named by info series, the device's series unlabelled.
    assert_pod_info(&body, &uuid(4), &["alice", "bob"]);
    let power4 = series(&body, "dgx_pixels_gpu_power_watts")
        .into_iter()
        .filter(|l| l.contains(&format!("uuid=\"{}\"", uuid(4))))
        .collect::<Vec<_>>();
    assert_eq!(power4.len(), 1);
    assert!(!power4[0].contains("pod="));

    // The pod moves to GPU 5 and the job ends: labels follow within a refresh interval.
    kubelet.set_pods(vec![pod("ml", "train-0", "trainer", GPU, &[&uuid(5)])]);
    std::fs::remove_file(jobs.join("3")).unwrap();
    let (body, took) = wait_until(d.port, WAIT, |b| {
        !b.contains("hpc_job=") && b.contains(&format!("uuid=\"{}\",{train}}}", uuid(5)))
    });
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(!body.contains(&format!("uuid=\"{}\",{train}", uuid(2))));
    assert!(!body.contains("pod=\"alice\""));

    // The kubelet goes away: the scrape still answers, everything unattributed, source down.
    drop(kubelet);
    let (body, _) = wait_until(d.port, WAIT, |b| !b.contains("pod=\""));
    assert!(!body.contains("pod=\""));
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "kubernetes")]),
        Some(0.0)
    );
    assert!(series(&body, "dgx_pixels_gpu_power_watts").len() >= 8);
    let logs = stop_and_logs(d);
    // Said once, as a warning of the kubernetes source naming the socket that went away.
    let warnings: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("level=warn") && l.contains("source=kubernetes"))
        .collect();
    assert_eq!(warnings.len(), 1, "{logs}");
    assert!(
        warnings[0].contains("kind=socket_missing")
            && warnings[0].contains(&format!("socket {} does not exist", socket.display()))
            && warnings[0].contains("served unattributed"),
        "{}",
        warnings[0]
    );
}

#[test]
fn a_missing_kubelet_socket_leaves_series_unattributed() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("absent.sock");
    let d = start_with_kubelet(&socket, &[], &fake_nvml("dgx-h100"));
    let (body, _) = wait_until(d.port, WAIT, |b| {
        value(b, "dgx_pixels_source_up", &[("source", "kubernetes")]) == Some(0.0)
            && value(b, "dgx_pixels_source_up", &[("source", "nvml")]) == Some(1.0)
    });
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "kubernetes")]),
        Some(0.0)
    );
    assert_eq!(series(&body, "dgx_pixels_gpu_power_watts").len(), 8);
    let logs = stop_and_logs(d);
    assert!(logs.contains("does not exist"), "{logs}");
}

/// Issue 33: a pod that got its GPUs through Dynamic Resource Allocation (NVIDIA's DRA driver,
/// device names gpu-N) is labelled as a device-plugin pod is; a claim of another driver names
/// no GPU.
#[test]
fn pods_holding_gpus_through_dra_claims_label_them_like_device_plugin_pods() {
    use dgx_pixels_kubernetes::fake::dra_pod;
    let uuid = uuid_of("dgx-h100");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let kubelet = FakeKubelet::start(&socket).unwrap();
    kubelet.set_pods(vec![
        dra_pod(
            "ml",
            "dra-train",
            "trainer",
            "gpus",
            "gpu.nvidia.com",
            &["gpu-5", "gpu-6"],
        ),
        dra_pod("net", "nic", "app", "nic", "example.com/nic", &["gpu-7"]),
        pod("ml", "classic", "main", GPU, &[&uuid(1)]),
    ]);
    let d = start_with_kubelet(
        &socket,
        &["--collector.kubernetes.interval", "200ms"],
        &fake_nvml("dgx-h100"),
    );
    let dra = pod_labels("ml", "dra-train", "trainer");
    let (body, _) = wait_until(d.port, WAIT, |b| b.contains(&dra));
    let power_of = |gpu: usize| {
        series(&body, "dgx_pixels_gpu_power_watts")
            .into_iter()
            .find(|l| l.contains(&format!("uuid=\"{}\"", uuid(gpu))))
            .unwrap()
            .to_string()
    };
    for gpu in [5, 6] {
        assert!(power_of(gpu).contains(&dra), "GPU {gpu}: {}", power_of(gpu));
        assert_pod_info(&body, &uuid(gpu), &["dra-train"]);
    }
    assert!(power_of(1).contains(&pod_labels("ml", "classic", "main")));
    assert!(
        !power_of(7).contains("pod=\"nic\""),
        "another driver's claim"
    );
    assert!(!body.contains("pod=\"nic\""));
}

/// `[kubernetes] dra_drivers` replaces the list of DRA drivers whose claims are GPUs: another
/// vendor's GPU driver counts once listed, and NVIDIA's no longer does when left out.
#[test]
fn the_dra_driver_list_decides_whose_claims_are_gpus() {
    use dgx_pixels_kubernetes::fake::dra_pod;
    let uuid = uuid_of("dgx-h100");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[kubernetes]\ndra_drivers = [\"gpu.example.com\"]\n",
    )
    .unwrap();
    let kubelet = FakeKubelet::start(&socket).unwrap();
    kubelet.set_pods(vec![
        dra_pod("ml", "nv", "trainer", "gpus", "gpu.nvidia.com", &["gpu-5"]),
        dra_pod(
            "ml",
            "other",
            "trainer",
            "gpus",
            "gpu.example.com",
            &["gpu-6"],
        ),
    ]);
    let d = start_with_kubelet(
        &socket,
        &[
            "--config.file",
            config.to_str().unwrap(),
            "--collector.kubernetes.interval",
            "200ms",
        ],
        &fake_nvml("dgx-h100"),
    );
    let other = pod_labels("ml", "other", "trainer");
    let (body, _) = wait_until(d.port, WAIT, |b| b.contains(&other));
    let power6 = series(&body, "dgx_pixels_gpu_power_watts")
        .into_iter()
        .find(|l| l.contains(&format!("uuid=\"{}\"", uuid(6))))
        .unwrap();
    assert!(power6.contains(&other), "{power6}");
    assert!(!body.contains("pod=\"nv\""), "gpu.nvidia.com is not listed");
    drop(kubelet);
    stop_and_logs(d);
}

/// The daemon's peak and current resident memory, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    (kib("VmHWM:"), kib("VmRSS:"))
}

/// Regression (hardening round 4, item 13): 20,000 pods holding time-sliced replicas of the
/// node's GPUs made 20,000 `dgx_pixels_gpu_pod_info` series and the daemon's RSS went past
/// the chart's 128 MiB limit. Now at most 64 per device and 1024 in all are served, the rest
/// counted in `dgx_pixels_source_series_dropped_total`, and memory stays well under the
/// limit. The numbers are printed (run with --nocapture) for docs/security.md.
#[test]
fn twenty_thousand_pods_are_capped_counted_and_fit_the_chart() {
    const PODS: usize = 20_000;
    let uuid = uuid_of("dgx-a100-mig");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let kubelet = FakeKubelet::start(&socket).unwrap();
    let pods: Vec<_> = (0..PODS)
        .map(|i| {
            let gpu = 2 + i % 6; // the six GPUs not in MIG mode
            let replica = format!("{}::{}", uuid(gpu), i / 6);
            pod(
                &format!("team-{}", i % 50),
                &format!("notebook-{i:05}-with-a-realistic-generated-suffix"),
                "notebook",
                GPU,
                &[&replica],
            )
        })
        .collect();
    kubelet.set_pods(pods);
    let d = start_with_kubelet(
        &socket,
        &[
            "--collector.kubernetes.interval",
            "500ms",
            "--kubernetes.device-checkpoint=",
        ],
        &fake_nvml_at_60s("dgx-a100-mig"),
    );
    let dropped = |b: &str| {
        value(
            b,
            "dgx_pixels_source_series_dropped_total",
            &[
                ("source", "kubernetes"),
                ("family", "dgx_pixels_gpu_pod_info"),
            ],
        )
    };
    let (body, _) = wait_until(d.port, Duration::from_secs(30), |b| {
        dropped(b).is_some_and(|n| n > 0.0)
    });
    let info = series(&body, "dgx_pixels_gpu_pod_info").len();
    // Six GPUs, 64 holders each.
    assert_eq!(info, 6 * 64, "pod info series");
    let first = dropped(&body).unwrap();
    assert!(first >= (PODS - 6 * 64) as f64, "{first}");
    // Several more polls and scrapes, then the peak.
    let mut last = body;
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(500));
        last = text(d.port);
    }
    assert!(dropped(&last).unwrap() > first, "a counter: each poll adds");
    let (hwm, rss) = memory_kib(d.child.id());
    let lines = last.lines().filter(|l| !l.starts_with('#')).count();
    println!(
        "{PODS} pods: {info} pod_info series, {lines} series in all, RSS {rss} kB, HWM {hwm} kB"
    );
    // The chart's limit is 128 MiB; keep half of it for everything else a node runs.
    assert!(hwm < 96 * 1024, "peak RSS {hwm} kB");
    drop(kubelet);
    stop_and_logs(d);
}
