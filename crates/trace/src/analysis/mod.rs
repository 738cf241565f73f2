//! The analyses: per rank, then across the ranks of a job.
//!
//! Order of work: HTA's step filter decides which rows count ([`kept_rows`]); HTA-defined
//! numbers are computed on whole-µs rows with HTA's own arithmetic ([`crate::hta`]); the
//! numbers beyond HTA use the same kept rows with the trace's nanosecond precision.
//!
//! The parts (private modules; everything public is re-exported here, so paths stay
//! `crate::analysis::*`):
//! - `rows`: HTA's step filter and the kept GPU rows every analysis starts from.
//! - `report`: the serializable report types (the JSON of `trace analyze`).
//! - `rank`: one rank's HTA breakdowns (temporal, overlap, kernel types, kernels, idle time,
//!   launches) and [`analyze_rank`], which assembles a [`RankReport`].
//! - `steps`: profiler steps, training phases and FSDP operations.
//! - `comm`: communication volume and bandwidth, and memory copies.
//! - `job`: [`analyze`], the job-wide numbers across ranks (steps, stragglers, matched
//!   collectives) and rank numbering.

mod comm;
mod job;
mod rank;
mod report;
mod rows;
mod steps;

pub use comm::collective_size;
pub use job::{analyze, analyze_ranks, job_report, rank_from_name, RankAnalysis};
pub use rank::analyze_rank;
pub use report::{
    ClassKernels, CollectiveStats, Communication, Dist, FsdpStats, JobReport, KernelStat,
    KernelTypeTime, LaunchStats, MemcpyStats, PhaseStats, RankReport, Report, Steps, StreamIdle,
    TemporalBreakdown, Throughput,
};
pub use rows::{kept_rows, Kept, Row};

/// HTA's default gap (µs) under which an idle gap between kernels counts as kernel wait.
pub const KERNEL_WAIT_US: i64 = 30;
/// HTA's default outlier cut-off for a launch call's CPU duration (µs).
pub const RUNTIME_CUTOFF_US: i64 = 50;
/// HTA's default outlier cut-off for a launch delay (µs).
pub const LAUNCH_DELAY_CUTOFF_US: i64 = 100;
/// Kernels per class in HTA's kernel breakdown before the rest become "others".
pub const TOP_KERNELS: usize = 10;

/// Options of an analysis.
#[derive(Debug, Clone, Default)]
pub struct AnalyzeOptions {
    /// Work items (tokens, images, samples) per step and rank, for throughput.
    pub items_per_step: Option<f64>,
    /// What the items are called in reports (e.g. "tokens").
    pub items_name: Option<String>,
}
