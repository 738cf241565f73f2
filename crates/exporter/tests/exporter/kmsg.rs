//! Issue 19, part 2: the real binary reading XIDs from a fake kernel log (a regular file in
//! `/dev/kmsg`'s format) beside the fake NVML. XIDs are served per GPU and code; a restart over
//! the same log changes no counter; an XID that NVML also delivers counts once; bad lines,
//! unknown codes and addresses, and an unopenable log are counted or reported while every
//! source stays up.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use crate::common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

/// A fake kernel log with its boot id and state directory.
struct KernelLog {
    _dir: tempfile::TempDir,
    log: PathBuf,
    boot_id: PathBuf,
    state: PathBuf,
    seq: u64,
}

impl KernelLog {
    fn new() -> KernelLog {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kmsg");
        let boot_id = dir.path().join("boot_id");
        std::fs::write(&log, "").unwrap();
        std::fs::write(&boot_id, "6a0e7c1a-6c3e-4bb5-9d55-0c8a1d3b7f10\n").unwrap();
        let state = dir.path().join("state");
        KernelLog {
            _dir: dir,
            log,
            boot_id,
            state,
            seq: 0,
        }
    }

    /// Appends raw bytes.
    fn raw(&self, bytes: &[u8]) {
        let mut f = OpenOptions::new().append(true).open(&self.log).unwrap();
        f.write_all(bytes).unwrap();
    }

    /// Appends one record with the next sequence number.
    fn record(&mut self, priority: u8, message: &str) {
        self.seq += 1;
        let line = format!("{priority},{},{},-;{message}\n", self.seq, self.seq * 1000);
        self.raw(line.as_bytes());
    }

    fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut a = vec![
            "--nvml.library",
            fake_nvml_library(),
            "--collector.kmsg",
            "--kmsg.path",
            self.log.to_str().unwrap(),
            "--kmsg.state-directory",
            self.state.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        a
    }

    fn start(&self, fake_env: &[(&str, &str)]) -> Daemon {
        let mut env = vec![
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            (
                "DGX_PIXELS_KMSG__BOOT_ID_PATH",
                self.boot_id.to_str().unwrap(),
            ),
        ];
        env.extend_from_slice(fake_env);
        start_with_env(&self.args(&[]), &env)
    }
}

/// dgx-h100 frozen at 60 s: NVML reports no XID, so every XID served came from the log.
const FROZEN: [(&str, &str); 2] = [("FAKE_NVML_SCENARIO", "dgx-h100"), ("FAKE_NVML_TIME", "60")];

/// GPU `gpu`'s address as the kernel log writes it, from its `dgx_pixels_gpu_info`
/// (`00000000:2A:00.0` there, `0000:2a:00` in the log).
fn kernel_pci(body: &str, gpu: u32) -> String {
    let line = series(body, "dgx_pixels_gpu_info")
        .into_iter()
        .find(|l| l.contains(&format!("gpu=\"{gpu}\"")))
        .unwrap();
    let at = line.find("pci_bus_id=\"").unwrap() + 12;
    let nvml = &line[at..at + 16];
    nvml[4..14].to_ascii_lowercase()
}

fn xid(body: &str, gpu: &str, code: &str) -> Option<f64> {
    value(
        body,
        "dgx_pixels_gpu_xid_errors_total",
        &[("gpu", gpu), ("xid", code)],
    )
}

fn kmsg_errors(body: &str, reason: &str) -> Option<f64> {
    value(body, "dgx_pixels_kmsg_errors_total", &[("reason", reason)])
}

/// Every kernel-log-derived counter of an exposition, for comparing two of them.
fn kmsg_counters(body: &str) -> Vec<String> {
    body.lines()
        .filter(|l| {
            l.starts_with("dgx_pixels_gpu_xid_errors_total")
                || l.starts_with("dgx_pixels_gpu_xid_incidents_total")
                || l.starts_with("dgx_pixels_nvswitch_sxid_errors_total")
                || l.starts_with("dgx_pixels_gpu_fallen_off_bus_total")
        })
        .map(str::to_string)
        .collect()
}

