//! Public data types: static GPU facts and time-dependent readings, in physical base units.

use std::collections::BTreeMap;
use std::time::Duration;

/// Clock frequencies in hertz.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Clocks {
    /// Graphics clock.
    pub graphics_hz: f64,
    /// Streaming multiprocessor clock.
    pub sm_hz: f64,
    /// Memory clock.
    pub memory_hz: f64,
    /// Video (encoder/decoder) clock.
    pub video_hz: f64,
}

/// One MIG (Multi-Instance GPU) instance: a GPU instance with one compute instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigInstance {
    /// GPU instance id (1-based, in the order the scenario lists the profiles).
    pub gpu_instance: u32,
    /// Compute instance id within the GPU instance (always 0: one compute instance each).
    pub compute_instance: u32,
    /// Profile name, e.g. `3g.40gb`.
    pub profile: String,
    /// `MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, deterministic from the seed.
    pub uuid: String,
    /// Memory of the instance in bytes.
    pub memory_total_bytes: u64,
}

/// Facts about one GPU that do not change over time.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuStatic {
    /// Index on the node (NVML index), 0-based.
    pub index: u32,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, deterministic from the seed and index.
    pub uuid: String,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Board serial number.
    pub serial: String,
    /// PCI bus id in NVML's format, e.g. `00000000:18:00.0`.
    pub pci_bus_id: String,
    /// VBIOS version string.
    pub vbios_version: String,
    /// Device minor number (`/dev/nvidiaN`).
    pub minor_number: u32,
    /// Architecture name, e.g. `Hopper`.
    pub architecture: String,
    /// Framebuffer size in bytes; `None` for unified-memory parts (GB10), which do not report it.
    pub memory_total_bytes: Option<u64>,
    /// Enforced power limit in watts.
    pub power_limit_watts: f64,
    /// Power drawn when idle, in watts.
    pub idle_power_watts: f64,
    /// Maximum (boost) clocks.
    pub max_clocks: Clocks,
    /// Number of NVLink links (0 when none).
    pub nvlink_count: u32,
    /// Temperature at which the hardware slows the GPU down.
    pub slowdown_temperature_celsius: f64,
    /// Temperature at which the GPU shuts down.
    pub shutdown_temperature_celsius: f64,
    /// MIG instances; `Some` only for GPUs in MIG mode.
    pub mig: Option<Vec<MigInstance>>,
    /// Size of the BAR1 aperture in bytes; `None` where the part has none (unified memory).
    pub bar1_total_bytes: Option<u64>,
    /// Current PCIe link generation and width (lanes); `None` for parts not attached by PCIe.
    pub pcie_link: Option<PcieLink>,
}

/// A PCIe link as negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieLink {
    /// Link generation (4 for Ampere, 5 for Hopper).
    pub generation: u32,
    /// Number of lanes.
    pub width: u32,
}

/// Row-remapping counters (Ampere and later replace page retirement with row remapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemappedRows {
    /// Rows remapped because of correctable errors.
    pub correctable: u64,
    /// Rows remapped because of uncorrectable errors.
    pub uncorrectable: u64,
    /// A remapping is pending: it takes effect at the next GPU reset.
    pub pending: bool,
    /// A remapping failed (no spare rows left): the GPU needs service.
    pub failure: bool,
}

/// A compute process holding device memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessReading {
    /// Process id on the host.
    pub pid: u32,
    /// Device memory the process uses, bytes.
    pub used_memory_bytes: u64,
    /// GPU instance the process runs in, on a GPU in MIG mode.
    pub gpu_instance: Option<u32>,
    /// Compute instance the process runs in, on a GPU in MIG mode.
    pub compute_instance: Option<u32>,
}

/// State of one GPU at one point in time.
// Readings are produced one at a time and matched on at once; boxing would only add an
// allocation per reading.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum GpuState {
    /// The GPU answers; here is what it reports.
    Ok(GpuReading),
    /// The GPU has fallen off the bus (NVML would answer `GPU_IS_LOST`).
    Lost {
        /// Time since scenario start at which it was lost.
        since: Duration,
        /// The XID that came with the loss (normally 79).
        xid: u32,
    },
}

impl GpuState {
    /// The reading, when the GPU is not lost.
    pub fn ok(&self) -> Option<&GpuReading> {
        match self {
            GpuState::Ok(r) => Some(r),
            GpuState::Lost { .. } => None,
        }
    }
}

/// Reasons the GPU is running below its maximum clocks; each is an independent flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThrottleReasons {
    /// Nothing is running.
    pub gpu_idle: bool,
    /// Clocks reduced to keep power under the power limit.
    pub sw_power_cap: bool,
    /// Hardware slowdown (set together with `hw_thermal_slowdown` or `hw_power_brake_slowdown`).
    pub hw_slowdown: bool,
    /// Hardware slowdown because the GPU is above its slowdown temperature.
    pub hw_thermal_slowdown: bool,
    /// Driver slowdown because the GPU is above its maximum operating temperature.
    pub sw_thermal_slowdown: bool,
    /// External power brake (never set by the current model).
    pub hw_power_brake_slowdown: bool,
}

