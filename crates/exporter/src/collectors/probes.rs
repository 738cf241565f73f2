//! The `probes` collector: the CUDA probe scheduler, reading GPU utilization from the current
//! generation's device view (the latest NVML/DCGM readings) to leave busy GPUs alone.
//!
//! Off by default on real GPUs: it puts work on the GPUs (politely, see `[probes]` in the
//! config file). In `--simulate` mode the same scheduler runs over the simulator instead
//! (`dgx_pixels_sim_source::probes`), on unless turned off: its results are what the
//! simulator's benchmark model says a probe would measure (see docs/architecture.md, "The
//! simulated node"), and what `[probes]` leaves unset takes the demo's defaults (every probe
//! kind, `nccl_allreduce`, `storage_read` of `/raid`: `ProbesSettings::simulated_schedule`).

use std::time::Duration;

use anyhow::Result;
use dgx_pixels_metrics::Source;
use dgx_pixels_probe_source::settings::ProbesSettings;
use dgx_pixels_probe_source::worker::WorkerBackend;
use dgx_pixels_probe_source::{ProbeSource, ViewUtilization};
use dgx_pixels_probes::worker::SUBCOMMAND as WORKER_SUBCOMMAND;
use dgx_pixels_registry::DEFAULT_INTERVAL;
use dgx_pixels_registry::{BuildContext, Built, Collector, RestartKey, Shared, Table};
use dgx_pixels_sim::Node;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "probes",
    enabled_by_default: false,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    // A probe run is a worker process that opens a CUDA context and cuBLAS first: seconds,
    // not milliseconds; `[probes] worker_timeout` (20 s) kills a hung one before this.
    default_timeout: Duration::from_secs(30),
    help: "CUDA probe workloads on idle GPUs (libcuda.so.1 and cuBLAS, loaded at run time; with --simulate, simulated and on unless turned off)",
    yields_owned_series: true,
    derived: false,
    table: Some(Table::of::<ProbesSettings>()),
    flags: &[],
    prepare: None,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> Result<Built> {
    let options = ctx.options::<ProbesSettings>();
    match ctx.simulated {
        // The daemon's checks read the device view, as on hardware (held, in use, MIG).
        Some(sim) => Ok(Some(Box::new(dgx_pixels_sim_source::probes::source_over(
            options.simulated_schedule()?,
            Node::new(sim.scenario.clone()),
            sim.started,
            ViewUtilization(ctx.views()),
        )?))),
        None => source(options, nvml_library(ctx.shared), ctx).map(Some),
    }
}

/// The NVML library its workers check the GPU's other users with.
fn nvml_library(s: &Shared) -> Option<std::path::PathBuf> {
    s.options::<dgx_pixels_nvml::NvmlOptions>(&dgx_pixels_nvml::collector::COLLECTOR)
        .library
        .clone()
}

/// On a simulated node the node it probes (it restarts with it); on real GPUs the NVML
/// library its workers check the GPU's other users with.
fn shared_inputs(s: &Shared) -> RestartKey {
    Box::new((s.simulation.clone(), nvml_library(s)))
}

/// The probes source on real GPUs: each discovery and probe run is a worker process (this
/// binary's hidden `probe-worker` subcommand), so the daemon never creates a CUDA context.
fn source(
    options: &ProbesSettings,
    nvml_library: Option<std::path::PathBuf>,
    ctx: &BuildContext<'_>,
) -> Result<Box<dyn Source>> {
    let schedule = options.schedule()?;
    let program = std::env::current_exe().map_err(|e| {
        anyhow::anyhow!("probes: cannot find this program to start its workers: {e}")
    })?;
    let mut args: Vec<std::ffi::OsString> = vec![WORKER_SUBCOMMAND.into()];
    if let Some(lib) = nvml_library {
        args.push("--nvml-library".into());
        args.push(lib.into_os_string());
    }
    let backend = WorkerBackend::new(
        program,
        args,
        schedule.sizes.clone(),
        options.worker_timeout()?,
    )
    .with_nccl_timeout(options.nccl_timeout()?);
    let source = ProbeSource::new(backend, ViewUtilization(ctx.views()), schedule)?;
    Ok(Box::new(source))
}
