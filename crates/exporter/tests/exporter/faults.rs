//! Fault injection with the real binary, the fake NVML and DCGM libraries and the simulator.
//! Each test asserts that the process survives, that the other GPUs and sources keep serving,
//! that the affected series say what happened (up 0, error counters), and that recovery needs
//! no restart. (A hung NVML call is covered in nvml_fake/failures.rs:
//! `a_hung_gpu_is_reported_down_and_never_blocks_the_others`.)
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

fn start_nvml(fake_env: &[(&str, &str)], args: &[&str]) -> Daemon {
    let mut env = vec![("FAKE_NVML_PCIE_DELAY_MS", "0")];
    env.extend_from_slice(fake_env);
    let mut all = vec!["--nvml.library", fake_nvml_library()];
    all.extend_from_slice(args);
    start_with_env(&all, &env)
}

fn alive(d: &mut Daemon) {
    assert!(d.child.try_wait().unwrap().is_none(), "the exporter exited");
}

fn gpus_up(body: &str) -> Vec<&'static str> {
    ["0", "1", "2", "3", "4", "5", "6", "7"]
        .into_iter()
        .filter(|g| value(body, "dgx_pixels_gpu_up", &[("gpu", g)]) == Some(1.0))
        .collect()
}

/// GPU 3 falls off the bus (XID 79) at 30 s and comes back at 33 s (a scenario file with
/// `recover_at_s`): down with its XID counted and its readings dropped while lost, the other
/// seven untouched, then read again by the same process.
#[test]
fn a_gpu_lost_mid_run_goes_down_alone_and_comes_back() {
    let builtin = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sim/scenarios/fault-gpu-lost.toml"
    ))
    .unwrap();
    let mut scenario = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    writeln!(scenario, "{builtin}recover_at_s = 33").unwrap();
    let path = scenario.path().to_str().unwrap().to_string();
    let mut d = start_nvml(
        &[("FAKE_NVML_SCENARIO", &path), ("FAKE_NVML_START", "28")],
        &["--collector.nvml.interval", "200ms"],
    );
    let gpu3 = [("gpu", "3")];
    // The XID comes from the event thread, a moment after the poll that finds the GPU lost.
    let (body, _) = wait_until(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_up", &gpu3) == Some(0.0)
            && value(
                b,
                "dgx_pixels_gpu_xid_errors_total",
                &[("gpu", "3"), ("xid", "79")],
            )
            .is_some()
    });
    assert_eq!(value(&body, "dgx_pixels_gpu_up", &gpu3), Some(0.0));
    assert_eq!(value(&body, "dgx_pixels_gpu_power_watts", &gpu3), None);
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_xid_errors_total",
            &[("gpu", "3"), ("xid", "79")]
        ),
        Some(1.0)
    );
    assert_eq!(gpus_up(&body), ["0", "1", "2", "4", "5", "6", "7"]);
    assert_eq!(
        value(&body, "dgx_pixels_source_up", &[("source", "nvml")]),
        Some(1.0)
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(10), |b| {
        value(b, "dgx_pixels_gpu_up", &gpu3) == Some(1.0)
    });
    assert_eq!(gpus_up(&body).len(), 8, "GPU 3 back without a restart");
    assert!(value(&body, "dgx_pixels_gpu_power_watts", &gpu3).is_some());
    // The XID stays counted: counters never go back.
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_xid_errors_total",
            &[("gpu", "3"), ("xid", "79")]
        ),
        Some(1.0)
    );
    alive(&mut d);
    let logs = stop_and_logs(d);
    assert!(logs.contains("gpu=3"), "{logs}");
}

