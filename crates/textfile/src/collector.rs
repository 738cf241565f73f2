//! The `textfile` collector's descriptor: workload metrics from the `*.prom` files of a
//! directory, on by default but running only when `--textfile.directory` is set (also with
//! `--simulate`).

use dgx_pixels_metrics::Source;
use dgx_pixels_registry::{
    BuildContext, Built, Check, Collector, Flag, FlagDefault, FlagKind, RestartKey, SettingError,
    Shared, Table, TableOptions, DEFAULT_INTERVAL, DEFAULT_TIMEOUT,
};

use crate::TextfileOptions;

impl TableOptions for TextfileOptions {
    fn validate(&self, _: &Check) -> Result<(), SettingError> {
        TextfileOptions::validate(self)
    }
}

const FLAGS: &[Flag] = &[Flag {
    name: "textfile.directory",
    key: "textfile.directory",
    value_name: "DIR",
    help: "Directory of *.prom files written by workloads (node_exporter's textfile format), served beside the GPU metrics; see docs/workloads.md",
    default: FlagDefault::None,
    kind: FlagKind::Path,
    order: 130,
}];

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
    table: Some(Table::of::<TextfileOptions>()),
    flags: FLAGS,
    prepare: None,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // Textfiles may not serve what another source serves: the node label, and the simulated
    // workload's families.
    let reserved_labels = ctx
        .shared
        .node_labels
        .iter()
        .map(|(k, _)| k.clone())
        .collect();
    let reserved_families = ctx
        .simulated
        .map_or(&[][..], |s| s.reserved_families)
        .iter()
        .map(|s| s.to_string())
        .collect();
    // No source without a directory.
    Ok(ctx
        .options::<TextfileOptions>()
        .source(reserved_labels, reserved_families)
        .map(|s| Box::new(s) as Box<dyn Source>))
}

/// The node label it reserves, and the scenario whose families it may not serve.
fn shared_inputs(s: &Shared) -> RestartKey {
    Box::new((s.node_labels.clone(), s.simulation.scenario.clone()))
}
