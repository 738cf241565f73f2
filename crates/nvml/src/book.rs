//! What the source keeps of each GPU between polls (its identity, whether it answers, its MIG
//! layout, its XIDs) and what it makes of one GPU's answers to a poll: its readout and samples.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::gpu::{push_gpu_samples, GpuIdentity, GpuReadout, XidIncidents};
use dgx_pixels_metrics::{DeviceKey, Metric, Sample, XidLedger};
use tracing::{info, warn};

use crate::device::GpuPoll;
use crate::gpm::{self, GPM_FAMILIES};
use crate::power::PowerSampler;

/// Per-GPU state of the source, keyed by NVML index.
pub(crate) struct Book {
    identities: BTreeMap<u32, GpuIdentity>,
    /// GPUs currently reported as not answering (to log transitions once).
    stalled: HashSet<u32>,
    /// GPUs whose GPM reading is missing (hung or late), to log transitions once.
    gpm_stalled: HashSet<u32>,
    /// Whether each GPU answered its last basic reading (GPM starts afresh after one it did not).
    answered: HashMap<u32, bool>,
    /// Each GPU's MIG layout as last read (empty when not in MIG mode), for GPM per instance.
    mig_layouts: HashMap<u32, Vec<gpm::MigSlot>>,
    /// XID counts over time, turned into incidents.
    incidents: XidIncidents,
    /// Where XID events are recorded and counted (shared with the kernel log reader).
    pub(crate) ledger: Arc<XidLedger>,
}

impl Book {
    pub(crate) fn new(xid_quiet_period: Duration) -> Book {
        Book {
            identities: BTreeMap::new(),
            stalled: HashSet::new(),
            gpm_stalled: HashSet::new(),
            answered: HashMap::new(),
            mig_layouts: HashMap::new(),
            incidents: XidIncidents::new(xid_quiet_period),
            ledger: Arc::default(),
        }
    }

    /// What GPU `index`'s GPM thread is asked with: whether the GPU answered its last basic
    /// reading, and its MIG layout as last read.
    pub(crate) fn gpm_request(&self, index: u32) -> (bool, Vec<gpm::MigSlot>) {
        let answered = self.answered.get(&index).copied().unwrap_or(true);
        let layout = self.mig_layouts.get(&index).cloned().unwrap_or_default();
        (answered, layout)
    }

    /// GPU `index`'s readout from its answer (`None`: none by the deadline); a GPU that does
    /// not answer is down, logged when it stops and when it answers again.
    pub(crate) fn readout(
        &mut self,
        index: u32,
        result: Option<GpuPoll>,
        deadline: Duration,
    ) -> GpuReadout {
        match result {
            Some(GpuPoll::Read { identity, readout }) => {
                if let Some(id) = identity {
                    self.identities.insert(index, id);
                }
                if self.stalled.remove(&index) {
                    info!(gpu = index, "GPU answers again");
                }
                *readout
            }
            Some(GpuPoll::Lost { identity }) => {
                if let Some(id) = identity {
                    self.identities.insert(index, id);
                }
                if self.stalled.insert(index) {
                    warn!(gpu = index, "GPU is lost (GPU_IS_LOST); reporting gpu_up 0");
                }
                GpuReadout::default()
            }
            Some(GpuPoll::Failed(why)) => {
                if self.stalled.insert(index) {
                    warn!(gpu = index, error = %why, "GPU cannot be read");
                }
                GpuReadout::default()
            }
            Some(GpuPoll::Uninitialized) | None => {
                if self.stalled.insert(index) {
                    warn!(
                        gpu = index,
                        deadline = ?deadline,
                        "GPU did not answer within the deadline; reporting gpu_up 0"
                    );
                }
                GpuReadout::default()
            }
        }
    }

    /// Adds what the source knows beside the reader (XIDs, power samples) to GPU `index`'s
    /// readout, and keeps what the next poll's GPM request needs.
    pub(crate) fn annotate(
        &mut self,
        index: u32,
        readout: &mut GpuReadout,
        power: Option<&PowerSampler>,
        now: Instant,
    ) {
        if let Some(id) = self.identities.get(&index) {
            readout.xid_counts = self.ledger.counts(&id.uuid);
        }
        readout.xid_incidents = self.incidents.observe(index, &readout.xid_counts, now);
        if readout.up {
            readout.power_samples = power.and_then(|p| p.samples(index));
        }
        self.answered.insert(index, readout.up);
        if readout.up {
            let layout = readout.mig.iter();
            let layout = layout.map(|m| (m.gpu_instance, m.compute_instance, m.profile.clone()));
            self.mig_layouts.insert(index, layout.collect());
        }
    }

    /// Logs GPU `index`'s GPM reading going missing (`late`) and coming back, once each.
    pub(crate) fn note_gpm(&mut self, index: u32, late: bool, deadline: Duration) {
        if late && self.gpm_stalled.insert(index) {
            warn!(
                gpu = index,
                deadline = ?deadline,
                "GPM did not answer within the deadline; its profiling families are left out"
            );
        } else if !late && self.gpm_stalled.remove(&index) {
            info!(gpu = index, "GPM answers again");
        }
    }

    /// GPU `index`'s samples: its readout's, its GPM families' and whether they are missing.
    pub(crate) fn push(
        &self,
        index: u32,
        readout: &GpuReadout,
        profile: Option<&gpm::GpmReading>,
        gpm_late: bool,
        out: &mut Vec<Sample>,
    ) {
        let Some(id) = self.identities.get(&index) else {
            // Never answered (hung or failing since the library was loaded): its uuid is
            // unknown, but the GPU exists and is down, so say that much.
            out.push(Sample::of(
                &Arc::new(DeviceKey::gpu(index, "")),
                Metric::GpuUp,
                [] as [&str; 0],
                0.0,
            ));
            return;
        };
        push_gpu_samples(id, readout, out);
        if let Some(observed) = self.ledger.observed(&id.uuid) {
            out.push(Sample::of(
                &Arc::new(DeviceKey::gpu(id.index, id.uuid.as_str())),
                Metric::GpuXidObserved,
                [] as [&str; 0],
                if observed { 1.0 } else { 0.0 },
            ));
        }
        if let Some(p) = profile {
            p.push(id, out);
        }
        if gpm_late {
            // Visible per GPU: the profiling families are missing, not zero.
            out.push(Sample::of(
                &Arc::new(DeviceKey::gpu(id.index, id.uuid.as_str())),
                Metric::GpuStaleReadings,
                ["nvml"],
                GPM_FAMILIES.len() as f64,
            ));
        }
    }
}
