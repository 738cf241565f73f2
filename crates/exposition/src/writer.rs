//! The one exposition writer: every family of the model (`family.rs`) in the classic text
//! format 0.0.4 or in OpenMetrics 1.0, one function per part of a family (header, value lines,
//! histogram, summary), with what differs between the formats as data: [`Format`] picks the
//! family's name and type word, the help escaping, the `# UNIT` line and the `# EOF`; a
//! [`Spelling`] picks how numbers, bucket bounds and a histogram's lines are written.
//!
//! Where prometheus-client is and is not used: not here. It used to write the OpenMetrics
//! families it could express (counters, gauges, unknown, and histograms with whole counts and a
//! sum) through `encode_registry`, with this writer (then `text.rs`) for the rest. Its output
//! is kept byte for byte as [`Spelling::Client`]: numbers through the same `dtoa` crate,
//! integers where it wrote integers, and its histogram layout (`_sum`, `_count`, then buckets
//! with `le` first). Writing it here rather than through its registry takes a collector, a
//! `'static` copy of the input and a second buffer off every encoding, and leaves one place
//! that knows the byte layout (the pinned expositions of `dgx-pixels-exporter` hold it to
//! the bytes). The crate no longer depends on prometheus-client.
//!
//! Bucket bounds are numbers up to here (a catalog histogram's come from its reading,
//! [`HistogramPoint`](dgx_pixels_metrics::histogram::HistogramPoint)); [`push_le`] is the one
//! place that spells them. An external family's bounds are written as its author wrote them
//! (see [`Family::verbatim_bounds`]).

use std::convert::Infallible;
use std::fmt::Write as _;

use crate::encode::Format;
use crate::family::{Bucket, Exposition, Family, Histogram, Labels, Point, SummaryPoint, Type};
use crate::syntax::{push_escaped, push_value, whole};

#[cfg(test)]
mod tests;

/// How a family's numbers and histogram lines are spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spelling {
    /// [`push_value`] for every number, bounds in Rust's `{}` (a reading's bounds were always
    /// spelled so), a histogram's buckets before `_sum` and `_count` with `le` last. The text
    /// format, and the OpenMetrics families prometheus-client could not express.
    Classic,
    /// prometheus-client 0.25's spelling, for the OpenMetrics families it expressed (see
    /// [`client_spelled`]): whole values as integers (counters: non-negative ones), others and
    /// every `_sum` through `dtoa` (`1.0`, `inf`), bounds through `dtoa`, and a histogram's
    /// `_sum`, `_count`, then its buckets with `le` first.
    Client,
}

/// Writes the whole exposition in `format`.
///
/// OpenMetrics keeps the family order it has been served in: the families written in
/// [`Spelling::Client`] first (in model order), then the others, then `# EOF`.
pub(crate) fn write(out: &mut String, exposition: &Exposition<'_>, format: Format) {
    let consts = exposition.consts;
    let families = &exposition.families;
    match format {
        Format::Text => {
            for f in families {
                write_family(out, f, consts, format, Spelling::Classic);
            }
        }
        Format::OpenMetrics => {
            for f in families.iter().filter(|f| client_spelled(f)) {
                write_family(out, f, consts, format, Spelling::Client);
            }
            for f in families.iter().filter(|f| !client_spelled(f)) {
                write_family(out, f, consts, format, Spelling::Classic);
            }
            out.push_str("# EOF\n");
        }
    }
}

/// Whether an OpenMetrics family is written in [`Spelling::Client`]: the families
/// prometheus-client could express exactly. It spelled bucket bounds its own way (`le="1.0"`),
/// so a histogram whose bounds must stay as written is not one, nor one without whole counts
/// and a sum ([`integral`]); it had no summary type.
pub(crate) fn client_spelled(f: &Family<'_>) -> bool {
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

/// A histogram's `(sum, count)` when it has a sum, its cumulative counts are whole,
/// non-negative and never decrease, and its count (if given) is the `+Inf` bucket's.
pub(crate) fn integral(h: &Histogram<'_>) -> Option<(f64, u64)> {
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

/// Writes one family: its header, then every series, constant labels first.
pub(crate) fn write_family(
    out: &mut String,
    f: &Family<'_>,
    consts: &[(String, String)],
    format: Format,
    spelling: Spelling,
) {
    let kind = header(out, f, format);
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
                push_number(out, *v, spelling, kind == Type::Counter);
                out.push('\n');
            }
            Point::Histogram(h) => {
                pairs.clear();
                push_pairs(&mut pairs, consts, &s.labels);
                match (spelling, integral(h)) {
                    (Spelling::Client, Some((sum, count))) => {
                        client_histogram(out, f.name, &pairs, h, sum, count);
                    }
                    _ => classic_histogram(out, f.name, &pairs, h, format),
                }
            }
            Point::Summary(q) => {
                pairs.clear();
                push_pairs(&mut pairs, consts, &s.labels);
                summary(out, f.name, &pairs, q, format);
            }
        }
    }
}

