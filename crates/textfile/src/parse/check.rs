//! Validation by type: each sample against its family's type (counters non-negative, `le`
//! and `quantile` labels), whole histograms and summaries once the file is read, and names
//! that OpenMetrics would refuse.
//!
//! Separate because these are the semantic rules (what Prometheus or OpenMetrics would
//! reject or misread), apart from the syntax.

use std::collections::HashMap;

use dgx_pixels_metrics::{ExternalFamily, ExternalKind, ExternalSample};

use super::line::{is_metric_name, parse_float};
use super::series::series_identity;

/// Why a family of this name and type, valid in the text format 0.0.4, cannot be written as
/// valid OpenMetrics, or `None`. OpenMetrics names a counter's family without `_total`, so the
/// rest must be a metric name of its own; and it reserves `<family>_created` samples of counters,
/// histograms and summaries for created timestamps, which a summary's own samples (named like
/// the family) would be taken for.
pub fn openmetrics_name_problem(name: &str, kind: ExternalKind) -> Option<String> {
    match kind {
        ExternalKind::Counter => match name.strip_suffix("_total") {
            Some(stem) if !is_metric_name(stem) => Some(format!(
                "counter {name}: its OpenMetrics family name (the name without _total) {stem:?} is not a valid metric name"
            )),
            _ => None,
        },
        ExternalKind::Summary if name.ends_with("_created") => Some(format!(
            "summary {name}: OpenMetrics reserves names ending in _created for created timestamps"
        )),
        _ => None,
    }
}

pub(super) fn check_kind(
    kind: ExternalKind,
    family: &str,
    s: &ExternalSample,
) -> Result<(), String> {
    let label = |name: &str| s.label(name);
    let non_negative = |what: &str| {
        if s.value.is_nan() || s.value < 0.0 {
            Err(format!("{what} {} must be >= 0, got {}", s.name, s.value))
        } else {
            Ok(())
        }
    };
    match kind {
        ExternalKind::Counter => non_negative("counter"),
        ExternalKind::Histogram => {
            if s.name.ends_with("_bucket") {
                let Some(le) = label("le") else {
                    return Err(format!("histogram bucket {} has no le label", s.name));
                };
                if parse_float(le).is_none_or(f64::is_nan) {
                    return Err(format!("histogram bucket {} has invalid le {le:?}", s.name));
                }
            } else if label("le").is_some() {
                return Err(format!("{} must not have an le label", s.name));
            }
            if s.name.ends_with("_sum") {
                Ok(())
            } else {
                non_negative("histogram count")
            }
        }
        ExternalKind::Summary => {
            if *s.name == *family {
                let Some(q) = label("quantile") else {
                    return Err(format!("summary {} has no quantile label", s.name));
                };
                if !parse_float(q).is_some_and(|q| (0.0..=1.0).contains(&q)) {
                    return Err(format!("summary {} has invalid quantile {q:?}", s.name));
                }
            } else if label("quantile").is_some() {
                return Err(format!("{} must not have a quantile label", s.name));
            }
            if s.name.ends_with("_count") {
                non_negative("summary count")
            } else {
                Ok(())
            }
        }
        ExternalKind::Gauge | ExternalKind::Untyped => Ok(()),
    }
}

/// The labels of a histogram or summary series without its `le` or `quantile` label, as
/// Prometheus identifies them (sorted, empty values dropped).
type GroupKey<'a> = Vec<(&'a str, &'a str)>;

fn group_key<'a>(s: &'a ExternalSample, without: &str) -> GroupKey<'a> {
    let (_, mut labels) = series_identity(&s.name, &s.labels);
    labels.retain(|(k, _)| *k != without);
    labels
}

fn label<'a>(s: &'a ExternalSample, name: &str) -> Option<&'a str> {
    s.label(name)
}

/// Each histogram series needs a `+Inf` bucket, buckets that never decrease as `le` grows, no
/// two buckets with the same bound (`1` and `1.0` are one series once Prometheus normalizes
/// `le`), buckets if it has a `_sum` or `_count`, and a `_count` (when given) equal to the
/// `+Inf` bucket.
pub(super) fn check_histogram(f: &ExternalFamily) -> Result<(), String> {
    let mut buckets: HashMap<GroupKey<'_>, Vec<(f64, f64)>> = HashMap::new();
    let mut counts: HashMap<GroupKey<'_>, f64> = HashMap::new();
    let mut others = Vec::new();
    for s in &f.samples {
        let key = group_key(s, "le");
        if s.name.ends_with("_bucket") {
            let le = label(s, "le").and_then(parse_float).unwrap_or(f64::NAN);
            buckets.entry(key).or_default().push((le, s.value));
        } else {
            if s.name.ends_with("_count") {
                counts.insert(key.clone(), s.value);
            }
            others.push(key);
        }
    }
    if let Some(key) = others.iter().find(|k| !buckets.contains_key(*k)) {
        return Err(format!(
            "histogram {} has a _sum or _count without buckets for {{{}}}",
            f.name,
            key.iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    for (key, mut b) in buckets {
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        let Some(&(_, inf)) = b.last().filter(|(le, _)| *le == f64::INFINITY) else {
            return Err(format!("histogram {} has no le=\"+Inf\" bucket", f.name));
        };
        if let Some(w) = b.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(format!(
                "histogram {} has two buckets with le {} (written differently)",
                f.name, w[0].0
            ));
        }
        if b.windows(2).any(|w| w[1].1 < w[0].1) {
            return Err(format!(
                "histogram {} has buckets that decrease as le grows",
                f.name
            ));
        }
        if let Some(&count) = counts.get(&key) {
            if count != inf {
                return Err(format!(
                    "histogram {}: _count {count} differs from the +Inf bucket {inf}",
                    f.name
                ));
            }
        }
    }
    Ok(())
}

/// No two quantiles of one summary series may be the same number written differently (`0.5`
/// and `.5` are one series once Prometheus normalizes `quantile`).
pub(super) fn check_summary(f: &ExternalFamily) -> Result<(), String> {
    let mut series: HashMap<GroupKey<'_>, Vec<f64>> = HashMap::new();
    for s in f.samples.iter().filter(|s| *s.name == *f.name) {
        let q = label(s, "quantile")
            .and_then(parse_float)
            .unwrap_or(f64::NAN);
        series.entry(group_key(s, "quantile")).or_default().push(q);
    }
    for mut qs in series.into_values() {
        qs.sort_by(f64::total_cmp);
        if let Some(w) = qs.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!(
                "summary {} has two samples with quantile {} (written differently)",
                f.name, w[0]
            ));
        }
    }
    Ok(())
}
