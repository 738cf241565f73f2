#![allow(clippy::unwrap_used)]
//! The pod-resources source against a fake kubelet: a real tonic server of our API definition
//! on a temporary unix socket, joined with NVML-like series through the snapshot store.

use std::time::Duration;

use dgx_pixels_exposition::{EncodeOptions, Format, SnapshotStore};
use dgx_pixels_kubernetes::fake::{pod, FakeKubelet};
use dgx_pixels_kubernetes::{PodResourcesOptions, PodResourcesSource};
use dgx_pixels_metrics::{Metric, MigInstance, Sample, Snapshot, Source, SourceHealth};

fn source(socket: &std::path::Path) -> PodResourcesSource {
    PodResourcesSource::new(PodResourcesOptions {
        socket: socket.to_path_buf(),
        call_timeout: Duration::from_secs(5),
        ..Default::default()
    })
}

/// What NVML would publish for two whole GPUs and one MIG GPU with instances 1 and 2.
fn nvml_snapshot() -> Snapshot {
    let info = |gpu: u32, uuid: &str| {
        let minor = gpu.to_string();
        Sample::for_gpu(
            gpu,
            uuid,
            Metric::GpuInfo,
            &["m", "s", "b", "v", "d", "c", &minor, "nvidia"],
            1.0,
        )
    };
    let mut samples = vec![
        info(0, "GPU-0"),
        info(1, "GPU-1"),
        info(2, "GPU-2"),
        Sample::for_gpu(0, "GPU-0", Metric::GpuPower, &[], 100.0),
        Sample::for_gpu(1, "GPU-1", Metric::GpuPower, &[], 110.0),
        Sample::for_gpu(2, "GPU-2", Metric::GpuPower, &[], 120.0),
    ];
    for gi in [1, 2] {
        let mig = MigInstance {
            gpu_instance: gi,
            compute_instance: Some(0),
        };
        let mig_uuid = format!("MIG-2-{gi}");
        samples.push(Sample::for_mig(
            2,
            "GPU-2",
            mig,
            Metric::MigInfo,
            &["3g.40gb", &mig_uuid],
            1.0,
        ));
        samples.push(Sample::for_mig(
            2,
            "GPU-2",
            mig,
            Metric::MigMemoryUsed,
            &["3g.40gb"],
            7.0,
        ));
    }
    Snapshot {
        source: "nvml".into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            ..Default::default()
        },
        output: samples.into(),
    }
}

/// Polls once, publishes as the runner does, and returns the exposition.
fn exposition(store: &SnapshotStore, source: &mut PodResourcesSource) -> String {
    let result = source.poll();
    store.publish(Snapshot {
        source: "kubernetes".into(),
        health: SourceHealth {
            up: result.is_ok(),
            polls: 1,
            ..Default::default()
        },
        output: result.unwrap_or_default(),
    });
    String::from_utf8(store.current().exposition(Format::Text, false).to_vec()).unwrap()
}

fn store() -> SnapshotStore {
    let store = SnapshotStore::new(&["nvml", "kubernetes"], vec![], EncodeOptions::default());
    store.publish(nvml_snapshot());
    store
}

const GPU: &str = "nvidia.com/gpu";

#[test]
fn pods_appear_move_and_disappear() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(&dir.path().join("kubelet.sock")).unwrap();
    let store = store();
    let mut src = source(&kubelet.socket);

    // No pods: up, nothing attributed.
    let text = exposition(&store, &mut src);
    assert!(text.contains("dgx_pixels_source_up{source=\"kubernetes\"} 1\n"));
    assert!(text.contains("dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0\"} 100\n"));
    assert!(!text.contains("pod_info{"));

    // A pod appears on GPU 0.
    kubelet.set_pods(vec![pod("ml", "train-0", "trainer", GPU, &["GPU-0"])]);
    let text = exposition(&store, &mut src);
    assert!(
        text.contains("dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0\",namespace=\"ml\",pod=\"train-0\",container=\"trainer\"} 100\n"),
        "{text}"
    );
    assert!(text.contains("dgx_pixels_gpu_power_watts{gpu=\"1\",uuid=\"GPU-1\"} 110\n"));

    // It moves to GPU 1 (rescheduled): GPU 0 loses the labels.
    kubelet.set_pods(vec![pod("ml", "train-0", "trainer", GPU, &["GPU-1"])]);
    let text = exposition(&store, &mut src);
    assert!(text.contains("dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0\"} 100\n"));
    assert!(text.contains(
        "dgx_pixels_gpu_power_watts{gpu=\"1\",uuid=\"GPU-1\",namespace=\"ml\",pod=\"train-0\",container=\"trainer\"} 110\n"
    ));

    // It is deleted: no labels anywhere.
    kubelet.set_pods(vec![]);
    let text = exposition(&store, &mut src);
    assert!(!text.contains("pod=\""), "{text}");
    // Each poll is one List call.
    assert_eq!(kubelet.calls(), 4);
}

