#![doc = include_str!("../scenarios/README.md")]

use std::time::Duration;

use serde::Deserialize;

use dgx_pixels_readout::labels::NvlinkErrorType;

use crate::error::ScenarioError;
use crate::types::{Clocks, GpuStatic};

/// Names of the scenarios built into the crate; each is also a readable example file under
/// `crates/sim/scenarios/`.
pub const BUILTIN_SCENARIOS: &[&str] = &[
    "dgx-h100",
    "dgx-a100-mig",
    "dgx-spark",
    "fault-gpu-lost",
    "fault-xid-storm",
    "fault-ecc",
    "fault-thermal",
    "fault-health",
    "dgx-b200",
    "gb200-nvl72-tray",
    "fault-fabric",
    "fault-rail",
];

const BUILTIN_TEXT: &[(&str, &str)] = &[
    ("dgx-h100", include_str!("../scenarios/dgx-h100.toml")),
    (
        "dgx-a100-mig",
        include_str!("../scenarios/dgx-a100-mig.toml"),
    ),
    ("dgx-spark", include_str!("../scenarios/dgx-spark.toml")),
    (
        "fault-gpu-lost",
        include_str!("../scenarios/fault-gpu-lost.toml"),
    ),
    (
        "fault-xid-storm",
        include_str!("../scenarios/fault-xid-storm.toml"),
    ),
    ("fault-ecc", include_str!("../scenarios/fault-ecc.toml")),
    (
        "fault-thermal",
        include_str!("../scenarios/fault-thermal.toml"),
    ),
    (
        "fault-health",
        include_str!("../scenarios/fault-health.toml"),
    ),
    ("dgx-b200", include_str!("../scenarios/dgx-b200.toml")),
    (
        "gb200-nvl72-tray",
        include_str!("../scenarios/gb200-nvl72-tray.toml"),
    ),
    (
        "fault-fabric",
        include_str!("../scenarios/fault-fabric.toml"),
    ),
    ("fault-rail", include_str!("../scenarios/fault-rail.toml")),
];

/// Most GPUs a scenario may define.
pub const MAX_GPUS: usize = 64;

/// The XID that means "GPU has fallen off the bus".
pub const XID_GPU_LOST: u32 = 79;

const MIB: u64 = 1024 * 1024;
const MAX_RATE: f64 = 1e13;

// ---------------------------------------------------------------------------------------------
// The file format, as serde sees it.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    node: RawNode,
    #[serde(default)]
    workload: RawWorkload,
    gpus: Vec<RawGpu>,
    #[serde(default)]
    mig: Vec<RawMig>,
    #[serde(default)]
    time_slicing: Vec<RawTimeSlicing>,
    #[serde(default)]
    phases: Vec<RawPhase>,
    #[serde(default)]
    faults: Vec<RawFault>,
    /// Kept as written: its keys are the exporter's `[cost]` settings, checked there.
    #[serde(default)]
    cost: Option<toml::Table>,
    #[serde(default)]
    storage: Vec<RawStorage>,
}

/// `[[storage]]`: a mount the simulated `storage_read` probe reads.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStorage {
    path: String,
    read_bytes_per_second: f64,
    degraded_at_s: Option<f64>,
    degraded_until_s: Option<f64>,
    degraded_factor: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    seed: u64,
    driver_version: Option<String>,
    cuda_driver_version: Option<u32>,
    ambient_celsius: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    repeat_after_s: Option<f64>,
    hpc_job_id: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    count: Option<u32>,
    name: String,
    architecture: String,
    vbios_version: Option<String>,
    memory_total_bytes: Option<u64>,
    memory_reserved_bytes: Option<u64>,
    memory_temperature_sensor: Option<bool>,
    memory_temperature_offset_celsius: Option<f64>,
    power_limit_watts: f64,
    idle_power_watts: f64,
    max_power_watts: Option<f64>,
    max_graphics_clock_hz: f64,
    max_sm_clock_hz: Option<f64>,
    max_memory_clock_hz: f64,
    max_video_clock_hz: f64,
    idle_graphics_clock_hz: Option<f64>,
    idle_video_clock_hz: Option<f64>,
    #[serde(default)]
    nvlink_count: u32,
    slowdown_temperature_celsius: f64,
    shutdown_temperature_celsius: f64,
    max_operating_temperature_celsius: Option<f64>,
    thermal_resistance_celsius_per_watt: Option<f64>,
    thermal_time_constant_s: Option<f64>,
    #[serde(default)]
    fan: bool,
    pci_bus_ids: Option<Vec<String>>,
    fabric_clique_id: Option<u32>,
    rail_rate_bytes_per_second: Option<f64>,
    platform_chassis_serial: Option<String>,
    platform_slot_number: Option<u8>,
    platform_tray_index: Option<u8>,
    platform_host_id: Option<u8>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMig {
    gpu: u32,
    profiles: Vec<String>,
}

