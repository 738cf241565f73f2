//! The `kmsg` collector: GPU XIDs, NVSwitch SXids and lost GPUs from the kernel log
//! (`--kmsg.path`, default `/dev/kmsg`), off by default on real GPUs and on a simulated node.
//!
//! Why opt-in: reading `/dev/kmsg` takes more privilege than the rest of the exporter
//! (`CAP_SYSLOG` or root where `kernel.dmesg_restrict=1`, the default on most distributions;
//! in Kubernetes a hostPath mount of the device), and a state directory to be restart-safe.
//! Our deployments run without capabilities unless asked (docs/security.md), so this is
//! asked for with `--collector.kmsg` (docs/kmsg.md). A simulated node has no kernel log of its
//! simulated GPUs: there it reads what `--kmsg.path` names (a test's fake kernel log).
//!
//! Its XIDs go to the exporter's one XID ledger, which the GPU source (NVML, or the simulated
//! node) serves: `dgx_pixels_gpu_xid_errors_total` keeps one source per series, and an event
//! seen by both counts once. GPUs are found by PCI address in the latest
//! `dgx_pixels_gpu_info` of the store, as the probes find utilization there.

use std::sync::{Arc, Mutex};

use dgx_pixels_kmsg::parse::PciAddress;
use dgx_pixels_kmsg::{GpuDirectory, KmsgSource, KnownGpu, Progresses};
use dgx_pixels_metrics::Metric;

use super::probes::StoreSlot;
use super::{
    no_shared_inputs as shared_inputs, BuildContext, Built, Collector, Flag, FlagDefault, FlagKind,
    Table, TableOptions, DEFAULT_INTERVAL, DEFAULT_TIMEOUT,
};
use crate::config::{ConfigError, Settings};

/// `[kmsg]`: the kmsg crate's own options (`path`, `state_directory`, `boot_id_path`).
pub type Options = dgx_pixels_kmsg::KmsgOptions;

impl TableOptions for dgx_pixels_kmsg::KmsgOptions {
    fn check(&self, _: &Settings) -> Result<(), ConfigError> {
        Ok(())
    }
}

const FLAGS: &[Flag] = &[
    Flag {
        name: "kmsg.path",
        key: "kmsg.path",
        value_name: "PATH",
        help: "The kernel log read by the kmsg collector (--collector.kmsg): /dev/kmsg, or a file or FIFO of lines in its format",
        default: FlagDefault::Says(|| Options::default().path.display().to_string()),
        kind: FlagKind::Path,
        order: 180,
    },
    Flag {
        name: "kmsg.state-directory",
        key: "kmsg.state_directory",
        value_name: "DIR",
        help: "Where the kmsg collector keeps its state file (the last kernel-log record counted per boot), so a restart counts nothing twice",
        default: FlagDefault::Says(|| {
            Options::default()
                .state_directory
                .map(|d| d.display().to_string())
                .unwrap_or_default()
        }),
        kind: FlagKind::Path,
        order: 181,
    },
];

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "kmsg",
    enabled_by_default: false,
    enabled_in_simulation: false,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    interval_setting: None,
    help: "GPU XIDs, NVSwitch SXids and lost GPUs from the kernel log (--kmsg.path, default /dev/kmsg; needs CAP_SYSLOG where kernel.dmesg_restrict=1, see docs/kmsg.md)",
    yields_owned_series: false,
    derived: false,
    table: Some(Table::of::<Options>()),
    flags: FLAGS,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // What the sources on each path read so far, kept across reloads that restart them or
    // switch the path away and back.
    let progress = ctx.kept::<Mutex<Progresses>>(COLLECTOR.name);
    Ok(Some(Box::new(KmsgSource::new(
        ctx.settings.options::<Options>(&COLLECTOR).clone(),
        Arc::clone(ctx.xid_ledger),
        Box::new(StoreGpus(Arc::clone(ctx.store_slot))),
        progress,
    ))))
}

/// GPUs by PCI address from the latest `dgx_pixels_gpu_info` of every source that is up.
pub struct StoreGpus(pub StoreSlot);

impl GpuDirectory for StoreGpus {
    fn gpus(&self) -> Option<Vec<KnownGpu>> {
        let store = self.0.get()?;
        let generation = store.current();
        let gpus: Vec<KnownGpu> = generation
            .snapshots()
            .iter()
            .filter_map(|s| s.served())
            .flat_map(|o| o.samples.iter())
            .filter(|s| s.metric == Metric::GpuInfo)
            .filter_map(|s| {
                let d = s.device.as_ref()?;
                let pci = PciAddress::parse(s.label("pci_bus_id")?)?;
                Some(KnownGpu {
                    pci,
                    index: d.index(),
                    uuid: d.uuid().to_string(),
                })
            })
            .collect();
        (!gpus.is_empty()).then_some(gpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_exposition::{EncodeOptions, SnapshotStore};
    use dgx_pixels_metrics::{Sample, Snapshot, SourceHealth};

    #[test]
    fn gpus_are_found_by_pci_address_in_gpu_info() {
        let slot = StoreSlot::default();
        let gpus = StoreGpus(Arc::clone(&slot));
        assert_eq!(gpus.gpus(), None, "no store yet");
        let store = Arc::new(SnapshotStore::new(
            &["nvml"],
            vec![],
            EncodeOptions::default(),
        ));
        let _ = slot.set(Arc::clone(&store));
        assert_eq!(gpus.gpus(), None, "nothing read yet");
        let info = |gpu: u32, uuid: &str, pci: &str| {
            let labels = ["m", "s", pci, "v", "d", "12040", "0", "/dev/nvidia0"];
            Sample::for_gpu(gpu, uuid, Metric::GpuInfo, &labels, 1.0)
        };
        store.publish(Snapshot {
            source: "nvml".into(),
            health: SourceHealth {
                up: true,
                polls: 1,
                ..Default::default()
            },
            output: vec![
                info(0, "GPU-a", "00000000:1B:00.0"),
                info(1, "GPU-b", "not an address"),
            ]
            .into(),
        });
        assert_eq!(
            gpus.gpus(),
            Some(vec![KnownGpu {
                pci: PciAddress::parse("0000:1b:00").unwrap(),
                index: 0,
                uuid: "GPU-a".into(),
            }])
        );
    }
}
