//! The `exporter` source: what the HTTP layer refused and how web config and config reloads
//! went (`crate::http_source`). Not a collector one turns on or off: it always runs, and a
//! reload never restarts it (its counters live as long as the process, in [`super::Lasting`]).

use std::sync::Arc;
use std::time::Duration;

use super::{no_shared_inputs as shared_inputs, BuildContext, Built, Collector};

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "exporter",
    enabled_by_default: true,
    enabled_in_simulation: true,
    default_interval: Duration::from_secs(1),
    default_timeout: Duration::from_secs(1),
    interval_setting: None,
    help: "the exporter's own HTTP and reload counters",
    yields_owned_series: false,
    // It reads no device: alone it does not count as a source.
    derived: true,
    table: None,
    flags: &[],
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    let Some(web) = &ctx.lasting.web else {
        return Ok(None);
    };
    Ok(Some(Box::new(crate::http_source::HttpSource {
        web: Arc::clone(web),
        rejected_scrapes: Arc::clone(&ctx.lasting.rejected_scrapes),
        config_reloads: Arc::clone(&ctx.lasting.config_reloads),
    })))
}
