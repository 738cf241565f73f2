//! Rail NICs (issue 32): the InfiniBand / RoCE ports of the node from sysfs
//! (`<sysfs>/class/infiniband/<device>/ports/<n>/`), each GPU given the ports of its nearest
//! NIC by PCIe topology: the NIC whose sysfs device path shares the longest prefix with the
//! GPU's (the same PCIe switch before the same root port). A multi-node job's traffic from a
//! GPU leaves through that NIC, so its port being down stalls the job.
//!
//! Bounded: at most [`MAX_DEVICES`] devices of [`MAX_PORTS`] ports, each file read up to
//! [`MAX_FILE`] bytes; anything missing or malformed is left out, never an error.

use std::collections::BTreeSet;
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
            stuck: Arc::new(Mutex::new(BTreeSet::new())),
        }
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

    /// The rail ports of the GPU with `pci_bus_id`: its nearest NIC's; none without one.
    pub fn ports_for(&self, pci_bus_id: &str) -> Vec<RailPortReadout> {
        let Some(gpu) = gpu_path(&self.sysfs, pci_bus_id) else {
            return Vec::new();
        };
        let nics = self.nics();
        nearest(&gpu, &nics)
            .map(|n| n.ports.clone())
            .unwrap_or_default()
    }
}

/// Every NIC under `<sysfs>/class/infiniband`, by name, scanned now.
pub fn scan(sysfs: &Path) -> Vec<Nic> {
    Rails::new(sysfs, Duration::ZERO).scan()
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

/// The rail ports of the GPU with `pci_bus_id`, scanned now (tests and one-off callers; the
/// daemon shares one [`Rails`] between its GPUs).
pub fn ports_for(sysfs: &Path, pci_bus_id: &str) -> Vec<RailPortReadout> {
    Rails::new(sysfs, Duration::ZERO).ports_for(pci_bus_id)
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
