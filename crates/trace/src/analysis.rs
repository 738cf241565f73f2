//! The analyses: per rank, then across the ranks of a job.
//!
//! Order of work: HTA's step filter decides which rows count ([`kept_rows`]); HTA-defined
//! numbers are computed on whole-µs rows with HTA's own arithmetic ([`crate::hta`]); the
//! numbers beyond HTA use the same kept rows with the trace's nanosecond precision.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::classify::{dtype_size, fsdp_op, is_hta_launch, phase_of, profiler_step};
use crate::classify::{Collective, FsdpOp, KernelClass, Phase};
use crate::hta::{self, merge, py_round, std_dev, sweep, total, Span};
use crate::model::{GpuKind, ParseStats, RankTrace};

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

/// A kept GPU row in whole µs (HTA's rounding applied).
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// Rounded start.
    pub ts: i64,
    /// Rounded end.
    pub end: i64,
    /// Raw start (µs, ns precision).
    pub raw_ts: f64,
    /// Raw end.
    pub raw_end: f64,
    /// Stream.
    pub stream: i64,
    /// Correlation id.
    pub correlation: i64,
    /// Name index.
    pub name: u32,
    /// Aux index + 1.
    pub aux: u32,
    /// Kind.
    pub kind: GpuKind,
    /// HTA class.
    pub class: KernelClass,
}

/// The rows of a rank that HTA keeps, and what the filter decided.
#[derive(Debug, Clone)]
pub struct Kept {
    /// Kept GPU rows, in file order.
    pub rows: Vec<Row>,
    /// Correlation → (rounded ts, rounded end, name, stream is −1) of kept CPU rows.
    pub cpu: HashMap<i64, (i64, i64, u32, bool)>,
    /// Correlation → rounded ts of the CPU row HTA links to a GPU row (before filtering).
    pub link_ts: HashMap<i64, i64>,
    /// Rounded start of the last profiler step, when the step filter applied.
    pub last_step_start: Option<i64>,
    /// HTA's "index 0" row start, when it survives the filter.
    pub index0_ts: Option<i64>,
}

/// HTA's step filter (`_filter_irrelevant_gpu_kernels`): with two or more distinct
/// `ProfilerStep#N` names over the job, keep CPU rows starting before the last step's start
/// and GPU rows whose correlation matches a kept CPU row.
pub fn kept_rows(t: &RankTrace, filter_steps: bool) -> Kept {
    let last_step_start = if filter_steps {
        let starts = t
            .annotations
            .iter()
            .filter(|a| profiler_step(t.name(a.name)).is_some())
            .map(|a| t.rounded(a.ts, a.end).0);
        // No step on this rank: HTA falls back to the earliest CPU row, keeping nothing.
        Some(starts.max().unwrap_or(i64::MIN))
    } else {
        None
    };
    let keep_cpu = |ts: i64| last_step_start.is_none_or(|l| ts < l);
    let mut cpu = HashMap::new();
    let mut link_ts = HashMap::new();
    for c in &t.cpu_corr {
        let (ts, end) = t.rounded(c.ts, c.end);
        link_ts.entry(c.correlation).or_insert(ts);
        if keep_cpu(ts) {
            cpu.entry(c.correlation)
                .or_insert((ts, end, c.name, c.no_stream));
        }
    }
    let nocorr_kept = t
        .cpu_nocorr_min_ts
        .is_some_and(|m| keep_cpu(t.rounded(m, m).0));
    let mut rows = Vec::new();
    for g in &t.gpu {
        let (ts, end) = t.rounded(g.ts, g.end);
        let keep = if last_step_start.is_none() {
            true
        } else if g.filter_gpu {
            if g.correlation == -1 {
                nocorr_kept
            } else {
                cpu.contains_key(&g.correlation)
            }
        } else {
            keep_cpu(ts)
        };
        if keep {
            rows.push(Row {
                ts,
                end,
                raw_ts: g.ts,
                raw_end: g.end,
                stream: g.stream,
                correlation: g.correlation,
                name: g.name,
                aux: g.aux,
                kind: g.kind,
                class: g.class,
            });
        }
    }
    let index0_ts = t.first_row.and_then(|f| {
        let ts = t.rounded(f.ts, f.ts).0;
        let kept = match last_step_start {
            None => true,
            Some(_) if f.filter_gpu => {
                if f.correlation == -1 {
                    nocorr_kept
                } else {
                    cpu.contains_key(&f.correlation)
                }
            }
            Some(_) => keep_cpu(ts),
        };
        kept.then_some(ts)
    });
    Kept {
        rows,
        cpu,
        link_ts,
        last_step_start,
        index0_ts,
    }
}

