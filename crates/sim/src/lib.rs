//! A deterministic simulator of NVIDIA GPU nodes, driven by scenario files.
//!
//! The exporter needs to run, be tested and be demonstrated on machines without a GPU. This crate
//! provides the GPUs: a physically coherent, seeded model of a node whose readings the exporter's
//! simulated source maps to metrics, and which the fake NVML and DCGM shared libraries used in
//! tests answer from. It knows nothing about HTTP, the command line or metric names: it speaks in
//! per-GPU readings at a given time, in base units (bytes, watts, joules, celsius, hertz, seconds,
//! ratios in 0..1), and a reading is the same [`GpuReadout`] the NVML source fills from a real
//! GPU (crate `dgx-pixels-readout`), so no consumer translates between two models.
//!
//! # Main types
//!
//! - [`Scenario`]: a validated description of a node: its GPUs (model, limits, clocks, MIG
//!   layout), a workload timeline of phases, and injected faults (XIDs, lost GPUs, ECC errors
//!   and the rows or pages they retire, cooling failures, NVLink links down or erring, a
//!   degraded PCIe link, the power brake, GPU resets). Load a built-in by name ([`BUILTIN_SCENARIOS`]) or a TOML file with
//!   [`Scenario::load`]; errors are [`ScenarioError`]s that name the file, line and key. The file
//!   format is documented in the [`scenario`] module.
//! - [`Node`]: the running model built from a scenario. [`Node::gpu`] gives a GPU's static facts
//!   ([`GpuStatic`], and [`Node::identity`] the identity NVML reports); [`Node::reading`] gives
//!   its state at a time since scenario start ([`GpuState`]: either a [`GpuReading`] or lost, as
//!   after XID 79). A [`GpuReading`] is the GPU's [`GpuReadout`] plus the few quantities of the
//!   model that no device reading carries (link rates, the clock a full load would get).
//!
//! # The model
//!
//! Each GPU is integrated forward in fixed steps of [`STEP`] (100 ms). Utilization follows the
//! workload phase with a little deterministic noise (a hash of seed, GPU and step, no random
//! number generator); power is idle power plus a share proportional to utilization, capped at the
//! power limit (clocks are reduced and `sw_power_cap` set when the demand exceeds it); temperature
//! follows power with a first-order lag; energy is the integral of power; clocks fall and
//! thermal throttle reasons are set above the GPU's maximum operating and slowdown temperatures.
//! The same scenario and time always give the same reading, whatever was queried before.
//!
//! Two models derive from a reading, so they stay coherent with it: [`profile`] gives what
//! DCGM's profiling fields would report (SM activity, occupancy, pipe and DRAM activity, link
//! rates), and [`Node::benchmark`] what the exporter's CUDA probes would measure (GEMM
//! throughput following the clock a full load would get, copy bandwidth following the memory
//! and the PCIe link, launch latency), in [`bench`].
//!
//! Some built-in scenarios also play an image-generation service on some of their GPUs
//! ([`ImageGeneration`], in [`imagegen`]); its throughput and latency follow the GPU's power and
//! clocks.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use dgx_pixels_sim::{GpuState, Node, Scenario};
//!
//! let scenario = Scenario::load("dgx-h100")?;
//! let mut node = Node::new(scenario);
//! assert_eq!(node.gpu_count(), 8);
//! assert_eq!(node.gpu(0).map(|g| g.name.as_str()), Some("NVIDIA H100 80GB HBM3"));
//!
//! let Some(GpuState::Ok(r)) = node.reading(0, Duration::from_secs(60)) else {
//!     panic!("GPU 0 is healthy in this scenario");
//! };
//! let r = r.readout;
//! assert!(r.utilization_ratio.is_some_and(|u| u > 0.8));
//! assert!(r.power_watts.is_some_and(|w| w <= 700.0));
//!
//! // Energy is a counter: later readings never have less.
//! let Some(GpuState::Ok(later)) = node.reading(0, Duration::from_secs(61)) else { panic!() };
//! assert!(later.readout.energy_joules > r.energy_joules);
//!
//! // Errors name the file, the line and the key.
//! let err = Scenario::from_toml_str("[node]\nname = 3\n", "my.toml").unwrap_err();
//! assert_eq!(err.to_string(), "scenario my.toml line 2: key node.name: \
//!     invalid type: integer `3`, expected a string");
//! # Ok::<(), dgx_pixels_sim::ScenarioError>(())
//! ```
#![deny(missing_docs)]

pub mod bench;
pub mod collective;
mod error;
pub mod imagegen;
mod locate;
mod node;
mod noise;
pub mod peer;
pub mod profile;
pub mod scenario;
pub mod storage;
mod types;

pub use bench::{Benchmark, BenchmarkError, BenchmarkRun, Precision, Transfer};
pub use dgx_pixels_readout::{labels, ClockReadout, FabricReadout, GpuIdentity, GpuReadout};
pub use error::ScenarioError;
pub use imagegen::ImageGeneration;
pub use node::{Node, STEP};
pub use profile::{profile, Profile};
pub use scenario::{Scenario, BUILTIN_SCENARIOS, MAX_GPUS, XID_GPU_LOST};
pub use types::{Clocks, FabricStatic, GpuReading, GpuState, GpuStatic, MigInstance, PcieLink};

/// The pid of the simulated process on a busy, non-MIG GPU `index` (the processes of its MIG
/// instances follow it): what the simulated training job's traces name as their host process,
/// so they join to `dgx_pixels_process_memory_used_bytes` by pid as a real job's traces do.
pub fn process_id(index: u64) -> u32 {
    let index = u32::try_from(index).unwrap_or(u32::MAX);
    index.saturating_mul(100).saturating_add(20_000)
}

/// The Kubernetes pod UID of the `replica`th process on a time-sliced GPU whose first process
/// is `base_pid` ([`process_id`]): each sharing process is its own pod, as time-slicing
/// replicas handed to different pods are, so the per-process series show which pod is which.
pub fn shared_pod_uid(base_pid: u32, replica: usize) -> String {
    format!("5111ced0-0000-4000-8000-{:06x}{:06x}", base_pid, replica)
}
