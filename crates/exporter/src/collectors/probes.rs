//! The `probes` collector: the CUDA probe scheduler, reading GPU utilization from the current
//! generation's device view (the latest NVML/DCGM readings) to leave busy GPUs alone.
//!
//! Off by default on real GPUs: it puts work on the GPUs (politely, see `[probes]` in the
//! config file). In `--simulate` mode the same scheduler runs over the simulator instead
//! (`dgx_pixels_sim_source::probes`), on unless turned off: its results are what the
//! simulator's benchmark model says a probe would measure (see docs/architecture.md, "The
//! simulated node"), and what `[probes]` leaves unset takes the demo's defaults (every probe
//! kind, `nccl_allreduce`, `storage_read` of `/raid`: `ProbesSettings::simulated_schedule`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use dgx_pixels_metrics::view::DeviceViews;
use dgx_pixels_metrics::Source;
use dgx_pixels_probe_source::worker::WorkerBackend;
use dgx_pixels_probe_source::{ProbeSource, ViewUtilization};
use dgx_pixels_probes::worker::SUBCOMMAND as WORKER_SUBCOMMAND;
use dgx_pixels_sim::Node;

use dgx_pixels_probe_source::settings::ProbesSettings;

use super::{
    BuildContext, Built, Collector, Flag, Planning, RestartKey, Table, TableOptions,
    DEFAULT_INTERVAL,
};
use crate::config::{ConfigError, Settings};

/// `[probes]`.
pub type Options = ProbesSettings;

impl TableOptions for ProbesSettings {
    fn check(&self, settings: &Settings) -> Result<(), ConfigError> {
        self.schedule()?;
        if settings.simulation.scenario.is_some() {
            self.simulated_schedule()?;
        }
        // A worker must be killed before the poll that waits for it overruns its own
        // deadline (the runner would serve the probes source down for a hang the worker
        // timeout handles).
        let deadline = COLLECTOR.timing(settings).timeout;
        let mut workers = vec![("probes.worker_timeout", self.worker_timeout()?)];
        // The NCCL deadline matters only when its probe runs (a short poll deadline with the
        // probe off stays valid).
        if self.nccl_allreduce == Some(true) {
            workers.push(("probes.nccl_timeout", self.nccl_timeout()?));
        }
        for (key, worker) in workers {
            if worker >= deadline {
                return Err(ConfigError(format!(
                    "{key}: {} must be shorter than collector.probes.timeout ({})",
                    humantime::format_duration(worker),
                    humantime::format_duration(deadline)
                )));
            }
        }
        Ok(())
    }
}

/// The probes collector's table in `settings`.
pub fn options(settings: &Settings) -> &ProbesSettings {
    settings.options(&COLLECTOR)
}

const FLAGS: &[Flag] = &[];

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "probes",
    enabled_by_default: false,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    // A probe run is a worker process that opens a CUDA context and cuBLAS first: seconds,
    // not milliseconds; `[probes] worker_timeout` (20 s) kills a hung one before this.
    default_timeout: Duration::from_secs(30),
    interval_setting: None,
    help: "CUDA probe workloads on idle GPUs (libcuda.so.1 and cuBLAS, loaded at run time; with --simulate, simulated and on unless turned off)",
    yields_owned_series: true,
    derived: false,
    table: Some(Table::of::<Options>()),
    flags: FLAGS,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> Result<Built> {
    match ctx.simulated {
        // The daemon's checks read the device view, as on hardware (held, in use, MIG).
        Some(sim) => Ok(Some(Box::new(dgx_pixels_sim_source::probes::source_over(
            options(ctx.settings).simulated_schedule()?,
            Node::new(sim.scenario.clone()),
            sim.started,
            ViewUtilization(ctx.views()),
        )?))),
        None => source(ctx.settings, ctx.views()).map(Some),
    }
}

/// On a simulated node the node it probes (it restarts with it); on real GPUs the NVML
/// library its workers check the GPU's other users with.
fn shared_inputs(s: &Settings, _: &Planning) -> RestartKey {
    Box::new((
        s.simulation.clone(),
        super::nvml::options(s).library.clone(),
    ))
}

/// The probes source for `settings`: each discovery and probe run is a worker process (this
/// binary's hidden `probe-worker` subcommand), so the daemon never creates a CUDA context.
pub fn source(settings: &Settings, views: Arc<dyn DeviceViews>) -> Result<Box<dyn Source>> {
    let schedule = options(settings).schedule()?;
    let program = std::env::current_exe().map_err(|e| {
        anyhow::anyhow!("probes: cannot find this program to start its workers: {e}")
    })?;
    let mut args: Vec<std::ffi::OsString> = vec![WORKER_SUBCOMMAND.into()];
    if let Some(lib) = &super::nvml::options(settings).library {
        args.push("--nvml-library".into());
        args.push(lib.clone().into_os_string());
    }
    let backend = WorkerBackend::new(
        program,
        args,
        schedule.sizes.clone(),
        options(settings).worker_timeout()?,
    )
    .with_nccl_timeout(options(settings).nccl_timeout()?);
    let source = ProbeSource::new(backend, ViewUtilization(views), schedule)?;
    Ok(Box::new(source))
}
