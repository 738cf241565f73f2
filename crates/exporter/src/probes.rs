//! Wiring of the `probes` collector: the CUDA probe scheduler, reading GPU utilization from the
//! snapshot store (the latest NVML/DCGM readings) to leave busy GPUs alone.
//!
//! In `--simulate` mode the same scheduler runs over the simulator instead (`sim_probes`):
//! its results are what the simulator's benchmark model says a probe would measure (see
//! docs/architecture.md, "The simulated node").

use std::sync::{Arc, OnceLock};

use anyhow::Result;
use dgx_pixels_metrics::{Metric, SnapshotStore, Source};
use dgx_pixels_probes::scheduler::{CudaBackend, ProbeSource, UtilizationView};

use crate::config::Settings;

/// The store, set once it exists (it is built after the sources are planned).
pub type StoreSlot = Arc<OnceLock<Arc<SnapshotStore>>>;

/// Utilization by UUID from the latest snapshot of every source that is up.
pub struct StoreUtilization(pub StoreSlot);

impl UtilizationView for StoreUtilization {
    fn lookup(&self, uuid: &str) -> Option<(String, f64)> {
        let store = self.0.get()?;
        let generation = store.current();
        generation
            .snapshots()
            .iter()
            .filter(|s| s.health.up)
            .flat_map(|s| s.samples.iter())
            .find(|s| {
                s.metric == Metric::GpuUtilization && s.labels.get(1).is_some_and(|u| u == uuid)
            })
            .and_then(|s| Some((s.labels.first()?.clone(), s.value)))
    }
}

/// The probes source for `settings`.
pub fn source(settings: &Settings, store: StoreSlot) -> Result<Box<dyn Source>> {
    let schedule = settings.probes.schedule()?;
    let backend = CudaBackend {
        sizes: schedule.sizes.clone(),
    };
    let source = ProbeSource::new(backend, StoreUtilization(store), schedule)?;
    Ok(Box::new(source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_metrics::{EncodeOptions, Sample, Snapshot, SourceHealth};

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
            samples: vec![
                Sample::new(Metric::GpuUtilization, ["2", "GPU-a"], 0.25),
                Sample::new(Metric::GpuUtilization, ["3", "GPU-b"], 0.0),
            ],
        };
        store.publish(snap(true));
        assert_eq!(view.lookup("GPU-a"), Some(("2".into(), 0.25)));
        assert_eq!(view.lookup("GPU-b"), Some(("3".into(), 0.0)));
        assert_eq!(view.lookup("GPU-c"), None);
        // A down source's readings are not current: no reading, so the GPU is not probed.
        store.publish(snap(false));
        assert_eq!(view.lookup("GPU-a"), None);
    }
}
