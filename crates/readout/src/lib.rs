//! One GPU reading model: what a poll read from one GPU ([`GpuReadout`]), its static identity
//! ([`GpuIdentity`]), and the label values that name its parts ([`labels`]).
//!
//! Why a crate of its own: every GPU source fills these types and one mapping turns them into
//! series (`dgx_pixels_metrics::gpu::push_gpu_samples`). The NVML source fills them from the
//! driver; the simulator (`dgx-pixels-sim`) produces them directly, and the fake NVML and DCGM
//! libraries answer from them. The simulator and the fakes need the types but not the metric
//! catalog or the encoders, so the types live here, with no dependencies, and
//! `dgx-pixels-metrics` re-exports them.
//!
//! Values are in base units (bytes, watts, joules, celsius, hertz, seconds, ratios in 0..1).
//! `None` means the GPU does not support the reading or did not return it; such readings are
//! omitted, never exported as 0.
#![deny(missing_docs)]

use std::collections::BTreeMap;

pub mod labels;
pub mod power;

pub use power::{PowerSamples, PowerTally, POWER_BUCKETS_WATTS};

use labels::{
    ClockDomain, EccCounter, EccErrorType, NvlinkErrorType, RemappedRowCause, RetiredPageCause,
    TemperatureSensor, ThrottleReason, ViolationPolicy,
};

/// Static facts about a GPU, read once at discovery.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuIdentity {
    /// Index as enumerated by the driver.
    pub index: u32,
    /// `GPU-...` UUID.
    pub uuid: String,
    /// Product name, e.g. "NVIDIA H100 80GB HBM3".
    pub model: String,
    /// Board serial number.
    pub serial: String,
    /// PCI bus id, e.g. "00000000:18:00.0".
    pub pci_bus_id: String,
    /// VBIOS version.
    pub vbios_version: String,
    /// Driver version.
    pub driver_version: String,
    /// Highest CUDA version the driver supports, e.g. "12.4".
    pub cuda_driver_version: String,
    /// Minor number of `/dev/nvidiaN`.
    pub minor_number: u32,
}

/// Formats a CUDA version as NVML encodes it (1000 × major + 10 × minor, e.g. 12040) as "12.4".
pub fn cuda_version_string(v: u32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// One MIG instance's readings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigReadout {
    /// GPU instance id.
    pub gpu_instance: u32,
    /// Compute instance id.
    pub compute_instance: u32,
    /// Profile name, e.g. "3g.40gb".
    pub profile: String,
    /// `MIG-...` UUID.
    pub mig_uuid: String,
    /// Fraction of time the instance's engines were active.
    pub graphics_engine_active_ratio: Option<f64>,
    /// Memory in use.
    pub memory_used_bytes: Option<f64>,
    /// Memory of the instance.
    pub memory_total_bytes: Option<f64>,
}

/// ECC error totals.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EccTotals {
    /// Corrected since driver load.
    pub volatile_corrected: f64,
    /// Uncorrected since driver load.
    pub volatile_uncorrected: f64,
    /// Corrected over the board's lifetime.
    pub aggregate_corrected: f64,
    /// Uncorrected over the board's lifetime.
    pub aggregate_uncorrected: f64,
}

impl EccTotals {
    /// The total of one error type and counter.
    pub fn get(&self, error_type: EccErrorType, counter: EccCounter) -> f64 {
        match (error_type, counter) {
            (EccErrorType::Corrected, EccCounter::Volatile) => self.volatile_corrected,
            (EccErrorType::Uncorrected, EccCounter::Volatile) => self.volatile_uncorrected,
            (EccErrorType::Corrected, EccCounter::Aggregate) => self.aggregate_corrected,
            (EccErrorType::Uncorrected, EccCounter::Aggregate) => self.aggregate_uncorrected,
        }
    }
}

/// Retired memory pages (GPUs before Ampere; later ones remap rows instead).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RetiredPages {
    /// Pages retired after multiple single-bit errors.
    pub single_bit_ecc: f64,
    /// Pages retired after a double-bit error.
    pub double_bit_ecc: f64,
    /// Pages wait for retirement at the next driver reload.
    pub pending: bool,
}

