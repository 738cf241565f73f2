//! Public data types: static GPU facts and time-dependent readings, in physical base units.

use std::time::Duration;

use dgx_pixels_readout::labels::NvlinkErrorType;
use dgx_pixels_readout::{ClockReadout, GpuIdentity, GpuReadout};

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

impl Clocks {
    /// The clocks as a readout reports them (every domain present).
    pub fn readout(&self) -> ClockReadout {
        ClockReadout {
            graphics: Some(self.graphics_hz),
            sm: Some(self.sm_hz),
            memory: Some(self.memory_hz),
            video: Some(self.video_hz),
        }
    }
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
    /// The PCIe link the GPU and its slot support (generation and lanes), which it trains to
    /// unless a `pcie_degraded` fault holds it lower (the reading's current link); `None` for
    /// parts not attached by PCIe.
    pub pcie_link: Option<PcieLink>,
    /// The NVLink fabric the GPU registers with (multi-node NVLink, e.g. a GB200 NVL72 tray);
    /// `None` where NVML answers `NOT_SUPPORTED`.
    pub fabric: Option<FabricStatic>,
    /// The GPU's rail NIC (the InfiniBand NIC under its PCIe switch, one port), where the
    /// scenario gives it one.
    pub rail: Option<RailStatic>,
    /// Where the GPU sits (`nvmlDeviceGetPlatformInfo`), where the scenario says.
    pub platform: Option<dgx_pixels_readout::PlatformReadout>,
    /// Time-slicing (`[[time_slicing]]`): the weights of the processes sharing the GPU, each
    /// getting its weight's part of the GPU's activity and memory; empty for one process.
    pub process_weights: Vec<f64>,
    /// The sharing processes are MPS clients (`mode = "mps"`): NVML lists them through
    /// `nvmlDeviceGetMPSComputeRunningProcesses`, not the compute-process call.
    pub mps: bool,
}

/// A GPU's rail NIC as sysfs would show it: its name and the rate its port trains to.
#[derive(Debug, Clone, PartialEq)]
pub struct RailStatic {
    /// `mlx5_<GPU index>`.
    pub device: String,
    /// Bytes per second (400 Gb/s NDR is 50e9).
    pub rate_bytes_per_second: f64,
}

/// A GPU's place in an NVLink fabric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricStatic {
    /// The cluster's UUID (one per scenario node: a tray sits in one cluster).
    pub cluster_uuid: String,
    /// The NVLink domain (clique) within the cluster.
    pub clique_id: u32,
}

impl GpuStatic {
    /// The GPU's identity as NVML reports it, with the node's driver and CUDA version (in
    /// NVML's encoding, `12040` for 12.4).
    pub fn identity(&self, driver_version: &str, cuda_driver_version: u32) -> GpuIdentity {
        GpuIdentity {
            index: self.index,
            uuid: self.uuid.clone(),
            model: self.name.clone(),
            serial: self.serial.clone(),
            pci_bus_id: self.pci_bus_id.clone(),
            vbios_version: self.vbios_version.clone(),
            driver_version: driver_version.to_string(),
            cuda_driver_version: dgx_pixels_readout::cuda_version_string(cuda_driver_version),
            minor_number: self.minor_number,
        }
    }

    /// The NVLink error types the part counts: the NVLink 5 field counters on Blackwell, the
    /// per-link error counter call's before.
    pub fn nvlink_error_types(&self) -> &'static [NvlinkErrorType] {
        if self.architecture.eq_ignore_ascii_case("Blackwell") {
            &NvlinkErrorType::NVLINK5
        } else {
            &NvlinkErrorType::LEGACY
        }
    }

    /// Whether the part remaps memory rows (Ampere and later) rather than retiring pages.
    pub fn remaps_rows(&self) -> bool {
        ["Ampere", "Hopper", "Blackwell"]
            .iter()
            .any(|a| self.architecture.eq_ignore_ascii_case(a))
    }
}

/// A PCIe link: generation and width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieLink {
    /// Link generation (3 before Ampere, 4 for Ampere, 5 for Hopper).
    pub generation: u32,
    /// Number of lanes.
    pub width: u32,
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

/// What a simulated GPU reports at one point in time.
///
/// `readout` is what the NVML source would read from such a GPU, in the type every GPU source
/// maps to series (so the simulated node serves it as it is, and the fake NVML and DCGM
/// libraries answer from it): every reading the part supports is `Some`. The other fields are
/// quantities of the model that no NVML reading carries, for the profiling and benchmark
/// models.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    /// What the GPU reports (`up` is true). Energy and the NVLink byte totals are counters:
    /// energy is a deterministic initial offset (consumed before the scenario began) plus the
    /// integral of power; neither ever decreases.
    pub readout: GpuReadout,
    /// NVLink transmit rate now, bytes per second (the rate the total grows at; 0 without
    /// NVLink).
    pub nvlink_tx_bytes_per_second: f64,
    /// NVLink receive rate now, bytes per second (0 without NVLink).
    pub nvlink_rx_bytes_per_second: f64,
    /// SM clock the GPU would run at under full load now, hertz: its maximum, reduced by the
    /// thermal slowdown its temperature causes and by the power cap a full load would meet.
    /// What a benchmark started now would get (see [`crate::bench`]).
    pub full_load_sm_clock_hz: f64,
    /// Instantaneous board power, watts: what `NVML_FI_DEV_POWER_INSTANT` reads. The
    /// readout's `power_watts` is the driver's 1 s average of it, and energy its integral.
    pub power_instant_watts: f64,
}
