//! What the log serves: XIDs, SXids and bad lines by reason; an unopenable log; forged words.

use crate::common;

use std::time::Duration;

use common::*;

use super::{kernel_pci, kmsg_errors, kmsg_lines, wait, xid, KernelLog, FROZEN};

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
