//! Building a GPU's simulation from the scenario: its phases, faults, MIG instances and initial
//! (thermally settled) state.

use std::time::Duration;

use dgx_pixels_readout::labels::{NvlinkErrorType, RecoveryAction};

use super::{
    FabricFault, GpuPhase, GpuSim, MigParams, SimState, Target, Window, AVERAGE_STEPS, STEP_S,
    S_ENERGY, S_MIG_ACTIVITY, S_MIG_MEMORY, S_SPREAD,
};
use crate::noise;
use crate::scenario::{Fault, GpuModel, PhaseMemory, Repeat, Scenario};
use crate::types::GpuStatic;

impl GpuSim {
    pub(super) fn new(scenario: &Scenario, index: usize) -> Option<GpuSim> {
        let model = scenario.models.get(index)?.clone();
        let stat = scenario.gpus.get(index)?;
        let seed = scenario.seed();
        let g = index as u64;
        let mut faults = Faults::default();
        for f in scenario.faults.iter().filter(|f| f.gpu() == index) {
            faults.add(f);
        }
        faults.lost.sort_by_key(|l| l.0);
        faults.resets.sort();
        let Faults {
            thermal,
            lost,
            xids,
            ecc,
            nvlink_down,
            nvlink_errors,
            pcie_degraded,
            power_brake,
            recovery,
            fabric,
            rail_down,
            rail_rate,
            resets,
        } = faults;
        let zero = SimState {
            step: 0,
            temperature: 0.0,
            energy: 0.0,
            nvlink_tx: 0,
            nvlink_rx: 0,
            violation_power: 0.0,
            violation_thermal: 0.0,
            recent_power: [0.0; AVERAGE_STEPS],
        };
        let mut sim = GpuSim {
            index: g,
            seed,
            phases: phases(scenario, &model, index),
            alpha: (-STEP_S / model.time_constant_s).exp(),
            model,
            ambient: scenario.ambient_celsius,
            repeat_ns: scenario.repeat_after.map(|d| d.as_nanos()),
            thermal,
            lost,
            xids,
            ecc,
            nvlink_down,
            nvlink_errors,
            pcie_degraded,
            power_brake,
            resets,
            recovery,
            fabric,
            rail_down,
            rail_rate,
            mig: mig_params(stat, seed, g),
            bar1_total: stat.bar1_total_bytes,
            initial: zero.clone(),
            state: zero,
        };
        sim.settle();
        Some(sim)
    }

    /// The state at t = 0: the energy counter already running and the temperature settled.
    fn settle(&mut self) {
        let (seed, g) = (self.seed, self.index);
        // Like NVML's counter since driver load: some energy was used before the scenario began.
        let energy = (1.0e6 + 4.9e7 * noise::unit01(seed, g, S_ENERGY, 0)).round();
        // Start in thermal equilibrium with the power drawn at t = 0.
        let (ambient, resistance) = self.thermal_env(Duration::ZERO);
        let mut temperature = ambient;
        if self.lost_at(Duration::ZERO).is_none() {
            for _ in 0..64 {
                let p = self.eval(0, temperature).power;
                temperature = 0.5 * temperature + 0.5 * (ambient + resistance * p);
            }
        }
        self.initial.temperature = temperature;
        self.initial.energy = energy;
        self.state = self.initial.clone();
    }
}

/// The workload phases that apply to GPU `index`, with its own spread and memory share.
fn phases(scenario: &Scenario, model: &GpuModel, index: usize) -> Vec<GpuPhase> {
    let (seed, g) = (scenario.seed(), index as u64);
    let usable = match (model.memory_total, model.memory_reserved) {
        (Some(t), Some(r)) => Some(t.saturating_sub(r)),
        (Some(t), None) => Some(t),
        _ => None,
    };
    let nv = if model.nvlink_count > 0 { 1.0 } else { 0.0 };
    scenario
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
                swing: p.swing,
            }
        })
        .collect()
}

/// The MIG instances of `stat`, each with its own share of the activity and the memory.
fn mig_params(stat: &GpuStatic, seed: u64, g: u64) -> Vec<MigParams> {
    stat.mig
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
        .collect()
}

/// One GPU's faults, sorted by kind into the lists [`GpuSim`] keeps.
#[derive(Default)]
struct Faults {
    thermal: Vec<(Duration, Duration, f64, f64)>,
    lost: Vec<(Duration, Option<Duration>, u32)>,
    xids: Vec<(u32, Repeat)>,
    ecc: Vec<(u64, u64, u64, Repeat)>,
    nvlink_down: Vec<(Option<u32>, Window)>,
    nvlink_errors: Vec<(u32, NvlinkErrorType, u64, Repeat)>,
    pcie_degraded: Vec<(Option<u32>, Option<u32>, Window)>,
    power_brake: Vec<(Duration, Duration)>,
    recovery: Vec<(RecoveryAction, Window)>,
    fabric: Vec<FabricFault>,
    rail_down: Vec<Window>,
    rail_rate: Vec<(f64, Window)>,
    resets: Vec<Duration>,
}

impl Faults {
    /// Files `f` under its kind: one line per kind.
    fn add(&mut self, f: &Fault) {
        let window = |from: Duration, until: Option<Duration>| Window { from, until };
        match *f {
            Fault::Xid { xid, when, .. } => self.xids.push((xid, when)),
            Fault::Lost {
                xid, at, recover, ..
            } => {
                self.lost.push((at, recover, xid));
                let once = Repeat {
                    at,
                    every: None,
                    count: None,
                };
                self.xids.push((xid, once));
            }
            Fault::Ecc {
                corrected: c,
                uncorrected: u,
                rows_retired: r,
                when,
                ..
            } => self.ecc.push((c, u, r, when)),
            Fault::Thermal {
                at,
                until,
                ambient_rise: rise,
                resistance_factor: factor,
                ..
            } => self.thermal.push((at, until, rise, factor)),
            Fault::NvlinkDown {
                link, at, until, ..
            } => self.nvlink_down.push((link, window(at, until))),
            Fault::NvlinkErrors {
                link,
                error_type,
                errors,
                when,
                ..
            } => self.nvlink_errors.push((link, error_type, errors, when)),
            Fault::PcieDegraded {
                width,
                generation: n,
                at,
                until,
                ..
            } => self.pcie_degraded.push((width, n, window(at, until))),
            Fault::PowerBrake { at, until, .. } => self.power_brake.push((at, until)),
            Fault::Reset { at, .. } => self.resets.push(at),
            Fault::RecoveryAction {
                action, at, until, ..
            } => self.recovery.push((action, window(at, until))),
            Fault::Fabric {
                state,
                flag,
                clique_id,
                at,
                until,
                ..
            } => self
                .fabric
                .push((state, flag, clique_id, window(at, until))),
            Fault::RailDown { at, until, .. } => self.rail_down.push(window(at, until)),
            Fault::RailRate {
                rate, at, until, ..
            } => self.rail_rate.push((rate, window(at, until))),
        }
    }
}
