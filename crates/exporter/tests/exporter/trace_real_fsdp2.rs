//! `trace analyze` on a real FSDP2 trace with shapes and its memory snapshot, captured on an
//! H200 (crates/trace/tests/fixtures/h200-2026-11-26-fsdp2-shapes/README.md): the temporal
//! and kernel-type breakdowns equal HTA's numbers measured on it, and the snapshot's peaks equal
//! `torch.cuda.memory_stats()` (reserved exactly, allocated within the bytes allocated before
//! the history started).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Read;
use std::path::Path;

use common::trace_report;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../trace/tests/fixtures/h200-2026-11-26-fsdp2-shapes"
);

/// The fixture's trace and its decompressed snapshot in a directory of their own.
fn fixture_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(FIXTURE);
    std::fs::copy(
        src.join("fsdp2-shapes-rank0.pt.trace.json.gz"),
        dir.path().join("fsdp2-shapes-rank0.pt.trace.json.gz"),
    )
    .unwrap();
    let mut pickle = Vec::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(src.join("fsdp2-shapes-rank0_memory_snapshot.pickle.gz")).unwrap(),
    )
    .read_to_end(&mut pickle)
    .unwrap();
    std::fs::write(
        dir.path().join("fsdp2-shapes-rank0_memory_snapshot.pickle"),
        pickle,
    )
    .unwrap();
    dir
}

#[test]
fn the_breakdowns_equal_htas_on_the_real_fsdp2_trace() {
    let dir = fixture_dir();
    let report = trace_report(&[dir.path()]);
    let rank = &report["ranks"][0];
    let t = &rank["temporal_breakdown"];
    for (key, hta) in [
        ("kernel_time_us", 130_497),
        ("idle_time_us", 35_227),
        ("compute_time_us", 91_830),
        ("non_compute_time_us", 3_440),
    ] {
        assert_eq!(t[key].as_i64(), Some(hta), "{key}: {t}");
    }
    for (key, hta) in [
        ("idle_pct", 26.99),
        ("compute_pct", 70.37),
        ("non_compute_pct", 2.64),
    ] {
        assert!((t[key].as_f64().unwrap() - hta).abs() < 0.005, "{key}: {t}");
    }
    let types = rank["kernel_type_breakdown"].as_array().unwrap();
    let of = |k: &str| {
        types.iter().find(|r| r["kernel_type"] == k).map(|r| {
            (
                r["time_us"].as_i64().unwrap(),
                r["percentage"].as_f64().unwrap(),
            )
        })
    };
    assert_eq!(of("COMPUTATION"), Some((91_835, 96.3)));
    assert_eq!(of("MEMORY"), Some((3_480, 3.7)));
    // HTA's top kernels: two sub-µs kernels whose rounded durations sum below zero are never
    // grouped into "others" (HTA's `sum < 0` mask), so "others" is 19,864 µs, not 19,859.
    let computation = &rank["kernels"]["computation"];
    assert_eq!(computation["others_us"].as_i64(), Some(19_864));
    let top: Vec<(&str, i64)> = computation["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["name"].as_str().unwrap(), k["sum_us"].as_i64().unwrap()))
        .collect();
    assert!(
        top.contains(&(
            "at::cuda::philox::unpack_cudnn(at::PhiloxCudaState, long*, long*)",
            -4
        )),
        "{top:?}"
    );
    assert_eq!(
        top.len(),
        12,
        "HTA lists 10 kernels and the 2 below zero: {top:?}"
    );
}

#[test]
fn the_snapshot_peaks_equal_the_memory_stats() {
    let dir = fixture_dir();
    let facts: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(FIXTURE).join("facts.json")).unwrap(),
    )
    .unwrap();
    let report = trace_report(&[dir.path()]);
    let device = &report["memory_snapshots"][0]["devices"][0];
    assert_eq!(
        device["peak_reserved_bytes"].as_u64(),
        facts["reserved_bytes.all.peak"].as_u64()
    );
    let peak = device["peak_allocated_bytes"].as_u64().unwrap();
    let stats = facts["active_bytes.all.peak"].as_u64().unwrap();
    // The history starts after the model was built: the stats' peak may include up to a few
    // KiB allocated before it, never less than the snapshot's.
    assert!(
        peak <= stats && stats - peak < 16 * 1024,
        "snapshot {peak}, memory_stats {stats}"
    );
}
