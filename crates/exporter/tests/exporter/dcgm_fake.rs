//! The real binary reading "GPUs" through DCGM: `--dcgm.library` points at our fake libdcgm
//! (crates/fake-dcgm), which answers from the simulator, in embedded and in remote mode.
//! Served values must equal the simulator's (its readings and its profiling model) for the
//! same scenario and time.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use common::*;
use dgx_pixels_sim::{GpuReading, GpuState, Node, Scenario};

/// Starts the daemon with only the dcgm collector, on the fake, serving every series (these
/// tests compare readings; the series budget has its own test).
fn start_fake(fake_env: &[(&str, &str)], args: &[&str]) -> Daemon {
    let mut all = vec![
        "--collector.dcgm",
        "--dcgm.library",
        fake_dcgm_library(),
        "--metrics.detail",
        "full",
    ];
    if !args.contains(&"--collector.dcgm.interval") {
        all.extend_from_slice(&["--collector.dcgm.interval", "200ms"]);
    }
    all.extend_from_slice(args);
    start_with_env(&all, fake_env)
}

fn reading(scenario: &str, gpu: usize, t: f64) -> GpuReading {
    let mut n = Node::new(Scenario::builtin(scenario).unwrap());
    match n.reading(gpu, Duration::from_secs_f64(t)) {
        Some(GpuState::Ok(r)) => r,
        other => panic!("GPU {gpu} not ok: {other:?}"),
    }
}

/// The simulator's profiling model for GPU `gpu` of `scenario` in state `r`.
fn profile(scenario: &str, gpu: usize, r: &GpuReading) -> dgx_pixels_sim::Profile {
    let n = Node::new(Scenario::builtin(scenario).unwrap());
    dgx_pixels_sim::profile(n.gpu(gpu).unwrap(), r)
}

fn close(served: Option<f64>, want: f64, tolerance: f64, what: &str) {
    let served = served.unwrap_or_else(|| panic!("{what}: not served"));
    assert!(
        (served - want).abs() <= tolerance,
        "{what}: served {served}, simulator {want}"
    );
}

fn uuid(scenario: &str, gpu: usize) -> String {
    Node::new(Scenario::builtin(scenario).unwrap())
        .gpu(gpu)
        .unwrap()
        .uuid
        .clone()
}

/// Device and profiling values of every GPU equal the simulator's at the frozen time.
fn assert_values(body: &str, scenario: &str, gpus: usize) {
    assert_eq!(
        value(body, "dgx_pixels_source_up", &[("source", "dcgm")]),
        Some(1.0),
        "{body}"
    );
    for i in 0..gpus {
        let r = reading(scenario, i, 60.0);
        let p = profile(scenario, i, &r);
        let gpu = i.to_string();
        let uuid = uuid(scenario, i);
        let l = [("gpu", gpu.as_str()), ("uuid", uuid.as_str())];
        let v = |name: &str| value(body, name, &l);
        close(
            v("dgx_pixels_gpu_utilization_ratio"),
            r.readout.utilization_ratio.unwrap(),
            0.005,
            "util",
        );
        close(
            v("dgx_pixels_gpu_power_watts"),
            r.readout.power_watts.unwrap(),
            1e-9,
            "power",
        );
        close(
            v("dgx_pixels_gpu_energy_joules_total"),
            r.readout.energy_joules.unwrap(),
            1e-3,
            "energy",
        );
        close(
            value(
                body,
                "dgx_pixels_gpu_temperature_celsius",
                &[l[0], ("sensor", "gpu")],
            ),
            r.readout.temperature_gpu_celsius.unwrap(),
            0.5,
            "temperature",
        );
        close(
            value(body, "dgx_pixels_gpu_clock_hertz", &[l[0], ("clock", "sm")]),
            r.readout.clocks.sm.unwrap(),
            0.5e6,
            "sm clock",
        );
        if let Some(used) = r.readout.memory_used_bytes {
            close(
                v("dgx_pixels_gpu_memory_used_bytes"),
                used,
                0.5 * 1048576.0,
                "fb used",
            );
        }
        close(
            v("dgx_pixels_gpu_graphics_engine_active_ratio"),
            p.gr_engine_active,
            1e-12,
            "gr active",
        );
        close(
            v("dgx_pixels_gpu_sm_active_ratio"),
            p.sm_active,
            1e-12,
            "sm active",
        );
        close(
            v("dgx_pixels_gpu_sm_occupancy_ratio"),
            p.sm_occupancy,
            1e-12,
            "sm occupancy",
        );
        close(
            v("dgx_pixels_gpu_tensor_pipe_active_ratio"),
            p.tensor_active,
            1e-12,
            "tensor",
        );
        close(
            v("dgx_pixels_gpu_dram_active_ratio"),
            p.dram_active,
            1e-12,
            "dram",
        );
        close(
            v("dgx_pixels_gpu_fp16_pipe_active_ratio"),
            p.fp16_active,
            1e-12,
            "fp16",
        );
        close(
            v("dgx_pixels_pcie_transmit_bytes_per_second"),
            p.pcie_tx_bytes_per_second,
            1e-3,
            "pcie tx",
        );
        close(
            v("dgx_pixels_pcie_receive_bytes_per_second"),
            p.pcie_rx_bytes_per_second,
            1e-3,
            "pcie rx",
        );
        if let Some(rate) = p.nvlink_tx_bytes_per_second {
            close(
                v("dgx_pixels_nvlink_transmit_bytes_per_second"),
                rate,
                1e-3,
                "nvlink tx",
            );
            assert_eq!(rate, r.nvlink_tx_bytes_per_second);
        }
        assert!(
            v("dgx_pixels_gpu_sm_active_ratio") <= v("dgx_pixels_gpu_graphics_engine_active_ratio")
        );
    }
}

