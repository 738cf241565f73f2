//! Checks of `[nvml]`, the nvml collector's settings table ([`NvmlOptions`]).

use std::time::Duration;

use dgx_pixels_settings::{check_max, check_min, SettingError, MAX_PERIOD};

use crate::NvmlOptions;

impl NvmlOptions {
    /// Refuses periods outside their ranges: `slow_interval` from `min_interval` (the
    /// daemon's shortest poll interval) to a day, `xid_quiet_period` up to a day,
    /// `power_sample_interval` 0 (off) or 10 ms to 1 s (faster costs CPU for nothing NVML
    /// refreshes, slower is what the 1 s average already gives) and `power_window` 1 s to
    /// 10 min (it bounds the samples kept per GPU).
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
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&window) {
            return Err(SettingError::new(
                "nvml.power_window",
                format!("{} is outside 1s to 10m", fmt(window)),
            ));
        }
        Ok(())
    }
}
