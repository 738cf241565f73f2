//! The simulation: per-GPU state integrated forward in fixed steps, cached, and read out at any
//! time. This module holds the model's constants and state types and the public [`Node`];
//! building a GPU's simulation is in `setup`, its physics in `physics`, reading it out in
//! `reading`.

mod physics;
mod reading;
mod setup;

use std::time::Duration;

use dgx_pixels_readout::labels::NvlinkErrorType;
use dgx_pixels_readout::GpuIdentity;

use crate::scenario::{GpuModel, Repeat, Scenario, Swing};
use crate::types::{Clocks, GpuState, GpuStatic};

/// Integration step of the model. Readings between two steps use the state at the earlier step;
/// the energy and NVLink counters are extended linearly, so they are continuous in time.
pub const STEP: Duration = Duration::from_millis(100);
const STEP_NS: u128 = 100_000_000;
const STEP_S: f64 = 0.1;
/// Steps in the driver's averaged power reading (1 s on Ampere and newer).
const AVERAGE_STEPS: usize = 10;
const MIB: u64 = 1024 * 1024;

/// Utilization at and above which clocks reach their (unthrottled) maximum.
const FULL_CLOCK_UTILIZATION: f64 = 0.25;
/// Below this utilization the GPU counts as idle (`gpu_idle`, higher P-state).
const IDLE_UTILIZATION: f64 = 0.01;
/// Utilization from which the GPU is in P0.
const P0_UTILIZATION: f64 = 0.05;
/// Clock reduction per degree above the maximum operating temperature (software slowdown).
const SW_THERMAL_GAIN: f64 = 0.04;
/// Clock reduction per degree above the slowdown temperature (hardware slowdown).
const HW_THERMAL_GAIN: f64 = 0.15;
/// Clocks never fall below this fraction of the range between idle and maximum clocks.
const MIN_CLOCK_FACTOR: f64 = 0.25;
/// Clock (and dynamic power) factor while the hardware power brake is asserted: the board
/// pulls the clocks down to their floor.
const POWER_BRAKE_FACTOR: f64 = MIN_CLOCK_FACTOR;
/// A pre-Ampere GPU retires at most this many pages (then it needs service).
const MAX_RETIRED_PAGES: u64 = 64;
/// Spare rows per bank of a GPU that remaps rows: one more remap fails.
const SPARE_ROWS: u64 = 512;

// Noise streams.
const S_UTIL: u64 = 1;
const S_BANDWIDTH: u64 = 2;
const S_PCIE: u64 = 3;
const S_NVLINK: u64 = 4;
const S_IDLE_POWER: u64 = 5;
const S_SPREAD: u64 = 6;
const S_ENERGY: u64 = 7;
const S_MIG_ACTIVITY: u64 = 8;
const S_MIG_MEMORY: u64 = 9;
const S_CAP_WOBBLE: u64 = 10;
const S_MIG_NOISE: u64 = 0x100;

/// Workload targets at one moment (before noise).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Target {
    utilization: f64,
    memory_fraction: f64,
    bandwidth: f64,
    pcie_tx: f64,
    pcie_rx: f64,
    nvlink_tx: f64,
    nvlink_rx: f64,
    noise: f64,
}

impl Target {
    fn lerp(a: &Target, b: &Target, f: f64) -> Target {
        let l = |x: f64, y: f64| x + (y - x) * f;
        Target {
            utilization: l(a.utilization, b.utilization),
            memory_fraction: l(a.memory_fraction, b.memory_fraction),
            bandwidth: l(a.bandwidth, b.bandwidth),
            pcie_tx: l(a.pcie_tx, b.pcie_tx),
            pcie_rx: l(a.pcie_rx, b.pcie_rx),
            nvlink_tx: l(a.nvlink_tx, b.nvlink_tx),
            nvlink_rx: l(a.nvlink_rx, b.nvlink_rx),
            noise: l(a.noise, b.noise),
        }
    }
}

/// A phase as it applies to one GPU.
#[derive(Debug, Clone)]
struct GpuPhase {
    start_ns: u128,
    ramp_ns: u128,
    target: Target,
    /// The training step's square wave, after the ramp.
    swing: Option<Swing>,
}

#[derive(Debug, Clone)]
struct MigParams {
    gpu_instance: u32,
    compute_instance: u32,
    profile: String,
    uuid: String,
    memory_total: u64,
    activity_weight: f64,
    memory_weight: f64,
}

/// Integrated state at the start of step `step`.
#[derive(Debug, Clone, PartialEq)]
struct SimState {
    step: u64,
    temperature: f64,
    energy: f64,
    nvlink_tx: u64,
    nvlink_rx: u64,
    violation_power: f64,
    violation_thermal: f64,
    /// Power of the last [`AVERAGE_STEPS`] steps, at `step % AVERAGE_STEPS` (0 before the first).
    recent_power: [f64; AVERAGE_STEPS],
}

/// Instantaneous values of an active (not lost) GPU during one step.
#[derive(Debug, Clone, Copy)]
struct StepEval {
    utilization: f64,
    memory_utilization: f64,
    memory_fraction: f64,
    power: f64,
    clocks: Clocks,
    sw_power_cap: bool,
    sw_thermal: bool,
    hw_thermal: bool,
    power_brake: bool,
    pcie_tx: f64,
    pcie_rx: f64,
    nvlink_tx: f64,
    nvlink_rx: f64,
}

/// A fault's time window `[from, until)`, open-ended without `until`.
#[derive(Debug, Clone, Copy)]
struct Window {
    from: Duration,
    until: Option<Duration>,
}

impl Window {
    fn holds(&self, t: Duration) -> bool {
        self.from <= t && self.until.is_none_or(|u| t < u)
    }
}