impl RetiredPages {
    /// Pages retired for one cause.
    pub fn get(&self, cause: RetiredPageCause) -> f64 {
        match cause {
            RetiredPageCause::SingleBitEcc => self.single_bit_ecc,
            RetiredPageCause::DoubleBitEcc => self.double_bit_ecc,
        }
    }
}

/// Row-remapping state (Ampere and later).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RemappedRowsReadout {
    /// Rows remapped after correctable errors.
    pub correctable: f64,
    /// Rows remapped after uncorrectable errors.
    pub uncorrectable: f64,
    /// A remapping waits for the next GPU reset.
    pub pending: bool,
    /// A remapping failed.
    pub failure: bool,
}

impl RemappedRowsReadout {
    /// Rows remapped for one cause.
    pub fn get(&self, cause: RemappedRowCause) -> f64 {
        match cause {
            RemappedRowCause::Correctable => self.correctable,
            RemappedRowCause::Uncorrectable => self.uncorrectable,
        }
    }
}

/// The error counters of one NVLink link, by type ([`NvlinkErrorType`]); `None` for a counter
/// the GPU did not answer. A struct rather than a list: a GPU has up to 18 links, read every
/// slow poll (and every simulated reading), and this needs no allocation per link.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NvlinkErrors {
    /// Data link replays.
    pub replay: Option<f64>,
    /// Link recoveries.
    pub recovery: Option<f64>,
    /// Flow-control CRC errors.
    pub crc_flit: Option<f64>,
    /// Data CRC errors.
    pub crc_data: Option<f64>,
    /// NVLink 5 receive errors.
    pub receive: Option<f64>,
    /// NVLink 5 local link integrity errors.
    pub link_integrity: Option<f64>,
    /// NVLink 5 transmit discards.
    pub transmit_discard: Option<f64>,
    /// NVLink 5 failed link recoveries.
    pub recovery_failed: Option<f64>,
    /// NVLink 5 errors after forward error correction.
    pub effective: Option<f64>,
    /// NVLink 5 symbol errors before forward error correction.
    pub symbol: Option<f64>,
}

impl NvlinkErrors {
    fn slot(&mut self, kind: NvlinkErrorType) -> &mut Option<f64> {
        match kind {
            NvlinkErrorType::Replay => &mut self.replay,
            NvlinkErrorType::Recovery => &mut self.recovery,
            NvlinkErrorType::CrcFlit => &mut self.crc_flit,
            NvlinkErrorType::CrcData => &mut self.crc_data,
            NvlinkErrorType::Receive => &mut self.receive,
            NvlinkErrorType::LinkIntegrity => &mut self.link_integrity,
            NvlinkErrorType::TransmitDiscard => &mut self.transmit_discard,
            NvlinkErrorType::RecoveryFailed => &mut self.recovery_failed,
            NvlinkErrorType::Effective => &mut self.effective,
            NvlinkErrorType::Symbol => &mut self.symbol,
        }
    }

    /// The counter of one type.
    pub fn get(&self, kind: NvlinkErrorType) -> Option<f64> {
        match kind {
            NvlinkErrorType::Replay => self.replay,
            NvlinkErrorType::Recovery => self.recovery,
            NvlinkErrorType::CrcFlit => self.crc_flit,
            NvlinkErrorType::CrcData => self.crc_data,
            NvlinkErrorType::Receive => self.receive,
            NvlinkErrorType::LinkIntegrity => self.link_integrity,
            NvlinkErrorType::TransmitDiscard => self.transmit_discard,
            NvlinkErrorType::RecoveryFailed => self.recovery_failed,
            NvlinkErrorType::Effective => self.effective,
            NvlinkErrorType::Symbol => self.symbol,
        }
    }

    /// The counters the GPU answered, in export order.
    pub fn iter(&self) -> impl Iterator<Item = (NvlinkErrorType, f64)> + '_ {
        NvlinkErrorType::ALL
            .into_iter()
            .filter_map(|kind| Some((kind, self.get(kind)?)))
    }
}

impl FromIterator<(NvlinkErrorType, f64)> for NvlinkErrors {
    fn from_iter<I: IntoIterator<Item = (NvlinkErrorType, f64)>>(counters: I) -> Self {
        let mut errors = NvlinkErrors::default();
        for (kind, value) in counters {
            *errors.slot(kind) = Some(value);
        }
        errors
    }
}

