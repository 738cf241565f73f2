//! The interface every source and the HTTP server share: the catalog, samples and their
//! device keys, the `Source` trait with its poll output and typed errors, and the GPU readouts.
//!
//! Why a crate of its own, and a light one: every source (NVML, DCGM, probes, textfiles, the
//! simulator) and the server meet here, none of them should depend on another, and none should
//! compile the encoders. It depends on nothing but `dgx-pixels-readout`; the snapshot store and
//! the encoders (prometheus-client, gzip, arc-swap) are `dgx-pixels-exposition`, which only the
//! binary uses.
//!
//! - [`catalog`] is the one table defining every metric ([`Metric`], [`CATALOG`]).
//! - A source polls and returns one [`PollOutput`]: its [`Sample`]s (per GPU through
//!   [`gpu::push_gpu_samples`], each carrying its GPU's [`DeviceKey`]), families outside the
//!   catalog and attribution. The runner publishes it whole, with its [`SourceHealth`], as an
//!   immutable [`Snapshot`]; [`Snapshot::served`] is the one "only while up" rule.
//! - [`labels`] (from `dgx-pixels-readout`) spells the label values of a GPU's parts (clock
//!   domains, sensors, throttle reasons, ...) once, for every source.
//!
//! ```
//! use dgx_pixels_metrics::{Metric, Sample};
//!
//! let power = Sample::for_gpu(0, "GPU-0", Metric::GpuPower, &[], 300.0);
//! assert!(power.is_well_formed());
//! assert_eq!(power.label("uuid"), Some("GPU-0"));
//! assert_eq!(power.label_values(), ["0", "GPU-0"]);
//! ```
#![deny(missing_docs)]

pub mod attribution;
pub mod catalog;
pub mod device;
pub mod external;
pub mod gpu;
pub mod histogram;
pub mod incidents;
pub mod snapshot;
pub mod source;
pub mod view;
pub mod xid_ledger;

pub use attribution::{AttributionSet, DeviceRef, Holder, PodLabels};
pub use catalog::{Kind, Metric, MetricDef, Unit, CATALOG};
pub use device::{DeviceKey, MigInstance, Scope};
pub use dgx_pixels_readout::labels;
pub use external::{
    ExternalFamilies, ExternalFamily, ExternalKind, ExternalLabels, ExternalSample,
};
pub use snapshot::{PollOutput, Sample, Snapshot, SourceError, SourceHealth};
pub use source::{panic_message, Backoff, PollError, PollErrorKind, Source};
pub use xid_ledger::{XidLedger, XidOrigin};
