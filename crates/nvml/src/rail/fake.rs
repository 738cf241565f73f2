use std::path::{Path, PathBuf};

/// PCI class codes as sysfs writes them.
const BRIDGE: &str = "0x060400";
const GPU_3D: &str = "0x030200";
const INFINIBAND: &str = "0x020700";

/// A PCI function at `devices/<chain...>`: the first element the root (`pci0000:17`), the
/// others PCI addresses of bridges, the last the function itself; bridges get a bridge's
/// class where they have none yet, the function `class` and `vendor`.
fn function_at(root: &Path, chain: &[&str], class: &str, vendor: &str) -> PathBuf {
    let mut dir = root.join("devices");
    for (i, part) in chain.iter().enumerate() {
        dir.push(part);
        std::fs::create_dir_all(&dir).unwrap_or_default();
        if i > 0 && i + 1 < chain.len() && !dir.join("class").exists() {
            let _ = std::fs::write(dir.join("class"), format!("{BRIDGE}\n"));
            let _ = std::fs::write(dir.join("vendor"), "0x1000\n");
        }
    }
    let _ = std::fs::write(dir.join("class"), format!("{class}\n"));
    let _ = std::fs::write(dir.join("vendor"), format!("{vendor}\n"));
    let bus = root.join("bus/pci/devices");
    std::fs::create_dir_all(&bus).unwrap_or_default();
    if let Some(name) = chain.last() {
        let _ = std::os::unix::fs::symlink(&dir, bus.join(name));
    }
    dir
}

/// The chain of `devices/pci0000:<root>/0000:<root>:<bridge>.0/<function>`.
fn chain(pci_root: &str, bridge: &str, function: &str) -> [String; 3] {
    [
        format!("pci0000:{pci_root}"),
        format!("0000:{pci_root}:{bridge}.0"),
        function.to_string(),
    ]
}

/// A GPU with sysfs name `function` (`0000:18:00.0`) behind bridge `bridge` of `pci_root`.
pub fn gpu(root: &Path, pci_root: &str, bridge: &str, function_name: &str) {
    let c = chain(pci_root, bridge, function_name);
    gpu_at(root, &c.iter().map(String::as_str).collect::<Vec<_>>());
}

/// An NVIDIA GPU at the end of `chain` (root, bridges, the GPU's address).
pub fn gpu_at(root: &Path, chain: &[&str]) {
    function_at(root, chain, GPU_3D, "0x10de");
}

/// Another PCI function (an NVMe drive, an NVSwitch) at the end of `chain`.
pub fn other_at(root: &Path, chain: &[&str], class: &str, vendor: &str) {
    function_at(root, chain, class, vendor);
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
    let c = chain(pci_root, bridge, function_name);
    nic_at(
        root,
        name,
        &c.iter().map(String::as_str).collect::<Vec<_>>(),
        state,
        phys_state,
    );
}

/// A NIC `name` at the end of `chain`, its port 1 in `state` / `phys_state` at 400 Gb/s.
pub fn nic_at(root: &Path, name: &str, chain: &[&str], state: &str, phys_state: &str) {
    let dev = function_at(root, chain, INFINIBAND, "0x15b3");
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

/// DGX A100's layout of one of its four PCIe switch complexes (after `nvidia-smi topo -m`:
/// GPU0 and GPU1 PXB to each other and to both mlx5_0 and mlx5_1): the switch's downstream
/// ports each lead through a second-level bridge to one device, so both GPUs and both NICs
/// share the same longest path and tie. `gpus` and `nics` are the devices' addresses (and
/// the NICs' names); the bridges' addresses are made up. NIC ports are up; an NVMe drive
/// sits under the same switch.
pub fn dgx_a100_switch(root: &Path, pci: &str, gpus: [&str; 2], nics: [(&str, &str); 2]) {
    let under = |port: usize, leaf: &str| -> Vec<String> {
        vec![
            format!("pci0000:{pci}"),
            format!("0000:{pci}:01.1"),
            format!("0000:{}:00.0", next(pci, 1)),
            format!("0000:{}:{port:02x}.0", next(pci, 2)),
            format!("0000:{}:00.0", next(pci, 3 + port as u8)),
            leaf.to_string(),
        ]
    };
    let strs = |c: &[String]| {
        c.iter()
            .map(String::as_str)
            .collect::<Vec<&str>>()
            .join("/")
    };
    for (i, g) in gpus.iter().enumerate() {
        let c = strs(&under(2 * i, g));
        gpu_at(root, &c.split('/').collect::<Vec<_>>());
    }
    for (i, (name, addr)) in nics.iter().enumerate() {
        let c = strs(&under(2 * i + 1, addr));
        let c: Vec<&str> = c.split('/').collect();
        nic_at(root, name, &c, "4: ACTIVE", "5: LinkUp");
    }
    let nvme = format!("0000:{}:00.0", next(pci, 9));
    let c = strs(&under(5, &nvme));
    other_at(
        root,
        &c.split('/').collect::<Vec<_>>(),
        "0x010802",
        "0x144d",
    );
}

/// The bus `by` after `pci` (hex).
fn next(pci: &str, by: u8) -> String {
    let bus = u8::from_str_radix(pci, 16).unwrap_or(0).wrapping_add(by);
    format!("{bus:02x}")
}
