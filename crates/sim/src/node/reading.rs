//! A GPU's reading at a time: the integrated state and the step's values, read out as the
//! [`GpuReadout`] NVML would report, plus what only the model knows.

use std::collections::BTreeMap;
use std::time::Duration;

use dgx_pixels_readout::labels::{
    FabricHealthFlag, FabricState, NvlinkErrorType, RecoveryAction, ThrottleReason, ViolationPolicy,
};
use dgx_pixels_readout::{
    EccTotals, FabricReadout, GpuReadout, MigReadout, NvlinkReadout, ProcessReadout,
    ProcessUtilization, RailPortReadout, RemappedRowsReadout, RetiredPages,
};

use super::{
    floor_mib, step_of, time_of, GpuSim, MigParams, StepEval, IDLE_UTILIZATION, MAX_RETIRED_PAGES,
    MIB, P0_UTILIZATION, SPARE_ROWS, STEP_S, S_MIG_NOISE,
};
use crate::noise;
use crate::types::{GpuReading, GpuState, GpuStatic, PcieLink};

/// A GPU's memory errors at one time: totals since the driver loaded (also the lifetime
/// counts: the simulated driver never reloads) and since the last GPU reset.
#[derive(Debug, Clone, Copy, Default)]
struct MemoryErrors {
    corrected: u64,
    uncorrected: u64,
    /// Rows taken out of service after repeated corrected errors.
    rows_retired: u64,
    corrected_since_reset: u64,
    uncorrected_since_reset: u64,
    rows_retired_since_reset: u64,
}

impl MemoryErrors {
    /// The ECC counters: volatile since the last reset, aggregate in all.
    fn totals(&self) -> EccTotals {
        EccTotals {
            volatile_corrected: self.corrected_since_reset as f64,
            volatile_uncorrected: self.uncorrected_since_reset as f64,
            aggregate_corrected: self.corrected as f64,
            aggregate_uncorrected: self.uncorrected as f64,
        }
    }

    /// What the errors did to the memory. Ampere and later remap a row per uncorrectable error
    /// (and per row retired after corrected errors) from the 512 spare rows of a bank; one more
    /// fails. Older parts retire a page instead, at most 64. Either is pending until the GPU is
    /// reset, which applies it (the counts stay).
    fn retirement(&self, remaps_rows: bool) -> (Option<RemappedRowsReadout>, Option<RetiredPages>) {
        let pending = self.uncorrected_since_reset > 0 || self.rows_retired_since_reset > 0;
        if remaps_rows {
            let uncorrectable = self.uncorrected.min(SPARE_ROWS);
            let correctable = self.rows_retired.min(SPARE_ROWS - uncorrectable);
            let rows = RemappedRowsReadout {
                correctable: correctable as f64,
                uncorrectable: uncorrectable as f64,
                pending,
                failure: self.uncorrected.saturating_add(self.rows_retired) > SPARE_ROWS,
            };
            (Some(rows), None)
        } else {
            let double_bit = self.uncorrected.min(MAX_RETIRED_PAGES);
            let single_bit = self.rows_retired.min(MAX_RETIRED_PAGES - double_bit);
            let pages = RetiredPages {
                single_bit_ecc: single_bit as f64,
                double_bit_ecc: double_bit as f64,
                pending,
            };
            (None, Some(pages))
        }
    }
}

/// What the groups of one reading share: the time, its step's values and the memory in use.
struct At<'a> {
    t: Duration,
    k: u64,
    e: StepEval,
    /// Seconds into the step, for the counters integrated up to `t`.
    partial: f64,
    temperature: f64,
    /// `(instance, activity, memory used)` per MIG instance.
    mig: Vec<(&'a MigParams, f64, u64)>,
    /// Memory used, free and reserved; `None` on a unified-memory GPU.
    used: Option<u64>,
    free: Option<u64>,
    reserved: Option<u64>,
}

