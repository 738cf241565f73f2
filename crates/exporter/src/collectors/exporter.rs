//! The `exporter` source: the scrapes answered, what the HTTP layer refused and how web config
//! and config reloads went (`crate::http_source`), and the exporter's own process, as every
//! Prometheus client library serves it (`process_*`, `crate::own_process`). Not a collector one
//! turns on or off: it always runs, on hardware and on a simulated node, and a reload never
//! restarts it (its counters live as long as the process, kept in the registry's
//! [`dgx_pixels_registry::Lasting`] by [`super::Lasting::with_web`]).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use dgx_pixels_metrics::{PollError, PollOutput, Source};
use dgx_pixels_registry::{no_shared_inputs, BuildContext, Built, Collector};
use dgx_pixels_web::WebState;

use crate::http_source::{HttpSource, ReloadCounters, ScrapeCounters};
use crate::own_process::OwnProcess;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "exporter",
    enabled_by_default: true,
    enabled_in_simulation: true,
    default_interval: Duration::from_secs(1),
    default_timeout: Duration::from_secs(1),
    help: "the exporter's own HTTP and reload counters and its process_* metrics",
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
    /// Scrapes answered, counted by the server.
    pub scrapes: Arc<ScrapeCounters>,
    /// The OTLP push's counters, while it is on.
    pub otlp: Option<Arc<dgx_pixels_otlp::PushCounters>>,
}

/// The HTTP counters and the process, in one poll.
struct ExporterSource {
    http: HttpSource,
    process: OwnProcess,
}

impl Source for ExporterSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let mut out = self.http.poll()?;
        out.samples.extend(self.process.samples());
        Ok(out)
    }
}

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // None in tests that plan without a server.
    let Some(c) = ctx.lasting.kept_if::<Counters>(COLLECTOR.name) else {
        return Ok(None);
    };
    Ok(Some(Box::new(ExporterSource {
        http: HttpSource {
            web: Arc::clone(&c.web),
            rejected_scrapes: Arc::clone(&c.rejected_scrapes),
            config_reloads: Arc::clone(&c.config_reloads),
            scrapes: Arc::clone(&c.scrapes),
            otlp: c.otlp.clone(),
        },
        process: OwnProcess::new(),
    })))
}