#[test]
fn mig_devices_label_their_instance_only() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(&dir.path().join("kubelet.sock")).unwrap();
    kubelet.set_pods(vec![
        pod("inf", "a", "srv", "nvidia.com/mig-3g.40gb", &["MIG-2-1"]),
        pod("inf", "b", "srv", "nvidia.com/mig-3g.40gb", &["MIG-2-2"]),
    ]);
    let store = store();
    let text = exposition(&store, &mut source(&kubelet.socket));
    assert!(text.contains(
        "dgx_pixels_mig_memory_used_bytes{gpu=\"2\",uuid=\"GPU-2\",gpu_instance=\"1\",compute_instance=\"0\",mig_profile=\"3g.40gb\",namespace=\"inf\",pod=\"a\",container=\"srv\"} 7\n"
    ), "{text}");
    assert!(text.contains("gpu_instance=\"2\",compute_instance=\"0\",mig_profile=\"3g.40gb\",namespace=\"inf\",pod=\"b\",container=\"srv\"} 7\n"));
    // The parent GPU's whole-device series belong to neither pod.
    assert!(text.contains("dgx_pixels_gpu_power_watts{gpu=\"2\",uuid=\"GPU-2\"} 120\n"));
    assert!(text.contains("dgx_pixels_gpu_pod_info{gpu=\"2\",uuid=\"GPU-2\",gpu_instance=\"1\",namespace=\"inf\",pod=\"a\",container=\"srv\"} 1\n"));
}

#[test]
fn every_pod_sharing_a_time_sliced_gpu_is_attributed() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(&dir.path().join("kubelet.sock")).unwrap();
    kubelet.set_pods(vec![
        pod("a", "one", "c", GPU, &["GPU-0::0"]),
        pod("b", "two", "c", GPU, &["GPU-0::1"]),
        pod("c", "three", "c", GPU, &["GPU-0::2", "GPU-1::0"]),
    ]);
    let store = store();
    let text = exposition(&store, &mut source(&kubelet.socket));
    // Three holders of GPU 0: one info series each, no labels on the device's own series.
    for (ns, p) in [("a", "one"), ("b", "two"), ("c", "three")] {
        assert!(text.contains(&format!(
            "dgx_pixels_gpu_pod_info{{gpu=\"0\",uuid=\"GPU-0\",gpu_instance=\"\",namespace=\"{ns}\",pod=\"{p}\",container=\"c\"}} 1\n"
        )), "{text}");
    }
    assert!(text.contains("dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0\"} 100\n"));
    assert_eq!(
        text.matches("dgx_pixels_gpu_power_watts{gpu=\"0\"").count(),
        1
    );
    // GPU 1 has one holder.
    assert!(text.contains("dgx_pixels_gpu_power_watts{gpu=\"1\",uuid=\"GPU-1\",namespace=\"c\",pod=\"three\",container=\"c\"} 110\n"));
}

