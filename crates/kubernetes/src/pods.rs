//! The kubelet pod-resources source: which container of which pod holds each GPU.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dgx_pixels_metrics::{
    DeviceRef, Holder, Metric, PollError, PollErrorKind, PollOutput, Sample, Source,
};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::podlabels::{PodLabelOptions, PodLabelWatcher};
use crate::proto::pod_resources_lister_client::PodResourcesListerClient;
use crate::proto::{ClaimResource, ListPodResourcesRequest, ListPodResourcesResponse};

/// The kubelet's socket on a standard node.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// Large enough for a busy node (thousands of pods with CPU and memory assignments); gRPC's
/// default of 4 MiB is what broke dcgm-exporter's scrapes on such nodes.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The NVIDIA device plugin's resources: whole (or time-sliced) GPUs and MIG instances of the
/// "mixed" strategy. A trailing `*` matches any suffix.
pub const DEFAULT_RESOURCE_NAMES: &[&str] = &["nvidia.com/gpu", "nvidia.com/mig-*"];

/// How to reach the kubelet and what to read.
#[derive(Debug, Clone)]
pub struct PodResourcesOptions {
    /// The kubelet's pod-resources unix socket.
    pub socket: PathBuf,
    /// Largest `List` response accepted, in bytes.
    pub max_response_bytes: usize,
    /// Resource names whose devices are GPUs; a trailing `*` matches any suffix.
    pub resource_names: Vec<String>,
    /// DRA drivers whose claimed devices are GPUs (default [`DRA_DRIVERS`]).
    pub dra_drivers: Vec<String>,
    /// Deadline of one `List` call (connection included).
    pub call_timeout: Duration,
    /// The kubelet's device-manager checkpoint, read to label each process on a shared GPU
    /// with its own pod (see [`crate::checkpoint`]); `None` leaves processes to the per-device
    /// rule.
    pub checkpoint: Option<PathBuf>,
    /// The pod-label watch (`[kubernetes] pod_labels`); `None` (the default) never asks the
    /// API server anything.
    pub pod_labels: Option<PodLabelOptions>,
}

impl Default for PodResourcesOptions {
    fn default() -> Self {
        PodResourcesOptions {
            socket: PathBuf::from(DEFAULT_SOCKET),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            resource_names: DEFAULT_RESOURCE_NAMES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            dra_drivers: DRA_DRIVERS.iter().map(|s| s.to_string()).collect(),
            call_timeout: Duration::from_millis(1500),
            checkpoint: Some(PathBuf::from(crate::checkpoint::DEFAULT_CHECKPOINT)),
            pod_labels: None,
        }
    }
}

/// Lists pods from the kubelet on each poll; see the crate docs.
pub struct PodResourcesSource {
    options: PodResourcesOptions,
    /// A runtime of its own: the source runs on a runner thread, outside the HTTP runtime.
    runtime: Option<tokio::runtime::Runtime>,
    client: Option<PodResourcesListerClient<Channel>>,
    /// Checkpoint reads that failed, per reason (as `CheckpointError::REASONS`), and the last
    /// failure's text (logged when it changes).
    checkpoint_errors: [u64; 3],
    last_checkpoint_error: Option<String>,
    /// `dgx_pixels_gpu_pod_info` series left out over the caps so far, and whether the last
    /// poll was over them (logged when that changes).
    dropped: u64,
    over_cap: bool,
    /// The pod-label watch thread, when pod labels are asked for.
    pod_labels: Option<PodLabelWatcher>,
}

