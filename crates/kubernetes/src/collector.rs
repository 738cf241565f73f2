//! The descriptors of the `kubernetes` collector (pod, namespace and container labels on GPU
//! series from the kubelet pod-resources API) and the `hpc` collector (`hpc_job` labels from
//! per-GPU job files).
//!
//! `kubernetes` is off by default: it needs the kubelet's socket mounted, which only a
//! Kubernetes deployment has (the Helm chart's podResources.enabled turns both on). Runs on
//! simulated GPUs too (their uuids and MIG ids are the model's). `hpc` is on by default but
//! runs only when `--hpc.job-mapping-dir` is set (also with `--simulate`).

use std::time::Duration;

use dgx_pixels_metrics::Source;
use dgx_pixels_registry::{
    no_shared_inputs, BuildContext, Built, Check, Collector, Flag, FlagDefault, FlagKind,
    SettingError, Table, TableOptions, DEFAULT_INTERVAL, DEFAULT_TIMEOUT,
};

use crate::{
    HpcJobSource, HpcSettings, KubernetesSettings, PodResourcesOptions, PodResourcesSource,
};

impl TableOptions for KubernetesSettings {
    fn validate(&self, _: &Check) -> Result<(), SettingError> {
        KubernetesSettings::validate(self)
    }
}

impl TableOptions for HpcSettings {}

const KUBERNETES_FLAGS: &[Flag] = &[
    Flag {
        name: "kubernetes.pod-resources-socket",
        key: "kubernetes.pod_resources_socket",
        value_name: "PATH",
        help: "The kubelet's pod-resources socket, read by the kubernetes collector",
        default: FlagDefault::Says(|| {
            KubernetesSettings::default()
                .pod_resources_socket
                .display()
                .to_string()
        }),
        kind: FlagKind::Path,
        order: 160,
    },
    Flag {
        name: "kubernetes.max-response-bytes",
        key: "kubernetes.max_response_bytes",
        value_name: "BYTES",
        help: "Largest pod-resources List response accepted, in bytes",
        default: FlagDefault::Says(|| KubernetesSettings::default().max_response_bytes.to_string()),
        kind: FlagKind::Count,
        order: 161,
    },
    Flag {
        name: "kubernetes.device-checkpoint",
        key: "kubernetes.device_checkpoint",
        value_name: "PATH",
        help: "The kubelet's device-manager checkpoint, read to label each process on a shared GPU with its own pod (empty: off)",
        default: FlagDefault::Says(|| {
            KubernetesSettings::default()
                .device_checkpoint
                .display()
                .to_string()
        }),
        // Text, not Path: an empty value turns the checkpoint off.
        kind: FlagKind::Text,
        order: 162,
    },
    Flag {
        name: "kubernetes.pod-labels",
        key: "kubernetes.pod_labels",
        value_name: "KEYS",
        help: "Comma-separated pod label keys copied onto dgx_pixels_gpu_pod_info as label_<key>, watched from the API server (at most 8; empty: off, no API access)",
        default: FlagDefault::None,
        kind: FlagKind::Text,
        order: 163,
    },
    Flag {
        name: "kubernetes.node-name",
        key: "kubernetes.node_name",
        value_name: "NAME",
        help: "This node's name, whose pods' labels are watched (default: the NODE_NAME environment variable)",
        default: FlagDefault::None,
        kind: FlagKind::Text,
        order: 164,
    },
    Flag {
        name: "kubernetes.api-server",
        key: "kubernetes.api_server",
        value_name: "URL",
        help: "The Kubernetes API server for pod labels, https://HOST:PORT or http:// to loopback (default: in cluster, with the service account's token and CA)",
        default: FlagDefault::None,
        kind: FlagKind::Text,
        order: 165,
    },
];

/// The `kubernetes` descriptor.
pub const KUBERNETES: Collector = Collector {
    name: "kubernetes",
    enabled_by_default: false,
    enabled_in_simulation: false,
    // Pods change in seconds; a List every second would only load the kubelet.
    default_interval: Duration::from_secs(5),
    default_timeout: DEFAULT_TIMEOUT,
    help: "pod, namespace and container labels on GPU series from the kubelet pod-resources API (--kubernetes.pod-resources-socket)",
    yields_owned_series: false,
    derived: false,
    table: Some(Table::of::<KubernetesSettings>()),
    flags: KUBERNETES_FLAGS,
    prepare: None,
    build: build_kubernetes,
    shared_inputs: no_shared_inputs,
};

fn build_kubernetes(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    let k = ctx.options::<KubernetesSettings>();
    let options = PodResourcesOptions {
        socket: k.pod_resources_socket.clone(),
        // Checked by config validation to fit.
        max_response_bytes: usize::try_from(k.max_response_bytes).unwrap_or(usize::MAX),
        resource_names: k.resource_names.clone(),
        dra_drivers: k.dra_drivers.clone(),
        // Leave the runner's watchdog room to see the call fail on its own.
        call_timeout: ctx.timing.timeout.mul_f64(0.8),
        checkpoint: k.checkpoint(),
        pod_labels: k.pod_label_options()?,
    };
    Ok(Some(Box::new(PodResourcesSource::new(options))))
}

const HPC_FLAGS: &[Flag] = &[Flag {
    name: "hpc.job-mapping-dir",
    key: "hpc.job_mapping_dir",
    value_name: "DIR",
    help: "Directory of HPC job files, one per GPU (named INDEX or INDEX.GPU_INSTANCE) listing job ids, as dcgm-exporter's --hpc-job-mapping-dir; adds hpc_job labels",
    default: FlagDefault::None,
    kind: FlagKind::Path,
    order: 170,
}];

/// The `hpc` descriptor.
pub const HPC: Collector = Collector {
    name: "hpc",
    enabled_by_default: true,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    help: "hpc_job labels on GPU series from per-GPU job files (runs only when --hpc.job-mapping-dir is set)",
    yields_owned_series: false,
    derived: false,
    table: Some(Table::of::<HpcSettings>()),
    flags: HPC_FLAGS,
    prepare: None,
    build: build_hpc,
    shared_inputs: no_shared_inputs,
};

fn build_hpc(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    Ok(ctx
        .options::<HpcSettings>()
        .job_mapping_dir
        .as_ref()
        .map(|dir| Box::new(HpcJobSource::new(dir.clone())) as Box<dyn Source>))
}
