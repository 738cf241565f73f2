//! The label values that name the parts of a GPU reading: clock domains, temperature sensors,
//! ECC counters, throttle reasons and policies, memory repair causes, NVLink error types.
//!
//! Each is stated once here, as an enum whose [`as_str`](ClockDomain::as_str) is its one
//! spelling. The NVML mapping (`push_gpu_samples`), the DCGM field table, the simulator and the
//! fake libraries name values through these enums, so the same condition has the same label
//! whichever source reports it; a test in `dgx-pixels-metrics` compares them with the values
//! the catalog's help texts list.

/// Defines a label's values: the enum, `ALL` (every value, in export order), `as_str` (the
/// label value) and `Display`.
macro_rules! label_values {
    ($(
        $(#[$doc:meta])*
        $name:ident {
            $($(#[$vdoc:meta])* $variant:ident => $value:literal,)+
        }
    )+) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every value, in the order their series are exported.
            pub const ALL: [$name; [$($value),+].len()] = [$($name::$variant),+];

            /// The label value.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $value,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )+};
}

label_values! {
    /// `clock` of `dgx_pixels_gpu_clock_hertz` and `dgx_pixels_gpu_clock_max_hertz`.
    ClockDomain {
        /// Graphics clock.
        Graphics => "graphics",
        /// Streaming multiprocessor clock.
        Sm => "sm",
        /// Memory clock.
        Memory => "memory",
        /// Video (encoder and decoder) clock.
        Video => "video",
    }

    /// `sensor` of `dgx_pixels_gpu_temperature_celsius`.
    TemperatureSensor {
        /// The GPU die.
        Gpu => "gpu",
        /// The memory (HBM).
        Memory => "memory",
    }

    /// `error_type` of `dgx_pixels_gpu_ecc_errors_total`.
    EccErrorType {
        /// Corrected (single-bit) errors.
        Corrected => "corrected",
        /// Uncorrected (double-bit) errors.
        Uncorrected => "uncorrected",
    }

    /// `counter` of `dgx_pixels_gpu_ecc_errors_total`.
    EccCounter {
        /// Since the driver loaded.
        Volatile => "volatile",
        /// Over the board's lifetime.
        Aggregate => "aggregate",
    }

    /// `reason` of `dgx_pixels_gpu_throttle_reason`: NVML's clock event reasons.
    ThrottleReason {
        /// The GPU is idle and clocks are lowered.
        GpuIdle => "gpu_idle",
        /// The application clocks setting.
        ApplicationsClocksSetting => "applications_clocks_setting",
        /// Software power cap (the power limit).
        SwPowerCap => "sw_power_cap",
        /// Hardware slowdown.
        HwSlowdown => "hw_slowdown",
        /// Sync boost.
        SyncBoost => "sync_boost",
        /// Software thermal slowdown.
        SwThermalSlowdown => "sw_thermal_slowdown",
        /// Hardware thermal slowdown.
        HwThermalSlowdown => "hw_thermal_slowdown",
        /// Hardware power brake slowdown.
        HwPowerBrakeSlowdown => "hw_power_brake_slowdown",
    }

    /// `policy` of `dgx_pixels_gpu_throttle_violation_seconds_total`: NVML's performance
    /// policies.
    ViolationPolicy {
        /// Held down by the power limit.
        Power => "power",
        /// Held down by temperature.
        Thermal => "thermal",
        /// Held down by sync boost.
        SyncBoost => "sync_boost",
        /// Held down by the board power limit.
        BoardLimit => "board_limit",
        /// Held down because of low utilization.
        LowUtilization => "low_utilization",
        /// Held down by the board reliability limit.
        Reliability => "reliability",
    }

    /// `cause` of `dgx_pixels_gpu_retired_pages`.
    RetiredPageCause {
        /// Retired after multiple single-bit errors.
        SingleBitEcc => "single_bit_ecc",
        /// Retired after a double-bit error.
        DoubleBitEcc => "double_bit_ecc",
    }

    /// `cause` of `dgx_pixels_gpu_remapped_rows`.
    RemappedRowCause {
        /// Remapped after correctable errors.
        Correctable => "correctable",
        /// Remapped after uncorrectable errors.
        Uncorrectable => "uncorrectable",
    }

    /// `error_type` of `dgx_pixels_nvlink_errors_total`.
    NvlinkErrorType {
        /// Data link replays.
        Replay => "replay",
        /// Link recoveries.
        Recovery => "recovery",
        /// Flow-control CRC errors.
        CrcFlit => "crc_flit",
        /// Data CRC errors.
        CrcData => "crc_data",
    }

    /// `action` of `dgx_pixels_gpu_recovery_action_info`: what the driver says the GPU needs
    /// (NVML's `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION` field), spelled as the health verdict's
    /// actions.
    RecoveryAction {
        /// Nothing (`NVML_GPU_RECOVERY_ACTION_NONE`).
        None => "none",
        /// Reset the GPU (`..._GPU_RESET`).
        GpuReset => "reset_gpu",
        /// Reboot the node (`..._NODE_REBOOT`).
        NodeReboot => "reboot",
        /// Drain peer-to-peer traffic (`..._DRAIN_P2P`).
        DrainP2p => "drain_p2p",
        /// Drain, then reset (`..._DRAIN_AND_RESET`).
        DrainAndReset => "drain_and_reset",
    }

    /// `reading` of `dgx_pixels_gpu_power_sample_info`: which NVML reading the fast power
    /// samples are.
    PowerReading {
        /// Instantaneous board power (`NVML_FI_DEV_POWER_INSTANT`).
        Instant => "instant",
        /// The driver's averaged power (`nvmlDeviceGetPowerUsage`, a 1 s average on Ampere
        /// and newer), where the instantaneous field is not supported.
        Average => "average",
    }
}

impl RecoveryAction {
    /// The action for NVML's field value (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P,
    /// 4 drain and reset); `None` for a value this build does not know.
    pub fn from_nvml(value: u32) -> Option<RecoveryAction> {
        RecoveryAction::ALL
            .get(usize::try_from(value).ok()?)
            .copied()
    }

    /// NVML's field value for the action.
    pub fn to_nvml(self) -> u32 {
        self as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_value_once_in_declaration_order() {
        assert_eq!(
            ClockDomain::ALL.map(ClockDomain::as_str),
            ["graphics", "sm", "memory", "video"]
        );
        assert_eq!(ThrottleReason::ALL.len(), 8);
        assert_eq!(
            ThrottleReason::HwPowerBrakeSlowdown.to_string(),
            "hw_power_brake_slowdown"
        );
        // Usable where a label slice must be constant (the DCGM field table).
        const SM: &[&str] = &[ClockDomain::Sm.as_str()];
        assert_eq!(SM, ["sm"]);
    }
}
