//! The attribution join: the attribution sets of the served snapshots resolved against the
//! devices they describe, once per generation (in the generation's [`DeviceView`]), into the
//! typed holders of each device, extra labels per device and the info series naming every
//! holder (the rules: [`crate::attribution`]).
//!
//! [`DeviceView`]: super::DeviceView

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::attribution::{AttributionSet, DeviceRef, Extra, Holder, ATTRIBUTION_LABELS};
use crate::{DeviceKey, Metric, PollOutput, Sample, Snapshot};

/// The resolved join for one generation: the holders of each device, extra labels per
/// `(uuid, gpu_instance)` and the info samples naming every holder.
#[derive(Debug, Default)]
pub struct Join {
    /// By uuid, then by `gpu_instance` (`None` for the whole GPU): looked up by `&str`, so the
    /// per-sample lookup allocates nothing.
    extra: HashMap<String, Vec<(Option<u32>, Extra)>>,
    /// Per-process labels by uuid, then (`gpu_instance`, pod UID): for samples with a
    /// `pod_uid` label, before `extra`.
    process_extra: HashMap<String, Vec<(Option<u32>, String, Extra)>>,
    /// `dgx_pixels_gpu_pod_info` and `dgx_pixels_gpu_hpc_job_info` samples.
    pub info: Vec<Sample>,
    /// The `label_<key>` pairs of each pod's `dgx_pixels_gpu_pod_info` series, by namespace
    /// then pod (looked up by `&str`); only pods with some.
    pod_labels: HashMap<String, HashMap<String, Extra>>,
    /// Every held device, by uuid then `gpu_instance`.
    holdings: Vec<Holding>,
}

/// Who holds one GPU or one MIG instance of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    /// The GPU, as its `dgx_pixels_gpu_info` series names it.
    pub gpu: Arc<DeviceKey>,
    /// The MIG GPU instance; `None` for the whole GPU.
    pub gpu_instance: Option<u32>,
    /// Its holders, sorted, each once.
    pub holders: Vec<Holder>,
}

/// A device of the join: a GPU uuid and, for a MIG instance, its `gpu_instance`.
type Key = (String, Option<u32>);

/// Holders per device, and per (device, pod UID) for the per-process series of that pod.
type Grouped<'s> = (
    HashMap<Key, Vec<&'s Holder>>,
    HashMap<(String, Option<u32>, &'s str), Vec<&'s Holder>>,
);

/// The devices the served snapshots describe, from their series' keys.
#[derive(Default)]
struct Devices<'a> {
    /// uuid -> the GPU's key (from its info series).
    key_of: HashMap<&'a str, &'a Arc<DeviceKey>>,
    /// index -> uuid.
    uuid_of: HashMap<u32, &'a str>,
    /// MIG uuid -> (uuid, gpu_instance).
    mig_of: HashMap<&'a str, (&'a str, u32)>,
    /// The MIG instances some served series is about: an instance named by a holder but by
    /// no series (a DRA CDI name `GPU:4294967295`) does not exist here.
    instances: HashSet<(&'a str, u32)>,
}

