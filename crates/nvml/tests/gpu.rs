//! The NVML source on a real GPU: the real `libnvidia-ml.so.1`, read through the same code the
//! daemon runs, compared with what `nvidia-smi` (the driver's own tool) reports.
//!
//! Needs a GPU host (an NVIDIA driver, at least one GPU, `nvidia-smi` on PATH), so it is
//! `#[ignore]`d: `scripts/test` runs it with `--ignored` where one is present and reports it as
//! not run elsewhere (docs/testing.md). Run by hand: `cargo test -p dgx-pixels-nvml --test gpu
//! -- --ignored`.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;
use std::process::Command;

use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_nvml::NvmlSource;

/// `uuid -> (memory.total MiB, power.limit W)` from nvidia-smi.
fn nvidia_smi() -> BTreeMap<String, (f64, Option<f64>)> {
    let out = Command::new("nvidia-smi")
        .args([
            "--query-gpu=uuid,memory.total,power.limit",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .unwrap_or_else(|e| panic!("this test needs nvidia-smi on PATH (a GPU host): {e}"));
    assert!(out.status.success(), "nvidia-smi failed: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            (
                f[0].to_string(),
                (f[1].parse().unwrap(), f.get(2).and_then(|p| p.parse().ok())),
            )
        })
        .collect()
}

fn by_uuid(samples: &[Sample], metric: Metric) -> BTreeMap<String, f64> {
    samples
        .iter()
        .filter(|s| s.metric == metric)
        .map(|s| (s.label("uuid").unwrap_or_default().to_string(), s.value))
        .collect()
}

#[test]
#[ignore = "environment: gpu (needs an NVIDIA driver, a GPU and nvidia-smi; scripts/test runs it on a GPU host)"]
fn gpu_nvml_reads_every_real_device_as_nvidia_smi_reports_it() {
    let smi = nvidia_smi();
    assert!(!smi.is_empty(), "nvidia-smi lists no GPU");

    let mut source = NvmlSource::new(None);
    let samples = source
        .poll()
        .unwrap_or_else(|e| panic!("NVML poll on a GPU host: {} ({})", e.message, e.kind))
        .samples;

    // The same GPUs, by UUID, all answering.
    let up = by_uuid(&samples, Metric::GpuUp);
    assert_eq!(
        up.keys().collect::<Vec<_>>(),
        smi.keys().collect::<Vec<_>>(),
        "GPUs seen by NVML vs nvidia-smi"
    );
    assert!(up.values().all(|v| *v == 1.0), "every GPU up: {up:?}");
    let info = by_uuid(&samples, Metric::GpuInfo);
    assert_eq!(info.len(), smi.len(), "one dgx_pixels_gpu_info per GPU");

    // Values agree with nvidia-smi, converted to base units.
    let total = by_uuid(&samples, Metric::GpuMemoryTotal);
    let limit = by_uuid(&samples, Metric::GpuPowerLimit);
    for (uuid, (mib, power_limit)) in &smi {
        // Within 1%: nvidia-smi rounds to MiB; a unit mistake (MB for MiB, MiB for bytes) is
        // off by 5% or more.
        let bytes = total.get(uuid).copied().unwrap_or(0.0);
        let want = mib * 1024.0 * 1024.0;
        assert!(
            (bytes - want).abs() <= want * 0.01,
            "{uuid}: memory total {bytes} B vs nvidia-smi {mib} MiB"
        );
        if let (Some(want), Some(got)) = (power_limit, limit.get(uuid)) {
            assert!(
                (got - want).abs() <= want * 0.02,
                "{uuid}: power limit {got} W vs nvidia-smi {want} W"
            );
        }
    }
    // Live readings are physically plausible.
    for (uuid, w) in by_uuid(&samples, Metric::GpuPower) {
        assert!(w > 0.0 && w < 2000.0, "{uuid}: power {w} W");
    }
    let temps: Vec<f64> = samples
        .iter()
        .filter(|s| s.metric == Metric::GpuTemperature && s.label("sensor") == Some("gpu"))
        .map(|s| s.value)
        .collect();
    assert_eq!(temps.len(), smi.len(), "a GPU temperature per GPU");
    assert!(
        temps.iter().all(|t| (5.0..110.0).contains(t)),
        "temperatures {temps:?}"
    );
    for (uuid, u) in by_uuid(&samples, Metric::GpuUtilization) {
        assert!(
            (0.0..=1.0).contains(&u),
            "{uuid}: utilization {u} is a ratio"
        );
    }
}