const FROZEN: (&str, &str) = ("FAKE_DCGM_TIME", "60");

#[test]
fn embedded_mode_serves_the_simulators_values() {
    let d = start_fake(&[FROZEN], &["--no-collector.nvml"]);
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
        b.contains("dgx_pixels_gpu_sm_active_ratio{")
    });
    assert_values(&body, "dgx-h100", 8);
    // NVLink rates of the simulated links, for GPUs with links.
    assert_eq!(
        series(&body, "dgx_pixels_nvlink_transmit_bytes_per_second").len(),
        8
    );
    let logs = stop_and_logs(d);
    assert!(logs.contains("DCGM connected"), "{logs}");
    assert!(logs.contains("embedded host engine"), "{logs}");
}

#[test]
fn remote_mode_over_tcp_and_unix_socket() {
    for (engine, flag) in [
        ("127.0.0.1:5555", "127.0.0.1:5555"),
        ("localhost", "localhost:5555"),
        (
            "/run/nvidia-dcgm/hostengine.sock",
            "/run/nvidia-dcgm/hostengine.sock",
        ),
    ] {
        let d = start_fake(
            &[FROZEN, ("FAKE_DCGM_HOSTENGINE", engine)],
            &["--no-collector.nvml", "--dcgm.hostengine", flag],
        );
        let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
            b.contains("dgx_pixels_gpu_sm_active_ratio{")
        });
        assert_values(&body, "dgx-h100", 8);
        let logs = stop_and_logs(d);
        assert!(
            logs.contains(&format!("remote host engine {flag}")),
            "{logs}"
        );
    }
    // A host engine that is not there: down, said once, the daemon keeps serving.
    let d = start_fake(
        &[FROZEN, ("FAKE_DCGM_HOSTENGINE", "10.0.0.1:5555")],
        &["--no-collector.nvml", "--dcgm.hostengine", "127.0.0.1:5555"],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(3), |b| {
        b.contains("dgx_pixels_source_polls_total{source=\"dcgm\"}")
    });
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "dcgm")]),
        Some(0.0)
    );
    assert!(series(&body, "dgx_pixels_gpu_sm_active_ratio").is_empty());
    let logs = stop_and_logs(d);
    assert!(
        logs.contains("cannot connect to the DCGM host engine at 127.0.0.1:5555"),
        "{logs}"
    );
}

