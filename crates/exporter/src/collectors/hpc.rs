//! The `hpc` collector: `hpc_job` labels on GPU series from per-GPU job files, on by default
//! but running only when `--hpc.job-mapping-dir` is set (also with `--simulate`).

use dgx_pixels_kubernetes::HpcJobSource;
use dgx_pixels_metrics::Source;

use super::{BuildContext, Built, Collector, RestartKey, DEFAULT_INTERVAL, DEFAULT_TIMEOUT};
use crate::config::Settings;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "hpc",
    enabled_by_default: true,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    help: "hpc_job labels on GPU series from per-GPU job files (runs only when --hpc.job-mapping-dir is set)",
    yields_owned_series: false,
    derived: false,
    build,
    restart_key,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    Ok(ctx
        .settings
        .hpc
        .job_mapping_dir
        .as_ref()
        .map(|dir| Box::new(HpcJobSource::new(dir.clone())) as Box<dyn Source>))
}

/// `[hpc]`.
fn restart_key(s: &Settings) -> RestartKey {
    Box::new(s.hpc.clone())
}