impl GpuSim {
    /// The state at `t` of this GPU, whose static facts are `g`.
    pub(super) fn reading(&mut self, g: &GpuStatic, t: Duration) -> GpuState {
        let k = step_of(t);
        self.advance_to(k);
        if let Some((since, xid)) = self.lost_at(t) {
            return GpuState::Lost { since, xid };
        }
        let temperature = self.state.temperature;
        let e = self.eval(k, temperature);
        let mig = self.mig_at(k, &e);
        let (used, free, reserved) = self.memory_in_use(&mig, &e);
        let at = At {
            t,
            k,
            e,
            partial: t.saturating_sub(time_of(k)).as_secs_f64().min(STEP_S),
            temperature,
            mig,
            used,
            free,
            reserved,
        };
        GpuState::Ok(GpuReading {
            readout: self.readout(g, &at),
            nvlink_tx_bytes_per_second: e.nvlink_tx,
            nvlink_rx_bytes_per_second: e.nvlink_rx,
            full_load_sm_clock_hz: self.full_load_sm_clock(temperature, e.power_brake),
            power_instant_watts: e.power,
        })
    }

    /// The readout NVML would give: one field a line, each group's work in its helper.
    fn readout(&self, g: &GpuStatic, at: &At<'_>) -> GpuReadout {
        let (t, e, partial) = (at.t, &at.e, at.partial);
        let memory = self.memory_errors(t);
        let (remapped_rows, retired_pages) = memory.retirement(g.remaps_rows());
        let pcie = self.pcie_link_at(g, t);
        let idle = e.utilization < IDLE_UTILIZATION;
        let processes = self.processes(g, at, idle);
        let bar1_used_bytes = self
            .bar1_total
            .map(|_| 4 * MIB + at.used.map_or(0, |u| floor_mib(u as f64 / 4096.0)));
        let nvlink = |total: u64, rate: f64| {
            (g.nvlink_count > 0).then_some(total.saturating_add((rate * partial) as u64) as f64)
        };
        let bytes = |b: Option<u64>| b.map(|b| b as f64);
        GpuReadout {
            recovery_action: Some(self.recovery_action_at(t)),
            fabric: g.fabric.as_ref().map(|f| self.fabric_at(f, t)),
            platform: g.platform.clone(),
            // On hardware from sysfs (the NIC nearest the GPU); here the scenario's.
            rail_ports: g.rail.iter().map(|r| self.rail_port_at(r, t)).collect(),
            up: true,
            utilization_ratio: Some(e.utilization),
            memory_utilization_ratio: Some(e.memory_utilization),
            // The modelled workloads do no video.
            encoder_utilization_ratio: Some(0.0),
            decoder_utilization_ratio: Some(0.0),
            bar1_used_bytes: bytes(bar1_used_bytes),
            bar1_total_bytes: bytes(g.bar1_total_bytes),
            memory_used_bytes: bytes(at.used),
            memory_free_bytes: bytes(at.free),
            memory_reserved_bytes: bytes(at.reserved),
            memory_total_bytes: bytes(g.memory_total_bytes),
            // The driver's reading is a 1 s average (Ampere and newer); the instantaneous value
            // is `GpuReading::power_instant_watts` (NVML_FI_DEV_POWER_INSTANT).
            power_watts: Some(self.power_average(at.k, e.power)),
            power_limit_watts: Some(g.power_limit_watts),
            // Samples between readings are the sampler's (`Node::power_instant`), not a reading's.
            power_samples: None,
            energy_joules: Some(self.state.energy + e.power * partial),
            temperature_gpu_celsius: Some(at.temperature),
            temperature_memory_celsius: self
                .model
                .memory_temperature_offset
                .map(|o| at.temperature + o),
            clocks: e.clocks.readout(),
            max_clocks: g.max_clocks.readout(),
            performance_state: Some(if e.utilization >= P0_UTILIZATION {
                0
            } else {
                8
            }),
            fan_speed_ratios: self.fan_speed_ratio(at.temperature).into_iter().collect(),
            throttle_reasons: throttle_reasons(e, idle),
            xid_counts: self.xid_counts_at(t),
            xid_incidents: BTreeMap::new(),
            ecc: Some(memory.totals()),
            ecc_enabled: Some(true),
            retired_pages,
            remapped_rows,
            throttle_violations: self.violations(e, partial),
            // The simulated PCIe links never replay.
            pcie_replays: g.pcie_link.map(|_| 0.0),
            pcie_link_generation: pcie.map(|l| f64::from(l.generation)),
            pcie_link_width: pcie.map(|l| f64::from(l.width)),
            pcie_link_max_generation: g.pcie_link.map(|l| f64::from(l.generation)),
            pcie_link_max_width: g.pcie_link.map(|l| f64::from(l.width)),
            nvlinks: self.nvlinks_at(g, t),
            // The links' counters are the model's; their sum is the GPU's.
            nvlink_errors: Default::default(),
            process_count: Some(processes.len()),
            processes,
            // The source picks which processes get activity series (each one's is in
            // `processes`).
            process_activity: Vec::new(),
            pcie_transmit_bytes_per_second: Some(e.pcie_tx),
            pcie_receive_bytes_per_second: Some(e.pcie_rx),
            nvlink_transmit_bytes: nvlink(self.state.nvlink_tx, e.nvlink_tx),
            nvlink_receive_bytes: nvlink(self.state.nvlink_rx, e.nvlink_rx),
            mig: at.mig.iter().map(mig_readout).collect(),
        }
    }