/// A fabric fault: `(state instead of completed, flag that holds, clique instead of the
/// GPU's, when)`.
type FabricFault = (
    Option<dgx_pixels_readout::labels::FabricState>,
    Option<dgx_pixels_readout::labels::FabricHealthFlag>,
    Option<u32>,
    Window,
);

#[derive(Debug, Clone)]
struct GpuSim {
    index: u64,
    seed: u64,
    model: GpuModel,
    ambient: f64,
    repeat_ns: Option<u128>,
    phases: Vec<GpuPhase>,
    /// `(from, until, ambient rise, resistance factor)`.
    thermal: Vec<(Duration, Duration, f64, f64)>,
    /// `(since, recover, xid)`.
    lost: Vec<(Duration, Option<Duration>, u32)>,
    xids: Vec<(u32, Repeat)>,
    /// `(corrected, uncorrected, rows retired, when)`.
    ecc: Vec<(u64, u64, u64, Repeat)>,
    /// Links down: `(link or all, when)`.
    nvlink_down: Vec<(Option<u32>, Window)>,
    /// NVLink errors: `(link, type, errors per occurrence, when)`.
    nvlink_errors: Vec<(u32, NvlinkErrorType, u64, Repeat)>,
    /// The current PCIe link held below the maximum: `(width, generation, when)`.
    pcie_degraded: Vec<(Option<u32>, Option<u32>, Window)>,
    /// Power brake windows `(from, until)`.
    power_brake: Vec<(Duration, Duration)>,
    /// Reset times, sorted.
    resets: Vec<Duration>,
    /// Recovery actions the driver reports, and when.
    recovery: Vec<(dgx_pixels_readout::labels::RecoveryAction, Window)>,
    /// Fabric faults.
    fabric: Vec<FabricFault>,
    /// When the rail NIC's port is down.
    rail_down: Vec<Window>,
    /// The rail NIC's port held at a lower rate: `(bytes per second, when)`.
    rail_rate: Vec<(f64, Window)>,
    mig: Vec<MigParams>,
    bar1_total: Option<u64>,
    /// `exp(-STEP / tau)`.
    alpha: f64,
    initial: SimState,
    state: SimState,
}

fn step_of(t: Duration) -> u64 {
    u64::try_from(t.as_nanos() / STEP_NS).unwrap_or(u64::MAX)
}

fn time_of(step: u64) -> Duration {
    let ns = u128::from(step) * STEP_NS;
    let secs = u64::try_from(ns / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs, (ns % 1_000_000_000) as u32)
}

fn floor_mib(bytes: f64) -> u64 {
    if bytes.is_finite() && bytes > 0.0 {
        (bytes as u64) / MIB * MIB
    } else {
        0
    }
}

/// A simulated GPU node: the static facts of its GPUs and their state at any time.
///
/// Time is a [`Duration`] since scenario start; the caller owns the clock (a daemon passes the
/// time since it started, a test passes whatever it likes). Each GPU's state is integrated
/// forward in [`STEP`]s and cached, so querying with increasing times costs only the steps in
/// between, and a query for an earlier time recomputes from zero: the result never depends on the
/// order or number of queries. The first query for a time `t` costs `O(t / STEP)` per GPU.
#[derive(Debug, Clone)]
pub struct Node {
    scenario: Scenario,
    sims: Vec<GpuSim>,
}

impl Node {
    /// Builds the node a scenario describes.
    pub fn new(scenario: Scenario) -> Node {
        let sims = (0..scenario.gpus.len())
            .filter_map(|i| GpuSim::new(&scenario, i))
            .collect();
        Node { scenario, sims }
    }

    /// The scenario this node runs.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Driver version string, e.g. `550.54.15`.
    pub fn driver_version(&self) -> &str {
        self.scenario.driver_version()
    }

    /// CUDA driver version in NVML's encoding (`12040` for 12.4).
    pub fn cuda_driver_version(&self) -> u32 {
        self.scenario.cuda_driver_version()
    }

    /// Number of GPUs.
    pub fn gpu_count(&self) -> usize {
        self.sims.len()
    }

    /// Static facts of GPU `index`, or `None` if out of range.
    pub fn gpu(&self, index: usize) -> Option<&GpuStatic> {
        self.scenario.gpus.get(index)
    }

    /// State of GPU `index` at time `t` since scenario start; `None` if `index` is out of range.
    ///
    /// Deterministic: the same scenario and `t` always give the same result.
    pub fn reading(&mut self, index: usize, t: Duration) -> Option<GpuState> {
        let g = self.scenario.gpus.get(index)?;
        Some(self.sims.get_mut(index)?.reading(g, t))
    }

    /// States of all GPUs at time `t`, by index.
    pub fn readings(&mut self, t: Duration) -> Vec<GpuState> {
        let gpus = &self.scenario.gpus;
        self.sims
            .iter_mut()
            .zip(gpus)
            .map(|(s, g)| s.reading(g, t))
            .collect()
    }

    /// Instantaneous board power of GPU `index` at `t` (what `NVML_FI_DEV_POWER_INSTANT` reads),
    /// without building a whole reading: what a fast power sampler asks many times a second.
    /// `None` if out of range or the GPU is lost.
    pub fn power_instant(&mut self, index: usize, t: Duration) -> Option<f64> {
        self.sims.get_mut(index)?.power_instant(t)
    }

    /// Identity of GPU `index` as NVML reports it, or `None` if out of range.
    pub fn identity(&self, index: usize) -> Option<GpuIdentity> {
        let g = self.gpu(index)?;
        Some(g.identity(self.driver_version(), self.cuda_driver_version()))
    }
}
