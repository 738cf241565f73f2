//! Building a GPU's simulation from the scenario: its phases, faults, MIG instances and initial
//! (thermally settled) state.

use std::time::Duration;

use super::{
    GpuPhase, GpuSim, MigParams, SimState, Target, Window, AVERAGE_STEPS, STEP_S, S_ENERGY,
    S_MIG_ACTIVITY, S_MIG_MEMORY, S_SPREAD,
};
use crate::noise;
use crate::scenario::{Fault, PhaseMemory, Repeat, Scenario};

impl GpuSim {
    pub(super) fn new(scenario: &Scenario, index: usize) -> Option<GpuSim> {
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
                    swing: p.swing,
                }
            })
            .collect();
        let mut thermal = Vec::new();
        let mut lost = Vec::new();
        let mut xids = Vec::new();
        let mut ecc = Vec::new();
        let mut nvlink_down = Vec::new();
        let mut nvlink_errors = Vec::new();
        let mut pcie_degraded = Vec::new();
        let mut power_brake = Vec::new();
        let mut recovery = Vec::new();
        let mut fabric = Vec::new();
        let mut rail_down = Vec::new();
        let mut rail_rate = Vec::new();
        let mut resets = Vec::new();
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
                    rows_retired,
                    when,
                    ..
                } => ecc.push((*corrected, *uncorrected, *rows_retired, *when)),
                Fault::Thermal {
                    at,
                    until,
                    ambient_rise,
                    resistance_factor,
                    ..
                } => thermal.push((*at, *until, *ambient_rise, *resistance_factor)),
                Fault::NvlinkDown {
                    link, at, until, ..
                } => nvlink_down.push((
                    *link,
                    Window {
                        from: *at,
                        until: *until,
                    },
                )),
                Fault::NvlinkErrors {
                    link,
                    error_type,
                    errors,
                    when,
                    ..
                } => nvlink_errors.push((*link, *error_type, *errors, *when)),
                Fault::PcieDegraded {
                    width,
                    generation,
                    at,
                    until,
                    ..
                } => pcie_degraded.push((
                    *width,
                    *generation,
                    Window {
                        from: *at,
                        until: *until,
                    },
                )),
                Fault::PowerBrake { at, until, .. } => power_brake.push((*at, *until)),
                Fault::Reset { at, .. } => resets.push(*at),
                Fault::RecoveryAction {
                    action, at, until, ..
                } => recovery.push((
                    *action,
                    Window {
                        from: *at,
                        until: *until,
                    },
                )),
                Fault::Fabric {
                    state,
                    flag,
                    clique_id,
                    at,
                    until,
                    ..
                } => fabric.push((
                    *state,
                    *flag,
                    *clique_id,
                    Window {
                        from: *at,
                        until: *until,
                    },
                )),
                Fault::RailDown { at, until, .. } => rail_down.push(Window {
                    from: *at,
                    until: *until,
                }),
                Fault::RailRate {
                    rate, at, until, ..
                } => rail_rate.push((
                    *rate,
                    Window {
                        from: *at,
                        until: *until,
                    },
                )),
            }
        }
        lost.sort_by_key(|l| l.0);
        resets.sort();
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
            nvlink_down,
            nvlink_errors,
            pcie_degraded,
            power_brake,
            resets,
            recovery,
            fabric,
            rail_down,
            rail_rate,
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
                recent_power: [0.0; AVERAGE_STEPS],
            },
            state: SimState {
                step: 0,
                temperature: 0.0,
                energy: 0.0,
                nvlink_tx: 0,
                nvlink_rx: 0,
                violation_power: 0.0,
                violation_thermal: 0.0,
                recent_power: [0.0; AVERAGE_STEPS],
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
}
