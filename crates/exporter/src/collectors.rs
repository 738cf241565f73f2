//! The registry of collectors (sources that read real backends), node_exporter style: each
//! entry generates `--collector.NAME`, `--no-collector.NAME`, `--collector.NAME.interval` and
//! `--collector.NAME.timeout`, and a `[collector.NAME]` table in the config file.

use std::time::Duration;

/// One registered collector.
#[derive(Debug)]
pub struct CollectorDef {
    /// Name, as in `--collector.NAME` and the `source` label.
    pub name: &'static str,
    /// Whether it runs unless disabled.
    pub enabled_by_default: bool,
    /// Poll interval unless configured; `--help` prints it from here.
    pub default_interval: Duration,
    /// Poll deadline unless configured; `--help` prints it from here.
    pub default_timeout: Duration,
    /// One-line description for `--help`.
    pub help: &'static str,
}

/// Default poll interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Default poll deadline.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// Shortest poll interval accepted (20 polls a second): shorter ones would keep a core busy
/// polling for readings that libraries refresh far less often.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);
/// Shortest poll deadline accepted.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(10);

/// Every collector the exporter knows.
pub const COLLECTORS: &[CollectorDef] = &[
    CollectorDef {
        name: "nvml",
        enabled_by_default: true,
        default_interval: DEFAULT_INTERVAL,
        default_timeout: DEFAULT_TIMEOUT,
        help: "GPU telemetry through NVML (libnvidia-ml.so.1, loaded at run time)",
    },
    CollectorDef {
        name: "textfile",
        enabled_by_default: true,
        default_interval: DEFAULT_INTERVAL,
        default_timeout: DEFAULT_TIMEOUT,
        help: "workload metrics from the *.prom files of --textfile.directory (runs only when it is set, also with --simulate)",
    },
    // Off by default: it puts work on the GPUs (politely, see [probes] in the config file).
    CollectorDef {
        name: "probes",
        enabled_by_default: false,
        default_interval: DEFAULT_INTERVAL,
        default_timeout: // A probe run opens a CUDA context and cuBLAS first: seconds, not milliseconds.
        Duration::from_secs(30),
        help: "CUDA probe workloads on idle GPUs (libcuda.so.1 and cuBLAS, loaded at run time; with --simulate, simulated and on unless turned off)",
    },
    // Off by default: an embedded host engine is a heavy, privileged component to start on
    // every node, and DGX OS already runs nv-hostengine (see docs/architecture.md).
    CollectorDef {
        name: "dcgm",
        enabled_by_default: false,
        default_interval: DEFAULT_INTERVAL,
        default_timeout: DEFAULT_TIMEOUT,
        help: "GPU profiling (and optionally device) fields through DCGM (libdcgm.so.4 or .so.3, loaded at run time; embedded host engine unless --dcgm.hostengine; with --simulate, simulated profiling, on unless turned off)",
    },
    // Off by default: it needs the kubelet's socket mounted, which only a Kubernetes
    // deployment has (the Helm chart's podResources.enabled turns both on).
    CollectorDef {
        name: "kubernetes",
        enabled_by_default: false,
        default_interval: // Pods change in seconds; a List every second would only load the kubelet.
        Duration::from_secs(5),
        default_timeout: DEFAULT_TIMEOUT,
        help: "pod, namespace and container labels on GPU series from the kubelet pod-resources API (--kubernetes.pod-resources-socket)",
    },
    CollectorDef {
        name: "hpc",
        enabled_by_default: true,
        default_interval: DEFAULT_INTERVAL,
        default_timeout: DEFAULT_TIMEOUT,
        help: "hpc_job labels on GPU series from per-GPU job files (runs only when --hpc.job-mapping-dir is set)",
    },
];

/// Looks a collector up by name.
pub fn find(name: &str) -> Option<&'static CollectorDef> {
    COLLECTORS.iter().find(|c| c.name == name)
}
