//! Container ids and pod UIDs from `/proc/PID/cgroup`, so per-process GPU series can be joined
//! with the container and the pod that own them (the pod through the kubelet's device-manager
//! checkpoint, which names pods by UID: see `dgx_pixels_kubernetes::checkpoint`).

use std::path::Path;

/// The container id in the text of a `/proc/PID/cgroup` file, if any.
///
/// In the kubelet's layout (see [`pod_uid`]) only the component right after the pod level is
/// the container: a cgroup a process made inside its container names nothing. Elsewhere the
/// layouts of Docker, containerd (`cri-containerd-ID.scope`), CRI-O (`crio-ID.scope`) and
/// Podman (`libpod-ID.scope`), on cgroup v1 and v2: an id is 64 hexadecimal digits; the last
/// one on the innermost path wins.
pub fn container_id(cgroup: &str) -> Option<String> {
    cgroup.lines().rev().find_map(|line| {
        let (components, namespaced) = components(line)?;
        match pod_level(&components, namespaced) {
            Some(pod) => components
                .get(pod.index + 1)
                .and_then(|c| id_in_component(c)),
            None => components.iter().rev().find_map(|c| id_in_component(c)),
        }
    })
}

/// The components of one `hierarchy-id:controllers:path` line's path, without the leading
/// `..` of a path seen from inside a cgroup namespace (it climbs out of the reader's own
/// namespace root), and whether there were any.
fn components(line: &str) -> Option<(Vec<&str>, bool)> {
    // The path may itself contain ':'.
    let path = line.splitn(3, ':').nth(2)?;
    let all: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let up = all.iter().take_while(|c| **c == "..").count();
    Some((all[up..].to_vec(), up > 0))
}

fn id_in_component(component: &str) -> Option<String> {
    let c = component.strip_suffix(".scope").unwrap_or(component);
    let c = ["cri-containerd-", "crio-", "docker-", "libpod-"]
        .iter()
        .find_map(|p| c.strip_prefix(p))
        .unwrap_or(c);
    (c.len() == 64 && c.bytes().all(|b| b.is_ascii_hexdigit())).then(|| c.to_ascii_lowercase())
}

/// The kubelet's QoS classes below its root; guaranteed pods sit directly under the root.
const QOS_CLASSES: [&str; 2] = ["besteffort", "burstable"];

/// The pod level of a path in the kubelet's own layout.
struct PodLevel<'a> {
    /// Its position among the path's components.
    index: usize,
    /// The UID text in its name (systemd: `_` for `-`), not yet checked.
    uid: &'a str,
}

/// The pod-level component when `components` are the kubelet's own layout, whatever the UID
/// in it says:
///
/// - systemd driver: `kubepods.slice/[kubepods-QOS.slice/]kubepods[-QOS]-pod<UID>.slice`;
/// - cgroupfs driver: `kubepods/[QOS/]pod<UID>`.
///
/// A path seen from inside a cgroup namespace (`namespaced`: it climbed out of the reader's
/// namespace root) may start below the root, at the QoS or the pod level, and the layout holds
/// from there. The kubelet's and systemd's directories are root's: a process can be put in
/// them, not make them. Any other place is not a pod (a `pod<UID>` under `user@1000.service`,
/// under `system.slice`, or made inside a container).
fn pod_level<'a>(components: &[&'a str], namespaced: bool) -> Option<PodLevel<'a>> {
    let first = *components.first()?;
    let systemd = first.ends_with(".slice");
    // The pod level at `i` under QoS class `qos` (`None`: guaranteed).
    let pod = |i: usize, qos: Option<&str>| -> Option<PodLevel<'a>> {
        let c: &'a str = components.get(i)?;
        let uid = if systemd {
            let prefix = match qos {
                Some(q) => format!("kubepods-{q}-pod"),
                None => "kubepods-pod".to_string(),
            };
            c.strip_suffix(".slice")?.strip_prefix(prefix.as_str())?
        } else {
            c.strip_prefix("pod")?
        };
        // In a systemd name a '-' is one more level: not the pod's own slice.
        let another_level = systemd && uid.contains('-');
        (!uid.is_empty() && !another_level).then_some(PodLevel { index: i, uid })
    };
    let qos = |c: &str| {
        QOS_CLASSES.into_iter().find(|q| {
            if systemd {
                c.strip_prefix("kubepods-")
                    .and_then(|s| s.strip_suffix(".slice"))
                    == Some(*q)
            } else {
                c == *q
            }
        })
    };
    let root = if systemd {
        "kubepods.slice"
    } else {
        "kubepods"
    };
    let start = if first == root {
        1
    } else if namespaced {
        0
    } else {
        return None;
    };
    match components.get(start).and_then(|c| qos(c)) {
        Some(q) => pod(start + 1, Some(q)),
        // Seen from a namespace, a systemd path may start at any pod's slice.
        None if start == 0 && systemd => {
            pod(0, None).or_else(|| QOS_CLASSES.into_iter().find_map(|q| pod(0, Some(q))))
        }
        None => pod(start, None),
    }
}

