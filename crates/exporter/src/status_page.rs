//! The status page at `/`: the node at a glance for a person with a browser, rendered by
//! `dgx_pixels_exposition::status` from the store's current generation.
//!
//! It sits behind the same web guard (TLS, basic auth) as the metrics and counts against the
//! same `--web.max-requests` slots. One page is rendered per generation and second (its ages
//! are in whole seconds) and every other request of that second gets the same bytes, so a
//! crowd of browsers, or a loop of requests, costs what one viewer does.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use dgx_pixels_exposition::status::{render, PageContext};

use crate::app_state::{scrape_permit, AppState, Rendered};

/// The page reloads itself this often.
pub const REFRESH: Duration = Duration::from_secs(10);

/// The media type of the page.
pub const CONTENT_TYPE: &str = "text/html; charset=utf-8";

/// No script, no external asset: only the inline style may apply. Links and the refresh are
/// navigations, which this does not restrict.
const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /`.
pub async fn page(State(state): State<Arc<AppState>>) -> Response {
    let _permit = match scrape_permit(&state) {
        Ok(permit) => permit,
        Err(refused) => return refused.into_response(),
    };
    let body = current_page(&state).await;
    let mut resp = Response::new(Body::from(body));
    let h = resp.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, CONTENT_TYPE),
        (header::CACHE_CONTROL, "no-store"),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    resp
}

/// The page of the current generation and second: rendered by the first request that wants
/// it (well under a millisecond for 64 GPUs, so on the async worker), cached for the others.
/// Requests of the same second wait on the lock without holding a thread.
async fn current_page(state: &AppState) -> Bytes {
    let mut cache = state.page.0.lock().await;
    let generation = state.store.current();
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if let Some(page) = cache
        .as_ref()
        .filter(|p| p.generation == generation.number() && p.second == second)
    {
        return page.body.clone();
    }
    let ctx = PageContext {
        telemetry_path: &state.telemetry_path,
        now,
        uptime: state.started.elapsed(),
        refresh: REFRESH,
    };
    let body = Bytes::from(render(&generation, &ctx));
    *cache = Some(Rendered {
        generation: generation.number(),
        second,
        body: body.clone(),
    });
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::tests::{body, state_with};
    use axum::http::StatusCode;
    use dgx_pixels_metrics::{Metric, Sample, Snapshot, SourceHealth};

    fn simulated() -> Vec<Sample> {
        vec![Sample::new(
            Metric::ExporterBuildInfo,
            ["0.1.0", "abc", "1.95", "simulated", "dgx-h100"],
            1.0,
        )]
    }

    #[tokio::test]
    async fn the_page_is_html_from_the_current_generation_and_cached_within_it() {
        let s = state_with(None, simulated());
        let r = page(State(Arc::clone(&s))).await;
        assert_eq!(r.status(), StatusCode::OK);
        let h = r.headers();
        assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert_eq!(h[header::CACHE_CONTROL], "no-store");
        assert!(h[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .starts_with("default-src 'none'"));
        let text = body(r).await;
        assert!(text.contains("id=\"simulated\">SIMULATED node (scenario dgx-h100)"));
        assert!(text.contains("<a href=\"/metrics\">/metrics</a>"));
        assert!(text.contains("<h2>GPUs (0)</h2>"));
        assert!(text.contains("id=\"source-nvml\" data-state=\"pending\""));

        // Same generation (and, almost surely, second): the same bytes.
        let a = current_page(&s).await;
        let b = current_page(&s).await;
        if a != b {
            // The second turned between the two: the next pair shares one.
            let (a, b) = (current_page(&s).await, current_page(&s).await);
            assert_eq!(a.as_ptr(), b.as_ptr());
        } else {
            assert_eq!(a.as_ptr(), b.as_ptr(), "served from the cache");
        }
        // A new generation is rendered anew, at once.
        s.store.publish(Snapshot {
            source: "sim".into(),
            health: SourceHealth {
                up: true,
                polls: 1,
                ..Default::default()
            },
            output: vec![Sample::for_gpu(0, "GPU-a", Metric::GpuPower, &[], 250.0)].into(),
        });
        let text = body(page(State(Arc::clone(&s))).await).await;
        assert!(text.contains("<h2>GPUs (1)</h2>"), "{text}");
        assert!(text.contains("250 / — W"));
        assert!(text.contains("not evaluated"));
    }

    #[tokio::test]
    async fn the_page_takes_a_scrape_slot() {
        let s = state_with(Some(1), vec![]);
        let held = s
            .scrape_slots
            .load_full()
            .unwrap()
            .try_acquire_owned()
            .unwrap();
        let r = page(State(Arc::clone(&s))).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            s.rejected_scrapes
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        drop(held);
        assert_eq!(page(State(s)).await.status(), StatusCode::OK);
    }
}
