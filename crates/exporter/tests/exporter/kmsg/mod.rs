//! Issue 19, part 2: the real binary reading XIDs from a fake kernel log (a regular file in
//! `/dev/kmsg`'s format) beside the fake NVML. XIDs are served per GPU and code; a restart over
//! the same log changes no counter; an XID that NVML also delivers counts once; bad lines,
//! unknown codes and addresses, and an unopenable log are counted or reported while every
//! source stays up.
//!
//! One module a topic; the fake kernel log and the look-ups they share are here.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod counted_once;
mod restarts;
mod served;

use crate::common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
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