/// `[[time_slicing]]`: several processes share each of `gpus` (validate/sharing.rs).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeSlicing {
    gpus: Vec<u32>,
    weights: Vec<f64>,
    /// `"time_slicing"` (the default) or `"mps"`.
    mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPhase {
    name: Option<String>,
    start_s: f64,
    gpus: Option<Vec<u32>>,
    utilization: f64,
    memory_used_ratio: Option<f64>,
    memory_used_bytes: Option<u64>,
    memory_bandwidth_ratio: Option<f64>,
    #[serde(default)]
    pcie_tx_bytes_per_second: f64,
    #[serde(default)]
    pcie_rx_bytes_per_second: f64,
    #[serde(default)]
    nvlink_tx_bytes_per_second: f64,
    #[serde(default)]
    nvlink_rx_bytes_per_second: f64,
    #[serde(default)]
    ramp_s: f64,
    spread: Option<f64>,
    noise: Option<f64>,
    swing_period_s: Option<f64>,
    swing_compute_ratio: Option<f64>,
    swing_utilization: Option<f64>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
enum RawFaultKind {
    Xid,
    Lost,
    Ecc,
    Thermal,
    NvlinkDown,
    NvlinkErrors,
    PcieDegraded,
    PowerBrake,
    Reset,
    RecoveryAction,
    Fabric,
    RailDown,
    RailRate,
}

impl RawFaultKind {
    fn as_str(self) -> &'static str {
        match self {
            RawFaultKind::Xid => "xid",
            RawFaultKind::Lost => "lost",
            RawFaultKind::Ecc => "ecc",
            RawFaultKind::Thermal => "thermal",
            RawFaultKind::NvlinkDown => "nvlink_down",
            RawFaultKind::NvlinkErrors => "nvlink_errors",
            RawFaultKind::PcieDegraded => "pcie_degraded",
            RawFaultKind::PowerBrake => "power_brake",
            RawFaultKind::Reset => "reset",
            RawFaultKind::RecoveryAction => "recovery_action",
            RawFaultKind::Fabric => "fabric",
            RawFaultKind::RailDown => "rail_down",
            RawFaultKind::RailRate => "rail_rate",
        }
    }

    /// Whether faults of this kind use the optional key `key` (`kind`, `gpu` and `at_s` are
    /// used by all): the one table behind the "not used by faults of kind" errors.
    fn uses(self, key: &str) -> bool {
        use RawFaultKind::*;
        match key {
            "xid" => matches!(self, Xid | Lost),
            "repeat_every_s" | "count" => matches!(self, Xid | Ecc | NvlinkErrors),
            "recover_at_s" => matches!(self, Xid | Lost),
            "corrected" | "uncorrected" | "rows_retired" => self == Ecc,
            "until_s" => matches!(
                self,
                Thermal
                    | NvlinkDown
                    | PcieDegraded
                    | PowerBrake
                    | RecoveryAction
                    | Fabric
                    | RailDown
                    | RailRate
            ),
            "action" => self == RecoveryAction,
            "state" | "flag" | "clique_id" => self == Fabric,
            "rate_bytes_per_second" => self == RailRate,
            "ambient_rise_celsius" | "thermal_resistance_factor" => self == Thermal,
            "link" => matches!(self, NvlinkDown | NvlinkErrors),
            "error_type" | "errors" => self == NvlinkErrors,
            "width" | "generation" => self == PcieDegraded,
            _ => false,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    kind: RawFaultKind,
    gpu: u32,
    at_s: f64,
    xid: Option<u32>,
    repeat_every_s: Option<f64>,
    count: Option<u64>,
    recover_at_s: Option<f64>,
    corrected: Option<u64>,
    uncorrected: Option<u64>,
    rows_retired: Option<u64>,
    until_s: Option<f64>,
    ambient_rise_celsius: Option<f64>,
    thermal_resistance_factor: Option<f64>,
    link: Option<u32>,
    error_type: Option<String>,
    errors: Option<u64>,
    width: Option<u32>,
    generation: Option<u32>,
    action: Option<String>,
    state: Option<String>,
    flag: Option<String>,
    clique_id: Option<u32>,
    rate_bytes_per_second: Option<f64>,
}

impl RawFault {
    /// The optional keys, in the order their misuse is reported, with whether each is set.
    fn optional_keys(&self) -> [(&'static str, bool); 20] {
        [
            ("until_s", self.until_s.is_some()),
            ("ambient_rise_celsius", self.ambient_rise_celsius.is_some()),
            (
                "thermal_resistance_factor",
                self.thermal_resistance_factor.is_some(),
            ),
            ("corrected", self.corrected.is_some()),
            ("uncorrected", self.uncorrected.is_some()),
            ("rows_retired", self.rows_retired.is_some()),
            ("xid", self.xid.is_some()),
            ("recover_at_s", self.recover_at_s.is_some()),
            ("repeat_every_s", self.repeat_every_s.is_some()),
            ("count", self.count.is_some()),
            ("link", self.link.is_some()),
            ("error_type", self.error_type.is_some()),
            ("errors", self.errors.is_some()),
            ("width", self.width.is_some()),
            ("generation", self.generation.is_some()),
            ("action", self.action.is_some()),
            ("state", self.state.is_some()),
            ("flag", self.flag.is_some()),
            ("clique_id", self.clique_id.is_some()),
            (
                "rate_bytes_per_second",
                self.rate_bytes_per_second.is_some(),
            ),
        ]
    }
}

// ---------------------------------------------------------------------------------------------
// The validated model.

/// Physical parameters of one GPU, after defaults were applied.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuModel {
    pub idle_power: f64,
    pub max_power: f64,
    pub power_limit: f64,
    pub idle_clocks: Clocks,
    pub max_clocks: Clocks,
    pub thermal_resistance: f64,
    pub time_constant_s: f64,
    pub max_operating_temperature: f64,
    pub slowdown_temperature: f64,
    pub memory_total: Option<u64>,
    pub memory_reserved: Option<u64>,
    pub memory_temperature_offset: Option<f64>,
    pub fan: bool,
    pub nvlink_count: u32,
}

/// How much memory a phase uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum PhaseMemory {
    /// Fraction of the usable memory (total - reserved).
    Ratio(f64),
    /// Absolute bytes.
    Bytes(u64),
}

/// One workload phase.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Phase {
    /// Position in the file (for noise streams).
    pub index: usize,
    pub start: Duration,
    pub ramp: Duration,
    pub gpus: Option<Vec<u32>>,
    pub utilization: f64,
    pub memory: PhaseMemory,
    pub memory_bandwidth: Option<f64>,
    pub pcie_tx: f64,
    pub pcie_rx: f64,
    pub nvlink_tx: f64,
    pub nvlink_rx: f64,
    pub spread: f64,
    pub noise: f64,
    /// The fast swing of a training step, if the phase has one.
    pub swing: Option<Swing>,
}

