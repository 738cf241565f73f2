//! One rank's HTA breakdowns: temporal breakdown, communication/computation overlap,
//! kernel-type and kernel breakdowns, idle time per stream and kernel launch statistics, and
//! [`analyze_rank`], which assembles them with the other per-rank analyses into a
//! [`RankReport`].
//!
//! Separate because these are the numbers HTA defines: whole-µs rows and HTA's own
//! arithmetic ([`crate::hta`]), with HTA's rounding and quirks.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::comm::{communication, memcpy_stats};
use super::steps::{phases_fsdp, step_intervals, steps};
use super::{
    kept_rows, AnalyzeOptions, ClassKernels, Dist, Kept, KernelStat, KernelTypeTime, LaunchStats,
    RankReport, Row, StreamIdle, TemporalBreakdown, Throughput, KERNEL_WAIT_US,
    LAUNCH_DELAY_CUTOFF_US, RUNTIME_CUTOFF_US, TOP_KERNELS,
};
use crate::classify::{is_hta_launch, KernelClass};
use crate::hta::{self, merge, py_round, std_dev, sweep, total, Span};
use crate::model::RankTrace;

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

/// Analyses one rank. `filter_steps` is HTA's job-wide decision (≥ 2 step names over all ranks).
pub fn analyze_rank(
    t: &RankTrace,
    rank: i64,
    filter_steps: bool,
    opts: &AnalyzeOptions,
) -> RankReport {
    let kept = kept_rows(t, filter_steps);
    let rows = &kept.rows;
    let busy = Busy::of(rows);
    let temporal = temporal_breakdown(&busy);
    let kernel_time = temporal.kernel_time_us;
    let overlap = Overlap::of(&busy);
    let steps = steps(t, &kept);
    let step_sum: f64 = steps.durations_us.iter().sum();
    let throughput = throughput(steps.mean_us, opts);
    let communication = communication(
        t,
        rows,
        steps.numbers.len(),
        overlap.comm_total,
        overlap.exposed,
        overlap.both,
    );
    let step_spans = step_intervals(t, &kept);
    let (phases, fsdp) = phases_fsdp(t, rows, &kept, &step_spans, step_sum);
    RankReport {
        rank,
        file: t.path.display().to_string(),
        device: t.device_name.clone(),
        process_id: t.host_pid,
        parse: t.stats.clone(),
        steps_filtered: filter_steps,
        gpu_rows: rows.len() as u64,
        temporal_breakdown: temporal,
        comm_comp_overlap_ratio: overlap.ratio,
        comm_comp_overlap_pct: py_round(100.0 * overlap.ratio, 2),
        kernel_type_breakdown: kernel_type_breakdown(&busy),
        memory_time_us: total(&busy.mem),
        kernels: kernels_by_class(t, rows),
        idle_time_breakdown: idle_breakdown(rows, &kept),
        kernel_launch: launch_stats(t, rows, &kept),
        steps,
        throughput,
        communication,
        memcpy: memcpy_stats(t, rows),
        phases,
        fsdp,
        gpu_busy_ratio: if kernel_time > 0 {
            total(&busy.all) as f64 / kernel_time as f64
        } else {
            0.0
        },
    }
}

/// The merged busy intervals of all kept rows and of each kernel class.
struct Busy {
    all: Vec<Span>,
    comp: Vec<Span>,
    comm: Vec<Span>,
    mem: Vec<Span>,
}

impl Busy {
    fn of(rows: &[Row]) -> Busy {
        Busy {
            all: merge(spans(rows, |_| true)),
            comp: merge(spans(rows, |r| r.class == KernelClass::Computation)),
            comm: merge(spans(rows, |r| r.class == KernelClass::Communication)),
            mem: merge(spans(rows, |r| r.class == KernelClass::Memory)),
        }
    }
}

/// HTA's temporal breakdown: kernel time (first start to last end), idle, compute, other.
fn temporal_breakdown(busy: &Busy) -> TemporalBreakdown {
    let kernel_time = match (busy.all.first(), busy.all.last()) {
        (Some(f), Some(l)) => l.1 - f.0,
        _ => 0,
    };
    let idle = kernel_time - total(&busy.all);
    let compute = total(&busy.comp);
    let non_compute = kernel_time - compute - idle;
    let pct = |x: i64| {
        if kernel_time == 0 {
            0.0
        } else {
            py_round(100.0 * (x as f64 / kernel_time as f64), 2)
        }
    };
    TemporalBreakdown {
        kernel_time_us: kernel_time,
        idle_time_us: idle,
        compute_time_us: compute,
        non_compute_time_us: non_compute,
        idle_pct: pct(idle),
        compute_pct: pct(compute),
        non_compute_pct: pct(non_compute),
    }
}

/// Communication against computation (comm ±1, comp ±2 in the sweep; both is state 3).
struct Overlap {
    /// µs where both run.
    both: i64,
    /// µs of communication alone.
    exposed: i64,
    /// µs of communication.
    comm_total: i64,
    /// both / comm_total (0 without communication).
    ratio: f64,
}

impl Overlap {
    fn of(busy: &Busy) -> Overlap {
        let states = sweep(&[&busy.comm, &busy.comp]);
        let time_in =
            |state: i64| -> i64 { states.iter().filter(|s| s.0 == state).map(|s| s.1).sum() };
        let both = time_in(3);
        let comm_total = total(&busy.comm);
        Overlap {
            both,
            exposed: time_in(1),
            comm_total,
            ratio: if comm_total == 0 {
                0.0
            } else {
                both as f64 / comm_total as f64
            },
        }
    }
}

/// Kernel-type breakdown (HTA's default includes memory): bits 1, 2, 4, longest first.
fn kernel_type_breakdown(busy: &Busy) -> Vec<KernelTypeTime> {
    let kt = sweep(&[&busy.comp, &busy.comm, &busy.mem]);
    let kt_sum: i64 = kt.iter().map(|s| s.1).sum();
    let mut breakdown: Vec<KernelTypeTime> = kt
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
    breakdown.sort_by_key(|k| std::cmp::Reverse(k.time_us));
    breakdown
}

/// Kernel breakdown per class.
fn kernels_by_class(t: &RankTrace, rows: &[Row]) -> BTreeMap<String, ClassKernels> {
    let mut kernels = BTreeMap::new();
    for (class, key) in [
        (KernelClass::Computation, "computation"),
        (KernelClass::Communication, "communication"),
        (KernelClass::Memory, "memory"),
    ] {
        kernels.insert(key.to_string(), class_kernels(t, rows, class));
    }
    kernels
}

/// Steps (and items, when their number per step is given) per second at the mean step time.
fn throughput(mean_us: f64, opts: &AnalyzeOptions) -> Throughput {
    Throughput {
        steps_per_s: if mean_us > 0.0 { 1e6 / mean_us } else { 0.0 },
        items_per_s: opts
            .items_per_step
            .filter(|_| mean_us > 0.0)
            .map(|n| n * 1e6 / mean_us),
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
            // HTA never groups a kernel whose rounded durations sum below zero (sub-µs rows:
            // ceil of the start past floor of the end) into "others": its "always false" mask
            // `sum < 0` holds for them. Real traces have such kernels.
            if s.sum_us >= 0 && (cums[i] > q || i >= TOP_KERNELS) {
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
