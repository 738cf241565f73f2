//! External families into the model: value families sample by sample, histograms and
//! summaries grouped into series.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use super::{complete, Bucket, Family, Histogram, Labels, Point, Series, SummaryPoint, Type};
use dgx_pixels_metrics::external::{ExternalFamily, ExternalSample};

/// Adds the external families of `sources` (in order) to `out`. A family whose name an earlier
/// source already served is left out (the first one wins), so no family appears twice; a
/// sample that carries a constant label itself is skipped, since it would get it twice.
pub(crate) fn external<'a>(
    sources: impl IntoIterator<Item = &'a [ExternalFamily]>,
    consts: &[(String, String)],
    out: &mut Vec<Family<'a>>,
) {
    let mut seen = std::collections::HashSet::new();
    for families in sources {
        for f in families {
            if !seen.insert(f.name.as_str()) {
                continue;
            }
            let samples = f.samples.iter().filter(|s| {
                !s.labels
                    .iter()
                    .any(|(k, _)| consts.iter().any(|(c, _)| **c == **k))
            });
            let kind = Type::from(f.kind);
            let series = match kind {
                Type::Histogram => Grouped::histograms(&f.name, samples),
                Type::Summary => Grouped::summaries(&f.name, samples),
                // Samples of a value family are named like it (the textfile parser sees to it);
                // one that is not cannot be written as part of it.
                _ => samples
                    .filter(|s| *s.name == *f.name)
                    .map(|s| Series {
                        labels: Labels::External {
                            pairs: &s.labels,
                            skip: None,
                        },
                        point: Point::Value(s.value),
                    })
                    .collect(),
            };
            if series.is_empty() {
                continue;
            }
            let openmetrics_name = match kind {
                Type::Counter => f.name.strip_suffix("_total").unwrap_or(&f.name),
                _ => &f.name,
            };
            out.push(Family {
                name: &f.name,
                openmetrics_name,
                unit: None,
                help: &f.help,
                kind,
                verbatim_bounds: true,
                series,
            });
        }
    }
}

/// What one external sample of a histogram or summary family is.
enum Role<'a> {
    /// A bucket or quantile: the label at `at` (`le`, `quantile`) and its value.
    Part {
        at: usize,
        text: &'a str,
    },
    Sum,
    Count,
}

/// Which part of its family `s` is: `<family><part>{<label>=...}`, `_sum` or `_count`; `None`
/// for a sample that fits none (the textfile parser refuses those files).
fn role<'a>(family: &str, s: &'a ExternalSample, part: &str, label: &str) -> Option<Role<'a>> {
    let suffix = s.name.strip_prefix(family)?;
    let at = s.labels.iter().position(|(k, _)| &**k == label);
    match (suffix, at) {
        (p, Some(at)) if p == part => Some(Role::Part {
            at,
            text: &s.labels[at].1,
        }),
        ("_sum", None) => Some(Role::Sum),
        ("_count", None) => Some(Role::Count),
        _ => None,
    }
}

/// Groups an external histogram's or summary's samples into series by their labels without
/// `le` or `quantile`, compared as Prometheus identifies series (in any order, empty values
/// left out).
struct Grouped<'a> {
    series: Vec<(Labels<'a>, Point<'a>)>,
    /// The first series of each [`identity_hash`].
    index: HashMap<u64, usize>,
}

impl<'a> Grouped<'a> {
    fn histograms(
        family: &'a str,
        samples: impl Iterator<Item = &'a ExternalSample>,
    ) -> Vec<Series<'a>> {
        let mut g = Grouped::new();
        for s in samples {
            let Some(role) = role(family, s, "_bucket", "le") else {
                continue;
            };
            let new = || Point::Histogram(Box::<Histogram<'a>>::default());
            let Point::Histogram(h) = g.series_of(s, &role, new) else {
                continue;
            };
            match role {
                Role::Part { text, .. } => {
                    // `+Inf` reads as infinity; the textfile parser has checked every bound.
                    if let Ok(bound) = text.parse::<f64>() {
                        h.buckets.push(Bucket {
                            bound,
                            text: Some(text),
                            count: s.value,
                        });
                    }
                }
                Role::Sum => h.sum = Some(s.value),
                Role::Count => h.count = Some(s.value),
            }
        }
        g.series
            .into_iter()
            .filter_map(|(labels, point)| match point {
                Point::Histogram(h) => Some(Series {
                    labels,
                    point: Point::Histogram(Box::new(complete(*h)?)),
                }),
                _ => None,
            })
            .collect()
    }