impl std::fmt::Debug for PodResourcesSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodResourcesSource")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl PodResourcesSource {
    /// A source reading the kubelet at `options.socket`; nothing is connected until the first
    /// poll.
    pub fn new(options: PodResourcesOptions) -> PodResourcesSource {
        PodResourcesSource {
            pod_labels: options.pod_labels.clone().map(PodLabelWatcher::new),
            options,
            runtime: None,
            client: None,
            checkpoint_errors: [0; 3],
            last_checkpoint_error: None,
            dropped: 0,
            over_cap: false,
        }
    }

    /// Checkpoint reads that failed so far (each leaves that poll's processes unlabelled).
    pub fn checkpoint_errors(&self) -> u64 {
        self.checkpoint_errors.iter().sum()
    }

    /// `dgx_pixels_source_read_errors_total`, one series per reason (zeros included,
    /// so a rate sees the first failure); none while the checkpoint is off.
    fn checkpoint_samples(&self) -> Vec<Sample> {
        if self.options.checkpoint.is_none() {
            return Vec::new();
        }
        crate::checkpoint::CheckpointError::REASONS
            .iter()
            .zip(self.checkpoint_errors)
            .map(|(reason, n)| {
                Sample::new(Metric::SourceReadErrors, ["kubernetes", *reason], n as f64)
            })
            .collect()
    }

    /// The per-process pairs from the checkpoint, or none when it is off or unreadable (a
    /// failure is counted, and logged when it differs from the last one).
    fn process_pairs(&mut self, response: &ListPodResourcesResponse) -> Vec<(DeviceRef, Holder)> {
        let Some(path) = self.options.checkpoint.as_deref() else {
            return Vec::new();
        };
        match crate::checkpoint::read(path) {
            Ok(entries) => {
                if self.last_checkpoint_error.take().is_some() {
                    tracing::info!(path = %path.display(), "kubelet device checkpoint readable again");
                }
                crate::checkpoint::process_attribution(
                    response,
                    &entries,
                    &self.options.resource_names,
                )
            }
            Err(e) => {
                self.checkpoint_errors[e.index()] += 1;
                let text = e.to_string();
                if self.last_checkpoint_error.as_deref() != Some(text.as_str()) {
                    tracing::warn!(error = %text, "processes on shared GPUs are not labelled with their pods");
                    self.last_checkpoint_error = Some(text);
                }
                Vec::new()
            }
        }
    }

    fn list(&mut self) -> Result<ListPodResourcesResponse, PollError> {
        let socket = self.options.socket.clone();
        // Say plainly what is missing rather than a transport error.
        if !socket.exists() {
            return Err(PollError::new(
                PollErrorKind::SocketMissing,
                format!(
                    "kubelet pod-resources socket {} does not exist (is /var/lib/kubelet/pod-resources mounted?); series are served unattributed",
                    socket.display()
                ),
            ));
        }
        if self.runtime.is_none() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| {
                    PollError::new(PollErrorKind::Runtime, format!("tokio runtime: {e}"))
                })?;
            self.runtime = Some(rt);
        }
        let Some(rt) = self.runtime.as_ref() else {
            return Err(PollError::new(
                PollErrorKind::Runtime,
                "tokio runtime missing",
            ));
        };
        let _entered = rt.enter();
        let client = match self.client.take() {
            Some(c) => c,
            None => {
                // The URI is required by tonic but unused: the connector dials the socket.
                let endpoint = Endpoint::from_static("http://kubelet.invalid");
                let channel = endpoint.connect_with_connector_lazy(tower::service_fn(
                    move |_: tonic::transport::Uri| {
                        let socket = socket.clone();
                        async move {
                            tokio::net::UnixStream::connect(socket)
                                .await
                                .map(TokioIo::new)
                        }
                    },
                ));
                PodResourcesListerClient::new(channel)
                    .max_decoding_message_size(self.options.max_response_bytes)
            }
        };
        let mut call = client.clone();
        let timeout = self.options.call_timeout;
        let result = rt.block_on(async move {
            tokio::time::timeout(timeout, call.list(ListPodResourcesRequest {})).await
        });
        match result {
            Ok(Ok(response)) => {
                self.client = Some(client);
                Ok(response.into_inner())
            }
            // A fresh channel next time: the kubelet may have restarted.
            Ok(Err(status)) => Err(self.status_error(&status)),
            Err(_) => Err(PollError::new(
                PollErrorKind::Timeout,
                format!(
                    "kubelet pod-resources List did not answer within {timeout:?} on {}",
                    self.options.socket.display()
                ),
            )),
        }
    }

    fn status_error(&self, status: &tonic::Status) -> PollError {
        if status.code() == tonic::Code::OutOfRange {
            return PollError::new(
                PollErrorKind::ResponseTooLarge,
                format!(
                    "kubelet pod-resources List response exceeds the limit of {} bytes; raise [kubernetes] max_response_bytes (--kubernetes.max-response-bytes): {}",
                    self.options.max_response_bytes,
                    status.message()
                ),
            );
        }
        PollError::new(
            PollErrorKind::KubeletUnavailable,
            format!(
                "kubelet pod-resources List on {} failed: {:?}: {}",
                self.options.socket.display(),
                status.code(),
                status.message()
            ),
        )
    }
}

