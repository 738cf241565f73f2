//! Container ids and pod UIDs from `/proc/PID/cgroup`, so per-process GPU series can be joined
//! with the container and the pod that own them (the pod through the kubelet's device-manager
//! checkpoint, which names pods by UID: see `dgx_pixels_kubernetes::checkpoint`).

use std::path::Path;

/// The container id in the text of a `/proc/PID/cgroup` file, if any.
///
/// Handles cgroup v1 and v2 with the layouts of Docker, containerd (`cri-containerd-ID.scope`,
/// or a bare id under `kubepods`), CRI-O (`crio-ID.scope`) and Podman (`libpod-ID.scope`). An id
/// is 64 hexadecimal digits; the last one on the innermost path wins.
pub fn container_id(cgroup: &str) -> Option<String> {
    cgroup.lines().rev().find_map(|line| {
        // "hierarchy-id:controllers:path"; the path may itself contain ':'.
        let path = line.splitn(3, ':').nth(2)?;
        path.rsplit('/').find_map(id_in_component)
    })
}

fn id_in_component(component: &str) -> Option<String> {
    let c = component.strip_suffix(".scope").unwrap_or(component);
    let c = ["cri-containerd-", "crio-", "docker-", "libpod-"]
        .iter()
        .find_map(|p| c.strip_prefix(p))
        .unwrap_or(c);
    (c.len() == 64 && c.bytes().all(|b| b.is_ascii_hexdigit())).then(|| c.to_ascii_lowercase())
}

/// The Kubernetes pod UID in the text of a `/proc/PID/cgroup` file, if any: the kubelet's
/// `kubepods[-QOS]-pod<UID>.slice` (systemd cgroup driver, `_` for `-` in the UID) or
/// `kubepods/[QOS/]pod<UID>` (cgroupfs driver). Lower-cased, with dashes; the innermost wins.
pub fn pod_uid(cgroup: &str) -> Option<String> {
    cgroup.lines().rev().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        path.rsplit('/').find_map(uid_in_component)
    })
}

fn uid_in_component(component: &str) -> Option<String> {
    let uid = match component.strip_suffix(".slice") {
        // systemd: "kubepods-pod<uid>.slice", "kubepods-burstable-pod<uid>.slice".
        Some(slice) => {
            slice
                .strip_prefix("kubepods-")?
                .rsplit_once("pod")
                .map(|(qos, uid)| (qos, uid.replace('_', "-")))
                .filter(|(qos, _)| qos.is_empty() || qos.ends_with('-'))?
                .1
        }
        // cgroupfs: "pod<uid>" (its parent is kubepods or a QoS class).
        None => component.strip_prefix("pod")?.to_string(),
    };
    // A UID is a UUID: 36 characters, hex digits and four dashes.
    let ok = uid.len() == 36
        && uid.bytes().filter(|b| *b == b'-').count() == 4
        && uid.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit());
    ok.then(|| uid.to_ascii_lowercase())
}

/// What `/proc/PID/cgroup` says about one process: its container and its pod, where known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupIds {
    /// The container id (64 hex digits), empty when none.
    pub container_id: String,
    /// The Kubernetes pod UID, empty when none.
    pub pod_uid: String,
}

/// Longest `/proc/PID/cgroup` read: a handful of lines in practice (one per v1 hierarchy).
const MAX_CGROUP_BYTES: u64 = 64 * 1024;

