//! The push loop: on its own OS thread with its own single-threaded tokio runtime, so neither a
//! slow collector nor the conversion ever holds up a poll or a scrape. Each push takes the
//! store's current generation (one generation, never a mix), converts its family model,
//! encodes it, and POSTs it under one deadline that covers every retry.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE, HOST, RETRY_AFTER};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use prost::Message as _;

use dgx_pixels_exposition::SnapshotStore;
use dgx_pixels_metrics::{Metric, Sample};

use crate::config::PushConfig;
use crate::convert::{request, Times};
use crate::tls::{Refresh, TlsClient};

/// The largest request body sent (after compression); a larger one is counted as `too_large`
/// and not sent. OTLP receivers commonly refuse more (Prometheus: its remote-write bound).
pub const MAX_BODY_BYTES: usize = 32 << 20;
/// The first retry's wait; doubled per retry, and a `Retry-After` is honoured up to the
/// export's deadline.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// At most this much of an error response's body is read (and never logged).
const MAX_REPLY_BYTES: usize = 64 * 1024;

/// The push's own counters, served by the `exporter` source.
#[derive(Debug, Default)]
pub struct PushCounters {
    success: AtomicU64,
    error: AtomicU64,
    too_large: AtomicU64,
    /// Microseconds of the last push, plus one (0: none yet).
    last_duration_us: AtomicU64,
    /// Milliseconds since the epoch of the last success (0: none yet).
    last_success_ms: AtomicU64,
}

impl PushCounters {
    /// The counters as catalog samples.
    pub fn samples(&self) -> Vec<Sample> {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = vec![
            Sample::new(
                Metric::ExporterOtlpExports,
                ["success"],
                n(&self.success) as f64,
            ),
            Sample::new(
                Metric::ExporterOtlpExports,
                ["error"],
                n(&self.error) as f64,
            ),
            Sample::new(
                Metric::ExporterOtlpExports,
                ["too_large"],
                n(&self.too_large) as f64,
            ),
        ];
        if let Some(us) = n(&self.last_duration_us).checked_sub(1) {
            out.push(Sample::new(
                Metric::ExporterOtlpExportDuration,
                [] as [&str; 0],
                us as f64 / 1e6,
            ));
        }
        if let ms @ 1.. = n(&self.last_success_ms) {
            out.push(Sample::new(
                Metric::ExporterOtlpLastSuccess,
                [] as [&str; 0],
                ms as f64 / 1e3,
            ));
        }
        out
    }

    /// Pushes by result: (success, error, too_large).
    pub fn counts(&self) -> (u64, u64, u64) {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (n(&self.success), n(&self.error), n(&self.too_large))
    }
}

/// Why one export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The body was over [`MAX_BODY_BYTES`].
    #[error("the request is {0} bytes, over the bound of {MAX_BODY_BYTES}")]
    TooLarge(usize),
    /// The collector answered with this status.
    #[error("the collector answered {0}")]
    Status(StatusCode),
    /// Connecting, sending or reading failed.
    #[error("{0}")]
    Transport(String),
    /// The TLS handshake failed on a certificate (the collector's not verified, or ours
    /// refused): not retried, the next push tries again.
    #[error("{0}")]
    Tls(String),
    /// The deadline passed.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

