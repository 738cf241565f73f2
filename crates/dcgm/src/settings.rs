//! `[dcgm]`: the settings of the dcgm collector, as the daemon's config file gives them.

use std::path::PathBuf;

use dgx_pixels_settings::SettingError;
use serde::Deserialize;

/// `[dcgm]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DcgmSettings {
    /// Path of libdcgm.
    pub library: Option<PathBuf>,
    /// Remote host engine, HOST:PORT or a unix socket path; unset = embedded.
    pub hostengine: Option<String>,
    /// A dcgm-exporter field-list CSV (`DCGM_FI_NAME, type, help`) replacing the default fields.
    pub field_list: Option<PathBuf>,
    /// Whether DCGM provides the device metrics (utilization, memory, power, ...) instead of
    /// NVML; default: only when the nvml collector is disabled. Profiling metrics always come
    /// from DCGM.
    pub device_metrics: Option<bool>,
}

impl DcgmSettings {
    /// Checks what can be checked without the filesystem (the field list is read by the
    /// daemon, which reads it again to plan).
    pub fn validate(&self) -> Result<(), SettingError> {
        match &self.hostengine {
            Some(address) => check_hostengine(address),
            None => Ok(()),
        }
    }
}

/// Checks `dcgm.hostengine`: a unix socket path, or HOST[:PORT].
fn check_hostengine(address: &str) -> Result<(), SettingError> {
    let bad = |why: &str| {
        SettingError::new(
            "dcgm.hostengine",
            format!("{address:?} {why}; expected HOST:PORT or a unix socket path"),
        )
    };
    if address.starts_with('/') {
        return Ok(());
    }
    let (host, port) = match address.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (address, None),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(bad("has no host"));
    }
    if port.is_some_and(|p| p.parse::<u16>().map_or(true, |p| p == 0)) {
        return Err(bad("has an invalid port"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_engine_addresses_are_checked() {
        let with = |h: &str| DcgmSettings {
            hostengine: Some(h.into()),
            ..DcgmSettings::default()
        };
        for ok in ["/run/nvidia-dcgm.sock", "host", "10.0.0.1:5555"] {
            assert_eq!(with(ok).validate(), Ok(()), "{ok}");
        }
        for (bad, why) in [
            (":5555", "has no host"),
            ("h:0", "invalid port"),
            ("h:x", "invalid port"),
        ] {
            let e = with(bad).validate().unwrap_err();
            assert!(
                e.key == "dcgm.hostengine" && e.message.contains(why),
                "{bad}: {e}"
            );
        }
    }
}