/// Reads the container id and pod UID of process `pid` under the procfs mounted at `procfs`,
/// bounded. Missing files (the process ended, or lives in another PID namespace) give empty
/// ids.
pub fn ids_of(procfs: &Path, pid: u32) -> CgroupIds {
    use std::io::Read;
    let mut text = String::new();
    let read = std::fs::File::open(procfs.join(pid.to_string()).join("cgroup"))
        .and_then(|f| f.take(MAX_CGROUP_BYTES).read_to_string(&mut text));
    if read.is_err() {
        return CgroupIds::default();
    }
    CgroupIds {
        container_id: container_id(&text).unwrap_or_default(),
        pod_uid: pod_uid(&text).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4c9a2b1d0e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a";

    #[test]
    fn cgroup_v2_containerd_under_systemd() {
        let text = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-{ID}.scope\n"
        );
        assert_eq!(container_id(&text).as_deref(), Some(ID));
    }

    #[test]
    fn cgroup_v2_crio_and_podman() {
        let crio = format!("0::/kubepods.slice/kubepods-pod99.slice/crio-{ID}.scope\n");
        assert_eq!(container_id(&crio).as_deref(), Some(ID));
        let podman = format!("0::/machine.slice/libpod-{ID}.scope/container\n");
        assert_eq!(container_id(&podman).as_deref(), Some(ID));
    }

    #[test]
    fn cgroup_v1_docker_and_cgroupfs_kubepods() {
        let docker =
            format!("12:pids:/docker/{ID}\n11:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n");
        assert_eq!(container_id(&docker).as_deref(), Some(ID));
        let kube = format!(
            "4:devices:/kubepods/besteffort/pod0b7f1c52-aaaa-bbbb-cccc-0123456789ab/{}\n",
            ID.to_uppercase()
        );
        assert_eq!(
            container_id(&kube).as_deref(),
            Some(ID),
            "ids are lower-cased"
        );
    }

    #[test]
    fn cgroup_v1_containerd_and_crio_under_kubernetes() {
        // containerd with the systemd cgroup driver on a v1 (hybrid) host.
        let containerd = format!(
            "11:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b7f1c52_aaaa.slice/cri-containerd-{ID}.scope\n\
             1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b7f1c52_aaaa.slice/cri-containerd-{ID}.scope\n"
        );
        assert_eq!(container_id(&containerd).as_deref(), Some(ID));
        // CRI-O with the cgroupfs driver.
        let crio = format!(
            "9:devices:/kubepods/burstable/pod0b7f1c52-aaaa-bbbb-cccc-0123456789ab/crio-{ID}\n"
        );
        assert_eq!(container_id(&crio).as_deref(), Some(ID));
        // The pause container's conmon scope is not the workload's container.
        let conmon = format!("0::/kubepods.slice/kubepods-pod1.slice/crio-conmon-{ID}.scope\n");
        assert_eq!(container_id(&conmon), None);
    }

    #[test]
    fn host_processes_have_no_container() {
        assert_eq!(
            container_id("0::/user.slice/user-1000.slice/session-2.scope\n"),
            None
        );
        assert_eq!(container_id("0::/\n"), None);
        assert_eq!(container_id(""), None);
        assert_eq!(container_id("garbage without colons"), None);
        // 63 hex digits is not an id.
        assert_eq!(container_id(&format!("0::/docker/{}", &ID[1..])), None);
    }

    const UID: &str = "0b7f1c52-aaaa-bbbb-cccc-0123456789ab";

    #[test]
    fn pod_uids_under_both_cgroup_drivers() {
        let systemd = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(pod_uid(&systemd).as_deref(), Some(UID));
        // Guaranteed pods sit directly under kubepods.slice.
        let guaranteed = format!(
            "0::/kubepods.slice/kubepods-pod{}.slice/crio-{ID}.scope\n",
            UID.to_uppercase().replace('-', "_")
        );
        assert_eq!(pod_uid(&guaranteed).as_deref(), Some(UID), "lower-cased");
        let cgroupfs = format!("4:devices:/kubepods/besteffort/pod{UID}/{ID}\n");
        assert_eq!(pod_uid(&cgroupfs).as_deref(), Some(UID));
        let cgroupfs_guaranteed = format!("0::/kubepods/pod{UID}/{ID}\n");
        assert_eq!(pod_uid(&cgroupfs_guaranteed).as_deref(), Some(UID));
        // Seen from inside a cgroup namespace, the path climbs out of the reader's own.
        let namespaced = format!(
            "0::/../../kubepods-besteffort-pod{}.slice/cri-containerd-{ID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(pod_uid(&namespaced).as_deref(), Some(UID));
    }

    #[test]
    fn no_pod_uid_is_made_up() {
        // Not UUIDs: too short, not hex, a dash short.
        assert_eq!(
            pod_uid("0::/kubepods.slice/kubepods-pod1234.slice/x.scope\n"),
            None
        );
        assert_eq!(
            pod_uid("0::/kubepods/podzb7f1c52-aaaa-bbbb-cccc-0123456789ab/x\n"),
            None
        );
        assert_eq!(
            pod_uid("0::/kubepods/pod0b7f1c52aaaaa-bbbb-cccc-0123456789ab/x\n"),
            None
        );
        // Another unit that happens to contain "pod".
        assert_eq!(
            pod_uid(&format!(
                "0::/system.slice/podman-pod{}.slice\n",
                UID.replace('-', "_")
            )),
            None
        );
        assert_eq!(
            pod_uid("0::/user.slice/user-1000.slice/session-2.scope\n"),
            None
        );
        assert_eq!(pod_uid(""), None);
    }

    #[test]
    fn reads_from_a_procfs_tree() {
        let dir = std::env::temp_dir().join(format!("dgx-pixels-cgroup-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("4242")).unwrap();
        std::fs::write(dir.join("4242/cgroup"), format!("0::/docker-{ID}.scope\n")).unwrap();
        assert_eq!(ids_of(&dir, 4242).container_id, ID);
        assert_eq!(ids_of(&dir, 4242).pod_uid, "");
        std::fs::create_dir_all(dir.join("4343")).unwrap();
        std::fs::write(
            dir.join("4343/cgroup"),
            format!("0::/kubepods/burstable/pod{UID}/{ID}\n"),
        )
        .unwrap();
        assert_eq!(
            ids_of(&dir, 4343),
            CgroupIds {
                container_id: ID.into(),
                pod_uid: UID.into()
            }
        );
        assert_eq!(ids_of(&dir, 1), CgroupIds::default());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