/// A driver reset: from 2 s to 4 s every NVML call, init included, answers UNINITIALIZED, and
/// the session opened before stays invalid. The source goes down with its errors counted and
/// its series dropped, initialises the library again, and serves all eight GPUs.
#[test]
fn nvml_uninitialized_mid_run_is_reinitialised() {
    let mut d = start_nvml(
        &[("FAKE_NVML_UNINITIALIZED", "2:4")],
        &["--collector.nvml.interval", "200ms"],
    );
    let up = |b: &str| value(b, "dgx_pixels_source_up", &[("source", "nvml")]);
    let errors = |b: &str| {
        value(
            b,
            "dgx_pixels_source_poll_errors_total",
            &[("source", "nvml")],
        )
        .unwrap_or(0.0)
    };
    let body = text(d.port);
    assert_eq!(up(&body), Some(1.0));
    let errors_before = errors(&body);
    let (body, _) = wait_until(d.port, Duration::from_secs(8), |b| up(b) == Some(0.0));
    assert_eq!(up(&body), Some(0.0), "down while NVML is uninitialized");
    assert!(errors(&body) > errors_before);
    assert!(
        series(&body, "dgx_pixels_gpu_power_watts").is_empty(),
        "no stale readings"
    );
    let (body, _) = wait_until(d.port, Duration::from_secs(10), |b| up(b) == Some(1.0));
    assert_eq!(up(&body), Some(1.0), "back without a restart");
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| gpus_up(b).len() == 8);
    assert_eq!(series(&body, "dgx_pixels_gpu_power_watts").len(), 8);
    // Recovered, not flapping: the reset window (2 s long, at 2 s) does not come back after the
    // re-init (before the fix the fake's clock restarted on dlclose and replayed it every 3 s).
    for _ in 0..16 {
        std::thread::sleep(Duration::from_millis(500));
        let body = text(d.port);
        assert_eq!(up(&body), Some(1.0), "flapped after recovering");
        assert_eq!(gpus_up(&body).len(), 8);
    }
    alive(&mut d);
    let logs = stop_and_logs(d);
    assert!(logs.contains("initialising the library again"), "{logs}");
    assert_eq!(
        logs.matches("UNINITIALIZED").count(),
        2,
        "said once, not per retry: {logs}"
    );
}

/// The remote DCGM host engine goes away from 1.5 s to 3 s while NVML keeps reading: DCGM
/// goes down (profiling series dropped, errors counted), NVML serves all eight GPUs throughout,
/// and DCGM reconnects by itself.
#[test]
fn dcgm_host_engine_loss_leaves_nvml_serving_and_dcgm_reconnects() {
    let mut d = start_with_env(
        &[
            "--collector.dcgm",
            "--dcgm.library",
            fake_dcgm_library(),
            "--dcgm.hostengine",
            "127.0.0.1:5555",
            "--nvml.library",
            fake_nvml_library(),
            "--collector.nvml.interval",
            "200ms",
        ],
        &[
            ("FAKE_DCGM_TIME", "60"),
            ("FAKE_DCGM_HOSTENGINE", "127.0.0.1:5555"),
            ("FAKE_DCGM_CONNECTION_LOSS", "1.5:3"),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    );
    let up = |b: &str, s: &str| value(b, "dgx_pixels_source_up", &[("source", s)]);
    let (body, _) = wait_until(d.port, Duration::from_secs(5), |b| {
        up(b, "dcgm") == Some(0.0)
    });
    assert_eq!(
        up(&body, "dcgm"),
        Some(0.0),
        "down while the host engine is gone"
    );
    assert!(series(&body, "dgx_pixels_gpu_sm_active_ratio").is_empty());
    assert!(
        value(
            &body,
            "dgx_pixels_source_poll_errors_total",
            &[("source", "dcgm")]
        )
        .unwrap()
            >= 1.0
    );
    assert_eq!(up(&body, "nvml"), Some(1.0));
    assert_eq!(gpus_up(&body).len(), 8);
    assert_eq!(series(&body, "dgx_pixels_gpu_power_watts").len(), 8);
    let (body, _) = wait_until(d.port, Duration::from_secs(12), |b| {
        up(b, "dcgm") == Some(1.0) && b.contains("dgx_pixels_gpu_sm_active_ratio{")
    });
    assert_eq!(
        up(&body, "dcgm"),
        Some(1.0),
        "reconnected without a restart"
    );
    assert_eq!(series(&body, "dgx_pixels_gpu_sm_active_ratio").len(), 8);
    assert_eq!(up(&body, "nvml"), Some(1.0));
    alive(&mut d);
}

/// A workload file rewritten hundreds of times while being scraped every few ms. Renamed into
/// place (the documented way): every scrape serves one whole version, never an error. Written
/// in place (truncate, then two writes split mid-line): a half-written version is never served,
/// it is reported by `dgx_pixels_textfile_scrape_error 1` instead; the other file carries on.
#[test]
fn textfiles_rewritten_during_reads_are_never_served_torn() {
    const LINES: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let content = |family: &str, generation: u64| {
        let mut s = format!("# TYPE {family} gauge\n");
        for i in 0..LINES {
            s.push_str(&format!("{family}{{shard=\"{i}\"}} {generation}\n"));
        }
        s
    };
    let renamed = "dgx_pixels_workload_fault_renamed";
    let in_place = "dgx_pixels_workload_fault_in_place";
    std::fs::write(dir.path().join("renamed.prom"), content(renamed, 0)).unwrap();
    std::fs::write(dir.path().join("inplace.prom"), content(in_place, 0)).unwrap();
    let mut d = start(&[
        "--simulate",
        "dgx-h100",
        "--textfile.directory",
        dir.path().to_str().unwrap(),
        "--collector.textfile.interval",
        // The shortest interval accepted: as many reads as possible during the rewrites.
        "50ms",
    ]);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, dir) = (Arc::clone(&stop), dir.path().to_path_buf());
        std::thread::spawn(move || {
            let mut generation = 1u64;
            while !stop.load(Ordering::Relaxed) {
                let tmp = dir.join(".renamed.prom.tmp");
                std::fs::write(&tmp, content(renamed, generation)).unwrap();
                std::fs::rename(&tmp, dir.join("renamed.prom")).unwrap();
                let text = content(in_place, generation);
                let half = text.len() / 2 + 3; // not on a line end
                assert_ne!(text.as_bytes()[half - 1], b'\n');
                let mut f = std::fs::File::create(dir.join("inplace.prom")).unwrap();
                f.write_all(&text.as_bytes()[..half]).unwrap();
                std::thread::sleep(Duration::from_millis(3));
                f.write_all(&text.as_bytes()[half..]).unwrap();
                drop(f);
                generation += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            generation
        })
    };
    let started = Instant::now();
    let (mut scrapes, mut in_place_errors, mut in_place_served) = (0, 0, 0);
    while started.elapsed() < Duration::from_secs(3) {
        let body = text(d.port);
        scrapes += 1;
        // Whole versions only: all lines, one generation.
        let versions = |family: &str| {
            let lines = series(&body, family);
            let mut values: Vec<&str> = lines.iter().filter_map(|l| l.rsplit(' ').next()).collect();
            values.dedup();
            (lines.len(), values.len())
        };
        assert_eq!(
            versions(renamed),
            (LINES, 1),
            "renamed file served torn:\n{body}"
        );
        assert_eq!(
            value(
                &body,
                "dgx_pixels_textfile_scrape_error",
                &[("file", "renamed.prom")]
            ),
            Some(0.0)
        );
        match value(
            &body,
            "dgx_pixels_textfile_scrape_error",
            &[("file", "inplace.prom")],
        ) {
            Some(0.0) => {
                in_place_served += 1;
                assert_eq!(
                    versions(in_place),
                    (LINES, 1),
                    "in-place file served torn:\n{body}"
                );
            }
            Some(1.0) => {
                in_place_errors += 1;
                assert!(series(&body, in_place).is_empty());
            }
            other => panic!("inplace.prom scrape_error {other:?}"),
        }
        assert_eq!(series(&body, "dgx_pixels_gpu_power_watts").len(), 8);
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::Relaxed);
    let generations = writer.join().unwrap();
    assert!(generations > 100, "only {generations} rewrites");
    assert!(scrapes > 100, "only {scrapes} scrapes");
    assert!(
        in_place_errors > 0,
        "no half-written read was seen: the test proves nothing"
    );
    // Once the writer stops, the in-place file is whole again and served.
    let (body, _) = wait_until(d.port, Duration::from_secs(3), |b| {
        value(
            b,
            "dgx_pixels_textfile_scrape_error",
            &[("file", "inplace.prom")],
        ) == Some(0.0)
    });
    assert_eq!(series(&body, in_place).len(), LINES);
    alive(&mut d);
    eprintln!("{scrapes} scrapes, {generations} rewrites, in-place file: {in_place_served} served whole, {in_place_errors} skipped as being written");
}