/// HTA's temporal breakdown of one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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

fn dist(mut v: Vec<i64>) -> Dist {
    if v.is_empty() {
        return Dist::default();
    }
    v.sort_unstable();
    let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
    let sum: i64 = v.iter().sum();
    Dist {
        sum_us: sum,
        mean_us: sum as f64 / v.len() as f64,
        p50_us: hta::quantile_sorted(&f, 0.5),
        p95_us: hta::quantile_sorted(&f, 0.95),
        max_us: v.last().copied().unwrap_or(0),
    }
}

/// HTA's CUDA kernel launch statistics, summarized.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
    /// Largest group size seen.
    pub group_size: u64,
}

/// Memory copies and sets of one kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Throughput {
    /// Steps per second (1 / mean step time).
    pub steps_per_s: f64,
    /// Items per second on this rank, when the items per step were given.
    pub items_per_s: Option<f64>,
}

/// Communication of one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Communication {
    /// Per collective type, only types seen.
    pub collectives: Vec<CollectiveStats>,
    /// Union of communication kernels (µs, HTA's rounding).
    pub time_us: i64,
    /// Communication not overlapped by computation (µs): the "bubble" where the GPU waits on
    /// the network.
    pub exposed_time_us: i64,
    /// Σ bytes over all collectives.
    pub bytes: f64,
    /// Kernels without size args (older PyTorch or coalesced kernels).
    pub unsized_kernels: u64,
}

/// Everything about one rank.
#[derive(Debug, Clone, Serialize)]
pub struct RankReport {
    /// Rank (`distributedInfo.rank`, else from the file name, else the input order).
    pub rank: i64,
    /// The trace file.
    pub file: String,
    /// GPU name, from `deviceProperties`.
    pub device: Option<String>,
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

fn label(state: i64, classes: &[&str]) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for (i, c) in classes.iter().enumerate() {
        if state & (1 << i) != 0 {
            parts.push(c);
        }
    }
    parts.join(" overlapping ")
}

fn spans(rows: &[Row], f: impl Fn(&Row) -> bool) -> Vec<Span> {
    rows.iter()
        .filter(|r| f(r))
        .map(|r| (r.ts, r.end))
        .collect()
}

