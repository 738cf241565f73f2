//! Rail NICs (issue 32): the InfiniBand / RoCE ports of the node from sysfs
//! (`<sysfs>/class/infiniband/<device>/ports/<n>/`), each GPU given the ports of its rail NIC by
//! PCIe topology: the NIC whose sysfs device path shares the longest prefix with the GPU's (the
//! same PCIe switch before the same root port). A multi-node job's traffic from a GPU leaves
//! through that NIC, so its port being down stalls the job.
//!
//! Ties (issue 43): where several NICs share the longest prefix with a GPU (DGX A100: two GPUs
//! and two NICs behind one PCIe switch, `nvidia-smi topo -m` shows GPU0 and GPU1 PXB to both
//! mlx5_0 and mlx5_1), the GPUs under that switch that tie on the same NICs are paired with
//! them in order: the k-th GPU by PCI address with the k-th NIC by PCI address (with m GPUs and
//! n NICs, GPU k gets NIC `k * n / m`). `[nvml.rails]` pins a GPU to a NIC by name instead.
//!
//! Bounded: at most [`MAX_DEVICES`] devices of [`MAX_PORTS`] ports, each file read up to
//! [`MAX_FILE`] bytes, at most [`MAX_WALK`] directories walked to find a switch's GPUs;
//! anything missing or malformed is left out, never an error.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dgx_pixels_metrics::gpu::RailPortReadout;
use dgx_pixels_settings::file::{read_untrusted, with_deadline, Untrusted};

/// Most InfiniBand devices read.
pub const MAX_DEVICES: usize = 64;
/// Most ports read per device.
pub const MAX_PORTS: u32 = 8;
/// Most bytes read from one sysfs file.
pub const MAX_FILE: u64 = 256;
/// Longest wait for one sysfs file: a hung HCA's counter costs its own reading, no more.
pub const FILE_DEADLINE: Duration = Duration::from_millis(100);
/// Longest one scan of the node's NICs may take; past it, the ports not yet read are left out.
pub const SCAN_BUDGET: Duration = Duration::from_secs(1);
/// Fastest rate a port may report: 3.2 Tb/s, twice the fastest InfiniBand link (XDR 4x, 1.6
/// Tb/s) that exists. A larger figure is no rate of a real port; it is left out.
pub const MAX_RATE_BITS_PER_SECOND: f64 = 3.2e12; // fact: rail.max-rate-bits
/// Most PCI directories walked under one switch to find its GPUs (a DGX A100 switch holds
/// about a dozen functions and bridges).
pub const MAX_WALK: usize = 256;
/// Deepest a switch's GPUs are looked for below it.
pub const MAX_WALK_DEPTH: usize = 8;
/// NVIDIA's PCI vendor id.
const NVIDIA_VENDOR: &str = "0x10de";

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

/// `4: ACTIVE` and `5: LinkUp` start with their code.
fn code(text: &str) -> Option<u32> {
    text.split(':').next()?.trim().parse().ok()
}

/// `400 Gb/sec (4X NDR)` in bytes per second; none for a rate no port has.
fn rate_bytes_per_second(text: &str) -> Option<f64> {
    let gbps: f64 = text.split_whitespace().next()?.parse().ok()?;
    let bits = gbps * 1e9;
    (bits.is_finite() && (0.0..=MAX_RATE_BITS_PER_SECOND).contains(&bits)).then_some(bits / 8.0)
}

/// How one sysfs file is read (a parameter so that tests can stand in a file that hangs).
pub type ReadFile = fn(&Path) -> std::io::Result<Vec<u8>>;

fn read_attribute(path: &Path) -> std::io::Result<Vec<u8>> {
    // Opened once, non-blocking, only if it is a regular file (sysfs attributes are): a FIFO
    // or device planted in a test tree or a container's view of sysfs is refused at once.
    read_untrusted(path, &Untrusted::attribute(MAX_FILE))
}

