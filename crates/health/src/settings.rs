//! `[health]`: the settings of the health collector (docs/health.md).

use std::path::PathBuf;
use std::time::Duration;

use dgx_pixels_settings::{check_max, check_min, SettingError, MAX_PERIOD};
use serde::Deserialize;

use crate::{ExpectedGpus, HealthTracker, IdleTracker, XidPolicy};

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
    /// GPUs the node should have, or `"discover"`: those visible at the first start, kept in
    /// `state_directory`; fewer visible is the node rule `gpu_count_below_expected` [default:
    /// unset, no node verdict].
    pub expected_gpus: Option<ExpectedGpus>,
    /// Where `expected_gpus = "discover"` keeps the count (file `expected-gpus`) [default: unset].
    pub state_directory: Option<PathBuf>,
}

impl HealthSettings {
    /// Most GPUs `expected_gpus` accepts (a node with more is not a node).
    pub const MAX_EXPECTED_GPUS: u32 = 1024;

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
        match self.expected_gpus {
            Some(ExpectedGpus::Count(n))
                if !(1..=HealthSettings::MAX_EXPECTED_GPUS).contains(&n) =>
            {
                return Err(SettingError::new(
                    "health.expected_gpus",
                    format!("{n} is outside 1..={}", HealthSettings::MAX_EXPECTED_GPUS),
                ));
            }
            Some(ExpectedGpus::Discover) if self.state_directory.is_none() => {
                return Err(SettingError::new(
                    "health.expected_gpus",
                    "\"discover\" needs [health] state_directory, where the count is kept",
                ));
            }
            _ => {}
        }
        if self
            .state_directory
            .as_ref()
            .is_some_and(|d| !d.is_absolute())
        {
            return Err(SettingError::new(
                "health.state_directory",
                "expected an absolute path",
            ));
        }
        match self.idle_utilization {
            Some(u) if !(u > 0.0 && u <= 1.0) => Err(SettingError::new(
                "health.idle_utilization",
                format!("{u} is outside (0, 1]"),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_gpus_is_a_count_of_a_node() {
        let with = |n| HealthSettings {
            expected_gpus: Some(ExpectedGpus::Count(n)),
            ..HealthSettings::default()
        };
        assert!(with(1).validate().is_ok());
        assert!(with(HealthSettings::MAX_EXPECTED_GPUS).validate().is_ok());
        for bad in [0, HealthSettings::MAX_EXPECTED_GPUS + 1] {
            let e = with(bad).validate().unwrap_err().to_string();
            assert!(e.contains("health.expected_gpus"), "{e}");
        }
        assert!(HealthSettings::default().validate().is_ok());
    }

    #[test]
    fn expected_gpus_is_a_number_or_discover_with_a_state_directory() {
        let parse = |text: &str| toml::from_str::<HealthSettings>(text);
        let s = parse("expected_gpus = 8").unwrap();
        assert_eq!(s.expected_gpus, Some(ExpectedGpus::Count(8)));
        // Zero, negative or past u32: refused with the bound.
        for (text, n) in [
            ("expected_gpus = 0", "0"),
            ("expected_gpus = -1", "-1"),
            ("expected_gpus = 4294967296", "4294967296"),
        ] {
            let e = match parse(text) {
                Ok(s) => s.validate().unwrap_err().to_string(),
                Err(e) => e.to_string(),
            };
            assert!(
                e.contains(&format!("{n} is outside 1..=1024")),
                "{text}: {e}"
            );
        }
        let e = parse("expected_gpus = \"all\"").unwrap_err().to_string();
        assert!(
            e.contains("expected a number of GPUs or \"discover\", got \"all\""),
            "{e}"
        );
        let s = parse("expected_gpus = \"discover\"").unwrap();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("needs [health] state_directory"), "{e}");
        let s = parse("expected_gpus = \"discover\"\nstate_directory = \"/var/lib/x\"").unwrap();
        assert_eq!(s.expected_gpus, Some(ExpectedGpus::Discover));
        assert!(s.validate().is_ok());
        let s = parse("state_directory = \"relative\"").unwrap();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("health.state_directory"), "{e}");
    }
}
