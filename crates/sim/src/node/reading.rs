//! A GPU's reading at a time: the integrated state and the step's values, read out as the
//! [`GpuReadout`] NVML would report, plus what only the model knows.

use std::collections::BTreeMap;
use std::time::Duration;

use dgx_pixels_readout::labels::{NvlinkErrorType, ThrottleReason, ViolationPolicy};
use dgx_pixels_readout::{
    EccTotals, GpuReadout, MigReadout, NvlinkReadout, ProcessReadout, RemappedRowsReadout,
    RetiredPages,
};

use super::{
    floor_mib, step_of, time_of, GpuSim, MigParams, IDLE_UTILIZATION, MIB, P0_UTILIZATION, STEP_S,
    S_MIG_NOISE,
};
use crate::noise;
use crate::types::{GpuReading, GpuState, GpuStatic};

impl GpuSim {
    /// The state at `t` of this GPU, whose static facts are `g`.
    pub(super) fn reading(&mut self, g: &GpuStatic, t: Duration) -> GpuState {
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
            xid_incidents: BTreeMap::new(),
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
                    errors: NvlinkErrorType::ALL.map(|e| (e, 0.0)).into_iter().collect(),
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
