//! End to end: the real binary on the fake libnvidia-ml (dgx-a100-mig, whose GPU 4 is
//! time-sliced between two processes doing 70 % and 30 % of its work, and GPU 5 shared through
//! MPS by two clients doing 60 % and 40 %) with a fake kubelet:
//! per-process activity (`dgx_pixels_process_utilization_ratio`) on the shared GPUs only, capped
//! at `[nvml] process_activity_top_k` with the rest under pid "other", and labelled with the
//! pod holding the GPU exactly as the per-process memory series are; with two pods on the GPU,
//! each process labelled with its own pod through its cgroup's pod UID and the kubelet's
//! device checkpoint; a checkpoint that cannot be read counted, the source up.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::time::Duration;

use common::*;
use dgx_pixels_kubernetes::fake::{pod, FakeKubelet};

const WAIT: Duration = Duration::from_secs(10);
const ACTIVITY: &str = "dgx_pixels_process_utilization_ratio";

#[test]
fn a_shared_gpu_serves_its_top_process_and_the_rest_with_the_pods_labels() {
    let uuid = uuid_of("dgx-a100-mig");
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
    let d = start_with_kubelet(
        &socket,
        &[
            "--config.file",
            config.to_str().unwrap(),
            "--collector.kubernetes.interval",
            "200ms",
            // Empty: off (the kubelet's path does not exist here anyway).
            "--kubernetes.device-checkpoint=",
        ],
        &fake_nvml_at_60s("dgx-a100-mig"),
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
    // Only GPUs 4 and 5 (GPU 2 runs one process, GPUs 0 and 1 one per MIG instance); only SM
    // activity in the default profile; K = 1: on GPU 4 the 70 % process, and the 30 % one as
    // "other".
    assert_eq!(series(&body, ACTIVITY).len(), 4);
    let activity = on(&body, &uuid(4));
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

    // Two pods time-slice the GPU and the device checkpoint is off: the per-process series
    // carry no pod (which pod a pid is in, the pod-resources API does not say), and one info
    // series names each pod.
    kubelet.set_pods(alice_and_bob(&uuid(4)).into());
    let (body, _) = wait_until(d.port, WAIT, |b| {
        b.contains("pod=\"bob\"") && !b.contains("pod=\"team-a\"")
    });
    let activity = on(&body, &uuid(4));
    assert_eq!(activity.len(), 2, "{activity:?}");
    assert!(activity.iter().all(|l| !l.contains("pod=")), "{activity:?}");
    assert_pod_info(&body, &uuid(4), &["alice", "bob"]);
    drop(kubelet);
    stop_and_logs(d);
}

/// The activity series of the GPU with `uuid`.
fn on<'a>(body: &'a str, uuid: &str) -> Vec<&'a str> {
    series(body, ACTIVITY)
        .into_iter()
        .filter(|l| l.contains(&format!("uuid=\"{uuid}\"")))
        .collect()
}

const CONTAINER: &str = "3f4c9a2b1d0e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a";

/// The pod series labels of `pod` in namespace nb, container notebook.
fn notebook(pod: &str) -> String {
    format!("namespace=\"nb\",pod=\"{pod}\",container=\"notebook\"")
}

/// A process of a shared GPU and the pod it runs in.
struct Shared {
    gpu: usize,
    pid: u32,
    uid: String,
    pod: &'static str,
    share: f64,
}

/// GPU 4's two time-sliced processes and GPU 5's two MPS clients, each in a pod of its own.
fn shared_procs() -> [Shared; 4] {
    // The simulator's pods of the processes, as the fixture procfs and the kubelet give them.
    let shared = |gpu: usize, replica: usize, pod, share| {
        let base = dgx_pixels_sim::process_id(gpu as u64);
        Shared {
            gpu,
            pid: base + replica as u32,
            uid: dgx_pixels_sim::shared_pod_uid(base, replica),
            pod,
            share,
        }
    };
    [
        shared(4, 0, "alice", 0.7),
        shared(4, 1, "bob", 0.3),
        shared(5, 0, "carol", 0.6),
        shared(5, 1, "dave", 0.4),
    ]
}

