//! The device view: one generation's served samples organised per GPU, built once per generation
//! and shared by every reader that derives something from what the sources serve.
//!
//! Why one view: the encoder's attribution join, the status page, the health verdicts, the
//! idle time of held GPUs, the kernel log's GPU directory and the probe scheduler's
//! utilization lookup all ask the same questions of the same samples (which GPUs are there,
//! what does each read, who holds it). Each used to walk every served sample its own way, the
//! join once per encoding and again per health poll. The snapshot store's generation builds a
//! [`DeviceView`] on first demand and keeps it (`dgx-pixels-exposition`'s `Generation`), so a
//! generation is organised once, however many readers and scrapes it has.
//!
//! Per GPU (one [`DeviceKey`] identity: index and uuid) the view holds:
//! - its identity: the whole-GPU key, its PCI address (parsed once from
//!   `dgx_pixels_gpu_info`'s `pci_bus_id`) and its MIG instances;
//! - its served readings by metric: every served sample about it, in served order within a
//!   metric (snapshots by source name, then each source's own order), so a reader that takes
//!   the first or the last of a metric sees what a walk over the served samples would see.
//!   Bounded by what is served: one position per served device sample, no copy of a sample;
//! - its holders: the attribution [`Join`] of the same generation, typed ([`Holder`]), which
//!   the encoder also uses for the holder labels and info series.
//!
//! Collectors reach it through [`DeviceViews`] ("the current generation's view, if any"),
//! never through the store.
//!
//! ```
//! use std::sync::Arc;
//! use dgx_pixels_metrics::view::DeviceView;
//! use dgx_pixels_metrics::{Metric, Sample, Snapshot, SourceHealth};
//!
//! let info = ["H100", "s", "00000000:1B:00.0", "v", "d", "12040", "0", "/dev/nvidia0"];
//! let nvml = Snapshot {
//!     source: "nvml".into(),
//!     health: SourceHealth { up: true, polls: 1, ..Default::default() },
//!     output: vec![
//!         Sample::for_gpu(0, "GPU-0", Metric::GpuInfo, &info, 1.0),
//!         Sample::for_gpu(0, "GPU-0", Metric::GpuUtilization, &[], 0.25),
//!     ]
//!     .into(),
//! };
//! let view = DeviceView::build(&[Arc::new(nvml)]);
//! let gpu = view.gpu("GPU-0").unwrap();
//! assert_eq!(gpu.index(), 0);
//! assert_eq!(gpu.pci().unwrap().to_string(), "0000:1b:00");
//! assert_eq!(gpu.reading(Metric::GpuUtilization).map(|s| s.value), Some(0.25));
//! assert!(gpu.holders(None).is_empty());
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use crate::attribution::Holder;
use crate::device::PciAddress;
use crate::{DeviceKey, Metric, MigInstance, Sample, Snapshot};

pub mod join;

pub use join::{Holding, Join};

/// The current generation's device view, for a reader that is built before the store it reads
/// (the wiring builds the sources, then the store they publish into).
pub trait DeviceViews: Send + Sync {
    /// The view of the generation being served now; `None` while there is no store yet.
    fn current(&self) -> Option<Arc<DeviceView>>;
}

/// Where a served sample is: its snapshot in the view, its position in that snapshot.
#[derive(Debug, Clone, Copy)]
struct At {
    metric: Metric,
    snapshot: usize,
    sample: usize,
}

/// The samples of one GPU or instance, sorted by metric (stable: served order within one).
#[derive(Debug, Default)]
struct Readings(Vec<At>);

impl Readings {
    fn of(&self, metric: Metric) -> &[At] {
        let start = self.0.partition_point(|a| a.metric < metric);
        let len = self.0[start..].partition_point(|a| a.metric == metric);
        &self.0[start..start + len]
    }
}

#[derive(Debug)]
struct GpuEntry {
    key: Arc<DeviceKey>,
    /// The key was made from an instance's: the first whole-GPU sample's replaces it.
    key_made: bool,
    pci: Option<PciAddress>,
    readings: Readings,
    instances: Vec<InstanceEntry>,
    /// Indices into the join's holdings.
    holdings: Vec<usize>,
}

#[derive(Debug)]
struct InstanceEntry {
    mig: MigInstance,
    readings: Readings,
}

