//! The `sim` source: the simulated node of `--simulate`, which serves what NVML (and, with the
//! dcgm collector on, DCGM's profiling) would serve for the scenario's GPUs. Not a collector one
//! turns on or off (no flags, no `[collector.sim]`): it runs whenever a scenario is set, at
//! `[simulation] interval`, and the other collectors build on its node (`BuildContext::simulated`).

use dgx_pixels_nvml::NvmlOptions;
use dgx_pixels_registry::{BuildContext, Built, Collector, RestartKey, Shared};
use dgx_pixels_registry::{DEFAULT_INTERVAL, DEFAULT_TIMEOUT};
use dgx_pixels_sim::Node;
use dgx_pixels_sim_source::SimSource;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "sim",
    enabled_by_default: false,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    help: "the simulated node of --simulate",
    yields_owned_series: false,
    derived: false,
    table: None,
    flags: &[],
    prepare: None,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    let Some(node) = ctx.simulated else {
        return Ok(None);
    };
    let nvml = nvml(ctx.shared);
    let source = SimSource::new(Node::new(node.scenario.clone()))
        .started_at(node.started)
        .with_profiling(profiling(ctx.shared))
        .with_xid_quiet_period(nvml.xid_quiet_period)
        .with_power_sampling(nvml.power_sample_interval, nvml.power_window)
        .with_xid_ledger(ctx.xid_ledger());
    Ok(Some(Box::new(source)))
}

/// The NVML settings it simulates.
fn nvml(s: &Shared) -> &NvmlOptions {
    s.options(&dgx_pixels_nvml::collector::COLLECTOR)
}

/// Whether it serves the simulated DCGM profiling families: the dcgm collector selects them.
fn profiling(s: &Shared) -> bool {
    s.runs(dgx_pixels_dcgm::collector::COLLECTOR.name)
}

/// `[simulation]`, whether the dcgm collector selects the profiling families, and the NVML
/// settings it simulates (the XID quiet period, fast power sampling).
fn shared_inputs(s: &Shared) -> RestartKey {
    let nvml = nvml(s);
    Box::new((
        s.simulation.clone(),
        profiling(s),
        nvml.xid_quiet_period,
        nvml.power_sample_interval,
        nvml.power_window,
    ))
}