/// ECC error counters (cumulative).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EccCounts {
    /// Single-bit (corrected) errors since the driver loaded.
    pub volatile_corrected: u64,
    /// Double-bit (uncorrected) errors since the driver loaded.
    pub volatile_uncorrected: u64,
    /// Corrected errors over the lifetime of the board.
    pub aggregate_corrected: u64,
    /// Uncorrected errors over the lifetime of the board.
    pub aggregate_uncorrected: u64,
}

/// Activity of one MIG instance.
#[derive(Debug, Clone, PartialEq)]
pub struct MigReading {
    /// GPU instance id, as in [`MigInstance::gpu_instance`].
    pub gpu_instance: u32,
    /// Compute instance id, as in [`MigInstance::compute_instance`].
    pub compute_instance: u32,
    /// Fraction of time the graphics engine of the instance was active, 0..1.
    pub graphics_engine_active_ratio: f64,
    /// Memory in use in the instance, bytes.
    pub memory_used_bytes: u64,
}

/// What a GPU reports at one point in time (values in base units; ratios in 0..1).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    /// Fraction of time a kernel was running, 0..1.
    pub utilization_ratio: f64,
    /// Fraction of time device memory was being read or written, 0..1.
    pub memory_utilization_ratio: f64,
    /// Framebuffer in use, bytes (`None` where the total is not reported).
    pub memory_used_bytes: Option<u64>,
    /// Framebuffer free, bytes: total - used - reserved.
    pub memory_free_bytes: Option<u64>,
    /// Framebuffer reserved by the driver and firmware, bytes.
    pub memory_reserved_bytes: Option<u64>,
    /// Power draw, watts (never above the power limit).
    pub power_watts: f64,
    /// Energy consumed since the driver loaded, joules: a deterministic initial offset plus the
    /// integral of power since scenario start. Never decreases.
    pub energy_joules: f64,
    /// GPU core temperature.
    pub temperature_gpu_celsius: f64,
    /// Memory (HBM) temperature, where the part has that sensor.
    pub temperature_memory_celsius: Option<f64>,
    /// Current clocks.
    pub clocks: Clocks,
    /// Performance state: 0 (maximum performance) under load, 8 at idle.
    pub pstate: u32,
    /// Fan speed, 0..1; `None` for passively cooled parts.
    pub fan_speed_ratio: Option<f64>,
    /// Why clocks are below maximum.
    pub throttle: ThrottleReasons,
    /// Number of times each XID has been reported up to now (repeats counted).
    pub xid_counts: BTreeMap<u32, u64>,
    /// ECC error counters.
    pub ecc: EccCounts,
    /// PCIe transmit throughput, bytes per second.
    pub pcie_tx_bytes_per_second: f64,
    /// PCIe receive throughput, bytes per second.
    pub pcie_rx_bytes_per_second: f64,
    /// Bytes transmitted over all NVLinks since scenario start (0 without NVLink).
    pub nvlink_tx_bytes_total: u64,
    /// Bytes received over all NVLinks since scenario start (0 without NVLink).
    pub nvlink_rx_bytes_total: u64,
    /// NVLink transmit rate now, bytes per second (the rate the total grows at; 0 without
    /// NVLink).
    pub nvlink_tx_bytes_per_second: f64,
    /// NVLink receive rate now, bytes per second (0 without NVLink).
    pub nvlink_rx_bytes_per_second: f64,
    /// SM clock the GPU would run at under full load now, hertz: its maximum, reduced by the
    /// thermal slowdown its temperature causes and by the power cap a full load would meet.
    /// What a benchmark started now would get (see [`crate::bench`]).
    pub full_load_sm_clock_hz: f64,
    /// One entry per MIG instance; empty when the GPU is not in MIG mode.
    pub mig: Vec<MigReading>,
    /// Fraction of time the video encoder was busy, 0..1 (the modelled workloads do no video).
    pub encoder_utilization_ratio: f64,
    /// Fraction of time the video decoder was busy, 0..1.
    pub decoder_utilization_ratio: f64,
    /// BAR1 in use, bytes (`None` where the part has no BAR1 aperture).
    pub bar1_used_bytes: Option<u64>,
    /// Time since scenario start during which clocks were held down by the power limit, seconds.
    pub violation_power_seconds: f64,
    /// Time since scenario start during which clocks were held down by temperature, seconds.
    pub violation_thermal_seconds: f64,
    /// Row-remapping counters, following the uncorrectable ECC errors.
    pub remapped_rows: RemappedRows,
    /// Compute processes using the GPU: one per busy GPU, or one per busy MIG instance.
    pub processes: Vec<ProcessReading>,
}