impl Source for PodResourcesSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let response = self.list()?;
        let (mut pairs, dropped) = crate::cap::cap(
            attribution(
                &response,
                &self.options.resource_names,
                &self.options.dra_drivers,
            ),
            crate::cap::MAX_PODS_PER_DEVICE,
            crate::cap::MAX_POD_INFO,
        );
        self.dropped += dropped;
        if (dropped > 0) != self.over_cap {
            self.over_cap = dropped > 0;
            if self.over_cap {
                tracing::warn!(
                    left_out = dropped,
                    "more pods hold GPUs than dgx_pixels_gpu_pod_info serves (at most {} per device, {} in all); the rest are counted in dgx_pixels_source_series_dropped_total",
                    crate::cap::MAX_PODS_PER_DEVICE,
                    crate::cap::MAX_POD_INFO
                );
            } else {
                tracing::info!("every pod holding a GPU is served again");
            }
        }
        pairs.extend(self.process_pairs(&response));
        let mut samples = self.checkpoint_samples();
        if let Some(view) = self.pod_labels.as_mut().map(PodLabelWatcher::view) {
            if let Some(pods) = &view.pods {
                with_pod_labels(&mut pairs, pods);
            }
            samples.extend(view.samples());
        }
        samples.push(Sample::new(
            Metric::SourceSeriesDropped,
            ["kubernetes", Metric::GpuPodInfo.def().name],
            self.dropped as f64,
        ));
        Ok(PollOutput {
            samples,
            attribution: Some(Arc::new(pairs)),
            ..PollOutput::default()
        })
    }
}

/// Gives each pod holder its pod's labels from `pods` (a pod the watch has not seen yet keeps
/// none).
pub fn with_pod_labels(
    pairs: &mut [(DeviceRef, Holder)],
    pods: &std::collections::HashMap<crate::podlabels::PodKey, dgx_pixels_metrics::PodLabels>,
) {
    for (_, holder) in pairs {
        if let Holder::Pod {
            namespace,
            pod,
            labels,
            ..
        } = holder
        {
            if let Some(found) = pods.get(&(namespace.clone(), pod.clone())) {
                *labels = Arc::clone(found);
            }
        }
    }
}

/// Whether `resource` is one of `patterns` (a trailing `*` matches any suffix).
pub fn resource_matches(patterns: &[String], resource: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => resource.starts_with(prefix),
        None => p == resource,
    })
}

/// The device a device-plugin id names: `GPU-UUID` and `MIG-UUID` (with or without a `::N`
/// time-slicing replica suffix), the older `MIG-GPU-UUID/GI/CI`, or a GPU index (the plugin's
/// `index` id strategy). Anything else is not a GPU we can name.
pub fn device_ref(id: &str) -> Option<DeviceRef> {
    let base = id.split_once("::").map_or(id, |(b, _)| b).trim();
    if let Some(rest) = base.strip_prefix("MIG-GPU-") {
        let mut parts = rest.split('/');
        let uuid = format!("GPU-{}", parts.next()?);
        let gpu_instance = parts.next()?.parse().ok()?;
        return Some(DeviceRef::Instance { uuid, gpu_instance });
    }
    if base.starts_with("GPU-") || base.starts_with("MIG-") {
        return Some(DeviceRef::Uuid(base.to_string()));
    }
    base.parse().ok().map(|gpu| DeviceRef::Index {
        gpu,
        gpu_instance: None,
    })
}

