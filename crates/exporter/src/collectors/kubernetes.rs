//! The `kubernetes` collector: pod, namespace and container labels on GPU series from the
//! kubelet pod-resources API.
//!
//! Off by default: it needs the kubelet's socket mounted, which only a Kubernetes deployment
//! has (the Helm chart's podResources.enabled turns both on). Runs on simulated GPUs too (their
//! uuids and MIG ids are the model's).

use std::time::Duration;

use dgx_pixels_kubernetes::{KubernetesSettings, PodResourcesOptions, PodResourcesSource};

use super::{
    no_shared_inputs as shared_inputs, BuildContext, Built, Collector, Flag, FlagDefault, FlagKind,
    Table, TableOptions, DEFAULT_TIMEOUT,
};
use crate::config::{ConfigError, Settings};

/// `[kubernetes]`.
pub type Options = KubernetesSettings;

impl TableOptions for KubernetesSettings {
    fn check(&self, _: &Settings) -> Result<(), ConfigError> {
        Ok(self.validate()?)
    }
}

/// The kubernetes collector's table in `settings`.
pub fn options(settings: &Settings) -> &KubernetesSettings {
    settings.options(&COLLECTOR)
}

const FLAGS: &[Flag] = &[
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
];

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "kubernetes",
    enabled_by_default: false,
    enabled_in_simulation: false,
    // Pods change in seconds; a List every second would only load the kubelet.
    default_interval: Duration::from_secs(5),
    default_timeout: DEFAULT_TIMEOUT,
    interval_setting: None,
    help: "pod, namespace and container labels on GPU series from the kubelet pod-resources API (--kubernetes.pod-resources-socket)",
    yields_owned_series: false,
    derived: false,
    table: Some(Table::of::<Options>()),
    flags: FLAGS,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    let k = options(ctx.settings);
    let options = PodResourcesOptions {
        socket: k.pod_resources_socket.clone(),
        // Checked by config validation to fit.
        max_response_bytes: usize::try_from(k.max_response_bytes).unwrap_or(usize::MAX),
        resource_names: k.resource_names.clone(),
        dra_drivers: k.dra_drivers.clone(),
        // Leave the runner's watchdog room to see the call fail on its own.
        call_timeout: ctx.timing.timeout.mul_f64(0.8),
    };
    Ok(Some(Box::new(PodResourcesSource::new(options))))
}