fn raw_union(mut v: Vec<(f64, f64)>) -> f64 {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut sum = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for (s, e) in v {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                sum += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = cur {
        sum += ce - cs;
    }
    sum
}

/// Overlapping intervals merged, by start (for [`within`]).
fn merged_raw(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Whether `t` falls in one of `iv` (merged and sorted by [`merged_raw`]): a binary search.
fn within(iv: &[(f64, f64)], t: f64) -> bool {
    let i = iv.partition_point(|&(s, _)| s <= t);
    i > 0 && t < iv[i - 1].1
}

/// Analyses one rank. `filter_steps` is HTA's job-wide decision (≥ 2 step names over all ranks).
pub fn analyze_rank(
    t: &RankTrace,
    rank: i64,
    filter_steps: bool,
    opts: &AnalyzeOptions,
) -> RankReport {
    let kept = kept_rows(t, filter_steps);
    let rows = &kept.rows;

    // Temporal breakdown.
    let all = merge(spans(rows, |_| true));
    let comp = merge(spans(rows, |r| r.class == KernelClass::Computation));
    let comm = merge(spans(rows, |r| r.class == KernelClass::Communication));
    let mem = merge(spans(rows, |r| r.class == KernelClass::Memory));
    let kernel_time = match (all.first(), all.last()) {
        (Some(f), Some(l)) => l.1 - f.0,
        _ => 0,
    };
    let idle = kernel_time - total(&all);
    let compute = total(&comp);
    let non_compute = kernel_time - compute - idle;
    let pct = |x: i64| {
        if kernel_time == 0 {
            0.0
        } else {
            py_round(100.0 * (x as f64 / kernel_time as f64), 2)
        }
    };
    let temporal = TemporalBreakdown {
        kernel_time_us: kernel_time,
        idle_time_us: idle,
        compute_time_us: compute,
        non_compute_time_us: non_compute,
        idle_pct: pct(idle),
        compute_pct: pct(compute),
        non_compute_pct: pct(non_compute),
    };

    // Overlap: comm ±1, comp ±2, state 3.
    let states = sweep(&[&comm, &comp]);
    let both: i64 = states.iter().filter(|s| s.0 == 3).map(|s| s.1).sum();
    let comm_total = total(&comm);
    let overlap = if comm_total == 0 {
        0.0
    } else {
        both as f64 / comm_total as f64
    };

    // Kernel-type breakdown (HTA's default includes memory): bits 1, 2, 4.
    let kt = sweep(&[&comp, &comm, &mem]);
    let kt_sum: i64 = kt.iter().map(|s| s.1).sum();
    let mut kernel_type_breakdown: Vec<KernelTypeTime> = kt
        .iter()
        .map(|&(s, d)| KernelTypeTime {
            kernel_type: label(s, &["COMPUTATION", "COMMUNICATION", "MEMORY"]),
            time_us: d,
            percentage: if kt_sum == 0 {
                0.0
            } else {
                py_round(100.0 * d as f64 / kt_sum as f64, 1)
            },
        })
        .collect();
    kernel_type_breakdown.sort_by_key(|k| std::cmp::Reverse(k.time_us));

    // Kernel breakdown per class.
    let mut kernels = BTreeMap::new();
    for (class, key) in [
        (KernelClass::Computation, "computation"),
        (KernelClass::Communication, "communication"),
        (KernelClass::Memory, "memory"),
    ] {
        kernels.insert(key.to_string(), class_kernels(t, rows, class));
    }

    let idle_time_breakdown = idle_breakdown(rows, &kept);
    let kernel_launch = launch_stats(t, rows, &kept);
    let steps = steps(t, &kept);
    let step_sum: f64 = steps.durations_us.iter().sum();
    let throughput = Throughput {
        steps_per_s: if steps.mean_us > 0.0 {
            1e6 / steps.mean_us
        } else {
            0.0
        },
        items_per_s: opts
            .items_per_step
            .filter(|_| steps.mean_us > 0.0)
            .map(|n| n * 1e6 / steps.mean_us),
    };
    let comm_exposed: i64 = states.iter().filter(|s| s.0 == 1).map(|s| s.1).sum();
    let communication = communication(t, rows, steps.numbers.len(), comm_total, comm_exposed);
    let memcpy = memcpy_stats(t, rows);
    let step_spans = step_intervals(t, &kept);
    let (phases, fsdp) = phases_fsdp(t, rows, &kept, &step_spans, step_sum);
    RankReport {
        rank,
        file: t.path.display().to_string(),
        device: t.device_name.clone(),
        parse: t.stats.clone(),
        steps_filtered: filter_steps,
        gpu_rows: rows.len() as u64,
        temporal_breakdown: temporal,
        comm_comp_overlap_ratio: overlap,
        comm_comp_overlap_pct: py_round(100.0 * overlap, 2),
        kernel_type_breakdown,
        memory_time_us: total(&mem),
        kernels,
        idle_time_breakdown,
        kernel_launch,
        steps,
        throughput,
        communication,
        memcpy,
        phases,
        fsdp,
        gpu_busy_ratio: if kernel_time > 0 {
            total(&all) as f64 / kernel_time as f64
        } else {
            0.0
        },
    }
}

fn class_kernels(t: &RankTrace, rows: &[Row], class: KernelClass) -> ClassKernels {
    let mut by_name: HashMap<u32, Vec<i64>> = HashMap::new();
    for r in rows.iter().filter(|r| r.class == class) {
        by_name.entry(r.name).or_default().push(r.end - r.ts);
    }
    let mut stats: Vec<KernelStat> = by_name
        .into_iter()
        .map(|(name, d)| {
            let f: Vec<f64> = d.iter().map(|&x| x as f64).collect();
            let sum: i64 = d.iter().sum();
            KernelStat {
                name: t.name(name).to_string(),
                count: d.len() as u64,
                sum_us: sum,
                mean_us: sum as f64 / d.len() as f64,
                min_us: d.iter().copied().min().unwrap_or(0),
                max_us: d.iter().copied().max().unwrap_or(0),
                std_us: std_dev(&f),
            }
        })
        .collect();
    // HTA: groupby name (sorted by name), then a sort by sum, descending.
    stats.sort_by(|a, b| b.sum_us.cmp(&a.sum_us).then_with(|| a.name.cmp(&b.name)));
    let total_us: i64 = stats.iter().map(|s| s.sum_us).sum();
    let count: u64 = stats.iter().map(|s| s.count).sum();
    let distinct = stats.len() as u64;
    let mut top = stats;
    let mut others_us = 0;
    if top.len() > TOP_KERNELS {
        let mut cum = 0i64;
        let cums: Vec<f64> = top
            .iter()
            .map(|s| {
                cum += s.sum_us;
                cum as f64
            })
            .collect();
        let mut sorted = cums.clone();
        sorted.sort_by(f64::total_cmp);
        let q = hta::quantile_sorted(&sorted, 0.8);
        let mut keep = Vec::new();
        for (i, s) in top.into_iter().enumerate() {
            if cums[i] > q || i >= TOP_KERNELS {
                others_us += s.sum_us;
            } else {
                keep.push(s);
            }
        }
        top = keep;
    }
    ClassKernels {
        total_us,
        count,
        distinct,
        top,
        others_us,
    }
}

fn idle_breakdown(rows: &[Row], kept: &Kept) -> Vec<StreamIdle> {
    let mut streams: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.kind.in_idle_breakdown()) {
        streams.entry(r.stream).or_default().push(r);
    }
    let mut out = Vec::new();
    for (stream, mut rs) in streams {
        rs.sort_by_key(|r| r.ts);
        let (mut host, mut kwait, mut other) = (0i64, 0i64, 0i64);
        let mut cats: HashSet<&'static str> = HashSet::new();
        let mut prev_end: Option<i64> = None;
        for r in rs {
            // HTA's link: the correlated CPU row's start; "index 0" when the correlation has
            // no CPU row; nothing when the row has no correlation.
            let runtime_ts = if r.correlation == -1 {
                None
            } else {
                kept.link_ts
                    .get(&r.correlation)
                    .copied()
                    .filter(|_| kept.cpu.contains_key(&r.correlation))
                    .or_else(|| {
                        if kept.link_ts.contains_key(&r.correlation) {
                            None
                        } else {
                            kept.index0_ts
                        }
                    })
            };
            match prev_end {
                None => {
                    cats.insert("other");
                }
                Some(pe) => {
                    let gap = r.ts - pe;
                    if runtime_ts.is_some_and(|rt| rt > pe) {
                        host += gap;
                        cats.insert("host_wait");
                    } else if gap < KERNEL_WAIT_US {
                        kwait += gap;
                        cats.insert("kernel_wait");
                    } else {
                        other += gap;
                        cats.insert("other");
                    }
                }
            }
            prev_end = Some(r.end);
        }
        let all = host + kwait + other;
        let ratio = |x: i64| {
            if all == 0 {
                f64::NAN
            } else {
                py_round(x as f64 / all as f64, 2)
            }
        };
        let mut categories: Vec<String> = cats.into_iter().map(str::to_string).collect();
        categories.sort();
        out.push(StreamIdle {
            stream,
            host_wait_us: host,
            kernel_wait_us: kwait,
            other_us: other,
            host_wait_ratio: ratio(host),
            kernel_wait_ratio: ratio(kwait),
            other_ratio: ratio(other),
            categories,
        });
    }
    out
}

fn launch_stats(t: &RankTrace, rows: &[Row], kept: &Kept) -> LaunchStats {
    let mut gpu_by_corr: HashMap<i64, Vec<&Row>> = HashMap::new();
    for r in rows {
        gpu_by_corr.entry(r.correlation).or_default().push(r);
    }
    let (mut cpu_d, mut gpu_d, mut delay) = (Vec::new(), Vec::new(), Vec::new());
    let mut s = LaunchStats::default();
    for (corr, &(ts, end, name, no_stream)) in &kept.cpu {
        if !no_stream || !is_hta_launch(t.name(name)) {
            continue;
        }
        for g in gpu_by_corr.get(corr).into_iter().flatten() {
            let c = end - ts;
            let gd = g.end - g.ts;
            let d = (g.ts - ts - c).max(0);
            s.count += 1;
            s.runtime_outliers += u64::from(c > RUNTIME_CUTOFF_US);
            s.launch_delay_outliers += u64::from(d > LAUNCH_DELAY_CUTOFF_US);
            s.gpu_shorter_than_cpu += u64::from(gd < c);
            cpu_d.push(c);
            gpu_d.push(gd);
            delay.push(d);
        }
    }
    s.cpu_duration = dist(cpu_d);
    s.gpu_duration = dist(gpu_d);
    s.launch_delay = dist(delay);
    s
}

/// Complete steps of a rank: (number, raw start, raw end), by start.
fn step_intervals(t: &RankTrace, kept: &Kept) -> Vec<(u64, f64, f64)> {
    let mut v: Vec<(u64, f64, f64)> = t
        .annotations
        .iter()
        .filter_map(|a| profiler_step(t.name(a.name)).map(|n| (n, a.ts, a.end)))
        .filter(|&(_, ts, end)| {
            kept.last_step_start
                .is_none_or(|l| t.rounded(ts, end).0 < l)
        })
        .collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    v
}

fn steps(t: &RankTrace, kept: &Kept) -> Steps {
    let v = step_intervals(t, kept);
    let d: Vec<f64> = v.iter().map(|s| s.2 - s.1).collect();
    let mean = if d.is_empty() {
        0.0
    } else {
        d.iter().sum::<f64>() / d.len() as f64
    };
    let std = std_dev(&d);
    Steps {
        numbers: v.iter().map(|s| s.0).collect(),
        durations_us: d,
        mean_us: mean,
        std_us: std,
        cv: if mean > 0.0 { std / mean } else { 0.0 },
    }
}

/// nccl-tests size S of one kernel (bytes) and its group size.
pub fn collective_size(
    coll: Collective,
    aux: &crate::model::Aux,
    world: Option<u64>,
) -> Option<(f64, u64)> {
    let dts = dtype_size(aux.dtype.as_deref()?)? as u128;
    let n = aux.group_size.or(world).unwrap_or(1).max(1);
    let (i, o) = (aux.in_nelems, aux.out_nelems);
    let elems: u128 = match coll {
        Collective::AllGather => match (i, o) {
            (Some(i), _) => i as u128 * n as u128,
            (None, Some(o)) => o as u128,
            _ => return None,
        },
        Collective::ReduceScatter => match (o, i) {
            (Some(o), _) => o as u128 * n as u128,
            (None, Some(i)) => i as u128,
            _ => return None,
        },
        _ => i.max(o)? as u128,
    };
    Some(((elems * dts) as f64, n))
}

fn communication(
    t: &RankTrace,
    rows: &[Row],
    steps: usize,
    time_us: i64,
    exposed_time_us: i64,
) -> Communication {
    let mut by: BTreeMap<Collective, (CollectiveStats, f64, f64, f64)> = BTreeMap::new();
    let mut unsized_kernels = 0;
    for r in rows
        .iter()
        .filter(|r| r.class == KernelClass::Communication)
    {
        let aux = r.aux.checked_sub(1).and_then(|i| t.aux.get(i as usize));
        let coll = aux
            .and_then(|a| a.collective.as_deref())
            .map(Collective::from_arg)
            .or_else(|| Collective::from_kernel_name(t.name(r.name)))
            .unwrap_or(Collective::Other);
        let e = by.entry(coll).or_insert_with(|| {
            (
                CollectiveStats {
                    collective: coll.as_str().to_string(),
                    ..CollectiveStats::default()
                },
                0.0,
                0.0,
                0.0,
            )
        });
        let d = (r.raw_end - r.raw_ts).max(0.0);
        e.0.count += 1;
        e.0.time_us += d;
        match aux.and_then(|a| collective_size(coll, a, t.world_size)) {
            Some((bytes, n)) => {
                e.0.sized += 1;
                e.0.bytes += bytes;
                e.0.group_size = e.0.group_size.max(n);
                e.1 += d;
                e.2 += bytes;
                e.3 += bytes * coll.bus_factor(n);
            }
            None => unsized_kernels += 1,
        }
    }
    let mut collectives = Vec::new();
    let mut bytes = 0.0;
    for (_, (mut c, time, b, bus)) in by {
        if time > 0.0 {
            c.algbw_gbps = b / time / 1e3;
            c.busbw_gbps = bus / time / 1e3;
        }
        c.per_step = if steps > 0 {
            c.count as f64 / steps as f64
        } else {
            0.0
        };
        bytes += c.bytes;
        collectives.push(c);
    }
    Communication {
        collectives,
        time_us,
        exposed_time_us,
        bytes,
        unsized_kernels,
    }
}

fn memcpy_stats(t: &RankTrace, rows: &[Row]) -> Vec<MemcpyStats> {
    let mut by: BTreeMap<String, MemcpyStats> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| matches!(r.kind, GpuKind::Memcpy | GpuKind::Memset))
    {
        let name = t.name(r.name);
        let kind = if r.kind == GpuKind::Memset {
            "Memset".to_string()
        } else {
            name.chars().take(11).collect()
        };
        let e = by.entry(kind.clone()).or_insert_with(|| MemcpyStats {
            kind,
            ..MemcpyStats::default()
        });
        e.count += 1;
        e.time_us += (r.raw_end - r.raw_ts).max(0.0);
        if let Some(b) = r
            .aux
            .checked_sub(1)
            .and_then(|i| t.aux.get(i as usize))
            .and_then(|a| a.bytes)
        {
            e.bytes = e.bytes.saturating_add(b);
        }
    }
    by.into_values()
        .map(|mut m| {
            if m.time_us > 0.0 {
                m.bandwidth_gbps = m.bytes as f64 / m.time_us / 1e3;
            }
            m
        })
        .collect()
}

