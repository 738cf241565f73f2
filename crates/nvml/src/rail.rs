//! Rail NICs (issue 32): the InfiniBand / RoCE ports of the node from sysfs
//! (`<sysfs>/class/infiniband/<device>/ports/<n>/`), each GPU given the ports of its nearest
//! NIC by PCIe topology: the NIC whose sysfs device path shares the longest prefix with the
//! GPU's (the same PCIe switch before the same root port). A multi-node job's traffic from a
//! GPU leaves through that NIC, so its port being down stalls the job.
//!
//! Bounded: at most [`MAX_DEVICES`] devices of [`MAX_PORTS`] ports, each file read up to
//! [`MAX_FILE`] bytes; anything missing or malformed is left out, never an error.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use dgx_pixels_metrics::gpu::RailPortReadout;

/// Most InfiniBand devices read.
pub const MAX_DEVICES: usize = 64;
/// Most ports read per device.
pub const MAX_PORTS: u32 = 8;
/// Most bytes read from one sysfs file.
pub const MAX_FILE: u64 = 256;

/// One NIC: its name, its canonical sysfs device path, its ports.
#[derive(Debug, Clone, PartialEq)]
pub struct Nic {
    /// `mlx5_0`.
    pub name: String,
    /// The canonical path of its PCI function under `<sysfs>/devices`.
    pub pci_path: PathBuf,
    /// Its ports.
    pub ports: Vec<RailPortReadout>,
}

fn read_small(path: &Path) -> Option<String> {
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_FILE)
        .read_to_string(&mut s)
        .ok()?;
    Some(s.trim().to_string())
}

/// `4: ACTIVE` and `5: LinkUp` start with their code.
fn code(text: &str) -> Option<u32> {
    text.split(':').next()?.trim().parse().ok()
}

/// `400 Gb/sec (4X NDR)` in bytes per second.
fn rate_bytes_per_second(text: &str) -> Option<f64> {
    let gbps: f64 = text.split_whitespace().next()?.parse().ok()?;
    (gbps.is_finite() && gbps >= 0.0).then_some(gbps * 1e9 / 8.0)
}

/// Every NIC under `<sysfs>/class/infiniband`, by name; none where the directory is missing.
pub fn scan(sysfs: &Path) -> Vec<Nic> {
    let Ok(entries) = std::fs::read_dir(sysfs.join("class/infiniband")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .take(MAX_DEVICES)
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| {
            let dir = sysfs.join("class/infiniband").join(&name);
            let pci_path = std::fs::canonicalize(dir.join("device")).ok()?;
            let ports = (1..=MAX_PORTS)
                .filter_map(|port| {
                    let p = dir.join("ports").join(port.to_string());
                    let state = code(&read_small(&p.join("state"))?)?;
                    let phys = read_small(&p.join("phys_state")).and_then(|s| code(&s));
                    Some(RailPortReadout {
                        device: name.clone(),
                        port,
                        // ACTIVE (4), and the physical link up (5) where it says.
                        up: state == 4 && phys.is_none_or(|p| p == 5),
                        rate_bytes_per_second: read_small(&p.join("rate"))
                            .and_then(|r| rate_bytes_per_second(&r)),
                        link_downed: read_small(&p.join("counters/link_downed"))
                            .and_then(|v| v.parse::<u64>().ok())
                            .map(|v| v as f64),
                    })
                })
                .collect();
            Some(Nic {
                name,
                pci_path,
                ports,
            })
        })
        .collect()
}

/// The canonical sysfs path of the GPU with NVML's PCI bus id (`00000000:18:00.0`; sysfs
/// names it `0000:18:00.0`).
pub fn gpu_path(sysfs: &Path, pci_bus_id: &str) -> Option<PathBuf> {
    let id = pci_bus_id.to_ascii_lowercase();
    let short = id.get(id.len().checked_sub(12)?..)?;
    std::fs::canonicalize(sysfs.join("bus/pci/devices").join(short)).ok()
}

/// The NIC nearest to the GPU at `gpu`: the longest common path prefix, which must reach past
/// the PCI root (`pciDDDD:BB`): a NIC under another root complex is no rail of this GPU. Ties
/// go to the first by name.
pub fn nearest<'a>(gpu: &Path, nics: &'a [Nic]) -> Option<&'a Nic> {
    let common = |nic: &Nic| {
        gpu.components()
            .zip(nic.pci_path.components())
            .take_while(|(a, b)| a == b)
            .map(|(a, _)| a)
            .collect::<Vec<Component<'_>>>()
    };
    let mut best: Option<(&Nic, usize)> = None;
    for nic in nics {
        let shared = common(nic);
        let past_root = shared
            .iter()
            .any(|c| c.as_os_str().to_string_lossy().starts_with("pci"));
        if past_root && best.is_none_or(|(_, n)| shared.len() > n) {
            best = Some((nic, shared.len()));
        }
    }
    best.map(|(nic, _)| nic)
}

/// The rail ports of the GPU with `pci_bus_id`: its nearest NIC's; none without one.
pub fn ports_for(sysfs: &Path, pci_bus_id: &str) -> Vec<RailPortReadout> {
    let Some(gpu) = gpu_path(sysfs, pci_bus_id) else {
        return Vec::new();
    };
    let nics = scan(sysfs);
    nearest(&gpu, &nics)
        .map(|n| n.ports.clone())
        .unwrap_or_default()
}

