//! Issue 28: every trace the daemon's trace collector analyses runs in a child process (this
//! binary's hidden `trace-worker`) under an address-space limit and the analysis deadline. A
//! file that makes the child run out of memory or time is counted by outcome; the daemon
//! keeps serving, its own peak RSS does not grow, and the next ordinary trace is analysed.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use common::*;
use dgx_pixels_trace_synth::{write_rank, SynthConfig};

/// A trace of `rows` tiny GPU rows (within `max_rows` as the test sets it): its analysis needs
/// far more memory than the file's size.
fn write_rows(path: &Path, rows: usize) {
    let tmp = path.with_file_name(".rows.tmp");
    let mut f = BufWriter::new(std::fs::File::create(&tmp).unwrap());
    let row = br#"{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1,"args":{"stream":7}}"#;
    f.write_all(br#"{"traceEvents":["#).unwrap();
    for i in 0..rows {
        if i > 0 {
            f.write_all(b",").unwrap();
        }
        f.write_all(row).unwrap();
    }
    f.write_all(b"]}").unwrap();
    f.flush().unwrap();
    drop(f);
    std::fs::rename(&tmp, path).unwrap();
}

fn write_rank_file(dir: &Path, rank: usize) {
    let mut out = Vec::new();
    write_rank(&SynthConfig::default(), rank, &mut out).unwrap();
    let tmp = dir.join(format!(".rank{rank}.tmp"));
    std::fs::write(&tmp, out).unwrap();
    std::fs::rename(&tmp, dir.join(format!("rank{rank}_trace.json"))).unwrap();
}

/// The daemon's peak resident set so far, KiB.
fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn outcome(body: &str, o: &str) -> f64 {
    value(body, "dgx_pixels_trace_files_total", &[("outcome", o)]).unwrap_or(0.0)
}

/// Runs a daemon with `trace_config`, lets it analyse an ordinary trace, then the hostile
/// `rows` trace (expected outcome `expect`), then another ordinary trace.
fn hostile_file_costs_the_child(trace_config: &str, rows: usize, expect: &str) {
    let root = tempfile::tempdir().unwrap();
    let mut config = tempfile::NamedTempFile::new().unwrap();
    write!(
        config,
        "[collector.trace]\ninterval = \"100ms\"\n[trace]\nmax_rows = 50000000\n{trace_config}\n"
    )
    .unwrap();
    let d = start(&[
        "--config.file",
        config.path().to_str().unwrap(),
        "--collector.trace",
        "--trace.directory",
        root.path().to_str().unwrap(),
    ]);
    let pid = d.child.id();
    write_rank_file(root.path(), 0);
    let (body, _) = wait_until(d.port, Duration::from_secs(60), |b| {
        outcome(b, "analysed") == 1.0
    });
    assert_eq!(outcome(&body, "analysed"), 1.0, "{body}");
    let before = vm_hwm_kib(pid);

    write_rows(&root.path().join("hostile.pt.trace.json"), rows);
    let (body, took) = wait_until(d.port, Duration::from_secs(120), |b| {
        outcome(b, expect) == 1.0
    });
    assert_eq!(outcome(&body, expect), 1.0, "after {took:?}:\n{body}");
    let after = vm_hwm_kib(pid);
    eprintln!(
        "{expect}: daemon VmHWM {} MiB before, {} MiB after the hostile file ({rows} rows)",
        before / 1024,
        after / 1024
    );
    // In process, the same file took hundreds of MiB (about 160 bytes a row).
    assert!(
        after < before + 24 * 1024,
        "the daemon's peak RSS grew from {before} KiB to {after} KiB"
    );
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "trace")]),
        Some(1.0)
    );
    // It goes on: the next ordinary trace is analysed.
    write_rank_file(root.path(), 1);
    let (body, _) = wait_until(d.port, Duration::from_secs(60), |b| {
        outcome(b, "analysed") == 2.0
    });
    assert_eq!(outcome(&body, "analysed"), 2.0, "{body}");
    assert!(vm_hwm_kib(pid) < before + 24 * 1024);
    let logs = stop_and_logs(d);
    assert!(logs.contains(expect), "the outcome is logged: {logs}");
}

#[test]
fn a_file_past_the_workers_memory_limit_is_counted_and_the_daemon_stays_flat() {
    // 3 M rows need about 500 MiB; the worker may map 256 MiB.
    hostile_file_costs_the_child(
        "max_worker_memory = 268435456\nmax_analysis_time = \"5m\"",
        3_000_000,
        "out_of_memory",
    );
}

#[test]
fn a_file_past_the_deadline_is_counted_and_the_daemon_stays_flat() {
    // The deadline must part the ordinary traces (about 0.1 s; with a 1 s deadline one timed
    // out on a 2-core CI machine at load 10, the worker being at the lowest CPU priority) from
    // the hostile one (3 M rows: 22 s of CPU in a debug build, `trace analyze`).
    hostile_file_costs_the_child(
        "max_worker_memory = 4294967296\nmax_analysis_time = \"5s\"",
        3_000_000,
        "timeout",
    );
}
