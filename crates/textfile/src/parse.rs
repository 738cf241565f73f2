//! A strict parser of the Prometheus text format 0.0.4, as node_exporter's textfile collector
//! accepts it, with errors that name the line.
//!
//! Strict where a mistake would otherwise be served: client timestamps, duplicate series,
//! duplicate or reserved label names, bad escapes, a `# TYPE` after the family's samples or
//! twice, negative or NaN counters, histograms without a `+Inf` bucket or with decreasing
//! buckets, and anything after the value are errors. CRLF line ends and `#` comments are fine.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use dgx_pixels_metrics::{ExternalFamily, ExternalKind, ExternalSample};

/// Why a file was rejected: the 1-based line (0 when it concerns the whole file) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number, 0 for a whole-file problem.
    pub line: usize,
    /// What is wrong, in one line.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: {}", self.line, self.message)
        } else {
            f.write_str(&self.message)
        }
    }
}

impl std::error::Error for ParseError {}

fn err<T>(line: usize, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        message: message.into(),
    })
}

/// Whether `s` is a valid metric name.
pub fn is_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Whether `s` is a valid label name that a user may set (not `__`-prefixed).
pub fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("__")
}

/// Parses a float the way Prometheus does (`+Inf`, `-Inf`, `NaN` included).
fn parse_float(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        // A finite literal too large for an f64 is an error in Prometheus' parsers (and in
        // promtool), not infinity.
        _ if s.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) => {
            s.parse().ok().filter(|v: &f64| v.is_finite())
        }
        _ => None,
    }
}

struct Builder {
    family: ExternalFamily,
    help_set: bool,
    typed: bool,
    first_line: usize,
}

/// The families of one file, in the order they first appear.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// Families with at least one sample.
    pub families: Vec<ExternalFamily>,
    /// Names of the families whose `# HELP` was given in the file (others have a default help).
    pub helped: HashSet<String>,
}

/// Parses one file's text; `default_help` is used for families without `# HELP`.
pub fn parse(text: &str, default_help: &str) -> Result<Parsed, ParseError> {
    let mut builders: Vec<Builder> = Vec::new();
    let mut index: HashMap<Arc<str>, usize> = HashMap::new();
    // Series seen so far, as a hash and where the sample is (not a copy of it).
    let mut series: SeriesIndex<(u32, u32)> = SeriesIndex::default();
    let mut strings = Interner::default();
    let mut scratch = Vec::new();

    for (i, raw) in text.split('\n').enumerate() {
        let n = i + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let trimmed = line.trim_start_matches([' ', '\t']);
        if trimmed.trim_end().is_empty() {
            continue;
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            let comment = comment.trim_start_matches([' ', '\t']);
            let (keyword, rest) = split_token(comment);
            if keyword != "HELP" && keyword != "TYPE" {
                continue; // an ordinary comment
            }
            let (name, rest) = split_token(rest);
            if !is_metric_name(name) {
                return err(
                    n,
                    format!("{keyword} line with invalid metric name {name:?}"),
                );
            }
            let at = match index.get(name) {
                Some(&at) => at,
                None => {
                    builders.push(Builder {
                        family: ExternalFamily {
                            name: name.to_string(),
                            help: default_help.to_string(),
                            kind: ExternalKind::Untyped,
                            samples: Vec::new(),
                        },
                        help_set: false,
                        typed: false,
                        first_line: n,
                    });
                    index.insert(Arc::from(name), builders.len() - 1);
                    builders.len() - 1
                }
            };
            let b = &mut builders[at];
            if keyword == "HELP" {
                if b.help_set {
                    return err(n, format!("second HELP line for {name}"));
                }
                b.family.help = unescape_help(rest).map_err(|m| ParseError {
                    line: n,
                    message: m,
                })?;
                b.help_set = true;
            } else {
                let kind_name = rest.trim_end_matches([' ', '\t']);
                let Some(kind) = ExternalKind::parse(kind_name) else {
                    return err(n, format!("unknown type {kind_name:?} for {name}"));
                };
                if b.typed {
                    return err(n, format!("second TYPE line for {name}"));
                }
                if !b.family.samples.is_empty() {
                    return err(n, format!("TYPE line for {name} after its samples"));
                }
                if let Some(why) = openmetrics_name_problem(name, kind) {
                    return err(n, why);
                }
                b.family.kind = kind;
                b.typed = true;
            }
            continue;
        }

        let sample = parse_sample(trimmed, &mut strings, &mut scratch).map_err(|m| ParseError {
            line: n,
            message: m,
        })?;
        // Which family: a declared histogram/summary takes its suffixed samples.
        let mut family_at = None;
        for (suffix, kinds) in [
            ("_bucket", &[ExternalKind::Histogram][..]),
            (
                "_sum",
                &[ExternalKind::Histogram, ExternalKind::Summary][..],
            ),
            (
                "_count",
                &[ExternalKind::Histogram, ExternalKind::Summary][..],
            ),
        ] {
            if let Some(base) = sample.name.strip_suffix(suffix) {
                if let Some(&at) = index.get(base) {
                    if builders[at].typed && kinds.contains(&builders[at].family.kind) {
                        family_at = Some(at);
                    }
                }
            }
        }
        let at = match family_at.or_else(|| index.get(&*sample.name).copied()) {
            Some(at) => at,
            None => {
                builders.push(Builder {
                    family: ExternalFamily {
                        name: sample.name.to_string(),
                        help: default_help.to_string(),
                        kind: ExternalKind::Untyped,
                        samples: Vec::new(),
                    },
                    help_set: false,
                    typed: false,
                    first_line: n,
                });
                index.insert(sample.name.clone(), builders.len() - 1);
                builders.len() - 1
            }
        };
        let fam = &mut builders[at].family;
        if fam.kind == ExternalKind::Histogram && *sample.name == *fam.name {
            return err(
                n,
                format!(
                    "histogram {} takes only _bucket, _sum and _count samples",
                    fam.name
                ),
            );
        }
        check_kind(fam.kind, &fam.name, &sample).map_err(|m| ParseError {
            line: n,
            message: m,
        })?;
        let hash = identity_hash(&sample);
        let here = (at as u32, fam.samples.len() as u32);
        let duplicate = series.insert(hash, here, |(f, i)| {
            same_series(&builders[f as usize].family.samples[i as usize], &sample)
        });
        if duplicate.is_some() {
            return err(n, format!("duplicate series {}", describe(&sample)));
        }
        builders[at].family.samples.push(sample);
    }

    let mut helped = HashSet::new();
    let mut families = Vec::with_capacity(builders.len());
    for mut b in builders {
        if b.family.samples.is_empty() {
            continue;
        }
        // Kept for as long as the file is unchanged: no spare capacity.
        b.family.samples.shrink_to_fit();
        let checked = match b.family.kind {
            ExternalKind::Histogram => check_histogram(&b.family),
            ExternalKind::Summary => check_summary(&b.family),
            _ => Ok(()),
        };
        checked.map_err(|m| ParseError {
            line: b.first_line,
            message: m,
        })?;
        if b.help_set {
            helped.insert(b.family.name.clone());
        }
        families.push(b.family);
    }
    Ok(Parsed { families, helped })
}

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