#[test]
fn by_default_only_profiling_fields_come_from_dcgm() {
    // NVML on (its library absent here): DCGM must not serve the device metrics NVML owns.
    let d = start_fake(
        &[FROZEN],
        &["--nvml.library", "/nonexistent/libnvidia-ml.so.1"],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
        b.contains("dgx_pixels_gpu_sm_active_ratio{")
    });
    assert_eq!(series(&body, "dgx_pixels_gpu_sm_active_ratio").len(), 8);
    assert!(series(&body, "dgx_pixels_gpu_utilization_ratio").is_empty());
    assert!(series(&body, "dgx_pixels_gpu_power_watts").is_empty());
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "nvml")]),
        Some(0.0)
    );
}

#[test]
fn blank_values_are_never_exported() {
    // dgx-spark's GB10 has no framebuffer figures; 1004 (tensor) and 150 (GPU temperature)
    // are forced blank.
    let d = start_fake(
        &[
            FROZEN,
            ("FAKE_DCGM_SCENARIO", "dgx-spark"),
            ("FAKE_DCGM_BLANK_FIELDS", "1004,150"),
        ],
        &["--no-collector.nvml"],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
        b.contains("dgx_pixels_gpu_sm_active_ratio{")
    });
    assert!(
        series(&body, "dgx_pixels_gpu_tensor_pipe_active_ratio").is_empty(),
        "{body}"
    );
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_temperature_celsius",
            &[("gpu", "0"), ("sensor", "gpu")]
        ),
        None,
        "{body}"
    );
    assert!(
        series(&body, "dgx_pixels_gpu_memory_total_bytes").is_empty(),
        "{body}"
    );
    assert!(
        series(&body, "dgx_pixels_gpu_memory_used_bytes").is_empty(),
        "{body}"
    );
    // The others are there, and no value anywhere is a sentinel. The exporter's own process
    // families are no reading of DCGM's: an unlimited RLIMIT_AS is 2^64 - 1 there, as
    // client_golang serves it.
    assert_eq!(series(&body, "dgx_pixels_gpu_sm_active_ratio").len(), 1);
    assert!(!series(&body, "dgx_pixels_gpu_power_watts").is_empty());
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && l.starts_with("dgx_pixels_"))
    {
        let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(v < 1.4e14, "sentinel served: {line}");
    }
}

#[test]
fn unsupported_profiling_is_said_once_and_the_rest_keeps_working() {
    for (mode, why) in [
        ("unsupported", "Profiling is not supported"),
        ("requires_root", "profiling needs root"),
    ] {
        let d = start_fake(
            &[FROZEN, ("FAKE_DCGM_PROFILING", mode)],
            &["--no-collector.nvml"],
        );
        let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
            b.contains("dgx_pixels_gpu_power_watts{")
        });
        assert_eq!(
            value(&body, "dgx_pixels_source_up", &[("source", "dcgm")]),
            Some(1.0)
        );
        assert!(series(&body, "dgx_pixels_gpu_sm_active_ratio").is_empty());
        assert_eq!(series(&body, "dgx_pixels_gpu_power_watts").len(), 8);
        std::thread::sleep(Duration::from_millis(500));
        let logs = stop_and_logs(d);
        assert_eq!(
            logs.matches("profiling fields unavailable").count(),
            1,
            "{logs}"
        );
        assert!(logs.contains(why), "{mode}: {logs}");
    }
}