fn phases_fsdp(
    t: &RankTrace,
    rows: &[Row],
    kept: &Kept,
    steps: &[(u64, f64, f64)],
    step_sum: f64,
) -> (Vec<PhaseStats>, Vec<FsdpStats>) {
    let step_iv = merged_raw(steps.iter().map(|&(_, s, e)| (s, e)).collect());
    let in_step = |ts: f64| within(&step_iv, ts);
    let mut phase_iv: HashMap<Phase, Vec<(f64, f64)>> = HashMap::new();
    let mut fsdp_iv: HashMap<FsdpOp, Vec<(f64, f64)>> = HashMap::new();
    for a in &t.annotations {
        if !in_step(a.ts) {
            continue;
        }
        let name = t.name(a.name);
        if let Some(p) = phase_of(name) {
            phase_iv.entry(p).or_default().push((a.ts, a.end));
        }
        if let Some(op) = fsdp_op(name) {
            fsdp_iv.entry(op).or_default().push((a.ts, a.end));
        }
    }
    let phase_counts: HashMap<Phase, usize> = phase_iv.iter().map(|(k, v)| (*k, v.len())).collect();
    let fsdp_counts: HashMap<FsdpOp, usize> = fsdp_iv.iter().map(|(k, v)| (*k, v.len())).collect();
    for v in phase_iv.values_mut().chain(fsdp_iv.values_mut()) {
        *v = merged_raw(std::mem::take(v));
    }
    // Launch time of each kept GPU row (raw), through its correlated CPU row.
    let launch: HashMap<i64, f64> = t
        .cpu_corr
        .iter()
        .filter(|c| kept.cpu.contains_key(&c.correlation))
        .map(|c| (c.correlation, c.ts))
        .collect();
    let share = |x: f64| if step_sum > 0.0 { x / step_sum } else { 0.0 };
    let mut phases = Vec::new();
    for p in Phase::ALL {
        let Some(iv) = phase_iv.get(&p) else { continue };
        let gpu: f64 = rows
            .iter()
            .filter(|r| launch.get(&r.correlation).is_some_and(|&l| within(iv, l)))
            .map(|r| (r.raw_end - r.raw_ts).max(0.0))
            .fold(0.0, |a, b| a + b);
        let cpu = raw_union(iv.clone());
        phases.push(PhaseStats {
            phase: p.as_str().to_string(),
            count: phase_counts.get(&p).copied().unwrap_or(0) as u64,
            cpu_time_us: cpu,
            share_of_step: share(cpu),
            gpu_time_us: gpu,
        });
    }
    let mut fsdp = Vec::new();
    for op in FsdpOp::ALL {
        let Some(iv) = fsdp_iv.get(&op) else { continue };
        let comm: f64 = rows
            .iter()
            .filter(|r| r.class == KernelClass::Communication)
            .filter(|r| launch.get(&r.correlation).is_some_and(|&l| within(iv, l)))
            .map(|r| (r.raw_end - r.raw_ts).max(0.0))
            .fold(0.0, |a, b| a + b);
        let cpu = raw_union(iv.clone());
        fsdp.push(FsdpStats {
            op: op.as_str().to_string(),
            count: fsdp_counts.get(&op).copied().unwrap_or(0) as u64,
            cpu_time_us: cpu,
            share_of_step: share(cpu),
            comm_gpu_time_us: comm,
        });
    }
    (phases, fsdp)
}