fn wait(d: &Daemon, what: &str, check: impl Fn(&str) -> bool) -> String {
    let (body, _) = wait_until(d.port, Duration::from_secs(15), &check);
    assert!(check(&body), "{what}; served:\n{}", kmsg_lines(&body));
    body
}

fn kmsg_lines(body: &str) -> String {
    body.lines()
        .filter(|l| l.contains("xid") || l.contains("kmsg") || l.contains("source_up"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// (a) XIDs in the log are served per GPU and code, with their incidents and catalog info,
/// beside SXids and fallen-off-the-bus messages; and (d) bad lines are counted by reason while
/// the source and every other stay up. Then (b) a restart over the same log changes nothing,
/// and what is appended after it counts.
#[test]
fn kernel_log_xids_are_served_once_and_survive_a_restart() {
    let mut k = KernelLog::new();
    // Logged before the exporter starts (first run in this boot: counted).
    let body = {
        let d = k.start(&FROZEN);
        let body = wait(&d, "gpu_info", |b| {
            !series(b, "dgx_pixels_gpu_info").is_empty()
        });
        drop(d);
        body
    };
    let pci: Vec<String> = (0..4).map(|g| kernel_pci(&body, g)).collect();
    std::fs::remove_dir_all(&k.state).unwrap();
    k.record(
        3,
        &format!(
            "NVRM: Xid (PCI:{}): 79, pid=0, GPU has fallen off the bus.",
            pci[0]
        ),
    );
    let d = k.start(&FROZEN);
    wait(&d, "the XID logged before start", |b| {
        xid(b, "0", "79") == Some(1.0)
    });

    k.record(4, &format!("NVRM: Xid (PCI:{}): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter", pci[1]));
    k.raw(b" SUBSYSTEM=pci\n DEVICE=+pci:0000:1b:00.0\n");
    k.record(
        4,
        &format!(
            "NVRM: Xid (PCI:{}): 13, pid=17, name=python3, Graphics Exception",
            pci[1]
        ),
    );
    k.record(
        4,
        &format!(
            "NVRM: Xid (PCI:{} GPU-I:05): 43, pid=77, name=train, Ch 00000008",
            pci[2]
        ),
    );
    k.record(
        4,
        "nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 60 LTSSM Fault Up",
    );
    k.record(
        3,
        &format!("NVRM: GPU {}.0: GPU has fallen off the bus.", pci[3]),
    );
    k.record(
        6,
        "usb 1-1: new high-speed USB device number 2 using xhci_hcd",
    );
    // (d) hostile and unknown input.
    k.raw(b"garbage without a kmsg header\n");
    k.record(
        4,
        &format!("NVRM: Xid (PCI:{}): 123456, not a code", pci[1]),
    );
    k.record(4, "NVRM: Xid (PCI:0000:ff:00): 79, pid=1, no such GPU");
    k.record(
        4,
        &format!("NVRM: Xid (PCI:{}): 9999, a code the catalog lacks", pci[1]),
    );
    let mut huge = format!("6,{},1,-;", k.seq + 1).into_bytes();
    huge.extend(std::iter::repeat_n(b'x', 20_000));
    huge.push(b'\n');
    k.raw(&huge);
    k.raw(b"6,\xff\xfe,1,-;\x00\x01binary\n");
    k.record(
        4,
        &format!(
            "NVRM: Xid (PCI:{}): 31, pid=1, name=\u{1F600}\u{fffd}, utf-8 is fine",
            pci[2]
        ),
    );

    let body = wait(&d, "every line counted", |b| {
        xid(b, "2", "31") == Some(1.0) && kmsg_errors(b, "unknown_gpu") == Some(1.0)
    });
    assert_eq!(xid(&body, "1", "13"), Some(2.0));
    assert_eq!(xid(&body, "2", "43"), Some(1.0));
    assert_eq!(
        xid(&body, "1", "9999"),
        Some(1.0),
        "an unknown code counts under its number"
    );
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_xid_incidents_total",
            &[("gpu", "1"), ("xid", "13")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_xid_info",
            &[("gpu", "1"), ("xid", "13"), ("action", "restart_app")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &body,
            "dgx_pixels_nvswitch_sxid_errors_total",
            &[("pci_bus_id", "0000:c6:00.0"), ("sxid", "20034")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_fallen_off_bus_total",
            &[("gpu", "3")]
        ),
        Some(1.0)
    );
    assert_eq!(
        kmsg_errors(&body, "malformed"),
        Some(3.0),
        "no header, code 123456, binary header"
    );
    assert_eq!(kmsg_errors(&body, "too_long"), Some(1.0));
    assert_eq!(kmsg_errors(&body, "unknown_xid"), Some(1.0));
    assert_eq!(kmsg_errors(&body, "overrun"), Some(0.0));
    assert_eq!(
        series(&body, "dgx_pixels_gpu_xid_errors_total").len(),
        5,
        "no series of a bad line or an unknown GPU:\n{}",
        kmsg_lines(&body)
    );
    assert_eq!(
        value(&body, "dgx_pixels_kmsg_records_read_total", &[]),
        Some(14.0)
    );
    for source in ["kmsg", "nvml"] {
        assert_eq!(
            value(&body, "dgx_pixels_source_up", &[("source", source)]),
            Some(1.0),
            "{source}"
        );
    }

    // (b) Killed without a last word, then started over the same log: the state file holds
    // what was counted up to which record and line, so nothing counts twice.
    std::thread::sleep(Duration::from_secs(6)); // past one state write
    let before = kmsg_counters(&text(d.port));
    let logs = stop_and_logs(d);
    assert!(logs.contains("XID error in the kernel log"), "{logs}");
    let d = k.start(&FROZEN);
    let body = wait(&d, "the counts restored", |b| kmsg_counters(b) == before);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        kmsg_counters(&text(d.port)),
        before,
        "the replay counted nothing"
    );
    assert_eq!(
        value(&body, "dgx_pixels_kmsg_records_read_total", &[]),
        Some(0.0),
        "continued after the last line read (issue 42, item 12): nothing read again"
    );
    // A graceful stop writes the state at once; what comes after a restart counts.
    let logs = {
        let pid = d.child.id().to_string();
        assert!(std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let mut d = d;
        d.child.wait().unwrap();
        stop_and_logs(d)
    };
    assert!(!logs.contains("panicked"), "{logs}");
    k.record(
        4,
        &format!("NVRM: Xid (PCI:{}): 13, pid=17, name=python3", pci[1]),
    );
    let d = k.start(&FROZEN);
    wait(&d, "the record after the restart", |b| {
        xid(b, "1", "13") == Some(3.0)
    });
    std::thread::sleep(Duration::from_millis(2500));
    let body = text(d.port);
    assert_eq!(xid(&body, "1", "13"), Some(3.0));
    assert_eq!(xid(&body, "0", "79"), Some(1.0));
}

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

/// (d) A kernel log that cannot be opened: the kmsg source is down with a log line naming the
/// path and the privilege; NVML and the server carry on.
#[test]
fn an_unopenable_kernel_log_is_reported_and_the_rest_stays_up() {
    let k = KernelLog::new();
    let missing = k.log.with_file_name("no-such-kmsg");
    let mut args = k.args(&[]);
    let missing_str = missing.to_str().unwrap();
    let at = args
        .iter()
        .position(|a| *a == k.log.to_str().unwrap())
        .unwrap();
    args[at] = missing_str;
    let d = start_with_env(
        &args,
        &[
            FROZEN[0],
            FROZEN[1],
            ("DGX_PIXELS_KMSG__BOOT_ID_PATH", k.boot_id.to_str().unwrap()),
        ],
    );
    let body = wait(&d, "kmsg down, nvml up", |b| {
        value(b, "dgx_pixels_source_up", &[("source", "kmsg")]) == Some(0.0)
            && value(b, "dgx_pixels_source_up", &[("source", "nvml")]) == Some(1.0)
    });
    assert!(
        series(&body, "dgx_pixels_kmsg_records_read_total").is_empty(),
        "a down source serves nothing"
    );
    let logs = stop_and_logs(d);
    assert!(
        logs.contains(missing_str) && logs.contains("CAP_SYSLOG"),
        "{logs}"
    );
}

/// Without a writable state directory the exporter says so once and counts from start-up on:
/// what the log held before is not counted (it would be again at every restart).
#[test]
fn without_a_state_directory_only_new_records_count() {
    let mut k = KernelLog::new();
    k.state = Path::new("/proc/version/not-a-directory").to_path_buf();
    let body = {
        let d = k.start(&FROZEN);
        wait(&d, "gpu_info", |b| {
            !series(b, "dgx_pixels_gpu_info").is_empty()
        })
    };
    let gpu0 = kernel_pci(&body, 0);
    k.record(
        3,
        &format!("NVRM: Xid (PCI:{gpu0}): 79, pid=0, before start"),
    );
    let d = k.start(&FROZEN);
    wait(&d, "kmsg polled", |b| {
        value(b, "dgx_pixels_kmsg_records_read_total", &[]).is_some()
    });
    k.record(
        3,
        &format!("NVRM: Xid (PCI:{gpu0}): 74, pid=0, after start"),
    );
    let body = wait(&d, "the new record", |b| xid(b, "0", "74") == Some(1.0));
    assert_eq!(
        xid(&body, "0", "79"),
        None,
        "logged before start: not counted"
    );
    let logs = stop_and_logs(d);
    assert!(logs.contains("not replay-protected"), "{logs}");
}

/// A reload that restarts both the NVML and the kmsg source (their settings changed) keeps
/// every XID counted: the ledger and the kernel-log progress outlive the sources, so the new
/// kmsg source neither replays the log nor forgets it.
#[test]
fn a_reload_restarting_both_sources_changes_no_count() {
    let mut k = KernelLog::new();
    let config = k.log.with_file_name("exporter.toml");
    let (log, state, boot_id) = (k.log.clone(), k.state.clone(), k.boot_id.clone());
    let write_config = |quiet: &str, interval: &str| {
        std::fs::write(
            &config,
            format!(
                "[nvml]\nlibrary = {:?}\nxid_quiet_period = {quiet:?}\n[collector.kmsg]\nenabled = true\ninterval = {interval:?}\n[kmsg]\npath = {:?}\nstate_directory = {:?}\nboot_id_path = {:?}\n",
                fake_nvml_library(),
                log.to_str().unwrap(),
                state.to_str().unwrap(),
                boot_id.to_str().unwrap(),
            ),
        )
        .unwrap();
    };
    write_config("3m", "1s");
    let d = start_with_env(
        &["--config.file", config.to_str().unwrap()],
        &[FROZEN[0], FROZEN[1], ("FAKE_NVML_PCIE_DELAY_MS", "0")],
    );
    let body = wait(&d, "gpu_info", |b| {
        !series(b, "dgx_pixels_gpu_info").is_empty()
    });
    let gpu0 = kernel_pci(&body, 0);
    // Two XIDs (the state file is written when they are read), then two more less than the
    // state interval later: the state file is behind when the reload comes.
    for n in [2.0, 4.0] {
        for _ in 0..2 {
            k.record(
                4,
                &format!("NVRM: Xid (PCI:{gpu0}): 31, pid=9, name=train, MMU Fault"),
            );
        }
        wait(&d, "the XIDs", |b| xid(b, "0", "31") == Some(n));
    }
    write_config("5m", "500ms");
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &d.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    wait(&d, "the reload", |b| {
        value(
            b,
            "dgx_pixels_exporter_config_reloads_total",
            &[("result", "success")],
        ) == Some(1.0)
    });
    std::thread::sleep(Duration::from_millis(2500));
    let body = text(d.port);
    assert_eq!(xid(&body, "0", "31"), Some(4.0), "{}", kmsg_lines(&body));
    k.record(
        4,
        &format!("NVRM: Xid (PCI:{gpu0}): 31, pid=9, name=train, MMU Fault"),
    );
    wait(&d, "the XID after the reload", |b| {
        xid(b, "0", "31") == Some(5.0)
    });
    let logs = stop_and_logs(d);
    assert!(
        logs.contains("restarted_sources=") && logs.contains("kmsg") && logs.contains("nvml"),
        "{logs}"
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

/// Issue 28, item 12: a reload that switches `[kmsg] path` to another log and back, again and
/// again, counts the first log's XIDs once (it counted them again at every switch back).
#[test]
fn switching_the_kernel_log_away_and_back_counts_nothing_twice() {
    let mut k = KernelLog::new();
    let config = k.log.with_file_name("exporter.toml");
    let other = k.log.with_file_name("other-kmsg");
    std::fs::write(&other, "").unwrap();
    let (state, boot_id) = (k.state.clone(), k.boot_id.clone());
    let write_config = |log: &Path| {
        std::fs::write(
            &config,
            format!(
                "[nvml]\nlibrary = {:?}\n[collector.kmsg]\nenabled = true\ninterval = \"200ms\"\n[kmsg]\npath = {:?}\nstate_directory = {:?}\nboot_id_path = {:?}\n",
                fake_nvml_library(),
                log.to_str().unwrap(),
                state.to_str().unwrap(),
                boot_id.to_str().unwrap(),
            ),
        )
        .unwrap();
    };
    write_config(&k.log);
    let d = start_with_env(
        &["--config.file", config.to_str().unwrap()],
        &[FROZEN[0], FROZEN[1], ("FAKE_NVML_PCIE_DELAY_MS", "0")],
    );
    let body = wait(&d, "gpu_info", |b| {
        !series(b, "dgx_pixels_gpu_info").is_empty()
    });
    let gpu0 = kernel_pci(&body, 0);
    for _ in 0..3 {
        k.record(
            4,
            &format!("NVRM: Xid (PCI:{gpu0}): 31, pid=9, name=train, MMU Fault"),
        );
    }
    std::fs::write(
        &other,
        format!("4,1,1,-;NVRM: Xid (PCI:{gpu0}): 43, pid=9, name=train\n"),
    )
    .unwrap();
    wait(&d, "the first log's XIDs", |b| {
        xid(b, "0", "31") == Some(3.0)
    });
    let hup = || {
        assert!(std::process::Command::new("kill")
            .args(["-HUP", &d.child.id().to_string()])
            .status()
            .unwrap()
            .success());
    };
    for round in 1..=3u32 {
        write_config(&other);
        hup();
        wait(&d, "the other log read", |b| {
            value(
                b,
                "dgx_pixels_exporter_config_reloads_total",
                &[("result", "success")],
            ) == Some(f64::from(2 * round - 1))
                && xid(b, "0", "43") == Some(1.0)
        });
        write_config(&k.log);
        hup();
        wait(&d, "back on the first log", |b| {
            value(
                b,
                "dgx_pixels_exporter_config_reloads_total",
                &[("result", "success")],
            ) == Some(f64::from(2 * round))
        });
        std::thread::sleep(Duration::from_millis(1200));
        let body = text(d.port);
        assert_eq!(xid(&body, "0", "31"), Some(3.0), "round {round}");
        assert_eq!(xid(&body, "0", "43"), Some(1.0), "round {round}");
    }
}

/// Issue 42, item 1, end to end: any process with GPU access can make the driver print its
/// own 63-byte string at KERN_ERR, facility 0, in `NVRM: API mismatch: the client has the
/// version <text>, but ...`. dgx-h100 with GPU 0's XID 95 at 3 s (unhealthy, reset_gpu, which
/// clears only when the GPU is seen reset) and GPU 0 missing the polls from 9 s to 11 s: a
/// forged "fallen off the bus" of GPU 0 in that string, logged before the missed polls, must
/// neither count (`dgx_pixels_gpu_fallen_off_bus_total`) nor arm the tracker's "lost" flag, so
/// the GPU answering again is no reset and the verdict stays unhealthy. (It counted 1 and the
/// verdict cleared to healthy.)
#[test]
fn a_forged_fallen_off_the_bus_in_user_text_arms_nothing() {
    let mut k = KernelLog::new();
    let builtin = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sim/scenarios/dgx-h100.toml"
    ))
    .unwrap();
    let scenario = k.log.with_file_name("scenario.toml");
    std::fs::write(
        &scenario,
        format!(
            "{builtin}\n[[faults]]\nkind = \"xid\"\ngpu = 0\nat_s = 3\nxid = 95\n\n\
             [[faults]]\nkind = \"lost\"\ngpu = 0\nat_s = 9\nxid = 95\nrecover_at_s = 11\n"
        ),
    )
    .unwrap();
    let config = k.log.with_file_name("exporter.toml");
    std::fs::write(
        &config,
        "[collector.health]\ninterval = \"100ms\"\n[collector.nvml]\ninterval = \"100ms\"\n\
         [nvml]\nslow_interval = \"100ms\"\n[collector.kmsg]\ninterval = \"100ms\"\n",
    )
    .unwrap();
    let scenario = scenario.to_str().unwrap().to_string();
    let d = start_with_env(
        &k.args(&["--config.file", config.to_str().unwrap()]),
        &[
            ("FAKE_NVML_SCENARIO", scenario.as_str()),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ("DGX_PIXELS_KMSG__BOOT_ID_PATH", k.boot_id.to_str().unwrap()),
        ],
    );
    let body = wait(&d, "gpu_info", |b| {
        !series(b, "dgx_pixels_gpu_info").is_empty()
    });
    let gpu0 = kernel_pci(&body, 0);
    // What the driver prints for a client version string of the attacker's choosing (63
    // bytes at most), as /dev/kmsg shows it: the driver's newlines escaped.
    let user = format!("GPU {gpu0}.0: GPU has fallen off the bus.");
    assert!(user.len() <= 63);
    k.record(
        3,
        &format!("NVRM: API mismatch: the client has the version {user}, but\\x0aNVRM: this kernel module has the version 550.54.15.  Please\\x0aNVRM: make sure that this kernel module and all NVIDIA driver\\x0aNVRM: components have the same version."),
    );
    // Variants of the same forgery: the string without the driver's words after it, and a
    // forged line in a process name.
    k.record(
        3,
        &format!("NVRM: API mismatch: the client has the version {user}"),
    );
    let gpu1 = kernel_pci(&body, 1);
    k.record(
        4,
        &format!("NVRM: Xid (PCI:{gpu1}): 13, pid=9, name=NVRM: GPU {gpu0}.0: GPU has fallen off the bus., Graphics Exception"),
    );
    let unhealthy_95 = |b: &str| {
        value(
            b,
            "dgx_pixels_gpu_health_action_info",
            &[("gpu", "0"), ("action", "reset_gpu"), ("reason", "xid_95")],
        ) == Some(1.0)
            && value(
                b,
                "dgx_pixels_gpu_health_state",
                &[("gpu", "0"), ("state", "unhealthy")],
            ) == Some(1.0)
    };
    let body = wait(&d, "XID 95 unhealthy, the forged records read", |b| {
        unhealthy_95(b) && value(b, "dgx_pixels_kmsg_records_read_total", &[]) == Some(3.0)
    });
    assert_eq!(xid(&body, "1", "13"), Some(1.0), "the real XID line counts");
    let lost = wait(&d, "GPU 0 missing its polls", |b| {
        value(b, "dgx_pixels_gpu_up", &[("gpu", "0")]) == Some(0.0)
    });
    assert_eq!(
        value(
            &lost,
            "dgx_pixels_gpu_fallen_off_bus_total",
            &[("gpu", "0")]
        ),
        None,
        "a forged record counts nothing"
    );
    wait(&d, "GPU 0 answering again", |b| {
        value(b, "dgx_pixels_gpu_up", &[("gpu", "0")]) == Some(1.0)
    });
    std::thread::sleep(Duration::from_millis(1500));
    let body = text(d.port);
    assert!(
        unhealthy_95(&body),
        "answering again after a forged record is no reset:\n{}",
        body.lines()
            .filter(|l| l.contains("health") && l.contains("gpu=\"0\""))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        value(
            &body,
            "dgx_pixels_gpu_fallen_off_bus_total",
            &[("gpu", "0")]
        ),
        None
    );
    assert_eq!(kmsg_errors(&body, "not_kernel"), Some(0.0));
}