/// The identity of a series as Prometheus stores it: the name and the labels sorted, without
/// the labels whose value is empty (Prometheus drops those, so `x{a=""}` and `x` are one series).
pub fn series_identity<'a>(
    name: &'a str,
    labels: &'a [(Arc<str>, Arc<str>)],
) -> (&'a str, Vec<(&'a str, &'a str)>) {
    let mut l: Vec<(&str, &str)> = labels
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (&**k, &**v))
        .collect();
    l.sort_unstable();
    (name, l)
}

/// A hash of [`series_identity`] without building it: label names are unique within a series,
/// so the pairs' hashes are summed in any order.
pub fn identity_hash(s: &ExternalSample) -> u64 {
    let one = |x: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        x(&mut h);
        h.finish()
    };
    s.labels
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| {
            one(&|h| {
                k.hash(h);
                v.hash(h);
            })
        })
        .fold(one(&|h| s.name.hash(h)), u64::wrapping_add)
}

/// Whether two samples are one series for Prometheus.
pub fn same_series(a: &ExternalSample, b: &ExternalSample) -> bool {
    a.name == b.name && series_identity(&a.name, &a.labels) == series_identity(&b.name, &b.labels)
}

/// A set of series that holds a hash and a locator per series, not a copy of it: a file's
/// series cost 16 bytes each to check for duplicates. Locators of equal hashes are compared
/// with the caller's `same`, so a hash collision is never taken for a duplicate.
#[derive(Debug)]
pub struct SeriesIndex<T> {
    first: HashMap<u64, T>,
    /// Further series whose hash collides with one in `first` (all but never).
    more: Vec<(u64, T)>,
}

impl<T> Default for SeriesIndex<T> {
    fn default() -> Self {
        SeriesIndex {
            first: HashMap::new(),
            more: Vec::new(),
        }
    }
}