/// A square wave inside a phase: each `period_steps` model steps, the first `compute_steps`
/// run at the phase's utilization (compute) and the rest at `utilization` (communication).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Swing {
    pub period_steps: u64,
    pub compute_steps: u64,
    pub utilization: f64,
}

/// How often an event fires.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Repeat {
    pub at: Duration,
    pub every: Option<Duration>,
    /// Total occurrences; `None` = unlimited (only with `every`).
    pub count: Option<u64>,
}

impl Repeat {
    /// Occurrences at or before `t`.
    pub fn occurrences(&self, t: Duration) -> u64 {
        if t < self.at {
            return 0;
        }
        let n = match self.every {
            None => 1,
            Some(every) => {
                let per = every.as_nanos().max(1);
                let k = (t - self.at).as_nanos() / per;
                u64::try_from(k).unwrap_or(u64::MAX).saturating_add(1)
            }
        };
        match self.count {
            Some(c) => n.min(c),
            None => n,
        }
    }
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fault {
    Xid {
        gpu: usize,
        xid: u32,
        when: Repeat,
    },
    Lost {
        gpu: usize,
        xid: u32,
        at: Duration,
        recover: Option<Duration>,
    },
    Ecc {
        gpu: usize,
        corrected: u64,
        uncorrected: u64,
        /// Rows taken out of service per occurrence after repeated corrected errors.
        rows_retired: u64,
        when: Repeat,
    },
    Thermal {
        gpu: usize,
        at: Duration,
        until: Duration,
        ambient_rise: f64,
        resistance_factor: f64,
    },
    /// Link `link` (all links when `None`) is down in `[at, until)`.
    NvlinkDown {
        gpu: usize,
        link: Option<u32>,
        at: Duration,
        until: Option<Duration>,
    },
    /// `errors` more errors of one type on one link per occurrence.
    NvlinkErrors {
        gpu: usize,
        link: u32,
        error_type: NvlinkErrorType,
        errors: u64,
        when: Repeat,
    },
    /// The current PCIe link is at most this wide and this fast in `[at, until)`.
    PcieDegraded {
        gpu: usize,
        width: Option<u32>,
        generation: Option<u32>,
        at: Duration,
        until: Option<Duration>,
    },
    /// The hardware power brake holds the clocks down in `[at, until)`.
    PowerBrake {
        gpu: usize,
        at: Duration,
        until: Duration,
    },
    /// The GPU is reset at `at`.
    Reset {
        gpu: usize,
        at: Duration,
    },
    /// The driver reports a recovery action (NVML's field) in `[at, until)`.
    RecoveryAction {
        gpu: usize,
        action: dgx_pixels_readout::labels::RecoveryAction,
        at: Duration,
        until: Option<Duration>,
    },
    /// The NVLink fabric reports `state` (instead of completed), `flag` and/or the GPU in
    /// clique `clique_id` (instead of its table's) in `[at, until)`.
    Fabric {
        gpu: usize,
        state: Option<dgx_pixels_readout::labels::FabricState>,
        flag: Option<dgx_pixels_readout::labels::FabricHealthFlag>,
        clique_id: Option<u32>,
        at: Duration,
        until: Option<Duration>,
    },
    /// The port of the GPU's rail NIC is down in `[at, until)`.
    RailDown {
        gpu: usize,
        at: Duration,
        until: Option<Duration>,
    },
    /// The port of the GPU's rail NIC runs at `rate` bytes per second in `[at, until)`.
    RailRate {
        gpu: usize,
        rate: f64,
        at: Duration,
        until: Option<Duration>,
    },
}

impl Fault {
    pub fn gpu(&self) -> usize {
        match self {
            Fault::Xid { gpu, .. }
            | Fault::Lost { gpu, .. }
            | Fault::Ecc { gpu, .. }
            | Fault::Thermal { gpu, .. }
            | Fault::NvlinkDown { gpu, .. }
            | Fault::NvlinkErrors { gpu, .. }
            | Fault::PcieDegraded { gpu, .. }
            | Fault::PowerBrake { gpu, .. }
            | Fault::Reset { gpu, .. }
            | Fault::RecoveryAction { gpu, .. }
            | Fault::Fabric { gpu, .. }
            | Fault::RailDown { gpu, .. }
            | Fault::RailRate { gpu, .. } => *gpu,
        }
    }
}

/// A validated scenario: GPUs, workload phases and faults of one simulated node.
///
/// Build one with [`Scenario::builtin`], [`Scenario::load`] or [`Scenario::from_toml_str`]; all
/// three go through the same parser and validation, so a `Scenario` is always consistent and a
/// [`Node`](crate::Node) built from it never fails.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    origin: String,
    name: String,
    description: String,
    seed: u64,
    driver_version: String,
    cuda_driver_version: u32,
    pub(crate) ambient_celsius: f64,
    pub(crate) repeat_after: Option<Duration>,
    /// `[workload] hpc_job_id`: the job of the first cycle (each cycle's job is the next id).
    pub(crate) hpc_job_id: Option<u64>,
    pub(crate) gpus: Vec<GpuStatic>,
    pub(crate) models: Vec<GpuModel>,
    /// Sorted by start time (stable).
    pub(crate) phases: Vec<Phase>,
    pub(crate) faults: Vec<Fault>,
    cost: Option<toml::Table>,
    pub(crate) storage: Vec<crate::storage::StorageMount>,
}

