//! The scheduler's look at the rest of the node: utilization and occupancy from the current
//! generation's device view (what NVML or DCGM read last, served while their source is up).

use std::sync::Arc;

use dgx_pixels_metrics::view::DeviceViews;
use dgx_pixels_metrics::Metric;

use crate::{Occupancy, UtilizationView};

/// Utilization and occupancy by UUID from the current device view.
pub struct ViewUtilization(pub Arc<dyn DeviceViews>);

impl UtilizationView for ViewUtilization {
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)> {
        let view = self.0.current()?;
        let found = view.gpus().filter(|g| g.uuid() == uuid).find_map(|g| {
            let s = g.reading(Metric::GpuUtilization)?;
            Some((s.device.as_ref().map_or(g.index(), |d| d.index()), s.value))
        });
        found
    }

    /// Holders from the attribution sources (pods, HPC jobs, on the GPU or an instance of it),
    /// processes from NVML (the source leaves the exporter's own workers out), MIG from the
    /// MIG layout.
    fn occupancy(&self, uuid: &str) -> Occupancy {
        let Some(view) = self.0.current() else {
            return Occupancy::default();
        };
        let mut o = Occupancy::default();
        for g in view.gpus().filter(|g| g.uuid() == uuid) {
            // Before the device view this looked for pod/job info series among the served
            // samples, where the encoder's join makes them and no source does: never held.
            o.held |= g.held();
            for s in g.all_samples() {
                match s.metric {
                    Metric::GpuProcesses => o.processes = o.processes.max(s.value as usize),
                    Metric::MigInfo => o.mig = true,
                    _ => {}
                }
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dgx_pixels_exposition::{EncodeOptions, SnapshotStore, StoreViews};
    use dgx_pixels_metrics::{
        DeviceRef, Holder, MigInstance, PollOutput, Sample, Snapshot, SourceHealth,
    };

    fn nvml(up: bool) -> Snapshot {
        let mig = MigInstance {
            gpu_instance: 1,
            compute_instance: Some(0),
        };
        Snapshot {
            source: "nvml".into(),
            health: SourceHealth {
                up,
                polls: 1,
                ..Default::default()
            },
            output: vec![
                Sample::for_gpu(2, "GPU-a", Metric::GpuUtilization, &[], 0.25),
                Sample::for_gpu(3, "GPU-b", Metric::GpuUtilization, &[], 0.0),
                Sample::for_gpu(2, "GPU-a", Metric::GpuProcesses, &[], 3.0),
                Sample::for_gpu(
                    2,
                    "GPU-a",
                    Metric::GpuInfo,
                    &["m", "s", "b", "v", "d", "c", "0", "nvidia2"],
                    1.0,
                ),
                Sample::for_mig(
                    3,
                    "GPU-b",
                    mig,
                    Metric::MigInfo,
                    &["1g.10gb", "MIG-b1"],
                    1.0,
                ),
            ]
            .into(),
        }
    }

    #[test]
    fn utilization_and_occupancy_are_read_from_up_sources_by_uuid() {
        let views = Arc::new(StoreViews::default());
        let view = ViewUtilization(views.clone());
        assert_eq!(view.lookup("GPU-a"), None, "no store yet");
        assert_eq!(view.occupancy("GPU-a"), Occupancy::default());
        let store = Arc::new(SnapshotStore::new(
            &["nvml", "hpc"],
            vec![],
            EncodeOptions::default(),
        ));
        views.attach(Arc::clone(&store));
        store.publish(nvml(true));
        assert_eq!(view.lookup("GPU-a"), Some((2, 0.25)));
        assert_eq!(view.lookup("GPU-b"), Some((3, 0.0)));
        assert_eq!(view.lookup("GPU-c"), None);
        let a = view.occupancy("GPU-a");
        assert_eq!((a.processes, a.mig), (3, false));
        let b = view.occupancy("GPU-b");
        assert_eq!((b.processes, b.mig), (0, true));
        assert!(!a.held && !b.held);
        // An HPC job on GPU 2 (named by index): held, as the encoder's join labels it.
        let set = vec![(
            DeviceRef::Index {
                gpu: 2,
                gpu_instance: None,
            },
            Holder::Job("42".into()),
        )];
        store.publish(Snapshot {
            source: "hpc".into(),
            health: SourceHealth {
                up: true,
                polls: 1,
                ..Default::default()
            },
            output: PollOutput {
                attribution: Some(Arc::new(set)),
                ..PollOutput::default()
            },
        });
        assert!(view.occupancy("GPU-a").held);
        assert!(!view.occupancy("GPU-b").held);
        // A down source's readings are not current: no reading, so the GPU is not probed.
        store.publish(nvml(false));
        assert_eq!(view.lookup("GPU-a"), None);
        assert_eq!(view.occupancy("GPU-b"), Occupancy::default());
    }
}
