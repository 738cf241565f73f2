//! The OpenMetrics exposition: prometheus-client writes every family it can express, the small
//! writer (`text.rs`) the rest in OpenMetrics syntax, then prometheus-client ends it with the one
//! `# EOF`.
//!
//! prometheus-client 0.25 expresses counters, gauges, `unknown` families and histograms whose
//! bucket counts are whole numbers (`encode_histogram` takes `u64` counts) and that have a sum.
//! It has no summary type, so summaries, and histograms it cannot express, follow the families
//! it writes. Values go through its encoders: whole numbers below 1e15 as integers (the same
//! rule as [`push_value`](crate::syntax::push_value)), others in its shortest round-trip digits,
//! NaN as `NaN` and infinities as `inf`/`-inf` (OpenMetrics reads these case-insensitively).

use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, LabelSetEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::encode::{with_exposition, ExpositionInput};
use crate::family::{Family, Histogram, Labels, Point, Type};
use crate::syntax::{escaped, whole};
use crate::text::{write_family, Syntax};
use dgx_pixels_metrics::view::DeviceView;

/// The OpenMetrics exposition of `input` (with `view`, its device view), with `capacity`
/// bytes reserved.
pub(crate) fn encode(input: &ExpositionInput, view: &Arc<DeviceView>, capacity: usize) -> String {
    let rest = Arc::new(OnceLock::new());
    let mut registry = Registry::default();
    registry.register_collector(Box::new(FamiliesCollector {
        input: input.clone(),
        view: Arc::clone(view),
        rest: Arc::clone(&rest),
    }));
    let mut out = String::with_capacity(capacity);
    match encode_registry(&mut out, &registry) {
        Ok(()) => {
            if let Some(rest) = rest.get() {
                out.push_str(rest);
            }
        }
        // Writing into a String cannot fail; an error here would be a bug in an encoder, and an
        // empty exposition is still better than a panic on the serving path.
        Err(_) => out.clear(),
    }
    // Cannot fail either (a String).
    let _ = encode_eof(&mut out);
    out
}

/// prometheus-client's collectors must be `'static`: this one holds the input's shared parts
/// (no sample is copied) and builds the families while prometheus-client encodes. The families
/// it cannot express are written into `rest`, which [`encode`] appends before the `# EOF`.
#[derive(Debug)]
struct FamiliesCollector {
    input: ExpositionInput,
    view: Arc<DeviceView>,
    rest: Arc<OnceLock<String>>,
}

impl Collector for FamiliesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        with_exposition(&self.input, &self.view, |exposition| {
            let mut rest = String::new();
            let mut buckets = Vec::new();
            for f in &exposition.families {
                if expressible(f) {
                    encode_family(&mut encoder, f, exposition.consts, &mut buckets)?;
                } else {
                    write_family(&mut rest, f, exposition.consts, Syntax::OpenMetrics);
                }
            }
            // Set once: the registry encodes each collector once per exposition.
            let _ = self.rest.set(rest);
            Ok(())
        })
    }
}

/// Whether prometheus-client can write `f` exactly. It spells bucket bounds its own way
/// (`le="1.0"`), so a histogram whose bounds must stay as written is not.
fn expressible(f: &Family<'_>) -> bool {
    match f.kind {
        Type::Counter | Type::Gauge | Type::Unknown => true,
        Type::Histogram if f.verbatim_bounds => false,
        Type::Histogram => f.series.iter().all(|s| match &s.point {
            Point::Histogram(h) => integral(h).is_some(),
            _ => false,
        }),
        Type::Summary => false,
    }
}

/// A histogram as prometheus-client takes it: `(sum, count)`, when it has a sum, its cumulative
/// counts are whole, non-negative and never decrease, and its count (if given) is the `+Inf`
/// bucket's.
fn integral(h: &Histogram<'_>) -> Option<(f64, u64)> {
    let count = |c: f64| whole(c).and_then(|n| u64::try_from(n).ok());
    let mut previous = 0;
    for b in &h.buckets {
        let c = count(b.count).filter(|c| *c >= previous)?;
        previous = c;
    }
    let total = count(h.buckets.last()?.count)?;
    if h.count.is_some_and(|c| count(c) != Some(total)) {
        return None;
    }
    Some((h.sum?, total))
}