/// A UID as the kubelet writes it (a UUID: 36 characters, hex digits and four dashes, or `_`
/// for them in a systemd name), lower-cased with dashes.
fn uuid(text: &str) -> Option<String> {
    let uid = text.replace('_', "-");
    let ok = uid.len() == 36
        && uid.bytes().filter(|b| *b == b'-').count() == 4
        && uid.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit());
    ok.then(|| uid.to_ascii_lowercase())
}

/// Whether a component looks like a pod's (`pod<UUID>`, `...-pod<UUID>.slice`), wherever it is.
fn looks_like_pod(component: &str) -> bool {
    let c = component.strip_suffix(".slice").unwrap_or(component);
    c.rsplit_once("pod")
        .is_some_and(|(_, uid)| uuid(uid).is_some())
}

/// What one line says about the pod.
enum LinePod {
    /// Not in a pod.
    None,
    /// In the pod with this UID, by the kubelet's layout.
    Pod(String),
    /// A pod-like name where the kubelet puts none: someone made it.
    Forged,
}

fn line_pod(line: &str) -> LinePod {
    let Some((components, namespaced)) = components(line) else {
        return LinePod::None;
    };
    let level = pod_level(&components, namespaced);
    let first_free = level.as_ref().map_or(0, |l| l.index + 1);
    if components[first_free..].iter().any(|c| looks_like_pod(c)) {
        return LinePod::Forged;
    }
    match level.and_then(|l| uuid(l.uid)) {
        Some(uid) => LinePod::Pod(uid),
        None => LinePod::None,
    }
}