impl<'a> Devices<'a> {
    /// Indexes the devices of the served outputs' samples.
    fn index(served: impl Iterator<Item = &'a PollOutput>) -> Devices<'a> {
        let mut devices = Devices::default();
        for output in served {
            for s in &output.samples {
                let Some(d) = &s.device else {
                    continue;
                };
                if let Some(m) = d.mig() {
                    devices.instances.insert((d.uuid(), m.gpu_instance));
                }
                match (s.metric, d.mig()) {
                    (Metric::GpuInfo, _) => {
                        devices.key_of.insert(d.uuid(), d);
                        devices.uuid_of.insert(d.index(), d.uuid());
                    }
                    (Metric::MigInfo, Some(m)) => {
                        if let Some(mig_uuid) = s.label("mig_uuid") {
                            devices.mig_of.insert(mig_uuid, (d.uuid(), m.gpu_instance));
                        }
                    }
                    _ => {}
                }
            }
        }
        devices
    }

    /// The device `d` names, when it names one here (a `PodProcesses` is resolved apart).
    fn resolve(&self, d: &DeviceRef) -> Option<Key> {
        match d {
            DeviceRef::PodProcesses { .. } => None,
            DeviceRef::Uuid(u) if u.starts_with("MIG-") => self
                .mig_of
                .get(u.as_str())
                .map(|(uuid, gi)| (uuid.to_string(), Some(*gi))),
            DeviceRef::Uuid(u) => Some((u.clone(), None)),
            DeviceRef::Instance { uuid, gpu_instance } => Some((uuid.clone(), Some(*gpu_instance))),
            DeviceRef::Index { gpu, gpu_instance } => {
                let uuid = self.uuid_of.get(gpu)?;
                Some((uuid.to_string(), *gpu_instance))
            }
        }
    }

    /// The GPU key of a held device, or `None` when no up source describes it (its GPU, or
    /// the MIG instance it names): such a device has no series to label.
    fn gpu(&self, (uuid, gi): &Key) -> Option<&'a Arc<DeviceKey>> {
        let gpu = self.key_of.get(uuid.as_str()).copied()?;
        if gi.is_some_and(|gi| !self.instances.contains(&(uuid.as_str(), gi))) {
            return None;
        }
        Some(gpu)
    }

    /// The holders of every set, by the device they hold and, for pod processes, by device
    /// and pod UID. Holders of devices that do not resolve are left out.
    fn group<'s>(&self, sets: &[&'s AttributionSet]) -> Grouped<'s> {
        let (mut holders, mut by_uid): Grouped<'s> = Default::default();
        for set in sets {
            for (device, holder) in set.iter() {
                if let DeviceRef::PodProcesses { device, pod_uid } = device {
                    if let Some((uuid, gi)) = self.resolve(device) {
                        by_uid
                            .entry((uuid, gi, pod_uid.as_str()))
                            .or_default()
                            .push(holder);
                    }
                } else if let Some(key) = self.resolve(device) {
                    holders.entry(key).or_default().push(holder);
                }
            }
        }
        (holders, by_uid)
    }
}

impl Join {
    /// Resolves the attribution sets of the served snapshots against the devices they
    /// describe.
    pub fn build(snapshots: &[Arc<Snapshot>]) -> Join {
        let served = || snapshots.iter().filter_map(|s| s.served());
        let sets: Vec<&AttributionSet> = served().filter_map(|o| o.attribution.as_ref()).collect();
        if sets.iter().all(|s| s.is_empty()) {
            return Join::default();
        }
        let devices = Devices::index(served());
        // Holders per key, deduplicated and sorted so the output is stable.
        let (mut holders, by_uid) = devices.group(&sets);
        let mut keys: Vec<_> = holders.keys().cloned().collect();
        keys.sort();
        let mut join = Join::default();
        for (device, list) in by_uid {
            join.add_pod_processes(device, list);
        }
        for key in keys {
            let Some(list) = holders.get_mut(&key) else {
                continue;
            };
            list.sort();
            list.dedup();
            let Some(gpu) = devices.gpu(&key) else {
                continue;
            };
            join.add_holding(gpu, key, list);
        }
        join
    }

    /// The labels of the per-process series of the pod with UID `uid` on a device, when one
    /// container of it holds the device.
    fn add_pod_processes(
        &mut self,
        (uuid, gi, uid): (String, Option<u32>, &str),
        mut list: Vec<&Holder>,
    ) {
        list.sort();
        list.dedup();
        // Two containers of one pod on one device: which one a process is in, the UID
        // does not say.
        if let [Holder::Pod {
            namespace,
            pod,
            container,
            ..
        }] = list.as_slice()
        {
            let extra: Extra = [
                ("namespace".into(), namespace.clone()),
                ("pod".into(), pod.clone()),
                ("container".into(), container.clone()),
            ]
            .into();
            self.process_extra
                .entry(uuid)
                .or_default()
                .push((gi, uid.to_string(), extra));
        }
    }