/// The rail NICs of the node, read at most once per `max_age` however many GPUs ask, each
/// sysfs file read off the asking thread under [`FILE_DEADLINE`]: a file that hangs costs its
/// own reading (and is skipped while its read stays blocked), never a GPU's poll.
#[derive(Debug)]
pub struct Rails {
    sysfs: PathBuf,
    max_age: Duration,
    read: ReadFile,
    last: Mutex<Option<(Instant, Arc<Vec<Nic>>)>>,
    /// The GPUs found under each switch since the last scan (none where one could not be
    /// told apart: a PCI function whose class did not answer).
    gpus: Mutex<BTreeMap<PathBuf, Option<Vec<PathBuf>>>>,
    /// `[nvml.rails]`: NIC names pinned to GPUs by sysfs PCI address (`0000:07:00.0`).
    pins: BTreeMap<String, String>,
    /// Files whose read passed its deadline and has not returned yet.
    stuck: Arc<Mutex<BTreeSet<PathBuf>>>,
}

impl Rails {
    /// The NICs under `sysfs`, scanned again when the last scan is older than `max_age`.
    pub fn new(sysfs: impl Into<PathBuf>, max_age: Duration) -> Rails {
        Rails::with_reader(sysfs, max_age, read_attribute)
    }

    /// The same with files read by `read`.
    pub fn with_reader(sysfs: impl Into<PathBuf>, max_age: Duration, read: ReadFile) -> Rails {
        Rails {
            sysfs: sysfs.into(),
            max_age,
            read,
            last: Mutex::new(None),
            gpus: Mutex::new(BTreeMap::new()),
            pins: BTreeMap::new(),
            stuck: Arc::new(Mutex::new(BTreeSet::new())),
        }
    }

    /// The same with GPUs pinned to NICs: `pins` maps a GPU's PCI address (any case, with a
    /// 4- or 8-digit domain) to a NIC's name; a pinned GPU gets that NIC's ports whatever the
    /// topology, none while no NIC has the name.
    pub fn with_pins(mut self, pins: &BTreeMap<String, String>) -> Rails {
        self.pins = pins
            .iter()
            .filter_map(|(gpu, nic)| Some((short_address(gpu)?, nic.clone())))
            .collect();
        self
    }

    /// Where sysfs is mounted.
    pub fn sysfs(&self) -> &Path {
        &self.sysfs
    }