    /// Each MIG instance at step `k`: its share of the GPU's activity and memory.
    fn mig_at(&self, k: u64, e: &StepEval) -> Vec<(&MigParams, f64, u64)> {
        self.mig
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
            .collect()
    }

    /// Memory used, free and reserved: the instances' sum under MIG.
    fn memory_in_use(
        &self,
        mig: &[(&MigParams, f64, u64)],
        e: &StepEval,
    ) -> (Option<u64>, Option<u64>, Option<u64>) {
        let Some(total) = self.model.memory_total else {
            return (None, None, None);
        };
        let reserved = self.model.memory_reserved.unwrap_or(0).min(total);
        let usable = total - reserved;
        let used = if mig.is_empty() {
            floor_mib(usable as f64 * e.memory_fraction)
        } else {
            mig.iter().map(|(_, _, used)| used).sum()
        }
        .min(usable);
        (Some(used), Some(usable - used), Some(reserved))
    }

    /// One process per busy GPU or busy MIG instance, holding the memory in use.
    fn processes(&self, g: &GpuStatic, at: &At<'_>, idle: bool) -> Vec<ProcessReadout> {
        let base_pid = crate::process_id(self.index);
        if idle {
            Vec::new()
        } else if at.mig.is_empty() && !g.process_weights.is_empty() {
            // Time-sliced: each process gets its weight's part of the work and the memory.
            at.used.map_or_else(Vec::new, |u| {
                shared_processes(base_pid, u, &g.process_weights, &at.e)
            })
        } else if at.mig.is_empty() {
            at.used
                .filter(|u| *u > 0)
                .map(|u| ProcessReadout {
                    pid: base_pid,
                    used_memory_bytes: u as f64,
                    ..Default::default()
                })
                .into_iter()
                .collect()
        } else {
            at.mig
                .iter()
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
        }
    }

    /// XID events by code, counted up to `t`.
    fn xid_counts_at(&self, t: Duration) -> BTreeMap<u32, u64> {
        let mut xid_counts = BTreeMap::new();
        for (xid, when) in &self.xids {
            let n = when.occurrences(t);
            if n > 0 {
                let c = xid_counts.entry(*xid).or_insert(0u64);
                *c = c.saturating_add(n);
            }
        }
        xid_counts
    }

    /// The fan's speed on a GPU with one: 30% up to 10 C above ambient, then rising with the
    /// temperature.
    fn fan_speed_ratio(&self, temperature: f64) -> Option<f64> {
        let m = &self.model;
        m.fan.then(|| {
            let span = (m.slowdown_temperature - self.ambient).max(1.0);
            (0.3 + 0.7 * (temperature - self.ambient - 10.0) / span).clamp(0.3, 1.0)
        })
    }

