//! The `textfile` collector: workload metrics from the `*.prom` files of a directory, on by
//! default but running only when `--textfile.directory` is set (also with `--simulate`).

use dgx_pixels_textfile::{Limits, TextfileSource};

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
    build,
    restart_key,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    let settings = ctx.settings;
    let Some(dir) = settings.textfile.directory.as_ref() else {
        return Ok(None);
    };
    // Textfiles may not serve what another source serves: the simulated workload's families.
    let reserved = ctx.simulated.map_or(&[][..], |s| s.reserved_families);
    let limits = Limits {
        max_file_bytes: settings.textfile.max_file_bytes,
        max_files: settings.textfile.max_files,
        max_total_bytes: settings.textfile.max_total_bytes,
        reserved_labels: crate::node_label(settings)
            .into_iter()
            .map(|(k, _)| k)
            .collect(),
        reserved_families: reserved.iter().map(|s| s.to_string()).collect(),
    };
    Ok(Some(Box::new(TextfileSource::new(dir.clone(), limits))))
}

/// `[textfile]`, the node label it reserves, and the scenario whose families it may not serve.
fn restart_key(s: &Settings) -> RestartKey {
    Box::new((
        s.textfile.clone(),
        s.node_name.clone(),
        s.simulation.scenario.clone(),
    ))
}
