//! Attribution sources: which Kubernetes pod or HPC job holds each GPU and MIG instance.
//!
//! Why a crate of its own: the kubelet client brings gRPC (tonic, prost) that no other part of
//! the exporter needs, and attribution must not depend on any GPU code; it only names devices
//! (`GPU-...`, `MIG-...`, indices) and the store resolves them against the GPU sources' series
//! (see `dgx_pixels_metrics::attribution`).
//!
//! - [`PodResourcesSource`] lists pods from the kubelet pod-resources API v1 over its unix socket
//!   on its own interval. dcgm-exporter lists pods on every scrape, and a response over gRPC's
//!   4 MiB default turned its whole /metrics into a 500; here a scrape never waits on the kubelet,
//!   the limit is configurable (16 MiB by default) and a response above it only marks this source
//!   down (`dgx_pixels_source_up{source="kubernetes"} 0`) while every series is still served,
//!   unattributed.
//! - With `[kubernetes] pod_labels`, [`podlabels`] watches the pods of this node on the API
//!   server on a thread of its own and adds their allow-listed labels to
//!   `dgx_pixels_gpu_pod_info`.
//! - [`HpcJobSource`] reads a directory with one file per GPU listing job ids (dcgm-exporter's
//!   HPC job mapping convention).
//!
//! Both implement [`dgx_pixels_metrics::Source`] and return their findings as the
//! `attribution` of their [`PollOutput`](dgx_pixels_metrics::PollOutput).
#![deny(missing_docs)]

pub mod cap;
pub mod checkpoint;
pub mod collector;
pub mod hpc;
mod settings;
pub use settings::{HpcSettings, KubernetesSettings};
pub mod podlabels;
pub mod pods;

#[cfg(feature = "fake")]
pub mod fake;
#[cfg(feature = "fake")]
pub mod fake_api;

pub use hpc::HpcJobSource;
pub use pods::{PodResourcesOptions, PodResourcesSource};

/// Code generated from `proto/podresources_v1.proto` (our own definition of the kubelet's
/// pod-resources API v1, wire-compatible with it) by tonic-prost-build in `build.rs`.
#[allow(missing_docs, clippy::all, clippy::unwrap_used)]
pub mod proto {
    tonic::include_proto!("v1");
}
