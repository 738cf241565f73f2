//! The physics of one GPU: the workload target at a step, the thermal environment and
//! slowdown, power and clocks at a step ([`GpuSim::eval`]), and one integration step
//! ([`GpuSim::advance`]).

use std::time::Duration;

use super::{
    step_of, time_of, GpuSim, StepEval, Target, AVERAGE_STEPS, FULL_CLOCK_UTILIZATION,
    HW_THERMAL_GAIN, MIN_CLOCK_FACTOR, POWER_BRAKE_FACTOR, STEP_NS, STEP_S, SW_THERMAL_GAIN,
    S_BANDWIDTH, S_CAP_WOBBLE, S_IDLE_POWER, S_NVLINK, S_PCIE, S_UTIL,
};
use crate::noise;
use crate::types::Clocks;

impl GpuSim {
    pub(super) fn lost_at(&self, t: Duration) -> Option<(Duration, u32)> {
        self.lost
            .iter()
            .find(|(since, recover, _)| *since <= t && recover.is_none_or(|r| t < r))
            .map(|(since, _, xid)| (*since, *xid))
    }

    /// Effective ambient temperature and thermal resistance at `t`.
    pub(super) fn thermal_env(&self, t: Duration) -> (f64, f64) {
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
            return match cur.swing {
                Some(w) if (since / STEP_NS) as u64 % w.period_steps >= w.compute_steps => {
                    // The communication part of the training step.
                    Target {
                        utilization: w.utilization,
                        ..cur.target
                    }
                }
                _ => cur.target,
            };
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

    /// Whether the hardware power brake is asserted at `t`.
    pub(super) fn power_brake_at(&self, t: Duration) -> bool {
        self.power_brake
            .iter()
            .any(|(from, until)| *from <= t && t < *until)
    }

    /// The SM clock at full load and `temperature` (with the power brake asserted or not):
    /// what [`GpuSim::eval`] gives at utilization 1, without the power controller's wobble.
    pub(super) fn full_load_sm_clock(&self, temperature: f64, power_brake: bool) -> f64 {
        let m = &self.model;
        let (thermal, _, _) = self.thermal_factor(temperature);
        let thermal = thermal * if power_brake { POWER_BRAKE_FACTOR } else { 1.0 };
        let dynamic = (m.max_power - m.idle_power).max(0.0) * thermal;
        let cap = if m.idle_power + dynamic > m.power_limit && dynamic > 0.0 {
            ((m.power_limit - m.idle_power) / dynamic).clamp(0.0, 1.0)
        } else {
            1.0
        };
        let scale = (thermal * cap).clamp(0.0, 1.0);
        m.idle_clocks.sm_hz + (m.max_clocks.sm_hz - m.idle_clocks.sm_hz) * scale
    }

    pub(super) fn eval(&self, step: u64, temperature: f64) -> StepEval {
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
        // The power brake pulls clocks, and with them the dynamic power, down to the floor.
        let power_brake = self.power_brake_at(time_of(step));
        let thermal = thermal * if power_brake { POWER_BRAKE_FACTOR } else { 1.0 };
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
            power_brake,
            pcie_tx: jitter(target.pcie_tx, S_PCIE),
            pcie_rx: jitter(target.pcie_rx, S_PCIE + 0x10),
            nvlink_tx: jitter(target.nvlink_tx, S_NVLINK),
            nvlink_rx: jitter(target.nvlink_rx, S_NVLINK + 0x10),
        }
    }

    /// Advances the state to step `k` (from the start when `k` is before it).
    pub(super) fn advance_to(&mut self, k: u64) {
        if k < self.state.step {
            self.state = self.initial.clone();
        }
        while self.state.step < k {
            self.advance();
        }
    }

    /// The driver's averaged power at step `k` (the state is at `k`) whose own power is
    /// `power`: the mean of the last second's steps, or of those since the start.
    pub(super) fn power_average(&self, k: u64, power: f64) -> f64 {
        let ring = &self.state.recent_power;
        let at = (k % AVERAGE_STEPS as u64) as usize;
        // `ring[at]` is step k - 10 (or unset): outside the second that ends with step k.
        let sum: f64 = ring.iter().sum::<f64>() - ring[at] + power;
        let n = (k.saturating_add(1)).min(AVERAGE_STEPS as u64);
        sum / n as f64
    }

    /// Instantaneous power at `t`; `None` while the GPU is lost.
    pub(super) fn power_instant(&mut self, t: Duration) -> Option<f64> {
        let k = step_of(t);
        self.advance_to(k);
        if self.lost_at(t).is_some() {
            return None;
        }
        Some(self.eval(k, self.state.temperature).power)
    }

    /// Integrates one step forward.
    pub(super) fn advance(&mut self) {
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
        s.recent_power[(k % AVERAGE_STEPS as u64) as usize] = power;
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
}
