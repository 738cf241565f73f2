//! The report types: what the analyses produce, serialized as the JSON report of
//! `trace analyze` and read by the renderers.
//!
//! Separate from the code that fills them: they are the crate's output format, read by
//! [`crate::compare`] and the `trace` subcommand's reports (dgx-pixels-tools) as much as
//! written here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::ParseStats;

/// HTA's temporal breakdown of one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemporalBreakdown {
    /// Last GPU row end − first GPU row start, all streams (µs).
    pub kernel_time_us: i64,
    /// kernel_time − the union of all GPU rows (µs).
    pub idle_time_us: i64,
    /// The union of computation kernels (µs).
    pub compute_time_us: i64,
    /// kernel_time − compute − idle (µs): communication, memory and sync not hidden by compute.
    pub non_compute_time_us: i64,
    /// idle / kernel_time, percent, 2 decimals.
    pub idle_pct: f64,
    /// compute / kernel_time, percent, 2 decimals.
    pub compute_pct: f64,
    /// non_compute / kernel_time, percent, 2 decimals.
    pub non_compute_pct: f64,
}

/// One exclusive state of HTA's kernel-type breakdown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelTypeTime {
    /// HTA's label: `COMPUTATION`, `COMMUNICATION`, `MEMORY`, or several joined by
    /// ` overlapping ` (e.g. `COMPUTATION overlapping COMMUNICATION`).
    pub kernel_type: String,
    /// Time in that state (µs).
    pub time_us: i64,
    /// Share of all states, percent, 1 decimal (HTA's rounding); per rank or per job.
    pub percentage: f64,
}

/// Duration statistics of one kernel name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelStat {
    /// Kernel name.
    pub name: String,
    /// Rows.
    pub count: u64,
    /// Σ duration (µs).
    pub sum_us: i64,
    /// Mean duration (µs).
    pub mean_us: f64,
    /// Smallest (µs).
    pub min_us: i64,
    /// Largest (µs).
    pub max_us: i64,
    /// Sample standard deviation (µs; 0 for one row).
    pub std_us: f64,
}

/// The kernels of one class, as HTA's kernel breakdown lists them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassKernels {
    /// Σ duration of every row of the class (µs).
    pub total_us: i64,
    /// Rows of the class.
    pub count: u64,
    /// Distinct names.
    pub distinct: u64,
    /// The names HTA shows on their own (top by Σ duration, at most 10, within the 80% of
    /// cumulative time), with true statistics.
    pub top: Vec<KernelStat>,
    /// Σ duration of the rest (HTA's "others"), µs.
    pub others_us: i64,
}

/// Idle time of one stream, by cause (HTA's idle-time breakdown).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamIdle {
    /// Stream.
    pub stream: i64,
    /// Gaps where the CPU launched the kernel after the previous one ended (µs).
    pub host_wait_us: i64,
    /// Gaps below 30 µs with the kernel already launched (µs).
    pub kernel_wait_us: i64,
    /// The other gaps (µs).
    pub other_us: i64,
    /// host_wait / all (2 decimals, HTA's rounding).
    pub host_wait_ratio: f64,
    /// kernel_wait / all.
    pub kernel_wait_ratio: f64,
    /// other / all.
    pub other_ratio: f64,
    /// Which categories HTA lists for the stream (it lists a category when a row falls in it,
    /// even with zero time).
    pub categories: Vec<String>,
}

/// Summary of one distribution (µs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    /// Σ (µs).
    pub sum_us: i64,
    /// Mean (µs).
    pub mean_us: f64,
    /// Median (µs).
    pub p50_us: f64,
    /// 95th percentile (µs).
    pub p95_us: f64,
    /// Largest (µs).
    pub max_us: i64,
}

/// HTA's CUDA kernel launch statistics, summarized.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LaunchStats {
    /// Launch/GPU pairs joined by correlation.
    pub count: u64,
    /// CPU duration of the launch call.
    pub cpu_duration: Dist,
    /// GPU duration of the launched row.
    pub gpu_duration: Dist,
    /// max(0, GPU start − launch end).
    pub launch_delay: Dist,
    /// Launch calls longer than 50 µs.
    pub runtime_outliers: u64,
    /// Launch delays above 100 µs.
    pub launch_delay_outliers: u64,
    /// GPU rows shorter than their launch call (launch-bound work).
    pub gpu_shorter_than_cpu: u64,
}

