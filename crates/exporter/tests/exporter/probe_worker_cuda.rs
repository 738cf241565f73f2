//! The probes collector end to end on the fake CUDA driver and the fake NVML: every probe run
//! is a worker process, the daemon never holds a context, a worker that hangs is killed at its
//! deadline and one that crashes is an outcome, a process that appears mid-run makes the run
//! `contended` and its result is not served, busy, exclusive-mode and MIG GPUs are never
//! touched, and the worker is never counted as a user of the GPU.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{fake_cuda_dir, fake_nvml_library, start_with_env, value, wait_until, Daemon};

const SCENARIO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/probe-node.toml");

struct Node {
    daemon: Daemon,
    state: tempfile::TempDir,
    _config: tempfile::NamedTempFile,
}

/// A daemon on the four-GPU probe node (GPUs 0 and 1 busy with a process each, 2 and 3 idle),
/// probing eagerly, with `env` on top.
fn node(probes: &str, worker_timeout: &str, env: &[(&str, &str)]) -> Node {
    let state = tempfile::tempdir().unwrap();
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        format!(
            "[probes]\nprobes = \"{probes}\"\nduty_cycle = 1.0\nsettle = \"0s\"\nworker_timeout = \"{worker_timeout}\"\n\
             [collector.probes]\ninterval = \"200ms\"\n[collector.nvml]\ninterval = \"200ms\"\n"
        ),
    )
    .unwrap();
    let state_dir = state.path().to_str().unwrap().to_string();
    let lib_dir = fake_cuda_dir().to_str().unwrap().to_string();
    let mut all: Vec<(&str, &str)> = vec![
        ("FAKE_NVML_SCENARIO", SCENARIO),
        ("FAKE_NVML_TIME", "30"),
        ("FAKE_CUDA_SCENARIO", SCENARIO),
        ("FAKE_CUDA_TIME", "30"),
        ("FAKE_CUDA_STATE_DIR", &state_dir),
        ("FAKE_NVML_CUDA_STATE_DIR", &state_dir),
        ("LD_LIBRARY_PATH", &lib_dir),
    ];
    all.extend_from_slice(env);
    let daemon = start_with_env(
        &[
            "--config.file",
            config.path().to_str().unwrap(),
            "--collector.probes",
            "--no-collector.dcgm",
            "--nvml.library",
            fake_nvml_library(),
            "--metrics.detail",
            "full",
        ],
        &all,
    );
    Node {
        daemon,
        state,
        _config: config,
    }
}

fn runs(body: &str, gpu: &str, probe: &str, outcome: &str) -> f64 {
    value(
        body,
        "dgx_pixels_probe_runs_total",
        &[("gpu", gpu), ("probe", probe), ("outcome", outcome)],
    )
    .unwrap_or(0.0)
}

/// Pids with a context file in the fake driver's state directory.
fn context_pids(dir: &Path) -> Vec<u32> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("ctx.")?.split('.').next()?.parse().ok()
        })
        .collect()
}

/// The daemon's children that are still around (running or zombie).
fn children(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(after) = stat.rsplit_once(") ") else {
            continue;
        };
        let fields: Vec<&str> = after.1.split(' ').collect();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(pid) {
            out.push(format!("{} {}", e.file_name().to_string_lossy(), fields[0]));
        }
    }
    out
}

