//! The simulation: per-GPU state integrated forward in fixed steps, cached, and read out at any
//! time.

use std::collections::BTreeMap;
use std::time::Duration;

use dgx_pixels_readout::labels::{NvlinkErrorType, ThrottleReason, ViolationPolicy};
use dgx_pixels_readout::{
    EccTotals, GpuIdentity, GpuReadout, MigReadout, NvlinkReadout, ProcessReadout,
    RemappedRowsReadout, RetiredPages,
};

use crate::noise;
use crate::scenario::{Fault, GpuModel, PhaseMemory, Repeat, Scenario};
use crate::types::{Clocks, GpuReading, GpuState, GpuStatic};

/// Integration step of the model. Readings between two steps use the state at the earlier step;
/// the energy and NVLink counters are extended linearly, so they are continuous in time.
pub const STEP: Duration = Duration::from_millis(100);
const STEP_NS: u128 = 100_000_000;
const STEP_S: f64 = 0.1;
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
    pcie_tx: f64,
    pcie_rx: f64,
    nvlink_tx: f64,
    nvlink_rx: f64,
}

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
    /// `(corrected, uncorrected, when)`.
    ecc: Vec<(u64, u64, Repeat)>,
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

impl GpuSim {
    fn new(scenario: &Scenario, index: usize) -> Option<GpuSim> {
        let model = scenario.models.get(index)?.clone();
        let stat = scenario.gpus.get(index)?;
        let seed = scenario.seed();
        let g = index as u64;
        let usable = match (model.memory_total, model.memory_reserved) {
            (Some(t), Some(r)) => Some(t.saturating_sub(r)),
            (Some(t), None) => Some(t),
            _ => None,
        };
        let phases = scenario
            .phases
            .iter()
            .filter(|p| {
                p.gpus
                    .as_ref()
                    .is_none_or(|list| list.iter().any(|x| *x as usize == index))
            })
            .map(|p| {
                let utilization = if p.utilization > 0.0 {
                    let off = p.spread * noise::unit(seed, g, S_SPREAD, p.index as u64);
                    (p.utilization + off).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                let memory_fraction = match (p.memory, usable) {
                    (PhaseMemory::Ratio(r), _) => r,
                    (PhaseMemory::Bytes(b), Some(u)) if u > 0 => (b as f64 / u as f64).min(1.0),
                    (PhaseMemory::Bytes(_), _) => 0.0,
                };
                let nv = if model.nvlink_count > 0 { 1.0 } else { 0.0 };
                GpuPhase {
                    start_ns: p.start.as_nanos(),
                    ramp_ns: p.ramp.as_nanos(),
                    target: Target {
                        utilization,
                        memory_fraction,
                        bandwidth: p.memory_bandwidth.unwrap_or(0.6 * utilization),
                        pcie_tx: p.pcie_tx,
                        pcie_rx: p.pcie_rx,
                        nvlink_tx: p.nvlink_tx * nv,
                        nvlink_rx: p.nvlink_rx * nv,
                        noise: p.noise,
                    },
                }
            })
            .collect();
        let mut thermal = Vec::new();
        let mut lost = Vec::new();
        let mut xids = Vec::new();
        let mut ecc = Vec::new();
        for f in scenario.faults.iter().filter(|f| f.gpu() == index) {
            match f {
                Fault::Xid { xid, when, .. } => xids.push((*xid, *when)),
                Fault::Lost {
                    xid, at, recover, ..
                } => {
                    lost.push((*at, *recover, *xid));
                    xids.push((
                        *xid,
                        Repeat {
                            at: *at,
                            every: None,
                            count: None,
                        },
                    ));
                }
                Fault::Ecc {
                    corrected,
                    uncorrected,
                    when,
                    ..
                } => ecc.push((*corrected, *uncorrected, *when)),
                Fault::Thermal {
                    at,
                    until,
                    ambient_rise,
                    resistance_factor,
                    ..
                } => thermal.push((*at, *until, *ambient_rise, *resistance_factor)),
            }
        }
        lost.sort_by_key(|l| l.0);
        let mig = stat
            .mig
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, m)| MigParams {
                gpu_instance: m.gpu_instance,
                compute_instance: m.compute_instance,
                profile: m.profile.clone(),
                uuid: m.uuid.clone(),
                memory_total: m.memory_total_bytes,
                activity_weight: 0.55 + 0.45 * noise::unit01(seed, g, S_MIG_ACTIVITY, i as u64),
                memory_weight: 0.6 + 0.4 * noise::unit01(seed, g, S_MIG_MEMORY, i as u64),
            })
            .collect();
        let alpha = (-STEP_S / model.time_constant_s).exp();
        let mut sim = GpuSim {
            index: g,
            seed,
            model,
            ambient: scenario.ambient_celsius,
            repeat_ns: scenario.repeat_after.map(|d| d.as_nanos()),
            phases,
            thermal,
            lost,
            xids,
            ecc,
            mig,
            bar1_total: stat.bar1_total_bytes,
            alpha,
            initial: SimState {
                step: 0,
                temperature: 0.0,
                energy: 0.0,
                nvlink_tx: 0,
                nvlink_rx: 0,
                violation_power: 0.0,
                violation_thermal: 0.0,
            },
            state: SimState {
                step: 0,
                temperature: 0.0,
                energy: 0.0,
                nvlink_tx: 0,
                nvlink_rx: 0,
                violation_power: 0.0,
                violation_thermal: 0.0,
            },
        };
        // Like NVML's counter since driver load: some energy was used before the scenario began.
        let energy = (1.0e6 + 4.9e7 * noise::unit01(seed, g, S_ENERGY, 0)).round();
        // Start in thermal equilibrium with the power drawn at t = 0.
        let (ambient, resistance) = sim.thermal_env(Duration::ZERO);
        let mut temperature = ambient;
        if sim.lost_at(Duration::ZERO).is_none() {
            for _ in 0..64 {
                let p = sim.eval(0, temperature).power;
                temperature = 0.5 * temperature + 0.5 * (ambient + resistance * p);
            }
        }
        sim.initial.temperature = temperature;
        sim.initial.energy = energy;
        sim.state = sim.initial.clone();
        Some(sim)
    }

    fn lost_at(&self, t: Duration) -> Option<(Duration, u32)> {
        self.lost
            .iter()
            .find(|(since, recover, _)| *since <= t && recover.is_none_or(|r| t < r))
            .map(|(since, _, xid)| (*since, *xid))
    }

    /// Effective ambient temperature and thermal resistance at `t`.
    fn thermal_env(&self, t: Duration) -> (f64, f64) {
        let mut ambient = self.ambient;
        let mut resistance = self.model.thermal_resistance;
        for (from, until, rise, factor) in &self.thermal {
            if *from <= t && t < *until {
                ambient += rise;
                resistance *= factor;
            }
        }
        (ambient, resistance)
    }

    fn target(&self, step: u64) -> Target {
        let ns = u128::from(step) * STEP_NS;
        let (tc, cycle) = match self.repeat_ns {
            Some(r) if r > 0 => (ns % r, ns / r),
            _ => (ns, 0),
        };
        let idle = Target::default();
        let Some(last) = self.phases.last() else {
            return idle;
        };
        let pos = self.phases.partition_point(|p| p.start_ns <= tc);
        if pos == 0 {
            // Before the first phase: idle in the first cycle, else the previous cycle's last phase.
            return if cycle == 0 { idle } else { last.target };
        }
        let cur = &self.phases[pos - 1];
        let since = tc - cur.start_ns;
        if cur.ramp_ns == 0 || since >= cur.ramp_ns {
            return cur.target;
        }
        let prev = if pos >= 2 {
            self.phases[pos - 2].target
        } else if cycle > 0 {
            last.target
        } else {
            idle
        };
        Target::lerp(&prev, &cur.target, since as f64 / cur.ramp_ns as f64)
    }

    /// Clock factor from temperature, and the (software, hardware) thermal slowdown flags.
    fn thermal_factor(&self, temperature: f64) -> (f64, bool, bool) {
        let mo = self.model.max_operating_temperature;
        let sd = self.model.slowdown_temperature;
        if temperature <= mo {
            return (1.0, false, false);
        }
        let sw = 1.0 - SW_THERMAL_GAIN * (temperature.min(sd) - mo);
        let hw = HW_THERMAL_GAIN * (temperature - sd).max(0.0);
        ((sw - hw).max(MIN_CLOCK_FACTOR), true, temperature > sd)
    }

    /// The SM clock at full load and `temperature`: what [`GpuSim::eval`] gives at utilization 1,
    /// without the power controller's wobble.
    fn full_load_sm_clock(&self, temperature: f64) -> f64 {
        let m = &self.model;
        let (thermal, _, _) = self.thermal_factor(temperature);
        let dynamic = (m.max_power - m.idle_power).max(0.0) * thermal;
        let cap = if m.idle_power + dynamic > m.power_limit && dynamic > 0.0 {
            ((m.power_limit - m.idle_power) / dynamic).clamp(0.0, 1.0)
        } else {
            1.0
        };
        let scale = (thermal * cap).clamp(0.0, 1.0);
        m.idle_clocks.sm_hz + (m.max_clocks.sm_hz - m.idle_clocks.sm_hz) * scale
    }

    fn eval(&self, step: u64, temperature: f64) -> StepEval {
        let m = &self.model;
        let (seed, g) = (self.seed, self.index);
        let target = self.target(step);
        let amp = target.noise;
        let jitter = |x: f64, stream: u64| -> f64 {
            if x <= 0.0 {
                0.0
            } else {
                x * (1.0 + amp * noise::noise(seed, g, stream, step))
            }
        };
        let utilization = jitter(target.utilization, S_UTIL).clamp(0.0, 1.0);
        let memory_utilization = jitter(target.bandwidth, S_BANDWIDTH).clamp(0.0, 1.0);
        let (thermal, sw_thermal, hw_thermal) = self.thermal_factor(temperature);
        let idle = m.idle_power * (1.0 + 0.01 * noise::noise(seed, g, S_IDLE_POWER, step));
        let dynamic = (m.max_power - m.idle_power).max(0.0) * utilization * thermal;
        let demand = idle + dynamic;
        let (power, cap) = if demand > m.power_limit && dynamic > 0.0 {
            // The power controller holds the draw just under the limit, wobbling a little.
            let wobble = 0.004 * (1.0 + noise::noise(seed, g, S_CAP_WOBBLE, step));
            let power = m.power_limit * (1.0 - wobble);
            (power, ((power - idle) / dynamic).clamp(0.0, 1.0))
        } else {
            (demand.min(m.power_limit), 1.0)
        };
        let load = (utilization / FULL_CLOCK_UTILIZATION).min(1.0);
        let scale = (load * thermal * cap).clamp(0.0, 1.0);
        let clock = |idle: f64, max: f64| idle + (max - idle) * scale;
        StepEval {
            utilization,
            memory_utilization,
            memory_fraction: target.memory_fraction,
            power,
            clocks: Clocks {
                graphics_hz: clock(m.idle_clocks.graphics_hz, m.max_clocks.graphics_hz),
                sm_hz: clock(m.idle_clocks.sm_hz, m.max_clocks.sm_hz),
                memory_hz: m.max_clocks.memory_hz,
                video_hz: clock(m.idle_clocks.video_hz, m.max_clocks.video_hz),
            },
            sw_power_cap: cap < 1.0,
            sw_thermal,
            hw_thermal,
            pcie_tx: jitter(target.pcie_tx, S_PCIE),
            pcie_rx: jitter(target.pcie_rx, S_PCIE + 0x10),
            nvlink_tx: jitter(target.nvlink_tx, S_NVLINK),
            nvlink_rx: jitter(target.nvlink_rx, S_NVLINK + 0x10),
        }
    }

    /// Integrates one step forward.
    fn advance(&mut self) {
        let k = self.state.step;
        let t = time_of(k);
        let (power, tx, rx, capped, hot) = if self.lost_at(t).is_some() {
            (0.0, 0.0, 0.0, false, false)
        } else {
            let e = self.eval(k, self.state.temperature);
            (
                e.power,
                e.nvlink_tx,
                e.nvlink_rx,
                e.sw_power_cap,
                e.sw_thermal || e.hw_thermal,
            )
        };
        let (ambient, resistance) = self.thermal_env(t);
        let steady = ambient + resistance * power;
        let s = &mut self.state;
        s.energy += power * STEP_S;
        s.nvlink_tx = s.nvlink_tx.saturating_add((tx * STEP_S) as u64);
        s.nvlink_rx = s.nvlink_rx.saturating_add((rx * STEP_S) as u64);
        s.temperature = steady + (s.temperature - steady) * self.alpha;
        if capped {
            s.violation_power += STEP_S;
        }
        if hot {
            s.violation_thermal += STEP_S;
        }
        s.step = k.saturating_add(1);
    }

    /// The state at `t` of this GPU, whose static facts are `g`.
    fn reading(&mut self, g: &GpuStatic, t: Duration) -> GpuState {
        let k = step_of(t);
        if k < self.state.step {
            self.state = self.initial.clone();
        }
        while self.state.step < k {
            self.advance();
        }
        if let Some((since, xid)) = self.lost_at(t) {
            return GpuState::Lost { since, xid };
        }
        let m = &self.model;
        let temperature = self.state.temperature;
        let e = self.eval(k, temperature);
        let partial = t.saturating_sub(time_of(k)).as_secs_f64().min(STEP_S);

        // `(instance, memory used)` per MIG instance.
        let mig: Vec<(&MigParams, f64, u64)> = self
            .mig
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let n = noise::noise(self.seed, self.index, S_MIG_NOISE + i as u64, k);
                let activity = if e.utilization > 0.0 {
                    (e.utilization * p.activity_weight * (1.0 + 0.05 * n)).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                let used = floor_mib(p.memory_total as f64 * e.memory_fraction * p.memory_weight);
                (p, activity, used)
            })
            .collect();

        let (used, free, reserved) = match m.memory_total {
            Some(total) => {
                let reserved = m.memory_reserved.unwrap_or(0).min(total);
                let usable = total - reserved;
                let used = if mig.is_empty() {
                    floor_mib(usable as f64 * e.memory_fraction)
                } else {
                    mig.iter().map(|(_, _, used)| used).sum()
                }
                .min(usable);
                (Some(used), Some(usable - used), Some(reserved))
            }
            None => (None, None, None),
        };

        let mut xid_counts = BTreeMap::new();
        for (xid, when) in &self.xids {
            let n = when.occurrences(t);
            if n > 0 {
                let c = xid_counts.entry(*xid).or_insert(0u64);
                *c = c.saturating_add(n);
            }
        }
        // `(corrected, uncorrected)` since the driver loaded, which is also the lifetime count.
        let (mut corrected, mut uncorrected) = (0u64, 0u64);
        for (c, u, when) in &self.ecc {
            let n = when.occurrences(t);
            corrected = corrected.saturating_add(c.saturating_mul(n));
            uncorrected = uncorrected.saturating_add(u.saturating_mul(n));
        }

        let fan_speed_ratio = m.fan.then(|| {
            let span = (m.slowdown_temperature - self.ambient).max(1.0);
            (0.3 + 0.7 * (temperature - self.ambient - 10.0) / span).clamp(0.3, 1.0)
        });
        let idle = e.utilization < IDLE_UTILIZATION;
        // One process per busy GPU or busy MIG instance, holding the memory in use.
        let base_pid = 20_000 + 100 * self.index as u32;
        let processes: Vec<ProcessReadout> = if idle {
            Vec::new()
        } else if mig.is_empty() {
            used.filter(|u| *u > 0)
                .map(|u| ProcessReadout {
                    pid: base_pid,
                    used_memory_bytes: u as f64,
                    ..Default::default()
                })
                .into_iter()
                .collect()
        } else {
            mig.iter()
                .enumerate()
                .filter(|(_, (_, _, used))| *used > 0)
                .map(|(i, (p, _, used))| ProcessReadout {
                    pid: base_pid + 1 + i as u32,
                    used_memory_bytes: *used as f64,
                    gpu_instance: Some(p.gpu_instance),
                    compute_instance: Some(p.compute_instance),
                    ..Default::default()
                })
                .collect()
        };
        // Ampere and later remap a row per uncorrectable error; the remap is pending until the
        // GPU is reset, which never happens within a scenario. A bank has 512 spare rows. Older
        // parts would retire pages instead; none are retired.
        let (remapped_rows, retired_pages) = if g.remaps_rows() {
            let rows = RemappedRowsReadout {
                correctable: 0.0,
                uncorrectable: uncorrected.min(512) as f64,
                pending: uncorrected > 0,
                failure: uncorrected > 512,
            };
            (Some(rows), None)
        } else {
            (None, Some(RetiredPages::default()))
        };
        let capped = e.sw_power_cap;
        let hot = e.sw_thermal || e.hw_thermal;
        let bar1_used_bytes = self
            .bar1_total
            .map(|_| 4 * MIB + used.map_or(0, |u| floor_mib(u as f64 / 4096.0)));
        let nvlink = g.nvlink_count > 0;
        let nvlink_tx = self
            .state
            .nvlink_tx
            .saturating_add((e.nvlink_tx * partial) as u64);
        let nvlink_rx = self
            .state
            .nvlink_rx
            .saturating_add((e.nvlink_rx * partial) as u64);
        let bytes = |b: Option<u64>| b.map(|b| b as f64);
        let readout = GpuReadout {
            up: true,
            utilization_ratio: Some(e.utilization),
            memory_utilization_ratio: Some(e.memory_utilization),
            // The modelled workloads do no video.
            encoder_utilization_ratio: Some(0.0),
            decoder_utilization_ratio: Some(0.0),
            bar1_used_bytes: bytes(bar1_used_bytes),
            bar1_total_bytes: bytes(g.bar1_total_bytes),
            memory_used_bytes: bytes(used),
            memory_free_bytes: bytes(free),
            memory_reserved_bytes: bytes(reserved),
            memory_total_bytes: bytes(g.memory_total_bytes),
            power_watts: Some(e.power),
            power_limit_watts: Some(g.power_limit_watts),
            energy_joules: Some(self.state.energy + e.power * partial),
            temperature_gpu_celsius: Some(temperature),
            temperature_memory_celsius: m.memory_temperature_offset.map(|o| temperature + o),
            clocks: e.clocks.readout(),
            max_clocks: g.max_clocks.readout(),
            performance_state: Some(if e.utilization >= P0_UTILIZATION {
                0
            } else {
                8
            }),
            fan_speed_ratios: fan_speed_ratio.into_iter().collect(),
            throttle_reasons: vec![
                (ThrottleReason::GpuIdle, idle),
                (ThrottleReason::SwPowerCap, e.sw_power_cap),
                // Set with either hardware slowdown; the power brake is never modelled.
                (ThrottleReason::HwSlowdown, e.hw_thermal),
                (ThrottleReason::SwThermalSlowdown, e.sw_thermal),
                (ThrottleReason::HwThermalSlowdown, e.hw_thermal),
                (ThrottleReason::HwPowerBrakeSlowdown, false),
            ],
            xid_counts,
            ecc: Some(EccTotals {
                volatile_corrected: corrected as f64,
                volatile_uncorrected: uncorrected as f64,
                aggregate_corrected: corrected as f64,
                aggregate_uncorrected: uncorrected as f64,
            }),
            ecc_enabled: Some(true),
            retired_pages,
            remapped_rows,
            throttle_violations: vec![
                (
                    ViolationPolicy::Power,
                    self.state.violation_power + if capped { partial } else { 0.0 },
                ),
                (
                    ViolationPolicy::Thermal,
                    self.state.violation_thermal + if hot { partial } else { 0.0 },
                ),
            ],
            // The simulated links never replay or err.
            pcie_replays: g.pcie_link.map(|_| 0.0),
            pcie_link_generation: g.pcie_link.map(|l| f64::from(l.generation)),
            pcie_link_width: g.pcie_link.map(|l| f64::from(l.width)),
            nvlinks: (0..g.nvlink_count)
                .map(|link| NvlinkReadout {
                    link,
                    up: true,
                    errors: NvlinkErrorType::ALL.map(|e| (e, 0.0)).to_vec(),
                })
                .collect(),
            process_count: Some(processes.len()),
            processes,
            pcie_transmit_bytes_per_second: Some(e.pcie_tx),
            pcie_receive_bytes_per_second: Some(e.pcie_rx),
            nvlink_transmit_bytes: nvlink.then_some(nvlink_tx as f64),
            nvlink_receive_bytes: nvlink.then_some(nvlink_rx as f64),
            mig: mig
                .iter()
                .map(|(p, activity, used)| MigReadout {
                    gpu_instance: p.gpu_instance,
                    compute_instance: p.compute_instance,
                    profile: p.profile.clone(),
                    mig_uuid: p.uuid.clone(),
                    graphics_engine_active_ratio: Some(*activity),
                    memory_used_bytes: Some(*used as f64),
                    memory_total_bytes: Some(p.memory_total as f64),
                })
                .collect(),
        };
        GpuState::Ok(GpuReading {
            readout,
            nvlink_tx_bytes_per_second: e.nvlink_tx,
            nvlink_rx_bytes_per_second: e.nvlink_rx,
            full_load_sm_clock_hz: self.full_load_sm_clock(temperature),
        })
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

    /// Identity of GPU `index` as NVML reports it, or `None` if out of range.
    pub fn identity(&self, index: usize) -> Option<GpuIdentity> {
        let g = self.gpu(index)?;
        Some(g.identity(self.driver_version(), self.cuda_driver_version()))
    }
}