/// Communication of one collective type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectiveStats {
    /// all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, send_recv, other.
    pub collective: String,
    /// Kernels.
    pub count: u64,
    /// Kernels per profiler step.
    pub per_step: f64,
    /// Σ kernel duration (µs, ns precision).
    pub time_us: f64,
    /// Kernels whose args give the message size.
    pub sized: u64,
    /// Σ nccl-tests size S over sized kernels (bytes; all-gather and reduce-scatter count the
    /// whole array: per-rank elements × dtype size × group size).
    pub bytes: f64,
    /// Σ S / Σ time over sized kernels (GB/s, 1e9 bytes).
    pub algbw_gbps: f64,
    /// Σ S·factor / Σ time over sized kernels (GB/s): the nccl-tests bus bandwidth.
    pub busbw_gbps: f64,
    /// Σ kernel duration of the sized kernels (µs, ns precision): the time `algbw_gbps` and
    /// `busbw_gbps` divide by.
    pub sized_time_us: f64,
    /// Σ S·factor over sized kernels (bytes): `busbw_gbps` = bus_bytes / sized_time.
    pub bus_bytes: f64,
    /// Largest group size seen.
    pub group_size: u64,
}

/// Memory copies and sets of one kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemcpyStats {
    /// The name up to the direction (`Memcpy HtoD`, `Memcpy DtoD`, `Memset`).
    pub kind: String,
    /// Rows.
    pub count: u64,
    /// Σ bytes.
    pub bytes: u64,
    /// Σ duration (µs).
    pub time_us: f64,
    /// bytes / time (GB/s).
    pub bandwidth_gbps: f64,
}

/// One training phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseStats {
    /// forward, backward, optimizer.
    pub phase: String,
    /// Annotations.
    pub count: u64,
    /// Union of the phase's annotations within complete steps (CPU time, µs).
    pub cpu_time_us: f64,
    /// cpu_time / Σ step time.
    pub share_of_step: f64,
    /// Σ duration of GPU rows launched inside the phase (µs).
    pub gpu_time_us: f64,
}

/// One FSDP operation kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FsdpStats {
    /// all_gather, reduce_scatter, reshard, copy_in, copy_out, other.
    pub op: String,
    /// Annotations.
    pub count: u64,
    /// Union of the annotations within complete steps (CPU time, µs).
    pub cpu_time_us: f64,
    /// cpu_time / Σ step time.
    pub share_of_step: f64,
    /// Σ duration of the communication kernels launched inside them (µs).
    pub comm_gpu_time_us: f64,
}

/// Profiler steps of one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Steps {
    /// Step numbers analysed (complete steps: the last is dropped when HTA's filter applies).
    pub numbers: Vec<u64>,
    /// Their durations (µs, ns precision), same order.
    pub durations_us: Vec<f64>,
    /// Mean (µs).
    pub mean_us: f64,
    /// Standard deviation (µs).
    pub std_us: f64,
    /// Coefficient of variation (std / mean).
    pub cv: f64,
}

/// Throughput of one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Steps per second (1 / mean step time).
    pub steps_per_s: f64,
    /// Items per second on this rank, when the items per step were given.
    pub items_per_s: Option<f64>,
}

/// Communication of one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Communication {
    /// Per collective type, only types seen.
    pub collectives: Vec<CollectiveStats>,
    /// Union of communication kernels (µs, HTA's rounding).
    pub time_us: i64,
    /// Communication not overlapped by computation (µs): the "bubble" where the GPU waits on
    /// the network.
    pub exposed_time_us: i64,
    /// Communication overlapped by computation (µs): |comm ∩ comp|, so time_us =
    /// exposed_time_us + overlapped_time_us.
    pub overlapped_time_us: i64,
    /// Σ bytes over all collectives.
    pub bytes: f64,
    /// Kernels without size args (older PyTorch or coalesced kernels).
    pub unsized_kernels: u64,
}

