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

/// Appends the samples of one GPU to `out`.
pub fn push_gpu_samples(id: &GpuIdentity, r: &GpuReadout, out: &mut Vec<Sample>) {
    let gpu = id.index.to_string();
    let uuid = id.uuid.as_str();
    let minor = id.minor_number.to_string();
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
        assert_eq!(info[0].labels[8], "nvidia2");
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
