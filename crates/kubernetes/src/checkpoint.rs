//! The kubelet's device-manager checkpoint: which container of which pod (by pod UID) holds
//! which device-plugin devices.
//!
//! Why read it: the pod-resources API names pods by namespace and name and never by UID, and a
//! process names its pod only by UID (in `/proc/PID/cgroup`). The checkpoint, which the kubelet
//! rewrites on every allocation, ties each UID to its container and device ids; matched with
//! the `List` answer on those device ids (each is allocated to one container at a time), it
//! gives the UID's namespace and pod, so each process on a shared GPU can be labelled with its
//! own pod. It is the kubelet's internal file: read-only, bounded, and any failure only leaves
//! processes unlabelled (it is never required and never guessed around).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use dgx_pixels_metrics::{DeviceRef, Holder};
use dgx_pixels_settings::file::read_regular;
use serde::Deserialize;

use crate::pods::{device_ref, resource_matches};
use crate::proto::ListPodResourcesResponse;

/// Where the kubelet keeps it on a standard node.
pub const DEFAULT_CHECKPOINT: &str = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint";
/// Largest checkpoint read: a node with hundreds of pods writes a few hundred KiB (each entry
/// carries the plugin's base64 allocation response).
pub const MAX_CHECKPOINT_BYTES: u64 = 4 * 1024 * 1024;

/// Why the checkpoint could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Missing, unreadable or not a file.
    #[error("kubelet device checkpoint {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Larger than [`MAX_CHECKPOINT_BYTES`].
    #[error("kubelet device checkpoint {path} exceeds {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// Not the kubelet's JSON.
    #[error("kubelet device checkpoint {path} is not the kubelet's format: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
}

impl CheckpointError {
    /// Every [`CheckpointError::reason`], in the order of [`CheckpointError::index`].
    pub const REASONS: [&'static str; 3] = [
        "checkpoint_read",
        "checkpoint_too_large",
        "checkpoint_parse",
    ];

    /// The position of this error's reason in [`CheckpointError::REASONS`].
    pub fn index(&self) -> usize {
        match self {
            CheckpointError::Read { .. } => 0,
            CheckpointError::TooLarge { .. } => 1,
            CheckpointError::Parse { .. } => 2,
        }
    }

    /// The `reason` label of `dgx_pixels_source_read_errors_total{source="kubernetes"}`.
    pub fn reason(&self) -> &'static str {
        Self::REASONS[self.index()]
    }
}

/// One allocation: the devices of `resource` that the container `container` of the pod with
/// UID `pod_uid` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The pod's UID, lower-cased.
    pub pod_uid: String,
    /// The container's name.
    pub container: String,
    /// The extended resource (`nvidia.com/gpu`).
    pub resource: String,
    /// The device-plugin ids (`GPU-...::1`).
    pub device_ids: Vec<String>,
}

#[derive(Deserialize)]
struct RawFile {
    #[serde(rename = "Data")]
    data: RawData,
}

#[derive(Deserialize)]
struct RawData {
    #[serde(rename = "PodDeviceEntries", default)]
    entries: Option<Vec<RawEntry>>,
}

#[derive(Deserialize)]
struct RawEntry {
    #[serde(rename = "PodUID")]
    pod_uid: String,
    #[serde(rename = "ContainerName")]
    container: String,
    #[serde(rename = "ResourceName")]
    resource: String,
    #[serde(rename = "DeviceIDs", default)]
    device_ids: Option<RawIds>,
}

/// Kubelets since 1.20 group the ids by NUMA node; older ones wrote a flat list.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawIds {
    PerNuma(BTreeMap<String, Option<Vec<String>>>),
    Flat(Vec<String>),
}

/// The entries of a checkpoint's text.
pub fn parse(text: &str) -> Result<Vec<Entry>, serde_json::Error> {
    let file: RawFile = serde_json::from_str(text)?;
    Ok(file
        .data
        .entries
        .unwrap_or_default()
        .into_iter()
        .map(|e| Entry {
            pod_uid: e.pod_uid.trim().to_ascii_lowercase(),
            container: e.container,
            resource: e.resource,
            device_ids: match e.device_ids {
                Some(RawIds::PerNuma(m)) => m.into_values().flatten().flatten().collect(),
                Some(RawIds::Flat(ids)) => ids,
                None => Vec::new(),
            },
        })
        .collect())
}

