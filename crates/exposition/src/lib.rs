//! The snapshot store and the exposition encoders: what turns the sources' snapshots into the
//! bytes of `/metrics`.
//!
//! Why a crate of its own: the sources need only the interface (`dgx-pixels-metrics`); the
//! store and the encoders bring the writer's number formatting, gzip and arc-swap, which only the binary
//! (and tests of the exposition) should compile.
//!
//! - [`SnapshotStore`] holds the latest [`Snapshot`](dgx_pixels_metrics::Snapshot) of each
//!   source; each publish swaps in a new immutable [`Generation`] (lock-free reads).
//! - A generation builds its device view ([`DeviceView`](dgx_pixels_metrics::view::DeviceView):
//!   the served samples per GPU, with identity and holders) at most once, on first demand, for
//!   every reader: the encoder's attribution join, the status page, and the collectors that
//!   derive from what the others serve (through [`StoreViews`], never the store itself).
//! - A generation encodes each format at most once, optionally gzipped, and serves the cached
//!   bytes to every scraper. An encoding joins attribution (the view's) and converts the catalog
//!   samples and external families into one family model (`family`), which one writer
//!   (`writer`) writes as [`Format::OpenMetrics`] or the classic [`Format::Text`].
//! - [`Generation::with_model`] lends the same family model to another encoder (the OTLP
//!   push, `dgx-pixels-otlp`), so it serves what `/metrics` serves.
//! - [`status`] renders a generation as the HTML status page at `/`: the same served samples,
//!   for a person rather than a scraper.
//!
//! ```
//! use dgx_pixels_exposition::{EncodeOptions, Format, SnapshotStore};
//! use dgx_pixels_metrics::{Metric, Sample, Snapshot, SourceHealth};
//!
//! let store = SnapshotStore::new(&["sim"], vec![], EncodeOptions::default());
//! store.publish(Snapshot {
//!     source: "sim".into(),
//!     health: SourceHealth { up: true, polls: 1, ..Default::default() },
//!     output: vec![Sample::for_gpu(0, "GPU-0", Metric::GpuPower, &[], 300.0)].into(),
//! });
//! let body = store.current().exposition(Format::Text, false);
//! assert!(std::str::from_utf8(&body).unwrap()
//!     .contains("dgx_pixels_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0\"} 300\n"));
//! ```
#![deny(missing_docs)]

pub mod encode;
pub mod family;
pub mod status;
pub mod store;
mod syntax;
mod writer;

pub use encode::{EncodeOptions, Format};
pub use store::{Generation, SnapshotStore, StoreViews};
