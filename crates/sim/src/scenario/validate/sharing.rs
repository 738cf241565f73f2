//! Validation of the `[[time_slicing]]` tables: GPUs shared by several processes (Kubernetes
//! time-slicing or MPS), each process getting its weight's part of the GPU's activity and
//! memory.

use super::super::RawScenario;
use super::{gpu_indexer, Ctx};
use crate::error::ScenarioError;
use crate::types::GpuStatic;

/// Most processes one GPU is shared by (each is a process series in the readings).
pub(in crate::scenario) const MAX_SHARING_PROCESSES: usize = 16;

pub(super) fn time_slicing(
    ctx: &Ctx<'_>,
    raw: &RawScenario,
    gpus: &mut [GpuStatic],
) -> Result<(), ScenarioError> {
    let gpu_index = gpu_indexer(ctx, gpus.len());
    for (i, ts) in raw.time_slicing.iter().enumerate() {
        let t = format!("time_slicing[{i}]");
        let t = t.as_str();
        if !(2..=MAX_SHARING_PROCESSES).contains(&ts.weights.len()) {
            return Err(ctx.err(
                t,
                Some("weights"),
                format!("expected 2 to {MAX_SHARING_PROCESSES} weights, one per process"),
            ));
        }
        if ts.weights.iter().any(|w| !w.is_finite() || *w <= 0.0) {
            return Err(ctx.err(t, Some("weights"), "expected weights > 0"));
        }
        if ts.gpus.is_empty() {
            return Err(ctx.err(t, Some("gpus"), "expected at least one GPU index"));
        }
        let total: f64 = ts.weights.iter().sum();
        for g in &ts.gpus {
            let g = gpu_index(t, "gpus", *g)?;
            if gpus[g].mig.is_some() {
                return Err(ctx.err(
                    t,
                    Some("gpus"),
                    format!("GPU {g} is in MIG mode; its instances are not time-sliced"),
                ));
            }
            if !gpus[g].process_weights.is_empty() {
                return Err(ctx.err(
                    t,
                    Some("gpus"),
                    format!("GPU {g} already has a [[time_slicing]] entry"),
                ));
            }
            gpus[g].process_weights = ts.weights.iter().map(|w| w / total).collect();
        }
    }
    Ok(())
}
