//! The one family model both writers read: catalog samples (histograms included) and external
//! families, converted once per encoding of a generation.
//!
//! A [`Family`] is a name, an optional unit, a help text, one [`Type`] and its [`Series`]; a
//! series is its label pairs (borrowed from the samples: nothing is copied) and its [`Point`]:
//! one value, a histogram or a summary. The one writer (`writer.rs`) writes them in either
//! format. A catalog histogram's bounds stay numbers here, as the reading's
//! [`HistogramPoint`] has them: the writer spells `le` when it writes the line.
//!
//! The NaN rule, in one place: the model carries whatever value it is given, and both writers
//! write NaN as `NaN`. Only the conversion of catalog samples drops NaN, because a NaN catalog
//! reading is a blank one, and sources omit blank or unsupported readings (docs/metrics.md);
//! external families are served as their author wrote them, NaN included.

use std::sync::Arc;

use dgx_pixels_metrics::attribution;
use dgx_pixels_metrics::catalog::{Kind, Metric, MetricDef};
use dgx_pixels_metrics::device::{DeviceKey, DeviceLabels, Scope};
use dgx_pixels_metrics::external::ExternalKind;
use dgx_pixels_metrics::histogram::HistogramPoint;
use dgx_pixels_metrics::snapshot::Sample;
use dgx_pixels_metrics::view::Join;

mod external;
pub(crate) use external::external;

/// The type of a family, catalog or external.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// A monotonic counter.
    Counter,
    /// A gauge.
    Gauge,
    /// A cumulative histogram.
    Histogram,
    /// A summary (quantiles, sum, count).
    Summary,
    /// Untyped in the classic text format, `unknown` in OpenMetrics.
    Unknown,
}

impl From<Kind> for Type {
    fn from(kind: Kind) -> Type {
        match kind {
            Kind::Counter => Type::Counter,
            Kind::Gauge => Type::Gauge,
            Kind::Histogram => Type::Histogram,
        }
    }
}

impl From<ExternalKind> for Type {
    fn from(kind: ExternalKind) -> Type {
        match kind {
            ExternalKind::Counter => Type::Counter,
            ExternalKind::Gauge => Type::Gauge,
            ExternalKind::Histogram => Type::Histogram,
            ExternalKind::Summary => Type::Summary,
            ExternalKind::Untyped => Type::Unknown,
        }
    }
}

/// One family: a `# TYPE` block and its series.
#[derive(Debug)]
pub struct Family<'a> {
    /// The name in the classic text format and the stem of every sample name (a counter's
    /// includes `_total`).
    pub name: &'a str,
    /// The OpenMetrics family name (a counter's without `_total`).
    pub openmetrics_name: &'a str,
    /// The unit as the name's suffix spells it (`watts`, `seconds`), if the family has one.
    pub unit: Option<&'static str>,
    /// Unescaped.
    pub help: &'a str,
    /// The family's type.
    pub kind: Type,
    /// Histogram bucket bounds must be written as their source wrote them: an external family's
    /// `le` text is its author's, and a rewritten one (`1` as `1.0`) is another series to a
    /// Prometheus before 3.0 and to every selector on it.
    pub verbatim_bounds: bool,
    /// Its series, in the order they are written.
    pub series: Vec<Series<'a>>,
}

impl Family<'_> {
    /// The type OpenMetrics declares: a counter whose samples do not end in `_total` cannot be
    /// written as an OpenMetrics counter (its samples would have to), so it is `unknown` there.
    pub fn openmetrics_type(&self) -> Type {
        if self.kind == Type::Counter && !self.name.ends_with("_total") {
            Type::Unknown
        } else {
            self.kind
        }
    }
}

/// One series: its own label pairs and its point. The exposition's constant labels come first
/// and are the same for every series (see [`Exposition::consts`]).
#[derive(Debug)]
pub struct Series<'a> {
    /// Its own label pairs (the constant labels are the exposition's).
    pub labels: Labels<'a>,
    /// Its value.
    pub point: Point<'a>,
}

/// The label pairs of a series, borrowed from its sample.
#[derive(Debug, Clone, Copy)]
pub enum Labels<'a> {
    /// A catalog row's device labels (from the sample's key), its own label names with the
    /// sample's values, then the attribution labels.
    #[allow(missing_docs)]
    Catalog {
        device: Option<(&'a DeviceKey, Scope)>,
        names: &'static [&'static str],
        values: &'a [String],
        extra: Option<&'a attribution::Extra>,
    },
    /// An external sample's pairs in their order, less the one at `skip` (a histogram's `le`
    /// or a summary's `quantile`, which belong to the point).
    #[allow(missing_docs)]
    External {
        pairs: &'a [(Arc<str>, Arc<str>)],
        skip: Option<usize>,
    },
}

