//! Validation of the workload: the `[[phases]]` tables.

use std::time::Duration;

use super::super::{GpuModel, Phase, PhaseMemory, RawPhase, RawScenario, Swing, MAX_RATE};
use super::{gpu_indexer, Ctx};
use crate::error::ScenarioError;
use crate::node::STEP;

/// The `[[phases]]` tables, sorted by start time.
pub(super) fn phases(
    ctx: &Ctx<'_>,
    raw: &RawScenario,
    repeat_after: Option<Duration>,
    models: &[GpuModel],
) -> Result<Vec<Phase>, ScenarioError> {
    let mut phases = Vec::new();
    for (i, p) in raw.phases.iter().enumerate() {
        let t = format!("phases[{i}]");
        phases.push(phase(ctx, &t, i, p, repeat_after, models)?);
    }
    phases.sort_by_key(|p| p.start);
    Ok(phases)
}

/// The `i`th `[[phases]]` table, `t`.
fn phase(
    ctx: &Ctx<'_>,
    t: &str,
    i: usize,
    p: &RawPhase,
    repeat_after: Option<Duration>,
    models: &[GpuModel],
) -> Result<Phase, ScenarioError> {
    let start = ctx.time(t, "start_s", p.start_s)?;
    if repeat_after.is_some_and(|rep| start >= rep) {
        return Err(ctx.err(
            t,
            Some("start_s"),
            "expected a start before workload.repeat_after_s",
        ));
    }
    let gpus = gpu_selection(ctx, t, p, models.len())?;
    let utilization = ctx.ratio(t, "utilization", p.utilization)?;
    let memory = memory(ctx, t, p, gpus.as_deref(), models)?;
    let memory_bandwidth = match p.memory_bandwidth_ratio {
        Some(r) => Some(ctx.ratio(t, "memory_bandwidth_ratio", r)?),
        None => None,
    };
    let [pcie_tx, pcie_rx, nvlink_tx, nvlink_rx] = [
        ("pcie_tx_bytes_per_second", p.pcie_tx_bytes_per_second),
        ("pcie_rx_bytes_per_second", p.pcie_rx_bytes_per_second),
        ("nvlink_tx_bytes_per_second", p.nvlink_tx_bytes_per_second),
        ("nvlink_rx_bytes_per_second", p.nvlink_rx_bytes_per_second),
    ]
    .map(|(key, v)| ctx.non_negative(t, key, v, MAX_RATE));
    // In key order: the first bad rate is the one reported.
    let (pcie_tx, pcie_rx, nvlink_tx, nvlink_rx) = (pcie_tx?, pcie_rx?, nvlink_tx?, nvlink_rx?);
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
    Ok(Phase {
        index: i,
        start,
        ramp,
        gpus,
        utilization,
        memory,
        memory_bandwidth,
        pcie_tx,
        pcie_rx,
        nvlink_tx,
        nvlink_rx,
        spread,
        noise,
        swing: swing(ctx, t, p)?,
    })
}

/// The phase's `gpus`, when given: valid indices, each once.
fn gpu_selection(
    ctx: &Ctx<'_>,
    t: &str,
    p: &RawPhase,
    n_gpus: usize,
) -> Result<Option<Vec<u32>>, ScenarioError> {
    let Some(list) = &p.gpus else {
        return Ok(None);
    };
    if list.is_empty() {
        return Err(ctx.err(t, Some("gpus"), "expected at least one GPU index"));
    }
    let gpu_index = gpu_indexer(ctx, n_gpus);
    for (k, g) in list.iter().enumerate() {
        gpu_index(t, "gpus", *g)?;
        if list[..k].contains(g) {
            return Err(ctx.err(t, Some("gpus"), format!("GPU {g} listed twice")));
        }
    }
    Ok(Some(list.clone()))
}

/// The memory the phase uses: a ratio, or bytes that fit every GPU it runs on.
fn memory(
    ctx: &Ctx<'_>,
    t: &str,
    p: &RawPhase,
    gpus: Option<&[u32]>,
    models: &[GpuModel],
) -> Result<PhaseMemory, ScenarioError> {
    let b = match (p.memory_used_ratio, p.memory_used_bytes) {
        (Some(_), Some(_)) => {
            return Err(ctx.err(
                t,
                Some("memory_used_bytes"),
                "give memory_used_ratio or memory_used_bytes, not both",
            ))
        }
        (Some(r), None) => return Ok(PhaseMemory::Ratio(ctx.ratio(t, "memory_used_ratio", r)?)),
        (None, None) => return Ok(PhaseMemory::Ratio(0.0)),
        (None, Some(b)) => b,
    };
    let targets: Vec<usize> = match gpus {
        Some(list) => list.iter().map(|g| *g as usize).collect(),
        None => (0..models.len()).collect(),
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
    Ok(PhaseMemory::Bytes(b))
}

/// The phase's swing: `swing_period_s`, `swing_compute_ratio` and `swing_utilization` together
/// or not at all; the period a whole number of model steps (0.2 to 10 s), and each part at
/// least one step.
fn swing(ctx: &Ctx<'_>, t: &str, p: &RawPhase) -> Result<Option<Swing>, ScenarioError> {
    let (period, ratio, utilization) =
        match (p.swing_period_s, p.swing_compute_ratio, p.swing_utilization) {
            (None, None, None) => return Ok(None),
            (Some(p), Some(r), Some(u)) => (p, r, u),
            _ => {
                return Err(ctx.err(
                    t,
                    Some("swing_period_s"),
                    "swing_period_s, swing_compute_ratio and swing_utilization go together",
                ))
            }
        };
    let step = STEP.as_secs_f64();
    let steps = (period / step).round();
    if !(period.is_finite()
        && (0.2..=10.0).contains(&period)
        && (period / step - steps).abs() < 1e-6)
    {
        return Err(ctx.err(
            t,
            Some("swing_period_s"),
            "expected a multiple of 0.1 s between 0.2 and 10",
        ));
    }
    let ratio = ctx.ratio(t, "swing_compute_ratio", ratio)?;
    let compute = (steps * ratio).round();
    if compute < 1.0 || compute >= steps {
        return Err(ctx.err(
            t,
            Some("swing_compute_ratio"),
            "leaves compute or communication less than one 0.1 s step of the period",
        ));
    }
    Ok(Some(Swing {
        period_steps: steps as u64,
        compute_steps: compute as u64,
        utilization: ctx.ratio(t, "swing_utilization", utilization)?,
    }))
}
