//! The exporter's metric model: the catalog, per-source snapshots, the snapshot store and the
//! exposition encoders.
//!
//! Why a crate of its own: every source (NVML, DCGM, probes, textfiles, the simulator) and the
//! HTTP server meet here, and none of them should depend on another.
//!
//! - [`catalog`] is the one table defining every metric ([`Metric`], [`CATALOG`]).
//! - A source polls and returns one [`PollOutput`]: its [`Sample`]s (per GPU through
//!   [`gpu::push_gpu_samples`]), families outside the catalog and attribution. The runner
//!   publishes it whole, with its [`SourceHealth`], as an immutable [`Snapshot`] into the
//!   [`SnapshotStore`]; [`Snapshot::served`] is the one "only while up" rule.
//! - [`labels`] (from `dgx-pixels-readout`) spells the label values of a GPU's parts (clock
//!   domains, sensors, throttle reasons, ...) once, for every source.
//! - The HTTP server asks the store's current [`Generation`] for an exposition; each generation
//!   encodes each format once, optionally gzipped, and serves the cached bytes to every scraper.
//!   An encoding converts the catalog samples and external families into one family model
//!   (`family`), which [`Format::OpenMetrics`] (prometheus-client, and the small writer for the
//!   families it cannot express) and the classic [`Format::Text`] (the small writer, `text`)
//!   both write.
//!
//! ```
//! use dgx_pixels_metrics::{EncodeOptions, Format, Metric, Sample, Snapshot, SnapshotStore, SourceHealth};
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

pub mod attribution;
pub mod catalog;
pub mod device;
pub mod encode;
pub mod external;
mod family;
pub mod gpu;
pub mod histogram;
mod openmetrics;
pub mod snapshot;
pub mod source;
pub mod store;
mod syntax;
mod text;

pub use attribution::{AttributionSet, DeviceRef, Holder};
pub use catalog::{Kind, Metric, MetricDef, Unit, CATALOG};
pub use device::{DeviceKey, MigInstance, Scope};
pub use dgx_pixels_readout::labels;
pub use encode::{EncodeOptions, Format};
pub use external::{
    ExternalFamilies, ExternalFamily, ExternalKind, ExternalLabels, ExternalSample,
};
pub use snapshot::{PollOutput, Sample, Snapshot, SourceHealth};
pub use source::{panic_message, Backoff, PollError, PollErrorKind, Source};
pub use store::{Generation, SnapshotStore};
