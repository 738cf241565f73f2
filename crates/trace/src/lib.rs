//! PyTorch profiler traces and CUDA memory snapshots, turned into training metrics.
//!
//! Why this crate exists: the numbers ML engineers ask of a training run (where did the step
//! time go, how much communication hides behind compute, how fast do collectives move bytes,
//! which rank is late) are in the Kineto traces PyTorch's profiler writes, one per rank. The
//! reference tool, Meta's HolisticTraceAnalysis (HTA), loads every event into pandas: seconds
//! and hundreds of MB for a 50 MB trace. This crate streams the same files, keeps only what
//! the analyses need, gives HTA's numbers where HTA defines them (same rounding, same filters,
//! same quirks) and goes beyond them where it does not (communication volume and bandwidth,
//! phases, FSDP, steps and stragglers, memory snapshots).
//!
//! How the parts connect:
//! - [`parse`]: the streaming parser. [`parse_file`] turns a `.json` or `.json.gz` trace into a
//!   [`RankTrace`] of compact records ([`model`]); it never holds the document or the CPU
//!   events in memory, and every error names the file and the byte offset.
//! - [`classify`]: names to classes (HTA's kernel classes, collectives, dtypes, phases, FSDP).
//! - [`hta`]: HTA's interval arithmetic, reproduced exactly.
//! - [`analysis`]: per-rank and per-job analyses into a [`Report`] (serde-serializable: the
//!   JSON report of `trace analyze`).
//! - [`memory`]: memory snapshots (pickles, read by [`pickle`]) into [`memory::SnapshotReport`].
//! - [`load`]: the traces and snapshots under some paths, parsed in parallel and analysed
//!   as one job (what `trace analyze` reads).
//! - [`compare`]: two runs side by side, as data.
//!
//! What is not here, so that the engine carries no dependency it does not need (checked by
//! `scripts/check-crate-deps.sh`): the `trace` subcommand with its reports, chart and progress
//! bar (`dgx-pixels-tools`), the daemon's `trace` source (`dgx-pixels-trace-source`) and the
//! ground-truth trace generator (`dgx-pixels-trace-synth`).
//!
//! ```
//! use dgx_pixels_trace::{analyze, parse_bytes, AnalyzeOptions, ParseOptions};
//! use std::path::Path;
//!
//! let json = r#"{"traceEvents":[
//!   {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":0.5,"dur":3.0,"args":{"correlation":1}},
//!   {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":10.2,"dur":20.0,"args":{"stream":7,"correlation":1}},
//!   {"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":20,"ts":20.5,"dur":20.0,
//!    "args":{"stream":20,"correlation":2,"Collective name":"allreduce","In msg nelems":1048576,
//!            "Out msg nelems":1048576,"Group size":8,"dtype":"Float"}},
//!   {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":4.0,"dur":2.0,"args":{"correlation":2}}
//! ]}"#;
//! let trace = parse_bytes(json.as_bytes(), Path::new("rank0.json"), &ParseOptions::default())?;
//! let report = analyze(&[trace], &AnalyzeOptions::default())?;
//! let r = &report.ranks[0];
//! assert_eq!(r.temporal_breakdown.kernel_time_us, 29); // 11 .. 40 after HTA's rounding
//! assert_eq!(r.temporal_breakdown.compute_time_us, 19); // 11 .. 30
//! assert_eq!(r.communication.collectives[0].bytes, 4.0 * 1048576.0);
//! # Ok::<(), dgx_pixels_trace::TraceError>(())
//! ```
#![deny(missing_docs)]

pub mod analysis;
pub mod classify;
pub mod compare;
mod error;
pub mod hta;
pub mod load;
pub mod memory;
pub mod model;
pub mod open;
pub mod parse;
pub mod pickle;

pub use analysis::{analyze, AnalyzeOptions, RankReport, Report};
pub use error::TraceError;
pub use model::RankTrace;
pub use parse::{
    parse_bytes, parse_file, parse_read, ParseOptions, DEFAULT_MAX_VALUE_BYTES, MAX_NELEMS,
};