#[test]
fn responses_above_4_mib_work_and_the_limit_gives_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(&dir.path().join("kubelet.sock")).unwrap();
    // About 6 MiB: a busy node's List, beyond gRPC's 4 MiB default.
    let pods: Vec<_> = (0..24_000)
        .map(|i| {
            let name = format!("batch-{i:06}-{}", "x".repeat(200));
            pod("jobs", &name, "worker", "example.com/other", &["dev-0"])
        })
        .chain([pod("ml", "train-0", "trainer", GPU, &["GPU-0"])])
        .collect();
    kubelet.set_pods(pods);
    let store = store();
    let mut src = source(&kubelet.socket);
    let text = exposition(&store, &mut src);
    assert!(
        text.contains("pod=\"train-0\""),
        "a 6 MiB response must be read"
    );

    let mut small = PodResourcesSource::new(PodResourcesOptions {
        socket: kubelet.socket.clone(),
        max_response_bytes: 1024 * 1024,
        call_timeout: Duration::from_secs(5),
        ..Default::default()
    });
    let err = small.poll().unwrap_err();
    assert_eq!(err.kind, "response_too_large");
    assert!(err.message.contains("1048576 bytes"), "{}", err.message);
    assert!(
        err.message.contains("max_response_bytes"),
        "{}",
        err.message
    );
    // The scrape still serves every series, unattributed, with the source down.
    let text = exposition(&store, &mut small);
    assert!(text.contains("dgx_pixels_source_up{source=\"kubernetes\"} 0\n"));
    assert!(text.contains("dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0\"} 100\n"));
}

#[test]
fn a_missing_socket_and_a_kubelet_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubelet.sock");
    let mut src = source(&path);
    let err = src.poll().unwrap_err();
    assert_eq!(err.kind, "socket_missing");
    assert!(err.message.contains(&path.display().to_string()));

    // The kubelet comes up: the next poll reads it.
    let kubelet = FakeKubelet::start(&path).unwrap();
    kubelet.set_pods(vec![pod("ml", "p", "c", GPU, &["GPU-0"])]);
    assert_eq!(src.poll().unwrap().attribution.unwrap().len(), 1);

    // It goes away, then comes back on a new socket at the same path: the source recovers.
    drop(kubelet);
    assert!(src.poll().is_err());
    let kubelet = FakeKubelet::start(&path).unwrap();
    kubelet.set_pods(vec![]);
    let recovered = (0..20).find_map(|_| {
        let output = src.poll().ok();
        if output.is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
        output
    });
    let recovered = recovered.expect("the source reconnects after a kubelet restart");
    assert_eq!(recovered.attribution.map(|s| s.len()), Some(0));
}

