//! Descriptive statistics of repeated measurements and Welch's two-sample t-test.
//!
//! Conventions match NumPy/SciPy defaults so results can be checked against them (the tests
//! compare with values computed by SciPy, see `tests/fixtures/make_stats_fixtures.py`):
//! sample standard deviation (n - 1), percentiles by linear interpolation between order
//! statistics, confidence intervals from Student's t distribution.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Confidence level of every interval reported here.
pub const CONFIDENCE: f64 = 0.95;

/// Summary of one series of measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of measurements.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (equal to `p50`).
    pub median: f64,
    /// Sample standard deviation (divides by n - 1); 0 for a single measurement.
    pub std: f64,
    /// Smallest measurement.
    pub min: f64,
    /// Largest measurement.
    pub max: f64,
    /// 50th percentile.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Coefficient of variation, `std / mean`; absent when the mean is 0.
    pub cv: Option<f64>,
    /// 95% confidence interval of the mean (Student's t); absent below two measurements.
    pub ci95: Option<(f64, f64)>,
}

/// Percentile `q` (0..=1) of sorted values, interpolating linearly between order statistics
/// (NumPy's default "linear" method).
fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// The two-sided critical value of Student's t with `df` degrees of freedom at [`CONFIDENCE`].
fn t_critical(df: f64) -> Option<f64> {
    let t = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(t.inverse_cdf(1.0 - (1.0 - CONFIDENCE) / 2.0))
}

fn sample_variance(values: &[f64], mean: f64) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (values.len() - 1) as f64
}

/// Summarizes `values`; `None` when there are none or any is not finite.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let n = values.len();
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = values.iter().sum::<f64>() / n as f64;
    let std = sample_variance(values, mean).sqrt();
    let ci95 = if n >= 2 {
        t_critical((n - 1) as f64).map(|t| {
            let half = t * std / (n as f64).sqrt();
            (mean - half, mean + half)
        })
    } else {
        None
    };
    let p50 = percentile_sorted(&sorted, 0.5);
    Some(Summary {
        n,
        mean,
        median: p50,
        std,
        min: sorted[0],
        max: sorted[n - 1],
        p50,
        p95: percentile_sorted(&sorted, 0.95),
        p99: percentile_sorted(&sorted, 0.99),
        cv: (mean != 0.0).then(|| std / mean),
        ci95,
    })
}

/// Result of Welch's unequal-variances t-test of `b` against `a`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welch {
    /// `mean(b) - mean(a)`.
    pub difference: f64,
    /// The t statistic of `b - a`.
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p_value: f64,
    /// 95% confidence interval of `mean(b) - mean(a)`.
    pub ci95: (f64, f64),
}

/// Welch's t-test of `b` against `a`; `None` when either has fewer than two measurements or
/// both have zero variance (the test is undefined).
pub fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (sa, sb) = (summarize(a)?, summarize(b)?);
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (qa, qb) = (sa.std.powi(2) / na, sb.std.powi(2) / nb);
    let se = (qa + qb).sqrt();
    if se == 0.0 || !se.is_finite() {
        return None;
    }
    let difference = sb.mean - sa.mean;
    let t = difference / se;
    let df = (qa + qb).powi(2) / (qa.powi(2) / (na - 1.0) + qb.powi(2) / (nb - 1.0));
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    // sf rather than 1 - cdf keeps precision for tiny p-values.
    let p_value = (2.0 * dist.sf(t.abs())).min(1.0);
    let half = t_critical(df)? * se;
    Some(Welch {
        difference,
        t,
        df,
        p_value,
        ci95: (difference - half, difference + half),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_hand_checked_summary() {
        let s = summarize(&[4.0, 1.0, 3.0, 2.0]).unwrap_or_else(|| unreachable!());
        assert_eq!(
            (s.n, s.min, s.max, s.mean, s.median),
            (4, 1.0, 4.0, 2.5, 2.5)
        );
        // Variance of 1..4 with n - 1 is 5/3.
        assert!((s.std - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        // Linear interpolation: position 0.95 * 3 = 2.85 between 3 and 4.
        assert!((s.p95 - 3.85).abs() < 1e-12);
    }

    #[test]
    fn degenerate_inputs() {
        assert!(summarize(&[]).is_none());
        assert!(summarize(&[1.0, f64::NAN]).is_none());
        let one = summarize(&[7.0]).unwrap_or_else(|| unreachable!());
        assert_eq!((one.std, one.ci95, one.p99), (0.0, None, 7.0));
        assert!(summarize(&[0.0, 0.0]).is_some_and(|s| s.cv.is_none()));
        assert!(welch(&[1.0], &[1.0, 2.0]).is_none());
        assert!(welch(&[1.0, 1.0], &[2.0, 2.0]).is_none());
    }
}