    fn summaries(
        family: &'a str,
        samples: impl Iterator<Item = &'a ExternalSample>,
    ) -> Vec<Series<'a>> {
        let mut g = Grouped::new();
        for s in samples {
            let Some(role) = role(family, s, "", "quantile") else {
                continue;
            };
            let new = || Point::Summary(Box::<SummaryPoint<'a>>::default());
            let Point::Summary(q) = g.series_of(s, &role, new) else {
                continue;
            };
            match role {
                Role::Part { text, .. } => q.quantiles.push((text, s.value)),
                Role::Sum => q.sum = Some(s.value),
                Role::Count => q.count = Some(s.value),
            }
        }
        g.series
            .into_iter()
            .map(|(labels, point)| Series { labels, point })
            .collect()
    }

    fn new() -> Grouped<'a> {
        Grouped {
            series: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// The point of the series `s` belongs to, a new one (from `new`) if none yet.
    fn series_of(
        &mut self,
        s: &'a ExternalSample,
        role: &Role<'_>,
        new: impl FnOnce() -> Point<'a>,
    ) -> &mut Point<'a> {
        let skip = match role {
            Role::Part { at, .. } => Some(*at),
            _ => None,
        };
        let labels = Labels::External {
            pairs: &s.labels,
            skip,
        };
        // A series' samples usually come together: the last series is the likely one, and
        // only a new series (or a sample out of order) pays for a hash.
        let last = self.series.len().checked_sub(1);
        let found = match last {
            Some(i) if same_in_order(&self.series[i].0, &labels) => Some(i),
            _ => {
                let hash = identity_hash(&labels);
                match self.index.get(&hash) {
                    Some(&i) if same_identity(&self.series[i].0, &labels) => Some(i),
                    // A hash collision: look at every series.
                    Some(_) => self
                        .series
                        .iter()
                        .position(|(l, _)| same_identity(l, &labels)),
                    None => {
                        self.index.insert(hash, self.series.len());
                        None
                    }
                }
            }
        };
        let at = found.unwrap_or_else(|| {
            self.series.push((labels, new()));
            self.series.len() - 1
        });
        &mut self.series[at].1
    }
}

/// The pairs Prometheus identifies a series by: the non-empty ones.
fn identity_pairs<'a>(labels: &Labels<'a>) -> impl Iterator<Item = (&'a str, &'a str)> {
    labels.pairs().filter(|(_, v)| !v.is_empty())
}

/// The same pairs in the same order (the common case, and cheap).
fn same_in_order(a: &Labels<'_>, b: &Labels<'_>) -> bool {
    a.pairs().eq(b.pairs())
}

/// The same series for Prometheus: the same non-empty pairs, in any order.
fn same_identity(a: &Labels<'_>, b: &Labels<'_>) -> bool {
    identity_pairs(a).count() == identity_pairs(b).count()
        && identity_pairs(a).all(|p| identity_pairs(b).any(|q| p == q))
}

