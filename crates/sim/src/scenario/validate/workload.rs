//! Validation of the workload: the `[[phases]]` tables.

use std::time::Duration;

use super::super::{GpuModel, Phase, PhaseMemory, RawScenario, MAX_RATE};
use super::{gpu_indexer, Ctx};
use crate::error::ScenarioError;

/// The `[[phases]]` tables, sorted by start time.
pub(super) fn phases(
    ctx: &Ctx<'_>,
    raw: &RawScenario,
    repeat_after: Option<Duration>,
    models: &[GpuModel],
) -> Result<Vec<Phase>, ScenarioError> {
    let n_gpus = models.len();
    let gpu_index = gpu_indexer(ctx, n_gpus);
    let mut phases = Vec::new();
    for (i, p) in raw.phases.iter().enumerate() {
        let t = format!("phases[{i}]");
        let t = t.as_str();
        let start = ctx.time(t, "start_s", p.start_s)?;
        if let Some(rep) = repeat_after {
            if start >= rep {
                return Err(ctx.err(
                    t,
                    Some("start_s"),
                    "expected a start before workload.repeat_after_s",
                ));
            }
        }
        let gpus_sel = match &p.gpus {
            Some(list) => {
                if list.is_empty() {
                    return Err(ctx.err(t, Some("gpus"), "expected at least one GPU index"));
                }
                for (k, g) in list.iter().enumerate() {
                    gpu_index(t, "gpus", *g)?;
                    if list[..k].contains(g) {
                        return Err(ctx.err(t, Some("gpus"), format!("GPU {g} listed twice")));
                    }
                }
                Some(list.clone())
            }
            None => None,
        };
        let utilization = ctx.ratio(t, "utilization", p.utilization)?;
        let memory = match (p.memory_used_ratio, p.memory_used_bytes) {
            (Some(_), Some(_)) => {
                return Err(ctx.err(
                    t,
                    Some("memory_used_bytes"),
                    "give memory_used_ratio or memory_used_bytes, not both",
                ))
            }
            (Some(r), None) => PhaseMemory::Ratio(ctx.ratio(t, "memory_used_ratio", r)?),
            (None, Some(b)) => {
                let targets: Vec<usize> = match &gpus_sel {
                    Some(list) => list.iter().map(|g| *g as usize).collect(),
                    None => (0..n_gpus).collect(),
                };
                for g in targets {
                    let m = &models[g];
                    if let (Some(total), Some(res)) = (m.memory_total, m.memory_reserved) {
                        if b > total - res {
                            return Err(ctx.err(
                                t,
                                Some("memory_used_bytes"),
                                format!("GPU {g} has only {} usable bytes", total - res),
                            ));
                        }
                    }
                }
                PhaseMemory::Bytes(b)
            }
            (None, None) => PhaseMemory::Ratio(0.0),
        };
        let memory_bandwidth = match p.memory_bandwidth_ratio {
            Some(r) => Some(ctx.ratio(t, "memory_bandwidth_ratio", r)?),
            None => None,
        };
        let pcie_tx = ctx.non_negative(
            t,
            "pcie_tx_bytes_per_second",
            p.pcie_tx_bytes_per_second,
            MAX_RATE,
        )?;
        let pcie_rx = ctx.non_negative(
            t,
            "pcie_rx_bytes_per_second",
            p.pcie_rx_bytes_per_second,
            MAX_RATE,
        )?;
        let nvlink_tx = ctx.non_negative(
            t,
            "nvlink_tx_bytes_per_second",
            p.nvlink_tx_bytes_per_second,
            MAX_RATE,
        )?;
        let nvlink_rx = ctx.non_negative(
            t,
            "nvlink_rx_bytes_per_second",
            p.nvlink_rx_bytes_per_second,
            MAX_RATE,
        )?;
        let ramp = ctx.time(t, "ramp_s", p.ramp_s)?;
        let spread = match p.spread {
            Some(v) => ctx.non_negative(t, "spread", v, 0.5)?,
            None => 0.02,
        };
        let noise = match p.noise {
            Some(v) => ctx.non_negative(t, "noise", v, 0.5)?,
            None => 0.02,
        };
        let _label = &p.name; // for readers of the file only
        phases.push(Phase {
            index: i,
            start,
            ramp,
            gpus: gpus_sel,
            utilization,
            memory,
            memory_bandwidth,
            pcie_tx,
            pcie_rx,
            nvlink_tx,
            nvlink_rx,
            spread,
            noise,
        });
    }
    phases.sort_by_key(|p| p.start);
    Ok(phases)
}