/// The cgroup of a process in its pod's container: the first of each GPU under the systemd
/// cgroup driver, the second under cgroupfs.
fn in_its_pod(p: &Shared) -> String {
    if p.pid % 2 == 0 {
        format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CONTAINER}.scope\n",
            p.uid.replace('-', "_")
        )
    } else {
        format!("0::/kubepods/besteffort/pod{}/crio-{CONTAINER}\n", p.uid)
    }
}

/// The daemon on the fake NVML with a fixture procfs giving each of `procs` the cgroup
/// `cgroup` says, and a fake kubelet whose pods each hold one replica of their GPU (with the
/// device checkpoint at `dir`/kubelet_internal_checkpoint).
fn start_shared(
    dir: &std::path::Path,
    procs: &[Shared],
    cgroup: impl Fn(&Shared) -> String,
) -> (Daemon, FakeKubelet) {
    let uuid = uuid_of("dgx-a100-mig");
    let socket = dir.join("kubelet.sock");
    let checkpoint = dir.join("kubelet_internal_checkpoint");
    let procfs = dir.join("proc");
    for p in procs {
        let pid = p.pid.to_string();
        std::fs::create_dir_all(procfs.join(&pid)).unwrap();
        std::fs::write(procfs.join(&pid).join("cgroup"), cgroup(p)).unwrap();
    }
    let kubelet = FakeKubelet::start(&socket).unwrap();
    // Each pod holds one replica of its GPU (time-slicing and MPS replicas look alike to the
    // kubelet: `UUID::N`).
    let devices: Vec<String> = procs
        .iter()
        .map(|p| format!("{}::{}", uuid(p.gpu), p.pid % 2))
        .collect();
    kubelet
        .set_pods_with_checkpoint(
            &checkpoint,
            procs
                .iter()
                .zip(&devices)
                .map(|(p, dev)| (p.uid.as_str(), pod("nb", p.pod, "notebook", GPU, &[dev])))
                .collect(),
        )
        .unwrap();
    // The default K (3) serves every process.
    let d = start_with_kubelet(
        &socket,
        &[
            "--path.procfs",
            procfs.to_str().unwrap(),
            "--kubernetes.device-checkpoint",
            checkpoint.to_str().unwrap(),
            "--collector.kubernetes.interval",
            "200ms",
        ],
        &fake_nvml_at_60s("dgx-a100-mig"),
    );
    (d, kubelet)
}

#[test]
fn pods_sharing_a_gpu_each_label_their_own_processes() {
    let uuid = uuid_of("dgx-a100-mig");
    let procs = shared_procs();
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("kubelet_internal_checkpoint");
    let (d, kubelet) = start_shared(dir.path(), &procs, in_its_pod);
    let labelled = |b: &str| {
        let a = series(b, ACTIVITY);
        procs
            .iter()
            .all(|p| a.iter().any(|l| l.contains(&notebook(p.pod))))
    };
    let (body, _) = wait_until(d.port, WAIT, labelled);
    let activity = series(&body, ACTIVITY);
    assert_eq!(activity.len(), 4, "{activity:?}");
    for p in &procs {
        let gpu = value(
            &body,
            "dgx_pixels_gpu_utilization_ratio",
            &[("uuid", &uuid(p.gpu))],
        )
        .unwrap();
        let line = activity
            .iter()
            .find(|l| l.contains(&format!("pid=\"{}\"", p.pid)))
            .unwrap_or_else(|| panic!("no pid {}: {activity:?}", p.pid));
        assert!(
            line.contains(&format!("uuid=\"{}\"", uuid(p.gpu))),
            "{line}"
        );
        assert!(line.contains(&format!("pod_uid=\"{}\"", p.uid)), "{line}");
        assert!(
            line.contains(&format!("container_id=\"{CONTAINER}\"")),
            "{line}"
        );
        assert!(line.contains(&notebook(p.pod)), "{line}");
        let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(
            (v - p.share * gpu).abs() <= 0.011,
            "{line}: {} x {gpu}",
            p.share
        );
        // Its memory series, the same pod.
        let memory = series(&body, "dgx_pixels_process_memory_used_bytes")
            .into_iter()
            .find(|l| l.contains(&format!("pid=\"{}\"", p.pid)))
            .unwrap_or_else(|| panic!("no memory series for {}", p.pid));
        assert!(memory.contains(&notebook(p.pod)), "{memory}");
    }
    // A GPU's own series are both its pods' at once: no pod labels, one info series per pod.
    for (gpu, pods) in [(4, ["alice", "bob"]), (5, ["carol", "dave"])] {
        let util: Vec<_> = series(&body, "dgx_pixels_gpu_utilization_ratio")
            .into_iter()
            .filter(|l| l.contains(&uuid(gpu)))
            .collect();
        assert!(util.iter().all(|l| !l.contains("pod=")), "{util:?}");
        assert_pod_info(&body, &uuid(gpu), &pods);
    }

    // Without the checkpoint nothing is guessed: the processes lose their pods, the source
    // stays up.
    std::fs::remove_file(&checkpoint).unwrap();
    let (body, _) = wait_until(d.port, WAIT, |b| {
        let a = series(b, ACTIVITY);
        a.len() == 4 && a.iter().all(|l| !l.contains("pod="))
    });
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "kubernetes")]),
        Some(1.0)
    );
    // Each failed read counts, by reason.
    let missing = value(
        &body,
        "dgx_pixels_source_read_errors_total",
        &[("source", "kubernetes"), ("reason", "checkpoint_read")],
    )
    .unwrap();
    assert!(missing >= 1.0, "{missing}");
    drop(kubelet);
    let logs = stop_and_logs(d);
    assert!(logs.contains("kubelet device checkpoint"), "{logs}");
}