#[test]
fn a_struct_version_mismatch_is_a_clear_error() {
    let d = start_fake(
        &[FROZEN, ("FAKE_DCGM_FIELD_VALUE_VERSION", "0x03001020")],
        &["--no-collector.nvml"],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(3), |b| {
        b.contains("dgx_pixels_source_polls_total{source=\"dcgm\"}")
    });
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "dcgm")]),
        Some(0.0)
    );
    assert!(series(&body, "dgx_pixels_gpu_sm_active_ratio").is_empty());
    // Regression (hardening round 2, item 11): this permanent error reconnected and re-created
    // the groups every second, with an info line each time. Now: backoff 1 s, 2 s, 4 s, ...
    // and one line for the connection and one for the error.
    std::thread::sleep(Duration::from_millis(4500));
    let logs = stop_and_logs(d);
    assert_eq!(logs.matches("DCGM connected").count(), 1, "{logs}");
    assert_eq!(
        logs.matches("rejected our dcgmFieldValue_v2").count(),
        1,
        "{logs}"
    );
    assert!(
        logs.contains("rejected our dcgmFieldValue_v2 version 0x02001020"),
        "{logs}"
    );
    assert!(
        logs.contains("The requested version is not supported"),
        "{logs}"
    );
}

#[test]
fn a_lost_host_engine_marks_the_source_down_then_reconnects() {
    let d = start_fake(
        &[
            FROZEN,
            ("FAKE_DCGM_HOSTENGINE", "127.0.0.1:5555"),
            ("FAKE_DCGM_CONNECTION_LOSS", "1.5:3"),
        ],
        &["--no-collector.nvml", "--dcgm.hostengine", "127.0.0.1:5555"],
    );
    let up = |b: &str| value(b, "dgx_pixels_source_up", &[("source", "dcgm")]);
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| up(b) == Some(1.0));
    assert_eq!(up(&body), Some(1.0));
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| up(b) == Some(0.0));
    assert_eq!(up(&body), Some(0.0), "down while the host engine is gone");
    assert!(series(&body, "dgx_pixels_gpu_sm_active_ratio").is_empty());
    // Backoff 1 s, 2 s, 4 s: back within 10 s of the loss, groups and watches restored.
    let (body, _) = wait_until(d.port, Duration::from_secs(10), |b| {
        up(b) == Some(1.0) && b.contains("dgx_pixels_gpu_sm_active_ratio{")
    });
    assert_values(&body, "dgx-h100", 8);
    let logs = stop_and_logs(d);
    assert!(
        logs.contains("lost the connection to the DCGM remote host engine"),
        "{logs}"
    );
    assert_eq!(logs.matches("DCGM connected").count(), 2, "{logs}");
}

#[test]
fn a_dcgm_exporter_field_list_is_accepted() {
    let mut csv = tempfile::NamedTempFile::new().unwrap();
    write!(
        csv,
        "# Format\n# DCGM FIELD, Prometheus metric type, help message\n\n\
         # Clocks\nDCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).\n\
         DCGM_FI_DEV_POWER_USAGE_INSTANT, gauge, Current instantaneous power draw (in W).\n\
         DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.\n\
         DCGM_FI_DRIVER_VERSION, label, Driver Version\n"
    )
    .unwrap();
    let mut toml = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    writeln!(
        toml,
        "[dcgm]\nfield_list = {:?}\ndevice_metrics = true",
        csv.path().display().to_string()
    )
    .unwrap();
    let d = start_fake(&[FROZEN], &["--config.file", toml.path().to_str().unwrap()]);
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
        b.contains("dgx_pixels_dcgm_dev_power_usage_instant{")
    });
    let r = reading("dgx-h100", 0, 60.0);
    let p = profile("dgx-h100", 0, &r);
    let uuid = uuid("dgx-h100", 0);
    let l = [("gpu", "0"), ("uuid", uuid.as_str())];
    close(
        value(&body, "dgx_pixels_dcgm_dev_power_usage_instant", &l),
        r.power_instant_watts,
        1e-9,
        "instant power",
    );
    close(
        value(&body, "dgx_pixels_gpu_tensor_pipe_active_ratio", &l),
        p.tensor_active,
        1e-12,
        "tensor",
    );
    close(
        value(
            &body,
            "dgx_pixels_gpu_clock_hertz",
            &[l[0], ("clock", "sm")],
        ),
        r.readout.clocks.sm.unwrap(),
        0.5e6,
        "sm clock",
    );
    assert!(body.contains(
        "# HELP dgx_pixels_dcgm_dev_power_usage_instant Current instantaneous power draw (in W).\n\
         # TYPE dgx_pixels_dcgm_dev_power_usage_instant gauge\n"
    ));
    // Only what the list names.
    assert!(series(&body, "dgx_pixels_gpu_sm_active_ratio").is_empty());
    // OpenMetrics too.
    let (_, _, om) = get(
        d.port,
        "/metrics",
        &[("Accept", "application/openmetrics-text")],
    );
    let om = String::from_utf8(om).unwrap();
    assert!(
        om.contains("# TYPE dgx_pixels_dcgm_dev_power_usage_instant gauge"),
        "{om}"
    );
    assert!(om.ends_with("# EOF\n"));
    let logs = stop_and_logs(d);
    assert!(
        logs.contains("DCGM_FI_DRIVER_VERSION is a label row"),
        "{logs}"
    );
}

