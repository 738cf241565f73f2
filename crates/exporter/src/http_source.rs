//! The `exporter` source's HTTP side: the scrapes answered, what the HTTP layer refused and how
//! web config reloads went, read from counters the server keeps, published like any other
//! source's samples.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dgx_pixels_exposition::Format;
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
    /// Scrapes answered.
    pub scrapes: Arc<ScrapeCounters>,
    /// The OTLP push's counters, while it is on.
    pub otlp: Option<Arc<dgx_pixels_otlp::PushCounters>>,
}

impl Source for HttpSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let c = &self.web.counters;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let mut out = Vec::with_capacity(20);
        out.extend(self.scrapes.samples());
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
        if let Some(otlp) = &self.otlp {
            out.extend(otlp.samples());
        }
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

/// Scrapes of the metrics path answered, for `dgx_pixels_exporter_scrapes_total`: per format,
/// those served and those whose encoding failed.
#[derive(Debug, Default)]
pub struct ScrapeCounters {
    text: [AtomicU64; 2],
    openmetrics: [AtomicU64; 2],
}

impl ScrapeCounters {
    /// Counts a scrape answered in `format`, served or not (`ok`).
    pub fn record(&self, format: Format, ok: bool) {
        let by_result = match format {
            Format::Text => &self.text,
            Format::OpenMetrics => &self.openmetrics,
        };
        by_result[usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
    }

    /// One counter per format and result, zeros included (a rate sees the first error).
    pub fn samples(&self) -> impl Iterator<Item = Sample> + '_ {
        [("text", &self.text), ("openmetrics", &self.openmetrics)]
            .into_iter()
            .flat_map(|(format, by_result)| {
                ["success", "error"]
                    .into_iter()
                    .zip(by_result)
                    .map(move |(result, n)| {
                        Sample::new(
                            Metric::ExporterScrapes,
                            [format, result],
                            n.load(Ordering::Relaxed) as f64,
                        )
                    })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrapes_count_per_format_and_result() {
        let c = ScrapeCounters::default();
        c.record(Format::Text, true);
        c.record(Format::OpenMetrics, true);
        c.record(Format::OpenMetrics, true);
        c.record(Format::OpenMetrics, false);
        let got: Vec<(Vec<String>, f64)> = c.samples().map(|s| (s.labels, s.value)).collect();
        let want = [
            (["text", "success"], 1.0),
            (["text", "error"], 0.0),
            (["openmetrics", "success"], 2.0),
            (["openmetrics", "error"], 1.0),
        ]
        .map(|(l, v)| (l.map(String::from).to_vec(), v));
        assert_eq!(got, want);
    }
}
