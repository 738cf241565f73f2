//! No state directory, a reload restarting the sources, a log switched away and back.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;

use super::{kernel_pci, kmsg_lines, wait, xid, KernelLog, FROZEN};

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
    d.hup();
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
    for round in 1..=3u32 {
        write_config(&other);
        d.hup();
        wait(&d, "the other log read", |b| {
            value(
                b,
                "dgx_pixels_exporter_config_reloads_total",
                &[("result", "success")],
            ) == Some(f64::from(2 * round - 1))
                && xid(b, "0", "43") == Some(1.0)
        });
        write_config(&k.log);
        d.hup();
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
