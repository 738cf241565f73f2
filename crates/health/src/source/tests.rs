use super::*;
use dgx_pixels_metrics::attribution::{AttributionSet, DeviceRef};
use dgx_pixels_metrics::{MigInstance, Sample, Snapshot, SourceHealth};

struct Fixed(Option<Arc<DeviceView>>);

impl DeviceViews for Fixed {
    fn current(&self) -> Option<Arc<DeviceView>> {
        self.0.clone()
    }
}

fn up(source: &str, output: PollOutput) -> Arc<Snapshot> {
    Arc::new(Snapshot {
        source: source.into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            ..Default::default()
        },
        output,
    })
}

fn gpu(index: u32, uuid: &str, utilization: f64, info: bool) -> Vec<Sample> {
    let mut v = vec![
        Sample::for_gpu(index, uuid, Metric::GpuUp, &[], 1.0),
        Sample::for_gpu(index, uuid, Metric::GpuUtilization, &[], utilization),
        Sample::for_gpu(
            index,
            uuid,
            Metric::GpuEnergy,
            &[],
            1000.0 + f64::from(index),
        ),
    ];
    if info {
        let labels = ["m", "s", "b", "v", "d", "c", "0", "nvidia0"];
        v.push(Sample::for_gpu(index, uuid, Metric::GpuInfo, &labels, 1.0));
    }
    v
}

fn pod(name: &str) -> Holder {
    Holder::Pod {
        namespace: "ml".into(),
        pod: name.into(),
        container: "main".into(),
        labels: Default::default(),
    }
}

/// GPU 0: one pod and one job; 1: two pods; 2: a pod on a MIG instance only; 3: a pod, but no
/// source describes the GPU (no gpu_info).
fn view() -> DeviceView {
    let mut samples = gpu(0, "GPU-a", 0.01, true);
    samples.extend(gpu(1, "GPU-b", 0.5, true));
    samples.extend(gpu(2, "GPU-c", 0.0, true));
    samples.extend(gpu(3, "GPU-d", 0.0, false));
    samples.push(Sample::for_gpu(0, "GPU-a", Metric::GpuSmActive, &[], 0.02));
    let mig = MigInstance {
        gpu_instance: 1,
        compute_instance: Some(0),
    };
    let mig_info = ["1g.10gb", "MIG-c1"];
    samples.push(Sample::for_mig(
        2,
        "GPU-c",
        mig,
        Metric::MigInfo,
        &mig_info,
        1.0,
    ));
    let set: AttributionSet = Arc::new(vec![
        (DeviceRef::Uuid("GPU-a".into()), pod("train")),
        (DeviceRef::Uuid("GPU-a".into()), Holder::Job("42".into())),
        (DeviceRef::Uuid("GPU-b".into()), pod("b2")),
        (DeviceRef::Uuid("GPU-b".into()), pod("b1")),
        (DeviceRef::Uuid("MIG-c1".into()), pod("infer")),
        (DeviceRef::Uuid("GPU-d".into()), pod("lost")),
    ]);
    let k8s = PollOutput {
        attribution: Some(set),
        ..PollOutput::default()
    };
    DeviceView::build(&[up("kubernetes", k8s), up("nvml", samples.into())])
}

#[test]
fn held_gpus_carry_typed_holders_as_the_join_labels_them() {
    let held = held_gpus(&view());
    let got: Vec<_> = held
        .iter()
        .map(|h| (h.key.uuid(), h.holder.clone(), h.holders.as_str()))
        .collect();
    let none: [String; 4] = Default::default();
    assert_eq!(
        got,
        [
            (
                "GPU-a",
                ["ml", "train", "main", "42"].map(String::from),
                "ml/train/main/42"
            ),
            // Shared: no holder labels; the text names both as their info series do.
            ("GPU-b", none, "1/GPU-b//ml/b1/main,1/GPU-b//ml/b2/main"),
        ]
    );
    let a = &held[0];
    assert_eq!(
        (a.utilization, a.sm_active, a.energy),
        (Some(0.01), Some(0.02), Some(1000.0))
    );
    assert_eq!((held[1].sm_active, held[1].energy), (None, Some(1001.0)));
}

#[test]
fn two_pods_and_one_job_label_the_job_only() {
    let samples = gpu(0, "GPU-a", 0.0, true);
    let set: AttributionSet = Arc::new(vec![
        (DeviceRef::Uuid("GPU-a".into()), pod("x")),
        (DeviceRef::Uuid("GPU-a".into()), pod("y")),
        (DeviceRef::Uuid("GPU-a".into()), Holder::Job("7".into())),
    ]);
    let hpc = PollOutput {
        attribution: Some(set),
        ..PollOutput::default()
    };
    let view = DeviceView::build(&[up("hpc", hpc), up("nvml", samples.into())]);
    let held = held_gpus(&view);
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].holder, ["", "", "", "7"].map(String::from));
    assert_eq!(held[0].holders, "///7");
}

