//! Issue 18, part 6: a simulated node (`--simulate dgx-h100`) runs a simulated training job of
//! eight ranks, one per GPU, that drops profiler traces and memory snapshots into a directory of
//! its own; the trace collector is on over it, so the `trace` series of all eight ranks are
//! served with no GPU and no flag, equal to `trace analyze` of the dropped files. The private
//! directory is removed at exit.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const JOB: &str = "simulated-dgx-h100";

fn analysed(body: &str) -> f64 {
    value(
        body,
        "dgx_pixels_trace_files_total",
        &[("outcome", "analysed")],
    )
    .unwrap_or(0.0)
}

/// `trace analyze --format json FILES`: the per-rank reports, by rank.
fn analyze(files: &[PathBuf]) -> Vec<Value> {
    trace_report(files)["ranks"].as_array().unwrap().clone()
}

#[test]
fn a_simulated_node_serves_the_traces_of_its_eight_ranks_equal_to_trace_analyze() {
    let root = tempfile::tempdir().unwrap();
    let mut config = tempfile::NamedTempFile::new().unwrap();
    // A long period: exactly one drop is analysed when the values are compared.
    config
        .write_all(
            b"[collector.trace]\ninterval = \"200ms\"\n[simulation]\ntrace_period = \"10m\"\n",
        )
        .unwrap();
    let d = start(&[
        "--simulate",
        "dgx-h100",
        "--config.file",
        config.path().to_str().unwrap(),
        "--simulate.trace-directory",
        root.path().to_str().unwrap(),
    ]);
    // 8 traces and 8 memory snapshots.
    let (body, took) = wait_until(d.port, Duration::from_secs(60), |b| {
        analysed(b) == 16.0
            && value(b, "dgx_pixels_trace_job_complete", &[("trace_job", JOB)]) == Some(1.0)
    });
    assert_eq!(analysed(&body), 16.0, "after {took:?}:\n{body}");
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "trace")]),
        Some(1.0)
    );
    assert_eq!(
        value(&body, "dgx_pixels_trace_job_ranks", &[("trace_job", JOB)]),
        Some(8.0)
    );

    let dir = root.path().join(JOB);
    let files: Vec<PathBuf> = (0..8)
        .map(|r| dir.join(format!("rank{r}.step0.pt.trace.json")))
        .collect();
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(text.contains(r#""simulated": true"#), "marked as simulated");
    let reports = analyze(&files);
    assert_eq!(reports.len(), 8);
    let us = |v: &Value| v.as_f64().unwrap() / 1e6;
    for r in &reports {
        let rank = r["rank"].as_i64().unwrap().to_string();
        let got = |name: &str| value(&body, name, &[("trace_job", JOB), ("rank", &rank)]);
        let t = &r["temporal_breakdown"];
        for (name, want) in [
            (
                "dgx_pixels_trace_gpu_seconds_total",
                us(&t["kernel_time_us"]),
            ),
            (
                "dgx_pixels_trace_compute_seconds_total",
                us(&t["compute_time_us"]),
            ),
            (
                "dgx_pixels_trace_idle_seconds_total",
                us(&t["idle_time_us"]),
            ),
            (
                "dgx_pixels_trace_exposed_communication_seconds_total",
                us(&r["communication"]["exposed_time_us"]),
            ),
        ] {
            let v = got(name).unwrap_or_else(|| panic!("{name} rank {rank} missing"));
            assert!(
                (v - want).abs() <= 1e-9 * want.abs().max(1e-12),
                "{name} rank {rank}: {v} != {want}"
            );
        }
        // The generator's straggler: rank 5 starts its steps late.
        let straggler = if rank == "5" { 1.0 } else { 0.0 };
        assert_eq!(
            got("dgx_pixels_trace_straggler"),
            Some(straggler),
            "rank {rank}"
        );
        assert!(got("dgx_pixels_trace_memory_reserved_bytes").unwrap() > 0.0);
        // The rank's host pid, as `trace analyze` reads it, is the simulated process on its GPU:
        // the join to dgx_pixels_process_memory_used_bytes by pid names the GPU (rank N, GPU N).
        let pid = r["process_id"].as_u64().unwrap().to_string();
        assert_eq!(
            value(
                &body,
                "dgx_pixels_trace_rank_process_info",
                &[("trace_job", JOB), ("rank", &rank), ("pid", &pid)]
            ),
            Some(1.0),
            "rank {rank}"
        );
        let process = series(&body, "dgx_pixels_process_memory_used_bytes")
            .into_iter()
            .find(|l| l.contains(&format!("pid=\"{pid}\"")));
        // dgx-h100's GPU 7 joins the job 50 s into the cycle, 15 s after the others: until
        // then it has no process, so rank 7's pid joins nothing yet.
        let joined_late = rank == "7" && took < Duration::from_secs(50);
        match process {
            Some(process) => assert!(process.contains(&format!("gpu=\"{rank}\"")), "{process}"),
            None if joined_late => assert!(
                !series(&body, "dgx_pixels_process_memory_used_bytes")
                    .iter()
                    .any(|l| l.contains("gpu=\"7\"")),
                "GPU 7 has a process before it joins"
            ),
            None => panic!("rank {rank}: no GPU process with pid {pid}"),
        }
    }
    for c in ["all_gather", "reduce_scatter", "all_reduce"] {
        assert_eq!(
            series(&body, "dgx_pixels_trace_collective_bus_bytes_total")
                .iter()
                .filter(|l| l.contains(&format!("collective=\"{c}\"")))
                .count(),
            8,
            "{c}"
        );
    }
    drop(d);
}

/// dgx-h100's job starts 30 s in (its traces with it); fault-ecc's at once.
#[test]
fn the_first_drop_comes_when_the_job_starts() {
    let root = tempfile::tempdir().unwrap();
    let d = start(&[
        "--simulate",
        "dgx-h100",
        "--simulate.trace-directory",
        root.path().to_str().unwrap(),
    ]);
    let first = root.path().join(JOB).join("rank7.step0_memory.pickle");
    std::thread::sleep(Duration::from_secs(20));
    assert!(!first.exists(), "a trace of a job that has not started");
    let deadline = Instant::now() + Duration::from_secs(40);
    while !first.exists() {
        assert!(Instant::now() < deadline, "no drop once the job started");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(d);
}

#[test]
fn the_private_trace_directory_lives_under_tmpdir_and_goes_at_exit() {
    const JOB: &str = "simulated-fault-ecc";
    let tmp = tempfile::tempdir().unwrap();
    let d = start_with_env(
        &["--simulate", "fault-ecc"],
        &[("TMPDIR", tmp.path().to_str().unwrap())],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let dir = loop {
        let entries: Vec<PathBuf> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        if let [one] = entries.as_slice() {
            if one.join(JOB).join("rank7.step0_memory.pickle").exists() {
                break one.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no drop in {}",
            tmp.path().display()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // SIGTERM: the daemon stops its sources, and the simulated job removes its directory.
    let pid = d.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while Path::new(&dir).exists() {
        assert!(Instant::now() < deadline, "{} left behind", dir.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(d);
}

#[test]
fn without_a_writable_tmpdir_the_simulated_node_runs_without_traces() {
    let d = start_with_env(
        &["--simulate", "dgx-h100"],
        &[("TMPDIR", "/nonexistent/dgx-pixels-test")],
    );
    let body = text(d.port);
    assert!(body.contains("dgx_pixels_gpu_up{"), "the node is served");
    assert!(series(&body, "dgx_pixels_trace_files_total").is_empty());
    let logs = stop_and_logs(d);
    assert!(logs.contains("no simulated traces"), "{logs}");
}
