//! Fast power samples (issue 20, part 2; docs/power.md), through the real binary: on the fake
//! libnvidia-ml, which answers `NVML_FI_DEV_POWER_INSTANT` with the simulator's instantaneous
//! power and `nvmlDeviceGetPowerUsage` with its 1 s average, and on the simulated node. The
//! scenario's training step swings between 697 W of compute and ~270 W of communication every
//! 0.5 s: the swing must show in the peak, the minimum and the histogram, and not in the 1 s
//! average.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::time::Duration;

use common::*;
use dgx_pixels_sim::{Node, Scenario};

const SWING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/scenarios/training-swing.toml"
);
const HIST: &str = "dgx_pixels_gpu_power_sample_watts";

/// Every series (`--metrics.detail full`): the default profile leaves out
/// `dgx_pixels_gpu_power_sample_info{reading="instant"}`, which these tests read.
fn start_fake(fake_env: &[(&str, &str)], args: &[&str]) -> Daemon {
    let mut env = vec![
        ("FAKE_NVML_SCENARIO", SWING),
        ("FAKE_NVML_PCIE_DELAY_MS", "0"),
    ];
    env.extend_from_slice(fake_env);
    let mut all = vec![
        "--nvml.library",
        fake_nvml_library(),
        "--metrics.detail",
        "full",
    ];
    all.extend_from_slice(args);
    start_with_env(&all, &env)
}

fn bucket(body: &str, gpu: &str, le: &str) -> f64 {
    let name = format!("{HIST}_bucket");
    value(body, &name, &[("gpu", gpu), ("le", le)]).unwrap()
}

fn count(body: &str, gpu: &str) -> f64 {
    value(body, &format!("{HIST}_count"), &[("gpu", gpu)]).unwrap_or(0.0)
}

fn peak_min(body: &str, gpu: &str) -> (Option<f64>, Option<f64>) {
    (
        value(
            body,
            "dgx_pixels_gpu_power_sample_peak_watts",
            &[("gpu", gpu)],
        ),
        value(
            body,
            "dgx_pixels_gpu_power_sample_min_watts",
            &[("gpu", gpu)],
        ),
    )
}

/// The swing seen through a running daemon: per GPU, the peak is the compute phase, the
/// minimum the communication phase, the histogram puts 60% of the samples in (550, 700] and
/// 40% in (250, 400], and the 1 s average sits steadily in between, in a bucket that holds
/// no sample at all.
fn assert_swing_shows_but_not_in_the_average(port: u16) {
    let (_, _) = wait_until(port, Duration::from_secs(20), |b| count(b, "7") >= 40.0);
    let mut averages = Vec::new();
    let mut body = String::new();
    for _ in 0..6 {
        body = text(port);
        averages.push(value(&body, "dgx_pixels_gpu_power_watts", &[("gpu", "0")]).unwrap());
        std::thread::sleep(Duration::from_millis(350));
    }
    let (lo, hi) = averages
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(*v), h.max(*v)));
    assert!(
        hi - lo < 20.0 && lo > 500.0 && hi < 550.0,
        "1 s average steady near 525 W: {averages:?}"
    );
    for gpu in ["0", "3", "7"] {
        let (peak, min) = peak_min(&body, gpu);
        let (peak, min) = (peak.unwrap(), min.unwrap());
        assert!(peak > 690.0 && peak <= 700.0, "GPU {gpu} peak {peak}");
        assert!(min > 240.0 && min < 300.0, "GPU {gpu} min {min}");
        let n = count(&body, gpu);
        let low = bucket(&body, gpu, "400") - bucket(&body, gpu, "250");
        let high = bucket(&body, gpu, "700") - bucket(&body, gpu, "550");
        assert_eq!(bucket(&body, gpu, "250"), 0.0, "GPU {gpu}");
        assert_eq!(
            bucket(&body, gpu, "550"),
            bucket(&body, gpu, "400"),
            "GPU {gpu}: no sample near the 525 W average"
        );
        assert_eq!(low + high, n, "GPU {gpu}");
        assert!((low / n - 0.4).abs() < 0.12, "GPU {gpu}: {low} of {n} low");
        assert_eq!(
            value(&body, "dgx_pixels_gpu_power_sample_info", &[("gpu", gpu)]),
            Some(1.0)
        );
        assert!(body.contains(&format!("gpu=\"{gpu}\",")));
    }
    assert_eq!(
        series(&body, "dgx_pixels_gpu_power_sample_info")
            .iter()
            .filter(|s| s.contains("reading=\"instant\""))
            .count(),
        8
    );
}

