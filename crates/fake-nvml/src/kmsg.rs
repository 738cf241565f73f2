//! The fake kernel log: the real driver prints every XID to the kernel log as well as
//! signalling NVML's event sets, so the fake prints each XID occurrence of the scenario to the
//! file `FAKE_NVML_KMSG` names, as `/dev/kmsg` records, for the exporter's kmsg collector to
//! read through its real code path.
//!
//! It prints from scenario time 0 (a kernel log holds the whole boot), each occurrence within
//! 100 ms of scenario time of when it happens while the library is being called. The records
//! carry the GPU's PCI address the way the driver writes it (`0000:2a:00`, from NVML's
//! `00000000:2A:00.0`), a sequence number growing across the process and the scenario time as
//! their timestamp.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::state::{is_hung, Driver};

/// How often (in scenario time) the fake looks for occurrences to print.
const PRINT_EVERY: Duration = Duration::from_millis(100);

/// Sequence numbers of the fake kernel log: one log per process, like the kernel's.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// What the driver has printed so far.
#[derive(Debug, Default)]
pub struct Printed {
    /// Occurrences printed per GPU and code.
    counts: BTreeMap<(usize, u32), u64>,
    /// Scenario time of the last look.
    last: Option<Duration>,
}

/// `00000000:2A:00.0` (NVML) as the driver's kernel log writes it: `0000:2a:00`.
fn kernel_address(nvml: &str) -> String {
    let mut parts = nvml.split(':');
    let domain = parts.next().unwrap_or("0");
    let bus = parts.next().unwrap_or("00");
    let device = parts.next().unwrap_or("00");
    let device = device.split('.').next().unwrap_or("00");
    let domain = &domain[domain.len().saturating_sub(4)..];
    format!("{domain}:{bus}:{device}").to_ascii_lowercase()
}

impl Driver {
    /// Prints the XID occurrences up to `now` not printed yet, when `FAKE_NVML_KMSG` is set.
    pub fn print_xids(&mut self, now: Duration) {
        let Some(path) = self.config.kmsg.clone() else {
            return;
        };
        if self
            .kmsg
            .last
            .is_some_and(|t| now < t.saturating_add(PRINT_EVERY) && now >= t)
        {
            return;
        }
        self.kmsg.last = Some(now);
        let mut text = String::new();
        for gpu in 0..self.node().gpu_count() {
            if is_hung(self, gpu, now) {
                continue;
            }
            let counts = self.xid_counts(gpu, now);
            let Some(address) = self.node().gpu(gpu).map(|g| kernel_address(&g.pci_bus_id)) else {
                continue;
            };
            for (xid, n) in counts {
                let printed = self.kmsg.counts.entry((gpu, xid)).or_insert(0);
                for _ in *printed..n {
                    let seq = SEQ.fetch_add(1, Ordering::Relaxed) + 1;
                    text.push_str(&format!(
                        "3,{seq},{},-;NVRM: Xid (PCI:{address}): {xid}, pid=4242, name=python3, fake-nvml scenario XID\n",
                        now.as_micros()
                    ));
                }
                *printed = (*printed).max(n);
            }
        }
        if text.is_empty() {
            return;
        }
        let written = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = written {
            eprintln!("fake-nvml: cannot print to {}: {e}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_written_as_the_driver_does() {
        assert_eq!(kernel_address("00000000:2A:00.0"), "0000:2a:00");
        assert_eq!(kernel_address("0000:1b:00.0"), "0000:1b:00");
    }
}