impl<'a> Labels<'a> {
    /// Calls `f` with each pair in the order they are written, until it fails: what the writers
    /// run for every series, so it loops over the slices directly.
    #[inline]
    pub fn try_each<E>(
        &self,
        mut f: impl FnMut(&'a str, &'a str) -> Result<(), E>,
    ) -> Result<(), E> {
        match *self {
            Labels::Catalog {
                device,
                names,
                values,
                extra,
            } => {
                for (k, v) in device.into_iter().flat_map(|(d, scope)| d.labels(scope)) {
                    f(k, v)?;
                }
                for (k, v) in names.iter().zip(values) {
                    f(k, v)?;
                }
                for (k, v) in extra.map(|e| &e[..]).unwrap_or_default() {
                    f(k, v)?;
                }
            }
            Labels::External { pairs, skip } => {
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if Some(i) != skip {
                        f(k, v)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The pairs in the order they are written, as an iterator.
    pub fn pairs(&self) -> Pairs<'a> {
        match *self {
            Labels::Catalog {
                device,
                names,
                values,
                extra,
            } => Pairs::Catalog {
                device: device.map(|(d, scope)| d.labels(scope)),
                names: names.iter(),
                values: values.iter(),
                extra: extra.map(|e| &e[..]).unwrap_or_default().iter(),
            },
            Labels::External { pairs, skip } => Pairs::External {
                pairs: pairs.iter(),
                // Counts down to the pair to leave out.
                skip: skip.map_or(usize::MAX, |i| i),
            },
        }
    }
}

/// The iterator of [`Labels::pairs`].
pub enum Pairs<'a> {
    #[allow(missing_docs)]
    Catalog {
        device: Option<DeviceLabels<'a>>,
        names: std::slice::Iter<'static, &'static str>,
        values: std::slice::Iter<'a, String>,
        extra: std::slice::Iter<'a, (std::borrow::Cow<'static, str>, String)>,
    },
    #[allow(missing_docs)]
    External {
        pairs: std::slice::Iter<'a, (Arc<str>, Arc<str>)>,
        skip: usize,
    },
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        match self {
            Pairs::Catalog {
                device,
                names,
                values,
                extra,
            } => match device.as_mut().and_then(Iterator::next) {
                Some(pair) => Some(pair),
                None => match (names.next(), values.next()) {
                    (Some(k), Some(v)) => Some((k, v)),
                    _ => extra.next().map(|(k, v)| (k.as_ref(), v.as_str())),
                },
            },
            Pairs::External { pairs, skip } => {
                if *skip == 0 {
                    pairs.next();
                }
                *skip = skip.wrapping_sub(1);
                pairs.next().map(|(k, v)| (&**k, &**v))
            }
        }
    }
}

/// What a series holds.
#[derive(Debug)]
pub enum Point<'a> {
    /// Counters, gauges and untyped series.
    Value(f64),
    /// A histogram's buckets, sum and count.
    Histogram(Box<Histogram<'a>>),
    /// A summary's quantiles, sum and count.
    Summary(Box<SummaryPoint<'a>>),
}

impl Point<'_> {
    /// How many series a Prometheus stores for this point.
    fn stored_series(&self) -> usize {
        match self {
            Point::Value(_) => 1,
            Point::Histogram(h) => {
                h.buckets.len() + usize::from(h.sum.is_some()) + usize::from(h.count.is_some())
            }
            Point::Summary(s) => {
                s.quantiles.len() + usize::from(s.sum.is_some()) + usize::from(s.count.is_some())
            }
        }
    }
}

/// A histogram series: cumulative buckets in increasing order of their bound, `+Inf` last.
#[derive(Debug, Default)]
pub struct Histogram<'a> {
    /// Cumulative buckets, `+Inf` last.
    pub buckets: Vec<Bucket<'a>>,
    /// The sum, if known.
    pub sum: Option<f64>,
    /// The count, if given.
    pub count: Option<f64>,
}

/// One bucket: its bound, and its cumulative count.
#[derive(Debug, Clone, Copy)]
pub struct Bucket<'a> {
    /// The upper bound as a number (`+Inf` is infinity).
    pub bound: f64,
    /// The bound as its author wrote it, for an external family (see
    /// [`Family::verbatim_bounds`]); `None` for a catalog one, which the writer spells.
    pub text: Option<&'a str>,
    /// The cumulative count.
    pub count: f64,
}