/// What a push sends: the store, the checked configuration and the resource attributes.
pub struct Pusher {
    /// Where the generations come from.
    pub store: Arc<SnapshotStore>,
    /// Endpoint, headers, timings.
    pub config: PushConfig,
    /// The resource's attributes (the binary's defaults, then the environment's).
    pub resource: Vec<(String, String)>,
    /// The process' start, every cumulative point's start time.
    pub start: SystemTime,
    /// Counted here.
    pub counters: Arc<PushCounters>,
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Pusher {
    /// The current generation as an encoded (and, if configured, compressed) request body.
    pub fn body(&self) -> Bytes {
        let generation = self.store.current();
        let times = Times {
            start_ns: unix_nanos(self.start),
            now_ns: unix_nanos(SystemTime::now()),
        };
        let req = generation.with_model(|model| request(model, &self.resource, &times));
        let plain = req.encode_to_vec();
        if !self.config.gzip {
            return Bytes::from(plain);
        }
        let mut gz = flate2::write::GzEncoder::new(
            Vec::with_capacity(plain.len() / 4),
            flate2::Compression::fast(),
        );
        match gz.write_all(&plain).and_then(|_| gz.finish()) {
            Ok(v) => Bytes::from(v),
            // Writing into a Vec cannot fail.
            Err(_) => Bytes::new(),
        }
    }

    /// One push: the current generation, sent with retries under the configured deadline,
    /// counted and, when it fails, logged (never with the headers).
    pub async fn push_once(&self) -> Result<(), ExportError> {
        let started = Instant::now();
        // `Some(None)`: https, and the TLS files are bad (or their check hung), so nothing is
        // sent.
        let tls = self.config.tls.as_ref().map(|tls| self.tls_config(tls));
        let result = match (tls, self.body()) {
            (Some(None), _) => Err(ExportError::Tls(
                "the TLS files are bad or could not be checked (logged): not pushing".into(),
            )),
            (_, body) if body.len() > MAX_BODY_BYTES => Err(ExportError::TooLarge(body.len())),
            (tls, body) => {
                let deadline = started + self.config.timeout;
                let sending = self.send_with_retries(body, tls.flatten(), deadline);
                match tokio::time::timeout_at(deadline.into(), sending).await {
                    Ok(r) => r,
                    Err(_) => Err(ExportError::Timeout(self.config.timeout)),
                }
            }
        };
        let c = &self.counters;
        c.last_duration_us
            .store(started.elapsed().as_micros() as u64 + 1, Ordering::Relaxed);
        match &result {
            Ok(()) => {
                c.success.fetch_add(1, Ordering::Relaxed);
                let ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                c.last_success_ms.store(ms.max(1), Ordering::Relaxed);
            }
            Err(e) => {
                match e {
                    ExportError::TooLarge(_) => c.too_large.fetch_add(1, Ordering::Relaxed),
                    _ => c.error.fetch_add(1, Ordering::Relaxed),
                };
                tracing::warn!(endpoint = %self.config.endpoint, "OTLP push failed: {e}");
            }
        }
        result
    }

    /// Checks the TLS files (re-reading them if they changed) on a thread of its own under the
    /// export's timeout: a file on a hung mount costs that thread, never the push loop. The
    /// configuration to push with, `None` while the files are bad or their check hangs.
    fn tls_config(&self, tls: &Arc<TlsClient>) -> Option<Arc<rustls::ClientConfig>> {
        let checking = Arc::clone(tls);
        let refresh = dgx_pixels_settings::file::with_deadline(self.config.timeout, move || {
            Ok(checking.refresh())
        });
        match refresh {
            Ok(Refresh::Unchanged) => {}
            Ok(Refresh::Reloaded) => tracing::info!("OTLP push: TLS files changed, re-read"),
            Ok(Refresh::Bad { error, changed }) if changed => {
                tracing::warn!("OTLP push stopped until the TLS files are good again: {error}")
            }
            // Logged when first seen; every failed push is still counted.
            Ok(Refresh::Bad { .. }) => {}
            Err(e) => {
                tracing::warn!("OTLP push: checking the TLS files did not finish: {e}");
                return None;
            }
        }
        tls.config()
    }

    async fn send_with_retries(
        &self,
        body: Bytes,
        tls: Option<Arc<rustls::ClientConfig>>,
        deadline: Instant,
    ) -> Result<(), ExportError> {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let (result, retry_after) = match self.send(body.clone(), tls.as_ref()).await {
                Ok((status, _)) if status.is_success() => return Ok(()),
                Ok((status, retry_after)) => (
                    ExportError::Status(status),
                    retryable(status).then_some(retry_after),
                ),
                Err(e @ ExportError::Tls(_)) => (e, None),
                Err(e) => (e, Some(None)),
            };
            // Not retryable, or no time left for the wait.
            let Some(retry_after) = retry_after else {
                return Err(result);
            };
            let wait = retry_after.unwrap_or(backoff);
            if Instant::now() + wait >= deadline {
                return Err(result);
            }
            tokio::time::sleep(wait).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }

    /// One POST on a new connection (TLS with `tls`): the status and its `Retry-After` in
    /// seconds, if any.
    async fn send(
        &self,
        body: Bytes,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> Result<(StatusCode, Option<Duration>), ExportError> {
        let endpoint = &self.config.endpoint;
        let stream = tokio::net::TcpStream::connect(&endpoint.authority)
            .await
            .map_err(|e| {
                ExportError::Transport(format!("connecting to {}: {e}", endpoint.authority))
            })?;
        let Some(tls) = tls else {
            return self.exchange(TokioIo::new(stream), body).await;
        };
        let name = rustls::pki_types::ServerName::try_from(endpoint.host.clone())
            .map_err(|e| ExportError::Tls(format!("{:?}: {e}", endpoint.host)))?;
        let stream = tokio_rustls::TlsConnector::from(Arc::clone(tls))
            .connect(name, stream)
            .await
            .map_err(|e| {
                failure(
                    &format_args!("TLS handshake with {}", endpoint.authority),
                    &e,
                )
            })?;
        self.exchange(TokioIo::new(stream), body).await
    }

    /// The request and its reply on a connected (and, for https, handshaken) stream.
    async fn exchange<T>(
        &self,
        io: T,
        body: Bytes,
    ) -> Result<(StatusCode, Option<Duration>), ExportError>
    where
        T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        // With TLS 1.3 the collector refuses our certificate after our side of the handshake
        // is done: its alert arrives as the request's error.
        let transport = |e: &(dyn std::error::Error + 'static)| failure(&"the request", e);
        let endpoint = &self.config.endpoint;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| transport(&e))?;
        // Ends with the exchange (the sender is dropped) or the export's deadline.
        let connection = tokio::spawn(connection);
        let mut request = Request::post(endpoint.path.as_str())
            .header(HOST, endpoint.authority.as_str())
            .header(CONTENT_TYPE, "application/x-protobuf");
        if self.config.gzip {
            request = request.header(CONTENT_ENCODING, "gzip");
        }
        for (k, v) in &self.config.headers {
            request = request.header(k, v);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| ExportError::Transport(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| transport(&e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        // Read (and drop) a bounded reply, so the connection ends cleanly.
        let _ = http_body_util::Limited::new(response.into_body(), MAX_REPLY_BYTES)
            .collect()
            .await;
        drop(sender);
        connection.abort();
        Ok((status, retry_after))
    }

    /// Pushes every interval until the process ends. Blocks: run it on its own thread
    /// ([`spawn`]).
    pub async fn run(self) {
        // The first push one interval after the start, as the SDK's periodic reader does: by
        // then the sources have published their first polls.
        let first = tokio::time::Instant::now() + self.config.interval;
        let mut tick = tokio::time::interval_at(first, self.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Counted and logged inside.
            let _ = self.push_once().await;
        }
    }
}

/// `context: ` the error and its causes (hyper's own message is only its error's kind), `: `-joined,
/// at most 8 deep. A TLS error among them (a certificate not verified, an alert from the
/// collector) is [`ExportError::Tls`]: a retry would fail the same way; the rest is
/// [`ExportError::Transport`].
fn failure(context: &dyn std::fmt::Display, e: &(dyn std::error::Error + 'static)) -> ExportError {
    let mut out = format!("{context}: {e}");
    let mut tls = false;
    let mut next = Some(e);
    for _ in 0..8 {
        let Some(err) = next else { break };
        tls |= err.is::<rustls::Error>()
            || err
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.is::<rustls::Error>());
        next = err.source();
        if let Some(source) = next {
            let text = source.to_string();
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
        }
    }
    if tls {
        ExportError::Tls(out)
    } else {
        ExportError::Transport(out)
    }
}

/// The statuses OTLP/HTTP says to retry (429, 502, 503, 504).
fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 502 | 503 | 504)
}

/// Starts the push loop on its own thread, with its own runtime.
pub fn spawn(pusher: Pusher) -> std::io::Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("otlp-push".into())
        .spawn(move || runtime.block_on(pusher.run()))
}
