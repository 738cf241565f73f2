//! Issue 18: the real binary with `--collector.trace` watches a directory where a test writes
//! generated traces of a job of several ranks (gzipped in place, slowly; plain, renamed into
//! place), beside a truncated trace, a JSON file that is no trace, a file over the size limit
//! and thousands of unrelated files. The served series must equal what `trace analyze` reports
//! for the same files, every error must be counted, and the source must stay up.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use dgx_pixels_trace_synth::{write_rank, SynthConfig};
use serde_json::Value;

const CONFIG: &str = r#"
[collector.trace]
interval = "100ms"
[trace]
max_file_bytes = 8388608
"#;

fn rank_json(cfg: &SynthConfig, rank: usize) -> Vec<u8> {
    let mut out = Vec::new();
    write_rank(cfg, rank, &mut out).unwrap();
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// `trace analyze --format json FILE`'s one rank.
fn analyze(file: &Path) -> Value {
    trace_report(&[file])["ranks"][0].clone()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12)
}

#[test]
fn served_series_equal_trace_analyze_and_every_error_is_counted() {
    let root = tempfile::tempdir().unwrap();
    let job = root.path().join("llama-7b").join("iteration_10");
    std::fs::create_dir_all(&job).unwrap();
    for i in 0..10_000 {
        std::fs::write(root.path().join(format!("node-{i}.prom")), b"").unwrap();
    }
    let mut config = tempfile::NamedTempFile::new().unwrap();
    config.write_all(CONFIG.as_bytes()).unwrap();
    let d = start(&[
        "--config.file",
        config.path().to_str().unwrap(),
        "--collector.trace",
        "--trace.directory",
        root.path().to_str().unwrap(),
    ]);

    let cfg = SynthConfig::default();
    let mut files = Vec::new();
    for rank in 0..cfg.ranks {
        let json = rank_json(&cfg, rank);
        if rank % 2 == 0 {
            // The profiler's export_chrome_trace: gzipped into the final path, here slowly.
            let name = job.join(format!("host_{rank}.1700000000{rank}.pt.trace.json.gz"));
            let gz = gzip(&json);
            let mut f = std::fs::File::create(&name).unwrap();
            for chunk in gz.chunks(gz.len() / 4 + 1) {
                f.write_all(chunk).unwrap();
                f.flush().unwrap();
                std::thread::sleep(Duration::from_millis(60));
            }
            files.push((rank, name));
        } else {
            // Plain JSON: written beside and renamed into place.
            let tmp = job.join(format!(".rank{rank}_trace.json.tmp"));
            std::fs::write(&tmp, &json).unwrap();
            let name = job.join(format!("rank{rank}_trace.json"));
            std::fs::rename(&tmp, &name).unwrap();
            files.push((rank, name));
        }
    }
    let gz = gzip(&rank_json(&cfg, 0));
    std::fs::write(job.join("cut.pt.trace.json.gz"), &gz[..gz.len() / 3]).unwrap();
    std::fs::write(job.join("hparams.json"), br#"{"lr": 0.001, "ranks": 4}"#).unwrap();
    std::fs::write(
        job.join("huge.pt.trace.json"),
        vec![b' '; 8 * 1024 * 1024 + 1],
    )
    .unwrap();

    let outcome = |body: &str, o: &str| {
        value(body, "dgx_pixels_trace_files_total", &[("outcome", o)]).unwrap_or(-1.0)
    };
    let (body, took) = wait_until(d.port, Duration::from_secs(120), |b| {
        outcome(b, "analysed") == 4.0
            && outcome(b, "truncated") == 1.0
            && outcome(b, "not_a_trace") == 1.0
            && outcome(b, "too_large") == 1.0
    });
    for o in [
        "analysed",
        "truncated",
        "not_a_trace",
        "too_large",
        "parse_error",
    ] {
        eprintln!("{o}: {}", outcome(&body, o));
    }
    assert_eq!(outcome(&body, "analysed"), 4.0, "after {took:?}:\n{body}");
    assert_eq!(outcome(&body, "truncated"), 1.0);
    assert_eq!(outcome(&body, "not_a_trace"), 1.0);
    assert_eq!(outcome(&body, "too_large"), 1.0);
    // An outcome that never happened is not served in the default detail profile.
    assert_eq!(outcome(&body, "parse_error"), -1.0);
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "trace")]),
        Some(1.0)
    );
    assert_eq!(
        value(&body, "dgx_pixels_trace_pending_files", &[]),
        Some(0.0)
    );

    let job_label = "llama-7b/iteration_10";
    for (rank, file) in &files {
        let r = analyze(file);
        assert_eq!(r["rank"].as_i64(), Some(*rank as i64));
        let rank = rank.to_string();
        let got = |name: &str| {
            value(&body, name, &[("trace_job", job_label), ("rank", &rank)])
                .unwrap_or_else(|| panic!("{name} rank {rank} missing"))
        };
        let us = |v: &Value| v.as_f64().unwrap() / 1e6;
        let t = &r["temporal_breakdown"];
        let c = &r["communication"];
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
                "dgx_pixels_trace_non_compute_seconds_total",
                us(&t["non_compute_time_us"]),
            ),
            (
                "dgx_pixels_trace_idle_seconds_total",
                us(&t["idle_time_us"]),
            ),
            (
                "dgx_pixels_trace_communication_seconds_total",
                us(&c["time_us"]),
            ),
            (
                "dgx_pixels_trace_exposed_communication_seconds_total",
                us(&c["exposed_time_us"]),
            ),
            (
                "dgx_pixels_trace_overlapped_communication_seconds_total",
                us(&c["overlapped_time_us"]),
            ),
            (
                "dgx_pixels_trace_steps_total",
                r["steps"]["numbers"].as_array().unwrap().len() as f64,
            ),
            (
                "dgx_pixels_trace_step_seconds_total",
                r["steps"]["durations_us"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(us)
                    .sum(),
            ),
        ] {
            assert!(
                close(got(name), want),
                "{name} rank {rank}: {} != {want}",
                got(name)
            );
        }
        // HTA's overlap ratio from the counters.
        let ratio = got("dgx_pixels_trace_overlapped_communication_seconds_total")
            / got("dgx_pixels_trace_communication_seconds_total");
        assert!((ratio - r["comm_comp_overlap_ratio"].as_f64().unwrap()).abs() < 1e-9);
        let collectives = c["collectives"].as_array().unwrap();
        assert!(!collectives.is_empty());
        for coll in collectives {
            let kind = coll["collective"].as_str().unwrap();
            let l = [
                ("trace_job", job_label),
                ("rank", rank.as_str()),
                ("collective", kind),
            ];
            let got = |name: &str| value(&body, name, &l).unwrap();
            assert!(close(
                got("dgx_pixels_trace_collective_bytes_total"),
                coll["bytes"].as_f64().unwrap()
            ));
            assert_eq!(
                got("dgx_pixels_trace_collective_kernels_total"),
                coll["count"].as_f64().unwrap()
            );
            assert!(close(
                got("dgx_pixels_trace_collective_seconds_total"),
                us(&coll["time_us"])
            ));
            let busbw = got("dgx_pixels_trace_collective_bus_bytes_total")
                / got("dgx_pixels_trace_collective_sized_seconds_total")
                / 1e9;
            assert!(
                close(busbw, coll["busbw_gbps"].as_f64().unwrap()),
                "{kind}: {busbw}"
            );
        }
    }
    // The job-level analysis, once all four ranks arrived, equals `trace analyze` of the four.
    let out = Command::new(BIN)
        .args(["trace", "analyze", "--format", "json"])
        .args(files.iter().map(|f| &f.1))
        .output()
        .unwrap();
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = &report["job"];
    let (body, _) = wait_until(d.port, Duration::from_secs(30), |b| {
        value(b, "dgx_pixels_trace_job_ranks", &[("trace_job", job_label)]).is_some()
    });
    assert_eq!(
        value(
            &body,
            "dgx_pixels_trace_job_ranks",
            &[("trace_job", job_label)]
        ),
        Some(4.0)
    );
    assert_eq!(
        value(
            &body,
            "dgx_pixels_trace_job_complete",
            &[("trace_job", job_label)]
        ),
        Some(1.0)
    );
    let spread = value(
        &body,
        "dgx_pixels_trace_job_step_spread_seconds",
        &[("trace_job", job_label)],
    );
    assert!(close(
        spread.unwrap(),
        want["step_time_spread_us"].as_f64().unwrap() / 1e6
    ));
    let stragglers: Vec<i64> = want["stragglers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(stragglers, [cfg.straggler.unwrap() as i64]);
    for rank in 0..cfg.ranks as i64 {
        let r = rank.to_string();
        let l = [("trace_job", job_label), ("rank", r.as_str())];
        let score = value(&body, "dgx_pixels_trace_straggler_score", &l).unwrap();
        assert!(
            close(score, want["straggler_score"][&r].as_f64().unwrap()),
            "rank {rank}"
        );
        let wait = value(&body, "dgx_pixels_trace_sync_wait_seconds", &l).unwrap();
        assert!(
            close(wait, want["sync_wait_us"][&r].as_f64().unwrap() / 1e6),
            "rank {rank}"
        );
        let straggler = value(&body, "dgx_pixels_trace_straggler", &l).unwrap();
        assert_eq!(straggler == 1.0, stragglers.contains(&rank), "rank {rank}");
    }

    // No kernel name ever becomes a label value.
    assert!(
        !body.contains("ncclDevKernel") && !body.contains("gemm"),
        "{body}"
    );

    // A later trace is analysed too, and counters add.
    let before = value(
        &body,
        "dgx_pixels_trace_gpu_seconds_total",
        &[("trace_job", job_label), ("rank", "1")],
    )
    .unwrap();
    let tmp = job.join(".again.tmp");
    std::fs::write(&tmp, rank_json(&cfg, 1)).unwrap();
    std::fs::rename(&tmp, job.join("rank1_trace.again.json")).unwrap();
    let (body, _) = wait_until(d.port, Duration::from_secs(60), |b| {
        outcome(b, "analysed") == 5.0
    });
    let after = value(
        &body,
        "dgx_pixels_trace_gpu_seconds_total",
        &[("trace_job", job_label), ("rank", "1")],
    )
    .unwrap();
    assert!(close(after, 2.0 * before), "{before} then {after}");
}

#[test]
fn enabled_without_a_directory_is_a_startup_error() {
    let out = Command::new(BIN)
        .args(["--collector.trace", "--web.listen-address", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--trace.directory"), "{err}");
}