fn encode_family(
    encoder: &mut DescriptorEncoder<'_>,
    f: &Family<'_>,
    consts: &[(String, String)],
    buckets: &mut Vec<(f64, u64)>,
) -> Result<(), std::fmt::Error> {
    let kind = f.openmetrics_type();
    let metric_type = match kind {
        Type::Counter => MetricType::Counter,
        Type::Gauge => MetricType::Gauge,
        Type::Histogram => MetricType::Histogram,
        Type::Summary | Type::Unknown => MetricType::Unknown,
    };
    let unit = f.unit.map(|u| Unit::Other(u.to_string()));
    // prometheus-client writes the help as given: OpenMetrics wants `\`, newline and `"` escaped.
    let help = escaped(f.help, true);
    let mut family =
        encoder.encode_descriptor(f.openmetrics_base, &help, unit.as_ref(), metric_type)?;
    for s in &f.series {
        let labels = SeriesLabels {
            consts,
            labels: &s.labels,
        };
        // prometheus-client writes `{}` for an empty label set: leave the set out instead.
        if consts.is_empty() && s.labels.is_empty() {
            encode_point(&mut family, &s.point, kind, buckets)?;
        } else {
            encode_point(&mut family.encode_family(&labels)?, &s.point, kind, buckets)?;
        }
    }
    Ok(())
}

fn encode_point(
    series: &mut MetricEncoder<'_>,
    point: &Point<'_>,
    kind: Type,
    buckets: &mut Vec<(f64, u64)>,
) -> Result<(), std::fmt::Error> {
    match point {
        Point::Value(v) if kind == Type::Counter => counter(series, *v),
        Point::Value(v) => gauge(series, *v),
        Point::Histogram(h) => {
            let (sum, count) = integral(h).ok_or(std::fmt::Error)?;
            // prometheus-client wants per-bucket counts; the model holds cumulative ones.
            buckets.clear();
            let mut previous = 0;
            for b in &h.buckets {
                let cumulative = b.count as u64;
                buckets.push((b.bound, cumulative.saturating_sub(previous)));
                previous = cumulative;
            }
            series.encode_histogram::<NoLabelSet>(sum, count, buckets, None)
        }
        // Never expressible (see `expressible`).
        Point::Summary(_) => Err(std::fmt::Error),
    }
}

fn counter(series: &mut MetricEncoder<'_>, v: f64) -> Result<(), std::fmt::Error> {
    let none = None::<&Exemplar<NoLabelSet, f64>>;
    match whole(v).and_then(|n| u64::try_from(n).ok()) {
        Some(n) => series.encode_counter(&n, none),
        None => series.encode_counter(&v, none),
    }
}

fn gauge(series: &mut MetricEncoder<'_>, v: f64) -> Result<(), std::fmt::Error> {
    match whole(v) {
        Some(n) => series.encode_gauge(&n),
        None => series.encode_gauge(&v),
    }
}

/// A series' label pairs for prometheus-client, constant labels first (it escapes the values).
struct SeriesLabels<'s, 'a> {
    consts: &'s [(String, String)],
    labels: &'s Labels<'a>,
}

impl EncodeLabelSet for SeriesLabels<'_, '_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let mut pair = |k: &str, v: &str| {
            let mut label = encoder.encode_label();
            let mut key = label.encode_label_key()?;
            key.write_str(k)?;
            let mut value = key.encode_label_value()?;
            value.write_str(v)?;
            value.finish()
        };
        for (k, v) in self.consts {
            pair(k, v)?;
        }
        self.labels.try_each(pair)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::Bucket;

    fn histogram(counts: &[f64], sum: Option<f64>, count: Option<f64>) -> Histogram<'static> {
        let mut buckets: Vec<Bucket<'static>> = counts
            .iter()
            .enumerate()
            .map(|(i, c)| Bucket {
                bound: i as f64,
                text: None,
                count: *c,
            })
            .collect();
        if let Some(last) = buckets.last_mut() {
            last.bound = f64::INFINITY;
        }
        Histogram {
            buckets,
            sum,
            count,
        }
    }

    #[test]
    fn only_whole_complete_histograms_go_through_prometheus_client() {
        assert_eq!(
            integral(&histogram(&[1.0, 3.0], Some(2.5), Some(3.0))),
            Some((2.5, 3))
        );
        // No `_count` given: the +Inf bucket is the count.
        assert_eq!(
            integral(&histogram(&[1.0, 3.0], Some(2.5), None)),
            Some((2.5, 3))
        );
        for (counts, sum, count) in [
            (&[0.5, 1.5][..], Some(1.0), Some(1.5)),
            (&[1.0, 3.0][..], None, Some(3.0)),
            (&[3.0, 1.0][..], Some(1.0), Some(1.0)),
            (&[1.0, 3.0][..], Some(1.0), Some(4.0)),
            (&[-1.0, 3.0][..], Some(1.0), Some(3.0)),
            (&[1.0, 1e300][..], Some(1.0), Some(1e300)),
            (&[1.0, f64::NAN][..], Some(1.0), None),
        ] {
            assert_eq!(integral(&histogram(counts, sum, count)), None, "{counts:?}");
        }
    }
}
