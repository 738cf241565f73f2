//! The probe subcommands and the probes collector through the real binary: comparisons from
//! fixture files anywhere; on a machine without CUDA, clear failures, no panics and a daemon
//! that keeps serving; on a GPU host, measurements.
//!
//! Tests that depend on the machine are `#[ignore]`d and named for what they need:
//! `no_driver_*` (no NVIDIA driver) and `gpu_*` (a driver and a GPU). `scripts/test` runs the
//! set that applies with `--ignored` and reports the other as not run (docs/testing.md).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use common::terminate;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dgx-pixels-exporter");

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../probes/tests/fixtures")
        .join(name)
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Fails (never passes quietly) when run where a CUDA driver loads.
fn require_no_driver() {
    assert!(
        !dgx_pixels_probes::cuda::availability().driver,
        "this test needs a machine without an NVIDIA driver, and libcuda.so.1 loads here: \
         scripts/test runs the gpu_* tests on such a machine instead"
    );
}

/// Fails (never passes quietly) when run where no GPU can be used. The guard serialises the
/// GPU tests of this binary: the daemon's probes rightly refuse a GPU that another process
/// (a `probe run` of the test beside it) is using.
fn require_gpu() -> std::sync::MutexGuard<'static, ()> {
    static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = GPU
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(
        dgx_pixels_probes::cuda::device_count().is_ok_and(|n| n > 0),
        "this test needs an NVIDIA driver and a GPU: scripts/test runs the no_driver_* tests \
         on a machine without them instead"
    );
    guard
}