    /// A driver with the field reports "none" unless a fault says otherwise.
    fn recovery_action_at(&self, t: Duration) -> RecoveryAction {
        self.recovery
            .iter()
            .find(|(_, w)| w.holds(t))
            .map_or(RecoveryAction::None, |(a, _)| *a)
    }

    /// Time spent capped by power and by temperature, up to `partial` seconds into the step.
    fn violations(&self, e: &StepEval, partial: f64) -> Vec<(ViolationPolicy, f64)> {
        let during = |held: bool| if held { partial } else { 0.0 };
        vec![
            (
                ViolationPolicy::Power,
                self.state.violation_power + during(e.sw_power_cap),
            ),
            (
                ViolationPolicy::Thermal,
                self.state.violation_thermal + during(e.sw_thermal || e.hw_thermal),
            ),
        ]
    }

    /// Each NVLink's state and error counts at `t`.
    fn nvlinks_at(&self, g: &GpuStatic, t: Duration) -> Vec<NvlinkReadout> {
        (0..g.nvlink_count)
            .map(|link| NvlinkReadout {
                link,
                up: self.nvlink_up(link, t),
                errors: g
                    .nvlink_error_types()
                    .iter()
                    .map(|&e| (e, self.nvlink_error_count(link, e, t)))
                    .collect(),
            })
            .collect()
    }
}

/// The throttle reasons the step's values set.
fn throttle_reasons(e: &StepEval, idle: bool) -> Vec<(ThrottleReason, bool)> {
    vec![
        (ThrottleReason::GpuIdle, idle),
        (ThrottleReason::SwPowerCap, e.sw_power_cap),
        // Set with either hardware slowdown: thermal, or the power brake.
        (ThrottleReason::HwSlowdown, e.hw_thermal || e.power_brake),
        (ThrottleReason::SwThermalSlowdown, e.sw_thermal),
        (ThrottleReason::HwThermalSlowdown, e.hw_thermal),
        (ThrottleReason::HwPowerBrakeSlowdown, e.power_brake),
    ]
}

fn mig_readout((p, activity, used): &(&MigParams, f64, u64)) -> MigReadout {
    MigReadout {
        gpu_instance: p.gpu_instance,
        compute_instance: p.compute_instance,
        profile: p.profile.clone(),
        mig_uuid: p.uuid.clone(),
        graphics_engine_active_ratio: Some(*activity),
        memory_used_bytes: Some(*used as f64),
        memory_total_bytes: Some(p.memory_total as f64),
    }
}

impl GpuSim {
    /// The last reset at or before `t`.
    fn last_reset(&self, t: Duration) -> Option<Duration> {
        let n = self.resets.partition_point(|r| *r <= t);
        n.checked_sub(1).and_then(|i| self.resets.get(i)).copied()
    }

    /// ECC errors and retired rows at `t`, in all and since the last reset.
    fn memory_errors(&self, t: Duration) -> MemoryErrors {
        let reset = self.last_reset(t);
        let mut m = MemoryErrors::default();
        for (c, u, rows, when) in &self.ecc {
            let n = when.occurrences(t);
            let since = n.saturating_sub(reset.map_or(0, |r| when.occurrences(r)));
            let add = |total: &mut u64, per: u64, times: u64| {
                *total = total.saturating_add(per.saturating_mul(times));
            };
            add(&mut m.corrected, *c, n);
            add(&mut m.uncorrected, *u, n);
            add(&mut m.rows_retired, *rows, n);
            add(&mut m.corrected_since_reset, *c, since);
            add(&mut m.uncorrected_since_reset, *u, since);
            add(&mut m.rows_retired_since_reset, *rows, since);
        }
        m
    }

    /// Whether NVLink `link` is up at `t` (no `nvlink_down` fault holds it down).
    fn nvlink_up(&self, link: u32, t: Duration) -> bool {
        !self
            .nvlink_down
            .iter()
            .any(|(l, when)| l.is_none_or(|l| l == link) && when.holds(t))
    }

