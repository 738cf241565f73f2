//! `dgx-pixels-exporter trace analyze|compare` end to end: the real binary on generated traces.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::process::Command;

use dgx_pixels_trace_synth::{write_job, SynthConfig};

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
    // B has more layers per step: its step is longer, so B − A and the change are positive on
    // the step-time row, in this column order (a reversed difference would print minus signs).
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("step time (µs)"))
        .unwrap_or_else(|| panic!("{text}"))
        .trim_start_matches("step time (µs)")
        .split_whitespace()
        .collect();
    let (a_us, b_us, diff): (f64, f64, f64) = (
        row[0].parse().unwrap(),
        row[1].parse().unwrap(),
        row[2].parse().unwrap(),
    );
    assert!(b_us > a_us, "{text}");
    assert!(row[2].starts_with('+') && row[3].starts_with('+'), "{text}");
    assert!((diff - (b_us - a_us)).abs() < 0.02, "{text}");
    let out = Command::new(BIN)
        .args(["trace", "compare", "--format", "json"])
        .args([a.path(), b.path()])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let step = json["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "step time (µs)")
        .unwrap();
    let (a_us, b_us) = (step["a"].as_f64().unwrap(), step["b"].as_f64().unwrap());
    assert!(b_us > a_us, "{step}");
    assert_eq!(step["diff"].as_f64().unwrap(), b_us - a_us, "{step}");
    assert_eq!(
        step["change_pct"].as_f64().unwrap(),
        (b_us - a_us) / a_us * 100.0,
        "{step}"
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

/// `trace analyze FILE.pickle` with no trace beside it (as `--help` promises): the memory
/// analysis of a real snapshot (H200, fixtures/h200-2026-11-26), in every format; a path with
/// neither a trace nor a snapshot is still an error.
#[test]
fn a_memory_snapshot_alone_is_analysed() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let gz = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../trace/tests/fixtures/h200-2026-11-26/rank0_memory_snapshot.pickle.gz");
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(gz).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    let pickle = dir.path().join("rank0_memory_snapshot.pickle");
    std::fs::write(&pickle, bytes).unwrap();
    let run = |format: &str| {
        let out = Command::new(BIN)
            .args(["trace", "analyze", "--format", format])
            .arg(&pickle)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&run("json")).unwrap();
    assert_eq!(json["ranks"].as_array().unwrap().len(), 0);
    let d = &json["memory_snapshots"][0]["devices"][0];
    assert_eq!(d["peak_reserved_bytes"].as_u64(), Some(8_455_716_864));
    assert_eq!(d["peak_allocated_bytes"].as_u64(), Some(7_993_573_512));
    let human = run("human");
    assert!(
        human.contains("rank0_memory_snapshot.pickle cuda:0: reserved")
            && human.contains("peak allocated 7.99 GB"),
        "{human}"
    );
    let md = run("markdown");
    assert!(
        md.contains("## Memory snapshots") && md.contains("| 8.46 GB |"),
        "{md}"
    );
    // The directory alone works too; an empty one says what it looked for.
    let out = Command::new(BIN)
        .args(["trace", "analyze"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["trace", "analyze"])
        .arg(empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("no trace (.json, .json.gz) or memory snapshot (.pickle)"),
        "{err}"
    );
}
