//! Issue 28: every trace the daemon's trace collector analyses runs in a child process (this
//! binary's hidden `trace-worker`) under an address-space limit and the analysis deadline. A
//! file that makes the child run out of memory or time is counted by outcome; the daemon
//! keeps serving, its own peak RSS does not grow, and the next ordinary trace is analysed.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use common::*;
use dgx_pixels_trace::synth::{write_rank, SynthConfig};

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
    hostile_file_costs_the_child(
        "max_worker_memory = 4294967296\nmax_analysis_time = \"1s\"",
        3_000_000,
        "timeout",
    );
}

/// docs/performance.md, "Hostile trace files in the daemon": the daemon's analysis path in
/// process (as before) and in the worker process, interleaved on one generated trace. Run with
/// `cargo test -p dgx-pixels-exporter --test trace_worker -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement"]
fn measure_analysis_in_process_and_in_the_worker() {
    use dgx_pixels_trace::source::{AnalysisReply, AnalysisRequest, Analyzer, InProcess};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Instant;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank0_trace.json");
    let cfg = SynthConfig {
        steps: 60,
        layers: 24,
        cpu_events_per_kernel: 4,
        ..SynthConfig::default()
    };
    let mut f = BufWriter::new(std::fs::File::create(&path).unwrap());
    write_rank(&cfg, 0, &mut f).unwrap();
    f.flush().unwrap();
    drop(f);
    let meta = std::fs::metadata(&path).unwrap();
    let key = dgx_pixels_trace::open::FileKey::of(&meta);
    let options = dgx_pixels_trace::source::TraceOptions::default();
    let request = AnalysisRequest {
        path: path.clone(),
        snapshot: false,
        dev: key.dev,
        ino: key.ino,
        max_event_bytes: options.max_event_bytes,
        max_decompressed_bytes: options.max_decompressed_bytes,
        max_rows: 50_000_000,
        max_snapshot_bytes: options.max_snapshot_bytes,
        max_analysis_ms: 600_000,
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let worker = |request: &AnalysisRequest| {
        let req = dgx_pixels_worker::Request {
            program: BIN.into(),
            args: vec!["trace-worker".into()],
            env: Vec::new(),
            input: serde_json::to_vec(request).unwrap(),
            limits: dgx_pixels_worker::Limits {
                timeout: Duration::from_secs(600),
                max_output_bytes: dgx_pixels_trace::source::analyzer::MAX_REPLY_BYTES,
                max_address_space_bytes: Some(options.max_worker_memory),
                max_cpu_seconds: Some(601),
                lowest_priority: true,
            },
        };
        let done = dgx_pixels_worker::run(&req).unwrap();
        let reply: AnalysisReply = serde_json::from_slice(&done.output).unwrap();
        assert!(reply.into_result().is_ok());
        done.peak_rss_bytes
    };
    let mb = meta.len() as f64 / 1e6;
    let (mut inproc, mut child) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        if let Err(e) = InProcess.analyse(&request, &cancel) {
            panic!("{e:?}");
        }
        inproc.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let rss = worker(&request);
        child.push(t.elapsed().as_secs_f64());
        eprintln!("worker peak RSS {} MiB", rss >> 20);
    }
    inproc.sort_by(f64::total_cmp);
    child.sort_by(f64::total_cmp);
    eprintln!(
        "{mb:.1} MB: in process {:?} s (median {:.3} s, {:.0} MB/s); worker {:?} s (median {:.3} s, {:.0} MB/s)",
        inproc,
        inproc[1],
        mb / inproc[1],
        child,
        child[1],
        mb / child[1]
    );
}
