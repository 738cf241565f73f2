//! The HTTP server: `/metrics` (or the configured path) serves the cached bytes of the current
//! snapshot generation; `/-/healthy`, `/-/ready` and the status page at `/` (`status_page.rs`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use dgx_pixels_exposition::Format;

use crate::app_state::{scrape_permit, AppState};
use crate::status_page;

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(&state.telemetry_path.clone(), get(metrics))
        .route("/-/healthy", get(|| async { "Healthy\n" }))
        .route("/-/ready", get(ready))
        .route("/", get(status_page::page))
        .with_state(state)
}

/// A media range from an Accept header with its quality.
fn quality_of(header: &str, wanted: impl Fn(&str) -> bool) -> f32 {
    header
        .split(',')
        .filter_map(|part| {
            let mut params = part.split(';');
            let media = params.next()?.trim().to_ascii_lowercase();
            if !wanted(&media) {
                return None;
            }
            let q = params
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            Some(q)
        })
        .fold(0.0, f32::max)
}

/// Chooses the exposition format: OpenMetrics when the scraper prefers it (Prometheus does),
/// the classic text format otherwise (curl, `*/*`, text/plain, no header).
pub fn negotiate_format(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let om = quality_of(accept, |m| m == "application/openmetrics-text");
    let text = quality_of(accept, |m| m == "text/plain");
    if om > 0.0 && om >= text {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// Whether the client accepts a gzip body.
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|h| quality_of(h, |c| c == "gzip") > 0.0)
}

async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let _permit = match scrape_permit(&state) {
        Ok(permit) => permit,
        Err(refused) => return refused.into_response(),
    };
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let format = negotiate_format(header(header::ACCEPT));
    let gzip = accepts_gzip(header(header::ACCEPT_ENCODING));
    let body = match state.store.current().cached_exposition(format, gzip) {
        Some(body) => body,
        None => match encode_first(&state, format, gzip).await {
            Ok(body) => body,
            Err(e) => {
                state.scrapes.record(format, false);
                tracing::error!(error = %e, "encoding the exposition failed");
                return (StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n").into_response();
            }
        },
    };
    state.scrapes.record(format, true);
    let mut resp = Response::new(Body::from(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    h.insert(
        header::VARY,
        HeaderValue::from_static("Accept, Accept-Encoding"),
    );
    if gzip {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    resp
}

/// The first scrape of a generation encodes it, which can take milliseconds: on the blocking
/// pool, so the two async workers keep accepting and answering probes, and one at a time, so a
/// burst of scrapes waits here instead of starting a blocking thread each.
async fn encode_first(
    state: &AppState,
    format: Format,
    gzip: bool,
) -> Result<Bytes, tokio::task::JoinError> {
    let _encoding = state.encoding.lock().await;
    // The newest generation: a scrape that waited serves what the one before it encoded.
    let generation = state.store.current();
    match generation.cached_exposition(format, gzip) {
        Some(body) => Ok(body),
        None => tokio::task::spawn_blocking(move || generation.exposition(format, gzip)).await,
    }
}

async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let waiting = state.store.pending_sources();
    if waiting.is_empty() {
        (StatusCode::OK, "Ready\n".to_string()).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "Not ready: waiting for the first poll of {}\n",
                waiting.join(", ")
            ),
        )
            .into_response()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::app_state::PageCache;
    use arc_swap::ArcSwapOption;
    use dgx_pixels_exposition::SnapshotStore;
    use std::time::Instant;
    use tokio::sync::Semaphore;

    #[test]
    fn prometheus_gets_openmetrics_and_curl_gets_text() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate_format(Some(prom)), Format::OpenMetrics);
        assert_eq!(negotiate_format(Some("*/*")), Format::Text);
        assert_eq!(negotiate_format(None), Format::Text);
        assert_eq!(
            negotiate_format(Some("text/plain;version=0.0.4")),
            Format::Text
        );
        assert_eq!(
            negotiate_format(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")),
            Format::Text
        );
        assert_eq!(
            negotiate_format(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate_format(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
    }

    #[test]
    fn gzip_only_when_accepted() {
        assert!(accepts_gzip(Some("gzip")));
        assert!(accepts_gzip(Some("deflate, gzip;q=0.5")));
        assert!(!accepts_gzip(Some("gzip;q=0")));
        assert!(!accepts_gzip(Some("identity")));
        assert!(!accepts_gzip(None));
    }

    /// The state of a server over the sources nvml and sim, with `max` scrape slots.
    pub(crate) fn state_with(
        max: Option<usize>,
        statics: Vec<dgx_pixels_metrics::Sample>,
    ) -> Arc<AppState> {
        use dgx_pixels_exposition::EncodeOptions;
        Arc::new(AppState {
            store: Arc::new(SnapshotStore::new(
                &["nvml", "sim"],
                statics,
                EncodeOptions::default(),
            )),
            telemetry_path: "/metrics".into(),
            scrape_slots: ArcSwapOption::new(max.map(|n| Arc::new(Semaphore::new(n)))),
            started: Instant::now(),
            page: PageCache::default(),
            rejected_scrapes: Arc::default(),
            scrapes: Arc::default(),
            encoding: Default::default(),
        })
    }

    fn state(max: Option<usize>) -> Arc<AppState> {
        state_with(max, vec![])
    }

    pub(crate) async fn body(r: Response) -> String {
        let b = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn ready_is_503_until_every_source_polled() {
        use dgx_pixels_metrics::{Snapshot, SourceHealth};
        let s = state(None);
        let r = ready(State(Arc::clone(&s))).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body(r).await,
            "Not ready: waiting for the first poll of nvml, sim\n"
        );
        for source in ["nvml", "sim"] {
            s.store.publish(Snapshot {
                source: source.into(),
                // A failed first poll still counts: the source has answered.
                health: SourceHealth {
                    polls: 1,
                    ..Default::default()
                },
                output: Default::default(),
            });
        }
        assert_eq!(ready(State(s)).await.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn scrapes_beyond_the_limit_get_503() {
        let s = state(Some(1));
        let held = s
            .scrape_slots
            .load_full()
            .unwrap()
            .try_acquire_owned()
            .unwrap();
        let r = metrics(State(Arc::clone(&s)), HeaderMap::new()).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(held);
        let r = metrics(State(Arc::clone(&s)), HeaderMap::new()).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(body(r)
            .await
            .contains("dgx_pixels_source_up{source=\"nvml\"} 0"));
        // The refused scrape counts as refused, the one answered as a text scrape served.
        let counted: Vec<_> = s.scrapes.samples().map(|x| x.value).collect();
        assert_eq!(counted, [1.0, 0.0, 0.0, 0.0]);
    }
}