/// The DRA drivers whose claimed devices are GPUs by default: NVIDIA's DRA driver for GPUs
/// (`[kubernetes] dra_drivers` replaces the list).
pub const DRA_DRIVERS: &[&str] = &["gpu.nvidia.com"];

/// The device a DRA claim resource names: the driver's device name `gpu-N` (GPU index N), a
/// GPU or MIG UUID as the device name, or else a CDI device name whose device part the device
/// plugin's forms name (`nvidia.com/gpu=GPU-UUID`, `=0`) or `N:M` (MIG instance M of GPU N).
/// A device named any other way (the driver's MIG device names) is not a GPU we can name.
pub fn claim_device_ref(claimed: &ClaimResource) -> Option<DeviceRef> {
    let name = claimed.device_name.trim();
    if let Some(index) = name.strip_prefix("gpu-") {
        if let Ok(gpu) = index.parse() {
            return Some(DeviceRef::Index {
                gpu,
                gpu_instance: None,
            });
        }
    }
    if name.starts_with("GPU-") || name.starts_with("MIG-") {
        return device_ref(name);
    }
    claimed.cdi_devices.iter().find_map(|cdi| {
        let (_, device) = cdi.name.split_once('=')?;
        if let Some((gpu, instance)) = device.split_once(':') {
            return Some(DeviceRef::Index {
                gpu: gpu.parse().ok()?,
                gpu_instance: Some(instance.parse().ok()?),
            });
        }
        device_ref(device)
    })
}