#[test]
fn idle_gpus_are_measured_by_workers_and_the_daemon_never_holds_a_context() {
    // Modeled GPU time 30x slower in wall time: each run holds its context for a second or
    // so, long enough for several NVML polls (every 200 ms) to see the worker on the GPU.
    let n = node(
        "copy_d2d,launch_latency",
        "20s",
        &[("FAKE_CUDA_TIME_SCALE", "30")],
    );
    let pid = n.daemon.child.id();
    let start = Instant::now();
    let mut seen_worker_contexts = 0;
    let mut body = String::new();
    // Watch the fake driver's contexts and the served process counts for a while.
    while start.elapsed() < Duration::from_secs(60) {
        let pids = context_pids(n.state.path());
        assert!(!pids.contains(&pid), "the daemon holds a CUDA context");
        seen_worker_contexts += pids.len();
        body = common::text(n.daemon.port);
        for gpu in ["2", "3"] {
            if let Some(p) = value(&body, "dgx_pixels_gpu_processes", &[("gpu", gpu)]) {
                assert_eq!(p, 0.0, "a probe worker counted as a process of GPU {gpu}");
            }
            assert_eq!(
                common::series(&body, "dgx_pixels_process_memory_used_bytes")
                    .iter()
                    .filter(|l| l.contains(&format!("gpu=\"{gpu}\"")))
                    .count(),
                0,
                "a probe worker's memory served for GPU {gpu}"
            );
        }
        let done = ["2", "3"].iter().all(|g| {
            runs(&body, g, "copy_d2d", "ok") >= 2.0 && runs(&body, g, "launch_latency", "ok") >= 2.0
        });
        if done && seen_worker_contexts >= 10 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        seen_worker_contexts >= 10,
        "workers were seen holding a context at only {seen_worker_contexts} scrapes"
    );
    for gpu in ["2", "3"] {
        assert!(runs(&body, gpu, "copy_d2d", "ok") >= 2.0, "{body}");
        let bw = value(
            &body,
            "dgx_pixels_probe_bandwidth_bytes_per_second",
            &[("gpu", gpu), ("probe", "copy_d2d")],
        )
        .unwrap();
        assert!(bw > 1e12, "an idle simulated H100 copies at TB/s: {bw}");
    }
    // The busy GPUs have a process of their own: never touched (before NVML's first reading
    // they are skipped for having none).
    for gpu in ["0", "1"] {
        assert_eq!(runs(&body, gpu, "copy_d2d", "ok"), 0.0);
        assert!(
            runs(&body, gpu, "copy_d2d", "skipped_in_use")
                + runs(&body, gpu, "copy_d2d", "skipped_busy")
                + runs(&body, gpu, "copy_d2d", "skipped_no_utilization")
                >= 1.0,
            "{body}"
        );
    }
    assert_eq!(
        value(&body, "dgx_pixels_probe_gpus", &[("state", "measured")]),
        Some(2.0)
    );
    // What a worker costs is served for sizing memory limits: the binary plus the fake
    // driver, megabytes (the real driver and cuBLAS add hundreds).
    let peak = value(&body, "dgx_pixels_probe_worker_peak_rss_bytes", &[]).unwrap();
    assert!((1e6..1e9).contains(&peak), "{peak}");
    // No worker left behind, running or zombie.
    let t0 = Instant::now();
    while !children(pid).is_empty() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(children(pid).len() <= 1, "{:?}", children(pid));
    assert!(
        children(pid).iter().all(|c| !c.ends_with(" Z")),
        "zombie worker: {:?}",
        children(pid)
    );
}

#[test]
fn a_hung_worker_is_killed_at_its_deadline_and_counted() {
    let n = node("copy_d2d", "2s", &[("FAKE_CUDA_HANG", "1")]);
    let pid = n.daemon.child.id();
    let (body, took) = wait_until(n.daemon.port, Duration::from_secs(30), |b| {
        runs(b, "2", "copy_d2d", "timeout") + runs(b, "3", "copy_d2d", "timeout") >= 2.0
    });
    assert!(
        runs(&body, "2", "copy_d2d", "timeout") + runs(&body, "3", "copy_d2d", "timeout") >= 2.0,
        "{body}"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "nvml")]),
        Some(1.0),
        "the rest of the daemon carries on"
    );
    assert!(common::series(&body, "dgx_pixels_probe_bandwidth_bytes_per_second").is_empty());
    // At most the worker running now is a child; killed ones are reaped.
    assert!(children(pid).len() <= 1, "{:?}", children(pid));
    assert!(children(pid).iter().all(|c| !c.ends_with(" Z")));
    let logs = common::stop_and_logs(n.daemon);
    assert!(logs.contains("deadline"), "{logs}");
}

