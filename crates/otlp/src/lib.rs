//! OTLP/HTTP push of the snapshot store's generations (docs/otlp.md).
//!
//! Why a crate of its own: only the binary needs the OTLP wire types, prost and an HTTP client
//! loop; the encoders (`dgx-pixels-exposition`) stay free of them. It reads the same family
//! model `/metrics` writes ([`Generation::with_model`](dgx_pixels_exposition::Generation::with_model)),
//! so a push carries the values, types, units and help of the scrape of the same generation,
//! with the same series budget.
//!
//! - [`config`]: the `OTEL_EXPORTER_OTLP_*` variables and the flag, checked at startup.
//! - [`convert`]: a generation's families as one `ExportMetricsServiceRequest`.
//! - [`push`]: the loop on its own thread, the request with its deadline and retries, and the
//!   counters the `exporter` source serves.
//! - [`tls`]: `https://` endpoints: the collector's CAs or the system's, the client certificate
//!   of mutual TLS, re-read when the files rotate.
#![deny(missing_docs)]

pub mod config;
pub mod convert;
pub mod push;
pub mod tls;

pub use config::{ConfigError, PushConfig};
pub use push::{spawn, PushCounters, Pusher};