/// A summary series: quantiles (as written, and their values), sum and count.
#[derive(Debug, Default)]
pub struct SummaryPoint<'a> {
    /// Quantiles as written, with their values.
    pub quantiles: Vec<(&'a str, f64)>,
    /// The sum, if known.
    pub sum: Option<f64>,
    /// The count, if known.
    pub count: Option<f64>,
}

/// Everything one exposition writes: constant labels (first on every series) and the
/// families, catalog ones in catalog order, then external ones by source.
#[derive(Debug)]
pub struct Exposition<'a> {
    /// Labels first on every series.
    pub consts: &'a [(String, String)],
    /// The families in the order they are written.
    pub families: Vec<Family<'a>>,
}

/// The catalog families of `samples` (any order; served samples only), joined with `join`.
pub(crate) fn catalog<'a>(mut samples: Vec<&'a Sample>, join: &'a Join, out: &mut Vec<Family<'a>>) {
    // The NaN rule (module docs): a NaN catalog reading is blank, and blank readings are omitted.
    samples.retain(|s| s.is_well_formed() && !s.value.is_nan());
    // Stable: series keep their source order within a family.
    samples.sort_by_key(|s| s.metric);
    for group in samples.chunk_by(|a, b| a.metric == b.metric) {
        let def = group[0].metric.def();
        let series = if def.kind == Kind::Histogram {
            // Histograms are not joined (their extra bound label would need its own rules).
            catalog_histograms(def, group)
        } else {
            group
                .iter()
                .map(|s| Series {
                    labels: Labels::Catalog {
                        device: s.device.as_deref().map(|d| (d, def.scope)),
                        names: def.own_labels(),
                        values: &s.labels,
                        extra: join.labels_for(s),
                    },
                    point: Point::Value(s.value),
                })
                .collect()
        };
        if !series.is_empty() {
            out.push(Family {
                name: def.name,
                openmetrics_name: def.openmetrics_name,
                unit: def.unit.suffix(),
                help: def.help,
                kind: def.kind.into(),
                // Our own bounds: the writer spells them (in OpenMetrics, as prometheus-client did).
                verbatim_bounds: false,
                series,
            });
        }
    }
}

/// `dgx_pixels_exporter_series`: the series each family writes, as a Prometheus scraping it
/// stores them (a histogram's every bucket, `_sum` and `_count`), this family's own included.
pub(crate) fn series_counts(families: &[Family<'_>]) -> Vec<Sample> {
    let mut out: Vec<Sample> = families
        .iter()
        .map(|f| {
            let n: usize = f.series.iter().map(|s| s.point.stored_series()).sum();
            Sample::new(Metric::ExporterSeries, [f.name], n as f64)
        })
        .collect();
    let own = out.len() + 1;
    out.push(Sample::new(
        Metric::ExporterSeries,
        [Metric::ExporterSeries.def().name],
        own as f64,
    ));
    out
}

/// A histogram row's series, one per sample: its typed point, bounds as numbers (see
/// `dgx_pixels_metrics::histogram`). The NaN rule: a NaN sum is a blank one, left out.
fn catalog_histograms<'a>(def: &MetricDef, samples: &[&'a Sample]) -> Vec<Series<'a>> {
    samples
        .iter()
        .filter_map(|s| {
            let point = s.histogram.as_deref()?;
            Some(Series {
                labels: Labels::Catalog {
                    device: s.device.as_deref().map(|d| (d, def.scope)),
                    names: def.own_labels(),
                    values: &s.labels,
                    extra: None,
                },
                point: Point::Histogram(Box::new(typed(point))),
            })
        })
        .collect()
}

/// The model's histogram of a reading: its buckets as they are (the sample is well formed:
/// increasing bounds, `+Inf` last), its sum and its count.
fn typed(point: &HistogramPoint) -> Histogram<'static> {
    Histogram {
        buckets: point
            .buckets
            .iter()
            .map(|&(bound, count)| Bucket {
                bound,
                text: None,
                count: count as f64,
            })
            .collect(),
        sum: Some(point.sum).filter(|s| !s.is_nan()),
        count: Some(point.count as f64),
    }
}

/// The histogram with its buckets in order of their bounds, or `None` without a `+Inf` bucket.
fn complete(mut point: Histogram<'_>) -> Option<Histogram<'_>> {
    if !point.buckets.is_sorted_by(|a, b| a.bound <= b.bound) {
        point.buckets.sort_by(|a, b| a.bound.total_cmp(&b.bound));
    }
    (point.buckets.last()?.bound == f64::INFINITY).then_some(point)
}
