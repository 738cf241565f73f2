//! `probe compare A B` as data: per probe, the overhead of B relative to A, Welch's t-test and
//! the confidence interval of the difference, a verdict in the terms of the container-vs-native
//! study. The Markdown report and the PNG chart are the `probe` subcommand's (dgx-pixels-tools).

use crate::probe::ProbeUnit;
use crate::results::{ProbeResult, RunResults};
use crate::stats::{summarize, welch, Summary, Welch};
use crate::ProbeError;

/// Significance level of the verdicts.
pub const ALPHA: f64 = 0.05;

/// One probe compared between the two runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Probe name.
    pub probe: String,
    /// GPU of run A.
    pub gpu_a: usize,
    /// GPU of run B.
    pub gpu_b: usize,
    /// Unit of both.
    pub unit: ProbeUnit,
    /// Summary of A.
    pub a: Summary,
    /// Summary of B.
    pub b: Summary,
    /// How much worse B is than A, percent of A's mean: lower throughput or higher latency
    /// is positive; negative when B is better.
    pub overhead_percent: f64,
    /// Welch's test of B against A (absent when undefined, e.g. fewer than two values).
    pub welch: Option<Welch>,
    /// Values of A and B, for the chart.
    pub values: (Vec<f64>, Vec<f64>),
}

impl Comparison {
    /// Whether the difference is significant at [`ALPHA`].
    pub fn significant(&self) -> bool {
        self.welch.as_ref().is_some_and(|w| w.p_value < ALPHA)
    }

    /// The verdict, in the bands of the container-vs-native study (< 10%, 20–40%, > 50%).
    pub fn verdict(&self) -> &'static str {
        let o = self.overhead_percent;
        if !self.significant() {
            return "no significant difference";
        }
        if o < 0.0 {
            "B is faster"
        } else if o < 10.0 {
            "< 10%: not the bottleneck (look at drivers, thermals, power, configuration)"
        } else if o < 20.0 {
            "10–20%: above noise, below the usual container cost; investigate"
        } else if o <= 40.0 {
            "20–40%: a normal containerization cost"
        } else if o <= 50.0 {
            "40–50%: above the usual container cost; likely a problem"
        } else {
            "> 50%: B's environment is likely the problem"
        }
    }
}

fn pairs<'a>(a: &'a RunResults, b: &'a RunResults) -> Vec<(&'a ProbeResult, &'a ProbeResult)> {
    let single = |r: &RunResults| {
        let mut g: Vec<usize> = r.results.iter().map(|x| x.gpu).collect();
        g.dedup();
        g.len() == 1
    };
    // A container often sees its GPU as 0 whatever the host calls it: with one GPU on each
    // side, match on the probe alone.
    let by_probe_only = single(a) && single(b);
    a.results
        .iter()
        .filter_map(|ra| {
            b.results
                .iter()
                .find(|rb| {
                    rb.probe == ra.probe
                        && rb.peer == ra.peer
                        && (by_probe_only || rb.gpu == ra.gpu)
                })
                .map(|rb| (ra, rb))
        })
        .collect()
}

/// Compares every probe present in both runs.
pub fn compare(a: &RunResults, b: &RunResults) -> Result<Vec<Comparison>, ProbeError> {
    let mut out = Vec::new();
    for (ra, rb) in pairs(a, b) {
        if ra.unit != rb.unit {
            return Err(ProbeError::Parse(format!(
                "probe {}: unit {} in A but {} in B",
                ra.probe,
                ra.unit.as_str(),
                rb.unit.as_str()
            )));
        }
        let (Some(sa), Some(sb)) = (summarize(&ra.values), summarize(&rb.values)) else {
            continue;
        };
        let overhead_percent = if ra.unit.higher_is_better() {
            (sa.mean - sb.mean) / sa.mean * 100.0
        } else {
            (sb.mean - sa.mean) / sa.mean * 100.0
        };
        out.push(Comparison {
            probe: ra.probe.clone(),
            gpu_a: ra.gpu,
            gpu_b: rb.gpu,
            unit: ra.unit,
            a: sa,
            b: sb,
            overhead_percent,
            welch: welch(&ra.values, &rb.values),
            values: (ra.values.clone(), rb.values.clone()),
        });
    }
    if out.is_empty() {
        return Err(ProbeError::Parse(
            "the two result files have no probe in common".into(),
        ));
    }
    Ok(out)
}