#[test]
fn the_swing_shows_in_peak_and_histogram_not_in_the_1s_average_through_nvml() {
    let d = start_fake(&[("FAKE_NVML_START", "30")], &[]);
    assert_swing_shows_but_not_in_the_average(d.port);
}

#[test]
fn the_swing_shows_in_peak_and_histogram_not_in_the_1s_average_on_the_simulated_node() {
    let d = start(&[
        "--simulate",
        SWING,
        "--no-collector.probes",
        "--metrics.detail",
        "full",
    ]);
    assert_swing_shows_but_not_in_the_average(d.port);
}

/// Frozen at 60.0 s (a compute step): every sample is the model's instantaneous power there,
/// to the milliwatt, while the driver's reading is its 1 s average.
#[test]
fn samples_are_the_instantaneous_field_not_the_averaged_reading() {
    let d = start_fake(&[("FAKE_NVML_TIME", "60")], &[]);
    let (body, _) = wait_until(d.port, Duration::from_secs(20), |b| count(b, "1") >= 20.0);
    let mut node = Node::new(Scenario::load(SWING).unwrap());
    let instant = node.power_instant(1, Duration::from_secs(60)).unwrap();
    let (peak, min) = peak_min(&body, "1");
    assert!(
        (peak.unwrap() - instant).abs() < 1e-3,
        "{peak:?} vs {instant}"
    );
    assert!(
        (min.unwrap() - instant).abs() < 1e-3,
        "{min:?} vs {instant}"
    );
    let sum = value(&body, &format!("{HIST}_sum"), &[("gpu", "1")]).unwrap();
    assert!((sum / count(&body, "1") - instant).abs() < 1e-3);
    let average = value(&body, "dgx_pixels_gpu_power_watts", &[("gpu", "1")]).unwrap();
    assert!(instant - average > 100.0, "{instant} vs {average}");
    assert!(body.contains("reading=\"instant\""));
}

/// A GPU without the instantaneous field: the averaged reading is sampled, and says so.
#[test]
fn without_the_instant_field_the_averaged_reading_is_sampled_and_named() {
    let d = start_fake(
        &[("FAKE_NVML_TIME", "60"), ("FAKE_NVML_POWER_INSTANT", "0")],
        &[],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(20), |b| count(b, "2") >= 5.0);
    let average = value(&body, "dgx_pixels_gpu_power_watts", &[("gpu", "2")]).unwrap();
    let (peak, min) = peak_min(&body, "2");
    assert_eq!((peak, min), (Some(average), Some(average)));
    let info = series(&body, "dgx_pixels_gpu_power_sample_info");
    assert_eq!(info.len(), 8);
    assert!(
        info.iter().all(|s| s.contains("reading=\"average\"")),
        "{info:?}"
    );
}