/// One NVLink link.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NvlinkReadout {
    /// Link number.
    pub link: u32,
    /// Whether the link is active.
    pub up: bool,
    /// Error counters by type.
    pub errors: NvlinkErrors,
}

/// The GPU's place in an NVLink fabric (`nvmlDeviceGetGpuFabricInfoV`), where the driver
/// supports it (multi-node NVLink: GB200 NVL72 and its kind).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FabricReadout {
    /// How far registration with the fabric has come.
    pub state: Option<labels::FabricState>,
    /// NVML's return code of the registration once completed (`0`: success).
    pub status: u32,
    /// The fabric's cluster UUID, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub cluster_uuid: String,
    /// The NVLink domain (clique) within the cluster.
    pub clique_id: u32,
    /// The health flags the driver reports, with whether each holds.
    pub health: Vec<(labels::FabricHealthFlag, bool)>,
}

/// An InfiniBand / RoCE port of the NIC nearest to the GPU by PCIe topology (its rail).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RailPortReadout {
    /// The NIC's name in sysfs, `mlx5_0`.
    pub device: String,
    /// Port number.
    pub port: u32,
    /// Whether the port is active with its physical link up.
    pub up: bool,
    /// The port's rate.
    pub rate_bytes_per_second: Option<f64>,
    /// Times the link went down (`counters/link_downed`).
    pub link_downed: Option<f64>,
}

/// Where the GPU sits (`nvmlDeviceGetPlatformInfo`, struct v2), where the driver says: on
/// rack-scale systems such as a GB200 NVL72, its chassis, slot, tray and host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlatformReadout {
    /// The chassis (rack) serial number, printable ASCII only.
    pub chassis_serial: String,
    /// The slot number in the chassis.
    pub slot: u8,
    /// The compute tray's index in the chassis.
    pub tray: u8,
    /// The host's id within the tray.
    pub host_id: u8,
    /// The GPU module's id.
    pub module_id: u8,
}

/// A compute process using device memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessReadout {
    /// Host process id.
    pub pid: u32,
    /// Container id from `/proc/PID/cgroup`, empty when unknown.
    pub container_id: String,
    /// Kubernetes pod UID from `/proc/PID/cgroup`, empty when unknown.
    pub pod_uid: String,
    /// GPU instance on a GPU in MIG mode.
    pub gpu_instance: Option<u32>,
    /// Compute instance on a GPU in MIG mode.
    pub compute_instance: Option<u32>,
    /// Device memory used.
    pub used_memory_bytes: f64,
    /// The process's share of the GPU's engines, where the source knows it (the simulator;
    /// NVML's samples arrive apart, in [`GpuReadout::process_activity`]).
    pub utilization: Option<ProcessUtilization>,
}

/// A process's share of the GPU's engines over the last sampling window (ratios, 0..1):
/// NVML's process-utilization samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessUtilization {
    /// SM (compute) activity.
    pub sm: f64,
    /// Memory controller activity.
    pub memory: f64,
    /// Encoder activity.
    pub encoder: f64,
    /// Decoder activity.
    pub decoder: f64,
}

/// One per-process activity series set: a process, or (`pid` none) the remainder of the
/// processes beyond the per-GPU cap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessActivity {
    /// Host process id; `None` for the remainder ("other").
    pub pid: Option<u32>,
    /// Container id from `/proc/PID/cgroup`, empty when unknown or for the remainder.
    pub container_id: String,
    /// Kubernetes pod UID from `/proc/PID/cgroup`, empty when unknown or for the remainder.
    pub pod_uid: String,
    /// GPU instance on a GPU in MIG mode (none for the remainder).
    pub gpu_instance: Option<u32>,
    /// Compute instance on a GPU in MIG mode (none for the remainder).
    pub compute_instance: Option<u32>,
    /// Its share of the engines; for the remainder, the sum of the others' (at most 1).
    pub utilization: ProcessUtilization,
}

/// Clocks per domain ([`ClockDomain`]), hertz.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClockReadout {
    /// Graphics clock.
    pub graphics: Option<f64>,
    /// SM clock.
    pub sm: Option<f64>,
    /// Memory clock.
    pub memory: Option<f64>,
    /// Video clock.
    pub video: Option<f64>,
}

