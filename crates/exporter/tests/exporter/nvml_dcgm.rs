//! NVML and DCGM together, each on its fake library: every series comes from exactly one
//! source, by default DCGM the profiling metrics and NVML the device metrics, and with
//! `[dcgm] device_metrics = true` the device metrics DCGM reads move to DCGM.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::*;
use dgx_pixels_sim::{GpuState, Node, Scenario};

const FROZEN: (&str, &str) = ("FAKE_DCGM_TIME", "60");

/// Every series (`--metrics.detail full`): these tests look at which source serves what.
fn start_fake(env: &[(&str, &str)], args: &[&str]) -> Daemon {
    let mut all = vec![
        "--collector.dcgm",
        "--dcgm.library",
        fake_dcgm_library(),
        "--metrics.detail",
        "full",
    ];
    all.extend_from_slice(args);
    start_with_env(&all, env)
}

fn close(served: Option<f64>, want: f64, tolerance: f64, what: &str) {
    let served = served.unwrap_or_else(|| panic!("{what}: not served"));
    assert!(
        (served - want).abs() <= tolerance,
        "{what}: served {served}, simulator {want}"
    );
}

#[test]
fn with_nvml_and_dcgm_both_running_no_series_is_served_twice() {
    let env = [
        FROZEN,
        ("FAKE_NVML_TIME", "60"),
        ("FAKE_NVML_PCIE_DELAY_MS", "0"),
    ];
    for device_metrics in [false, true] {
        let mut toml = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        writeln!(toml, "[dcgm]\ndevice_metrics = {device_metrics}").unwrap();
        let d = start_fake(
            &env,
            &[
                "--nvml.library",
                fake_nvml_library(),
                "--config.file",
                toml.path().to_str().unwrap(),
            ],
        );
        let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
            b.contains("dgx_pixels_gpu_sm_active_ratio{") && b.contains("dgx_pixels_gpu_info{")
        });
        for source in ["nvml", "dcgm"] {
            assert_eq!(
                value(&body, "dgx_pixels_source_up", &[("source", source)]),
                Some(1.0)
            );
        }
        let mut keys: Vec<&str> = body
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit_once(' ').unwrap().0)
            .collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(
            keys.len(),
            n,
            "device_metrics={device_metrics}: a series is served twice"
        );
        let mut node = Node::new(Scenario::builtin("dgx-h100").unwrap());
        let u = node.gpu(0).unwrap().uuid.clone();
        let Some(GpuState::Ok(r)) = node.reading(0, Duration::from_secs(60)) else {
            panic!("GPU 0 is healthy")
        };
        let p = dgx_pixels_sim::profile(node.gpu(0).unwrap(), &r);
        let l = [("gpu", "0"), ("uuid", u.as_str())];
        // Profiling (PCIe byte rates included) from DCGM: its exact double, not NVML's KiB/s.
        close(
            value(&body, "dgx_pixels_pcie_transmit_bytes_per_second", &l),
            p.pcie_tx_bytes_per_second,
            1e-3,
            "pcie tx from dcgm",
        );
        // NVML keeps what DCGM does not read: graphics and video clocks, power limit, gpu_info.
        for clock in ["graphics", "video", "sm", "memory"] {
            assert!(
                value(
                    &body,
                    "dgx_pixels_gpu_clock_hertz",
                    &[l[0], ("clock", clock)]
                )
                .is_some(),
                "{clock}"
            );
        }
        assert!(value(&body, "dgx_pixels_gpu_power_limit_watts", &l).is_some());
        assert_eq!(series(&body, "dgx_pixels_gpu_info").len(), 8);
        // Power: NVML's (milliwatts) by default, DCGM's exact double with device_metrics.
        let power = value(&body, "dgx_pixels_gpu_power_watts", &l).unwrap();
        let error = (power - r.readout.power_watts.unwrap()).abs();
        if device_metrics {
            assert!(
                error <= 1e-9,
                "power from dcgm: {power} vs {}",
                r.readout.power_watts.unwrap()
            );
        } else {
            assert!(
                error > 1e-9 && error <= 1e-3,
                "power from nvml: {power} vs {}",
                r.readout.power_watts.unwrap()
            );
        }
    }
}