/// Analyses the ranks of one job. `traces` must be distinct ranks; ranks are taken from
/// `distributedInfo`, else from a `rank<N>` in the file name, else from the input order.
pub fn analyze(traces: &[RankTrace], opts: &AnalyzeOptions) -> Result<Report, crate::TraceError> {
    let mut ranks: Vec<i64> = Vec::new();
    for (i, t) in traces.iter().enumerate() {
        let r = t
            .rank
            .or_else(|| rank_from_name(&t.path))
            .unwrap_or(i as i64);
        if ranks.contains(&r) {
            return Err(crate::TraceError::Input(format!(
                "{}: rank {r} appears twice (traces of two jobs, or copies of one file?)",
                t.path.display()
            )));
        }
        ranks.push(r);
    }
    let step_names: HashSet<&String> = traces.iter().flat_map(|t| &t.step_names).collect();
    let filter = step_names.len() >= 2;
    let mut reports: Vec<(RankReport, Vec<(i64, f64)>)> = traces
        .iter()
        .zip(&ranks)
        .map(|(t, &r)| {
            let rep = analyze_rank(t, r, filter, opts);
            let kept = kept_rows(t, filter);
            let starts = comm_starts(&kept.rows);
            (rep, starts)
        })
        .collect();
    reports.sort_by_key(|r| r.0.rank);
    let job = job_report(&reports, opts);
    Ok(Report {
        tool: "dgx-pixels-trace",
        version: env!("CARGO_PKG_VERSION"),
        ranks: reports.into_iter().map(|r| r.0).collect(),
        job,
        memory_snapshots: Vec::new(),
    })
}

