//! The exporter's own `process_*` families (client_golang's process collector on Linux) and
//! scrape counters, through the real daemon on a simulated node in the default profile: each
//! family served once without labels, of client_golang's type, with values that agree with
//! what /proc says of the daemon's pid.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use dgx_pixels_metrics::catalog::STANDARD_PROCESS_NAMES;

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The one unlabelled series of `name`.
fn single(body: &str, name: &str) -> f64 {
    let lines = series(body, name);
    assert_eq!(lines.len(), 1, "{name}: {lines:?}");
    let (head, v) = lines[0].rsplit_once(' ').unwrap();
    assert_eq!(
        head, name,
        "no labels on a simulated node without a node name"
    );
    v.parse().unwrap()
}

/// A line of /proc/PID/FILE of the daemon starting with `prefix`, the rest split on spaces.
fn proc_line(pid: u32, file: &str, prefix: &str) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap();
    let line = text.lines().find(|l| l.starts_with(prefix)).unwrap();
    line[prefix.len()..]
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn the_daemon_serves_its_own_process_families_in_the_default_profile() {
    let before = now();
    // A simulated node without its probes, profiling and traces: they cost the other tests
    // CPU and say nothing here.
    let d = start(&[
        "--simulate",
        "dgx-h100",
        "--no-collector.probes",
        "--no-collector.dcgm",
        "--no-collector.trace",
    ]);
    let pid = d.child.id();
    // The exporter source polls each second: the families come with its first poll.
    let all = |b: &str| {
        STANDARD_PROCESS_NAMES
            .iter()
            .all(|n| !series(b, n).is_empty())
    };
    let (first, _) = wait_until(d.port, Duration::from_secs(10), all);
    let first_at = now();
    let vm_rss_kib: f64 = proc_line(pid, "status", "VmRSS:")[0].parse().unwrap();
    for name in STANDARD_PROCESS_NAMES {
        let kind = if *name == "process_cpu_seconds_total" {
            "counter"
        } else {
            "gauge"
        };
        assert!(
            first.contains(&format!("\n# TYPE {name} {kind}\n")),
            "{name} {kind}\n{first}"
        );
        assert!(first.contains(&format!("\n# HELP {name} ")), "{name}");
    }

    let rss = single(&first, "process_resident_memory_bytes");
    let vm_rss = vm_rss_kib * 1024.0;
    assert!(rss > 1e6 && rss < 512e6, "resident memory {rss}");
    // Read up to a second apart (the source's poll, then /proc now).
    assert!(
        (rss - vm_rss).abs() <= (vm_rss * 0.25).max(8e6),
        "process_resident_memory_bytes {rss}, VmRSS {vm_rss}"
    );
    assert!(single(&first, "process_virtual_memory_bytes") >= rss);

    let soft = |limit: &str| -> f64 {
        match proc_line(pid, "limits", limit)[0].as_str() {
            "unlimited" => u64::MAX as f64,
            v => v.parse().unwrap(),
        }
    };
    let (open, max) = (
        single(&first, "process_open_fds"),
        single(&first, "process_max_fds"),
    );
    assert_eq!(max, soft("Max open files"));
    assert!(open > 0.0 && open <= max, "{open} of {max}");
    assert_eq!(
        single(&first, "process_virtual_memory_max_bytes"),
        soft("Max address space")
    );

    // /proc/stat's btime is whole seconds: the start time can be up to one early.
    let start = single(&first, "process_start_time_seconds");
    assert!(
        start >= before - 1.5 && start <= first_at,
        "start {start}, test from {before} to {first_at}"
    );

    // A counter across the source's next poll, and the scrapes it counted meanwhile.
    let cpu = single(&first, "process_cpu_seconds_total");
    assert!(cpu >= 0.0);
    std::thread::sleep(Duration::from_millis(1200));
    let second = text(d.port);
    assert!(single(&second, "process_cpu_seconds_total") >= cpu);
    assert_eq!(single(&second, "process_start_time_seconds"), start);
    let scrapes = |format, result| {
        value(
            &second,
            "dgx_pixels_exporter_scrapes_total",
            &[("format", format), ("result", result)],
        )
        .unwrap()
    };
    assert!(scrapes("text", "success") >= 1.0, "{second}");
    assert_eq!(scrapes("text", "error"), 0.0);
    assert_eq!(scrapes("openmetrics", "success"), 0.0);

    // OpenMetrics: the counter's family is process_cpu_seconds, the sample keeps _total.
    let (status, _, body) = get(
        d.port,
        "/metrics",
        &[("Accept", "application/openmetrics-text; version=1.0.0")],
    );
    assert_eq!(status, 200);
    let om = String::from_utf8(body).unwrap();
    assert!(
        om.contains("\n# TYPE process_cpu_seconds counter\n# UNIT process_cpu_seconds seconds\n")
    );
    assert!(om.contains("\nprocess_cpu_seconds_total "), "{om}");
    assert!(om.contains("\n# TYPE process_open_fds gauge\n"));
}
