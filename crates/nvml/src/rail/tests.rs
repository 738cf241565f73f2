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
