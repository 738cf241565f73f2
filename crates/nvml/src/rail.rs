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
pub mod fake;

#[cfg(test)]
mod tests;