impl ClockReadout {
    /// The clock of one domain.
    pub fn get(&self, domain: ClockDomain) -> Option<f64> {
        match domain {
            ClockDomain::Graphics => self.graphics,
            ClockDomain::Sm => self.sm,
            ClockDomain::Memory => self.memory,
            ClockDomain::Video => self.video,
        }
    }
}

/// Everything one poll read from one GPU, in base units. `None` means not supported or not
/// returned; such readings are omitted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReadout {
    /// False when the GPU is lost or not answering: only `gpu_info`, `gpu_up 0` and the XID
    /// counters (events the exporter observed, not device readings) are then exported.
    pub up: bool,
    /// Utilization of the GPU, 0–1.
    pub utilization_ratio: Option<f64>,
    /// Utilization of the memory controller, 0–1.
    pub memory_utilization_ratio: Option<f64>,
    /// Utilization of the video encoder, 0–1.
    pub encoder_utilization_ratio: Option<f64>,
    /// Utilization of the video decoder, 0–1.
    pub decoder_utilization_ratio: Option<f64>,
    /// BAR1 in use.
    pub bar1_used_bytes: Option<f64>,
    /// BAR1 size.
    pub bar1_total_bytes: Option<f64>,
    /// Framebuffer used.
    pub memory_used_bytes: Option<f64>,
    /// Framebuffer free.
    pub memory_free_bytes: Option<f64>,
    /// Framebuffer reserved.
    pub memory_reserved_bytes: Option<f64>,
    /// Framebuffer total.
    pub memory_total_bytes: Option<f64>,
    /// Board power.
    pub power_watts: Option<f64>,
    /// Enforced power limit.
    pub power_limit_watts: Option<f64>,
    /// Fast power samples taken between polls (`None` when sampling is off or has nothing
    /// current to serve).
    pub power_samples: Option<PowerSamples>,
    /// Energy since driver load.
    pub energy_joules: Option<f64>,
    /// Die temperature ([`TemperatureSensor::Gpu`]).
    pub temperature_gpu_celsius: Option<f64>,
    /// Memory (HBM) temperature ([`TemperatureSensor::Memory`]).
    pub temperature_memory_celsius: Option<f64>,
    /// Current clocks.
    pub clocks: ClockReadout,
    /// Maximum clocks.
    pub max_clocks: ClockReadout,
    /// P-state number.
    pub performance_state: Option<u32>,
    /// Fan speed per fan, 0–1.
    pub fan_speed_ratios: Vec<f64>,
    /// Throttle reasons known to the device, with whether each is active.
    pub throttle_reasons: Vec<(ThrottleReason, bool)>,
    /// XID code to number of occurrences observed.
    pub xid_counts: BTreeMap<u32, u64>,
    /// XID code to incidents: runs of that code separated by less than a quiet period count
    /// once. Derived from `xid_counts` over time by the source (`metrics::gpu::XidIncidents`),
    /// not read from the device.
    pub xid_incidents: BTreeMap<u32, u64>,
    /// ECC totals, when ECC is enabled.
    pub ecc: Option<EccTotals>,
    /// Whether ECC is enabled, where the GPU supports ECC.
    pub ecc_enabled: Option<bool>,
    /// Retired pages, where the GPU retires pages.
    pub retired_pages: Option<RetiredPages>,
    /// Row remapping, where the GPU remaps rows.
    pub remapped_rows: Option<RemappedRowsReadout>,
    /// Time clocks were held down, per policy, in seconds.
    pub throttle_violations: Vec<(ViolationPolicy, f64)>,
    /// PCIe replay counter.
    pub pcie_replays: Option<f64>,
    /// Current PCIe link generation.
    pub pcie_link_generation: Option<f64>,
    /// Current PCIe link width.
    pub pcie_link_width: Option<f64>,
    /// Highest PCIe link generation the GPU and its slot support.
    pub pcie_link_max_generation: Option<f64>,
    /// Widest PCIe link, in lanes, the GPU and its slot support.
    pub pcie_link_max_width: Option<f64>,
    /// What the driver says the GPU needs to recover, where the driver reports it.
    pub recovery_action: Option<labels::RecoveryAction>,
    /// The NVLink fabric, where the GPU is part of one.
    pub fabric: Option<FabricReadout>,
    /// Where the GPU sits in its rack, where the driver reports it.
    pub platform: Option<PlatformReadout>,
    /// The ports of the GPU's rail NIC, where it has one.
    pub rail_ports: Vec<RailPortReadout>,
    /// NVLink links the GPU has.
    pub nvlinks: Vec<NvlinkReadout>,
    /// NVLink error counters the driver answers for the GPU as a whole (NVML's aggregate
    /// scope, as DCGM reads the NVLink 5 ones). A type left out here is served as the sum of
    /// the links' counters of that type.
    pub nvlink_errors: NvlinkErrors,
    /// Number of compute processes, where the GPU reports them.
    pub process_count: Option<usize>,
    /// The processes to export (the caller bounds how many).
    pub processes: Vec<ProcessReadout>,
    /// Per-process engine activity to export, already capped per GPU (the caller decides
    /// which GPUs and how many processes; empty when there were no samples).
    pub process_activity: Vec<ProcessActivity>,
    /// PCIe transmit throughput.
    pub pcie_transmit_bytes_per_second: Option<f64>,
    /// PCIe receive throughput.
    pub pcie_receive_bytes_per_second: Option<f64>,
    /// NVLink bytes transmitted, all links.
    pub nvlink_transmit_bytes: Option<f64>,
    /// NVLink bytes received, all links.
    pub nvlink_receive_bytes: Option<f64>,
    /// MIG instances, when MIG is enabled.
    pub mig: Vec<MigReadout>,
}

