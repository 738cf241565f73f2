//! Each XID counts once: beside NVML's events, in a storm, in a flood.

use crate::common;

use std::time::Duration;

use common::*;

use super::{kernel_pci, kmsg_errors, kmsg_lines, wait, xid, KernelLog, FROZEN};

/// (c) fault-xid-storm at 39 s: the fake NVML delivers XID 48 on GPU 1 through its event set
/// 6 s after start. The driver's kernel-log line for it, written as soon as the exporter is up,
/// is the same event: it counts once. A line for a storm XID that NVML delivered first is
/// the same event too.
#[test]
fn an_xid_nvml_also_delivers_counts_once() {
    let mut k = KernelLog::new();
    let fake = [
        ("FAKE_NVML_SCENARIO", "fault-xid-storm"),
        ("FAKE_NVML_START", "39"),
    ];
    let d = k.start(&fake);
    let body = wait(&d, "gpu_info", |b| {
        !series(b, "dgx_pixels_gpu_info").is_empty()
    });
    let gpu1 = kernel_pci(&body, 1);
    k.record(3, &format!("NVRM: Xid (PCI:{gpu1}): 48, pid=42, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."));
    let body = wait(&d, "the kernel-log XID 48", |b| {
        xid(b, "1", "48") == Some(1.0)
    });
    assert_eq!(
        value(&body, "dgx_pixels_kmsg_xid_duplicates_total", &[]),
        Some(0.0)
    );
    // NVML delivers it at scenario time 45 s: matched, not counted again.
    let body = wait(&d, "NVML's XID 48, matched", |b| {
        value(b, "dgx_pixels_kmsg_xid_duplicates_total", &[]) == Some(1.0)
    });
    assert_eq!(xid(&body, "1", "48"), Some(1.0));
    // GPU 2 storms XID 13 every 2 s through NVML; a kernel-log line for one of them matches.
    let gpu2 = kernel_pci(&body, 2);
    wait(&d, "NVML's XID 13", |b| {
        xid(b, "2", "13").is_some_and(|n| n >= 1.0)
    });
    k.record(
        4,
        &format!("NVRM: Xid (PCI:{gpu2}): 13, pid=42, name=python3, Graphics Exception"),
    );
    let body = wait(&d, "the XID 13 line, matched", |b| {
        value(b, "dgx_pixels_kmsg_xid_duplicates_total", &[]) == Some(2.0)
    });
    std::thread::sleep(Duration::from_millis(1500));
    let body2 = text(d.port);
    assert_eq!(xid(&body2, "1", "48"), Some(1.0), "{}", kmsg_lines(&body));
    assert_eq!(
        value(&body2, "dgx_pixels_kmsg_xid_duplicates_total", &[]),
        Some(2.0)
    );
}

/// XID 13 occurrences on GPU 2 of fault-xid-storm by scenario time `t` seconds, per the
/// simulator.
fn storm_count(t: f64) -> f64 {
    let mut node =
        dgx_pixels_sim::Node::new(dgx_pixels_sim::Scenario::builtin("fault-xid-storm").unwrap());
    match node.reading(2, Duration::from_secs_f64(t.max(0.0))) {
        Some(dgx_pixels_sim::GpuState::Ok(r)) => {
            r.readout.xid_counts.get(&13).copied().unwrap_or(0) as f64
        }
        _ => panic!("GPU 2 is not lost in fault-xid-storm"),
    }
}

