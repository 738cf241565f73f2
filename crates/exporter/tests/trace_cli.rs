//! `dgx-pixels-exporter trace analyze|compare` end to end: the real binary on generated traces.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::process::Command;

use dgx_pixels_trace::synth::{write_job, SynthConfig};

const BIN: &str = env!("CARGO_BIN_EXE_dgx-pixels-exporter");

#[test]
fn analyze_json_has_the_named_fields_and_the_ground_truth() {
    let dir = tempfile::tempdir().unwrap();
    let truth = write_job(&SynthConfig::default(), dir.path(), true).unwrap();
    let out = Command::new(BIN)
        .args(["trace", "analyze", "--format", "json"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for key in [
        "\"rank\"",
        "\"temporal_breakdown\"",
        "\"kernel_time_us\"",
        "\"idle_time_us\"",
        "\"compute_time_us\"",
        "\"non_compute_time_us\"",
        "\"comm_comp_overlap_ratio\"",
    ] {
        assert!(text.contains(key), "{key} missing");
    }
    for t in &truth.ranks {
        let needle = format!("\"kernel_time_us\": {}", t.kernel_time_us);
        assert!(text.contains(&needle), "rank {}: {needle} missing", t.rank);
    }
}

#[test]
fn compare_and_errors() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    write_job(&SynthConfig::default(), a.path(), false).unwrap();
    let slower = SynthConfig {
        layers: 9,
        ..SynthConfig::default()
    };
    write_job(&slower, b.path(), false).unwrap();
    let out = Command::new(BIN)
        .args(["trace", "compare"])
        .args([a.path(), b.path()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("step time (µs)") && text.contains('+'),
        "{text}"
    );
    let bad = a.path().join("bad.json");
    std::fs::write(&bad, "{\"traceEvents\": [").unwrap();
    let out = Command::new(BIN)
        .args(["trace", "analyze"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bad.json: truncated at byte 17"), "{err}");
}
