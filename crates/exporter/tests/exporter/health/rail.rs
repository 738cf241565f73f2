//! Rail NICs: a port down or slow degrades its GPU, found in sysfs or pinned; FIFOs stall none.

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::*;

use super::{
    check_coverage, config_file, owned, start_simulated, verdict, watch, Clears, Expect, Verdict,
    CONFIG, HEALTHY, RAIL_RULES,
};

/// What each GPU of fault-rail must show (the table at the top of
/// `crates/sim/scenarios/fault-rail.toml`).
const EXPECT_RAIL: &[Expect] = &[
    Expect {
        gpu: 0,
        sequence: &[HEALTHY],
        transient: &[],
        ends_at: 0.0,
        clears: Clears::Never,
    },
    Expect {
        gpu: 1,
        sequence: &[
            HEALTHY,
            ("degraded", "check_hardware", "rail_port_down"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 2,
        sequence: &[
            HEALTHY,
            ("degraded", "check_hardware", "rail_port_slow"),
            HEALTHY,
        ],
        transient: &[],
        ends_at: 12.0,
        clears: Clears::Promptly,
    },
    Expect {
        gpu: 3,
        sequence: &[HEALTHY],
        transient: &[],
        ends_at: 0.0,
        clears: Clears::Never,
    },
];

/// Issue 32: the rail NIC rules through the simulated node, which serves each GPU's rail
/// as the NVML source serves the NIC it finds in sysfs (the NVML path is covered with a fake
/// sysfs tree by a_gpu_whose_rail_port_is_down_is_degraded_until_it_is_up).
#[test]
fn every_rail_rule_holds_and_clears_through_the_simulated_source() {
    let config = config_file();
    let (d, spawned, ready) = start_simulated("fault-rail", &config);
    let (seen, body) = watch(&d, spawned, ready, "sim", EXPECT_RAIL);
    check_coverage(&seen, "sim", |r| RAIL_RULES.contains(&r));
    // One port per GPU, up at 400 Gb/s again, GPU 1's having gone down once.
    assert_eq!(series(&body, "dgx_pixels_gpu_rail_port_up").len(), 4);
    for gpu in ["0", "1", "2", "3"] {
        let device = format!("mlx5_{gpu}");
        let at = [("gpu", gpu), ("device", device.as_str()), ("port", "1")];
        assert_eq!(value(&body, "dgx_pixels_gpu_rail_port_up", &at), Some(1.0));
        assert_eq!(
            value(&body, "dgx_pixels_gpu_rail_port_rate_bytes_per_second", &at),
            Some(50e9)
        );
    }
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_rail_link_downed_total",
            &[("gpu", "1")]
        ),
        Some(1.0)
    );
}

