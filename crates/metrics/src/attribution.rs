//! Attribution: which pod or HPC job holds each GPU or MIG instance, joined onto the device's
//! series when a generation is encoded.
//!
//! Attribution sources (kubelet pod-resources, HPC job files) run on their own threads and hand
//! the runner an [`AttributionSet`] with each successful poll; the store keeps the latest set per
//! source and serves it only while that source is up. The join happens once per generation, in
//! the encoder (`dgx-pixels-exposition`'s `join`), never per scrape:
//!
//! - Devices are resolved to `(uuid, gpu_instance)` (`gpu_instance` none for a whole GPU): a
//!   `GPU-...` uuid directly, a `MIG-...` uuid through the device keys of the served
//!   `dgx_pixels_mig_info` series, a GPU index through those of `dgx_pixels_gpu_info`.
//! - Every device sample (one with a [`DeviceKey`](crate::DeviceKey)) whose row has none of the attribution labels
//!   gets the holder's labels when exactly **one** holder of a kind holds its key's GPU and MIG
//!   instance.
//! - When several holders share a device (time slicing, several jobs) the device's series keep
//!   no holder labels: one copy per holder would repeat one device reading under several label
//!   sets, and `sum by (pod)` would count it once per pod. Instead one info series per holder
//!   (`dgx_pixels_gpu_pod_info`, `dgx_pixels_gpu_hpc_job_info`) names every holder, so each
//!   sharing pod or job is attributed and can be joined on `uuid` and `gpu_instance`.
//! - Per-process series (`pod_uid` label, from `/proc/PID/cgroup`) are attributed per process
//!   first: a [`DeviceRef::PodProcesses`] pair says which container of the pod with that UID
//!   holds the device (the kubelet's device checkpoint names pods by UID), so on a shared GPU
//!   each process gets its own pod's labels. Exactly one holder for (device, UID) labels the
//!   process; several, another pod's UID, or no UID at all (a host process; a UID is taken only
//!   from the kubelet's own cgroup layout) leave it unlabelled on a device the checkpoint pairs
//!   with pods. Without the checkpoint, the device's rule above applies (never a guess).

use std::borrow::Cow;
use std::sync::Arc;

/// The label names attribution adds to device series, in the order they are appended.
pub const ATTRIBUTION_LABELS: &[&str] = &["namespace", "pod", "container", "hpc_job"];

/// How an attribution source names a device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceRef {
    /// A GPU uuid (`GPU-...`) or a MIG device uuid (`MIG-...`).
    Uuid(String),
    /// One GPU instance of a GPU given by uuid (the device plugin's older `MIG-GPU-UUID/GI/CI`
    /// ids).
    Instance {
        /// The GPU uuid (`GPU-...`).
        uuid: String,
        /// The MIG GPU instance id.
        gpu_instance: u32,
    },
    /// A GPU by index, optionally one GPU instance of it (HPC job files `0` or `0.3`).
    Index {
        /// The GPU index (`gpu` label).
        gpu: u32,
        /// The MIG GPU instance id, for a MIG instance.
        gpu_instance: Option<u32>,
    },
    /// The processes of the pod with UID `pod_uid` on `device`: labels their per-process
    /// series only, never the device's (which keep the rules above).
    PodProcesses {
        /// The device the pod holds (not itself a `PodProcesses`).
        device: Box<DeviceRef>,
        /// The pod's UID, lower-case with dashes, as `/proc/PID/cgroup` gives it.
        pod_uid: String,
    },
}

/// Who holds a device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Holder {
    /// A container of a Kubernetes pod.
    Pod {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        pod: String,
        /// The container's name.
        container: String,
        /// The pod's allow-listed Kubernetes labels as `label_<key>` pairs (`[kubernetes]
        /// pod_labels`), sorted by name; empty when the allow-list is empty or the pod
        /// metadata is not current. Only `dgx_pixels_gpu_pod_info` carries them.
        labels: PodLabels,
    },
    /// An HPC (e.g. Slurm) job id.
    Job(String),
}

/// Everything one attribution source saw in one poll: `(device, holder)` pairs. A holder may
/// appear on several devices and a device under several holders; duplicates are harmless.
pub type AttributionSet = Arc<Vec<(DeviceRef, Holder)>>;

/// A pod's labels as exposition label pairs (`label_team="ml"`), names already sanitized.
pub type PodLabels = Arc<[(Arc<str>, Arc<str>)]>;

/// The extra labels of one device key, resolved from every attribution source: the catalog's
/// attribution label names, or a pod's `label_<key>` names on its info series.
pub type Extra = Arc<[(Cow<'static, str>, String)]>;
