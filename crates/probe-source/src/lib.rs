//! The daemon's `probes` source: a [`Source`] that runs probes politely and exports their last
//! results. The measurements themselves are dgx-pixels-probes'; this crate schedules them,
//! runs them in worker processes ([`worker::WorkerBackend`]) and turns them into series.
//!
//! Politeness rules, checked before every run (each skip is its own `outcome`):
//! - one probe at a time on the node (probes run one after another on the source's thread);
//! - without a current utilization reading (from the NVML/DCGM snapshot) a GPU is left alone
//!   (`skipped_no_utilization`): without proof that it is idle, it is not touched;
//! - a GPU a pod or HPC job holds (`skipped_held`), one with another process on it
//!   (`skipped_in_use`), one in MIG mode (`skipped_mig`), one above the busy threshold
//!   (`skipped_busy`) and one that has not read idle for the whole settle window
//!   (`skipped_settling`) are left alone;
//! - the worker checks compute mode, MIG and other processes again itself before it creates a
//!   context (`skipped_compute_mode`, ...) and while it runs: another process seen on the GPU
//!   makes the run `contended`, and its numbers are discarded (see [`dgx_pixels_probes::worker`]);
//! - after a run of duration d, that GPU is not probed again for d / duty_cycle, so probes
//!   hold each GPU at most `duty_cycle` of the time (0.5% by default); with `nccl_allreduce`
//!   on, the GPUs of its set split that budget with it ([`NODE_SHARE`]), so neither starves
//!   the other;
//! - a first pass reaches every kind early: each GPU runs each of its probe kinds once, one
//!   after another, as soon as it passes the checks, and takes the rests of those runs
//!   together after the last one (they are owed, not forgiven); GPUs start the rotation at
//!   staggered kinds, so the node has a result of every kind after K + N - 1 runs;
//! - probes whose buffers exceed the memory cap are not scheduled at all;
//! - a pair probe (`p2p_copy`) holds two GPUs: the peer passes the same checks, and both rest
//!   after the run;
//! - `storage_read` (a node probe of `[probes] storage_paths`) runs only while every GPU
//!   passes the checks;
//! - `nccl_allreduce` (a node probe, `[probes] nccl_allreduce`) holds every GPU of its set:
//!   it runs only while each of them passes the checks; the probe rests after it, its GPUs
//!   only until it ends (its rest is on its own share of their budget, not on their probes).
//!
//! With the [`worker::WorkerBackend`] (the daemon's), each run is a worker process whose
//! CUDA context ends with it: the daemon itself never creates one.
//!
//! At most one probe runs per poll, which keeps a poll short against the runner's deadline.
//!
//! [`Source`]: dgx_pixels_metrics::Source

#![deny(missing_docs)]

mod backend;
mod outcome;
mod schedule;
mod scheduler;
mod series;
pub mod settings;
mod state;
mod view;
pub mod worker;

pub use backend::{Backend, CudaBackend, GpuId, Occupancy, UtilizationView};
pub use outcome::{GpuState, Outcome, NCCL_OUTCOMES, OUTCOMES, STATES, STORAGE_OUTCOMES};
pub use schedule::{
    storage_backoff, ScheduleSettings, DEFAULT_BUSY_THRESHOLD, DEFAULT_DUTY_CYCLE,
    DEFAULT_MEMORY_LIMIT_BYTES, DEFAULT_SETTLE, DURATION_BUCKETS, MIN_DUTY_CYCLE, NODE_SHARE,
    NO_READING_RETRY, SKIP_RETRY, STORAGE_BACKOFF_BASE, STORAGE_BACKOFF_MAX, UNAVAILABLE_RETRY,
};
pub use scheduler::ProbeSource;
pub use series::{expected_nccl_bus_bandwidth, NCCL_BASEBOARD_GPUS};
pub use view::ViewUtilization;