#[test]
fn a_crashing_worker_is_an_outcome() {
    // The fake aborts in the first kernel launch: the launch-latency probe.
    let n = node("launch_latency", "10s", &[("FAKE_CUDA_CRASH", "1")]);
    let (body, _) = wait_until(n.daemon.port, Duration::from_secs(30), |b| {
        runs(b, "2", "launch_latency", "crashed") >= 1.0
    });
    assert!(
        runs(&body, "2", "launch_latency", "crashed") >= 1.0,
        "{body}"
    );
    assert_eq!(runs(&body, "2", "launch_latency", "ok"), 0.0);
    assert!(common::series(&body, "dgx_pixels_probe_launch_latency_seconds").is_empty());
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "probes")]),
        Some(1.0),
        "a crashed worker is the worker's problem"
    );
}

#[test]
fn a_process_that_appears_mid_run_makes_it_contended_and_its_result_is_not_served() {
    let mut intruder = std::process::Command::new("sleep")
        .arg("120")
        .spawn()
        .unwrap();
    let ipid = intruder.id().to_string();
    let n = node("copy_d2d", "10s", &[("FAKE_CUDA_INTRUDER_PID", &ipid)]);
    let (body, _) = wait_until(n.daemon.port, Duration::from_secs(30), |b| {
        runs(b, "2", "copy_d2d", "contended") + runs(b, "3", "copy_d2d", "contended") >= 2.0
    });
    let _ = intruder.kill();
    let _ = intruder.wait();
    assert!(
        runs(&body, "2", "copy_d2d", "contended") + runs(&body, "3", "copy_d2d", "contended")
            >= 2.0,
        "{body}"
    );
    assert_eq!(
        runs(&body, "2", "copy_d2d", "ok") + runs(&body, "3", "copy_d2d", "ok"),
        0.0
    );
    assert!(
        common::series(&body, "dgx_pixels_probe_bandwidth_bytes_per_second").is_empty(),
        "a collision is not the GPU's capability"
    );
    assert!(value(&body, "dgx_pixels_probe_gpus", &[("state", "contended")]).unwrap() >= 1.0);
}

#[test]
fn a_context_the_driver_never_releases_ends_with_its_worker() {
    let n = node("copy_d2d", "10s", &[("FAKE_CUDA_LEAK_CONTEXT", "1")]);
    let pid = n.daemon.child.id();
    let (body, _) = wait_until(n.daemon.port, Duration::from_secs(30), |b| {
        runs(b, "2", "copy_d2d", "ok") >= 2.0
    });
    assert!(runs(&body, "2", "copy_d2d", "ok") >= 2.0, "{body}");
    // Leaked context files belong to dead workers (the fake NVML lists none of them), never
    // to the daemon.
    let pids = context_pids(n.state.path());
    assert!(!pids.is_empty(), "the leak knob left files");
    assert!(!pids.contains(&pid));
    for p in pids {
        let alive = Path::new(&format!("/proc/{p}")).exists();
        assert!(
            !alive
                || children(pid)
                    .iter()
                    .any(|c| c.starts_with(&format!("{p} ")))
        );
    }
    for gpu in ["2", "3"] {
        assert_eq!(
            value(&body, "dgx_pixels_gpu_processes", &[("gpu", gpu)]),
            Some(0.0),
            "{body}"
        );
    }
}

#[test]
fn exclusive_mode_gpus_are_never_touched() {
    let n = node(
        "copy_d2d",
        "10s",
        &[("FAKE_NVML_COMPUTE_MODE", "2=exclusive_process,3=prohibited")],
    );
    let (body, _) = wait_until(n.daemon.port, Duration::from_secs(30), |b| {
        runs(b, "2", "copy_d2d", "skipped_compute_mode") >= 1.0
            && runs(b, "3", "copy_d2d", "skipped_compute_mode") >= 1.0
    });
    for gpu in ["2", "3"] {
        assert!(
            runs(&body, gpu, "copy_d2d", "skipped_compute_mode") >= 1.0,
            "{body}"
        );
        assert_eq!(runs(&body, gpu, "copy_d2d", "ok"), 0.0);
    }
    assert!(
        context_pids(n.state.path()).is_empty(),
        "no context was ever created"
    );
    assert_eq!(
        value(&body, "dgx_pixels_probe_gpus", &[("state", "compute_mode")]),
        Some(2.0)
    );
}
