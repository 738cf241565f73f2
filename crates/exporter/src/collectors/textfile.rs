//! The `textfile` collector: workload metrics from the `*.prom` files of a directory, on by
//! default but running only when `--textfile.directory` is set (also with `--simulate`).

use super::{BuildContext, Built, Collector, RestartKey, DEFAULT_INTERVAL, DEFAULT_TIMEOUT};
use crate::config::Settings;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "textfile",
    enabled_by_default: true,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    help: "workload metrics from the *.prom files of --textfile.directory (runs only when it is set, also with --simulate)",
    yields_owned_series: false,
    derived: false,
    build,
    restart_key,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    let settings = ctx.settings;
    // Textfiles may not serve what another source serves: the node label, and the simulated
    // workload's families.
    let reserved_labels = crate::node_label(settings)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let reserved_families = ctx
        .simulated
        .map_or(&[][..], |s| s.reserved_families)
        .iter()
        .map(|s| s.to_string())
        .collect();
    // `[textfile]` is the crate's own options type; no source without a directory.
    Ok(settings
        .textfile
        .source(reserved_labels, reserved_families)
        .map(|s| Box::new(s) as Box<dyn dgx_pixels_metrics::Source>))
}

/// `[textfile]`, the node label it reserves, and the scenario whose families it may not serve.
fn restart_key(s: &Settings) -> RestartKey {
    Box::new((
        s.textfile.clone(),
        s.node_name.clone(),
        s.simulation.scenario.clone(),
    ))
}