/// Everything about one rank.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankReport {
    /// Rank (`distributedInfo.rank`, else from the file name, else the input order).
    pub rank: i64,
    /// The trace file.
    pub file: String,
    /// GPU name, from `deviceProperties`.
    pub device: Option<String>,
    /// The training process's host pid, from its kernel launches (absent without launches).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_id: Option<u32>,
    /// What the parser saw.
    pub parse: ParseStats,
    /// Whether HTA's step filter applied (≥ 2 distinct profiler steps over the job).
    pub steps_filtered: bool,
    /// GPU rows analysed.
    pub gpu_rows: u64,
    /// HTA's temporal breakdown.
    pub temporal_breakdown: TemporalBreakdown,
    /// HTA's communication/computation overlap: |comm ∩ comp| / |comm| (0–1; 0 without
    /// communication).
    pub comm_comp_overlap_ratio: f64,
    /// The same in percent, 2 decimals (HTA's `comp_comm_overlap_pctg`).
    pub comm_comp_overlap_pct: f64,
    /// HTA's kernel-type breakdown (computation, communication, memory and their overlaps).
    pub kernel_type_breakdown: Vec<KernelTypeTime>,
    /// Union of memory rows (memcpy/memset), µs (HTA leaves it out by default).
    pub memory_time_us: i64,
    /// HTA's kernel breakdown: top kernels per class.
    pub kernels: BTreeMap<String, ClassKernels>,
    /// HTA's idle-time breakdown per stream.
    pub idle_time_breakdown: Vec<StreamIdle>,
    /// HTA's CUDA launch statistics.
    pub kernel_launch: LaunchStats,
    /// Profiler steps.
    pub steps: Steps,
    /// Throughput.
    pub throughput: Throughput,
    /// Communication volume, time and bandwidth.
    pub communication: Communication,
    /// Memory copies.
    pub memcpy: Vec<MemcpyStats>,
    /// Training phases.
    pub phases: Vec<PhaseStats>,
    /// FSDP operations.
    pub fsdp: Vec<FsdpStats>,
    /// GPU utilization: union of GPU rows / kernel time (0–1).
    pub gpu_busy_ratio: f64,
}

/// Across ranks.
#[derive(Debug, Clone, Default, Serialize)]
pub struct JobReport {
    /// Ranks analysed.
    pub ranks: Vec<i64>,
    /// HTA's kernel-type breakdown summed over ranks, percentages of the sum (1 decimal).
    pub kernel_type_breakdown: Vec<KernelTypeTime>,
    /// Mean step time over ranks and steps (µs).
    pub step_time_mean_us: f64,
    /// Per step, the standard deviation of its duration across ranks, averaged over steps (µs).
    pub step_time_std_across_ranks_us: f64,
    /// Per step, (slowest − fastest rank), averaged over steps (µs).
    pub step_time_spread_us: f64,
    /// Mean over ranks of steps per second.
    pub steps_per_s: f64,
    /// Items per second for the whole job (Σ over ranks), when the items per step were given.
    pub items_per_s: Option<f64>,
    /// What the items are.
    pub items_name: Option<String>,
    /// Per rank: (its step time − the median rank's) / median, averaged over steps.
    pub straggler_score: BTreeMap<i64, f64>,
    /// Collectives matched across ranks (the k-th communication kernel of each rank).
    pub matched_collectives: u64,
    /// Per rank: how often it started a matched collective last.
    pub late_arrivals: BTreeMap<i64, u64>,
    /// Per rank: Σ over matched collectives of (last rank's start − its start): time its
    /// collective kernels spent waiting for the slowest rank (µs).
    pub sync_wait_us: BTreeMap<i64, f64>,
    /// Ranks that started last in at least half of the matched collectives.
    pub stragglers: Vec<i64>,
    /// Mean comm/comp overlap over ranks.
    pub comm_comp_overlap_ratio: f64,
    /// Σ bytes over all ranks and collectives.
    pub comm_bytes: f64,
    /// Bus bandwidth of the job: Σ S·factor / Σ time over all ranks' sized kernels (GB/s).
    pub busbw_gbps: f64,
}

/// The full report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The tool.
    pub tool: &'static str,
    /// Its version.
    pub version: &'static str,
    /// One entry per rank, by rank.
    pub ranks: Vec<RankReport>,
    /// Across ranks.
    pub job: JobReport,
    /// Memory snapshots given with the traces.
    pub memory_snapshots: Vec<crate::memory::SnapshotReport>,
}