impl<T: Copy> SeriesIndex<T> {
    /// The series equal (`same`) to one with this hash, if there is one.
    pub fn find(&self, hash: u64, mut same: impl FnMut(T) -> bool) -> Option<T> {
        let first = self.first.get(&hash).copied().filter(|t| same(*t));
        first.or_else(|| {
            self.more
                .iter()
                .find(|(h, t)| *h == hash && same(*t))
                .map(|(_, t)| *t)
        })
    }

    /// Adds the series at `at` unless an equal one (`same`) is there: then returns that one.
    pub fn insert(&mut self, hash: u64, at: T, mut same: impl FnMut(T) -> bool) -> Option<T> {
        match self.first.entry(hash) {
            Entry::Vacant(e) => {
                e.insert(at);
                None
            }
            Entry::Occupied(e) => {
                let prev = *e.get();
                if same(prev) {
                    return Some(prev);
                }
                if let Some(&(_, t)) = self.more.iter().find(|(h, t)| *h == hash && same(*t)) {
                    return Some(t);
                }
                self.more.push((hash, at));
                None
            }
        }
    }
}

/// Interns the strings a file repeats (sample names, label names and values): each distinct
/// string is stored once, however many samples use it.
#[derive(Default)]
struct Interner(HashSet<Arc<str>>);

impl Interner {
    fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.0.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.0.insert(a.clone());
        a
    }
}

fn describe(s: &ExternalSample) -> String {
    let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{}{{{}}}", s.name, labels.join(","))
}