/// One generation's served samples per GPU, with their holders. Built by
/// [`DeviceView::build`]; see the module docs.
#[derive(Debug, Default)]
pub struct DeviceView {
    /// The served snapshots, in the generation's order.
    snapshots: Vec<Arc<Snapshot>>,
    /// In the order their first served sample comes.
    gpus: Vec<GpuEntry>,
    join: Join,
}

impl DeviceView {
    /// Organises the served snapshots among `snapshots` (a generation's, in its order): one
    /// pass over their device samples, then the attribution join.
    pub fn build(snapshots: &[Arc<Snapshot>]) -> DeviceView {
        let snapshots: Vec<Arc<Snapshot>> = snapshots
            .iter()
            .filter(|s| s.served().is_some())
            .cloned()
            .collect();
        let join = Join::build(&snapshots);
        let mut gpus: Vec<GpuEntry> = Vec::new();
        {
            let mut by_id: HashMap<(u32, &str), usize> = HashMap::new();
            // A source shares one key over a GPU's samples, which come together: most samples
            // find their GPU by the key's address, without hashing the uuid.
            let mut last: Option<(&DeviceKey, usize)> = None;
            for (si, snapshot) in snapshots.iter().enumerate() {
                for (i, s) in snapshot.output.samples.iter().enumerate() {
                    let Some(d) = s.device.as_ref() else {
                        continue;
                    };
                    let g = match last {
                        Some((key, g)) if std::ptr::eq(key, &**d) => g,
                        _ => {
                            let g = *by_id.entry((d.index(), d.uuid())).or_insert_with(|| {
                                gpus.push(GpuEntry::new(d));
                                gpus.len() - 1
                            });
                            last = Some((&**d, g));
                            g
                        }
                    };
                    let at = At {
                        metric: s.metric,
                        snapshot: si,
                        sample: i,
                    };
                    gpus[g].add(d, s, at);
                }
            }
            for (h, holding) in join.holdings().iter().enumerate() {
                let id = (holding.gpu.index(), holding.gpu.uuid());
                if let Some(&g) = by_id.get(&id) {
                    gpus[g].holdings.push(h);
                }
            }
        }
        for gpu in &mut gpus {
            gpu.readings.0.sort_by_key(|a| a.metric);
            for instance in &mut gpu.instances {
                instance.readings.0.sort_by_key(|a| a.metric);
            }
        }
        DeviceView {
            snapshots,
            gpus,
            join,
        }
    }

    /// Every GPU some served sample is about, in the order its first served sample comes.
    pub fn gpus(&self) -> impl Iterator<Item = Gpu<'_>> {
        self.gpus.iter().map(move |entry| Gpu { view: self, entry })
    }

    /// The (first) GPU with this uuid.
    pub fn gpu(&self, uuid: &str) -> Option<Gpu<'_>> {
        self.gpus().find(|g| g.uuid() == uuid)
    }

    /// The attribution join of the generation: extra labels and info series for the encoder.
    pub fn join(&self) -> &Join {
        &self.join
    }

    /// The served snapshots the view was built from (those of sources that are up).
    pub fn snapshots(&self) -> &[Arc<Snapshot>] {
        &self.snapshots
    }

    fn sample(&self, at: &At) -> &Sample {
        &self.snapshots[at.snapshot].output.samples[at.sample]
    }
}

impl GpuEntry {
    fn new(d: &Arc<DeviceKey>) -> GpuEntry {
        let (key, key_made) = match d.mig() {
            None => (Arc::clone(d), false),
            Some(_) => (Arc::new(d.with_mig(None)), true),
        };
        GpuEntry {
            key,
            key_made,
            pci: None,
            readings: Readings::default(),
            instances: Vec::new(),
            holdings: Vec::new(),
        }
    }

    fn add(&mut self, d: &Arc<DeviceKey>, s: &Sample, at: At) {
        match d.mig() {
            None => {
                // A source's own whole-GPU key rather than one made from an instance's.
                if self.key_made {
                    self.key = Arc::clone(d);
                    self.key_made = false;
                }
                if s.metric == Metric::GpuInfo && self.pci.is_none() {
                    self.pci = s.label("pci_bus_id").and_then(PciAddress::parse);
                }
                self.readings.0.push(at);
            }
            Some(mig) => {
                let i = match self.instances.iter().position(|e| e.mig == mig) {
                    Some(i) => i,
                    None => {
                        self.instances.push(InstanceEntry {
                            mig,
                            readings: Readings::default(),
                        });
                        self.instances.len() - 1
                    }
                };
                self.instances[i].readings.0.push(at);
            }
        }
    }
}

