//! The `kmsg` collector's descriptor: GPU XIDs, NVSwitch SXids and lost GPUs from the kernel
//! log (`--kmsg.path`, default `/dev/kmsg`), off by default on real GPUs and on a simulated
//! node.
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
//! seen by both counts once. GPUs are found by PCI address in the current generation's device
//! view (from `dgx_pixels_gpu_info`), as the probes find utilization there.

use std::sync::Mutex;

use dgx_pixels_registry::{
    no_shared_inputs, BuildContext, Built, Collector, Flag, FlagDefault, FlagKind, Table,
    TableOptions, DEFAULT_INTERVAL, DEFAULT_TIMEOUT,
};

use crate::{KmsgOptions, KmsgSource, Progresses, ViewDirectory};

impl TableOptions for KmsgOptions {}

const FLAGS: &[Flag] = &[
    Flag {
        name: "kmsg.path",
        key: "kmsg.path",
        value_name: "PATH",
        help: "The kernel log read by the kmsg collector (--collector.kmsg): /dev/kmsg, or a file or FIFO of lines in its format",
        default: FlagDefault::Says(|| KmsgOptions::default().path.display().to_string()),
        kind: FlagKind::Path,
        order: 180,
    },
    Flag {
        name: "kmsg.state-directory",
        key: "kmsg.state_directory",
        value_name: "DIR",
        help: "Where the kmsg collector keeps its state file (the last kernel-log record counted per boot), so a restart counts nothing twice",
        default: FlagDefault::Says(|| {
            KmsgOptions::default()
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
    help: "GPU XIDs, NVSwitch SXids and lost GPUs from the kernel log (--kmsg.path, default /dev/kmsg; needs CAP_SYSLOG where kernel.dmesg_restrict=1, see docs/kmsg.md)",
    yields_owned_series: false,
    derived: false,
    table: Some(Table::of::<KmsgOptions>()),
    flags: FLAGS,
    prepare: None,
    build,
    shared_inputs: no_shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // What the sources on each path read so far, kept across reloads that restart them or
    // switch the path away and back.
    let progress = ctx.kept::<Mutex<Progresses>>();
    Ok(Some(Box::new(KmsgSource::new(
        ctx.options::<KmsgOptions>().clone(),
        ctx.xid_ledger(),
        Box::new(ViewDirectory(ctx.views())),
        progress,
    ))))
}
