//! A fake kubelet for tests: a real tonic server of our pod-resources definition on a unix
//! socket, answering `List` with whatever the test last set.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use crate::proto::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use crate::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, CdiDevice, ClaimResource,
    ContainerDevices, ContainerResources, DynamicResource, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};

/// What the fake answers; shared with the test.
#[derive(Debug, Default, Clone)]
pub struct FakeState {
    /// The `List` response.
    pub pods: ListPodResourcesResponse,
    /// Number of `List` calls served.
    pub calls: u64,
}

#[derive(Debug, Clone)]
struct Service(Arc<Mutex<FakeState>>);

#[tonic::async_trait]
impl PodResourcesLister for Service {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        let mut st = self.0.lock().unwrap_or_else(|p| p.into_inner());
        st.calls += 1;
        Ok(Response::new(st.pods.clone()))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Ok(Response::new(AllocatableResourcesResponse::default()))
    }
}

/// A running fake kubelet; stops when dropped.
#[derive(Debug)]
pub struct FakeKubelet {
    /// The socket it listens on.
    pub socket: PathBuf,
    state: Arc<Mutex<FakeState>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FakeKubelet {
    /// Starts serving on `socket` (on a runtime thread of its own).
    pub fn start(socket: &Path) -> std::io::Result<FakeKubelet> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let listener = {
            let _g = runtime.enter();
            UnixListener::bind(socket)?
        };
        let state = Arc::new(Mutex::new(FakeState::default()));
        let service = PodResourcesListerServer::new(Service(Arc::clone(&state)))
            .max_encoding_message_size(usize::MAX);
        runtime.spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(UnixListenerStream::new(listener)),
        );
        Ok(FakeKubelet {
            socket: socket.to_path_buf(),
            state,
            runtime: Some(runtime),
        })
    }

    /// Replaces the pods `List` answers with.
    pub fn set_pods(&self, pods: Vec<PodResources>) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).pods = ListPodResourcesResponse {
            pod_resources: pods,
        };
    }

    /// Replaces the pods `List` answers with, each with its UID, and writes the kubelet's
    /// device-manager checkpoint for them at `checkpoint` (one entry per container and
    /// resource, as the kubelet does; written whole, then renamed into place).
    pub fn set_pods_with_checkpoint(
        &self,
        checkpoint: &Path,
        pods: Vec<(&str, PodResources)>,
    ) -> std::io::Result<()> {
        let entries: Vec<crate::checkpoint::Entry> = pods
            .iter()
            .flat_map(|(uid, pod)| {
                pod.containers.iter().flat_map(move |c| {
                    c.devices.iter().map(move |d| crate::checkpoint::Entry {
                        pod_uid: uid.to_string(),
                        container: c.name.clone(),
                        resource: d.resource_name.clone(),
                        device_ids: d.device_ids.clone(),
                    })
                })
            })
            .collect();
        let tmp = checkpoint.with_extension("tmp");
        std::fs::write(&tmp, crate::checkpoint::to_json(&entries))?;
        std::fs::rename(&tmp, checkpoint)?;
        self.set_pods(pods.into_iter().map(|(_, p)| p).collect());
        Ok(())
    }

    /// `List` calls served so far.
    pub fn calls(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).calls
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// A pod with one container holding `device_ids` of `resource`.
pub fn pod(
    namespace: &str,
    name: &str,
    container: &str,
    resource: &str,
    device_ids: &[&str],
) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: vec![ContainerResources {
            name: container.into(),
            devices: vec![ContainerDevices {
                resource_name: resource.into(),
                device_ids: device_ids.iter().map(|s| s.to_string()).collect(),
                topology: None,
            }],
            dynamic_resources: Vec::new(),
        }],
    }
}

/// A pod with one container holding, through the resource claim `claim`, the devices that
/// `driver` named `device_names` (each with the CDI device `nvidia.com/gpu=NAME`): as the
/// kubelet reports Dynamic Resource Allocation.
pub fn dra_pod(
    namespace: &str,
    name: &str,
    container: &str,
    claim: &str,
    driver: &str,
    device_names: &[&str],
) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: vec![ContainerResources {
            name: container.into(),
            devices: Vec::new(),
            dynamic_resources: vec![DynamicResource {
                claim_name: claim.into(),
                claim_namespace: namespace.into(),
                claim_resources: device_names
                    .iter()
                    .map(|d| ClaimResource {
                        cdi_devices: vec![CdiDevice {
                            name: format!("k8s.{driver}/claim={claim}-{d}"),
                        }],
                        driver_name: driver.into(),
                        pool_name: "node".into(),
                        device_name: d.to_string(),
                    })
                    .collect(),
            }],
        }],
    }
}