/// A hash of [`same_identity`]'s view of the labels, independent of their order.
fn identity_hash(labels: &Labels<'_>) -> u64 {
    identity_pairs(labels).fold(0u64, |acc, pair| {
        let mut h = DefaultHasher::new();
        pair.hash(&mut h);
        acc.wrapping_add(h.finish())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_metrics::external::ExternalKind;

    fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> ExternalSample {
        ExternalSample::new(name, labels.iter().copied(), value)
    }

    fn family(name: &str, kind: ExternalKind, samples: Vec<ExternalSample>) -> ExternalFamily {
        ExternalFamily {
            name: name.into(),
            help: "h".into(),
            kind,
            samples,
        }
    }

    fn convert<'a>(families: &'a [ExternalFamily], consts: &[(String, String)]) -> Vec<Family<'a>> {
        let mut out = Vec::new();
        external([families], consts, &mut out);
        out
    }

    fn labels(l: &Labels<'_>) -> Vec<String> {
        l.pairs().map(|(k, v)| format!("{k}={v}")).collect()
    }

    #[test]
    fn histogram_samples_in_any_order_group_into_sorted_series() {
        let f = [family(
            "h",
            ExternalKind::Histogram,
            vec![
                sample("h_sum", &[("b", "2"), ("a", "1")], 3.5),
                sample("h_bucket", &[("a", "1"), ("le", "+Inf"), ("b", "2")], 4.0),
                sample("h_bucket", &[("a", "9"), ("le", "+Inf")], 1.0),
                sample("h_bucket", &[("a", "1"), ("b", "2"), ("le", "0.5")], 2.0),
                sample("h_count", &[("a", "1"), ("b", "2"), ("x", "")], 4.0),
                // No +Inf bucket: dropped.
                sample("h_bucket", &[("a", "7"), ("le", "1")], 1.0),
                // Not a part of the family.
                sample("h", &[("a", "1"), ("b", "2")], 1.0),
            ],
        )];
        let out = convert(&f, &[]);
        let series = &out[0].series;
        assert_eq!(series.len(), 2);
        assert_eq!(labels(&series[0].labels), ["b=2", "a=1"]);
        let Point::Histogram(h) = &series[0].point else {
            panic!()
        };
        let buckets: Vec<_> = h.buckets.iter().map(|b| (b.text, b.count)).collect();
        assert_eq!(buckets, [(Some("0.5"), 2.0), (Some("+Inf"), 4.0)]);
        assert_eq!((h.sum, h.count), (Some(3.5), Some(4.0)));
        assert_eq!(labels(&series[1].labels), ["a=9"]);
    }

    #[test]
    fn summaries_keep_their_quantiles_and_counters_their_openmetrics_names() {
        let f = [
            family(
                "s",
                ExternalKind::Summary,
                vec![
                    sample("s", &[("quantile", "0.5")], 1.0),
                    sample("s", &[("quantile", "0.9")], f64::NAN),
                    sample("s_sum", &[], 2.0),
                    sample("s_count", &[], 3.0),
                ],
            ),
            family(
                "c_total",
                ExternalKind::Counter,
                vec![sample("c_total", &[], 1.0)],
            ),
            family("c", ExternalKind::Counter, vec![sample("c", &[], 1.0)]),
        ];
        let out = convert(&f, &[]);
        let Point::Summary(s) = &out[0].series[0].point else {
            panic!()
        };
        assert_eq!(s.quantiles[0], ("0.5", 1.0));
        assert!(
            s.quantiles[1].1.is_nan(),
            "external NaN is carried as given"
        );
        assert_eq!((s.sum, s.count), (Some(2.0), Some(3.0)));
        assert_eq!(out[1].openmetrics_name, "c");
        assert_eq!(out[1].openmetrics_type(), Type::Counter);
        assert_eq!(out[2].openmetrics_name, "c");
        assert_eq!(out[2].openmetrics_type(), Type::Unknown);
    }

    #[test]
    fn first_source_wins_and_constant_labels_are_not_carried_twice() {
        let a = [family(
            "g",
            ExternalKind::Gauge,
            vec![
                sample("g", &[("node", "other")], 1.0),
                sample("g", &[("x", "y")], 2.0),
            ],
        )];
        let b = [family(
            "g",
            ExternalKind::Gauge,
            vec![sample("g", &[], 3.0)],
        )];
        let mut out = Vec::new();
        external([&a[..], &b[..]], &[("node".into(), "n".into())], &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].series.len(), 1);
        assert_eq!(labels(&out[0].series[0].labels), ["x=y"]);
    }
}