/// `# HELP`, `# TYPE` and, in OpenMetrics, `# UNIT`; the type the family is declared as.
fn header(out: &mut String, f: &Family<'_>, format: Format) -> Type {
    let openmetrics = format == Format::OpenMetrics;
    let (name, kind) = if openmetrics {
        (f.openmetrics_name, f.openmetrics_type())
    } else {
        (f.name, f.kind)
    };
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    push_escaped(out, f.help, openmetrics);
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(match kind {
        Type::Counter => "counter",
        Type::Gauge => "gauge",
        Type::Histogram => "histogram",
        Type::Summary => "summary",
        Type::Unknown if openmetrics => "unknown",
        Type::Unknown => "untyped",
    });
    out.push('\n');
    if let (true, Some(unit)) = (openmetrics, f.unit) {
        out.push_str("# UNIT ");
        out.push_str(name);
        out.push(' ');
        out.push_str(unit);
        out.push('\n');
    }
    kind
}

/// A sample value in `spelling`; `counter`: the value of an OpenMetrics counter.
fn push_number(out: &mut String, v: f64, spelling: Spelling, counter: bool) {
    match spelling {
        Spelling::Classic => push_value(out, v),
        Spelling::Client => match whole(v) {
            Some(n) if !counter || n >= 0 => {
                let _ = write!(out, "{n}");
            }
            _ => out.push_str(dtoa::Buffer::new().format(v)),
        },
    }
}

/// The one place a bucket bound becomes `le` text: as its author wrote it (external), `+Inf`,
/// or the number in `spelling`. Writes the label value only, unquoted.
fn push_le(out: &mut String, b: &Bucket<'_>, spelling: Spelling) {
    match b.text {
        Some(text) => push_escaped(out, text, true),
        None if b.bound == f64::INFINITY => out.push_str("+Inf"),
        None => match spelling {
            Spelling::Classic => {
                let _ = write!(out, "{}", b.bound);
            }
            Spelling::Client => out.push_str(dtoa::Buffer::new().format(b.bound)),
        },
    }
}

/// A histogram in [`Spelling::Classic`]: buckets (`le` last), `_sum` and `_count` as given
/// (OpenMetrics 1.0 allows `_count` only beside `_sum`).
fn classic_histogram(out: &mut String, name: &str, pairs: &str, h: &Histogram<'_>, format: Format) {
    for b in &h.buckets {
        line_start(out, name, "_bucket");
        open_own(out, pairs);
        out.push_str("le=\"");
        push_le(out, b, Spelling::Classic);
        out.push_str("\"} ");
        push_value(out, b.count);
        out.push('\n');
    }
    totals(out, name, pairs, h.sum, h.count, format);
}

/// A histogram in [`Spelling::Client`]: `_sum`, `_count`, then buckets with `le` first.
fn client_histogram(
    out: &mut String,
    name: &str,
    pairs: &str,
    h: &Histogram<'_>,
    sum: f64,
    count: u64,
) {
    line_start(out, name, "_sum");
    push_block(out, pairs);
    out.push(' ');
    out.push_str(dtoa::Buffer::new().format(sum));
    out.push('\n');
    line_start(out, name, "_count");
    push_block(out, pairs);
    let _ = writeln!(out, " {count}");
    for b in &h.buckets {
        line_start(out, name, "_bucket");
        out.push_str("{le=\"");
        push_le(out, b, Spelling::Client);
        out.push('"');
        if !pairs.is_empty() {
            out.push(',');
            out.push_str(pairs);
        }
        // Whole and non-negative: `integral` has checked every count.
        let _ = writeln!(out, "}} {}", b.count as u64);
    }
}

/// A summary (always [`Spelling::Classic`]): quantiles (`quantile` last), `_sum`, `_count`.
fn summary(out: &mut String, name: &str, pairs: &str, q: &SummaryPoint<'_>, format: Format) {
    for (quantile, v) in &q.quantiles {
        line_start(out, name, "");
        open_own(out, pairs);
        out.push_str("quantile=\"");
        push_escaped(out, quantile, true);
        out.push_str("\"} ");
        push_value(out, *v);
        out.push('\n');
    }
    totals(out, name, pairs, q.sum, q.count, format);
}

/// A histogram's or summary's `_sum` and `_count` lines in [`Spelling::Classic`]. OpenMetrics
/// 1.0 allows `_count` only beside `_sum`; the classic format writes what the source gave.
fn totals(
    out: &mut String,
    name: &str,
    pairs: &str,
    sum: Option<f64>,
    count: Option<f64>,
    format: Format,
) {
    let count = count.filter(|_| format == Format::Text || sum.is_some());
    for (suffix, v) in [("_sum", sum), ("_count", count)] {
        if let Some(v) = v {
            line_start(out, name, suffix);
            push_block(out, pairs);
            out.push(' ');
            push_value(out, v);
            out.push('\n');
        }
    }
}

fn line_start(out: &mut String, name: &str, suffix: &str) {
    out.push_str(name);
    out.push_str(suffix);
}

/// `{pairs}`, or nothing for no pairs.
fn push_block(out: &mut String, pairs: &str) {
    if !pairs.is_empty() {
        out.push('{');
        out.push_str(pairs);
        out.push('}');
    }
}

/// `{pairs,` (or `{`), before a point's own label.
fn open_own(out: &mut String, pairs: &str) {
    out.push('{');
    out.push_str(pairs);
    if !pairs.is_empty() {
        out.push(',');
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
