//! Validation of the workload: the `[[phases]]` and `[[faults]]` tables.

use std::time::Duration;

use super::super::{
    Fault, GpuModel, Phase, PhaseMemory, RawFaultKind, RawScenario, Repeat, MAX_RATE, XID_GPU_LOST,
};
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

/// The `[[faults]]` tables.
pub(super) fn faults(
    ctx: &Ctx<'_>,
    raw: &RawScenario,
    n_gpus: usize,
) -> Result<Vec<Fault>, ScenarioError> {
    let gpu_index = gpu_indexer(ctx, n_gpus);
    let mut faults = Vec::new();
    for (i, f) in raw.faults.iter().enumerate() {
        let t = format!("faults[{i}]");
        let t = t.as_str();
        let kind = f.kind;
        let gpu = gpu_index(t, "gpu", f.gpu)?;
        let at = ctx.time(t, "at_s", f.at_s)?;
        let repeat = |ctx: &Ctx<'_>| -> Result<Repeat, ScenarioError> {
            let every = match f.repeat_every_s {
                Some(v) => Some(ctx.interval(t, "repeat_every_s", v)?),
                None => None,
            };
            match (every, f.count) {
                (_, Some(0)) => Err(ctx.err(t, Some("count"), "expected a count >= 1")),
                (None, Some(c)) if c > 1 => {
                    Err(ctx.err(t, Some("count"), "a count above 1 needs repeat_every_s"))
                }
                _ => Ok(Repeat {
                    at,
                    every,
                    count: f.count,
                }),
            }
        };
        let recover = |ctx: &Ctx<'_>| -> Result<Option<Duration>, ScenarioError> {
            match f.recover_at_s {
                Some(v) => {
                    let r = ctx.time(t, "recover_at_s", v)?;
                    if r <= at {
                        return Err(ctx.err(t, Some("recover_at_s"), "expected a time after at_s"));
                    }
                    Ok(Some(r))
                }
                None => Ok(None),
            }
        };
        if kind != RawFaultKind::Thermal {
            ctx.unused(t, "until_s", &f.until_s, kind)?;
            ctx.unused(t, "ambient_rise_celsius", &f.ambient_rise_celsius, kind)?;
            ctx.unused(
                t,
                "thermal_resistance_factor",
                &f.thermal_resistance_factor,
                kind,
            )?;
        }
        if kind != RawFaultKind::Ecc {
            ctx.unused(t, "corrected", &f.corrected, kind)?;
            ctx.unused(t, "uncorrected", &f.uncorrected, kind)?;
        }
        match kind {
            RawFaultKind::Xid => {
                let Some(xid) = f.xid else {
                    return Err(ctx.err(t, Some("xid"), "faults of kind \"xid\" need an xid code"));
                };
                if xid == XID_GPU_LOST {
                    ctx.unused(t, "repeat_every_s", &f.repeat_every_s, kind)?;
                    ctx.unused(t, "count", &f.count, kind)?;
                    faults.push(Fault::Lost {
                        gpu,
                        xid,
                        at,
                        recover: recover(ctx)?,
                    });
                } else {
                    if f.recover_at_s.is_some() {
                        return Err(ctx.err(
                            t,
                            Some("recover_at_s"),
                            format!("only used with xid {XID_GPU_LOST} (GPU lost)"),
                        ));
                    }
                    faults.push(Fault::Xid {
                        gpu,
                        xid,
                        when: repeat(ctx)?,
                    });
                }
            }
            RawFaultKind::Lost => {
                ctx.unused(t, "repeat_every_s", &f.repeat_every_s, kind)?;
                ctx.unused(t, "count", &f.count, kind)?;
                faults.push(Fault::Lost {
                    gpu,
                    xid: f.xid.unwrap_or(XID_GPU_LOST),
                    at,
                    recover: recover(ctx)?,
                });
            }
            RawFaultKind::Ecc => {
                ctx.unused(t, "xid", &f.xid, kind)?;
                ctx.unused(t, "recover_at_s", &f.recover_at_s, kind)?;
                let corrected = f.corrected.unwrap_or(0);
                let uncorrected = f.uncorrected.unwrap_or(0);
                if corrected == 0 && uncorrected == 0 {
                    return Err(ctx.err(
                        t,
                        Some("corrected"),
                        "an ecc fault needs corrected or uncorrected > 0",
                    ));
                }
                faults.push(Fault::Ecc {
                    gpu,
                    corrected,
                    uncorrected,
                    when: repeat(ctx)?,
                });
            }
            RawFaultKind::Thermal => {
                ctx.unused(t, "xid", &f.xid, kind)?;
                ctx.unused(t, "recover_at_s", &f.recover_at_s, kind)?;
                ctx.unused(t, "repeat_every_s", &f.repeat_every_s, kind)?;
                ctx.unused(t, "count", &f.count, kind)?;
                let Some(until) = f.until_s else {
                    return Err(ctx.err(
                        t,
                        Some("until_s"),
                        "faults of kind \"thermal\" need until_s",
                    ));
                };
                let until = ctx.time(t, "until_s", until)?;
                if until <= at {
                    return Err(ctx.err(t, Some("until_s"), "expected a time after at_s"));
                }
                let ambient_rise = match f.ambient_rise_celsius {
                    Some(v) => ctx.non_negative(t, "ambient_rise_celsius", v, 100.0)?,
                    None => 15.0,
                };
                let resistance_factor = match f.thermal_resistance_factor {
                    Some(v) => {
                        if !(v.is_finite() && (0.1..=20.0).contains(&v)) {
                            return Err(ctx.err(
                                t,
                                Some("thermal_resistance_factor"),
                                "expected a number between 0.1 and 20",
                            ));
                        }
                        v
                    }
                    None => 2.0,
                };
                faults.push(Fault::Thermal {
                    gpu,
                    at,
                    until,
                    ambient_rise,
                    resistance_factor,
                });
            }
        }
    }
    Ok(faults)
}
