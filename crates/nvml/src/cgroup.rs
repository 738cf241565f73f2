//! Container ids from `/proc/PID/cgroup`, so per-process GPU memory can be joined with the
//! container (and, through the kubelet, the pod) that owns it.

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

/// Reads the container id of process `pid` under the procfs mounted at `procfs`. Missing files
/// (the process ended, or lives in another PID namespace) give `None`.
pub fn container_id_of(procfs: &Path, pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(procfs.join(pid.to_string()).join("cgroup")).ok()?;
    container_id(&text)
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

    #[test]
    fn reads_from_a_procfs_tree() {
        let dir = std::env::temp_dir().join(format!("dgx-pixels-cgroup-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("4242")).unwrap();
        std::fs::write(dir.join("4242/cgroup"), format!("0::/docker-{ID}.scope\n")).unwrap();
        assert_eq!(container_id_of(&dir, 4242).as_deref(), Some(ID));
        assert_eq!(container_id_of(&dir, 1), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
