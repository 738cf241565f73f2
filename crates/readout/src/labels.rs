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
        /// NVLink 5 (Blackwell) receive errors (`NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS`). The
        /// NVLink 5 types replace the four above on Blackwell, whose driver answers the older
        /// per-link error counter call "not supported".
        Receive => "receive",
        /// NVLink 5 local link integrity errors (`..._LOCAL_LINK_INTEGRITY_ERRORS`).
        LinkIntegrity => "link_integrity",
        /// NVLink 5 transmitted packets discarded (`..._XMIT_DISCARDS`).
        TransmitDiscard => "transmit_discard",
        /// NVLink 5 link recoveries that failed (`..._LINK_RECOVERY_FAILED_EVENTS`).
        RecoveryFailed => "recovery_failed",
        /// NVLink 5 errors left after forward error correction (`..._EFFECTIVE_ERRORS`).
        Effective => "effective",
        /// NVLink 5 symbol errors before forward error correction (`..._SYMBOL_ERRORS`).
        Symbol => "symbol",
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

    /// `state` of `dgx_pixels_gpu_fabric_state_info`: how far the GPU's registration with the
    /// NVLink fabric (the NVLink switches of an NVL72 rack) has come
    /// (`nvmlGpuFabricInfoV_t.state`; NVML's `NOT_SUPPORTED` is no series at all).
    FabricState {
        /// `NVML_GPU_FABRIC_STATE_NOT_STARTED`.
        NotStarted => "not_started",
        /// `NVML_GPU_FABRIC_STATE_IN_PROGRESS`.
        InProgress => "in_progress",
        /// `NVML_GPU_FABRIC_STATE_COMPLETED`.
        Completed => "completed",
    }

    /// `flag` of `dgx_pixels_gpu_fabric_health`: the conditions NVML's fabric health mask
    /// reports (`nvmlGpuFabricInfoV_t.healthMask`, one field per flag).
    FabricHealthFlag {
        /// The GPU's NVLink bandwidth is degraded (`..._DEGRADED_BW_TRUE`).
        DegradedBandwidth => "degraded_bandwidth",
        /// The fabric is recovering a route (`..._ROUTE_RECOVERY_TRUE`).
        RouteRecovery => "route_recovery",
        /// A route is unhealthy (`..._ROUTE_UNHEALTHY_TRUE`).
        RouteUnhealthy => "route_unhealthy",
        /// Recovering from an access timeout (`..._ACCESS_TIMEOUT_RECOVERY_TRUE`).
        AccessTimeoutRecovery => "access_timeout_recovery",
        /// The fabric is configured wrongly for this GPU (`..._INCORRECT_CONFIGURATION_*`
        /// other than `NONE`: system GUID, chassis serial, no partition, too few NVLinks).
        IncorrectConfiguration => "incorrect_configuration",
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

impl NvlinkErrorType {
    /// The types the per-link error counter call (`nvmlDeviceGetNvLinkErrorCounter`) reads, up
    /// to Hopper.
    pub const LEGACY: [NvlinkErrorType; 4] = [
        NvlinkErrorType::Replay,
        NvlinkErrorType::Recovery,
        NvlinkErrorType::CrcFlit,
        NvlinkErrorType::CrcData,
    ];

    /// The NVLink 5 types, read as per-link field values on Blackwell. Six of NVML's counters,
    /// not all of them: the traffic counts are not errors, and the series budget (60 per GPU)
    /// leaves room for six types in place of the four legacy ones.
    pub const NVLINK5: [NvlinkErrorType; 6] = [
        NvlinkErrorType::Receive,
        NvlinkErrorType::LinkIntegrity,
        NvlinkErrorType::TransmitDiscard,
        NvlinkErrorType::RecoveryFailed,
        NvlinkErrorType::Effective,
        NvlinkErrorType::Symbol,
    ];
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

impl FabricState {
    /// The state for NVML's value (1 not started, 2 in progress, 3 completed); `None` for
    /// `NOT_SUPPORTED` (0) or a value this build does not know.
    pub fn from_nvml(value: u8) -> Option<FabricState> {
        FabricState::ALL
            .get(usize::from(value).checked_sub(1)?)
            .copied()
    }

    /// NVML's value of the state.
    pub fn to_nvml(self) -> u8 {
        self as u8 + 1
    }
}

impl FabricHealthFlag {
    /// `(shift, mask)` of the flag's field in NVML's health mask (`NVML_GPU_FABRIC_HEALTH_MASK_
    /// SHIFT_*` and `..._WIDTH_*`, which the header names a width but which is the mask).
    pub fn nvml_field(self) -> (u32, u32) {
        match self {
            FabricHealthFlag::DegradedBandwidth => (0, 0x3),
            FabricHealthFlag::RouteRecovery => (2, 0x3),
            FabricHealthFlag::RouteUnhealthy => (4, 0x3),
            FabricHealthFlag::AccessTimeoutRecovery => (6, 0x3),
            FabricHealthFlag::IncorrectConfiguration => (8, 0xf),
        }
    }

    /// The flags a health mask reports, with whether each holds; a flag whose field says
    /// `NOT_SUPPORTED` (0) is left out. The true/false fields are 1 = true, 2 = false; the
    /// configuration field is 1 = none, 2..=5 a wrong configuration.
    pub fn decode(mask: u32) -> Vec<(FabricHealthFlag, bool)> {
        FabricHealthFlag::ALL
            .iter()
            .filter_map(|&flag| {
                let (shift, m) = flag.nvml_field();
                let v = (mask >> shift) & m;
                let holds = match (flag, v) {
                    (_, 0) => return None,
                    (FabricHealthFlag::IncorrectConfiguration, v) => v != 1,
                    (_, 1) => true,
                    (_, 2) => false,
                    _ => return None,
                };
                Some((flag, holds))
            })
            .collect()
    }

    /// The health mask that reports `flags` (flags not listed: `NOT_SUPPORTED`); a wrong
    /// configuration is encoded as too few NVLinks (5).
    pub fn encode(flags: &[(FabricHealthFlag, bool)]) -> u32 {
        flags.iter().fold(0, |mask, &(flag, holds)| {
            let (shift, _) = flag.nvml_field();
            let v = match (flag, holds) {
                (FabricHealthFlag::IncorrectConfiguration, true) => 5,
                (FabricHealthFlag::IncorrectConfiguration, false) => 1,
                (_, true) => 1,
                (_, false) => 2,
            };
            mask | (v << shift)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabric_values_round_trip_through_nvml_encodings() {
        assert_eq!(FabricState::from_nvml(0), None);
        assert_eq!(FabricState::from_nvml(3), Some(FabricState::Completed));
        assert_eq!(FabricState::from_nvml(4), None);
        for s in FabricState::ALL {
            assert_eq!(FabricState::from_nvml(s.to_nvml()), Some(s));
        }
        // The header's values: degraded bandwidth true (1 << 0), route unhealthy false
        // (2 << 4), configuration "insufficient NVLinks" (5 << 8), the others not supported.
        let mask = 1 | (2 << 4) | (5 << 8);
        assert_eq!(
            FabricHealthFlag::decode(mask),
            vec![
                (FabricHealthFlag::DegradedBandwidth, true),
                (FabricHealthFlag::RouteUnhealthy, false),
                (FabricHealthFlag::IncorrectConfiguration, true),
            ]
        );
        assert_eq!(
            FabricHealthFlag::encode(&FabricHealthFlag::decode(mask)),
            mask
        );
        assert_eq!(FabricHealthFlag::decode(0), vec![]);
        // Configuration "none" is healthy.
        assert_eq!(
            FabricHealthFlag::decode(1 << 8),
            vec![(FabricHealthFlag::IncorrectConfiguration, false)]
        );
    }

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

    #[test]
    fn legacy_and_nvlink5_types_split_every_type_once() {
        let mut both: Vec<_> = NvlinkErrorType::LEGACY.to_vec();
        both.extend(NvlinkErrorType::NVLINK5);
        assert_eq!(both, NvlinkErrorType::ALL.to_vec());
    }
}