/// GPM on the real driver: the profiling families are served by the NVML source exactly on the
/// GPUs where NVML itself samples GPM (Hopper and newer, not refused), as ratios, from the
/// second poll on; elsewhere they are absent, never 0.
#[test]
#[ignore = "environment: gpu (needs an NVIDIA driver, a GPU and nvidia-smi; scripts/test runs it on a GPU host)"]
fn gpu_gpm_profiling_families_where_nvml_samples_gpm() {
    let nvml = nvml_wrapper::Nvml::init().unwrap();
    let mut gpm = BTreeMap::new();
    for i in 0..nvml.device_count().unwrap() {
        let d = nvml.device_by_index(i).unwrap();
        // What NVML answers this user: a sample taken, or refused (unsupported or denied).
        gpm.insert(d.uuid().unwrap(), d.gpm_sample().is_ok());
    }
    let mut source = NvmlSource::new(None);
    let first = source.poll().unwrap().samples;
    assert!(
        by_uuid(&first, Metric::GpuSmActive).is_empty(),
        "the first poll has no interval: no GPM value"
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let samples = source.poll().unwrap().samples;
    let sm = by_uuid(&samples, Metric::GpuSmActive);
    let tensor = by_uuid(&samples, Metric::GpuTensorPipeActive);
    for (uuid, sampled) in &gpm {
        assert_eq!(
            sm.contains_key(uuid),
            *sampled,
            "{uuid}: sm_active served iff NVML samples GPM ({sampled})"
        );
        assert_eq!(tensor.contains_key(uuid), *sampled, "{uuid}: tensor");
    }
    for (uuid, v) in sm.iter().chain(&tensor) {
        assert!((0.0..=1.0001).contains(v), "{uuid}: {v} is a ratio");
    }
    println!("GPM sampled per GPU: {gpm:?}; sm_active {sm:?}");
}

/// A CUDA workload this test starts and ends: PyTorch bf16 matmuls where `import torch` finds
/// a GPU, else the exporter's own `probe run` (bf16 GEMMs) beside this test binary
/// (`target/*/dgx-pixels-exporter`, or `$DGX_PIXELS_EXPORTER`). Killed when dropped.
struct Load(std::process::Child);

impl Load {
    fn start() -> Load {
        let torch = Command::new("python3")
            .args(["-c", "import torch; assert torch.cuda.is_available()"])
            .output()
            .is_ok_and(|o| o.status.success());
        let child = if torch {
            Command::new("python3")
                .args([
                    "-c",
                    "import time, torch\n\
                     a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n\
                     t = time.time()\n\
                     while time.time() - t < 60:\n    a @ a\n    torch.cuda.synchronize()\n",
                ])
                .spawn()
        } else {
            let exporter = std::env::var_os("DGX_PIXELS_EXPORTER")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| {
                    // target/<profile>/deps/gpu-HASH -> target/<profile>/dgx-pixels-exporter
                    let exe = std::env::current_exe().unwrap();
                    exe.parent()
                        .unwrap()
                        .parent()
                        .unwrap()
                        .join("dgx-pixels-exporter")
                });
            Command::new(&exporter)
                .args(["probe", "run", "--probe", "gemm_bf16", "--gpus", "0"])
                .args(["--warmup", "10", "--iterations", "20000"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .map_err(|e| {
                    std::io::Error::other(format!(
                        "no PyTorch with CUDA and no exporter at {} ({e}): build it first \
                         (cargo build -p dgx-pixels-exporter) or set DGX_PIXELS_EXPORTER",
                        exporter.display()
                    ))
                })
        };
        Load(child.unwrap())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Under a load this test starts, GPM activity and utilization are well above zero and still
/// ratios: an idle GPU reads 0 whatever the percent-to-ratio conversion does (a check on an
/// idle H200 passed without the division; under load it read 96.29).
#[test]
#[ignore = "environment: gpu (needs an NVIDIA driver, a GPU, and PyTorch with CUDA or a built exporter; scripts/test runs it on a GPU host)"]
fn gpu_activity_under_a_load_the_test_starts() {
    let nvml = nvml_wrapper::Nvml::init().unwrap();
    let gpm_anywhere = (0..nvml.device_count().unwrap())
        .any(|i| nvml.device_by_index(i).unwrap().gpm_sample().is_ok());
    let mut load = Load::start();
    let mut source = NvmlSource::new(None);
    source.poll().unwrap();
    let max = |m: &BTreeMap<String, f64>| m.values().copied().fold(f64::NEG_INFINITY, f64::max);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(45);
    let (mut util, mut sm) = (BTreeMap::new(), BTreeMap::new());
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert!(load.0.try_wait().unwrap().is_none(), "the load ended early");
        let samples = source.poll().unwrap().samples;
        util = by_uuid(&samples, Metric::GpuUtilization);
        sm = by_uuid(&samples, Metric::GpuSmActive);
        if max(&util) > 0.5 && (!gpm_anywhere || max(&sm) > 0.3) {
            break;
        }
    }
    drop(load);
    println!("under load: utilization {util:?}; sm_active {sm:?}");
    for (uuid, v) in util.iter().chain(&sm) {
        assert!((0.0..=1.0001).contains(v), "{uuid}: {v} is a ratio");
    }
    assert!(max(&util) > 0.5, "utilization under load: {util:?}");
    if gpm_anywhere {
        assert!(max(&sm) > 0.3, "sm_active under load: {sm:?}");
    }
}
