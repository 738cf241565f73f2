//! scripts/gpu-validate-probes.sh and bench/torch_probes.py run end to end with a stand-in
//! for the exporter binary and for PyTorch (tests/fixtures/fake_torch), so the script that only
//! ever runs on GPU machines is known to work before it gets there: arguments, result file
//! hand-over, ratios, the pass/fail table and exit codes.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Torch's stand-in measures work / 20 ms; ours is `gemm_ratio` and `copy_ratio` of that.
fn fake_results(gemm_ratio: f64, copy_ratio: f64) -> String {
    let gemm = 2.0 * 8192f64.powi(3) / 0.02 * gemm_ratio;
    let copy = 2.0 * 268435456.0 / 0.02 * copy_ratio;
    let h2d = 67108864.0 / 0.02;
    format!(
        r#"{{"format": "dgx-pixels-probe-results/1",
  "environment": {{"hostname": "h", "container": "no", "driver_version": "580.65.06", "cuda_version": "13.0",
    "exporter_version": "0.1.0", "git_revision": "abc", "started_at": "2026-11-22T06:00:00Z"}},
  "warmup": 1, "iterations": 3, "seed": 42,
  "sizes": {{"gemm_n_16bit": 8192, "gemm_n_32bit": 8192, "gemm_n_64bit": 4096, "copy_bytes": 268435456,
    "host_copy_bytes": 67108864, "launches": 1000, "target_seconds": 0.02}},
  "results": [
    {{"probe": "gemm_bf16", "gpu": 0, "unit": "flops", "values": [{gemm}, {gemm}, {gemm}]}},
    {{"probe": "copy_d2d", "gpu": 0, "unit": "bytes_per_second", "values": [{copy}, {copy}, {copy}]}},
    {{"probe": "copy_h2d", "gpu": 0, "unit": "bytes_per_second", "values": [{h2d}, {h2d}, {h2d}]}},
    {{"probe": "launch_latency", "gpu": 0, "unit": "seconds", "values": [4e-6, 4e-6, 4e-6]}}
  ]}}"#
    )
}

/// A stand-in exporter: checks its arguments and writes `results` to --output.
fn fake_exporter(dir: &Path, results: &str) -> PathBuf {
    let json = dir.join("canned.json");
    std::fs::write(&json, results).unwrap();
    let bin = dir.join("dgx-pixels-exporter");
    std::fs::write(
        &bin,
        format!(
            "#!/usr/bin/env bash\nset -eu\n[ \"$1 $2\" = \"probe run\" ] || exit 9\n\
             echo \"$@\" > {dir}/args\nwhile [ $# -gt 0 ]; do [ \"$1\" = --output ] && cp {json} \"$2\"; shift; done\n",
            dir = dir.display(),
            json = json.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn validate(gemm_ratio: f64, copy_ratio: f64) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_exporter(dir.path(), &fake_results(gemm_ratio, copy_ratio));
    let out = Command::new("bash")
        .arg(repo().join("scripts/gpu-validate-probes.sh"))
        .args([
            "--bin",
            bin.to_str().unwrap(),
            "--gpu",
            "0",
            "--iterations",
            "3",
        ])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env(
            "PYTHONPATH",
            repo().join("crates/probes/tests/fixtures/fake_torch"),
        )
        .output()
        .unwrap();
    let args = std::fs::read_to_string(dir.path().join("args")).unwrap_or_default();
    assert!(
        args.starts_with("probe run --gpus 0 --probe gemm_bf16,"),
        "{args}"
    );
    assert!(
        args.contains("--iterations 3") && args.contains("--output "),
        "{args}"
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn targets_met_pass() {
    let (code, stdout, stderr) = validate(0.96, 0.91);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("| gemm_bf16 | 52.78 TFLOP/s | 54.98 TFLOP/s | 0.960 | >= 0.95 | PASS |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| copy_d2d |") && stdout.contains("| 0.910 | >= 0.90 | PASS |"),
        "{stdout}"
    );
    // No target for host copies; launch latency has no PyTorch counterpart.
    assert!(
        stdout.contains("| copy_h2d | 3.36 GB/s | 3.36 GB/s | 1.000 | - | - |"),
        "{stdout}"
    );
    assert!(!stdout.contains("launch_latency"));
    assert!(stdout.contains("ALL TARGETS MET"));
}

#[test]
fn a_missed_target_fails_the_run() {
    let (code, stdout, _) = validate(0.96, 0.5);
    assert_eq!(code, 1);
    assert!(stdout.contains("| 0.500 | >= 0.90 | FAIL |"), "{stdout}");
    assert!(stdout.contains("SOME TARGETS MISSED"));
}

#[test]
fn the_table_can_be_recorded_as_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("ours.json");
    std::fs::write(&ours, fake_results(1.0, 1.0)).unwrap();
    let md = dir.path().join("validation.md");
    let status = Command::new("python3")
        .arg(repo().join("bench/torch_probes.py"))
        .args([
            "--ours",
            ours.to_str().unwrap(),
            "--iterations",
            "2",
            "--markdown",
            md.to_str().unwrap(),
        ])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env(
            "PYTHONPATH",
            repo().join("crates/probes/tests/fixtures/fake_torch"),
        )
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(
        text.starts_with(
            "\n## 2026-11-22T06:00:00Z on h\n\nGPU 0: Fake GPU, driver 580.65.06, CUDA 13.0"
        ),
        "{text}"
    );
    assert!(text.contains("| gemm_bf16 |") && text.contains("| PASS |"));
}
