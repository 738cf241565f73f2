//! HTA's step filter and the rows it keeps: the input of every other analysis.
//!
//! Separate because every analysis (per rank and per job) starts from [`Kept`], and the filter
//! reproduces one HTA function (`_filter_irrelevant_gpu_kernels`) on its own terms.

use std::collections::HashMap;

use crate::classify::{profiler_step, KernelClass};
use crate::model::{GpuKind, RankTrace};

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