/// Every (device, container) pair of a `List` response for the GPU resources in `patterns`,
/// and for the GPUs the DRA drivers `dra_drivers` allocated through resource claims, with the
/// same holder labels.
pub fn attribution(
    response: &ListPodResourcesResponse,
    patterns: &[String],
    dra_drivers: &[String],
) -> Vec<(DeviceRef, Holder)> {
    let mut out = Vec::new();
    for pod in &response.pod_resources {
        for container in &pod.containers {
            for devices in &container.devices {
                if !resource_matches(patterns, &devices.resource_name) {
                    continue;
                }
                for id in &devices.device_ids {
                    if let Some(device) = device_ref(id) {
                        out.push((
                            device,
                            Holder::Pod {
                                namespace: pod.namespace.clone(),
                                pod: pod.name.clone(),
                                container: container.name.clone(),
                                labels: Default::default(),
                            },
                        ));
                    }
                }
            }
            let claimed = container
                .dynamic_resources
                .iter()
                .flat_map(|claim| &claim.claim_resources)
                .filter(|c| dra_drivers.contains(&c.driver_name));
            for device in claimed.filter_map(claim_device_ref) {
                out.push((
                    device,
                    Holder::Pod {
                        namespace: pod.namespace.clone(),
                        pod: pod.name.clone(),
                        container: container.name.clone(),
                        labels: Default::default(),
                    },
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{ContainerDevices, ContainerResources, PodResources};

    #[test]
    fn device_ids_of_every_plugin_strategy() {
        assert_eq!(
            device_ref("GPU-1b2c"),
            Some(DeviceRef::Uuid("GPU-1b2c".into()))
        );
        assert_eq!(
            device_ref("GPU-1b2c::3"),
            Some(DeviceRef::Uuid("GPU-1b2c".into()))
        );
        assert_eq!(
            device_ref("MIG-5f6a::0"),
            Some(DeviceRef::Uuid("MIG-5f6a".into()))
        );
        assert_eq!(
            device_ref("MIG-GPU-1b2c/7/0"),
            Some(DeviceRef::Instance {
                uuid: "GPU-1b2c".into(),
                gpu_instance: 7
            })
        );
        assert_eq!(
            device_ref("2"),
            Some(DeviceRef::Index {
                gpu: 2,
                gpu_instance: None
            })
        );
        assert_eq!(device_ref("fpga-0"), None);
    }

    #[test]
    fn only_gpu_resources_are_read() {
        let patterns: Vec<String> = DEFAULT_RESOURCE_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(resource_matches(&patterns, "nvidia.com/gpu"));
        assert!(resource_matches(&patterns, "nvidia.com/mig-1g.10gb"));
        assert!(!resource_matches(&patterns, "nvidia.com/gpu.shared"));
        assert!(!resource_matches(&patterns, "example.com/fpga"));
        let response = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "p".into(),
                namespace: "ns".into(),
                containers: vec![ContainerResources {
                    dynamic_resources: Vec::new(),
                    name: "c".into(),
                    devices: vec![
                        ContainerDevices {
                            resource_name: "nvidia.com/gpu".into(),
                            device_ids: vec!["GPU-a".into(), "GPU-b::1".into()],
                            topology: None,
                        },
                        ContainerDevices {
                            resource_name: "example.com/fpga".into(),
                            device_ids: vec!["GPU-looks-like-one".into()],
                            topology: None,
                        },
                    ],
                }],
            }],
        };
        let pairs = attribution(&response, &patterns, &[]);
        let devices: Vec<_> = pairs.iter().map(|(d, _)| d.clone()).collect();
        assert_eq!(
            devices,
            [
                DeviceRef::Uuid("GPU-a".into()),
                DeviceRef::Uuid("GPU-b".into())
            ]
        );
    }

    #[test]
    fn devices_claimed_through_dra_are_attributed_like_device_plugin_ones() {
        use crate::proto::{CdiDevice, DynamicResource};
        let claimed = |driver: &str, device: &str, cdi: &[&str]| ClaimResource {
            cdi_devices: cdi
                .iter()
                .map(|n| CdiDevice {
                    name: n.to_string(),
                })
                .collect(),
            driver_name: driver.into(),
            pool_name: "node-1".into(),
            device_name: device.into(),
        };
        let response = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "train".into(),
                namespace: "ml".into(),
                containers: vec![ContainerResources {
                    name: "main".into(),
                    devices: Vec::new(),
                    dynamic_resources: vec![DynamicResource {
                        claim_name: "gpus".into(),
                        claim_namespace: "ml".into(),
                        claim_resources: vec![
                            claimed("gpu.nvidia.com", "gpu-3", &[]),
                            claimed("gpu.nvidia.com", "GPU-9f", &[]),
                            claimed("gpu.nvidia.com", "mystery", &["nvidia.com/gpu=0:2"]),
                            claimed("gpu.nvidia.com", "mystery", &["k8s.gpu.nvidia.com/claim=x"]),
                            claimed("example.com/nic", "gpu-5", &["nvidia.com/gpu=5"]),
                        ],
                    }],
                }],
            }],
        };
        let nvidia = ["gpu.nvidia.com".to_string()];
        let pairs = attribution(&response, &[], &nvidia);
        let devices: Vec<_> = pairs.iter().map(|(d, _)| d.clone()).collect();
        assert_eq!(
            devices,
            [
                DeviceRef::Index {
                    gpu: 3,
                    gpu_instance: None
                },
                DeviceRef::Uuid("GPU-9f".into()),
                DeviceRef::Index {
                    gpu: 0,
                    gpu_instance: Some(2)
                },
            ],
            "another driver's devices and unnamed ones are not GPUs"
        );
        // The driver list decides: another driver's claims count once listed, none without.
        let both = ["gpu.nvidia.com".to_string(), "example.com/nic".to_string()];
        assert_eq!(attribution(&response, &[], &both).len(), 4);
        assert!(attribution(&response, &[], &[]).is_empty());
        assert!(pairs.iter().all(|(_, h)| *h
            == Holder::Pod {
                namespace: "ml".into(),
                pod: "train".into(),
                container: "main".into(),
                labels: Default::default(),
            }));
    }
}