/// SIGTERM while scrapes are in flight: every scrape either completes (a whole body, as long
/// as its Content-Length says) or finds the connection closed; never a cut body. The process
/// exits 0 within a second.
#[test]
fn sigterm_during_scrapes_completes_or_closes_cleanly() {
    let d = start(&["--simulate", "dgx-h100"]);
    let port = d.port;
    let stop = Arc::new(AtomicBool::new(false));
    let scrapers: Vec<_> = (0..8)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let (mut whole, mut refused) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    let (status, headers, body) = get(port, "/metrics", &[]);
                    if status == 0 {
                        refused += 1;
                        continue;
                    }
                    assert_eq!(status, 200);
                    let len: usize = header(&headers, "content-length").unwrap().parse().unwrap();
                    assert_eq!(body.len(), len, "a cut body");
                    whole += 1;
                }
                (whole, refused)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut d = d;
    let t = Instant::now();
    Command::new("kill")
        .args(["-TERM", &d.child.id().to_string()])
        .status()
        .unwrap();
    let status = loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "still running");
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = t.elapsed();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let mut whole = 0;
    for s in scrapers {
        whole += s.join().unwrap().0;
    }
    assert!(took < Duration::from_secs(1), "exit took {took:?}");
    assert!(status.success(), "{status:?}");
    assert!(
        whole > 20,
        "only {whole} scrapes completed before the signal"
    );
}
