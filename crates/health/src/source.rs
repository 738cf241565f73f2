//! The `health` collector's source: each poll reads the current generation's device view (what
//! every source serves, per GPU, with its holders), judges each GPU with a [`HealthTracker`]
//! and counts the idle time of held GPUs with an [`IdleTracker`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use dgx_pixels_metrics::attribution::Holder;
use dgx_pixels_metrics::source::{PollError, PollErrorKind};
use dgx_pixels_metrics::view::{DeviceView, DeviceViews, Gpu};
use dgx_pixels_metrics::{Metric, PollOutput, Source};

use crate::expected::Expected;
use crate::{HealthSettings, HealthTracker, HeldGpu, IdleTracker};

/// Judges each GPU of the current device view, once per poll.
pub struct HealthSource {
    views: Arc<dyn DeviceViews>,
    memory: Arc<HealthMemory>,
    idle: IdleTracker,
    expected: Expected,
}

/// The verdicts' state, kept across the restarts of the health source: a reload of `[health]`
/// (a new XID policy) must neither forget a GPU that waits for its reset nor the occurrences
/// counted towards a threshold, nor judge again, as new, every XID counted since start.
#[derive(Debug, Default)]
pub struct HealthMemory(Mutex<Option<HealthTracker>>);

impl HealthSource {
    /// A source over `views`, with the `[health]` settings and the tracker kept in `memory`
    /// (created there the first time, reconfigured after).
    pub fn new(
        views: Arc<dyn DeviceViews>,
        settings: &HealthSettings,
        memory: Arc<HealthMemory>,
    ) -> HealthSource {
        {
            let mut tracker = memory.0.lock().unwrap_or_else(PoisonError::into_inner);
            match tracker.as_mut() {
                Some(t) => t.configure(settings.clear_after(), settings.xid_policy.clone()),
                None => {
                    *tracker = Some(
                        HealthTracker::new(settings.clear_after())
                            .with_policy(settings.xid_policy.clone()),
                    );
                }
            }
        }
        HealthSource {
            views,
            memory,
            idle: IdleTracker::new(settings.idle_utilization(), settings.idle_after()),
            expected: Expected::new(settings),
        }
    }
}

impl Source for HealthSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let view = self.views.current().ok_or_else(|| {
            PollError::new(
                PollErrorKind::Uninitialized,
                "the snapshot store is not ready",
            )
        })?;
        let now = Instant::now();
        let mut out = {
            let mut memory = self.memory.0.lock().unwrap_or_else(PoisonError::into_inner);
            let tracker = memory
                .get_or_insert_with(|| HealthTracker::new(HealthTracker::DEFAULT_CLEAR_AFTER));
            // Its own series are in the view too; the rules read none of them.
            let mut out = tracker.evaluate(view.gpus().flat_map(|g| g.samples()), now);
            out.extend(policy_samples(tracker.policy()));
            out
        };
        out.extend(self.idle.observe(&held_gpus(&view), now));
        // Visible: GPUs a source reports now, lost ones too (they have a verdict of their own).
        let visible = view
            .gpus()
            .filter(|g| g.reading(Metric::GpuUp).is_some())
            .count();
        let expected = self.expected.observe(visible);
        out.extend(crate::rules::node_samples_with_fabric(
            expected,
            self.expected.unknown(),
            visible,
            fabric_ratio(&view),
        ));
        Ok(PollOutput::samples(out))
    }
}

/// The node's NCCL bus bandwidth over its expected figure, where the probes source serves both.
fn fabric_ratio(view: &DeviceView) -> Option<f64> {
    let mut measured = None;
    let mut expected = None;
    for snapshot in view.snapshots() {
        for s in snapshot
            .served()
            .map(|o| o.samples.as_slice())
            .unwrap_or_default()
        {
            match s.metric {
                Metric::ProbeNcclLargestBusBandwidth => measured = Some(s.value),
                Metric::ProbeNcclExpectedBusBandwidth => expected = Some(s.value),
                _ => {}
            }
        }
    }
    match (measured, expected) {
        (Some(m), Some(e)) if e > 0.0 && m.is_finite() => Some(m / e),
        _ => None,
    }
}

/// The XID policy in force, one info series per entry, so the status page and a query show it.
fn policy_samples(
    policy: &crate::XidPolicy,
) -> impl Iterator<Item = dgx_pixels_metrics::Sample> + '_ {
    policy.rules().iter().map(|r| {
        dgx_pixels_metrics::Sample::new(
            Metric::ExporterXidPolicy,
            [r.codes(), r.treatment.to_string()],
            1.0,
        )
    })
}

/// The whole GPUs a pod or job holds, with their readings, one per utilization reading.
pub fn held_gpus(view: &DeviceView) -> Vec<HeldGpu> {
    let mut held = Vec::new();
    for gpu in view.gpus() {
        let holders = gpu.holders(None);
        if holders.is_empty() {
            continue;
        }
        let (holder, names) = holder_labels(&gpu, holders);
        let reading = |metric| gpu.reading(metric).map(|s| s.value);
        for u in gpu.readings(Metric::GpuUtilization) {
            held.push(HeldGpu {
                key: Arc::clone(u.device.as_ref().unwrap_or(gpu.key())),
                holder: holder.clone(),
                holders: names.clone(),
                utilization: Some(u.value),
                sm_active: reading(Metric::GpuSmActive),
                energy: reading(Metric::GpuEnergy),
            });
        }
    }
    held
}

/// The counters' holder labels (`namespace`, `pod`, `container`, `hpc_job`) and the text that
/// changes with the holders. One pod or one job labels the counters as the encoder's join
/// labels the GPU's series; several of a kind are named only in the text (as the info series
/// name them: `gpu/uuid/gpu_instance/...`), since no one of them owns the count.
fn holder_labels(gpu: &Gpu<'_>, holders: &[Holder]) -> ([String; 4], String) {
    let pods: Vec<_> = holders
        .iter()
        .filter(|h| matches!(h, Holder::Pod { .. }))
        .collect();
    let jobs: Vec<_> = holders
        .iter()
        .filter(|h| matches!(h, Holder::Job(_)))
        .collect();
    if pods.len() == 1 || jobs.len() == 1 {
        let mut labels: [String; 4] = Default::default();
        if let [Holder::Pod {
            namespace,
            pod,
            container,
            ..
        }] = pods[..]
        {
            labels[0].clone_from(namespace);
            labels[1].clone_from(pod);
            labels[2].clone_from(container);
        }
        if let [Holder::Job(job)] = jobs[..] {
            labels[3].clone_from(job);
        }
        let text = labels.join("/");
        return (labels, text);
    }
    let (index, uuid) = (gpu.index(), gpu.uuid());
    let mut names: Vec<String> = holders
        .iter()
        .map(|h| match h {
            Holder::Pod {
                namespace,
                pod,
                container,
                ..
            } => format!("{index}/{uuid}//{namespace}/{pod}/{container}"),
            Holder::Job(job) => format!("{index}/{uuid}//{job}"),
        })
        .collect();
    names.sort_unstable();
    (Default::default(), names.join(","))
}

#[cfg(test)]
mod tests;