fn check_kind(kind: ExternalKind, family: &str, s: &ExternalSample) -> Result<(), String> {
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
fn check_histogram(f: &ExternalFamily) -> Result<(), String> {
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
fn check_summary(f: &ExternalFamily) -> Result<(), String> {
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

fn split_token(s: &str) -> (&str, &str) {
    match s.find([' ', '\t']) {
        Some(i) => (&s[..i], s[i..].trim_start_matches([' ', '\t'])),
        None => (s, ""),
    }
}

fn unescape_help(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\0' {
            return Err(
                "HELP contains a NUL byte (some Prometheus versions fail the whole scrape on it)"
                    .into(),
            );
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            other => {
                return Err(format!(
                    "invalid escape sequence \\{} in HELP",
                    other.unwrap_or(' ')
                ))
            }
        }
    }
    Ok(out)
}

/// Parses `name{labels} value`; anything else on the line (a timestamp included) is an error.
fn parse_sample(
    line: &str,
    strings: &mut Interner,
    labels: &mut Vec<(Arc<str>, Arc<str>)>,
) -> Result<ExternalSample, String> {
    let end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..end];
    if !is_metric_name(name) {
        return Err(format!("invalid metric name at {:?}", truncate(line)));
    }
    let mut rest = &line[end..];
    labels.clear();
    let after_name = rest.trim_start_matches([' ', '\t']);
    if let Some(body) = after_name.strip_prefix('{') {
        rest = parse_labels(body, strings, labels)?;
    } else if rest.len() == after_name.len() && !rest.is_empty() {
        return Err(format!("invalid character after metric name {name}"));
    }
    let rest = rest.trim_start_matches([' ', '\t']);
    let (value, tail) = split_token(rest);
    if value.is_empty() {
        return Err(format!("{name} has no value"));
    }
    let Some(value) = parse_float(value) else {
        return Err(format!("{name} has an invalid value {value:?}"));
    };
    let tail = tail.trim_end_matches([' ', '\t']);
    if !tail.is_empty() {
        return Err(if tail.parse::<i64>().is_ok() {
            format!("{name} has a timestamp; textfiles must not carry timestamps")
        } else {
            format!("unexpected {tail:?} after the value of {name}")
        });
    }
    Ok(ExternalSample {
        name: strings.get(name),
        labels: Arc::from(&labels[..]),
        value,
    })
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Parses `k="v",...}` into `labels` (interned) and returns what follows the closing brace.
fn parse_labels<'a>(
    mut s: &'a str,
    strings: &mut Interner,
    labels: &mut Vec<(Arc<str>, Arc<str>)>,
) -> Result<&'a str, String> {
    // Label names given so far, once there are too many for a linear scan (a hostile line may
    // have thousands: a scan per label would be quadratic).
    let mut seen: HashSet<Arc<str>> = HashSet::new();
    let mut value = String::new();
    loop {
        s = s.trim_start_matches([' ', '\t']);
        if let Some(rest) = s.strip_prefix('}') {
            return Ok(rest);
        }
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        let key = &s[..end];
        if !is_label_name(key) {
            return Err(format!("invalid label name {key:?}"));
        }
        let twice = if labels.len() < 16 {
            labels.iter().any(|(k, _)| &**k == key)
        } else {
            if seen.is_empty() {
                seen.extend(labels.iter().map(|(k, _)| k.clone()));
            }
            seen.contains(key)
        };
        if twice {
            return Err(format!("label {key} given twice"));
        }
        s = s[end..].trim_start_matches([' ', '\t']);
        let Some(rest) = s.strip_prefix('=') else {
            return Err(format!("expected = after label name {key}"));
        };
        s = rest.trim_start_matches([' ', '\t']);
        let Some(rest) = s.strip_prefix('"') else {
            return Err(format!("label {key}: value must be quoted"));
        };
        value.clear();
        let mut chars = rest.char_indices();
        let mut closed = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    closed = Some(i + 1);
                    break;
                }
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    other => {
                        return Err(format!(
                            "label {key}: invalid escape sequence \\{}",
                            other.unwrap_or(' ')
                        ))
                    }
                },
                '\0' => {
                    return Err(format!(
                        "label {key}: value contains a NUL byte (some Prometheus versions fail the whole scrape on it)"
                    ))
                }
                c => value.push(c),
            }
        }
        let Some(after) = closed else {
            return Err(format!("label {key}: unterminated value"));
        };
        let key = strings.get(key);
        if !seen.is_empty() {
            seen.insert(key.clone());
        }
        labels.push((key.clone(), strings.get(&value)));
        s = rest[after..].trim_start_matches([' ', '\t']);
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err(format!("expected , or }} after label {key}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Vec<ExternalFamily> {
        parse(text, "default").unwrap().families
    }

    fn fails(text: &str) -> ParseError {
        parse(text, "default").unwrap_err()
    }

    #[test]
    fn parses_every_type_with_help_labels_and_escapes() {
        let text = "# A comment\n\
            # HELP jobs_total Jobs done\\nby \\\\ model.\n\
            # TYPE jobs_total counter\n\
            jobs_total{model=\"a \\\"b\\\"\\n\",lora=\"\"} 3\n\
            \n\
            # TYPE lat_seconds histogram\n\
            lat_seconds_bucket{le=\"0.1\"} 1\n\
            lat_seconds_bucket{le=\"0.2\"} 4\n\
            lat_seconds_bucket{le=\"+Inf\"} 5\n\
            lat_seconds_sum 0.9\n\
            lat_seconds_count 5\n\
            # TYPE rpc summary\n\
            rpc{quantile=\"0.5\"} NaN\n\
            rpc_sum 0\n\
            rpc_count 0\n\
            # TYPE temp gauge\n\
            temp{a=\"1\",} -4.5e1\r\n\
            free_form +Inf\n";
        let f = ok(text);
        let names: Vec<_> = f.iter().map(|f| (f.name.as_str(), f.kind)).collect();
        assert_eq!(
            names,
            [
                ("jobs_total", ExternalKind::Counter),
                ("lat_seconds", ExternalKind::Histogram),
                ("rpc", ExternalKind::Summary),
                ("temp", ExternalKind::Gauge),
                ("free_form", ExternalKind::Untyped),
            ]
        );
        assert_eq!(f[0].help, "Jobs done\nby \\ model.");
        assert_eq!(
            f[0].samples[0].labels[..],
            [
                (Arc::from("model"), Arc::from("a \"b\"\n")),
                (Arc::from("lora"), Arc::from(""))
            ]
        );
        assert_eq!(f[1].samples.len(), 5);
        assert!(f[2].samples[0].value.is_nan());
        assert_eq!(f[3].samples[0].value, -45.0);
        assert_eq!(f[4].samples[0].value, f64::INFINITY);
        assert_eq!(f[4].help, "default");
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("a 1\nb 2 1700000000\n", 2, "timestamp"),
            ("a 1\na 2\n", 2, "duplicate series"),
            ("a{x=\"1\",x=\"2\"} 1\n", 1, "given twice"),
            ("a{__x=\"1\"} 1\n", 1, "invalid label name"),
            ("a{x=1} 1\n", 1, "quoted"),
            ("a{x=\"\\t\"} 1\n", 1, "escape"),
            ("a{x=\"1\" 1\n", 1, "expected , or }"),
            ("a{x=\"1} 1\n", 1, "unterminated"),
            ("a one\n", 1, "invalid value"),
            ("a\n", 1, "no value"),
            ("1a 1\n", 1, "invalid metric name"),
            ("a 1\n# TYPE a gauge\n", 2, "after its samples"),
            ("# TYPE a gauge\n# TYPE a gauge\n", 2, "second TYPE"),
            ("# HELP a x\n# HELP a y\n", 2, "second HELP"),
            ("# TYPE a thing\n", 1, "unknown type"),
            ("# TYPE c_total counter\nc_total -1\n", 2, ">= 0"),
            ("# TYPE c_total counter\nc_total NaN\n", 2, ">= 0"),
            ("# TYPE h histogram\nh_bucket 1\n", 2, "no le label"),
            (
                "# TYPE h histogram\nh_bucket{le=\"x\"} 1\n",
                2,
                "invalid le",
            ),
            ("# TYPE h histogram\nh 1\n", 2, "only _bucket"),
            ("# TYPE s summary\ns 1\n", 2, "no quantile"),
            (
                "# TYPE s summary\ns{quantile=\"2\"} 1\n",
                2,
                "invalid quantile",
            ),
            ("a 1 extra\n", 1, "unexpected"),
            ("# HELP a bad \\t escape\n", 1, "escape"),
        ];
        for (text, line, what) in cases {
            let e = fails(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(what), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("line {line}: ")));
        }
    }

    /// Issue 15, item 2: families that are valid text format 0.0.4 but would be invalid (or
    /// change meaning) once written as OpenMetrics are refused, each with its line.
    #[test]
    fn families_invalid_in_openmetrics_are_refused_issue_15() {
        let cases = [
            // `# TYPE  counter`: an empty OpenMetrics family name fails the whole scrape.
            ("# TYPE _total counter\n_total 1\n", 1, "OpenMetrics family name"),
            // Its created-timestamp name would hide a summary's own samples.
            (
                "# TYPE rpc_created summary\nrpc_created{quantile=\"0.5\"} 1\n",
                1,
                "_created",
            ),
            // Prometheus drops empty labels: these are one series.
            ("e{x=\"\"} 1\ne 2\n", 2, "duplicate series"),
            ("e 1\ne{x=\"\",y=\"\"} 2\n", 2, "duplicate series"),
            // le and quantile are normalized (1 and 1.0 are one series).
            (
                "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"1.0\"} 1\nh_bucket{le=\"+Inf\"} 1\n",
                1,
                "two buckets with le 1",
            ),
            (
                "# TYPE s summary\ns{quantile=\"0.5\"} 1\ns{quantile=\".5\"} 1\n",
                1,
                "two samples with quantile 0.5",
            ),
            // A finite literal out of range is an error for Prometheus' parsers.
            ("big 1e400\n", 1, "invalid value"),
            (
                "# TYPE h histogram\nh_bucket{le=\"1e999\"} 1\n",
                2,
                "invalid le",
            ),
            // NUL bytes end the input for some Prometheus lexers.
            ("n{x=\"a\0b\"} 1\n", 1, "NUL"),
            ("# HELP n a\0b\nn 1\n", 1, "NUL"),
            // A _sum or _count without buckets is no histogram.
            (
                "# TYPE h histogram\nh_sum 1\n",
                1,
                "without buckets",
            ),
            (
                "# TYPE h histogram\nh_bucket{le=\"+Inf\",a=\"1\"} 1\nh_count{a=\"2\"} 1\n",
                1,
                "without buckets",
            ),
        ];
        for (text, line, what) in cases {
            let e = fails(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(what), "{text:?}: {e}");
        }
        // Still fine: a counter named like its stem with more before _total, an empty label in
        // one of two different series, a histogram whose buckets carry empty labels.
        ok("# TYPE a_total counter\na_total 1\n");
        ok("e{x=\"\"} 1\ne{x=\"1\"} 2\n");
        ok("# TYPE h histogram\nh_bucket{le=\"+Inf\",a=\"\"} 1\nh_count 1\n");
    }

    #[test]
    fn histograms_must_be_complete_and_cumulative() {
        let no_inf = "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\n";
        assert!(fails(no_inf).message.contains("+Inf"));
        let decreasing =
            "# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"2\"} 2\nh_bucket{le=\"+Inf\"} 3\n";
        assert!(fails(decreasing).message.contains("decrease"));
        let count =
            "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n";
        assert!(fails(count).message.contains("_count 3 differs"));
        // Buckets of different label sets are checked separately, in any order.
        let two = "# TYPE h histogram\n\
            h_bucket{m=\"a\",le=\"+Inf\"} 2\nh_bucket{m=\"a\",le=\"1\"} 1\n\
            h_bucket{m=\"b\",le=\"1\"} 5\nh_bucket{m=\"b\",le=\"+Inf\"} 5\nh_count{m=\"b\"} 5\n";
        assert_eq!(ok(two)[0].samples.len(), 5);
    }

    #[test]
    fn suffixed_names_without_a_declared_type_are_families_of_their_own() {
        let f = ok("x_count 1\nx_sum 2\n");
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].kind, ExternalKind::Untyped);
    }
}