impl Scenario {
    /// The built-in scenario called `name` (see [`BUILTIN_SCENARIOS`]), or `None`.
    pub fn builtin(name: &str) -> Option<Scenario> {
        let (_, text) = BUILTIN_TEXT.iter().find(|(n, _)| *n == name)?;
        // Built-ins are checked by the test suite; should one ever fail, it is simply unknown.
        Scenario::from_toml_str(text, &format!("builtin:{name}")).ok()
    }

    /// The TOML text of a built-in scenario, e.g. to write it out as a starting point.
    pub fn builtin_text(name: &str) -> Option<&'static str> {
        BUILTIN_TEXT
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
    }

    /// Loads a built-in by name, or else a TOML scenario file at that path.
    pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
        if let Some((name, text)) = BUILTIN_TEXT.iter().find(|(n, _)| *n == name_or_path) {
            return Scenario::from_toml_str(text, &format!("builtin:{name}"));
        }
        let path = std::path::Path::new(name_or_path);
        if name_or_path.is_empty() || !path.exists() {
            return Err(ScenarioError::Unknown {
                name: name_or_path.to_string(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            origin: name_or_path.to_string(),
            source,
        })?;
        Scenario::from_toml_str(&text, name_or_path)
    }

    /// Parses and validates scenario TOML; `origin` (a file name) is used in error messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let ctx = Ctx { origin, text };
        let raw: RawScenario = toml::from_str(text).map_err(|e| ctx.toml_error(&e))?;
        validate(&ctx, raw)
    }

    /// The scenario's name (`[node] name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The scenario's description (`[node] description`).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Where it came from: the file path, or `builtin:NAME`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Seed of all pseudo-random values (identifiers, noise).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Driver version string, e.g. `550.54.15`.
    pub fn driver_version(&self) -> &str {
        &self.driver_version
    }

    /// CUDA driver version in NVML's encoding (`12040` for 12.4).
    pub fn cuda_driver_version(&self) -> u32 {
        self.cuda_driver_version
    }

    /// Static facts of every GPU, by index.
    pub fn gpus(&self) -> &[GpuStatic] {
        &self.gpus
    }

    /// The `[cost]` table as written, if the scenario has one: the same keys as the exporter's
    /// config file `[cost]`, which checks them.
    pub fn cost(&self) -> Option<&toml::Table> {
        self.cost.as_ref()
    }

    /// Period after which the workload phases start over, if they repeat.
    pub fn repeat_after(&self) -> Option<Duration> {
        self.repeat_after
    }

    /// When the workload first puts a GPU to work (the start of the first phase with a
    /// utilization above 0): a simulated job's processes, and its profiler traces, exist from
    /// then on. Zero for a scenario without phases.
    pub fn job_starts_at(&self) -> Duration {
        self.phases
            .iter()
            .find(|p| p.utilization > 0.0)
            .map_or(Duration::ZERO, |p| p.start)
    }

    /// The HPC job that holds every GPU at `t`, as a Slurm prolog would name it in the job
    /// files: `[workload] hpc_job_id` plus the number of the cycle (each cycle runs a new job),
    /// from the cycle's [`Scenario::job_starts_at`] to its end. `None` between jobs and in a
    /// scenario without the key. A late rank's GPU is held from the job's start, idle or not:
    /// the allocated but idle time the health collector counts.
    pub fn hpc_job_at(&self, t: Duration) -> Option<String> {
        let first = self.hpc_job_id?;
        let (cycle, within) = match self.repeat_after {
            Some(period) if !period.is_zero() => {
                let n = t.as_nanos() / period.as_nanos();
                let into = t.as_nanos() - n * period.as_nanos();
                (u64::try_from(n).ok()?, into)
            }
            _ => (0, t.as_nanos()),
        };
        (within >= self.job_starts_at().as_nanos()).then(|| first.saturating_add(cycle).to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// Validation: see the `validate` module.

mod validate;

use validate::{validate, Ctx};

#[cfg(test)]
mod tests;
