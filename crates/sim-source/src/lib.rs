//! The simulated node as exporter sources.
//!
//! - [`node`]: the `sim` source, the simulated node's GPU readings (through the same mapping
//!   as the NVML source), its DCGM profiling families and its image-generation workload;
//! - [`power`]: its fast power samples, the model's instantaneous power between polls;
//! - [`probes`]: the `probes` collector of a simulated node, the real probe scheduler over a
//!   backend that asks the simulator what each probe would measure.
//!
//! The simulator itself (`dgx-pixels-sim`) knows nothing of metrics; this crate maps it onto
//! the exporter's catalog, and the binary only wires it (`--simulate`).
#![deny(missing_docs)]

pub mod node;
pub mod power;
pub mod probes;
mod workload;

pub use node::{SimSource, LATENCY_BUCKETS, SIMULATED_FAMILIES};