/// A fake sysfs tree under `root` that puts mlx5_0 beside GPU 0 (port 1 in `first`: state,
/// physical state) and mlx5_1, active, beside GPU 1; GPUs 2-7 have no NIC under their root
/// complex.
fn two_rails(root: &std::path::Path, first: (&str, &str)) {
    use dgx_pixels_nvml::rail::fake;
    fake::gpu(root, "17", "01", "0000:18:00.0");
    fake::nic(root, "mlx5_0", "17", "01", "0000:19:00.0", first.0, first.1);
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

/// The fake NVML's dgx-h100 at full detail, reading the fake sysfs tree at `root`, with
/// `extra` appended to the config; the config file lives as long as the second value.
fn start_on_sysfs(
    root: &std::path::Path,
    extra: &str,
) -> (common::Daemon, tempfile::NamedTempFile) {
    let mut config = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    let text = CONFIG.replace(
        "[nvml]\n",
        &format!("[nvml]\nsysfs = {:?}\n", root.to_str().unwrap()),
    ) + extra;
    config.write_all(text.as_bytes()).unwrap();
    let d = start_with_env(
        &[
            "--nvml.library",
            fake_nvml_library(),
            "--config.file",
            config.path().to_str().unwrap(),
            "--metrics.detail",
            "full",
        ],
        &[
            ("FAKE_NVML_SCENARIO", "dgx-h100"),
            ("FAKE_NVML_TIME", "100"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    );
    (d, config)
}

/// Issue 32, item 3: a GPU whose rail NIC port is down is degraded (`rail_port_down`) while
/// it is down, through the real binary: the fake NVML's dgx-h100 GPUs and a fake sysfs tree
/// (`[nvml] sysfs`) that puts mlx5_0 beside GPU 0 and mlx5_1 beside GPU 1 (GPUs 2-7 have no
/// NIC under their root complex: no rail, healthy).
#[test]
fn a_gpu_whose_rail_port_is_down_is_degraded_until_it_is_up() {
    use dgx_pixels_nvml::rail::fake;
    let sysfs = tempfile::tempdir().unwrap();
    let root = sysfs.path();
    two_rails(root, ("1: DOWN", "3: Disabled"));
    let (d, _config) = start_on_sysfs(root, "");
    let gpu_is = |b: &str, gpu: usize, want: Verdict| verdict(b, gpu) == Some(owned(want));
    let degraded = ("degraded", "check_hardware", "rail_port_down");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        gpu_is(b, 0, degraded) && gpu_is(b, 1, HEALTHY)
    });
    assert!(gpu_is(&body, 0, degraded), "{body}");
    assert!(gpu_is(&body, 1, HEALTHY), "{body}");
    let up = |gpu: &str, device: &str| {
        value(
            &body,
            "dgx_pixels_gpu_rail_port_up",
            &[("gpu", gpu), ("device", device), ("port", "1")],
        )
    };
    assert_eq!(up("0", "mlx5_0"), Some(0.0));
    assert_eq!(up("1", "mlx5_1"), Some(1.0));
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_rail_port_rate_bytes_per_second",
            &[("gpu", "1")]
        ),
        Some(50e9)
    );
    assert!(series(&body, "dgx_pixels_gpu_rail_port_up")
        .iter()
        .all(|l| l.contains("gpu=\"0\"") || l.contains("gpu=\"1\"")));
    // The port comes back: the verdict clears at the next slow reading.
    fake::set_port(root, "mlx5_0", "4: ACTIVE", "5: LinkUp");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| gpu_is(b, 0, HEALTHY));
    assert!(gpu_is(&body, 0, HEALTHY), "{body}");
    // mlx5_1 retrains at 200 Gb/s beside mlx5_0's 400: GPU 1 is slow, GPU 0 not.
    fake::set_rate(root, "mlx5_1", "200 Gb/sec (4X HDR)");
    let slow = ("degraded", "check_hardware", "rail_port_slow");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| gpu_is(b, 1, slow));
    assert!(gpu_is(&body, 1, slow), "{body}");
    assert!(gpu_is(&body, 0, HEALTHY), "{body}");
    fake::set_rate(root, "mlx5_1", "400 Gb/sec (4X NDR)");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| gpu_is(b, 1, HEALTHY));
    assert!(gpu_is(&body, 1, HEALTHY), "{body}");
}