/// The Kubernetes pod UID in the text of a `/proc/PID/cgroup` file, if any, lower-cased with
/// dashes: only from the pod level of the kubelet's own layout (cgroup v1 and v2, systemd and
/// cgroupfs drivers; see `pod_level`), never from a name found elsewhere. A pod-like name
/// anywhere else (made deeper in a container, under a user's session, outside `kubepods`)
/// makes the whole file say no pod, as do lines (cgroup v1 hierarchies) naming two pods.
pub fn pod_uid(cgroup: &str) -> Option<String> {
    let mut found: Option<String> = None;
    for line in cgroup.lines() {
        match line_pod(line) {
            LinePod::None => {}
            LinePod::Forged => return None,
            LinePod::Pod(uid) => match &found {
                Some(other) if *other != uid => return None,
                _ => found = Some(uid),
            },
        }
    }
    found
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
    use dgx_pixels_settings::file::{read_untrusted, Untrusted};
    // Through the one bounded reader: a file over the bound is no file (a cut one could end
    // mid-path and name something else), so it leaves the process unattributed.
    let path = procfs.join(pid.to_string()).join("cgroup");
    let Ok(bytes) = read_untrusted(&path, &Untrusted::attribute(MAX_CGROUP_BYTES)) else {
        return CgroupIds::default();
    };
    let text = String::from_utf8_lossy(&bytes);
    CgroupIds {
        container_id: container_id(&text).unwrap_or_default(),
        pod_uid: pod_uid(&text).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4c9a2b1d0e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a";

    /// Issue 42: `/proc/PID/cgroup` is read through settings::file: a FIFO (in a test
    /// procfs, or a container's) never blocks the GPU's poll, and a file over 64 KiB is no
    /// answer rather than a cut one.
    #[test]
    fn a_cgroup_file_is_read_once_bounded_and_never_waited_on() {
        let procfs = tempfile::tempdir().unwrap();
        let write = |pid: u32, text: &str| {
            let dir = procfs.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cgroup"), text).unwrap();
        };
        let uid = "0f8e4a7c-1b2d-4e5f-8a9b-0c1d2e3f4a5b";
        let line = format!("0::/kubepods/besteffort/pod{uid}/{ID}\n");
        write(1, &line);
        assert_eq!(ids_of(procfs.path(), 1).pod_uid, uid);
        // The same line after 64 KiB of other lines: over the bound, unattributed.
        let filler = "1:name=x:/a\n".repeat(6000);
        write(2, &format!("{filler}{line}"));
        assert_eq!(ids_of(procfs.path(), 2), CgroupIds::default());
        let fifo_dir = procfs.path().join("3");
        std::fs::create_dir_all(&fifo_dir).unwrap();
        assert!(std::process::Command::new("mkfifo")
            .arg(fifo_dir.join("cgroup"))
            .status()
            .unwrap()
            .success());
        let start = std::time::Instant::now();
        assert_eq!(ids_of(procfs.path(), 3), CgroupIds::default());
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }

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

    const BOB: &str = "1c8e2d63-dddd-eeee-ffff-0123456789ab";

    /// The systemd driver's spelling of a UID.
    fn us(uid: &str) -> String {
        uid.replace('-', "_")
    }

    #[test]
    fn every_real_layout_names_its_pod_and_container() {
        let u = us(UID);
        let layouts = [
            // cgroup v2, systemd driver: guaranteed, burstable, besteffort.
            format!("0::/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{ID}.scope\n"),
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope\n"),
            format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-{ID}.scope\n"),
            // cgroupfs driver: guaranteed, burstable, besteffort.
            format!("0::/kubepods/pod{UID}/{ID}\n"),
            format!("0::/kubepods/burstable/pod{UID}/{ID}\n"),
            format!("0::/kubepods/besteffort/pod{UID}/crio-{ID}\n"),
            // cgroup v1: every hierarchy, the same pod (and a unified line at the root).
            format!(
                "12:memory:/kubepods/burstable/pod{UID}/{ID}\n\
                 4:devices:/kubepods/burstable/pod{UID}/{ID}\n\
                 1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n0::/\n"
            ),
            format!(
                "11:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope\n\
                 1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope\n"
            ),
            // Seen from a cgroup namespace (the exporter in a burstable pod's container): a
            // guaranteed pod three levels up, a besteffort one, a burstable one two levels up.
            format!("0::/../../../kubepods-pod{u}.slice/cri-containerd-{ID}.scope\n"),
            format!("0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope\n"),
            format!("0::/../../kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope\n"),
            format!("0::/../../../../kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{ID}.scope\n"),
            format!("0::/../../burstable/pod{UID}/{ID}\n"),
            // A process in a cgroup of its own inside its container is still the container's.
            format!("0::/kubepods/besteffort/pod{UID}/{ID}/init.scope\n"),
        ];
        for text in &layouts {
            assert_eq!(pod_uid(text).as_deref(), Some(UID), "{text}");
            assert_eq!(container_id(text).as_deref(), Some(ID), "{text}");
        }
    }

    /// Regression (hardening round 4, item 6): the innermost `pod<UUID>` anywhere was taken,
    /// so Alice's child cgroup named after Bob's pod, or a host process under a user's
    /// session, was billed to Bob.
    #[test]
    fn a_pod_named_anywhere_but_the_kubelets_pod_level_is_no_pod() {
        let u = us(UID);
        let b = us(BOB);
        let alice = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope"
        );
        let forged = [
            // Alice's child cgroups inside her container, named like Bob's pod.
            format!("0::{alice}/pod{BOB}\n"),
            format!("0::{alice}/kubepods-burstable-pod{b}.slice\n"),
            format!("0::{alice}/x/kubepods-pod{b}.slice/y\n"),
            format!("0::/kubepods/burstable/pod{UID}/{ID}/pod{BOB}/z\n"),
            // A host process under a user's session.
            format!("0::/user.slice/user-1000.slice/user@1000.service/app.slice/pod{BOB}/{ID}\n"),
            format!("0::/user.slice/user-1000.slice/user@1000.service/kubepods-pod{b}.slice/x.scope\n"),
            // The kubelet's names, but not at the root.
            format!("0::/user.slice/user-1000.slice/user@1000.service/kubepods.slice/kubepods-pod{b}.slice/x.scope\n"),
            format!("0::/system.slice/kubepods/pod{BOB}/{ID}\n"),
            // A QoS class's pod in another class, or directly under the root.
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod{b}.slice/x.scope\n"),
            format!("0::/kubepods.slice/kubepods-burstable-pod{b}.slice/x.scope\n"),
            format!("0::/kubepods/pod{BOB}/pod{UID}/x\n"),
            // Below the root without a namespace to climb out of: made inside our own cgroup.
            format!("0::/kubepods-burstable-pod{b}.slice/x.scope\n"),
            format!("0::/pod{BOB}/x\n"),
            // Two pods in two v1 hierarchies, or a forged name in one of them.
            format!("4:memory:/kubepods/pod{UID}/{ID}\n1:name=systemd:/kubepods/pod{BOB}/{ID}\n"),
            format!("4:memory:/kubepods/pod{UID}/{ID}\n1:name=systemd:/user.slice/pod{BOB}\n"),
        ];
        for text in &forged {
            assert_eq!(pod_uid(text), None, "{text}");
        }
        // Alice's container is still hers, whatever she names its children.
        assert_eq!(
            container_id(&format!("0::{alice}/docker-{}.scope\n", "f".repeat(64))).as_deref(),
            Some(ID)
        );
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
