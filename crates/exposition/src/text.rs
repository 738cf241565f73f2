//! The small writer: any family of the model in the classic text format 0.0.4, which
//! prometheus-client does not write (every family of a [`Format::Text`] exposition), or in
//! OpenMetrics syntax (the families prometheus-client cannot express: summaries, and histograms
//! whose counts are not whole numbers or that lack a sum).
//!
//! The sample lines are the same in both syntaxes; only the family header differs: OpenMetrics
//! names a counter's family without `_total`, declares `unknown` where the classic format says
//! `untyped`, escapes `"` in help texts and states the unit.
//!
//! [`Format::Text`]: crate::Format::Text

use std::convert::Infallible;
use std::fmt::Write as _;

use crate::family::{Family, Labels, Point, Type};
use crate::syntax::{push_escaped, push_value};

/// Which syntax [`write_family`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Syntax {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text (without the `# EOF`, which ends the whole exposition).
    OpenMetrics,
}

/// Writes one family: its header, then every series, constant labels first.
pub(crate) fn write_family(
    out: &mut String,
    f: &Family<'_>,
    consts: &[(String, String)],
    syntax: Syntax,
) {
    let (name, kind) = match syntax {
        Syntax::Text => (f.name, f.kind),
        Syntax::OpenMetrics => (f.openmetrics_name, f.openmetrics_type()),
    };
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    push_escaped(out, f.help, syntax == Syntax::OpenMetrics);
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(match kind {
        Type::Counter => "counter",
        Type::Gauge => "gauge",
        Type::Histogram => "histogram",
        Type::Summary => "summary",
        Type::Unknown if syntax == Syntax::Text => "untyped",
        Type::Unknown => "unknown",
    });
    out.push('\n');
    if let (Syntax::OpenMetrics, Some(unit)) = (syntax, f.unit) {
        out.push_str("# UNIT ");
        out.push_str(name);
        out.push(' ');
        out.push_str(unit);
        out.push('\n');
    }
    // The label pairs of a histogram's or summary's series, written once for all its lines.
    let mut pairs = String::new();
    for s in &f.series {
        match &s.point {
            Point::Value(v) => {
                out.push_str(f.name);
                let open = out.len();
                out.push('{');
                if push_pairs(out, consts, &s.labels) {
                    out.push('}');
                } else {
                    out.truncate(open);
                }
                out.push(' ');
                push_value(out, *v);
                out.push('\n');
            }
            Point::Histogram(h) => {
                pairs.clear();
                push_pairs(&mut pairs, consts, &s.labels);
                let mut le = String::new();
                for b in &h.buckets {
                    le.clear();
                    match b.text {
                        Some(text) => le.push_str(text),
                        None if b.bound == f64::INFINITY => le.push_str("+Inf"),
                        None => {
                            let _ = write!(le, "{}", b.bound);
                        }
                    }
                    line(out, f.name, "_bucket", &pairs, Some(("le", &le)), b.count);
                }
                if let Some(sum) = h.sum {
                    line(out, f.name, "_sum", &pairs, None, sum);
                }
                if let Some(count) = h.count.filter(|_| counted(syntax, h.sum)) {
                    line(out, f.name, "_count", &pairs, None, count);
                }
            }
            Point::Summary(q) => {
                pairs.clear();
                push_pairs(&mut pairs, consts, &s.labels);
                for (quantile, v) in &q.quantiles {
                    line(out, f.name, "", &pairs, Some(("quantile", quantile)), *v);
                }
                if let Some(sum) = q.sum {
                    line(out, f.name, "_sum", &pairs, None, sum);
                }
                if let Some(count) = q.count.filter(|_| counted(syntax, q.sum)) {
                    line(out, f.name, "_count", &pairs, None, count);
                }
            }
        }
    }
}

/// Writes `k="v",...` (constant labels first) without braces; whether it wrote any.
fn push_pairs(out: &mut String, consts: &[(String, String)], labels: &Labels<'_>) -> bool {
    let mut first = true;
    let mut pair = |k: &str, v: &str| {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        push_escaped(out, v, true);
        out.push('"');
        Ok::<(), Infallible>(())
    };
    for (k, v) in consts {
        let _ = pair(k, v);
    }
    let _ = labels.try_each(pair);
    !first
}

/// One sample line of a histogram or summary: `pairs` written by [`push_pairs`], then the
/// point's own label (`le`, `quantile`) last.
fn line(
    out: &mut String,
    name: &str,
    suffix: &str,
    pairs: &str,
    own: Option<(&str, &str)>,
    v: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    if !pairs.is_empty() || own.is_some() {
        out.push('{');
        out.push_str(pairs);
        if let Some((k, value)) = own {
            if !pairs.is_empty() {
                out.push(',');
            }
            out.push_str(k);
            out.push_str("=\"");
            push_escaped(out, value, true);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    push_value(out, v);
    out.push('\n');
}

/// Whether a histogram's or summary's `_count` is written: OpenMetrics 1.0 allows it only
/// beside `_sum`; the classic format writes what the source gave.
fn counted(syntax: Syntax, sum: Option<f64>) -> bool {
    syntax == Syntax::Text || sum.is_some()
}