/// Issue 19, part 8, the kernel-log path: fault-xid-storm with the fake driver printing every
/// XID to a fake kernel log (`FAKE_NVML_KMSG`), as the real driver does, from scenario time 0.
/// With NVML's events on, each storm XID arrives both ways and counts once; with them off
/// (`FAKE_NVML_XID_EVENTS=0`), the kernel log alone counts every one. Either way the served
/// count is the simulator's count (history before the start included, from the log), the
/// storm is one incident, and nothing counts twice.
#[test]
fn an_xid_storm_through_the_kernel_log_counts_each_occurrence_once() {
    const START: f64 = 30.0;
    for events in ["1", "0"] {
        let k = KernelLog::new();
        let fake = [
            ("FAKE_NVML_SCENARIO", "fault-xid-storm"),
            ("FAKE_NVML_START", "30"),
            ("FAKE_NVML_KMSG", k.log.to_str().unwrap()),
            ("FAKE_NVML_XID_EVENTS", events),
        ];
        let spawned = std::time::Instant::now();
        let d = k.start(&fake);
        let at_start = storm_count(START);
        assert!(
            at_start >= 10.0,
            "the storm began before the exporter: {at_start}"
        );
        wait(&d, "the storm going on", |b| {
            xid(b, "2", "13").is_some_and(|n| n >= at_start + 3.0)
        });
        let t0 = START + spawned.elapsed().as_secs_f64();
        let body = text(d.port);
        let t1 = START + spawned.elapsed().as_secs_f64();
        let served = xid(&body, "2", "13").unwrap();
        // Served within what the scenario had by now, allowing the fake's print delay and one
        // poll each of the kmsg and NVML sources (and the exporter's start after the spawn).
        let (low, high) = (storm_count(t0 - 5.0), storm_count(t1));
        assert!(
            (low..=high).contains(&served),
            "events={events}: served {served}, the scenario had {low}..{high}\n{}",
            kmsg_lines(&body)
        );
        assert_eq!(
            value(
                &body,
                "dgx_pixels_gpu_xid_incidents_total",
                &[("gpu", "2"), ("xid", "13")]
            ),
            Some(1.0)
        );
        let duplicates = value(&body, "dgx_pixels_kmsg_xid_duplicates_total", &[]).unwrap();
        if events == "1" {
            assert!(
                duplicates >= 2.0,
                "NVML delivered storm XIDs too: {duplicates}"
            );
        } else {
            assert_eq!(duplicates, 0.0);
        }
        assert_eq!(kmsg_errors(&body, "unknown_gpu"), Some(0.0));
        assert_eq!(kmsg_errors(&body, "malformed"), Some(0.0));
    }
}

/// Issue 28, item 11: no cap per poll. XIDs sent faster than any per-poll cap (50,000 a second
/// for 10 s; 3,000 a second for 5 s over two GPUs and codes) are all counted, with nothing
/// dropped, once the exporter has caught up.
#[test]
fn an_xid_flood_is_counted_completely() {
    for (per_second, seconds, gpus) in [(50_000u64, 10u64, 1usize), (3_000, 5, 2)] {
        let mut k = KernelLog::new();
        let d = k.start(&FROZEN);
        let body = wait(&d, "gpu_info", |b| {
            !series(b, "dgx_pixels_gpu_info").is_empty()
        });
        let pci: Vec<String> = (0..gpus as u32).map(|g| kernel_pci(&body, g)).collect();
        let codes = ["13", "31"];
        let started = std::time::Instant::now();
        for tick in 0..seconds * 10 {
            let mut text = String::with_capacity(per_second as usize * 8);
            for i in 0..per_second / 10 {
                k.seq += 1;
                let g = (i as usize) % gpus;
                text.push_str(&format!(
                    "3,{},{},-;NVRM: Xid (PCI:{}): {}, pid=9, name=train\n",
                    k.seq, k.seq, pci[g], codes[g]
                ));
            }
            k.raw(text.as_bytes());
            let next = started + Duration::from_millis(100 * (tick + 1));
            std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
        }
        let total = per_second * seconds;
        let want = (total / gpus as u64) as f64;
        let done = |b: &str| (0..gpus).all(|g| xid(b, &g.to_string(), codes[g]) == Some(want));
        let (body, _) = wait_until(d.port, Duration::from_secs(90), done);
        assert!(done(&body), "{per_second}/s: {}", kmsg_lines(&body));
        assert_eq!(kmsg_errors(&body, "dropped"), Some(0.0));
        assert_eq!(
            value(&body, "dgx_pixels_kmsg_records_read_total", &[]),
            Some(total as f64)
        );
    }
}
