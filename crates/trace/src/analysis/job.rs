//! The job: [`analyze`] runs every rank and computes the numbers across ranks (kernel types
//! summed, steps matched by number, stragglers, collectives matched by order, job bandwidth).
//!
//! Separate because it is the only part that sees several ranks at once.

use std::collections::{BTreeMap, HashSet};

use super::{
    analyze_rank, kept_rows, AnalyzeOptions, JobReport, KernelTypeTime, RankReport, Report, Row,
};
use crate::classify::KernelClass;
use crate::hta::{self, py_round, std_dev};
use crate::model::{GpuKind, RankTrace};

/// Analyses the ranks of one job. `traces` must be distinct ranks; ranks are taken from
/// `distributedInfo`, else from a `rank<N>` in the file name, else from the input order.
pub fn analyze(traces: &[RankTrace], opts: &AnalyzeOptions) -> Result<Report, crate::TraceError> {
    let ranks = analyze_ranks(traces, opts)?;
    let job = job_report(&ranks, opts);
    Ok(Report {
        tool: "dgx-pixels-trace",
        version: env!("CARGO_PKG_VERSION"),
        ranks: ranks.into_iter().map(|r| r.report).collect(),
        job,
        memory_snapshots: Vec::new(),
    })
}

/// One rank's analysis with what the job-level analysis needs beyond its report.
#[derive(Debug, Clone)]
pub struct RankAnalysis {
    /// The rank's report.
    pub report: RankReport,
    /// Its communication kernels in start order: (correlation, raw start in µs).
    pub comm_starts: Vec<(i64, f64)>,
}

/// The per-rank half of [`analyze`]: each rank analysed (HTA's step filter decided over all
/// of `traces`), sorted by rank; [`job_report`] is the other half.
pub fn analyze_ranks(
    traces: &[RankTrace],
    opts: &AnalyzeOptions,
) -> Result<Vec<RankAnalysis>, crate::TraceError> {
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
    let mut out: Vec<RankAnalysis> = traces
        .iter()
        .zip(&ranks)
        .map(|(t, &r)| {
            let report = analyze_rank(t, r, filter, opts);
            let kept = kept_rows(t, filter);
            RankAnalysis {
                report,
                comm_starts: comm_starts(&kept.rows),
            }
        })
        .collect();
    out.sort_by_key(|r| r.report.rank);
    Ok(out)
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

/// The numbers across the ranks of a job (sorted by rank, distinct), from their analyses.
pub fn job_report(reports: &[RankAnalysis], opts: &AnalyzeOptions) -> JobReport {
    let mut job = JobReport {
        ranks: reports.iter().map(|r| r.report.rank).collect(),
        items_name: opts.items_name.clone(),
        kernel_type_breakdown: summed_kernel_types(reports),
        ..JobReport::default()
    };
    steps_across_ranks(reports, &mut job);
    let sps: Vec<f64> = reports
        .iter()
        .map(|r| r.report.throughput.steps_per_s)
        .filter(|x| *x > 0.0)
        .collect();
    job.steps_per_s = mean(&sps);
    job.items_per_s = {
        let v: Vec<f64> = reports
            .iter()
            .filter_map(|r| r.report.throughput.items_per_s)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    match_collectives(reports, &mut job);
    job.comm_comp_overlap_ratio = mean(
        &reports
            .iter()
            .map(|r| r.report.comm_comp_overlap_ratio)
            .collect::<Vec<_>>(),
    );
    let (mut bytes, mut bus, mut time) = (0.0, 0.0, 0.0);
    for r in reports.iter().map(|r| &r.report) {
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

/// The mean of `v`, 0 when empty.
fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Kernel-type breakdown summed over ranks, longest first.
fn summed_kernel_types(reports: &[RankAnalysis]) -> Vec<KernelTypeTime> {
    let mut kt: BTreeMap<String, i64> = BTreeMap::new();
    for r in reports.iter().map(|r| &r.report) {
        for k in &r.kernel_type_breakdown {
            *kt.entry(k.kernel_type.clone()).or_default() += k.time_us;
        }
    }
    let kt_sum: i64 = kt.values().sum();
    let mut breakdown: Vec<KernelTypeTime> = kt
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
    breakdown.sort_by_key(|k| std::cmp::Reverse(k.time_us));
    breakdown
}

/// Steps across ranks, matched by step number: the mean step time, and over the steps every
/// rank has, the spread between ranks and each rank's distance from the median (its
/// straggler score).
fn steps_across_ranks(reports: &[RankAnalysis], job: &mut JobReport) {
    let mut per_step: BTreeMap<u64, Vec<(i64, f64)>> = BTreeMap::new();
    let mut all_steps = Vec::new();
    for r in reports.iter().map(|r| &r.report) {
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
    job.step_time_std_across_ranks_us = mean(&stds);
    job.step_time_spread_us = mean(&spreads);
    job.straggler_score = score.into_iter().map(|(r, v)| (r, mean(&v))).collect();
}

/// Collectives matched by order across ranks (when every rank has as many): who starts each
/// last, how long the others wait for it, and the stragglers.
fn match_collectives(reports: &[RankAnalysis], job: &mut JobReport) {
    let n = reports
        .iter()
        .map(|r| r.comm_starts.len())
        .min()
        .unwrap_or(0);
    if reports.len() <= 1 || !reports.iter().all(|r| r.comm_starts.len() == n) {
        return;
    }
    job.matched_collectives = n as u64;
    for r in reports.iter().map(|r| &r.report) {
        job.late_arrivals.insert(r.rank, 0);
        job.sync_wait_us.insert(r.rank, 0.0);
    }
    for k in 0..n {
        let starts: Vec<(i64, f64)> = reports
            .iter()
            .map(|r| (r.report.rank, r.comm_starts[k].1))
            .collect();
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
