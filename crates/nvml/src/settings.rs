//! Checks of `[nvml]`, the nvml collector's settings table ([`NvmlOptions`]).

use std::time::Duration;

use dgx_pixels_settings::{check_max, check_min, SettingError, MAX_PERIOD};

use crate::NvmlOptions;

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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