impl GpuReadout {
    /// The temperature of one sensor.
    pub fn temperature(&self, sensor: TemperatureSensor) -> Option<f64> {
        match sensor {
            TemperatureSensor::Gpu => self.temperature_gpu_celsius,
            TemperatureSensor::Memory => self.temperature_memory_celsius,
        }
    }

    /// Whether `reason` holds clocks down; `None` when the device does not report it.
    pub fn throttle_reason(&self, reason: ThrottleReason) -> Option<bool> {
        self.throttle_reasons
            .iter()
            .find(|(r, _)| *r == reason)
            .map(|(_, active)| *active)
    }

    /// Seconds clocks were held down by `policy`; `None` when the device does not report it.
    pub fn violation_seconds(&self, policy: ViolationPolicy) -> Option<f64> {
        self.throttle_violations
            .iter()
            .find(|(p, _)| *p == policy)
            .map(|(_, s)| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions_read_like_nvidia_smi() {
        assert_eq!(cuda_version_string(12040), "12.4");
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(11080), "11.8");
    }

    #[test]
    fn parts_are_read_by_label_value() {
        let r = GpuReadout {
            temperature_memory_celsius: Some(70.0),
            clocks: ClockReadout {
                sm: Some(1.98e9),
                ..Default::default()
            },
            ecc: Some(EccTotals {
                aggregate_uncorrected: 3.0,
                ..Default::default()
            }),
            throttle_reasons: vec![(ThrottleReason::SwPowerCap, true)],
            throttle_violations: vec![(ViolationPolicy::Thermal, 2.5)],
            ..Default::default()
        };
        assert_eq!(r.temperature(TemperatureSensor::Memory), Some(70.0));
        assert_eq!(r.temperature(TemperatureSensor::Gpu), None);
        assert_eq!(r.clocks.get(ClockDomain::Sm), Some(1.98e9));
        assert_eq!(
            r.ecc
                .map(|e| e.get(EccErrorType::Uncorrected, EccCounter::Aggregate)),
            Some(3.0)
        );
        assert_eq!(r.throttle_reason(ThrottleReason::SwPowerCap), Some(true));
        assert_eq!(r.throttle_reason(ThrottleReason::GpuIdle), None);
        assert_eq!(r.violation_seconds(ViolationPolicy::Thermal), Some(2.5));
        assert_eq!(r.violation_seconds(ViolationPolicy::Power), None);
    }

    #[test]
    fn nvlink_errors_keep_what_was_answered_in_export_order() {
        let errors: NvlinkErrors = [
            (NvlinkErrorType::CrcData, 2.0),
            (NvlinkErrorType::Replay, 1.0),
        ]
        .into_iter()
        .collect();
        assert_eq!(errors.get(NvlinkErrorType::Recovery), None);
        assert_eq!(
            errors.iter().collect::<Vec<_>>(),
            [
                (NvlinkErrorType::Replay, 1.0),
                (NvlinkErrorType::CrcData, 2.0)
            ]
        );
    }
}