/// Writes a fake sysfs tree under `root` for tests: GPUs and NICs as PCI functions under
/// `devices/pci0000:<root>/<bridge>/<function>`, linked from `bus/pci/devices`, and each NIC's
/// `class/infiniband/<name>` with one port.
#[doc(hidden)]
pub mod fake {
    use std::path::Path;

    /// A PCI function at `devices/pci0000:<root>/0000:<root>:<bridge>.0/<function>`.
    fn function(root: &Path, pci_root: &str, bridge: &str, function: &str) -> std::path::PathBuf {
        let dir = root
            .join("devices")
            .join(format!("pci0000:{pci_root}"))
            .join(format!("0000:{pci_root}:{bridge}.0"))
            .join(function);
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let bus = root.join("bus/pci/devices");
        std::fs::create_dir_all(&bus).unwrap_or_default();
        let _ = std::os::unix::fs::symlink(&dir, bus.join(function));
        dir
    }

    /// A GPU with sysfs name `function` (`0000:18:00.0`) behind bridge `bridge` of `pci_root`.
    pub fn gpu(root: &Path, pci_root: &str, bridge: &str, function_name: &str) {
        function(root, pci_root, bridge, function_name);
    }

    /// A NIC `name` at `function_name` behind bridge `bridge` of `pci_root`, its port 1 in
    /// `state` / `phys_state` at `rate`.
    pub fn nic(
        root: &Path,
        name: &str,
        pci_root: &str,
        bridge: &str,
        function_name: &str,
        state: &str,
        phys_state: &str,
    ) {
        let dev = function(root, pci_root, bridge, function_name);
        let ib = root.join("class/infiniband").join(name);
        let port = ib.join("ports/1");
        std::fs::create_dir_all(port.join("counters")).unwrap_or_default();
        let _ = std::os::unix::fs::symlink(&dev, ib.join("device"));
        set_port(root, name, state, phys_state);
        let _ = std::fs::write(port.join("rate"), "400 Gb/sec (4X NDR)\n");
        let _ = std::fs::write(port.join("counters/link_downed"), "0\n");
    }

    /// Sets the rate port 1 of NIC `name` trained to (`400 Gb/sec (4X NDR)`).
    pub fn set_rate(root: &Path, name: &str, rate: &str) {
        let port = root.join("class/infiniband").join(name).join("ports/1");
        let _ = std::fs::write(port.join("rate"), format!("{rate}\n"));
    }

    /// Sets port 1 of NIC `name` to `state` / `phys_state`.
    pub fn set_port(root: &Path, name: &str, state: &str, phys_state: &str) {
        let port = root.join("class/infiniband").join(name).join("ports/1");
        let _ = std::fs::write(port.join("state"), format!("{state}\n"));
        let _ = std::fs::write(port.join("phys_state"), format!("{phys_state}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gpu_gets_its_nearest_nics_ports() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // Two GPUs and two NICs under two PCIe switches of one root complex, a third NIC under
        // another root complex, and a GPU alone under a third.
        fake::gpu(root, "17", "01", "0000:18:00.0");
        fake::nic(
            root,
            "mlx5_0",
            "17",
            "01",
            "0000:19:00.0",
            "4: ACTIVE",
            "5: LinkUp",
        );
        fake::gpu(root, "17", "02", "0000:2a:00.0");
        fake::nic(
            root,
            "mlx5_1",
            "17",
            "02",
            "0000:2b:00.0",
            "1: DOWN",
            "3: Disabled",
        );
        fake::nic(
            root,
            "mlx5_2",
            "9a",
            "01",
            "0000:9b:00.0",
            "4: ACTIVE",
            "5: LinkUp",
        );
        fake::gpu(root, "ba", "01", "0000:bb:00.0");
        let p0 = ports_for(root, "00000000:18:00.0");
        assert_eq!(p0.len(), 1);
        assert_eq!(
            (p0[0].device.as_str(), p0[0].port, p0[0].up),
            ("mlx5_0", 1, true)
        );
        assert_eq!(p0[0].rate_bytes_per_second, Some(50e9));
        assert_eq!(p0[0].link_downed, Some(0.0));
        let p1 = ports_for(root, "00000000:2A:00.0");
        assert_eq!((p1[0].device.as_str(), p1[0].up), ("mlx5_1", false));
        // No NIC under its root complex: no rail.
        assert!(ports_for(root, "00000000:BB:00.0").is_empty());
        // Not in sysfs at all, or no infiniband class: nothing, no error.
        assert!(ports_for(root, "00000000:CC:00.0").is_empty());
        assert!(ports_for(&root.join("nowhere"), "00000000:18:00.0").is_empty());
        // Active but the physical link down is down.
        fake::set_port(root, "mlx5_0", "4: ACTIVE", "3: Disabled");
        assert!(!ports_for(root, "00000000:18:00.0")[0].up);
    }

    #[test]
    fn sysfs_texts_parse() {
        assert_eq!(code("4: ACTIVE"), Some(4));
        assert_eq!(code("garbage"), None);
        assert_eq!(rate_bytes_per_second("200 Gb/sec (2X NDR)"), Some(25e9));
        assert_eq!(rate_bytes_per_second("fast"), None);
    }
}