    /// Files whose read is still blocked.
    pub fn stuck(&self) -> Vec<PathBuf> {
        self.stuck
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// The node's NICs: the last scan when it is fresh, a new one otherwise (GPUs asking
    /// meanwhile wait for it and share it).
    pub fn nics(&self) -> Arc<Vec<Nic>> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, nics)) = last.as_ref() {
            if at.elapsed() < self.max_age {
                return Arc::clone(nics);
            }
        }
        let nics = Arc::new(self.scan());
        *last = Some((Instant::now(), Arc::clone(&nics)));
        // A new scan, a new look at the switches' GPUs.
        self.gpus
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        nics
    }

    /// The trimmed text of one sysfs file; none when missing, unreadable, hung or past the
    /// scan's budget.
    fn read_small(&self, path: &Path, until: Instant) -> Option<String> {
        if Instant::now() >= until {
            return None;
        }
        {
            let stuck = self.stuck.lock().unwrap_or_else(PoisonError::into_inner);
            if stuck.contains(path) {
                return None;
            }
        }
        let read = self.read;
        let owned = path.to_path_buf();
        let stuck = Arc::clone(&self.stuck);
        let returned = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&returned);
        let result = with_deadline(FILE_DEADLINE, move || {
            let r = read(&owned);
            // Returned at last: no longer stuck. Under the lock, so that a waiter that gave up
            // a moment ago sees it and does not mark it stuck for good.
            let mut stuck = stuck.lock().unwrap_or_else(PoisonError::into_inner);
            done.store(true, Ordering::Relaxed);
            stuck.remove(&owned);
            r
        });
        match result {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).trim().to_string()),
            Err(e) => {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    let mut stuck = self.stuck.lock().unwrap_or_else(PoisonError::into_inner);
                    if !returned.load(Ordering::Relaxed) {
                        stuck.insert(path.to_path_buf());
                    }
                    drop(stuck);
                    tracing::warn!(
                        file = %path.display(),
                        "a rail NIC sysfs file did not answer within {FILE_DEADLINE:?}; skipped while its read stays blocked"
                    );
                }
                None
            }
        }
    }

    /// Every NIC under `<sysfs>/class/infiniband`, by name; none where the directory is
    /// missing.
    fn scan(&self) -> Vec<Nic> {
        let until = Instant::now() + SCAN_BUDGET;
        let class = self.sysfs.join("class/infiniband");
        let Ok(entries) = std::fs::read_dir(&class) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .flatten()
            .take(MAX_DEVICES)
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
            .into_iter()
            .filter_map(|name| {
                let dir = class.join(&name);
                // A link read, never a file opened: sysfs answers it without the driver.
                let pci_path = std::fs::canonicalize(dir.join("device")).ok()?;
                let ports = (1..=MAX_PORTS)
                    .filter_map(|port| {
                        let p = dir.join("ports").join(port.to_string());
                        let state = code(&self.read_small(&p.join("state"), until)?)?;
                        let phys = self
                            .read_small(&p.join("phys_state"), until)
                            .and_then(|s| code(&s));
                        Some(RailPortReadout {
                            device: name.clone(),
                            port,
                            // ACTIVE (4), and the physical link up (5) where it says.
                            up: state == 4 && phys.is_none_or(|p| p == 5),
                            rate_bytes_per_second: self
                                .read_small(&p.join("rate"), until)
                                .and_then(|r| rate_bytes_per_second(&r)),
                            link_downed: self
                                .read_small(&p.join("counters/link_downed"), until)
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

    /// The rail ports of the GPU with `pci_bus_id`: its pinned NIC's, or its rail NIC's by
    /// topology ([`paired`]); none without one.
    pub fn ports_for(&self, pci_bus_id: &str) -> Vec<RailPortReadout> {
        let nics = self.nics();
        if let Some(name) = short_address(pci_bus_id).and_then(|a| self.pins.get(&a)) {
            return nics
                .iter()
                .find(|n| &n.name == name)
                .map(|n| n.ports.clone())
                .unwrap_or_default();
        }
        let Some(gpu) = gpu_path(&self.sysfs, pci_bus_id) else {
            return Vec::new();
        };
        let (shared, tied) = nearest_all(&gpu, &nics);
        if tied.len() < 2 {
            return tied.first().map(|n| n.ports.clone()).unwrap_or_default();
        }
        // The switch the tie is under: the GPU's path as far as it shares it with the NICs.
        let switch: PathBuf = gpu.components().take(shared).collect();
        let Some(gpus) = self.gpus_under(&switch) else {
            tracing::debug!(switch = %switch.display(), "a PCI function under the switch did not say its class; its GPUs' rails are left out");
            return Vec::new();
        };
        paired(&gpu, &gpus, &nics)
            .map(|n| n.ports.clone())
            .unwrap_or_default()
    }

    /// The NVIDIA GPUs (display or 3D controllers of vendor 0x10de) below `switch`, by
    /// canonical path; none when a PCI function's class or vendor did not answer (a GPU could
    /// be missed, and with it the order).
    fn gpus_under(&self, switch: &Path) -> Option<Vec<PathBuf>> {
        if let Some(found) = self
            .gpus
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(switch)
        {
            return found.clone();
        }
        let until = Instant::now() + SCAN_BUDGET;
        let mut found = Some(Vec::new());
        let mut queue = vec![(switch.to_path_buf(), 0usize)];
        let mut walked = 0;
        while let Some((dir, depth)) = queue.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten().take(MAX_WALK) {
                let name = entry.file_name();
                let is_function = name.to_str().is_some_and(|n| short_address(n).is_some());
                // Links (`subsystem`, `driver`, ...) lead out of the tree: real directories only.
                if !is_function || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                walked += 1;
                if walked > MAX_WALK {
                    found = None;
                    break;
                }
                let path = entry.path();
                match self.read_small(&path.join("class"), until) {
                    None => found = None,
                    Some(class) if class.starts_with("0x0302") || class.starts_with("0x0300") => {
                        match self.read_small(&path.join("vendor"), until) {
                            None => found = None,
                            Some(v) if v.eq_ignore_ascii_case(NVIDIA_VENDOR) => {
                                if let Some(f) = found.as_mut() {
                                    f.push(path.clone());
                                }
                            }
                            Some(_) => {}
                        }
                    }
                    Some(_) => {}
                }
                if depth + 1 < MAX_WALK_DEPTH {
                    queue.push((path, depth + 1));
                }
            }
            if found.is_none() {
                break;
            }
        }
        self.gpus
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(switch.to_path_buf(), found.clone());
        found
    }
}

/// A PCI address in sysfs's form (`0000:18:00.0`, lower case) from NVML's (`00000000:18:00.0`)
/// or sysfs's; none for anything else.
pub fn short_address(address: &str) -> Option<String> {
    let a = address.trim().to_ascii_lowercase();
    let short = a.get(a.len().checked_sub(12)?..)?;
    let domain = a.get(..a.len() - 12)?;
    let b = short.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    let form = hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && hex(11..12);
    // NVML's 8-digit domain: 4 more zero digits before sysfs's.
    let domain_ok = domain.is_empty() || (domain.len() == 4 && domain.bytes().all(|c| c == b'0'));
    (form && domain_ok).then(|| short.to_string())
}

/// Every NIC under `<sysfs>/class/infiniband`, by name, scanned now.
pub fn scan(sysfs: &Path) -> Vec<Nic> {
    Rails::new(sysfs, Duration::ZERO).scan()
}

/// The canonical sysfs path of the GPU with NVML's PCI bus id (`00000000:18:00.0`; sysfs
/// names it `0000:18:00.0`).
pub fn gpu_path(sysfs: &Path, pci_bus_id: &str) -> Option<PathBuf> {
    let short = short_address(pci_bus_id)?;
    std::fs::canonicalize(sysfs.join("bus/pci/devices").join(short)).ok()
}

/// The NICs nearest to the GPU at `gpu`: those with the longest common path prefix, which must
/// reach past the PCI root (`pciDDDD:BB`): a NIC under another root complex is no rail of this
/// GPU. Returns that prefix's length in path components and the NICs, in `nics`' order.
pub fn nearest_all<'a>(gpu: &Path, nics: &'a [Nic]) -> (usize, Vec<&'a Nic>) {
    let mut best = 0;
    let mut tied = Vec::new();
    for nic in nics {
        let shared: Vec<Component<'_>> = gpu
            .components()
            .zip(nic.pci_path.components())
            .take_while(|(a, b)| a == b)
            .map(|(a, _)| a)
            .collect();
        let past_root = shared
            .iter()
            .any(|c| c.as_os_str().to_string_lossy().starts_with("pci"));
        if !past_root || shared.len() < best {
            continue;
        }
        if shared.len() > best {
            best = shared.len();
            tied.clear();
        }
        tied.push(nic);
    }
    (best, tied)
}

/// The rail NIC of the GPU at `gpu`, `gpus` the other GPUs near it (canonical paths; `gpu`
/// itself may be among them). One NIC nearest: that one. Several tied (one switch holding m
/// GPUs and n NICs, as on DGX A100): the GPUs that tie on the same NICs, ordered by PCI
/// address, are paired with those NICs ordered by PCI address, the k-th GPU with NIC
/// `k * n / m` (1:1 where m = n; NICs beyond the GPUs belong to none).
pub fn paired<'a>(gpu: &Path, gpus: &[PathBuf], nics: &'a [Nic]) -> Option<&'a Nic> {
    let (_, mut tied) = nearest_all(gpu, nics);
    if tied.len() < 2 {
        return tied.first().copied();
    }
    let names = |t: &[&Nic]| t.iter().map(|n| n.name.clone()).collect::<BTreeSet<_>>();
    let mine = names(&tied);
    let mut group: Vec<&Path> = gpus
        .iter()
        .map(PathBuf::as_path)
        .filter(|g| *g != gpu && names(&nearest_all(g, nics).1) == mine)
        .collect();
    group.push(gpu);
    let address = |p: &Path| p.file_name().map(|f| f.to_os_string());
    group.sort_by_key(|g| address(g));
    tied.sort_by_key(|n| address(&n.pci_path));
    let k = group.iter().position(|g| *g == gpu)?;
    tied.get(k * tied.len() / group.len()).copied()
}

/// The rail ports of the GPU with `pci_bus_id`, scanned now (tests and one-off callers; the
/// daemon shares one [`Rails`] between its GPUs).
pub fn ports_for(sysfs: &Path, pci_bus_id: &str) -> Vec<RailPortReadout> {
    Rails::new(sysfs, Duration::ZERO).ports_for(pci_bus_id)
}

/// Writes a fake sysfs tree under `root` for tests: GPUs and NICs as PCI functions under
/// `devices/pci0000:<root>/<bridge>/<function>` (or any chain of bridges: [`fake::gpu_at`],
/// [`fake::nic_at`]), linked from `bus/pci/devices`, each with the `class` and `vendor` files
/// real sysfs has, and each NIC's `class/infiniband/<name>` with one port.
#[doc(hidden)]
pub mod fake {
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

    fn device_of(root: &Path, gpu: &str) -> Option<(String, bool)> {
        let p = ports_for(root, gpu);
        p.first().map(|p| (p.device.clone(), p.up))
    }

    fn nic(name: &str, up: bool) -> Option<(String, bool)> {
        Some((name.to_string(), up))
    }

    /// Issue 43, item 2: DGX A100 puts two GPUs and two NICs behind each PCIe switch; both GPUs
    /// got mlx5_0 (a tie went to the first by name) and mlx5_1's port belonged to no GPU. Now
    /// the k-th GPU by address gets the k-th NIC by address, and a down port on the second NIC
    /// reaches the second GPU only.
    #[test]
    fn dgx_a100_shared_switches_pair_gpus_and_nics_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // Two of the board's four complexes; the second's NIC names run against their
        // addresses (mlx5_3 below mlx5_2), which the pairing follows, not the names.
        fake::dgx_a100_switch(
            root,
            "00",
            ["0000:07:00.0", "0000:0f:00.0"],
            [("mlx5_0", "0000:0c:00.0"), ("mlx5_1", "0000:12:00.0")],
        );
        fake::dgx_a100_switch(
            root,
            "40",
            ["0000:47:00.0", "0000:4e:00.0"],
            [("mlx5_3", "0000:4b:00.0"), ("mlx5_2", "0000:54:00.0")],
        );
        assert_eq!(device_of(root, "00000000:07:00.0"), nic("mlx5_0", true));
        assert_eq!(device_of(root, "00000000:0F:00.0"), nic("mlx5_1", true));
        assert_eq!(device_of(root, "00000000:47:00.0"), nic("mlx5_3", true));
        assert_eq!(device_of(root, "00000000:4E:00.0"), nic("mlx5_2", true));
        fake::set_port(root, "mlx5_1", "1: DOWN", "3: Disabled");
        assert_eq!(device_of(root, "00000000:0F:00.0"), nic("mlx5_1", false));
        assert_eq!(device_of(root, "00000000:07:00.0"), nic("mlx5_0", true));
        // The board's order holds however many GPUs ask, and from one shared scan.
        let rails = Rails::new(root, Duration::from_secs(60));
        let names: Vec<String> = ["07", "0f", "47", "4e"]
            .iter()
            .map(|b| {
                rails.ports_for(&format!("00000000:{b}:00.0"))[0]
                    .device
                    .clone()
            })
            .collect();
        assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_3", "mlx5_2"]);
    }

    /// A switch function whose class does not answer could be a GPU: the order is unknown, so
    /// the tied GPUs get no rail rather than maybe another GPU's NIC.
    #[test]
    fn a_tie_whose_gpus_cannot_all_be_told_apart_gives_no_rail() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fake::dgx_a100_switch(
            root,
            "00",
            ["0000:07:00.0", "0000:0f:00.0"],
            [("mlx5_0", "0000:0c:00.0"), ("mlx5_1", "0000:12:00.0")],
        );
        let gpu1 = std::fs::canonicalize(root.join("bus/pci/devices/0000:0f:00.0")).unwrap();
        std::fs::remove_file(gpu1.join("class")).unwrap();
        assert_eq!(device_of(root, "00000000:07:00.0"), None);
        // One GPU and two NICs under a switch: the first NIC by address, the other unowned.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fake::gpu_at(root, &["pci0000:00", "0000:00:01.0", "0000:01:00.0"]);
        for (name, addr) in [("mlx5_1", "0000:01:00.1"), ("mlx5_0", "0000:01:00.2")] {
            fake::nic_at(
                root,
                name,
                &["pci0000:00", "0000:00:01.0", addr],
                "4: ACTIVE",
                "5: LinkUp",
            );
        }
        assert_eq!(device_of(root, "00000000:01:00.0"), nic("mlx5_1", true));
    }

    /// DGX H100 / B200: each GPU has a NIC of its own under its PCIe switch (`topo -m`: GPU0
    /// PIX NIC0, NODE or SYS to the others): no tie, one NIC each, the NVSwitches' and other
    /// functions ignored.
    #[test]
    fn dgx_h100_one_nic_per_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // Two switches per root complex, on two root ports; GPU and NIC on two downstream
        // ports of the switch.
        let roots = ["17", "17", "38", "38", "97", "97", "b8", "b8"];
        let mut want = Vec::new();
        for (i, pci) in roots.iter().enumerate() {
            let port = format!("0000:{pci}:0{}.0", 1 + i % 2);
            let up = format!("0000:{:02x}:00.0", 0x10 * i + 0x20);
            let (down_g, down_n) = (
                format!("0000:{:02x}:00.0", 0x10 * i + 0x21),
                format!("0000:{:02x}:01.0", 0x10 * i + 0x21),
            );
            let gpu = format!("0000:{:02x}:00.0", 0x10 * i + 0x22);
            let nic_addr = format!("0000:{:02x}:00.0", 0x10 * i + 0x23);
            let r = format!("pci0000:{pci}");
            fake::gpu_at(root, &[&r, &port, &up, &down_g, &gpu]);
            // Named against the GPUs' order on purpose: topology decides, not names.
            let name = format!("mlx5_{}", 7 - i);
            fake::nic_at(
                root,
                &name,
                &[&r, &port, &up, &down_n, &nic_addr],
                "4: ACTIVE",
                "5: LinkUp",
            );
            want.push((gpu, name));
        }
        for (gpu, name) in want {
            assert_eq!(
                device_of(root, &format!("0000{gpu}")),
                nic(&name, true),
                "{gpu}"
            );
        }
    }

    /// GB200-like: each GPU on a PCI domain of its own with no NIC under it (the GPUs hang off
    /// Grace, the NICs off other root complexes: `topo -m` shows no PIX or PXB pair). PCIe
    /// topology names no rail; `[nvml.rails]` pins do.
    #[test]
    fn gb200_like_has_no_rail_by_topology_and_takes_pins() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut pins = BTreeMap::new();
        for i in 0..4u32 {
            let domain = format!("{:04x}", 8 + i);
            let gpu = format!("{domain}:01:00.0");
            fake::gpu_at(
                root,
                &[
                    &format!("pci{domain}:00"),
                    &format!("{domain}:00:00.0"),
                    &gpu,
                ],
            );
            let nic_domain = format!("{i:04x}");
            let name = format!("mlx5_{i}");
            fake::nic_at(
                root,
                &name,
                &[
                    &format!("pci{nic_domain}:00"),
                    &format!("{nic_domain}:00:00.0"),
                    &format!("{nic_domain}:03:00.0"),
                ],
                "4: ACTIVE",
                "5: LinkUp",
            );
            // NVML's form, upper case: any spelling of the address pins.
            pins.insert(format!("0000{}", gpu.to_ascii_uppercase()), name);
        }
        assert!(ports_for(root, "00000009:01:00.0").is_empty());
        fake::set_port(root, "mlx5_1", "1: DOWN", "3: Disabled");
        let rails = Rails::new(root, Duration::ZERO).with_pins(&pins);
        for i in 0..4u32 {
            let p = rails.ports_for(&format!("{:08x}:01:00.0", 8 + i));
            assert_eq!(
                (p[0].device.clone(), p[0].up),
                (format!("mlx5_{i}"), i != 1)
            );
        }
        // A pin overrides the topology, and a pinned NIC that does not exist gives nothing.
        let dir = tempfile::tempdir().unwrap();
        let a100 = dir.path();
        fake::dgx_a100_switch(
            a100,
            "00",
            ["0000:07:00.0", "0000:0f:00.0"],
            [("mlx5_0", "0000:0c:00.0"), ("mlx5_1", "0000:12:00.0")],
        );
        let pins = BTreeMap::from([
            ("0000:07:00.0".to_string(), "mlx5_1".to_string()),
            ("0000:0f:00.0".to_string(), "mlx5_9".to_string()),
        ]);
        let rails = Rails::new(a100, Duration::ZERO).with_pins(&pins);
        assert_eq!(rails.ports_for("00000000:07:00.0")[0].device, "mlx5_1");
        assert!(rails.ports_for("00000000:0f:00.0").is_empty());
    }

    #[test]
    fn pci_addresses_in_either_form() {
        for (text, want) in [
            ("00000000:18:00.0", Some("0000:18:00.0")),
            ("0000:2A:00.0", Some("0000:2a:00.0")),
            ("00000008:01:00.0", Some("0008:01:00.0")),
            ("12345678:01:00.0", None),
            ("18:00.0", None),
            ("0000:18:00.0:pcie001", None),
            ("0000:18/00.0", None),
            ("", None),
        ] {
            assert_eq!(short_address(text).as_deref(), want, "{text:?}");
        }
    }

    #[test]
    fn sysfs_texts_parse() {
        assert_eq!(code("4: ACTIVE"), Some(4));
        assert_eq!(code("garbage"), None);
        assert_eq!(rate_bytes_per_second("200 Gb/sec (2X NDR)"), Some(25e9));
        assert_eq!(rate_bytes_per_second("1600 Gb/sec (4X XDR)"), Some(200e9));
        assert_eq!(rate_bytes_per_second("fast"), None);
        // A rate no port has (it made 7 GPUs degraded as "slower than the fastest port").
        assert_eq!(rate_bytes_per_second("1e290 Gb/sec (4X NDR)"), None);
        assert_eq!(rate_bytes_per_second("3201 Gb/sec"), None);
        assert_eq!(rate_bytes_per_second("inf Gb/sec"), None);
        assert_eq!(rate_bytes_per_second("-400 Gb/sec"), None);
    }

    /// Two GPUs, each with its NIC under its own switch.
    fn two_rails(root: &Path) {
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
        fake::gpu(root, "29", "01", "0000:2a:00.0");
        fake::nic(
            root,
            "mlx5_1",
            "29",
            "01",
            "0000:2b:00.0",
            "4: ACTIVE",
            "5: LinkUp",
        );
    }

    /// Issue 42, item 2: a FIFO in a NIC's tree (a blocking open before) is refused at once;
    /// the other files of that port and every other NIC are still read.
    #[test]
    fn a_fifo_in_a_nic_tree_costs_nothing_and_hides_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        two_rails(root);
        for file in ["counters/link_downed", "rate", "phys_state"] {
            let path = root.join("class/infiniband/mlx5_0/ports/1").join(file);
            std::fs::remove_file(&path).unwrap();
            let ok = std::process::Command::new("mkfifo")
                .arg(&path)
                .status()
                .unwrap();
            assert!(ok.success());
        }
        let start = Instant::now();
        let p0 = ports_for(root, "00000000:18:00.0");
        let p1 = ports_for(root, "00000000:2a:00.0");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        assert_eq!((p0.len(), p0[0].up), (1, true));
        assert_eq!(
            (p0[0].rate_bytes_per_second, p0[0].link_downed),
            (None, None)
        );
        assert_eq!(p1[0].rate_bytes_per_second, Some(50e9));
        assert_eq!(p1[0].link_downed, Some(0.0));
    }

    fn hangs_on_link_downed_of_mlx5_0(path: &Path) -> std::io::Result<Vec<u8>> {
        if path.ends_with("mlx5_0/ports/1/counters/link_downed") {
            std::thread::sleep(Duration::from_secs(3));
        }
        std::fs::read(path)
    }

    /// Issue 42, item 2: a file whose read hangs (a hung HCA's counter) costs one deadline
    /// once, is skipped while its read stays blocked, and nothing else is lost; eight GPUs
    /// asking share one scan.
    #[test]
    fn a_hung_file_costs_its_own_reading_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        two_rails(root);
        let rails = Rails::with_reader(root, Duration::ZERO, hangs_on_link_downed_of_mlx5_0);
        let start = Instant::now();
        let p0 = rails.ports_for("00000000:18:00.0");
        let first = start.elapsed();
        assert!(
            first >= FILE_DEADLINE && first < Duration::from_secs(1),
            "{first:?}"
        );
        assert_eq!((p0[0].up, p0[0].rate_bytes_per_second), (true, Some(50e9)));
        assert_eq!(p0[0].link_downed, None);
        assert_eq!(rails.stuck().len(), 1);
        // Later scans skip it without waiting while it is stuck.
        let start = Instant::now();
        let p1 = rails.ports_for("00000000:2a:00.0");
        assert!(start.elapsed() < FILE_DEADLINE, "{:?}", start.elapsed());
        assert_eq!(p1[0].link_downed, Some(0.0));
        // Once its read returns, it is read again.
        let until = Instant::now() + Duration::from_secs(10);
        while !rails.stuck().is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(rails.stuck().is_empty());
        // A shared, fresh scan: many GPUs, one reading of each file.
        let shared = Rails::new(root, Duration::from_secs(60));
        let a = shared.nics();
        let b = shared.nics();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
