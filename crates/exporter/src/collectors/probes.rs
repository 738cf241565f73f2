//! The `probes` collector: the CUDA probe scheduler, reading GPU utilization from the
//! snapshot store (the latest NVML/DCGM readings) to leave busy GPUs alone.
//!
//! Off by default on real GPUs: it puts work on the GPUs (politely, see `[probes]` in the
//! config file). In `--simulate` mode the same scheduler runs over the simulator instead
//! (`dgx_pixels_sim_source::probes`), on unless turned off: its results are what the
//! simulator's benchmark model says a probe would measure (see docs/architecture.md, "The
//! simulated node").

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Result;
use dgx_pixels_exposition::SnapshotStore;
use dgx_pixels_metrics::Sample;
use dgx_pixels_metrics::{Metric, Source};
use dgx_pixels_probe_source::worker::WorkerBackend;
use dgx_pixels_probe_source::{Occupancy, ProbeSource, UtilizationView};
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
        // A worker must be killed before the poll that waits for it overruns its own
        // deadline (the runner would serve the probes source down for a hang the worker
        // timeout handles).
        let deadline = COLLECTOR.timing(settings).timeout;
        let worker = self.worker_timeout()?;
        if worker >= deadline {
            return Err(ConfigError(format!(
                "probes.worker_timeout: {} must be shorter than collector.probes.timeout ({})",
                humantime::format_duration(worker),
                humantime::format_duration(deadline)
            )));
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
        Some(sim) => Ok(Some(Box::new(dgx_pixels_sim_source::probes::source(
            options(ctx.settings).schedule()?,
            Node::new(sim.scenario.clone()),
            sim.started,
        )?))),
        None => source(ctx.settings, Arc::clone(ctx.store_slot)).map(Some),
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

/// The store, set once it exists (it is built after the sources are planned).
pub type StoreSlot = Arc<OnceLock<Arc<SnapshotStore>>>;

/// Utilization and occupancy by UUID from the latest snapshot of every source that is up.
pub struct StoreUtilization(pub StoreSlot);

impl StoreUtilization {
    fn served_samples<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = &Sample>) -> R,
    ) -> Option<R> {
        let store = self.0.get()?;
        let generation = store.current();
        let mut it = generation
            .snapshots()
            .iter()
            .filter_map(|s| s.served())
            .flat_map(|o| o.samples.iter());
        Some(f(&mut it))
    }
}

impl UtilizationView for StoreUtilization {
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)> {
        self.served_samples(|samples| {
            samples
                .filter(|s| s.metric == Metric::GpuUtilization)
                .find_map(|s| {
                    let d = s.device.as_ref().filter(|d| d.uuid() == uuid)?;
                    Some((d.index(), s.value))
                })
        })
        .flatten()
    }

    /// Holders from the attribution sources (pods, HPC jobs), processes from NVML (the
    /// source leaves the exporter's own workers out), MIG from the MIG layout.
    fn occupancy(&self, uuid: &str) -> Occupancy {
        self.served_samples(|samples| {
            let mut o = Occupancy::default();
            for s in samples {
                if s.device.as_ref().is_none_or(|d| d.uuid() != uuid) {
                    continue;
                }
                match s.metric {
                    Metric::GpuPodInfo | Metric::GpuHpcJobInfo => o.held = true,
                    Metric::GpuProcesses => o.processes = o.processes.max(s.value as usize),
                    Metric::MigInfo => o.mig = true,
                    _ => {}
                }
            }
            o
        })
        .unwrap_or_default()
    }
}

/// The probes source for `settings`: each discovery and probe run is a worker process (this
/// binary's hidden `probe-worker` subcommand), so the daemon never creates a CUDA context.
pub fn source(settings: &Settings, store: StoreSlot) -> Result<Box<dyn Source>> {
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
    );
    let source = ProbeSource::new(backend, StoreUtilization(store), schedule)?;
    Ok(Box::new(source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_exposition::EncodeOptions;
    use dgx_pixels_metrics::{Sample, Snapshot, SourceHealth};

    #[test]
    fn utilization_is_read_from_up_sources_by_uuid() {
        let slot = StoreSlot::default();
        let view = StoreUtilization(Arc::clone(&slot));
        assert_eq!(view.lookup("GPU-a"), None, "no store yet");
        let store = Arc::new(SnapshotStore::new(
            &["nvml"],
            vec![],
            EncodeOptions::default(),
        ));
        let _ = slot.set(Arc::clone(&store));
        let snap = |up| Snapshot {
            source: "nvml".into(),
            health: SourceHealth {
                up,
                polls: 1,
                ..Default::default()
            },
            output: vec![
                Sample::for_gpu(2, "GPU-a", Metric::GpuUtilization, &[], 0.25),
                Sample::for_gpu(3, "GPU-b", Metric::GpuUtilization, &[], 0.0),
            ]
            .into(),
        };
        store.publish(snap(true));
        assert_eq!(view.lookup("GPU-a"), Some((2, 0.25)));
        assert_eq!(view.lookup("GPU-b"), Some((3, 0.0)));
        assert_eq!(view.lookup("GPU-c"), None);
        // A down source's readings are not current: no reading, so the GPU is not probed.
        store.publish(snap(false));
        assert_eq!(view.lookup("GPU-a"), None);
    }
}
