//! `probe compare A B` as data: per probe, the overhead of B relative to A, Welch's t-test and
//! the confidence interval of the difference, a verdict in the terms of the container-vs-native
//! study. The Markdown report and the PNG chart are the `probe` subcommand's (dgx-pixels-tools).

use crate::probe::ProbeUnit;
use crate::results::{NodeResult, ProbeResult, RunResults};
use crate::stats::{summarize, welch, Summary, Welch};
use crate::ProbeError;

/// Significance level of the verdicts.
pub const ALPHA: f64 = 0.05;

/// One probe compared between the two runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Probe name; for a node probe, its label ([`crate::NodeResult::label`]: the probe and
    /// its path, or its GPU count and message size).
    pub probe: String,
    /// GPU of run A (0 for a node probe).
    pub gpu_a: usize,
    /// GPU of run B (0 for a node probe).
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

/// Node results of A and B with the same probe, target and size: the same path, or the same
/// number of GPUs (a container numbers its GPUs from 0) at the same message size.
fn node_pairs<'a>(
    a: &'a RunResults,
    b: &'a RunResults,
) -> impl Iterator<Item = (&'a NodeResult, &'a NodeResult)> {
    a.node_results.iter().filter_map(move |ra| {
        b.node_results
            .iter()
            .find(|rb| rb.probe == ra.probe && rb.target == ra.target && rb.bytes == ra.bytes)
            .map(|rb| (ra, rb))
    })
}

/// Compares every probe present in both runs.
pub fn compare(a: &RunResults, b: &RunResults) -> Result<Vec<Comparison>, ProbeError> {
    let mut out = Vec::new();
    let gpu = pairs(a, b).into_iter().map(|(ra, rb)| {
        (
            ra.probe.clone(),
            ra.gpu,
            rb.gpu,
            ra.unit,
            rb.unit,
            &ra.values,
            &rb.values,
        )
    });
    let node = node_pairs(a, b)
        .map(|(ra, rb)| (ra.label(), 0, 0, ra.unit, rb.unit, &ra.values, &rb.values));
    for (probe, gpu_a, gpu_b, unit_a, unit_b, va, vb) in gpu.chain(node) {
        compare_one(&mut out, probe, (gpu_a, gpu_b), (unit_a, unit_b), va, vb)?;
    }
    if out.is_empty() {
        return Err(ProbeError::Parse(
            "the two result files have no probe in common".into(),
        ));
    }
    Ok(out)
}

fn compare_one(
    out: &mut Vec<Comparison>,
    probe: String,
    (gpu_a, gpu_b): (usize, usize),
    (unit_a, unit_b): (ProbeUnit, ProbeUnit),
    va: &[f64],
    vb: &[f64],
) -> Result<(), ProbeError> {
    if unit_a != unit_b {
        return Err(ProbeError::Parse(format!(
            "probe {probe}: unit {} in A but {} in B",
            unit_a.as_str(),
            unit_b.as_str()
        )));
    }
    let (Some(sa), Some(sb)) = (summarize(va), summarize(vb)) else {
        return Ok(());
    };
    let overhead_percent = if unit_a.higher_is_better() {
        (sa.mean - sb.mean) / sa.mean * 100.0
    } else {
        (sb.mean - sa.mean) / sa.mean * 100.0
    };
    out.push(Comparison {
        probe,
        gpu_a,
        gpu_b,
        unit: unit_a,
        a: sa,
        b: sb,
        overhead_percent,
        welch: welch(va, vb),
        values: (va.to_vec(), vb.to_vec()),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Environment, FORMAT};
    use crate::ProbeSizes;

    fn run(node: Vec<NodeResult>) -> RunResults {
        RunResults {
            format: FORMAT.into(),
            environment: Environment::default(),
            warmup: 0,
            iterations: 3,
            seed: 0,
            sizes: ProbeSizes::default(),
            results: Vec::new(),
            node_results: node,
        }
    }

    fn node(probe: &str, target: &str, bytes: u64, values: &[f64]) -> NodeResult {
        NodeResult {
            probe: probe.into(),
            target: target.into(),
            bytes,
            unit: ProbeUnit::BytesPerSecond,
            values: values.to_vec(),
            summary: None,
        }
    }

    #[test]
    fn node_results_compare_by_probe_target_and_size() {
        let a = run(vec![
            node(
                "nccl_allreduce",
                "8 GPUs",
                256 << 20,
                &[370e9, 371e9, 369e9],
            ),
            node("nccl_allreduce", "8 GPUs", 1 << 20, &[50e9, 51e9, 49e9]),
            node("storage_read", "/raid", 1 << 30, &[12e9, 12.1e9, 11.9e9]),
        ]);
        let b = run(vec![
            node(
                "nccl_allreduce",
                "8 GPUs",
                256 << 20,
                &[250e9, 251e9, 249e9],
            ),
            node("storage_read", "/raid", 1 << 30, &[12e9, 12.1e9, 11.9e9]),
            node("storage_read", "/other", 1 << 30, &[1e9, 1e9, 1e9]),
        ]);
        let c = compare(&a, &b).unwrap();
        let names: Vec<&str> = c.iter().map(|x| x.probe.as_str()).collect();
        assert_eq!(
            names,
            ["nccl_allreduce busbw 8 GPUs 256 MiB", "storage_read /raid"]
        );
        // A third less bus bandwidth inside B: significant, and B's environment is the issue.
        assert!(
            (c[0].overhead_percent - 32.4).abs() < 0.1,
            "{}",
            c[0].overhead_percent
        );
        assert!(c[0].significant());
        assert!(!c[1].significant());
        assert!(compare(&a, &run(Vec::new())).is_err());
    }
}
