//! The `kubernetes` collector: pod, namespace and container labels on GPU series from the
//! kubelet pod-resources API.
//!
//! Off by default: it needs the kubelet's socket mounted, which only a Kubernetes deployment
//! has (the Helm chart's podResources.enabled turns both on). Runs on simulated GPUs too (their
//! uuids and MIG ids are the model's).

use std::time::Duration;

use dgx_pixels_kubernetes::{PodResourcesOptions, PodResourcesSource};

use super::{BuildContext, Built, Collector, RestartKey, DEFAULT_TIMEOUT};
use crate::config::Settings;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "kubernetes",
    enabled_by_default: false,
    enabled_in_simulation: false,
    // Pods change in seconds; a List every second would only load the kubelet.
    default_interval: Duration::from_secs(5),
    default_timeout: DEFAULT_TIMEOUT,
    help: "pod, namespace and container labels on GPU series from the kubelet pod-resources API (--kubernetes.pod-resources-socket)",
    yields_owned_series: false,
    derived: false,
    build,
    restart_key,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    let k = &ctx.settings.kubernetes;
    let options = PodResourcesOptions {
        socket: k.pod_resources_socket.clone(),
        // Checked by config validation to fit.
        max_response_bytes: usize::try_from(k.max_response_bytes).unwrap_or(usize::MAX),
        resource_names: k.resource_names.clone(),
        // Leave the runner's watchdog room to see the call fail on its own.
        call_timeout: ctx.timing.timeout.mul_f64(0.8),
    };
    Ok(Some(Box::new(PodResourcesSource::new(options))))
}

/// `[kubernetes]`.
fn restart_key(s: &Settings) -> RestartKey {
    Box::new(s.kubernetes.clone())
}
