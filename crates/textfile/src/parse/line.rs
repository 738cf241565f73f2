//! Lexing one line: metric and label names, label sets with their escapes, values the way
//! Prometheus parses them, `# HELP` text, and the interning of repeated strings.
//!
//! Separate because it is the text format's syntax only; what the samples mean together is
//! decided elsewhere.

use std::collections::HashSet;
use std::sync::Arc;

use dgx_pixels_metrics::ExternalSample;

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
pub(super) fn parse_float(s: &str) -> Option<f64> {
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

/// Interns the strings a file repeats (sample names, label names and values): each distinct
/// string is stored once, however many samples use it.
#[derive(Default)]
pub(super) struct Interner(HashSet<Arc<str>>);

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

pub(super) fn split_token(s: &str) -> (&str, &str) {
    match s.find([' ', '\t']) {
        Some(i) => (&s[..i], s[i..].trim_start_matches([' ', '\t'])),
        None => (s, ""),
    }
}

pub(super) fn unescape_help(s: &str) -> Result<String, String> {
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
pub(super) fn parse_sample(
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
    // Label names given so far, once there are too many for a linear scan (see `given_twice`).
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
        if given_twice(labels, &mut seen, key) {
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
        let after = label_value(rest, key, &mut value)?;
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

/// Whether the label `key` is already in `labels`: a scan while there are few, a set of their
/// names past 16 (`seen`, filled on first need and kept up to date by the caller), since a
/// hostile line may have thousands and a scan per label would be quadratic.
fn given_twice(labels: &[(Arc<str>, Arc<str>)], seen: &mut HashSet<Arc<str>>, key: &str) -> bool {
    if labels.len() < 16 {
        labels.iter().any(|(k, _)| &**k == key)
    } else {
        if seen.is_empty() {
            seen.extend(labels.iter().map(|(k, _)| k.clone()));
        }
        seen.contains(key)
    }
}

/// Unescapes the quoted value of label `key` that `rest` starts (after its opening quote) into
/// `value`, and returns where its closing quote ends in `rest`.
fn label_value(rest: &str, key: &str, value: &mut String) -> Result<usize, String> {
    value.clear();
    let mut chars = rest.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok(i + 1),
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
    Err(format!("label {key}: unterminated value"))
}
