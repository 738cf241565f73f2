//! Profiler steps, training phases (forward, backward, optimizer) and FSDP operations: the
//! CPU-side annotations of a rank, measured within its complete steps.
//!
//! Separate because these numbers go beyond HTA: raw (ns-precision) intervals of annotations,
//! not HTA's whole-µs GPU rows.

use std::collections::HashMap;

use super::{FsdpStats, Kept, PhaseStats, Row, Steps};
use crate::classify::{fsdp_op, phase_of, profiler_step, FsdpOp, KernelClass, Phase};
use crate::hta::std_dev;
use crate::model::RankTrace;

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

/// Complete steps of a rank: (number, raw start, raw end), by start.
pub(super) fn step_intervals(t: &RankTrace, kept: &Kept) -> Vec<(u64, f64, f64)> {
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

pub(super) fn steps(t: &RankTrace, kept: &Kept) -> Steps {
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

pub(super) fn phases_fsdp(
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
