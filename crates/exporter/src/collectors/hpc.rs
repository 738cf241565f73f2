//! The `hpc` collector: `hpc_job` labels on GPU series from per-GPU job files, on by default
//! but running only when `--hpc.job-mapping-dir` is set (also with `--simulate`).

use dgx_pixels_kubernetes::{HpcJobSource, HpcSettings};
use dgx_pixels_metrics::Source;

use super::{
    no_shared_inputs as shared_inputs, BuildContext, Built, Collector, Flag, FlagDefault, FlagKind,
    Table, TableOptions, DEFAULT_INTERVAL, DEFAULT_TIMEOUT,
};
use crate::config::{ConfigError, Settings};

/// `[hpc]`.
pub type Options = HpcSettings;

impl TableOptions for HpcSettings {
    fn check(&self, _: &Settings) -> Result<(), ConfigError> {
        Ok(())
    }
}

const FLAGS: &[Flag] = &[Flag {
    name: "hpc.job-mapping-dir",
    key: "hpc.job_mapping_dir",
    value_name: "DIR",
    help: "Directory of HPC job files, one per GPU (named INDEX or INDEX.GPU_INSTANCE) listing job ids, as dcgm-exporter's --hpc-job-mapping-dir; adds hpc_job labels",
    default: FlagDefault::None,
    kind: FlagKind::Path,
    order: 170,
}];

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "hpc",
    enabled_by_default: true,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    interval_setting: None,
    help: "hpc_job labels on GPU series from per-GPU job files (runs only when --hpc.job-mapping-dir is set)",
    yields_owned_series: false,
    derived: false,
    table: Some(Table::of::<Options>()),
    flags: FLAGS,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    Ok(ctx
        .settings
        .options::<HpcSettings>(&COLLECTOR)
        .job_mapping_dir
        .as_ref()
        .map(|dir| Box::new(HpcJobSource::new(dir.clone())) as Box<dyn Source>))
}