#[test]
fn a_poll_judges_every_gpu_and_counts_held_ones() {
    let settings = HealthSettings::default();
    let mut none = HealthSource::new(Arc::new(Fixed(None)), &settings, Arc::default());
    let err = none.poll().unwrap_err();
    assert_eq!(err.kind, PollErrorKind::Uninitialized);
    let mut source = HealthSource::new(
        Arc::new(Fixed(Some(Arc::new(view())))),
        &settings,
        Arc::default(),
    );
    let out = source.poll().unwrap();
    let healthy: Vec<_> = out
        .samples
        .iter()
        .filter(|s| s.metric == Metric::GpuHealthState && s.value == 1.0)
        .map(|s| (s.device.as_ref().unwrap().uuid(), s.label("state").unwrap()))
        .collect();
    assert_eq!(
        healthy,
        [
            ("GPU-a", "healthy"),
            ("GPU-b", "healthy"),
            ("GPU-c", "healthy"),
            ("GPU-d", "healthy")
        ]
    );
    let idle: Vec<_> = out
        .samples
        .iter()
        .filter(|s| s.metric == Metric::GpuAllocatedIdle)
        .map(|s| s.device.as_ref().unwrap().uuid())
        .collect();
    assert_eq!(idle, ["GPU-a", "GPU-b"]);
}

/// A reload rebuilds the source over the same memory: a GPU waiting for its reset stays
/// unhealthy (a new tracker would also judge every XID counted since start as new), and the
/// policy in force is served, one series per entry.
#[test]
fn a_rebuilt_source_keeps_the_verdicts_and_serves_its_policy() {
    let with_xid = |n: f64| {
        let mut samples = gpu(0, "GPU-a", 0.5, true);
        samples.push(Sample::for_gpu(
            0,
            "GPU-a",
            Metric::GpuXidErrors,
            &["95"],
            n,
        ));
        samples.push(Sample::for_gpu(
            0,
            "GPU-a",
            Metric::GpuXidErrors,
            &["13"],
            n,
        ));
        let view = DeviceView::build(&[up("nvml", PollOutput::samples(samples))]);
        Arc::new(Fixed(Some(Arc::new(view)))) as Arc<dyn DeviceViews>
    };
    let state = |out: &PollOutput| {
        let s = out
            .samples
            .iter()
            .find(|s| s.metric == Metric::GpuHealthAction);
        s.map(|s| {
            (
                s.label("action").unwrap().to_string(),
                s.label("reason").unwrap().to_string(),
            )
        })
    };
    let memory: Arc<HealthMemory> = Arc::default();
    let settings = HealthSettings::default();
    let mut first = HealthSource::new(with_xid(0.0), &settings, Arc::clone(&memory));
    first.poll().unwrap();
    let mut first = HealthSource::new(with_xid(1.0), &settings, Arc::clone(&memory));
    let out = first.poll().unwrap();
    assert_eq!(state(&out), Some(("reset_gpu".into(), "xid_95".into())));
    assert!(!out
        .samples
        .iter()
        .any(|s| s.metric == Metric::ExporterXidPolicy));

    let settings: HealthSettings = toml::from_str(
        "[xid_policy]\n\"13\" = \"ignore\"\n\"95\" = { count = 5, window = \"1h\" }\n",
    )
    .unwrap();
    let mut second = HealthSource::new(with_xid(1.0), &settings, Arc::clone(&memory));
    let out = second.poll().unwrap();
    assert_eq!(
        state(&out),
        Some(("reset_gpu".into(), "xid_95".into())),
        "latched before the reload: it waits for its reset still"
    );
    let mut policy: Vec<_> = out
        .samples
        .iter()
        .filter(|s| s.metric == Metric::ExporterXidPolicy)
        .map(|s| s.labels.clone())
        .collect();
    policy.sort();
    assert_eq!(policy, [["13", "ignore"], ["95", "5 in 1h"]]);
    // A fresh memory (a restart) would judge the counted XID again, under the new policy.
    let mut fresh = HealthSource::new(with_xid(1.0), &settings, Arc::default());
    let out = fresh.poll().unwrap();
    assert_eq!(state(&out), Some(("none".into(), "none".into())));
}
