//! Processes' containers, unsupported readings, where a GPU sits, NVLink 5 error counters.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use dgx_pixels_sim::Scenario;

use common::*;

use super::start_fake;

/// Processes map to containers through /proc/PID/cgroup (here a fixture procfs).
#[test]
fn process_memory_carries_the_container_id() {
    let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let procfs = std::env::temp_dir().join(format!("dgx-pixels-procfs-{}", std::process::id()));
    // dgx-h100's simulated processes have pid 20000 + 100 * GPU index.
    std::fs::create_dir_all(procfs.join("20100")).unwrap();
    std::fs::write(
        procfs.join("20100/cgroup"),
        format!("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{id}.scope\n"),
    )
    .unwrap();
    let d = start_fake(
        "dgx-h100",
        &[("FAKE_NVML_TIME", "60")],
        &["--path.procfs", procfs.to_str().unwrap()],
    );
    let body = text(d.port);
    std::fs::remove_dir_all(&procfs).unwrap();
    let with = value(
        &body,
        "dgx_pixels_process_memory_used_bytes",
        &[("pid", "20100"), ("container_id", id)],
    );
    assert!(
        with.is_some_and(|v| v > 0.0),
        "{:?}",
        series(&body, "dgx_pixels_process_memory_used_bytes")
    );
    let host = value(
        &body,
        "dgx_pixels_process_memory_used_bytes",
        &[("pid", "20000"), ("container_id", "")],
    );
    assert!(
        host.is_some(),
        "a process without a container has an empty container_id"
    );
}

/// Readings a GPU does not support are omitted and logged once per GPU and reading at debug
/// level, not on every poll.
#[test]
fn unsupported_readings_are_logged_once_per_gpu_and_reading() {
    use std::io::Read;
    let mut d = start_fake(
        "dgx-spark",
        &[("FAKE_NVML_TIME", "60")],
        &["--collector.nvml.interval", "100ms", "--log.level", "debug"],
    );
    let body = text(d.port);
    assert_eq!(
        value(&body, "dgx_pixels_gpu_memory_total_bytes", &[("gpu", "0")]),
        None
    );
    std::thread::sleep(Duration::from_millis(800)); // several more polls
    let _ = d.child.kill();
    let mut log = String::new();
    d.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    let memory: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reading not available") && l.contains("reading=memory_info"))
        .collect();
    assert_eq!(memory.len(), 1, "{memory:#?}");
    assert!(memory[0].contains("gpu=0"), "{}", memory[0]);
}

/// Issue 32, slice 2: where each GPU of a GB200 NVL72 tray sits, from the fake NVML's
/// `nvmlDeviceGetPlatformInfo` (struct v2) through the NVML source's slow readings, and the same
/// from the simulated node: one info series per GPU in the default profile; none on a part the
/// driver places nowhere.
#[test]
fn the_gb200_tray_serves_where_each_gpu_sits() {
    let want = |body: &str, source: &str| {
        for gpu in 0..4u32 {
            let module = (gpu + 1).to_string();
            let gpu = gpu.to_string();
            assert_eq!(
                value(
                    body,
                    "dgx_pixels_gpu_platform_info",
                    &[
                        ("gpu", gpu.as_str()),
                        ("chassis_serial", "1823124000137"),
                        ("slot", "12"),
                        ("tray", "5"),
                        ("host_id", "1"),
                        ("module_id", module.as_str()),
                    ]
                ),
                Some(1.0),
                "{source} GPU {gpu}: {body}"
            );
        }
        assert_eq!(
            series(body, "dgx_pixels_gpu_platform_info").len(),
            4,
            "{source}"
        );
    };
    let d = start_with_env(
        &["--nvml.library", fake_nvml_library()],
        &[
            ("FAKE_NVML_SCENARIO", "gb200-nvl72-tray"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        series(b, "dgx_pixels_gpu_platform_info").len() == 4
    });
    want(&body, "nvml");
    let d = start(&["--simulate", "gb200-nvl72-tray", "--no-collector.probes"]);
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        series(b, "dgx_pixels_gpu_platform_info").len() == 4
    });
    want(&body, "sim");
    let d = start(&["--simulate", "dgx-h100", "--no-collector.probes"]);
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        !series(b, "dgx_pixels_gpu_up").is_empty()
    });
    assert!(series(&body, "dgx_pixels_gpu_platform_info").is_empty());
}

/// `dgx-b200` with 9 symbol and 2 post-FEC errors on GPU 0's link 5 from 1 s.
fn nvlink5_scenario() -> PathBuf {
    let text = Scenario::builtin_text("dgx-b200").unwrap();
    let faults = "[[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 5\n\
                  error_type = \"symbol\"\nerrors = 9\nat_s = 1\n\
                  [[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 5\n\
                  error_type = \"effective\"\nerrors = 2\nat_s = 1\n";
    let path = std::env::temp_dir().join(format!("nvlink5-exporter-{}.toml", std::process::id()));
    std::fs::write(&path, format!("{text}\n{faults}")).unwrap();
    path
}

/// Blackwell through the real binary, on the fake NVML and simulated: the NVLink 5 counters
/// as per-GPU totals, the erring link named (symbol errors only at full detail), no legacy
/// types.
#[test]
fn blackwell_serves_nvlink5_error_counters() {
    let path = nvlink5_scenario();
    let scenario = path.to_str().unwrap();
    let check = |body: &str, source: &str, full: bool| {
        let gpu0 = |t: &str| {
            value(
                body,
                "dgx_pixels_nvlink_errors_total",
                &[("gpu", "0"), ("error_type", t)],
            )
        };
        assert_eq!(gpu0("symbol"), Some(9.0), "{source}");
        assert_eq!(gpu0("effective"), Some(2.0), "{source}");
        assert_eq!(gpu0("receive"), Some(0.0), "{source}");
        assert_eq!(gpu0("replay"), None, "{source}");
        // Four totals by default (the budget), all six at full detail.
        assert_eq!(gpu0("link_integrity"), full.then_some(0.0), "{source}");
        let per_link = value(
            body,
            "dgx_pixels_nvlink_link_errors_total",
            &[("gpu", "0"), ("link", "5"), ("error_type", "symbol")],
        );
        // Symbol errors per link only at full detail; the others in both profiles.
        assert_eq!(per_link, full.then_some(9.0), "{source}");
        let per_link = value(
            body,
            "dgx_pixels_nvlink_link_errors_total",
            &[("gpu", "0"), ("link", "5"), ("error_type", "effective")],
        );
        assert_eq!(per_link, Some(2.0), "{source}");
    };
    let ready = |b: &str| !series(b, "dgx_pixels_nvlink_errors_total").is_empty();
    for full in [false, true] {
        let detail = if full { "full" } else { "default" };
        let d = start_with_env(
            &[
                "--nvml.library",
                fake_nvml_library(),
                "--metrics.detail",
                detail,
            ],
            &[
                ("FAKE_NVML_SCENARIO", scenario),
                ("FAKE_NVML_TIME", "60"),
                ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ],
        );
        let (body, _) = wait_until(d.port, Duration::from_secs(15), ready);
        check(&body, "nvml", full);
    }
    let d = start(&[
        "--simulate",
        scenario,
        "--no-collector.probes",
        "--metrics.detail",
        "full",
    ]);
    let (body, _) = wait_until(d.port, Duration::from_secs(15), |b| {
        ready(b)
            && value(
                b,
                "dgx_pixels_nvlink_errors_total",
                &[("gpu", "0"), ("error_type", "symbol")],
            ) == Some(9.0)
    });
    check(&body, "sim", true);
    std::fs::remove_file(&path).unwrap();
}
