//! Checks of `[nvml]`, the nvml collector's settings table ([`NvmlOptions`]).

use std::time::Duration;

use dgx_pixels_settings::{check_max, check_min, SettingError, MAX_PERIOD};

use crate::NvmlOptions;

/// Most `[nvml.rails]` pins (a node has a few dozen GPUs at most).
pub const MAX_RAIL_PINS: usize = 64;
/// Longest NIC name in a pin (the kernel's device names are at most 64 bytes).
pub const MAX_NIC_NAME: usize = 64;

/// Most processes per GPU with activity series of their own.
pub const MAX_ACTIVITY_TOP_K: usize = 16;

impl NvmlOptions {
    /// Refuses periods outside their ranges: `slow_interval` from `min_interval` (the
    /// daemon's shortest poll interval) to a day, `xid_quiet_period` up to a day,
    /// `power_sample_interval` 0 (off) or 10 ms to 1 s (faster costs CPU for nothing NVML
    /// refreshes, slower is what the 1 s average already gives) and `power_window` 1 s to
    /// 10 min (it bounds the samples kept per GPU); `process_activity_top_k` 1 to
    /// [`MAX_ACTIVITY_TOP_K`].
    pub fn validate(&self, min_interval: Duration) -> Result<(), SettingError> {
        check_max("nvml.slow_interval", Some(self.slow_interval), MAX_PERIOD)?;
        check_max(
            "nvml.xid_quiet_period",
            Some(self.xid_quiet_period),
            MAX_PERIOD,
        )?;
        check_min("nvml.slow_interval", Some(self.slow_interval), min_interval)?;
        let (interval, window) = (self.power_sample_interval, self.power_window);
        let fmt = |d: Duration| humantime::format_duration(d).to_string();
        if !interval.is_zero()
            && !(Duration::from_millis(10)..=Duration::from_secs(1)).contains(&interval)
        {
            return Err(SettingError::new(
                "nvml.power_sample_interval",
                format!(
                    "{} is outside 10ms to 1s (0s turns fast power sampling off)",
                    fmt(interval)
                ),
            ));
        }
        // Each process costs four series (one in the default profile), the remainder one more.
        if !(1..=MAX_ACTIVITY_TOP_K).contains(&self.process_activity_top_k) {
            return Err(SettingError::new(
                "nvml.process_activity_top_k",
                format!(
                    "{} is outside 1 to {MAX_ACTIVITY_TOP_K}",
                    self.process_activity_top_k
                ),
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&window) {
            return Err(SettingError::new(
                "nvml.power_window",
                format!("{} is outside 1s to 10m", fmt(window)),
            ));
        }
        self.validate_rails()
    }

    /// `[nvml.rails]`: at most [`MAX_RAIL_PINS`] pins, each a PCI address (`0000:07:00.0` or
    /// NVML's `00000000:07:00.0`) to a NIC name of letters, digits, `_`, `-` and `.`; one GPU
    /// pinned once however its address is spelled.
    fn validate_rails(&self) -> Result<(), SettingError> {
        if self.rails.len() > MAX_RAIL_PINS {
            return Err(SettingError::new(
                "nvml.rails",
                format!("{} pins; at most {MAX_RAIL_PINS}", self.rails.len()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (gpu, nic) in &self.rails {
            // Shown escaped and cut: the key is the operator's text, maybe a mistake.
            let shown: String = gpu.chars().take(40).collect();
            let key = format!("nvml.rails.{shown:?}");
            let Some(address) = crate::rail::short_address(gpu) else {
                return Err(SettingError::new(
                    key,
                    "is no PCI address; write the GPU's as NVML or lspci -D shows it, e.g. \"0000:07:00.0\"",
                ));
            };
            if !seen.insert(address) {
                return Err(SettingError::new(key, "pins a GPU pinned already"));
            }
            let name_ok = (1..=MAX_NIC_NAME).contains(&nic.len())
                && nic
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
                && nic != "."
                && nic != "..";
            if !name_ok {
                return Err(SettingError::new(
                    key,
                    format!(
                        "{:?} is no NIC name (class/infiniband's, e.g. \"mlx5_0\": 1 to {MAX_NIC_NAME} letters, digits, '_', '-', '.')",
                        nic.chars().take(MAX_NIC_NAME + 1).collect::<String>()
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43, item 2: `[nvml.rails]` pins are checked, and the error names the key.
    #[test]
    fn rail_pins_are_checked() {
        let min = Duration::from_secs(1);
        let with = |pins: &[(&str, &str)]| NvmlOptions {
            rails: pins
                .iter()
                .map(|(g, n)| (g.to_string(), n.to_string()))
                .collect(),
            ..NvmlOptions::default()
        };
        assert!(
            with(&[("0000:07:00.0", "mlx5_0"), ("00000000:0F:00.0", "mlx5_1")])
                .validate(min)
                .is_ok()
        );
        for (pins, want) in [
            (
                vec![("gpu0", "mlx5_0")],
                "nvml.rails.\"gpu0\": is no PCI address",
            ),
            (
                vec![("0000:07:00.0", "")],
                "nvml.rails.\"0000:07:00.0\": \"\" is no NIC name",
            ),
            (vec![("0000:07:00.0", "../mlx5_0")], "is no NIC name"),
            (vec![("0000:07:00.0", "..")], "is no NIC name"),
            (
                vec![("0000:07:00.0", "mlx5_0"), ("00000000:07:00.0", "mlx5_1")],
                "pins a GPU pinned already",
            ),
        ] {
            let e = with(&pins).validate(min).unwrap_err().to_string();
            assert!(e.contains(want), "{pins:?}: {e}");
        }
        let many: Vec<(String, String)> = (0..=MAX_RAIL_PINS)
            .map(|i| (format!("0000:{i:02x}:00.0"), "mlx5_0".to_string()))
            .collect();
        let o = NvmlOptions {
            rails: many.into_iter().collect(),
            ..NvmlOptions::default()
        };
        assert!(o
            .validate(min)
            .unwrap_err()
            .to_string()
            .contains("at most 64"));
    }

    #[test]
    fn process_activity_top_k_is_bounded() {
        let min = Duration::from_secs(1);
        for (k, ok) in [
            (0, false),
            (1, true),
            (MAX_ACTIVITY_TOP_K, true),
            (17, false),
        ] {
            let o = NvmlOptions {
                process_activity_top_k: k,
                ..NvmlOptions::default()
            };
            let r = o.validate(min);
            assert_eq!(r.is_ok(), ok, "{k}: {r:?}");
            if let Err(e) = r {
                assert!(e.to_string().contains("nvml.process_activity_top_k"), "{e}");
            }
        }
    }
}
