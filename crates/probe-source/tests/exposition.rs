//! The probe series as served: a scheduler with a scripted backend publishes into a real
//! snapshot store, and `promtool check metrics` lints the exposition (histogram included).
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use dgx_pixels_exposition::{EncodeOptions, Format, SnapshotStore};

use dgx_pixels_metrics::catalog::Detail;
use dgx_pixels_metrics::{Snapshot, Source, SourceHealth};
use dgx_pixels_probe_source::{Backend, GpuId, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::{ProbeError, ProbeKind, ProbeUnit};

struct Fake;
impl Backend for Fake {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok(vec![GpuId {
            ordinal: 0,
            uuid: "GPU-a".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
        }])
    }
    fn run(&mut self, _: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        Ok(vec![match kind.unit() {
            ProbeUnit::Flops => 7e14,
            ProbeUnit::BytesPerSecond => 3e12,
            ProbeUnit::Seconds => 4e-6,
        }])
    }
}

struct Idle;
impl UtilizationView for Idle {
    fn lookup(&self, _: &str) -> Option<(u32, f64)> {
        Some((0, 0.0))
    }
}

/// promtool from PATH, or from .tools/ where scripts/install-test-tools.sh puts it.
fn promtool() -> PathBuf {
    let local =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.tools/prometheus/usr/bin/promtool");
    if local.exists() {
        return local;
    }
    let on_path = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        on_path.is_ok_and(|s| s.success()),
        "promtool not found: run scripts/install-test-tools.sh"
    );
    PathBuf::from("promtool")
}

#[test]
fn probe_series_pass_promtool() {
    let settings = ScheduleSettings {
        probes: ProbeKind::ALL.to_vec(),
        duty_cycle: 1.0,
        settle: std::time::Duration::ZERO,
        ..Default::default()
    };
    let mut source = ProbeSource::new(Fake, Idle, settings).unwrap();
    let mut samples = Vec::new();
    // Every probe once (duty cycle 1: no pause between runs).
    for _ in 0..ProbeKind::ALL.len() {
        samples = source.poll().unwrap().samples;
    }
    // Full detail: the duration histogram is outside the default series budget.
    let options = EncodeOptions {
        detail: Detail::Full,
        ..Default::default()
    };
    let store = SnapshotStore::new(&["probes"], vec![], options);
    store.publish(Snapshot {
        source: "probes".into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            ..Default::default()
        },
        output: samples.into(),
    });
    let text = String::from_utf8(store.current().exposition(Format::Text, false).to_vec()).unwrap();
    for needle in [
        "dgx_pixels_probe_gemm_flops{gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_bf16\"} 700000000000000\n",
        "dgx_pixels_probe_bandwidth_bytes_per_second{gpu=\"0\",uuid=\"GPU-a\",probe=\"copy_d2d\"} 3000000000000\n",
        "dgx_pixels_probe_launch_latency_seconds{gpu=\"0\",uuid=\"GPU-a\"} 4e-6\n",
        "dgx_pixels_probe_runs_total{gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_fp64\",outcome=\"ok\"} 1\n",
        "# TYPE dgx_pixels_probe_duration_seconds histogram\n",
        "dgx_pixels_probe_duration_seconds_count{gpu=\"0\",uuid=\"GPU-a\",probe=\"launch_latency\"} 1\n",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool: {report}\n{text}"
    );
}
