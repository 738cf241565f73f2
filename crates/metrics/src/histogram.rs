//! Histograms in the sample model.
//!
//! A histogram series travels as plain [`Sample`]s of a [`Kind::Histogram`] catalog row, each
//! with one label value more than the row names: the upper bound of a bucket (`le`, with the
//! cumulative count as value; `+Inf` carries the total count) or [`SUM`] (the sum of the
//! observations). [`Histogram::samples`] builds them; the encoders' family model turns them back
//! into histogram series (`family.rs`), which each writer writes as `_bucket`/`_sum`/`_count`
//! lines. Keeping `Sample` unchanged keeps every source and encoder
//! path that knows nothing of histograms exactly as it was.
//!
//! [`Kind::Histogram`]: crate::Kind::Histogram

use std::sync::Arc;

use crate::catalog::Metric;
use crate::device::DeviceKey;
use crate::snapshot::Sample;

/// Extra label value of the sample that carries a histogram's sum.
pub const SUM: &str = "sum";
/// Extra label value of the last bucket (its value is the total count).
pub const INF: &str = "+Inf";

/// Cumulative bucket counts of one histogram, with fixed upper bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: Vec<f64>,
    /// Per-bucket (not cumulative) counts; one more than `bounds` (the +Inf bucket).
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    /// An empty histogram with the given increasing upper bounds (+Inf is implied).
    pub fn new(bounds: &[f64]) -> Histogram {
        Histogram {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    /// Records one observation.
    pub fn observe(&mut self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
    }

    /// Observations recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Mean of the observations, if any.
    pub fn mean(&self) -> Option<f64> {
        let n = self.count();
        (n > 0).then(|| self.sum / n as f64)
    }

    /// The samples of this histogram as series `labels` of `metric`, about `device` where the
    /// row is a device row.
    pub fn samples<S: Into<String>>(
        &self,
        device: Option<&Arc<DeviceKey>>,
        metric: Metric,
        labels: impl IntoIterator<Item = S>,
    ) -> Vec<Sample> {
        let base: Vec<String> = labels.into_iter().map(Into::into).collect();
        let with = |extra: String| {
            let mut l = base.clone();
            l.push(extra);
            l
        };
        let mut out = Vec::with_capacity(self.counts.len() + 1);
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c;
            let le = match self.bounds.get(i) {
                Some(b) => format!("{b}"),
                None => INF.to_string(),
            };
            out.push(Sample {
                metric,
                device: device.cloned(),
                labels: with(le),
                value: cumulative as f64,
            });
        }
        out.push(Sample {
            metric,
            device: device.cloned(),
            labels: with(SUM.to_string()),
            value: self.sum,
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_cumulative_buckets() {
        let mut h = Histogram::new(&[0.01, 0.1]);
        for v in [0.005, 0.05, 0.05, 3.0] {
            h.observe(v);
        }
        assert_eq!(h.count(), 4);
        let key = Arc::new(DeviceKey::gpu(0, "GPU-a"));
        let s = h.samples(Some(&key), Metric::ProbeDuration, ["gemm_bf16"]);
        let got: Vec<(&str, f64)> = s.iter().map(|s| (s.labels[1].as_str(), s.value)).collect();
        assert_eq!(
            got,
            [("0.01", 1.0), ("0.1", 3.0), ("+Inf", 4.0), ("sum", 3.105)]
        );
        assert!(s.iter().all(Sample::is_well_formed));
    }
}
