//! The `exporter` source: what the HTTP layer refused and how web config reloads went, read from
//! counters the server keeps, published like any other source's samples.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dgx_pixels_metrics::{Metric, PollError, PollOutput, Sample, Source};
use dgx_pixels_web::WebState;

/// Reads the HTTP counters.
pub struct HttpSource {
    /// The web config state and its counters.
    pub web: Arc<WebState>,
    /// Scrapes refused by `--web.max-requests`.
    pub rejected_scrapes: Arc<AtomicU64>,
    /// Outcomes of config reloads (SIGHUP).
    pub config_reloads: Arc<ReloadCounters>,
}

impl Source for HttpSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let c = &self.web.counters;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let mut out = Vec::with_capacity(16);
        for (reason, v) in [
            ("connection_limit", n(&c.rejected_connections)),
            ("per_client_limit", n(&c.rejected_per_client)),
            ("request_timeout", n(&c.request_timeouts)),
            ("auth_busy", n(&c.auth_throttled)),
            ("rate_limit", n(&c.rate_limited)),
            ("scrape_limit", n(&self.rejected_scrapes)),
            ("unauthorized", n(&c.unauthorized)),
            ("request_body", n(&c.bodies_refused)),
            ("tls_handshake", n(&c.failed_handshakes)),
            ("stalled", n(&c.stalled_connections)),
        ] {
            out.push(Sample::new(Metric::ExporterHttpRejected, [reason], v));
        }
        out.push(Sample::new(
            Metric::ExporterWebConfigReloads,
            ["success"],
            n(&c.reloads_ok),
        ));
        out.push(Sample::new(
            Metric::ExporterWebConfigReloads,
            ["failure"],
            n(&c.reloads_failed),
        ));
        let ok = c.last_reload_ok.load(Ordering::Relaxed);
        out.push(Sample::new(
            Metric::ExporterWebConfigLastReloadSuccessful,
            [] as [&str; 0],
            if ok { 1.0 } else { 0.0 },
        ));
        out.extend(self.config_reloads.samples());
        Ok(PollOutput::samples(out))
    }
}

/// Reload outcomes, for `dgx_pixels_exporter_config_reloads_total`.
#[derive(Debug)]
pub struct ReloadCounters {
    ok: AtomicU64,
    failed: AtomicU64,
    last_ok: AtomicBool,
}

impl Default for ReloadCounters {
    fn default() -> Self {
        ReloadCounters {
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_ok: AtomicBool::new(true),
        }
    }
}

impl ReloadCounters {
    /// Counts a reload's outcome.
    pub fn record(&self, ok: bool) {
        let counter = if ok { &self.ok } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
        self.last_ok.store(ok, Ordering::Relaxed);
    }

    /// The counter and gauge samples.
    pub fn samples(&self) -> [Sample; 3] {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        [
            Sample::new(Metric::ExporterConfigReloads, ["success"], n(&self.ok)),
            Sample::new(Metric::ExporterConfigReloads, ["failure"], n(&self.failed)),
            Sample::new(
                Metric::ExporterConfigLastReloadSuccessful,
                [] as [&str; 0],
                if self.last_ok.load(Ordering::Relaxed) {
                    1.0
                } else {
                    0.0
                },
            ),
        ]
    }
}
