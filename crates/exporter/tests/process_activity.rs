//! End to end: the real binary on the fake libnvidia-ml (dgx-a100-mig, whose GPU 4 is
//! time-sliced between two processes doing 70 % and 30 % of its work) with a fake kubelet:
//! per-process activity (`dgx_pixels_process_utilization_ratio`) on the shared GPU only, capped
//! at `[nvml] process_activity_top_k` with the rest under pid "other", and labelled with the
//! pod holding the GPU exactly as the per-process memory series are.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::time::Duration;

use common::*;
use dgx_pixels_kubernetes::fake::{pod, FakeKubelet};
use dgx_pixels_sim::{Node, Scenario};

const GPU: &str = "nvidia.com/gpu";
const WAIT: Duration = Duration::from_secs(10);
const ACTIVITY: &str = "dgx_pixels_process_utilization_ratio";

#[test]
fn a_shared_gpu_serves_its_top_process_and_the_rest_with_the_pods_labels() {
    let node = Node::new(Scenario::builtin("dgx-a100-mig").unwrap());
    let uuid = |i: usize| node.gpu(i).unwrap().uuid.clone();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[nvml]\nprocess_activity_top_k = 1\n").unwrap();
    let kubelet = FakeKubelet::start(&socket).unwrap();
    // One pod holds both time-slicing replicas of GPU 4 (its two processes: a notebook and a
    // server of one team), another the whole of GPU 2.
    kubelet.set_pods(vec![
        pod(
            "nb",
            "team-a",
            "notebook",
            GPU,
            &[&format!("{}::0", uuid(4)), &format!("{}::1", uuid(4))],
        ),
        pod("ml", "train-0", "trainer", GPU, &[&uuid(2)]),
    ]);
    let d = start_with_env(
        &[
            "--nvml.library",
            fake_nvml_library(),
            "--config.file",
            config.to_str().unwrap(),
            "--collector.kubernetes",
            "--kubernetes.pod-resources-socket",
            socket.to_str().unwrap(),
            "--collector.kubernetes.interval",
            "200ms",
        ],
        &[
            ("FAKE_NVML_SCENARIO", "dgx-a100-mig"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ("FAKE_NVML_TIME", "60"),
        ],
    );
    let team = "namespace=\"nb\",pod=\"team-a\",container=\"notebook\"";
    let (body, _) = wait_until(d.port, WAIT, |b| {
        series(b, ACTIVITY).iter().any(|l| l.contains(team))
    });
    let gpu4 = value(
        &body,
        "dgx_pixels_gpu_utilization_ratio",
        &[("uuid", &uuid(4))],
    )
    .unwrap();
    assert!(gpu4 > 0.5, "GPU 4 trains at 60 s: {gpu4}");
    let activity = series(&body, ACTIVITY);
    // Only GPU 4 (GPU 2 runs one process, GPUs 0 and 1 one per MIG instance); only SM activity
    // in the default profile; K = 1: the 70 % process, and the 30 % one as "other".
    assert_eq!(activity.len(), 2, "{activity:?}");
    for (pid, share) in [("20400", 0.7), ("other", 0.3)] {
        let line = activity
            .iter()
            .find(|l| l.contains(&format!("pid=\"{pid}\"")))
            .unwrap_or_else(|| panic!("no pid {pid}: {activity:?}"));
        assert!(line.contains(&format!("uuid=\"{}\"", uuid(4))), "{line}");
        assert!(line.contains("engine=\"sm\""), "{line}");
        // The pod holding the GPU, as on its memory series.
        assert!(line.contains(team), "{line}");
        let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        // NVML answers whole percents.
        assert!(
            (v - share * gpu4).abs() <= 0.011,
            "{line}: {share} x {gpu4}"
        );
    }
    // Both processes keep their memory series with the same labels.
    let memory: Vec<_> = series(&body, "dgx_pixels_process_memory_used_bytes")
        .into_iter()
        .filter(|l| l.contains(&format!("uuid=\"{}\"", uuid(4))))
        .collect();
    assert_eq!(memory.len(), 2, "{memory:?}");
    assert!(memory.iter().all(|l| l.contains(team)), "{memory:?}");

    // Two pods time-slice the GPU: the per-process series carry no pod (which pod a pid is
    // in, the pod-resources API does not say), and one info series names each pod.
    kubelet.set_pods(vec![
        pod(
            "nb",
            "alice",
            "notebook",
            GPU,
            &[&format!("{}::0", uuid(4))],
        ),
        pod("nb", "bob", "notebook", GPU, &[&format!("{}::1", uuid(4))]),
    ]);
    let (body, _) = wait_until(d.port, WAIT, |b| {
        b.contains("pod=\"bob\"") && !b.contains("pod=\"team-a\"")
    });
    let activity = series(&body, ACTIVITY);
    assert_eq!(activity.len(), 2, "{activity:?}");
    assert!(activity.iter().all(|l| !l.contains("pod=")), "{activity:?}");
    for p in ["alice", "bob"] {
        assert_eq!(
            value(
                &body,
                "dgx_pixels_gpu_pod_info",
                &[("uuid", &uuid(4)), ("pod", p)]
            ),
            Some(1.0)
        );
    }
    drop(kubelet);
    stop_and_logs(d);
}