    /// One held device: its holding, an info series per holder, and the extra labels of its
    /// series where one pod or one job holds it (several say nothing about a series).
    fn add_holding(&mut self, gpu: &Arc<DeviceKey>, (uuid, gi): Key, list: &[&Holder]) {
        self.holdings.push(Holding {
            gpu: Arc::clone(gpu),
            gpu_instance: gi,
            holders: list.iter().map(|h| (*h).clone()).collect(),
        });
        let instance = gi.map(|gi| gi.to_string()).unwrap_or_default();
        let pods = list
            .iter()
            .filter(|h| matches!(h, Holder::Pod { .. }))
            .count();
        let jobs = list.iter().filter(|h| matches!(h, Holder::Job(_))).count();
        let mut extra: Vec<(Cow<'static, str>, String)> = Vec::new();
        for h in list {
            match h {
                Holder::Pod {
                    namespace,
                    pod,
                    container,
                    labels,
                } => {
                    self.info.push(Sample::of(
                        gpu,
                        Metric::GpuPodInfo,
                        [&instance, namespace, pod, container],
                        1.0,
                    ));
                    if !labels.is_empty() {
                        let pairs = labels
                            .iter()
                            .map(|(k, v)| (Cow::Owned(k.to_string()), v.to_string()));
                        self.pod_labels
                            .entry(namespace.clone())
                            .or_default()
                            .entry(pod.clone())
                            .or_insert_with(|| pairs.collect());
                    }
                    if pods == 1 {
                        extra.push(("namespace".into(), namespace.clone()));
                        extra.push(("pod".into(), pod.clone()));
                        extra.push(("container".into(), container.clone()));
                    }
                }
                Holder::Job(job) => {
                    self.info.push(Sample::of(
                        gpu,
                        Metric::GpuHpcJobInfo,
                        [&instance, job],
                        1.0,
                    ));
                    if jobs == 1 {
                        extra.push(("hpc_job".into(), job.clone()));
                    }
                }
            }
        }
        if !extra.is_empty() {
            self.extra.entry(uuid).or_default().push((gi, extra.into()));
        }
    }

    /// Every held device (only those some served `dgx_pixels_gpu_info` describes), by uuid then
    /// `gpu_instance`.
    pub fn holdings(&self) -> &[Holding] {
        &self.holdings
    }

    /// The extra labels of `sample`, or none. A `dgx_pixels_gpu_pod_info` series gets its
    /// pod's `label_<key>` pairs; samples that are not about a device, or that already carry
    /// an attribution label (the other info series), get none. A sample's key names its GPU
    /// and, for a MIG instance or a process in one, the instance.
    pub fn labels_for(&self, sample: &Sample) -> Option<&Extra> {
        if sample.metric == Metric::GpuPodInfo {
            if self.pod_labels.is_empty() {
                return None;
            }
            let pods = self.pod_labels.get(sample.label("namespace")?)?;
            return pods.get(sample.label("pod")?);
        }
        if self.extra.is_empty() && self.process_extra.is_empty() {
            return None;
        }
        if sample
            .metric
            .def()
            .labels
            .iter()
            .any(|n| ATTRIBUTION_LABELS.contains(n))
        {
            return None;
        }
        let device = sample.device.as_ref()?;
        let gi = device.mig().map(|m| m.gpu_instance);
        // Only per-process rows have the label; no lookup at all without per-process pairs.
        let uid = (!self.process_extra.is_empty())
            .then(|| sample.label("pod_uid"))
            .flatten()
            .filter(|uid| !uid.is_empty());
        // A per-process row (one with the label, empty or not) on a device the checkpoint
        // pairs with pods is labelled by its own pod UID or not at all.
        let per_process = sample.metric.def().labels.contains(&"pod_uid");
        let pairs = (per_process && !self.process_extra.is_empty())
            .then(|| self.process_extra.get(device.uuid()))
            .flatten();
        if let Some(pairs) = pairs {
            let mut on_instance = pairs.iter().filter(|(g, _, _)| *g == gi).peekable();
            if on_instance.peek().is_some() {
                // The checkpoint names this device's pods: a process of another pod (one that
                // reached the GPU outside the device plugin), or of no pod at all (a host
                // process, whatever its cgroup's names say), is not the holder's, so it stays
                // unlabelled rather than get the holder's labels.
                return uid
                    .and_then(|uid| on_instance.find(|(_, u, _)| u == uid).map(|(_, _, e)| e));
            }
        }
        let instances = self.extra.get(device.uuid())?;
        instances.iter().find(|(g, _)| *g == gi).map(|(_, e)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::PodLabels;
    use crate::snapshot::{PollOutput, SourceHealth};
    use crate::MigInstance;

    fn holders(source: &str, set: AttributionSet) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            source: source.into(),
            health: SourceHealth {
                up: true,
                polls: 1,
                ..Default::default()
            },
            output: PollOutput {
                attribution: Some(set),
                ..PollOutput::default()
            },
        })
    }

