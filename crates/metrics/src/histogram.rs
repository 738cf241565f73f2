//! Histograms in the sample model.
//!
//! A histogram series travels as one [`Sample`] of a [`Kind::Histogram`] catalog row whose
//! [`histogram`](Sample::histogram) holds a typed [`HistogramPoint`]: bucket bounds as numbers,
//! cumulative counts, the sum and the count, from the reading to the encoder. Nothing on the way
//! formats or parses a bound: the one writer spells `le` when it writes the bytes
//! (`dgx-pixels-exposition`). The sample's own labels are the row's; its value is the count.
//!
//! [`Kind::Histogram`]: crate::Kind::Histogram

use std::sync::Arc;

use crate::catalog::Metric;
use crate::device::DeviceKey;
use crate::snapshot::Sample;

/// One histogram reading: what a histogram series serves, with its bounds as numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramPoint {
    /// `(upper bound, cumulative count)` in increasing order of the bound, `+Inf` last.
    pub buckets: Vec<(f64, u64)>,
    /// The sum of the observations.
    pub sum: f64,
    /// The number of observations (the `+Inf` bucket's count).
    pub count: u64,
}

impl HistogramPoint {
    /// The point of `counts` per bucket (not cumulative) for the finite `bounds` and one
    /// `+Inf` bucket after them (extra counts are ignored, missing ones are zero), and `sum`.
    pub fn from_counts(bounds: &[f64], counts: &[u64], sum: f64) -> HistogramPoint {
        let mut total = 0u64;
        let buckets: Vec<(f64, u64)> = bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .enumerate()
            .map(|(i, bound)| {
                total = total.saturating_add(counts.get(i).copied().unwrap_or(0));
                (bound, total)
            })
            .collect();
        HistogramPoint {
            buckets,
            sum,
            count: total,
        }
    }

    /// Whether it can be served: increasing bounds ending in `+Inf`, counts that never
    /// decrease, and a count that is the `+Inf` bucket's.
    pub fn is_well_formed(&self) -> bool {
        let Some(&(last, total)) = self.buckets.last() else {
            return false;
        };
        last == f64::INFINITY
            && total == self.count
            && self
                .buckets
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
    }
}

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

    /// The reading of this histogram now.
    pub fn point(&self) -> HistogramPoint {
        HistogramPoint::from_counts(&self.bounds, &self.counts, self.sum)
    }

    /// The sample of this histogram as series `labels` of `metric`, about `device` where the
    /// row is a device row (one sample; a `Vec` so that callers extend their output with it).
    pub fn samples<S: Into<String>>(
        &self,
        device: Option<&Arc<DeviceKey>>,
        metric: Metric,
        labels: impl IntoIterator<Item = S>,
    ) -> Vec<Sample> {
        vec![Sample::histogram(device, metric, labels, self.point())]
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
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].labels, ["gemm_bf16"]);
        assert_eq!(s[0].value, 4.0);
        let point = s[0].histogram.as_deref().unwrap();
        assert_eq!(
            point.buckets,
            [(0.01, 1), (0.1, 3), (f64::INFINITY, 4)],
            "bounds stay numbers"
        );
        assert_eq!((point.sum, point.count), (3.105, 4));
        assert!(point.is_well_formed());
        assert!(s.iter().all(Sample::is_well_formed));
    }

    #[test]
    fn only_increasing_complete_points_are_well_formed() {
        let ok = HistogramPoint::from_counts(&[1.0, 2.0], &[1, 0, 2], 4.0);
        assert_eq!(ok.buckets, [(1.0, 1), (2.0, 1), (f64::INFINITY, 3)]);
        assert!(ok.is_well_formed());
        let mut no_inf = ok.clone();
        no_inf.buckets.pop();
        let mut unsorted = ok.clone();
        unsorted.buckets.swap(0, 1);
        let mut decreasing = ok.clone();
        decreasing.buckets[1].1 = 0;
        let mut miscounted = ok.clone();
        miscounted.count = 2;
        for bad in [no_inf, unsorted, decreasing, miscounted] {
            assert!(!bad.is_well_formed(), "{bad:?}");
        }
    }
}