    /// Errors of type `kind` counted on NVLink `link` by `t`.
    fn nvlink_error_count(&self, link: u32, kind: NvlinkErrorType, t: Duration) -> f64 {
        self.nvlink_errors
            .iter()
            .filter(|(l, k, ..)| *l == link && *k == kind)
            .fold(0u64, |acc, (_, _, per, when)| {
                acc.saturating_add(per.saturating_mul(when.occurrences(t)))
            }) as f64
    }

    /// The PCIe link as trained at `t`: the maximum, held narrower or slower by any
    /// `pcie_degraded` fault in force.
    fn pcie_link_at(&self, g: &GpuStatic, t: Duration) -> Option<PcieLink> {
        let mut link = g.pcie_link?;
        for (width, generation, when) in &self.pcie_degraded {
            if when.holds(t) {
                link.width = width.map_or(link.width, |w| w.min(link.width));
                link.generation = generation.map_or(link.generation, |n| n.min(link.generation));
            }
        }
        Some(link)
    }
}

impl GpuSim {
    /// The fabric as the driver reports it at `t`: registration completed and every flag
    /// false, unless a fabric fault holds (the first one listed wins the state).
    fn fabric_at(&self, f: &crate::types::FabricStatic, t: Duration) -> FabricReadout {
        let holding: Vec<_> = self
            .fabric
            .iter()
            .filter(|(_, _, _, w)| w.holds(t))
            .collect();
        let state = holding
            .iter()
            .find_map(|(s, ..)| *s)
            .unwrap_or(FabricState::Completed);
        let health = FabricHealthFlag::ALL
            .iter()
            .map(|&flag| (flag, holding.iter().any(|(_, h, ..)| *h == Some(flag))))
            .collect();
        // Until registration completes the driver answers a zeroed cluster and clique.
        let registered = matches!(state, FabricState::Completed);
        FabricReadout {
            state: Some(state),
            status: 0,
            cluster_uuid: if registered {
                f.cluster_uuid.clone()
            } else {
                "00000000-0000-0000-0000-000000000000".to_string()
            },
            clique_id: if registered {
                holding
                    .iter()
                    .find_map(|(_, _, c, _)| *c)
                    .unwrap_or(f.clique_id)
            } else {
                0
            },
            health,
        }
    }

    /// The rail NIC's port at `t`: active at its rate unless a rail fault holds; each
    /// `rail_down` fault begun by `t` went down once (sysfs's link_downed).
    fn rail_port_at(&self, r: &crate::types::RailStatic, t: Duration) -> RailPortReadout {
        let rate = self
            .rail_rate
            .iter()
            .filter(|(_, w)| w.holds(t))
            .map(|(rate, _)| *rate)
            .fold(r.rate_bytes_per_second, f64::min);
        RailPortReadout {
            device: r.device.clone(),
            port: 1,
            up: !self.rail_down.iter().any(|w| w.holds(t)),
            rate_bytes_per_second: Some(rate),
            link_downed: Some(self.rail_down.iter().filter(|w| w.from <= t).count() as f64),
        }
    }
}

/// The processes of a time-sliced GPU: pids from `base_pid` on (the first keeps the one the
/// traces name), each with its weight's part of the GPU's activity and of `used` (in MiB, the
/// last taking what rounding left, so the processes' memory adds up to the GPU's).
fn shared_processes(
    base_pid: u32,
    used: u64,
    weights: &[f64],
    e: &StepEval,
) -> Vec<ProcessReadout> {
    let mut left = used;
    weights
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let bytes = if i + 1 == weights.len() {
                left
            } else {
                floor_mib(used as f64 * w).min(left)
            };
            left -= bytes;
            ProcessReadout {
                pid: base_pid.saturating_add(i as u32),
                pod_uid: crate::shared_pod_uid(base_pid, i),
                used_memory_bytes: bytes as f64,
                utilization: Some(ProcessUtilization {
                    sm: (e.utilization * w).clamp(0.0, 1.0),
                    memory: (e.memory_utilization * w).clamp(0.0, 1.0),
                    // The modelled workloads do no video.
                    encoder: 0.0,
                    decoder: 0.0,
                }),
                ..Default::default()
            }
        })
        .collect()
}