/// Communication kernels of a rank in start order: (correlation, raw start).
fn comm_starts(rows: &[Row]) -> Vec<(i64, f64)> {
    let mut v: Vec<(i64, f64)> = rows
        .iter()
        .filter(|r| r.class == KernelClass::Communication && r.kind == GpuKind::Kernel)
        .map(|r| (r.correlation, r.raw_ts))
        .collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    v
}

/// `rank<N>` / `rank_<N>` / `rank-<N>` in a file name.
pub fn rank_from_name(p: &std::path::Path) -> Option<i64> {
    let name = p.file_name()?.to_str()?.to_ascii_lowercase();
    let i = name.find("rank")?;
    let rest = name[i + 4..].trim_start_matches(['_', '-']);
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

fn job_report(reports: &[(RankReport, Vec<(i64, f64)>)], opts: &AnalyzeOptions) -> JobReport {
    let mut job = JobReport {
        ranks: reports.iter().map(|r| r.0.rank).collect(),
        items_name: opts.items_name.clone(),
        ..JobReport::default()
    };
    // Kernel-type breakdown summed over ranks.
    let mut kt: BTreeMap<String, i64> = BTreeMap::new();
    for (r, _) in reports {
        for k in &r.kernel_type_breakdown {
            *kt.entry(k.kernel_type.clone()).or_default() += k.time_us;
        }
    }
    let kt_sum: i64 = kt.values().sum();
    job.kernel_type_breakdown = kt
        .into_iter()
        .map(|(kernel_type, time_us)| KernelTypeTime {
            kernel_type,
            time_us,
            percentage: if kt_sum == 0 {
                0.0
            } else {
                py_round(100.0 * time_us as f64 / kt_sum as f64, 1)
            },
        })
        .collect();
    job.kernel_type_breakdown
        .sort_by_key(|k| std::cmp::Reverse(k.time_us));

    // Steps across ranks, matched by step number.
    let mut per_step: BTreeMap<u64, Vec<(i64, f64)>> = BTreeMap::new();
    let mut all_steps = Vec::new();
    for (r, _) in reports {
        for (n, d) in r.steps.numbers.iter().zip(&r.steps.durations_us) {
            per_step.entry(*n).or_default().push((r.rank, *d));
            all_steps.push(*d);
        }
    }
    if !all_steps.is_empty() {
        job.step_time_mean_us = all_steps.iter().sum::<f64>() / all_steps.len() as f64;
    }
    let mut stds = Vec::new();
    let mut spreads = Vec::new();
    let mut score: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    for v in per_step
        .values()
        .filter(|v| v.len() == reports.len() && v.len() > 1)
    {
        let d: Vec<f64> = v.iter().map(|x| x.1).collect();
        stds.push(std_dev(&d));
        let mut s = d.clone();
        s.sort_by(f64::total_cmp);
        spreads.push(s[s.len() - 1] - s[0]);
        let median = hta::quantile_sorted(&s, 0.5);
        for (rank, dur) in v {
            if median > 0.0 {
                score
                    .entry(*rank)
                    .or_default()
                    .push((dur - median) / median);
            }
        }
    }
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    job.step_time_std_across_ranks_us = mean(&stds);
    job.step_time_spread_us = mean(&spreads);
    job.straggler_score = score.into_iter().map(|(r, v)| (r, mean(&v))).collect();
    let sps: Vec<f64> = reports
        .iter()
        .map(|r| r.0.throughput.steps_per_s)
        .filter(|x| *x > 0.0)
        .collect();
    job.steps_per_s = mean(&sps);
    job.items_per_s = {
        let v: Vec<f64> = reports
            .iter()
            .filter_map(|r| r.0.throughput.items_per_s)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };

    // Collectives matched by order across ranks.
    let n = reports.iter().map(|r| r.1.len()).min().unwrap_or(0);
    if reports.len() > 1 && reports.iter().all(|r| r.1.len() == n) {
        job.matched_collectives = n as u64;
        for (r, _) in reports {
            job.late_arrivals.insert(r.rank, 0);
            job.sync_wait_us.insert(r.rank, 0.0);
        }
        for k in 0..n {
            let starts: Vec<(i64, f64)> = reports.iter().map(|r| (r.0.rank, r.1[k].1)).collect();
            let last = starts.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
            for (rank, s) in &starts {
                if *s == last {
                    *job.late_arrivals.entry(*rank).or_default() += 1;
                }
                *job.sync_wait_us.entry(*rank).or_default() += last - s;
            }
        }
        // A straggler starts last in at least half of the collectives, alone at the top
        // (when every rank ties, nobody is late).
        let max = job.late_arrivals.values().copied().max().unwrap_or(0);
        let all_tie = job.late_arrivals.values().all(|&c| c == max);
        if n > 0 && !all_tie {
            job.stragglers = job
                .late_arrivals
                .iter()
                .filter(|(_, &c)| c == max && c * 2 >= n as u64)
                .map(|(&r, _)| r)
                .collect();
        }
    }
    job.comm_comp_overlap_ratio = mean(
        &reports
            .iter()
            .map(|r| r.0.comm_comp_overlap_ratio)
            .collect::<Vec<_>>(),
    );
    let (mut bytes, mut bus, mut time) = (0.0, 0.0, 0.0);
    for (r, _) in reports {
        for c in &r.communication.collectives {
            bytes += c.bytes;
            if c.busbw_gbps > 0.0 {
                let t = c.bytes / (c.algbw_gbps * 1e3);
                bus += c.busbw_gbps * 1e3 * t;
                time += t;
            }
        }
    }
    job.comm_bytes = bytes;
    job.busbw_gbps = if time > 0.0 { bus / time / 1e3 } else { 0.0 };
    job
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_from_file_names() {
        let p = |s: &str| rank_from_name(std::path::Path::new(s));
        assert_eq!(p("rank3_trace.json"), Some(3));
        assert_eq!(p("/x/rank_12.pt.trace.json.gz"), Some(12));
        assert_eq!(p("host_123.1700.pt.trace.json"), None);
    }
}
