use super::*;
use crate::attribution::{AttributionSet, DeviceRef};
use crate::snapshot::{PollOutput, SourceHealth};

fn snapshot(source: &str, up: bool, output: PollOutput) -> Arc<Snapshot> {
    Arc::new(Snapshot {
        source: source.into(),
        health: SourceHealth {
            up,
            polls: 1,
            ..Default::default()
        },
        output,
    })
}

fn info(gpu: u32, uuid: &str, pci: &str) -> Sample {
    let labels = ["m", "s", pci, "v", "d", "12040", "0", "/dev/nvidia0"];
    Sample::for_gpu(gpu, uuid, Metric::GpuInfo, &labels, 1.0)
}

const MIG: MigInstance = MigInstance {
    gpu_instance: 3,
    compute_instance: Some(0),
};

fn pod(name: &str) -> Holder {
    Holder::Pod {
        namespace: "ml".into(),
        pod: name.into(),
        container: "main".into(),
        labels: Default::default(),
    }
}

/// Two sources over two GPUs, one of them in MIG mode, and an attribution source.
fn generation() -> Vec<Arc<Snapshot>> {
    let dcgm = snapshot(
        "dcgm",
        true,
        vec![
            Sample::for_gpu(1, "GPU-b", Metric::GpuUtilization, &[], 0.5),
            Sample::for_gpu(0, "GPU-a", Metric::GpuSmActive, &[], 0.1),
        ]
        .into(),
    );
    let nvml = snapshot(
        "nvml",
        true,
        vec![
            info(0, "GPU-a", "not an address"),
            Sample::for_gpu(0, "GPU-a", Metric::GpuUtilization, &[], 0.25),
            Sample::for_gpu(0, "GPU-a", Metric::GpuPower, &[], 300.0),
            info(1, "GPU-b", "00000000:1B:00.0"),
            Sample::for_mig(1, "GPU-b", MIG, Metric::MigInfo, &["1g.10gb", "MIG-x"], 1.0),
            Sample::for_mig(1, "GPU-b", MIG, Metric::MigMemoryUsed, &["1g.10gb"], 5.0),
            // A second reading of a metric comes after the first.
            Sample::for_gpu(0, "GPU-a", Metric::GpuUtilization, &[], 0.75),
        ]
        .into(),
    );
    let set: AttributionSet = Arc::new(vec![
        (DeviceRef::Uuid("GPU-a".into()), pod("two")),
        (DeviceRef::Uuid("GPU-a".into()), pod("one")),
        (DeviceRef::Uuid("MIG-x".into()), pod("infer")),
        (DeviceRef::Uuid("GPU-z".into()), pod("nowhere")),
    ]);
    let k8s = snapshot(
        "kubernetes",
        true,
        PollOutput {
            attribution: Some(set),
            ..PollOutput::default()
        },
    );
    vec![dcgm, k8s, nvml]
}

#[test]
fn gpus_come_in_served_order_with_their_readings_by_metric() {
    let view = DeviceView::build(&generation());
    let ids: Vec<_> = view.gpus().map(|g| (g.index(), g.uuid())).collect();
    assert_eq!(
        ids,
        [(1, "GPU-b"), (0, "GPU-a")],
        "dcgm's samples come first"
    );
    let a = view.gpu("GPU-a").unwrap();
    let util: Vec<_> = a
        .readings(Metric::GpuUtilization)
        .map(|s| s.value)
        .collect();
    assert_eq!(util, [0.25, 0.75]);
    assert_eq!(a.reading(Metric::GpuSmActive).map(|s| s.value), Some(0.1));
    assert_eq!(a.reading(Metric::GpuPowerLimit), None);
    assert_eq!(a.samples().count(), 5);
    assert!(a
        .samples()
        .all(|s| s.device.as_ref().unwrap().uuid() == "GPU-a"));
    assert!(
        view.gpu("GPU-z").is_none(),
        "attribution alone makes no GPU"
    );
}

#[test]
fn identity_has_the_pci_address_parsed_once_and_the_instances() {
    let view = DeviceView::build(&generation());
    let a = view.gpu("GPU-a").unwrap();
    assert_eq!(a.pci(), None, "an unparsable pci_bus_id names no address");
    let b = view.gpu("GPU-b").unwrap();
    assert_eq!(b.pci(), PciAddress::parse("0000:1b:00"));
    let instances: Vec<_> = b.instances().map(|i| i.mig()).collect();
    assert_eq!(instances, [MIG]);
    let i = b.instances().next().unwrap();
    assert_eq!(i.readings(Metric::MigMemoryUsed).next().unwrap().value, 5.0);
    assert_eq!(i.samples().count(), 2);
    assert_eq!(b.samples().count(), 2, "instance samples are not the GPU's");
    assert_eq!(b.all_samples().count(), 4);
    // The whole-GPU key is a source's own (the first sample about GPU-b is dcgm's).
    assert!(Arc::ptr_eq(
        b.key(),
        view.snapshots()[0].output.samples[0]
            .device
            .as_ref()
            .unwrap()
    ));
}

#[test]
fn a_gpu_seen_first_through_an_instance_gets_a_whole_gpu_key() {
    let nvml = snapshot(
        "nvml",
        true,
        vec![
            Sample::for_mig(2, "GPU-c", MIG, Metric::MigMemoryUsed, &["1g.10gb"], 5.0),
            Sample::for_gpu(2, "GPU-c", Metric::GpuPower, &[], 1.0),
        ]
        .into(),
    );
    let view = DeviceView::build(&[nvml]);
    let c = view.gpu("GPU-c").unwrap();
    assert_eq!(c.key().mig(), None);
    assert!(Arc::ptr_eq(
        c.key(),
        view.snapshots()[0].output.samples[1]
            .device
            .as_ref()
            .unwrap()
    ));
}

#[test]
fn holders_are_typed_per_gpu_and_instance() {
    let view = DeviceView::build(&generation());
    let a = view.gpu("GPU-a").unwrap();
    assert_eq!(a.holders(None), [pod("one"), pod("two")], "sorted");
    assert!(a.held());
    let b = view.gpu("GPU-b").unwrap();
    assert!(b.holders(None).is_empty());
    assert_eq!(b.holders(Some(3)), [pod("infer")]);
    assert!(b.held(), "an instance is held");
    // The encoder's join is the same one.
    assert_eq!(view.join().info.len(), 3);
}

#[test]
fn down_sources_contribute_nothing() {
    let mut snapshots = generation();
    let nvml = Arc::make_mut(&mut snapshots[2]);
    nvml.health.up = false;
    let view = DeviceView::build(&snapshots);
    assert_eq!(view.snapshots().len(), 2);
    let ids: Vec<_> = view.gpus().map(|g| g.uuid()).collect();
    assert_eq!(ids, ["GPU-b", "GPU-a"]);
    // No gpu_info is served: the holders name no known device.
    assert!(view.gpus().all(|g| !g.held()));
    assert!(view.join().info.is_empty());
}