/// Regression (hardening round 4, item 6): the pod UID was the innermost `pod<UUID>` anywhere
/// in /proc/PID/cgroup. Alice's process in a child cgroup of her container named after Bob's
/// pod was billed to Bob, and so was a host process under a user's session; now only the
/// kubelet's pod level names a pod, and neither gets any pod's labels (their GPUs are shared,
/// so the device's rule gives none either) while Bob's and Dave's own processes keep theirs.
#[test]
fn a_pod_named_in_a_cgroup_anyone_can_make_labels_nothing() {
    let procs = shared_procs();
    let (bob, dave) = (procs[1].uid.clone(), procs[3].uid.clone());
    let forged = move |p: &Shared| {
        match p.pod {
        // Alice's container, with a child cgroup she made and named after Bob's pod.
        "alice" => format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CONTAINER}.scope/pod{bob}\n",
            p.uid.replace('-', "_")
        ),
        // Not in a pod at all: a user's session, a cgroup named after Dave's pod.
        "carol" => format!(
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/kubepods-besteffort-pod{}.slice/job.scope\n",
            dave.replace('-', "_")
        ),
        _ => in_its_pod(p),
    }
    };
    let dir = tempfile::tempdir().unwrap();
    let (d, kubelet) = start_shared(dir.path(), &procs, forged);
    let (body, _) = wait_until(d.port, WAIT, |b| {
        let a = series(b, ACTIVITY);
        a.len() == 4
            && a.iter().any(|l| l.contains(&notebook("bob")))
            && a.iter().any(|l| l.contains(&notebook("dave")))
    });
    for family in [ACTIVITY, "dgx_pixels_process_memory_used_bytes"] {
        for p in &procs {
            let line = series(&body, family)
                .into_iter()
                .find(|l| l.contains(&format!("pid=\"{}\"", p.pid)))
                .unwrap_or_else(|| panic!("no {family} for pid {}", p.pid));
            match p.pod {
                "alice" | "carol" => {
                    assert!(line.contains("pod_uid=\"\""), "{line}");
                    assert!(!line.contains("pod=\""), "{line}");
                }
                own => {
                    assert!(line.contains(&format!("pod_uid=\"{}\"", p.uid)), "{line}");
                    assert!(line.contains(&notebook(own)), "{line}");
                }
            }
        }
    }
    // Alice's process is still in her container.
    let alice = series(&body, ACTIVITY)
        .into_iter()
        .find(|l| l.contains(&format!("pid=\"{}\"", procs[0].pid)))
        .unwrap();
    assert!(
        alice.contains(&format!("container_id=\"{CONTAINER}\"")),
        "{alice}"
    );
    drop(kubelet);
    stop_and_logs(d);
}