    fn nvml() -> Arc<Snapshot> {
        Arc::new(Snapshot {
            source: "nvml".into(),
            health: SourceHealth {
                up: true,
                polls: 1,
                ..Default::default()
            },
            output: PollOutput::samples(vec![
                Sample::for_gpu(
                    0,
                    "GPU-a",
                    Metric::GpuInfo,
                    &["m", "s", "b", "v", "d", "c", "0", "nvidia0"],
                    1.0,
                ),
                Sample::for_gpu(
                    1,
                    "GPU-b",
                    Metric::GpuInfo,
                    &["m", "s", "b", "v", "d", "c", "1", "nvidia1"],
                    1.0,
                ),
                Sample::for_mig(
                    1,
                    "GPU-b",
                    MigInstance {
                        gpu_instance: 3,
                        compute_instance: Some(0),
                    },
                    Metric::MigInfo,
                    &["1g.10gb", "MIG-x"],
                    1.0,
                ),
                Sample::for_gpu(0, "GPU-a", Metric::GpuPower, &[], 100.0),
                Sample::for_mig(
                    1,
                    "GPU-b",
                    MigInstance {
                        gpu_instance: 3,
                        compute_instance: Some(0),
                    },
                    Metric::MigMemoryUsed,
                    &["1g.10gb"],
                    5.0,
                ),
            ]),
        })
    }

    fn pod(ns: &str, p: &str) -> Holder {
        Holder::Pod {
            namespace: ns.into(),
            pod: p.into(),
            container: "main".into(),
            labels: PodLabels::default(),
        }
    }

    #[test]
    fn a_single_holder_labels_the_device_and_mig_resolves_to_the_instance() {
        let set: AttributionSet = Arc::new(vec![
            (DeviceRef::Uuid("GPU-a".into()), pod("ml", "train")),
            (DeviceRef::Uuid("MIG-x".into()), pod("ml", "infer")),
            (
                DeviceRef::Index {
                    gpu: 0,
                    gpu_instance: None,
                },
                Holder::Job("42".into()),
            ),
        ]);
        let snaps = [nvml(), holders("kubernetes", set)];
        let join = Join::build(&snaps);
        let power = &snaps[0].output.samples[3];
        let labels: Vec<_> = join
            .labels_for(power)
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(
            labels,
            ["namespace=ml", "pod=train", "container=main", "hpc_job=42"]
        );
        let mig = &snaps[0].output.samples[4];
        assert_eq!(
            join.labels_for(mig).unwrap()[1],
            ("pod".into(), "infer".to_string())
        );
        // The whole GPU 1 is held by nobody.
        let gpu1 = Sample::for_gpu(1, "GPU-b", Metric::GpuPower, &[], 1.0);
        assert!(join.labels_for(&gpu1).is_none());
        assert_eq!(join.info.len(), 3);
        assert_eq!(
            join.info[2].label_values(),
            ["1", "GPU-b", "3", "ml", "infer", "main"]
        );
        // Info series are never joined again.
        assert!(join.labels_for(&join.info[0]).is_none());
    }