#[test]
fn a_bad_field_list_is_a_config_error_naming_file_and_line() {
    let mut csv = tempfile::NamedTempFile::new().unwrap();
    write!(
        csv,
        "DCGM_FI_DEV_SM_CLOCK, gauge, ok\nDCGM_FI_DEV_GPU_TEMP, histogram, no\n"
    )
    .unwrap();
    let mut toml = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    writeln!(
        toml,
        "[dcgm]\nfield_list = {:?}",
        csv.path().display().to_string()
    )
    .unwrap();
    let out = Command::new(BIN)
        .args([
            "--collector.dcgm",
            "--config.file",
            toml.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:2: type \"histogram\"", csv.path().display())),
        "{err}"
    );
}

#[test]
fn a_fast_poll_still_watches_profiling_at_dcgms_minimum() {
    // The fake refuses profiling watches under 100 ms, as DCGM does: a 50 ms poll interval
    // must still get profiling fields (watched at 100 ms) and device fields (at 50 ms).
    let d = start_fake(
        &[FROZEN],
        &["--no-collector.nvml", "--collector.dcgm.interval", "50ms"],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
        b.contains("dgx_pixels_gpu_sm_active_ratio{")
    });
    assert_values(&body, "dgx-h100", 8);
    let logs = stop_and_logs(d);
    assert!(!logs.contains("profiling fields unavailable"), "{logs}");
}

#[test]
fn a_field_dcgm_stops_updating_is_left_out_then_its_watches_are_re_created() {
    // DCGM stops sampling SM active (1002) 1 s after it is watched: its timestamp freezes.
    let d = start_fake(
        &[
            FROZEN,
            ("FAKE_DCGM_STALL_FIELDS", "1002"),
            ("FAKE_DCGM_STALL_AFTER", "1"),
        ],
        &["--no-collector.nvml"],
    );
    let sm = |b: &str| value(b, "dgx_pixels_gpu_sm_active_ratio", &[("gpu", "0")]);
    let stale = |b: &str| {
        value(
            b,
            "dgx_pixels_gpu_stale_readings",
            &[("gpu", "0"), ("source", "dcgm")],
        )
    };
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
        sm(b).is_some() && stale(b) == Some(0.0)
    });
    assert_eq!(stale(&body), Some(0.0), "{body}");
    // Older than 2 s (3 x 200 ms, at least 2 s): left out and counted, the rest still served.
    let (body, _) = wait_until(d.port, Duration::from_secs(8), |b| stale(b) == Some(1.0));
    assert_eq!(stale(&body), Some(1.0), "{body}");
    assert_eq!(sm(&body), None, "a stale sample is not served as current");
    assert!(value(&body, "dgx_pixels_gpu_sm_occupancy_ratio", &[("gpu", "0")]).is_some());
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "dcgm")]),
        Some(1.0)
    );
    // After 3 stale polls the source re-creates its groups and watches: sampled again.
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
        sm(b).is_some() && stale(b) == Some(0.0)
    });
    assert!(sm(&body).is_some(), "{body}");
    let logs = stop_and_logs(d);
    assert!(
        logs.contains("DCGM stopped updating these fields") && logs.contains("fields=1002"),
        "{logs}"
    );
    assert_eq!(logs.matches("DCGM connected").count(), 2, "{logs}");
}
