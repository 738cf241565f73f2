//! What the HTTP handlers share (the store, the scrape slots, the status page's cache), and
//! the one way a handler takes a scrape slot. Below both the server and the status page, so
//! neither imports the other's state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwapOption;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use dgx_pixels_exposition::SnapshotStore;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What the handlers share.
#[derive(Debug)]
pub struct AppState {
    /// The snapshot store sources publish into.
    pub store: Arc<SnapshotStore>,
    /// The metrics path, for the status page's link.
    pub telemetry_path: String,
    /// Caps concurrent scrapes and status pages; `None` = unlimited. Swapped by a config
    /// reload (requests in flight keep the permit of the semaphore they started with).
    pub scrape_slots: ArcSwapOption<Semaphore>,
    /// When the server started, for the status page's uptime.
    pub started: Instant,
    /// The status page of the current generation and second.
    pub page: PageCache,
    /// Scrapes (and status pages) refused because `scrape_slots` were all taken.
    pub rejected_scrapes: Arc<AtomicU64>,
    /// Scrapes of the metrics path answered, per format and result.
    pub scrapes: Arc<crate::http_source::ScrapeCounters>,
    /// Held while a generation is encoded: concurrent first scrapes wait here, without a
    /// thread each, and then find the bytes cached.
    pub encoding: tokio::sync::Mutex<()>,
}

/// The last page rendered, with the generation and the second it shows.
#[derive(Debug, Default)]
pub struct PageCache(pub(crate) tokio::sync::Mutex<Option<Rendered>>);

/// One rendered page.
#[derive(Debug)]
pub(crate) struct Rendered {
    pub(crate) generation: u64,
    pub(crate) second: u64,
    pub(crate) body: Bytes,
}

/// Every `--web.max-requests` slot was taken: answered 503.
#[derive(Debug)]
pub(crate) struct SlotsTaken;

impl IntoResponse for SlotsTaken {
    fn into_response(self) -> Response {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many concurrent scrapes (--web.max-requests)\n",
        )
            .into_response()
    }
}

/// One of the `--web.max-requests` slots (`None`: unlimited), counted as refused when none is
/// free.
pub(crate) fn scrape_permit(state: &AppState) -> Result<Option<OwnedSemaphorePermit>, SlotsTaken> {
    let Some(sem) = state.scrape_slots.load_full() else {
        return Ok(None);
    };
    sem.try_acquire_owned().map(Some).map_err(|_| {
        state.rejected_scrapes.fetch_add(1, Ordering::Relaxed);
        SlotsTaken
    })
}