    #[test]
    fn pod_labels_go_on_the_pods_info_series_only() {
        let labelled = |ns: &str, p: &str, team: &str| Holder::Pod {
            namespace: ns.into(),
            pod: p.into(),
            container: "main".into(),
            labels: [(Arc::from("label_team"), Arc::from(team))].into(),
        };
        let set: AttributionSet = Arc::new(vec![
            (
                DeviceRef::Uuid("GPU-a".into()),
                labelled("ml", "train", "vision"),
            ),
            (
                DeviceRef::Uuid("GPU-b".into()),
                labelled("ml", "infer", "llm"),
            ),
            (DeviceRef::Uuid("GPU-b".into()), pod("ops", "probe")),
        ]);
        let snaps = [nvml(), holders("kubernetes", set)];
        let join = Join::build(&snaps);
        let text = |e: Option<&Extra>| -> Vec<String> {
            e.map(|e| e.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default()
        };
        let by_pod = |p: &str| {
            join.info
                .iter()
                .find(|s| s.label("pod") == Some(p))
                .map(|s| text(join.labels_for(s)))
        };
        assert_eq!(by_pod("train").unwrap(), ["label_team=vision"]);
        assert_eq!(by_pod("infer").unwrap(), ["label_team=llm"]);
        // A pod without labels gets none, not another pod's.
        assert_eq!(by_pod("probe").unwrap(), Vec::<String>::new());
        // Device series keep the attribution labels only.
        let power = &snaps[0].output.samples[3];
        assert_eq!(
            text(join.labels_for(power)),
            ["namespace=ml", "pod=train", "container=main"]
        );
    }

    #[test]
    fn shared_devices_get_info_series_but_no_labels() {
        let set: AttributionSet = Arc::new(vec![
            (DeviceRef::Uuid("GPU-a".into()), pod("a", "one")),
            (DeviceRef::Uuid("GPU-a".into()), pod("b", "two")),
            // The same container twice (two replicas of one GPU) is one holder.
            (DeviceRef::Uuid("GPU-b".into()), pod("c", "three")),
            (DeviceRef::Uuid("GPU-b".into()), pod("c", "three")),
        ]);
        let snaps = [nvml(), holders("kubernetes", set)];
        let join = Join::build(&snaps);
        assert!(join.labels_for(&snaps[0].output.samples[3]).is_none());
        let gpu1 = Sample::for_gpu(1, "GPU-b", Metric::GpuPower, &[], 1.0);
        assert_eq!(join.labels_for(&gpu1).unwrap().len(), 3);
        let pods: Vec<_> = join.info.iter().map(|s| s.label_values()[4]).collect();
        assert_eq!(pods, ["one", "two", "three"]);
    }

    #[test]
    fn processes_on_a_shared_gpu_get_their_own_pods_labels() {
        let procs = |uid: &str| DeviceRef::PodProcesses {
            device: Box::new(DeviceRef::Uuid("GPU-a".into())),
            pod_uid: uid.into(),
        };
        let two_containers = Holder::Pod {
            namespace: "c".into(),
            pod: "two-in-one".into(),
            container: "sidecar".into(),
            labels: PodLabels::default(),
        };
        let set: AttributionSet = Arc::new(vec![
            (DeviceRef::Uuid("GPU-a".into()), pod("a", "one")),
            (DeviceRef::Uuid("GPU-a".into()), pod("b", "two")),
            (procs("uid-1"), pod("a", "one")),
            (procs("uid-2"), pod("b", "two")),
            // Replicas of one container are one holder; two containers of a pod are not.
            (procs("uid-2"), pod("b", "two")),
            (procs("uid-3"), pod("c", "two-in-one")),
            (procs("uid-3"), two_containers),
        ]);
        let snaps = [nvml(), holders("kubernetes", set)];
        let join = Join::build(&snaps);
        let process = |uid: &str| {
            Sample::for_gpu(0, "GPU-a", Metric::ProcessMemoryUsed, &["7", "", uid], 1.0)
        };
        let pod_of = |s: &Sample| join.labels_for(s).map(|e| e[1].1.clone());
        assert_eq!(pod_of(&process("uid-1")).as_deref(), Some("one"));
        assert_eq!(pod_of(&process("uid-2")).as_deref(), Some("two"));
        // Ambiguous, unknown or no UID: the device's rule, and two pods share it.
        assert_eq!(pod_of(&process("uid-3")), None);
        assert_eq!(pod_of(&process("uid-9")), None);
        assert_eq!(pod_of(&process("")), None);
        // The device's own series stay unlabelled, and the pairs add no info series.
        assert!(join.labels_for(&snaps[0].output.samples[3]).is_none());
        assert_eq!(join.info.len(), 2);
        assert_eq!(join.holdings().len(), 1);
    }

    #[test]
    fn a_process_of_another_pod_never_gets_the_holders_labels() {
        let set: AttributionSet = Arc::new(vec![
            (DeviceRef::Uuid("GPU-a".into()), pod("a", "one")),
            (
                DeviceRef::PodProcesses {
                    device: Box::new(DeviceRef::Uuid("GPU-a".into())),
                    pod_uid: "uid-1".into(),
                },
                pod("a", "one"),
            ),
        ]);
        let snaps = [nvml(), holders("kubernetes", set)];
        let join = Join::build(&snaps);
        let process = |uid: &str| {
            Sample::for_gpu(0, "GPU-a", Metric::ProcessMemoryUsed, &["7", "", uid], 1.0)
        };
        let pod_of = |s: &Sample| join.labels_for(s).map(|e| e[1].1.clone());
        assert_eq!(pod_of(&process("uid-1")).as_deref(), Some("one"));
        // The checkpoint says GPU-a's pod is uid-1: a process of pod uid-9 (the GPU reached
        // outside the device plugin) is not pod one's.
        assert_eq!(pod_of(&process("uid-9")), None);
        // No pod UID (a host process, or one in a cgroup that is no pod's by the kubelet's
        // layout, whatever it is named): not pod one's either (issue 42, item 6).
        assert_eq!(pod_of(&process("")), None);
        // The device's own series keep the holder's labels.
        assert!(join.labels_for(&snaps[0].output.samples[3]).is_some());
    }

    /// Regression (hardening round 4, item 13): a DRA CDI name `nvidia.com/gpu=7:4294967295`
    /// (a MIG instance that does not exist) made a pod info series for it; only devices that
    /// exist here do.
    #[test]
    fn a_holder_of_an_instance_that_does_not_exist_gets_no_info_series() {
        let set: AttributionSet = Arc::new(vec![
            (
                DeviceRef::Index {
                    gpu: 1,
                    gpu_instance: Some(u32::MAX),
                },
                pod("ml", "ghost"),
            ),
            (
                DeviceRef::Instance {
                    uuid: "GPU-a".into(),
                    gpu_instance: 3,
                },
                pod("ml", "ghost-too"),
            ),
            (
                DeviceRef::Index {
                    gpu: 1,
                    gpu_instance: Some(3),
                },
                pod("ml", "real"),
            ),
        ]);
        let snaps = [nvml(), holders("kubernetes", set)];
        let join = Join::build(&snaps);
        let pods: Vec<_> = join.info.iter().map(|s| s.label_values()[4]).collect();
        assert_eq!(pods, ["real"]);
        assert_eq!(join.holdings().len(), 1);
    }

    #[test]
    fn unknown_devices_and_down_snapshots_resolve_to_nothing() {
        let mut down = (*nvml()).clone();
        down.health.up = false;
        let set: AttributionSet = Arc::new(vec![
            (DeviceRef::Uuid("MIG-x".into()), pod("ml", "infer")),
            (
                DeviceRef::Index {
                    gpu: 0,
                    gpu_instance: None,
                },
                Holder::Job("1".into()),
            ),
        ]);
        let join = Join::build(&[Arc::new(down), holders("hpc", Arc::clone(&set))]);
        assert!(join.info.is_empty());
        // A down attribution source attributes nothing either.
        let mut hpc = (*holders("hpc", set)).clone();
        hpc.health.up = false;
        let join = Join::build(&[nvml(), Arc::new(hpc)]);
        assert!(join.info.is_empty());
    }
}