/// Two pods time-slice GPU 0: the device's series stay unlabelled, and each process's series
/// get its own pod through the device checkpoint (pod UID from its cgroup); a checkpoint that
/// cannot be read is counted and leaves the processes unlabelled, never the source down.
#[test]
fn processes_on_a_shared_gpu_get_their_own_pod_through_the_checkpoint() {
    const ALICE: &str = "0b7f1c52-aaaa-bbbb-cccc-0123456789ab";
    const BOB: &str = "1c8e2d63-aaaa-bbbb-cccc-0123456789ab";
    const CAROL: &str = "2d9f3e74-aaaa-bbbb-cccc-0123456789ab";
    const DAVE: &str = "3e0a4f85-aaaa-bbbb-cccc-0123456789ab";
    const MIG: &str = "nvidia.com/mig-3g.40gb";
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("kubelet_internal_checkpoint");
    let kubelet = FakeKubelet::start(&dir.path().join("kubelet.sock")).unwrap();
    kubelet
        .set_pods_with_checkpoint(
            &checkpoint,
            vec![
                (ALICE, pod("nb", "alice", "notebook", GPU, &["GPU-0::0"])),
                (BOB, pod("nb", "bob", "notebook", GPU, &["GPU-0::1"])),
                // A time-sliced MIG instance (GPU 2's instance 1): the process's key names it.
                (CAROL, pod("inf", "carol", "srv", MIG, &["MIG-2-1::0"])),
                (DAVE, pod("inf", "dave", "srv", MIG, &["MIG-2-1::1"])),
            ],
        )
        .unwrap();
    let store = SnapshotStore::new(&["nvml", "kubernetes"], vec![], EncodeOptions::default());
    let mut nvml = nvml_snapshot();
    for (pid, uid) in [("100", ALICE), ("101", BOB), ("102", "")] {
        nvml.output.samples.push(Sample::for_gpu(
            0,
            "GPU-0",
            Metric::ProcessMemoryUsed,
            &[pid, "", uid],
            1e9,
        ));
    }
    for (pid, uid) in [("200", CAROL), ("201", DAVE)] {
        let instance = MigInstance {
            gpu_instance: 1,
            compute_instance: Some(0),
        };
        nvml.output.samples.push(Sample::for_mig(
            2,
            "GPU-2",
            instance,
            Metric::ProcessMemoryUsed,
            &[pid, "", uid],
            1e9,
        ));
    }
    store.publish(nvml);
    let mut src = PodResourcesSource::new(PodResourcesOptions {
        socket: kubelet.socket.clone(),
        call_timeout: Duration::from_secs(5),
        checkpoint: Some(checkpoint.clone()),
        ..Default::default()
    });
    let process = |text: &str, pid: &str| -> String {
        text.lines()
            .find(|l| {
                l.starts_with("dgx_pixels_process_memory_used_bytes{")
                    && l.contains(&format!("pid=\"{pid}\""))
            })
            .unwrap_or_else(|| panic!("no pid {pid}: {text}"))
            .to_string()
    };
    let text = exposition(&store, &mut src);
    assert!(
        process(&text, "100").contains(",namespace=\"nb\",pod=\"alice\",container=\"notebook\"}"),
        "{text}"
    );
    assert!(process(&text, "101").contains(",pod=\"bob\","), "{text}");
    assert!(process(&text, "200").contains(",pod=\"carol\","), "{text}");
    assert!(process(&text, "201").contains(",pod=\"dave\","), "{text}");
    // A process without a pod UID is not guessed; nor are the GPU's own series.
    assert!(!process(&text, "102").contains("pod="), "{text}");
    assert!(text.contains("dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0\"} 100\n"));
    assert_eq!(src.checkpoint_errors(), 0);
    // Served from the start (zeros), so a rate sees the first failure.
    for reason in [
        "checkpoint_read",
        "checkpoint_too_large",
        "checkpoint_parse",
    ] {
        assert!(
            text.contains(&format!(
                "dgx_pixels_source_read_errors_total{{source=\"kubernetes\",reason=\"{reason}\"}} 0\n"
            )),
            "{text}"
        );
    }

    // Unreadable: counted, the source stays up, processes fall back to unlabelled.
    std::fs::write(&checkpoint, "{\"Data\":").unwrap();
    let text = exposition(&store, &mut src);
    assert_eq!(src.checkpoint_errors(), 1);
    assert!(text.contains("dgx_pixels_source_up{source=\"kubernetes\"} 1\n"));
    assert!(!process(&text, "100").contains("pod="), "{text}");
    assert!(
        text.contains("dgx_pixels_source_read_errors_total{source=\"kubernetes\",reason=\"checkpoint_parse\"} 1\n"),
        "{text}"
    );
    std::fs::remove_file(&checkpoint).unwrap();
    let text = exposition(&store, &mut src);
    assert_eq!(src.checkpoint_errors(), 2);
    for (reason, n) in [
        ("checkpoint_read", 1),
        ("checkpoint_too_large", 0),
        ("checkpoint_parse", 1),
    ] {
        assert!(
            text.contains(&format!(
                "dgx_pixels_source_read_errors_total{{source=\"kubernetes\",reason=\"{reason}\"}} {n}\n"
            )),
            "{text}"
        );
    }

    // Off: no checkpoint read, nothing counted.
    let mut off = PodResourcesSource::new(PodResourcesOptions {
        socket: kubelet.socket.clone(),
        call_timeout: Duration::from_secs(5),
        checkpoint: None,
        ..Default::default()
    });
    let text = exposition(&store, &mut off);
    assert!(!process(&text, "101").contains("pod="), "{text}");
    assert_eq!(off.checkpoint_errors(), 0);
    assert!(
        !text.contains("dgx_pixels_source_read_errors_total"),
        "{text}"
    );
}
