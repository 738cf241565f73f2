//! The `exporter` source: what the HTTP layer refused and how web config and config reloads
//! went (`crate::http_source`). Not a collector one turns on or off: it always runs, and a
//! reload never restarts it (its counters live as long as the process, kept in the registry's
//! [`dgx_pixels_registry::Lasting`] by [`super::Lasting::with_web`]).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use dgx_pixels_registry::{no_shared_inputs, BuildContext, Built, Collector};
use dgx_pixels_web::WebState;

use crate::http_source::{HttpSource, ReloadCounters};

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "exporter",
    enabled_by_default: true,
    enabled_in_simulation: true,
    default_interval: Duration::from_secs(1),
    default_timeout: Duration::from_secs(1),
    help: "the exporter's own HTTP and reload counters",
    yields_owned_series: false,
    // It reads no device: alone it does not count as a source.
    derived: true,
    table: None,
    flags: &[],
    prepare: None,
    build,
    shared_inputs: no_shared_inputs,
};

/// The counters it serves, kept for the life of the process.
pub struct Counters {
    /// The web config state and its counters.
    pub web: Arc<WebState>,
    /// Scrapes refused by `--web.max-requests`.
    pub rejected_scrapes: Arc<AtomicU64>,
    /// Outcomes of config reloads (SIGHUP).
    pub config_reloads: Arc<ReloadCounters>,
}

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // None in tests that plan without a server.
    let Some(c) = ctx.lasting.kept_if::<Counters>(COLLECTOR.name) else {
        return Ok(None);
    };
    Ok(Some(Box::new(HttpSource {
        web: Arc::clone(&c.web),
        rejected_scrapes: Arc::clone(&c.rejected_scrapes),
        config_reloads: Arc::clone(&c.config_reloads),
    })))
}
