//! The `nvml` collector: GPU telemetry through NVML, on by default.

use std::collections::HashSet;

use dgx_pixels_nvml::{NvmlOptions, NvmlSource, GPM_FAMILIES};

use super::{BuildContext, Built, Collector, RestartKey, DEFAULT_INTERVAL, DEFAULT_TIMEOUT};
use crate::config::Settings;
use crate::ownership;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "nvml",
    enabled_by_default: true,
    // A simulated node serves the GPU families itself (see `build`).
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    help: "GPU telemetry through NVML (libnvidia-ml.so.1, loaded at run time)",
    yields_owned_series: true,
    derived: false,
    build,
    restart_key,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // The simulated node is the NVML of a simulation: it serves these families itself.
    if ctx.simulated.is_some() {
        return Ok(None);
    }
    let settings = ctx.settings;
    // One source per series: GPM's profiling families come from DCGM when its fields provide
    // them all (the ownership filter drops NVML's samples of any it provides), so NVML does not
    // spend a GPM read per GPU and poll on series it would drop.
    let owned: HashSet<ownership::Owned> = ctx
        .dcgm_fields
        .iter()
        .filter_map(ownership::series_of)
        .collect();
    let profiling = GPM_FAMILIES.iter().any(|m| !owned.contains(&(*m, &[][..])));
    Ok(Some(Box::new(
        NvmlSource::with_options(NvmlOptions {
            // Leave the runner's watchdog room: a poll returns before its timeout even when a GPU
            // hangs, and that GPU alone is reported down.
            gpu_deadline: ctx.timing.timeout.mul_f64(0.6),
            procfs: settings
                .path
                .procfs
                .clone()
                .unwrap_or_else(|| NvmlOptions::default().procfs),
            profiling,
            // `[nvml]` is the crate's own options type: library, slow_interval, processes_per_gpu,
            // xid_quiet_period.
            ..settings.nvml.clone()
        })
        // XIDs from NVML and from the kernel log (kmsg collector) count once, served here.
        .with_xid_ledger(std::sync::Arc::clone(ctx.xid_ledger)),
    )))
}

/// `[nvml]`, `[path]`, and the series DCGM takes over (its samples of them are dropped, and
/// GPM is not read when DCGM takes every profiling family).
fn restart_key(s: &Settings) -> RestartKey {
    Box::new((
        s.nvml.clone(),
        s.path.clone(),
        super::dcgm::watched_fields(s),
    ))
}