/// A GPU whose calls hang loses its samples (never a stale peak); the others keep sampling.
#[test]
fn a_hung_gpu_serves_no_samples_and_the_others_keep_sampling() {
    let d = start_fake(
        &[
            ("FAKE_NVML_START", "30"),
            ("FAKE_NVML_HANG_GPU", "4"),
            ("FAKE_NVML_HANG_AFTER", "33"),
        ],
        &["--collector.nvml.timeout", "500ms"],
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(20), |b| {
        value(b, "dgx_pixels_gpu_up", &[("gpu", "4")]) == Some(0.0)
    });
    assert_eq!(
        value(&body, "dgx_pixels_gpu_up", &[("gpu", "4")]),
        Some(0.0)
    );
    assert_eq!(peak_min(&body, "4"), (None, None));
    assert!(series(&body, HIST).iter().all(|s| !s.contains("gpu=\"4\"")));
    let before = count(&body, "0");
    let (later, took) = wait_until(d.port, Duration::from_secs(10), |b| {
        count(b, "0") >= before + 10.0
    });
    assert!(
        count(&later, "0") >= before + 10.0,
        "GPU 0 stopped sampling ({took:?})"
    );
    assert!(peak_min(&later, "0").0.is_some());
}

#[test]
fn sampling_can_be_turned_off() {
    let d = start_fake(
        &[("FAKE_NVML_TIME", "60")],
        &["--nvml.power-sample-interval", "0s"],
    );
    wait_until(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_up", &[("gpu", "0")]) == Some(1.0)
    });
    std::thread::sleep(Duration::from_millis(300));
    let body = text(d.port);
    assert!(value(&body, "dgx_pixels_gpu_power_watts", &[("gpu", "0")]).is_some());
    assert!(
        !body.contains("dgx_pixels_gpu_power_sample"),
        "sampling is off"
    );
}

#[test]
fn sampling_settings_out_of_range_are_refused_in_one_line() {
    for (flag, value, why) in [
        (
            "--nvml.power-sample-interval",
            "5ms",
            "nvml.power_sample_interval: 5ms is outside 10ms to 1s",
        ),
        ("--nvml.power-sample-interval", "2s", "outside 10ms to 1s"),
        (
            "--nvml.power-window",
            "500ms",
            "nvml.power_window: 500ms is outside 1s to 10m",
        ),
    ] {
        let out = std::process::Command::new(BIN)
            .args([flag, value, "--web.listen-address", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{flag} {value}: {err}");
    }
}

/// A GPU lost for a while serves no samples while lost, and afterwards the instantaneous
/// reading again, with a window that starts after the loss.
#[test]
fn a_lost_gpu_serves_no_samples_and_comes_back_with_the_instant_reading() {
    let text = std::fs::read_to_string(SWING).unwrap()
        + "\n[[faults]]\nkind = \"lost\"\ngpu = 2\nat_s = 33\nrecover_at_s = 36\n";
    let file = std::env::temp_dir().join(format!("power-lost-{}.toml", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let scenario = file.display().to_string();
    let d = start_with_env(
        &[
            "--nvml.library",
            fake_nvml_library(),
            "--metrics.detail",
            "full",
        ],
        &[
            ("FAKE_NVML_SCENARIO", scenario.as_str()),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ("FAKE_NVML_START", "31"),
        ],
    );
    let (lost, _) = wait_until(d.port, Duration::from_secs(20), |b| {
        value(b, "dgx_pixels_gpu_up", &[("gpu", "2")]) == Some(0.0)
    });
    assert_eq!(peak_min(&lost, "2"), (None, None));
    assert!(series(&lost, HIST).iter().all(|s| !s.contains("gpu=\"2\"")));
    let (back, _) = wait_until(d.port, Duration::from_secs(20), |b| {
        value(b, "dgx_pixels_gpu_up", &[("gpu", "2")]) == Some(1.0) && peak_min(b, "2").0.is_some()
    });
    assert!(
        back.contains("dgx_pixels_gpu_power_sample_info{gpu=\"2\"")
            && series(&back, "dgx_pixels_gpu_power_sample_info")
                .iter()
                .filter(|s| s.contains("gpu=\"2\""))
                .all(|s| s.contains("reading=\"instant\"")),
        "{:?}",
        series(&back, "dgx_pixels_gpu_power_sample_info")
    );
    let (_, min) = peak_min(&back, "2");
    assert!(
        min.unwrap() > 200.0,
        "no sample of the lost GPU counted: {min:?}"
    );
    let _ = std::fs::remove_file(&file);
}
