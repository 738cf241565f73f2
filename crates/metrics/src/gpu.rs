//! The mapping from one GPU's readings to catalog samples, shared by every GPU source (NVML,
//! the simulator) so that they expose the same series for the same facts.
//!
//! A source fills a [`GpuReadout`] with what the device answered (`None` for a reading it does
//! not support or did not return) and calls [`push_gpu_samples`]. Readings that are `None` are
//! omitted, never exported as 0.

use crate::catalog::Metric;
use crate::snapshot::Sample;

/// `reason` label values of `dgx_pixels_gpu_throttle_reason`, shared by every GPU source so the
/// same condition has the same name whichever source reports it.
pub mod throttle {
    /// The GPU is idle and clocks are lowered.
    pub const GPU_IDLE: &str = "gpu_idle";
    /// Application clocks setting.
    pub const APPLICATIONS_CLOCKS_SETTING: &str = "applications_clocks_setting";
    /// Software power cap (the power limit).
    pub const SW_POWER_CAP: &str = "sw_power_cap";
    /// Hardware slowdown.
    pub const HW_SLOWDOWN: &str = "hw_slowdown";
    /// Sync boost.
    pub const SYNC_BOOST: &str = "sync_boost";
    /// Software thermal slowdown.
    pub const SW_THERMAL_SLOWDOWN: &str = "sw_thermal_slowdown";
    /// Hardware thermal slowdown.
    pub const HW_THERMAL_SLOWDOWN: &str = "hw_thermal_slowdown";
    /// Hardware power brake slowdown.
    pub const HW_POWER_BRAKE_SLOWDOWN: &str = "hw_power_brake_slowdown";
}

/// `policy` label values of `dgx_pixels_gpu_throttle_violation_seconds_total`.
pub mod violation {
    /// Held down by the power limit.
    pub const POWER: &str = "power";
    /// Held down by temperature.
    pub const THERMAL: &str = "thermal";
    /// Held down by sync boost.
    pub const SYNC_BOOST: &str = "sync_boost";
    /// Held down by the board power limit.
    pub const BOARD_LIMIT: &str = "board_limit";
    /// Held down because of low utilization.
    pub const LOW_UTILIZATION: &str = "low_utilization";
    /// Held down by the board reliability limit.
    pub const RELIABILITY: &str = "reliability";
}

/// `error_type` label values of `dgx_pixels_nvlink_errors_total`.
pub mod nvlink_error {
    /// Data link replays.
    pub const REPLAY: &str = "replay";
    /// Link recoveries.
    pub const RECOVERY: &str = "recovery";
    /// Flow-control CRC errors.
    pub const CRC_FLIT: &str = "crc_flit";
    /// Data CRC errors.
    pub const CRC_DATA: &str = "crc_data";
}

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

/// One NVLink link.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NvlinkReadout {
    /// Link number.
    pub link: u32,
    /// Whether the link is active.
    pub up: bool,
    /// Error counters by type (`replay`, `recovery`, `crc_flit`, `crc_data`).
    pub errors: Vec<(&'static str, f64)>,
}

/// A compute process using device memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessReadout {
    /// Host process id.
    pub pid: u32,
    /// Container id from `/proc/PID/cgroup`, empty when unknown.
    pub container_id: String,
    /// GPU instance on a GPU in MIG mode.
    pub gpu_instance: Option<u32>,
    /// Compute instance on a GPU in MIG mode.
    pub compute_instance: Option<u32>,
    /// Device memory used.
    pub used_memory_bytes: f64,
}

/// Clock domains, as the `clock` label names them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClockReadout {
    /// Graphics clock, hertz.
    pub graphics: Option<f64>,
    /// SM clock, hertz.
    pub sm: Option<f64>,
    /// Memory clock, hertz.
    pub memory: Option<f64>,
    /// Video clock, hertz.
    pub video: Option<f64>,
}