/// Issue 43, item 2: two GPUs and two NICs behind one PCIe switch (DGX A100's layout): GPU 1's
/// rail is the second NIC, so mlx5_1 going down degrades GPU 1, not GPU 0 (before, both GPUs
/// got mlx5_0 and mlx5_1 belonged to none: nothing fired). Then `[nvml.rails]` pins GPU 0 to
/// mlx5_1, and a pin that is no PCI address is refused naming the file and the key.
#[test]
fn the_second_nic_of_a_shared_switch_reaches_the_second_gpu() {
    use dgx_pixels_nvml::rail::fake;
    let sysfs = tempfile::tempdir().unwrap();
    let root = sysfs.path();
    // The fake NVML's dgx-h100 GPUs 0 and 1 are at 18:00.0 and 2a:00.0.
    fake::dgx_a100_switch(
        root,
        "10",
        ["0000:18:00.0", "0000:2a:00.0"],
        [("mlx5_0", "0000:1c:00.0"), ("mlx5_1", "0000:2d:00.0")],
    );
    fake::set_port(root, "mlx5_1", "1: DOWN", "3: Disabled");
    let run = |extra: &str| start_on_sysfs(root, extra);
    let gpu_is = |b: &str, gpu: usize, want: Verdict| verdict(b, gpu) == Some(owned(want));
    let degraded = ("degraded", "check_hardware", "rail_port_down");
    let up = |body: &str, gpu: &str, device: &str| {
        value(
            body,
            "dgx_pixels_gpu_rail_port_up",
            &[("gpu", gpu), ("device", device), ("port", "1")],
        )
    };
    let (d, _config) = run("");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        gpu_is(b, 1, degraded) && gpu_is(b, 0, HEALTHY)
    });
    assert!(gpu_is(&body, 1, degraded), "{body}");
    assert!(gpu_is(&body, 0, HEALTHY), "{body}");
    assert_eq!(up(&body, "0", "mlx5_0"), Some(1.0));
    assert_eq!(up(&body, "1", "mlx5_1"), Some(0.0));
    assert_eq!(series(&body, "dgx_pixels_gpu_rail_port_up").len(), 2);
    drop(d);
    // Pinned: GPU 0 to the down NIC, GPU 1 to the other.
    let pins = "[nvml.rails]\n\"0000:18:00.0\" = \"mlx5_1\"\n\"00000000:2A:00.0\" = \"mlx5_0\"\n";
    let (d, _config) = run(pins);
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        gpu_is(b, 0, degraded) && gpu_is(b, 1, HEALTHY)
    });
    assert!(gpu_is(&body, 0, degraded), "{body}");
    assert!(gpu_is(&body, 1, HEALTHY), "{body}");
    assert_eq!(up(&body, "0", "mlx5_1"), Some(0.0));
    assert_eq!(up(&body, "1", "mlx5_0"), Some(1.0));
    drop(d);
    // A pin that is no PCI address: refused at start, naming the file and the key.
    let mut bad = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    bad.write_all(b"[nvml.rails]\ngpu0 = \"mlx5_0\"\n").unwrap();
    let out = std::process::Command::new(BIN)
        .args([
            "--config.file",
            bad.path().to_str().unwrap(),
            "--web.listen-address",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&bad.path().display().to_string())
            && err.contains("nvml.rails.\"gpu0\": is no PCI address"),
        "{err}"
    );
}

/// Issue 42, item 2: a FIFO in a rail NIC's sysfs tree (every GPU's poll thread opened every
/// NIC's files blocking: all 8 GPUs went `gpu_up 0`, unhealthy, reboot) costs nothing now:
/// every GPU stays up and healthy, and the NIC's other files and the other NIC are still read.
#[test]
fn a_fifo_in_a_rail_nic_tree_stalls_no_gpu() {
    let sysfs = tempfile::tempdir().unwrap();
    let root = sysfs.path();
    two_rails(root, ("4: ACTIVE", "5: LinkUp"));
    let counter = root.join("class/infiniband/mlx5_0/ports/1/counters/link_downed");
    std::fs::remove_file(&counter).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(&counter)
        .status()
        .unwrap()
        .success());
    let (d, _config) = start_on_sysfs(root, "");
    let all_healthy =
        |b: &str| (0..8).all(|g| verdict(b, g) == Some(owned(HEALTHY))) && b.contains("mlx5_1");
    let (body, _) = wait_until(d.port, Duration::from_secs(15), all_healthy);
    assert!(all_healthy(&body), "{body}");
    for gpu in 0..8 {
        let g = gpu.to_string();
        assert_eq!(
            value(&body, "dgx_pixels_gpu_up", &[("gpu", &g)]),
            Some(1.0),
            "{body}"
        );
    }
    let port = |gpu: &str, name: &str| value(&body, name, &[("gpu", gpu), ("port", "1")]);
    assert_eq!(port("0", "dgx_pixels_gpu_rail_port_up"), Some(1.0));
    assert_eq!(
        port("0", "dgx_pixels_gpu_rail_port_rate_bytes_per_second"),
        Some(50e9)
    );
    assert_eq!(port("1", "dgx_pixels_gpu_rail_port_up"), Some(1.0));
    // The stuck counter is left out, not served as 0.
    assert!(!series(&body, "dgx_pixels_gpu_rail_link_downed_total")
        .iter()
        .any(|l| l.contains("mlx5_0")));
}