/// Reads and parses the checkpoint at `path`, at most [`MAX_CHECKPOINT_BYTES`].
pub fn read(path: &Path) -> Result<Vec<Entry>, CheckpointError> {
    let read_err = |source| CheckpointError::Read {
        path: path.to_path_buf(),
        source,
    };
    // Non-blocking and a regular file only: a FIFO at the path must not hang the poll.
    let bytes = match read_regular(path, MAX_CHECKPOINT_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(CheckpointError::TooLarge {
                path: path.to_path_buf(),
                limit: MAX_CHECKPOINT_BYTES,
            })
        }
        Err(e) => return Err(read_err(e)),
    };
    let text = String::from_utf8_lossy(&bytes);
    parse(&text).map_err(|source| CheckpointError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// The per-process pairs: for every checkpoint entry of a GPU resource in `patterns` whose
/// device ids the `List` answer gives to exactly one container of one pod (with the entry's
/// container name), each of its devices as [`DeviceRef::PodProcesses`] with that container.
/// An entry `List` does not confirm (a pod gone, a stale checkpoint) gives nothing.
pub fn process_attribution(
    response: &ListPodResourcesResponse,
    entries: &[Entry],
    patterns: &[String],
) -> Vec<(DeviceRef, Holder)> {
    // (resource, device id) -> (pod index, container index): one container per id.
    let mut owner: HashMap<(&str, &str), (usize, usize)> = HashMap::new();
    for (p, pod) in response.pod_resources.iter().enumerate() {
        for (c, container) in pod.containers.iter().enumerate() {
            for devices in &container.devices {
                for id in &devices.device_ids {
                    owner.insert((devices.resource_name.as_str(), id.as_str()), (p, c));
                }
            }
        }
    }
    let mut out = Vec::new();
    for e in entries {
        if e.pod_uid.is_empty() || !resource_matches(patterns, &e.resource) {
            continue;
        }
        let mut found = e
            .device_ids
            .iter()
            .filter_map(|id| owner.get(&(e.resource.as_str(), id.as_str())));
        let Some(&first) = found.next() else {
            continue;
        };
        if found.any(|o| *o != first) {
            continue; // its ids are in several containers now: stale, so no answer
        }
        let (Some(pod), Some(container)) = (
            response.pod_resources.get(first.0),
            response
                .pod_resources
                .get(first.0)
                .and_then(|p| p.containers.get(first.1)),
        ) else {
            continue;
        };
        if container.name != e.container {
            continue;
        }
        let holder = Holder::Pod {
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            container: container.name.clone(),
            labels: Default::default(),
        };
        for device in e.device_ids.iter().filter_map(|id| device_ref(id)) {
            out.push((
                DeviceRef::PodProcesses {
                    device: Box::new(device),
                    pod_uid: e.pod_uid.clone(),
                },
                holder.clone(),
            ));
        }
    }
    out
}

/// A checkpoint's text for `entries` in the kubelet's current format (the fake kubelet and
/// tests): ids grouped under NUMA node 0, a checksum the reader ignores.
pub fn to_json(entries: &[Entry]) -> String {
    let entries: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "PodUID": e.pod_uid,
                "ContainerName": e.container,
                "ResourceName": e.resource,
                "DeviceIDs": { "0": e.device_ids },
                "AllocResp": "",
            })
        })
        .collect();
    serde_json::json!({
        "Data": { "PodDeviceEntries": entries, "RegisteredDevices": {} },
        "Checksum": 0,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::pod;

    const A: &str = "0b7f1c52-aaaa-bbbb-cccc-0123456789ab";
    const B: &str = "1c8e2d63-aaaa-bbbb-cccc-0123456789ab";
    const GPU: &str = "nvidia.com/gpu";

    fn patterns() -> Vec<String> {
        vec![GPU.to_string()]
    }

    fn entry(uid: &str, container: &str, ids: &[&str]) -> Entry {
        Entry {
            pod_uid: uid.into(),
            container: container.into(),
            resource: GPU.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn both_kubelet_formats_parse() {
        // Since 1.20: ids per NUMA node (a node may be null); unknown fields are ignored.
        let numa = format!(
            r#"{{"Data":{{"PodDeviceEntries":[{{"PodUID":"{}","ContainerName":"nb","ResourceName":"nvidia.com/gpu","DeviceIDs":{{"0":["GPU-a::0"],"1":["GPU-b::0"],"2":null}},"AllocResp":"CgA="}}],"RegisteredDevices":{{"nvidia.com/gpu":["GPU-a::0"]}}}},"Checksum":123}}"#,
            A.to_uppercase()
        );
        assert_eq!(
            parse(&numa).unwrap(),
            [entry(A, "nb", &["GPU-a::0", "GPU-b::0"])]
        );
        let flat = format!(
            r#"{{"Data":{{"PodDeviceEntries":[{{"PodUID":"{A}","ContainerName":"nb","ResourceName":"nvidia.com/gpu","DeviceIDs":["GPU-a"],"AllocResp":null}}],"RegisteredDevices":null}},"Checksum":1}}"#
        );
        assert_eq!(parse(&flat).unwrap(), [entry(A, "nb", &["GPU-a"])]);
        // A kubelet with no allocations writes null.
        let empty = r#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":1}"#;
        assert!(parse(empty).unwrap().is_empty());
        assert!(parse("{}").is_err());
        assert!(parse("not json").is_err());
        // Our own writer round-trips.
        let ours = [
            entry(A, "nb", &["GPU-a::0"]),
            entry(B, "srv", &["GPU-a::1"]),
        ];
        assert_eq!(parse(&to_json(&ours)).unwrap(), ours);
    }

    #[test]
    fn reads_are_bounded_and_errors_typed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet_internal_checkpoint");
        assert!(matches!(read(&path), Err(CheckpointError::Read { .. })));
        std::fs::write(&path, to_json(&[entry(A, "nb", &["GPU-a"])])).unwrap();
        assert_eq!(read(&path).unwrap().len(), 1);
        std::fs::write(&path, "{\"Data\":").unwrap();
        assert!(matches!(read(&path), Err(CheckpointError::Parse { .. })));
        let big = vec![b' '; MAX_CHECKPOINT_BYTES as usize + 1];
        std::fs::write(&path, big).unwrap();
        assert!(matches!(read(&path), Err(CheckpointError::TooLarge { .. })));
        // A FIFO (or anything but a regular file) at the path fails at once, never waits.
        std::fs::remove_file(&path).unwrap();
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        assert!(made.unwrap().success());
        assert!(matches!(read(&path), Err(CheckpointError::Read { .. })));
        assert!(matches!(
            read(dir.path()),
            Err(CheckpointError::Read { .. })
        ));
    }

    #[test]
    fn uids_resolve_through_the_list_answers_device_ids() {
        let response = ListPodResourcesResponse {
            pod_resources: vec![
                pod("nb", "alice", "notebook", GPU, &["GPU-a::0"]),
                pod("nb", "bob", "notebook", GPU, &["GPU-a::1", "GPU-b::0"]),
            ],
        };
        let entries = [
            entry(A, "notebook", &["GPU-a::0"]),
            entry(B, "notebook", &["GPU-a::1", "GPU-b::0"]),
            // Gone from List, a renamed container, another resource, ids split between pods.
            entry("c", "notebook", &["GPU-z::0"]),
            entry("d", "other", &["GPU-a::0"]),
            Entry {
                resource: "example.com/fpga".into(),
                ..entry("e", "notebook", &["GPU-a::0"])
            },
            entry("f", "notebook", &["GPU-a::0", "GPU-a::1"]),
        ];
        let pairs = process_attribution(&response, &entries, &patterns());
        let got: Vec<_> = pairs
            .iter()
            .map(|(d, h)| match (d, h) {
                (DeviceRef::PodProcesses { device, pod_uid }, Holder::Pod { pod, .. }) => {
                    (format!("{device:?}"), pod_uid.as_str(), pod.as_str())
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            got,
            [
                (r#"Uuid("GPU-a")"#.to_string(), A, "alice"),
                (r#"Uuid("GPU-a")"#.to_string(), B, "bob"),
                (r#"Uuid("GPU-b")"#.to_string(), B, "bob"),
            ]
        );
        assert!(process_attribution(&response, &[], &patterns()).is_empty());
    }
}
