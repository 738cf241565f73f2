//! `[kubernetes]` and `[hpc]`: the settings of the kubernetes and hpc collectors.

use std::path::PathBuf;

use dgx_pixels_settings::SettingError;
use serde::Deserialize;

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
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        let d = PodResourcesOptions::default();
        KubernetesSettings {
            pod_resources_socket: d.socket,
            max_response_bytes: d.max_response_bytes as u64,
            resource_names: d.resource_names,
            dra_drivers: d.dra_drivers,
        }
    }
}

impl KubernetesSettings {
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
        Ok(())
    }
}

/// `[hpc]`: HPC job files.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HpcSettings {
    /// Directory with one file per GPU listing job ids; unset = no hpc source.
    pub job_mapping_dir: Option<PathBuf>,
}