/// One GPU of a [`DeviceView`].
#[derive(Debug, Clone, Copy)]
pub struct Gpu<'v> {
    view: &'v DeviceView,
    entry: &'v GpuEntry,
}

impl<'v> Gpu<'v> {
    /// The whole GPU's key (a source's own, where one serves a whole-GPU series).
    pub fn key(&self) -> &'v Arc<DeviceKey> {
        &self.entry.key
    }

    /// Its index (`gpu` label).
    pub fn index(&self) -> u32 {
        self.entry.key.index()
    }

    /// Its uuid.
    pub fn uuid(&self) -> &'v str {
        self.entry.key.uuid()
    }

    /// Its PCI address, from the first served `dgx_pixels_gpu_info` that names a valid one.
    pub fn pci(&self) -> Option<PciAddress> {
        self.entry.pci
    }

    /// The served samples of `metric` about the whole GPU, in served order.
    pub fn readings(&self, metric: Metric) -> impl Iterator<Item = &'v Sample> + 'v {
        let view = self.view;
        self.entry
            .readings
            .of(metric)
            .iter()
            .map(move |a| view.sample(a))
    }

    /// The first served sample of `metric` about the whole GPU.
    pub fn reading(&self, metric: Metric) -> Option<&'v Sample> {
        self.readings(metric).next()
    }

    /// Every served sample about the whole GPU (not its instances), by metric.
    pub fn samples(&self) -> impl Iterator<Item = &'v Sample> + 'v {
        let view = self.view;
        self.entry.readings.0.iter().map(move |a| view.sample(a))
    }

    /// Its MIG instances (and the instances processes run in), in the order their first served
    /// sample comes.
    pub fn instances(&self) -> impl Iterator<Item = Instance<'v>> + 'v {
        let view = self.view;
        self.entry
            .instances
            .iter()
            .map(move |entry| Instance { view, entry })
    }

    /// Every served sample about the GPU or one of its instances.
    pub fn all_samples(&self) -> impl Iterator<Item = &'v Sample> + 'v {
        self.samples()
            .chain(self.instances().flat_map(|i| i.samples()))
    }

    /// Who holds the whole GPU (`None`) or one GPU instance of it, sorted, each once: empty
    /// when nobody does, or when no served `dgx_pixels_gpu_info` describes the GPU.
    pub fn holders(&self, gpu_instance: Option<u32>) -> &'v [Holder] {
        let holdings = self.view.join.holdings();
        self.entry
            .holdings
            .iter()
            .map(|&h| &holdings[h])
            .find(|h| h.gpu_instance == gpu_instance)
            .map_or(&[][..], |h| &h.holders[..])
    }

    /// Whether a pod or job holds the GPU or any instance of it.
    pub fn held(&self) -> bool {
        !self.entry.holdings.is_empty()
    }
}

/// One MIG instance of a GPU in a [`DeviceView`] (the key's instance: a compute instance, or
/// a GPU instance a process runs in).
#[derive(Debug, Clone, Copy)]
pub struct Instance<'v> {
    view: &'v DeviceView,
    entry: &'v InstanceEntry,
}

impl<'v> Instance<'v> {
    /// Which instance.
    pub fn mig(&self) -> MigInstance {
        self.entry.mig
    }

    /// The served samples of `metric` about the instance, in served order.
    pub fn readings(&self, metric: Metric) -> impl Iterator<Item = &'v Sample> + 'v {
        let view = self.view;
        self.entry
            .readings
            .of(metric)
            .iter()
            .map(move |a| view.sample(a))
    }

    /// Every served sample about the instance, by metric.
    pub fn samples(&self) -> impl Iterator<Item = &'v Sample> + 'v {
        let view = self.view;
        self.entry.readings.0.iter().map(move |a| view.sample(a))
    }
}

#[cfg(test)]
mod tests;