#[test]
#[ignore = "environment: no-driver (needs a machine without an NVIDIA driver; scripts/test runs it there)"]
fn no_driver_probe_run_fails_clearly() {
    require_no_driver();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let (code, stdout, stderr) = run(&[
        "probe",
        "run",
        "--iterations",
        "3",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("CUDA unavailable") && stderr.contains("libcuda.so.1"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stdout.is_empty(), "no table without results: {stdout}");
    assert!(!out.exists(), "no results file left behind");
}

#[test]
fn probe_run_rejects_bad_arguments_with_exit_2() {
    let (code, _, stderr) = run(&["probe", "run", "--probe", "gemm_int4"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown probe \"gemm_int4\""), "{stderr}");
    let (code, _, stderr) = run(&["probe", "run", "--gpus", "0,x"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--gpus: \"x\""), "{stderr}");
    let (code, _, stderr) = run(&["probe", "run", "--iterations", "0"]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn probe_compare_writes_report_and_chart() {
    let dir = tempfile::tempdir().unwrap();
    let outdir = dir.path().join("cmp");
    let (code, stdout, stderr) = run(&[
        "probe",
        "compare",
        fixture("native.json").to_str().unwrap(),
        fixture("container.csv").to_str().unwrap(),
        "--output-dir",
        outdir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let report = std::fs::read_to_string(outdir.join("report.md")).unwrap();
    assert_eq!(report, stdout);
    assert!(
        report.contains("| gemm_bf16 | 700.17 TFLOP/s | 331.36 TFLOP/s | +52.7% |"),
        "{report}"
    );
    assert!(report.contains("| launch_latency |") && report.contains("20–40%"));
    assert!(report.contains("](chart.png)"));
    let png = std::fs::read(outdir.join("chart.png")).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{").unwrap();
    let (code, _, stderr) = run(&[
        "probe",
        "compare",
        fixture("native.json").to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("bad.json") && stderr.contains("line 1"),
        "{stderr}"
    );
}

/// Stops the daemon on drop.
struct Daemon(Child, u16);
impl Drop for Daemon {
    fn drop(&mut self) {
        terminate(&mut self.0);
    }
}

fn metrics(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

fn daemon(args: &[&str]) -> Daemon {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(BIN)
        .args(["--web.listen-address", &format!("127.0.0.1:{port}")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Daemon(child, port)
}

fn wait_for(d: &Daemon, what: &str) -> String {
    wait_for_within(d, what, Duration::from_secs(10))
}

fn wait_for_within(d: &Daemon, what: &str, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(body) = metrics(d.1) {
            if body.contains(what) {
                return body;
            }
        }
        assert!(Instant::now() < deadline, "{what} not served in {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "environment: no-driver (needs a machine without an NVIDIA driver; scripts/test runs it there)"]
fn no_driver_the_probes_collector_is_down_and_the_daemon_keeps_serving() {
    require_no_driver();
    let mut d = daemon(&[
        "--collector.probes",
        "--nvml.library",
        "/nonexistent/libnvidia-ml.so.1",
    ]);
    let body = wait_for(&d, "dgx_pixels_source_up{source=\"probes\"} 0");
    assert!(body.contains("dgx_pixels_source_up{source=\"nvml\"} 0"));
    assert!(
        !body.contains("dgx_pixels_probe_"),
        "no probe series without a GPU: {body}"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let later = metrics(d.1).unwrap();
    assert!(
        later.contains("dgx_pixels_exporter_build_info{"),
        "still serving"
    );
    assert!(d.0.try_wait().unwrap().is_none(), "still running");
    terminate(&mut d.0);
    let mut stderr = String::new();
    d.0.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("source=probes"))
        .collect();
    assert_eq!(warnings.len(), 1, "said once: {stderr}");
    assert!(warnings[0].contains("kind=cuda_unavailable") && warnings[0].contains("libcuda.so.1"));
}

#[test]
#[ignore = "environment: gpu (needs an NVIDIA driver and a GPU; scripts/test runs it on a GPU host)"]
fn gpu_probe_run_measures_and_writes_results() {
    let _gpu = require_gpu();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let (code, stdout, stderr) = run(&[
        "probe",
        "run",
        "--probe",
        "copy_d2d,launch_latency",
        "--gpus",
        "0",
        "--warmup",
        "1",
        "--iterations",
        "3",
        "--copy-bytes",
        "16777216",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stdout.contains("copy_d2d") && stdout.contains("launch_latency"),
        "a table of both probes: {stdout}"
    );
    let results = dgx_pixels_probes::RunResults::read(&out).unwrap();
    assert_eq!(results.results.len(), 2, "{results:?}");
    for r in &results.results {
        assert_eq!(r.values.len(), 3, "{}", r.probe);
        assert!(r.values.iter().all(|v| v.is_finite() && *v > 0.0), "{r:?}");
        assert!(r.uuid.starts_with("GPU-"), "{}", r.uuid);
    }
}

#[test]
#[ignore = "environment: gpu (needs an NVIDIA driver and a GPU; scripts/test runs it on a GPU host)"]
fn gpu_the_probes_collector_serves_measurements() {
    let _gpu = require_gpu();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("exporter.toml");
    // Both probes small and frequent; busy_threshold 1 so that a GPU with a display or a
    // monitoring load still gets probed (one with another compute process never does).
    std::fs::write(
        &config,
        "[probes]\nprobes = \"launch_latency,copy_d2d\"\nduty_cycle = 1.0\nbusy_threshold = 1.0\nsettle = \"0s\"\n",
    )
    .unwrap();
    let d = daemon(&[
        "--collector.probes",
        "--config.file",
        config.to_str().unwrap(),
    ]);
    let body = wait_for_within(
        &d,
        "dgx_pixels_probe_launch_latency_seconds{",
        Duration::from_secs(90),
    );
    assert!(
        body.contains("dgx_pixels_source_up{source=\"probes\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("dgx_pixels_source_up{source=\"nvml\"} 1"),
        "{body}"
    );
    let latency: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with("dgx_pixels_probe_launch_latency_seconds{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        latency.iter().all(|v| (1e-7..1e-3).contains(v)),
        "launch latency in seconds: {latency:?}"
    );
}