impl ClockReadout {
    fn each(&self) -> [(&'static str, Option<f64>); 4] {
        [
            ("graphics", self.graphics),
            ("sm", self.sm),
            ("memory", self.memory),
            ("video", self.video),
        ]
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
    /// Energy since driver load.
    pub energy_joules: Option<f64>,
    /// Die temperature.
    pub temperature_gpu_celsius: Option<f64>,
    /// Memory (HBM) temperature.
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
    pub throttle_reasons: Vec<(&'static str, bool)>,
    /// XID code to number of occurrences observed.
    pub xid_counts: Vec<(u32, u64)>,
    /// ECC totals, when ECC is enabled.
    pub ecc: Option<EccTotals>,
    /// Whether ECC is enabled, where the GPU supports ECC.
    pub ecc_enabled: Option<bool>,
    /// Retired pages, where the GPU retires pages.
    pub retired_pages: Option<RetiredPages>,
    /// Row remapping, where the GPU remaps rows.
    pub remapped_rows: Option<RemappedRowsReadout>,
    /// Time clocks were held down, per policy name, in seconds.
    pub throttle_violations: Vec<(&'static str, f64)>,
    /// PCIe replay counter.
    pub pcie_replays: Option<f64>,
    /// Current PCIe link generation.
    pub pcie_link_generation: Option<f64>,
    /// Current PCIe link width.
    pub pcie_link_width: Option<f64>,
    /// NVLink links the GPU has.
    pub nvlinks: Vec<NvlinkReadout>,
    /// Number of compute processes, where the GPU reports them.
    pub process_count: Option<usize>,
    /// The processes to export (the caller bounds how many).
    pub processes: Vec<ProcessReadout>,
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

/// Formats a CUDA version as NVML encodes it (1000 × major + 10 × minor, e.g. 12040) as "12.4".
pub fn cuda_version_string(v: u32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// Appends the samples of one GPU to `out`.
pub fn push_gpu_samples(id: &GpuIdentity, r: &GpuReadout, out: &mut Vec<Sample>) {
    let gpu = id.index.to_string();
    let uuid = id.uuid.as_str();
    let minor = id.minor_number.to_string();
    let cuda = id.cuda_driver_version.as_str();
    let device = format!("nvidia{}", id.minor_number);
    out.push(Sample::new(
        Metric::GpuInfo,
        [
            gpu.as_str(),
            uuid,
            &id.model,
            &id.serial,
            &id.pci_bus_id,
            &id.vbios_version,
            &id.driver_version,
            cuda,
            &minor,
            &device,
        ],
        1.0,
    ));
    out.push(Sample::new(
        Metric::GpuUp,
        [gpu.as_str(), uuid],
        if r.up { 1.0 } else { 0.0 },
    ));
    for (xid, count) in &r.xid_counts {
        out.push(Sample::new(
            Metric::GpuXidErrors,
            [gpu.clone(), uuid.to_string(), xid.to_string()],
            *count as f64,
        ));
    }
    if !r.up {
        return;
    }
    let mut gauge = |metric: Metric, value: Option<f64>| {
        if let Some(v) = value {
            out.push(Sample::new(metric, [gpu.as_str(), uuid], v));
        }
    };
    gauge(Metric::GpuUtilization, r.utilization_ratio);
    gauge(Metric::GpuMemoryUtilization, r.memory_utilization_ratio);
    gauge(Metric::GpuEncoderUtilization, r.encoder_utilization_ratio);
    gauge(Metric::GpuDecoderUtilization, r.decoder_utilization_ratio);
    gauge(Metric::GpuBar1Used, r.bar1_used_bytes);
    gauge(Metric::GpuBar1Total, r.bar1_total_bytes);
    gauge(Metric::GpuEccEnabled, r.ecc_enabled.map(flag));
    gauge(Metric::PcieReplays, r.pcie_replays);
    gauge(Metric::PcieLinkGeneration, r.pcie_link_generation);
    gauge(Metric::PcieLinkWidth, r.pcie_link_width);
    gauge(Metric::GpuProcesses, r.process_count.map(|n| n as f64));
    if let Some(p) = r.retired_pages {
        gauge(Metric::GpuRetiredPagesPending, Some(flag(p.pending)));
    }
    if let Some(rr) = r.remapped_rows {
        gauge(Metric::GpuRemappedRowsPending, Some(flag(rr.pending)));
        gauge(Metric::GpuRemappedRowsFailure, Some(flag(rr.failure)));
    }
    gauge(Metric::GpuMemoryUsed, r.memory_used_bytes);
    gauge(Metric::GpuMemoryFree, r.memory_free_bytes);
    gauge(Metric::GpuMemoryReserved, r.memory_reserved_bytes);
    gauge(Metric::GpuMemoryTotal, r.memory_total_bytes);
    gauge(Metric::GpuPower, r.power_watts);
    gauge(Metric::GpuPowerLimit, r.power_limit_watts);
    gauge(Metric::GpuEnergy, r.energy_joules);
    gauge(
        Metric::GpuPerformanceState,
        r.performance_state.map(f64::from),
    );
    gauge(Metric::PcieTransmit, r.pcie_transmit_bytes_per_second);
    gauge(Metric::PcieReceive, r.pcie_receive_bytes_per_second);
    gauge(Metric::NvlinkTransmit, r.nvlink_transmit_bytes);
    gauge(Metric::NvlinkReceive, r.nvlink_receive_bytes);

    let mut labelled = |metric: Metric, extra: &[&str], value: f64| {
        let mut labels = vec![gpu.clone(), uuid.to_string()];
        labels.extend(extra.iter().map(|s| s.to_string()));
        out.push(Sample {
            metric,
            labels,
            value,
        });
    };
    for (sensor, v) in [
        ("gpu", r.temperature_gpu_celsius),
        ("memory", r.temperature_memory_celsius),
    ] {
        if let Some(v) = v {
            labelled(Metric::GpuTemperature, &[sensor], v);
        }
    }
    for (clock, v) in r.clocks.each() {
        if let Some(v) = v {
            labelled(Metric::GpuClock, &[clock], v);
        }
    }
    for (clock, v) in r.max_clocks.each() {
        if let Some(v) = v {
            labelled(Metric::GpuClockMax, &[clock], v);
        }
    }
    for (fan, v) in r.fan_speed_ratios.iter().enumerate() {
        labelled(Metric::GpuFanSpeed, &[&fan.to_string()], *v);
    }
    for (reason, active) in &r.throttle_reasons {
        labelled(
            Metric::GpuThrottleReason,
            &[reason],
            if *active { 1.0 } else { 0.0 },
        );
    }
    if let Some(e) = r.ecc {
        for (kind, counter, v) in [
            ("corrected", "volatile", e.volatile_corrected),
            ("uncorrected", "volatile", e.volatile_uncorrected),
            ("corrected", "aggregate", e.aggregate_corrected),
            ("uncorrected", "aggregate", e.aggregate_uncorrected),
        ] {
            labelled(Metric::GpuEccErrors, &[kind, counter], v);
        }
    }
    if let Some(p) = r.retired_pages {
        labelled(
            Metric::GpuRetiredPages,
            &["single_bit_ecc"],
            p.single_bit_ecc,
        );
        labelled(
            Metric::GpuRetiredPages,
            &["double_bit_ecc"],
            p.double_bit_ecc,
        );
    }
    if let Some(rr) = r.remapped_rows {
        labelled(Metric::GpuRemappedRows, &["correctable"], rr.correctable);
        labelled(
            Metric::GpuRemappedRows,
            &["uncorrectable"],
            rr.uncorrectable,
        );
    }
    for (policy, seconds) in &r.throttle_violations {
        labelled(Metric::GpuThrottleViolation, &[policy], *seconds);
    }
    for l in &r.nvlinks {
        let link = l.link.to_string();
        labelled(Metric::NvlinkUp, &[&link], flag(l.up));
        for (kind, v) in &l.errors {
            labelled(Metric::NvlinkErrors, &[&link, kind], *v);
        }
    }
    for p in &r.processes {
        let opt = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or_default();
        labelled(
            Metric::ProcessMemoryUsed,
            &[
                &p.pid.to_string(),
                &p.container_id,
                &opt(p.gpu_instance),
                &opt(p.compute_instance),
            ],
            p.used_memory_bytes,
        );
    }
    for m in &r.mig {
        let gi = m.gpu_instance.to_string();
        let ci = m.compute_instance.to_string();
        labelled(Metric::MigInfo, &[&gi, &ci, &m.profile, &m.mig_uuid], 1.0);
        for (metric, v) in [
            (
                Metric::MigGraphicsEngineActive,
                m.graphics_engine_active_ratio,
            ),
            (Metric::MigMemoryUsed, m.memory_used_bytes),
            (Metric::MigMemoryTotal, m.memory_total_bytes),
        ] {
            if let Some(v) = v {
                labelled(metric, &[&gi, &ci, &m.profile], v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> GpuIdentity {
        GpuIdentity {
            index: 2,
            uuid: "GPU-x".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            minor_number: 2,
            ..Default::default()
        }
    }

    fn find(out: &[Sample], metric: Metric) -> Vec<&Sample> {
        out.iter().filter(|s| s.metric == metric).collect()
    }

    #[test]
    fn readings_map_to_labelled_series_and_absent_readings_are_omitted() {
        let r = GpuReadout {
            up: true,
            power_watts: Some(412.0),
            temperature_gpu_celsius: Some(61.0),
            clocks: ClockReadout {
                sm: Some(1.98e9),
                ..Default::default()
            },
            throttle_reasons: vec![("sw_power_cap", true), ("gpu_idle", false)],
            xid_counts: vec![(13, 2)],
            ecc: Some(EccTotals {
                aggregate_uncorrected: 1.0,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut out = Vec::new();
        push_gpu_samples(&id(), &r, &mut out);
        assert!(out.iter().all(Sample::is_well_formed));
        let info = find(&out, Metric::GpuInfo);
        assert_eq!(info[0].labels[2], "NVIDIA H100 80GB HBM3");
        assert_eq!(info[0].labels[9], "nvidia2");
        assert_eq!(find(&out, Metric::GpuUp)[0].value, 1.0);
        assert_eq!(find(&out, Metric::GpuPower)[0].labels, ["2", "GPU-x"]);
        assert_eq!(find(&out, Metric::GpuPower)[0].value, 412.0);
        assert_eq!(
            find(&out, Metric::GpuTemperature).len(),
            1,
            "memory sensor absent"
        );
        assert_eq!(find(&out, Metric::GpuClock)[0].labels[2], "sm");
        assert!(
            find(&out, Metric::GpuMemoryUsed).is_empty(),
            "no reading, no series"
        );
        let reasons = find(&out, Metric::GpuThrottleReason);
        assert_eq!(
            (reasons[0].labels[2].as_str(), reasons[0].value),
            ("sw_power_cap", 1.0)
        );
        assert_eq!(
            (reasons[1].labels[2].as_str(), reasons[1].value),
            ("gpu_idle", 0.0)
        );
        let xid = find(&out, Metric::GpuXidErrors);
        assert_eq!((xid[0].labels[2].as_str(), xid[0].value), ("13", 2.0));
        assert_eq!(find(&out, Metric::GpuEccErrors).len(), 4);
    }

    #[test]
    fn device_health_series_carry_their_labels() {
        let r = GpuReadout {
            up: true,
            ecc_enabled: Some(true),
            remapped_rows: Some(RemappedRowsReadout {
                uncorrectable: 2.0,
                pending: true,
                ..Default::default()
            }),
            throttle_violations: vec![(violation::POWER, 12.5)],
            nvlinks: vec![NvlinkReadout {
                link: 3,
                up: true,
                errors: vec![(nvlink_error::REPLAY, 4.0)],
            }],
            process_count: Some(2),
            processes: vec![ProcessReadout {
                pid: 42,
                container_id: "abc".into(),
                gpu_instance: Some(1),
                compute_instance: Some(0),
                used_memory_bytes: 1e9,
            }],
            ..Default::default()
        };
        let mut out = Vec::new();
        push_gpu_samples(&id(), &r, &mut out);
        assert!(out.iter().all(Sample::is_well_formed));
        assert_eq!(find(&out, Metric::GpuEccEnabled)[0].value, 1.0);
        let rows = find(&out, Metric::GpuRemappedRows);
        assert_eq!(
            (rows[1].labels[2].as_str(), rows[1].value),
            ("uncorrectable", 2.0)
        );
        assert_eq!(find(&out, Metric::GpuRemappedRowsPending)[0].value, 1.0);
        assert_eq!(find(&out, Metric::GpuRemappedRowsFailure)[0].value, 0.0);
        assert!(
            find(&out, Metric::GpuRetiredPages).is_empty(),
            "not reported, not exported"
        );
        assert_eq!(
            find(&out, Metric::GpuThrottleViolation)[0].labels[2],
            "power"
        );
        assert_eq!(find(&out, Metric::NvlinkUp)[0].labels[2], "3");
        assert_eq!(
            find(&out, Metric::NvlinkErrors)[0].labels[2..],
            ["3", "replay"]
        );
        assert_eq!(find(&out, Metric::GpuProcesses)[0].value, 2.0);
        let p = find(&out, Metric::ProcessMemoryUsed);
        assert_eq!(p[0].labels[2..], ["42", "abc", "1", "0"]);
        assert!(find(&out, Metric::PcieLinkWidth).is_empty());
    }

    #[test]
    fn cuda_versions_read_like_nvidia_smi() {
        assert_eq!(cuda_version_string(12040), "12.4");
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(11080), "11.8");
    }

    #[test]
    fn a_lost_gpu_keeps_only_identity_up_and_xid_counters() {
        let r = GpuReadout {
            up: false,
            power_watts: Some(412.0),
            xid_counts: vec![(79, 1)],
            ..Default::default()
        };
        let mut out = Vec::new();
        push_gpu_samples(&id(), &r, &mut out);
        let metrics: Vec<Metric> = out.iter().map(|s| s.metric).collect();
        assert_eq!(
            metrics,
            [Metric::GpuInfo, Metric::GpuUp, Metric::GpuXidErrors]
        );
        assert_eq!(out[1].value, 0.0);
    }

    #[test]
    fn mig_instances_get_their_own_series() {
        let r = GpuReadout {
            up: true,
            mig: vec![MigReadout {
                gpu_instance: 1,
                compute_instance: 0,
                profile: "3g.40gb".into(),
                mig_uuid: "MIG-1".into(),
                graphics_engine_active_ratio: Some(0.5),
                memory_used_bytes: None,
                memory_total_bytes: Some(4.0e10),
            }],
            ..Default::default()
        };
        let mut out = Vec::new();
        push_gpu_samples(&id(), &r, &mut out);
        assert!(out.iter().all(Sample::is_well_formed));
        let active = find(&out, Metric::MigGraphicsEngineActive);
        assert_eq!(active[0].labels, ["2", "GPU-x", "1", "0", "3g.40gb"]);
        assert!(find(&out, Metric::MigMemoryUsed).is_empty());
        assert_eq!(find(&out, Metric::MigInfo)[0].labels[5], "MIG-1");
    }
}
