//! The status page at `/`: the node at a glance for a person with a browser.
//!
//! Rendered from one [`Generation`], the same served samples `/metrics` encodes: a source that
//! is down contributes nothing, and a reading nobody serves is shown as "—", never as 0. One
//! HTML document with inline CSS, no script and no external asset, so it works through
//! `kubectl port-forward` and behind the same TLS and basic auth as the metrics. Every text
//! that comes from a label or an error message is escaped.
//!
//! - [`view()`] reads what the page shows (GPUs with their health verdict and readings, MIG
//!   instances, sources with their last poll and last error, build facts) into a
//!   [`NodeView`] that borrows from the generation;
//! - [`render`] writes it as HTML.
//!
//! The ages on the page ("3 s ago") depend on the time of rendering, so the page is rendered
//! per request (the server caches it for one generation and second, see the exporter's
//! `status_page.rs`); docs/performance.md has its cost for 8 and 64 GPUs.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use dgx_pixels_exposition::status::{render, PageContext};
//! use dgx_pixels_exposition::{EncodeOptions, SnapshotStore};
//! use dgx_pixels_metrics::{Metric, Sample, Snapshot, SourceHealth};
//!
//! let store = SnapshotStore::new(&["sim"], vec![], EncodeOptions::default());
//! store.publish(Snapshot {
//!     source: "sim".into(),
//!     health: SourceHealth { up: true, polls: 1, ..Default::default() },
//!     output: vec![Sample::for_gpu(0, "GPU-0", Metric::GpuPower, &[], 300.0)].into(),
//! });
//! let ctx = PageContext {
//!     telemetry_path: "/metrics",
//!     now: SystemTime::now(),
//!     uptime: Duration::from_secs(5),
//!     refresh: Duration::from_secs(10),
//! };
//! let page = render(&store.current(), &ctx);
//! assert!(page.contains("<tr class=\"gpu\" id=\"gpu-0\""));
//! assert!(page.contains("300 / — W"), "the limit is not served: —, not 0");
//! assert!(page.contains("not evaluated"), "no health verdict is served");
//! ```

use std::time::{Duration, SystemTime};

use crate::store::Generation;

mod html;
mod view;

pub use html::Esc;
pub use view::{
    view, BuildFacts, FabricView, GpuProbes, GpuView, Health, MigView, NodeProbes, NodeView,
    ProbeResult, ProbeUnit, RailView, SourceState, SourceView, StorageView,
};

/// The health collector's series as the page reads them: the one place to edit should they
/// be renamed.
pub mod health_series {
    use dgx_pixels_metrics::catalog::Metric;

    /// `dgx_pixels_gpu_health_state{gpu,uuid,state}`: one 0/1 series per state, the current
    /// one 1.
    pub const STATE: Metric = Metric::GpuHealthState;
    /// The label of [`STATE`] naming the state (healthy, degraded, unhealthy, unknown).
    pub const STATE_LABEL: &str = "state";
    /// `dgx_pixels_gpu_health_action_info{gpu,uuid,action,reason}`: value 1, one series per
    /// GPU.
    pub const ACTION: Metric = Metric::GpuHealthAction;
    /// The label of [`ACTION`] naming the most severe pending action.
    pub const ACTION_LABEL: &str = "action";
    /// The label of [`ACTION`] naming the rule behind it.
    pub const REASON_LABEL: &str = "reason";
    /// `dgx_pixels_exporter_xid_policy_info{codes,policy}`: the XID policy in force.
    pub const XID_POLICY: Metric = Metric::ExporterXidPolicy;
}

/// What the page needs beyond the generation.
#[derive(Debug, Clone)]
pub struct PageContext<'a> {
    /// The metrics path, for its link.
    pub telemetry_path: &'a str,
    /// The time of rendering, for ages.
    pub now: SystemTime,
    /// How long the exporter has been running.
    pub uptime: Duration,
    /// The page reloads itself after this long (`<meta http-equiv=refresh>`), at least 1 s.
    pub refresh: Duration,
}

/// The page for `generation`.
pub fn render(generation: &Generation, ctx: &PageContext<'_>) -> String {
    html::document(&view(generation), generation.number(), ctx)
}

#[cfg(test)]
mod tests;
