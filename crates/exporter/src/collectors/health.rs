//! The `health` collector: a verdict and recommended action per GPU, from the rules of
//! docs/health.md over what the other sources serve (read from the snapshot store, like the
//! probe scheduler reads utilization), and the idle time of GPUs that a pod or job holds but
//! leaves idle (the holders from the same attribution join the encoder applies). On by
//! default, also on a simulated node: it reads no device and needs no privilege.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use dgx_pixels_exposition::join::Join;
use dgx_pixels_health::{HealthTracker, HeldGpu, IdleTracker};
use dgx_pixels_metrics::attribution::ATTRIBUTION_LABELS;
use dgx_pixels_metrics::source::{PollError, PollErrorKind};
use dgx_pixels_metrics::{Metric, PollOutput, Sample, Source};

use super::probes::StoreSlot;
use super::{
    no_shared_inputs as shared_inputs, BuildContext, Built, Collector, Flag, Table, TableOptions,
    DEFAULT_INTERVAL, DEFAULT_TIMEOUT,
};
use crate::config::{ConfigError, Settings};

/// `[health]`.
pub type Options = dgx_pixels_health::HealthSettings;

impl TableOptions for dgx_pixels_health::HealthSettings {
    fn check(&self, _: &Settings) -> Result<(), ConfigError> {
        Ok(self.validate()?)
    }
}

const FLAGS: &[Flag] = &[];

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "health",
    enabled_by_default: true,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    interval_setting: None,
    help: "a health verdict and recommended action per GPU from the rules of docs/health.md over the other sources' readings, and the idle time of GPUs held by pods or jobs ([health])",
    yields_owned_series: false,
    // It judges what the others read: alone it has nothing to say.
    derived: true,
    table: Some(Table::of::<Options>()),
    flags: FLAGS,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> Result<Built> {
    let options: &Options = ctx.settings.options(&COLLECTOR);
    Ok(Some(Box::new(HealthSource {
        store: Arc::clone(ctx.store_slot),
        tracker: HealthTracker::new(options.clear_after()),
        idle: IdleTracker::new(options.idle_utilization(), options.idle_after()),
    })))
}

/// Reads the current generation's served samples of every other source and judges each GPU.
struct HealthSource {
    store: StoreSlot,
    tracker: HealthTracker,
    idle: IdleTracker,
}

impl Source for HealthSource {
    fn name(&self) -> &'static str {
        COLLECTOR.name
    }

    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let store = self.store.get().ok_or_else(|| {
            PollError::new(
                PollErrorKind::Uninitialized,
                "the snapshot store is not ready",
            )
        })?;
        let generation = store.current();
        let samples = || {
            generation
                .snapshots()
                .iter()
                .filter(|s| s.source != COLLECTOR.name)
                .filter_map(|s| s.served())
                .flat_map(|o| o.samples.iter())
        };
        let now = Instant::now();
        let mut out = self.tracker.evaluate(samples(), now);
        let held = held_gpus(&Join::build(generation.snapshots()), samples());
        out.extend(self.idle.observe(&held, now));
        Ok(PollOutput::samples(out))
    }
}

/// The whole GPUs a pod or job holds, with their readings: held by one holder when the join
/// gives their series its labels, by several when info series name them.
fn held_gpus<'a>(join: &Join, samples: impl Iterator<Item = &'a Sample> + Clone) -> Vec<HeldGpu> {
    // SM activity and energy of each whole GPU, gathered in one pass over the samples.
    let mut readings: std::collections::HashMap<(&str, Metric), f64> =
        std::collections::HashMap::new();
    for s in samples.clone() {
        if let Some(d) = s.device.as_ref().filter(|d| d.mig().is_none()) {
            if matches!(s.metric, Metric::GpuSmActive | Metric::GpuEnergy) {
                readings.entry((d.uuid(), s.metric)).or_insert(s.value);
            }
        }
    }
    let reading = |uuid: &str, metric: Metric| readings.get(&(uuid, metric)).copied();
    let mut held = Vec::new();
    for s in samples.clone() {
        let Some(key) = s.device.as_ref().filter(|d| d.mig().is_none()) else {
            continue;
        };
        if s.metric != Metric::GpuUtilization {
            continue;
        }
        let mut holder: [String; 4] = Default::default();
        let holders = match join.labels_for(s) {
            Some(extra) => {
                for (name, value) in extra.iter() {
                    if let Some(i) = ATTRIBUTION_LABELS.iter().position(|n| n == name) {
                        holder[i] = value.clone();
                    }
                }
                holder.join("/")
            }
            None => {
                // Shared: the info series of the GPU (gpu_instance empty) name its holders;
                // the counters then carry none.
                let mut names: Vec<String> = join
                    .info
                    .iter()
                    .filter(|i| {
                        i.label("uuid") == Some(key.uuid())
                            && i.label("gpu_instance").is_none_or(str::is_empty)
                    })
                    .map(|i| i.label_values().join("/"))
                    .collect();
                if names.is_empty() {
                    continue;
                }
                names.sort_unstable();
                names.join(",")
            }
        };
        held.push(HeldGpu {
            key: std::sync::Arc::clone(key),
            holder,
            holders,
            utilization: Some(s.value),
            sm_active: reading(key.uuid(), Metric::GpuSmActive),
            energy: reading(key.uuid(), Metric::GpuEnergy),
        });
    }
    held
}
