//! `[kubernetes]` and `[hpc]`: the settings of the kubernetes and hpc collectors.

use std::path::PathBuf;

use dgx_pixels_settings::SettingError;
use serde::Deserialize;

use crate::podlabels::{AllowList, ApiServer, PodLabelOptions};
use crate::PodResourcesOptions;

/// Most DRA driver names `[kubernetes] dra_drivers` takes (each claim is matched against all).
pub const MAX_DRA_DRIVERS: usize = 16;

/// `[kubernetes]`: the kubelet pod-resources source (`--collector.kubernetes`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesSettings {
    /// The kubelet's pod-resources unix socket.
    pub pod_resources_socket: PathBuf,
    /// Largest `List` response accepted, in bytes.
    pub max_response_bytes: u64,
    /// Resource names whose devices are GPUs or MIG instances; a trailing `*` matches any
    /// suffix.
    pub resource_names: Vec<String>,
    /// DRA drivers whose claimed devices are GPUs (an empty list leaves DRA claims out).
    pub dra_drivers: Vec<String>,
    /// The kubelet's device-manager checkpoint, read (at most 4 MiB, read-only) to label each
    /// process on a GPU that several pods share with its own pod; empty = off.
    pub device_checkpoint: PathBuf,
    /// Pod label keys copied onto `dgx_pixels_gpu_pod_info` as `label_<key>` (a list, or one
    /// string of comma-separated keys as the flag gives it); empty = off, and the API server is
    /// never asked.
    #[serde(deserialize_with = "key_list")]
    pub pod_labels: Vec<String>,
    /// This node's name, whose pods are watched; empty = the `NODE_NAME` environment variable
    /// (the Helm chart sets it from `spec.nodeName`).
    pub node_name: String,
    /// The API server (`https://HOST:PORT`, or `http://` to a loopback address); empty = in
    /// cluster (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`).
    pub api_server: String,
    /// The service account's directory (`token`, re-read on each request, and `ca.crt`).
    pub service_account_dir: PathBuf,
}

/// A list of strings, or one string of comma-separated items (a flag's value).
fn key_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Keys {
        List(Vec<String>),
        Text(String),
    }
    Ok(match Keys::deserialize(d)? {
        Keys::List(list) => list,
        Keys::Text(text) => text
            .split(',')
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .collect(),
    })
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        let d = PodResourcesOptions::default();
        KubernetesSettings {
            pod_resources_socket: d.socket,
            max_response_bytes: d.max_response_bytes as u64,
            resource_names: d.resource_names,
            dra_drivers: d.dra_drivers,
            device_checkpoint: d.checkpoint.unwrap_or_default(),
            pod_labels: Vec::new(),
            node_name: String::new(),
            api_server: String::new(),
            service_account_dir: PathBuf::from(crate::podlabels::client::SERVICE_ACCOUNT_DIR),
        }
    }
}

impl KubernetesSettings {
    /// The checkpoint to read, `None` when `device_checkpoint` is empty.
    pub fn checkpoint(&self) -> Option<PathBuf> {
        (!self.device_checkpoint.as_os_str().is_empty()).then(|| self.device_checkpoint.clone())
    }

    /// Refuses a response bound of 0 or one that does not fit in memory, an empty list of
    /// resource names, and an empty DRA driver name or more than [`MAX_DRA_DRIVERS`] of them.
    pub fn validate(&self) -> Result<(), SettingError> {
        if self.max_response_bytes == 0 || usize::try_from(self.max_response_bytes).is_err() {
            return Err(SettingError::new(
                "kubernetes.max_response_bytes",
                "must be > 0 and fit in memory",
            ));
        }
        if self.resource_names.is_empty() || self.resource_names.iter().any(|r| r.trim().is_empty())
        {
            return Err(SettingError::new(
                "kubernetes.resource_names",
                "must list at least one non-empty resource name",
            ));
        }
        if self.dra_drivers.iter().any(|d| d.trim().is_empty()) {
            return Err(SettingError::new(
                "kubernetes.dra_drivers",
                "a driver name must not be empty ([] leaves DRA claims out)",
            ));
        }
        if self.dra_drivers.len() > MAX_DRA_DRIVERS {
            return Err(SettingError::new(
                "kubernetes.dra_drivers",
                format!("at most {MAX_DRA_DRIVERS} drivers"),
            ));
        }
        AllowList::new(&self.pod_labels)?;
        if !self.node_name.is_empty() {
            check_node_name(&self.node_name)
                .map_err(|m| SettingError::new("kubernetes.node_name", m))?;
        }
        if !self.api_server.is_empty() {
            ApiServer::new(&self.api_server, &self.service_account_dir)
                .map_err(|m| SettingError::new("kubernetes.api_server", m))?;
        }
        Ok(())
    }

    /// The pod-label watch these settings ask for: `None` when `pod_labels` is empty;
    /// an error naming the key when the node or the API server cannot be named.
    pub fn pod_label_options(&self) -> Result<Option<PodLabelOptions>, SettingError> {
        let allow = AllowList::new(&self.pod_labels)?;
        if allow.is_empty() {
            return Ok(None);
        }
        let node = if self.node_name.is_empty() {
            std::env::var("NODE_NAME").unwrap_or_default()
        } else {
            self.node_name.clone()
        };
        if node.is_empty() {
            return Err(SettingError::new(
                "kubernetes.node_name",
                "pod_labels needs this node's name: set it or the NODE_NAME environment variable",
            ));
        }
        check_node_name(&node).map_err(|m| SettingError::new("kubernetes.node_name", m))?;
        let server = ApiServer::new(&self.api_server, &self.service_account_dir)
            .map_err(|m| SettingError::new("kubernetes.api_server", m))?;
        let mut o = PodLabelOptions::new(allow, node, server);
        // Checked by validate to fit.
        o.max_list_bytes = usize::try_from(self.max_response_bytes).unwrap_or(usize::MAX);
        Ok(Some(o))
    }
}

/// A node name is a DNS subdomain (it goes into the field selector as it is).
fn check_node_name(name: &str) -> Result<(), String> {
    let ok = name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a node name (a lower-case DNS subdomain)"
        ))
    }
}

/// `[hpc]`: HPC job files.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HpcSettings {
    /// Directory with one file per GPU listing job ids; unset = no hpc source.
    pub job_mapping_dir: Option<PathBuf>,
}
