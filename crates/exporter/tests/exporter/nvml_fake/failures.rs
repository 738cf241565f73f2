//! A GPU lost, hung, or hung from the start is served down; every XID occurrence counts.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

use super::start_fake;

/// Polls /metrics until `check` holds or `timeout` passes; returns the last body.
fn wait_for(port: u16, timeout: Duration, check: impl Fn(&str) -> bool) -> (String, Duration) {
    let start = Instant::now();
    loop {
        let body = text(port);
        if check(&body) || start.elapsed() > timeout {
            return (body, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// fault-gpu-lost: GPU 3 falls off the bus with XID 79 at 30 s. Starting at 27 s, it must go to
/// `gpu_up 0` about 3 s later, not before, with its XID counted and the other GPUs untouched;
/// its readings are dropped, never frozen.
#[test]
fn the_lost_gpu_goes_down_at_its_scheduled_time_and_the_others_carry_on() {
    let started = Instant::now();
    let d = start_fake(
        "fault-gpu-lost",
        &[("FAKE_NVML_START", "27")],
        &["--collector.nvml.interval", "200ms"],
    );
    let gpu3 = [("gpu", "3")];
    let body = text(d.port);
    assert_eq!(value(&body, "dgx_pixels_gpu_up", &gpu3), Some(1.0));
    assert!(value(&body, "dgx_pixels_gpu_power_watts", &gpu3).is_some());
    let (body, _) = wait_for(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_up", &gpu3) == Some(0.0)
            && value(
                b,
                "dgx_pixels_gpu_xid_errors_total",
                &[("gpu", "3"), ("xid", "79")],
            )
            .is_some()
    });
    let elapsed = started.elapsed();
    assert_eq!(
        value(&body, "dgx_pixels_gpu_up", &gpu3),
        Some(0.0),
        "GPU 3 never went down"
    );
    assert!(
        elapsed >= Duration::from_millis(2_500),
        "down after {elapsed:?}: before its time"
    );
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_xid_errors_total",
            &[("gpu", "3"), ("xid", "79")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&body, "dgx_pixels_gpu_power_watts", &gpu3),
        None,
        "no frozen readings"
    );
    assert!(series(&body, "dgx_pixels_gpu_info")
        .iter()
        .any(|s| s.contains("gpu=\"3\",")));
    for other in ["0", "1", "2", "4", "5", "6", "7"] {
        assert_eq!(
            value(&body, "dgx_pixels_gpu_up", &[("gpu", other)]),
            Some(1.0)
        );
        assert!(value(&body, "dgx_pixels_gpu_power_watts", &[("gpu", other)]).is_some());
    }
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "nvml")]),
        Some(1.0)
    );
}

/// fault-xid-storm: GPU 2 reports XID 13 every 2 s from 10 s. Every occurrence is counted
/// (repeats included) by the event thread, matching the simulator's schedule.
#[test]
fn every_xid_occurrence_is_counted() {
    // The fake's clock starts at nvmlInit, inside the daemon's startup: start counting before.
    let started = Instant::now();
    let d = start_fake(
        "fault-xid-storm",
        &[("FAKE_NVML_START", "9")],
        &["--collector.nvml.interval", "200ms"],
    );
    let labels = [("gpu", "2"), ("xid", "13")];
    let (body, _) = wait_for(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_xid_errors_total", &labels).is_some_and(|v| v >= 3.0)
    });
    let elapsed = started.elapsed().as_secs_f64();
    let served = value(&body, "dgx_pixels_gpu_xid_errors_total", &labels).unwrap();
    // Occurrences at 10, 12, 14 s scenario time = 1, 3, 5 s after start.
    let expected_max = ((9.0 + elapsed - 10.0) / 2.0).floor() + 1.0;
    assert!(
        served >= 3.0 && served <= expected_max,
        "served {served} after {elapsed:.1}s"
    );
    assert!(
        elapsed >= 4.5,
        "3 XIDs after {elapsed:.1}s: faster than scheduled"
    );
    // GPUs without faults report no XID series.
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_xid_errors_total",
            &[("gpu", "0"), ("xid", "13")]
        ),
        None
    );
}

/// A GPU whose NVML calls hang is reported down after the poll's deadline; scrapes, the other
/// GPUs and the source itself keep working.
#[test]
fn a_hung_gpu_is_reported_down_and_never_blocks_the_others() {
    let d = start_fake(
        "dgx-h100",
        &[
            ("FAKE_NVML_HANG_GPU", "5"),
            ("FAKE_NVML_HANG_AFTER", "2"),
            // The energy counter, which shows GPU 0 still read, is a slow reading.
            ("DGX_PIXELS_NVML__SLOW_INTERVAL", "200ms"),
        ],
        &[
            "--collector.nvml.interval",
            "200ms",
            "--collector.nvml.timeout",
            "500ms",
        ],
    );
    let (body, _) = wait_for(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_up", &[("gpu", "5")]) == Some(0.0)
    });
    assert_eq!(
        value(&body, "dgx_pixels_gpu_up", &[("gpu", "5")]),
        Some(0.0)
    );
    assert_eq!(
        value(&body, "dgx_pixels_gpu_power_watts", &[("gpu", "5")]),
        None
    );
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "nvml")]),
        Some(1.0)
    );
    // Polls keep completing (energy keeps rising on the others) and scrapes stay fast.
    let before = value(&body, "dgx_pixels_gpu_energy_joules_total", &[("gpu", "0")]).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let t = Instant::now();
    let later = text(d.port);
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "scrape took {:?}",
        t.elapsed()
    );
    let after = value(
        &later,
        "dgx_pixels_gpu_energy_joules_total",
        &[("gpu", "0")],
    )
    .unwrap();
    assert!(after > before, "GPU 0 still polled: {before} -> {after}");
    assert_eq!(
        value(&later, "dgx_pixels_gpu_up", &[("gpu", "5")]),
        Some(0.0)
    );
}

/// Regression (hardening round 2, item 9): a GPU whose NVML calls hang from the first poll
/// was left out entirely, though the log said "reporting gpu_up 0"; it is served as down, with
/// its index (its uuid was never read).
#[test]
fn a_gpu_hung_from_startup_is_served_as_down() {
    let d = start_fake(
        "dgx-h100",
        &[("FAKE_NVML_HANG_GPU", "5"), ("FAKE_NVML_HANG_AFTER", "0")],
        &[
            "--collector.nvml.interval",
            "200ms",
            "--collector.nvml.timeout",
            "500ms",
        ],
    );
    let (body, _) = wait_for(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_up", &[("gpu", "0")]) == Some(1.0)
    });
    assert!(
        series(&body, "dgx_pixels_gpu_up").contains(&"dgx_pixels_gpu_up{gpu=\"5\",uuid=\"\"} 0"),
        "{:?}",
        series(&body, "dgx_pixels_gpu_up")
    );
    assert!(series(&body, "dgx_pixels_gpu_info")
        .iter()
        .all(|s| !s.contains("gpu=\"5\"")));
    assert_eq!(series(&body, "dgx_pixels_gpu_up").len(), 8);
}
