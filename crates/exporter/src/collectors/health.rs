//! The `health` collector: a verdict and recommended action per GPU, from the rules of
//! docs/health.md over what the other sources serve (read from the snapshot store, like the
//! probe scheduler reads utilization). On by default, also on a simulated node: it reads no
//! device and needs no privilege.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use dgx_pixels_health::HealthTracker;
use dgx_pixels_metrics::source::{PollError, PollErrorKind};
use dgx_pixels_metrics::{PollOutput, Source};

use super::probes::StoreSlot;
use super::{BuildContext, Built, Collector, RestartKey, DEFAULT_INTERVAL, DEFAULT_TIMEOUT};
use crate::config::Settings;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "health",
    enabled_by_default: true,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    help: "a health verdict and recommended action per GPU from the rules of docs/health.md over the other sources' readings ([health] clear_after)",
    yields_owned_series: false,
    // It judges what the others read: alone it has nothing to say.
    derived: true,
    build,
    restart_key,
};

fn build(ctx: &BuildContext<'_>) -> Result<Built> {
    Ok(Some(Box::new(HealthSource {
        store: Arc::clone(ctx.store_slot),
        tracker: HealthTracker::new(ctx.settings.health.clear_after()),
    })))
}

/// `[health]`.
fn restart_key(s: &Settings) -> RestartKey {
    Box::new(s.health.clone())
}

/// Reads the current generation's served samples of every other source and judges each GPU.
struct HealthSource {
    store: StoreSlot,
    tracker: HealthTracker,
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
        let samples = generation
            .snapshots()
            .iter()
            .filter(|s| s.source != COLLECTOR.name)
            .filter_map(|s| s.served())
            .flat_map(|o| o.samples.iter());
        Ok(PollOutput::samples(
            self.tracker.evaluate(samples, Instant::now()),
        ))
    }
}
