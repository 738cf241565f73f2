//! `[health]`: the settings of the health collector (docs/health.md).

use std::time::Duration;

use dgx_pixels_settings::{check_max, check_min, SettingError, MAX_PERIOD};
use serde::Deserialize;

use crate::{HealthTracker, IdleTracker, XidPolicy};

/// `[health]`: the GPU health verdict (docs/health.md).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSettings {
    /// A transient condition (a slowdown, an application fault) clears after this long
    /// without recurring [default: 5m].
    #[serde(deserialize_with = "dgx_pixels_settings::optional_duration")]
    pub clear_after: Option<Duration>,
    /// Utilization (0-1) under which a GPU held by a pod or job counts as idle [default: 0.05].
    pub idle_utilization: Option<f64>,
    /// How long a held GPU must stay idle before its idle time counts [default: 10m].
    #[serde(deserialize_with = "dgx_pixels_settings::optional_duration")]
    pub idle_after: Option<Duration>,
    /// `[health.xid_policy]`: per XID code or range, ignore it or wait for a count within a
    /// window before the catalog's verdict applies [default: none, every code counts at once].
    pub xid_policy: XidPolicy,
}

impl HealthSettings {
    /// Shortest `clear_after` accepted: shorter would clear a condition between two polls.
    pub const MIN_CLEAR_AFTER: Duration = Duration::from_secs(10);

    /// The quiet period in force.
    pub fn clear_after(&self) -> Duration {
        self.clear_after
            .unwrap_or(HealthTracker::DEFAULT_CLEAR_AFTER)
    }

    /// The idle threshold in force.
    pub fn idle_utilization(&self) -> f64 {
        self.idle_utilization
            .unwrap_or(IdleTracker::DEFAULT_THRESHOLD)
    }

    /// The idle grace period in force.
    pub fn idle_after(&self) -> Duration {
        self.idle_after.unwrap_or(IdleTracker::DEFAULT_AFTER)
    }

    /// Bounds: a quiet period under 10 s or over 30 days, an idle grace over 30 days, an idle
    /// threshold outside (0, 1].
    pub fn validate(&self) -> Result<(), SettingError> {
        for (key, d) in [
            ("health.clear_after", self.clear_after),
            ("health.idle_after", self.idle_after),
        ] {
            check_max(key, d, 30 * MAX_PERIOD)?;
        }
        check_min(
            "health.clear_after",
            self.clear_after,
            HealthSettings::MIN_CLEAR_AFTER,
        )?;
        match self.idle_utilization {
            Some(u) if !(u > 0.0 && u <= 1.0) => Err(SettingError::new(
                "health.idle_utilization",
                format!("{u} is outside (0, 1]"),
            )),
            _ => Ok(()),
        }
    }
}
