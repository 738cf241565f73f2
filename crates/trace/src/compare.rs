//! `trace compare A B` as data: two runs side by side (e.g. native vs container): where did the
//! time go? Differences in the breakdown, the top kernels, launch overhead, idle time and
//! communication, averaged over ranks. The text table is the `trace` subcommand's
//! (dgx-pixels-tools).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::Report;

/// One compared quantity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delta {
    /// What.
    pub metric: String,
    /// Value in A.
    pub a: f64,
    /// Value in B.
    pub b: f64,
    /// B − A.
    pub diff: f64,
    /// (B − A) / A in percent (None when A is 0).
    pub change_pct: Option<f64>,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Rank-averaged quantities.
    pub metrics: Vec<Delta>,
    /// Per computation kernel name (top by Σ time in either run): Σ µs per rank.
    pub kernels: Vec<Delta>,
}

fn mean(rep: &Report, f: impl Fn(&crate::RankReport) -> f64) -> f64 {
    if rep.ranks.is_empty() {
        return 0.0;
    }
    rep.ranks.iter().map(f).sum::<f64>() / rep.ranks.len() as f64
}

fn delta(metric: &str, a: f64, b: f64) -> Delta {
    Delta {
        metric: metric.to_string(),
        a,
        b,
        diff: b - a,
        change_pct: (a != 0.0).then(|| (b - a) / a * 100.0),
    }
}

/// Compares two reports.
pub fn compare(a: &Report, b: &Report) -> Comparison {
    type F = fn(&crate::RankReport) -> f64;
    let rows: [(&str, F); 14] = [
        ("step time (µs)", |r| r.steps.mean_us),
        ("steps/s", |r| r.throughput.steps_per_s),
        ("GPU kernel time (µs)", |r| {
            r.temporal_breakdown.kernel_time_us as f64
        }),
        ("compute (µs)", |r| {
            r.temporal_breakdown.compute_time_us as f64
        }),
        ("non-compute (µs)", |r| {
            r.temporal_breakdown.non_compute_time_us as f64
        }),
        ("idle (µs)", |r| r.temporal_breakdown.idle_time_us as f64),
        ("idle host wait (µs)", |r| {
            r.idle_time_breakdown
                .iter()
                .map(|s| s.host_wait_us as f64)
                .sum()
        }),
        ("idle kernel wait (µs)", |r| {
            r.idle_time_breakdown
                .iter()
                .map(|s| s.kernel_wait_us as f64)
                .sum()
        }),
        ("idle other (µs)", |r| {
            r.idle_time_breakdown
                .iter()
                .map(|s| s.other_us as f64)
                .sum()
        }),
        ("comm hidden by compute (ratio)", |r| {
            r.comm_comp_overlap_ratio
        }),
        ("exposed communication (µs)", |r| {
            r.communication.exposed_time_us as f64
        }),
        ("launch CPU time mean (µs)", |r| {
            r.kernel_launch.cpu_duration.mean_us
        }),
        ("launch delay p50 (µs)", |r| {
            r.kernel_launch.launch_delay.p50_us
        }),
        ("launch delay p95 (µs)", |r| {
            r.kernel_launch.launch_delay.p95_us
        }),
    ];
    let metrics = rows
        .iter()
        .map(|(name, f)| delta(name, mean(a, f), mean(b, f)))
        .collect();
    let per_kernel = |rep: &Report| {
        let mut m: BTreeMap<String, f64> = BTreeMap::new();
        let n = rep.ranks.len().max(1) as f64;
        for r in &rep.ranks {
            if let Some(c) = r.kernels.get("computation") {
                for k in &c.top {
                    *m.entry(k.name.clone()).or_default() += k.sum_us as f64 / n;
                }
            }
        }
        m
    };
    let (ka, kb) = (per_kernel(a), per_kernel(b));
    let mut names: Vec<&String> = ka.keys().chain(kb.keys()).collect();
    names.sort();
    names.dedup();
    let mut kernels: Vec<Delta> = names
        .into_iter()
        .map(|n| {
            delta(
                n,
                ka.get(n).copied().unwrap_or(0.0),
                kb.get(n).copied().unwrap_or(0.0),
            )
        })
        .collect();
    kernels.sort_by(|x, y| y.diff.abs().total_cmp(&x.diff.abs()));
    kernels.truncate(10);
    Comparison { metrics, kernels }
}
