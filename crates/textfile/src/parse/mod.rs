//! A strict parser of the Prometheus text format 0.0.4, as node_exporter's textfile collector
//! accepts it, with errors that name the line.
//!
//! Strict where a mistake would otherwise be served: client timestamps, duplicate series,
//! duplicate or reserved label names, bad escapes, a `# TYPE` after the family's samples or
//! twice, negative or NaN counters, histograms without a `+Inf` bucket or with decreasing
//! buckets, and anything after the value are errors. CRLF line ends and `#` comments are fine.
//!
//! The parts: this module walks a file line by line and groups samples into families;
//! `line` lexes one line (names, labels, values, escapes); `series` says when two samples
//! are one series for Prometheus; `check` validates samples and whole families by type.
//! Everything public is re-exported here, so the paths stay `parse::*`.

mod check;
mod line;
mod series;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use dgx_pixels_metrics::{ExternalFamily, ExternalKind, ExternalSample};

pub use self::check::openmetrics_name_problem;
pub use self::line::{is_label_name, is_metric_name};
pub use self::series::{identity_hash, same_series, series_identity, SeriesIndex};

use self::check::{check_histogram, check_kind, check_summary};
use self::line::{parse_sample, split_token, unescape_help, Interner};
use self::series::describe;

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
    let mut families = Families::new(default_help);
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
            families.comment(comment, n)?;
            continue;
        }
        let sample = parse_sample(trimmed, &mut strings, &mut scratch).map_err(|m| ParseError {
            line: n,
            message: m,
        })?;
        families.sample(sample, n)?;
    }
    families.finish()
}

/// The families of a file being parsed, with what finds them: the index by name, and the
/// series seen so far as a hash and where the sample is (not a copy of it).
struct Families<'a> {
    builders: Vec<Builder>,
    index: HashMap<Arc<str>, usize>,
    series: SeriesIndex<(u32, u32)>,
    default_help: &'a str,
}

impl<'a> Families<'a> {
    fn new(default_help: &'a str) -> Families<'a> {
        Families {
            builders: Vec::new(),
            index: HashMap::new(),
            series: SeriesIndex::default(),
            default_help,
        }
    }

    /// A new, untyped family named `name`, first seen on line `n`; returns where it is.
    fn add(&mut self, name: Arc<str>, n: usize) -> usize {
        self.builders.push(Builder {
            family: ExternalFamily {
                name: name.to_string(),
                help: self.default_help.to_string(),
                kind: ExternalKind::Untyped,
                samples: Vec::new(),
            },
            help_set: false,
            typed: false,
            first_line: n,
        });
        self.index.insert(name, self.builders.len() - 1);
        self.builders.len() - 1
    }

    /// A comment line (after its `#`): a `# HELP` or `# TYPE` line sets its family's help or
    /// type, once, and a type only before the family's samples; other comments are ignored.
    fn comment(&mut self, comment: &str, n: usize) -> Result<(), ParseError> {
        let comment = comment.trim_start_matches([' ', '\t']);
        let (keyword, rest) = split_token(comment);
        if keyword != "HELP" && keyword != "TYPE" {
            return Ok(()); // an ordinary comment
        }
        let (name, rest) = split_token(rest);
        if !is_metric_name(name) {
            return err(
                n,
                format!("{keyword} line with invalid metric name {name:?}"),
            );
        }
        let at = match self.index.get(name) {
            Some(&at) => at,
            None => self.add(Arc::from(name), n),
        };
        let b = &mut self.builders[at];
        if keyword == "HELP" {
            if b.help_set {
                return err(n, format!("second HELP line for {name}"));
            }
            b.family.help = unescape_help(rest).map_err(|m| ParseError {
                line: n,
                message: m,
            })?;
            b.help_set = true;
            return Ok(());
        }
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
        Ok(())
    }

    /// The family a sample belongs to: a declared histogram or summary takes its suffixed
    /// samples, any other sample is its name's family (new when first seen).
    fn family_of(&mut self, sample: &ExternalSample, n: usize) -> usize {
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
                if let Some(&at) = self.index.get(base) {
                    let b = &self.builders[at];
                    if b.typed && kinds.contains(&b.family.kind) {
                        family_at = Some(at);
                    }
                }
            }
        }
        match family_at.or_else(|| self.index.get(&*sample.name).copied()) {
            Some(at) => at,
            None => self.add(sample.name.clone(), n),
        }
    }

    /// Adds the sample of line `n` to its family, when its type allows it and it is not a
    /// series seen before.
    fn sample(&mut self, sample: ExternalSample, n: usize) -> Result<(), ParseError> {
        let at = self.family_of(&sample, n);
        let fam = &self.builders[at].family;
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
        let builders = &self.builders;
        let duplicate = self.series.insert(hash, here, |(f, i)| {
            same_series(&builders[f as usize].family.samples[i as usize], &sample)
        });
        if duplicate.is_some() {
            return err(n, format!("duplicate series {}", describe(&sample)));
        }
        self.builders[at].family.samples.push(sample);
        Ok(())
    }

    /// The families with samples, each histogram and summary checked whole (an error names
    /// the family's first line).
    fn finish(self) -> Result<Parsed, ParseError> {
        let mut helped = HashSet::new();
        let mut families = Vec::with_capacity(self.builders.len());
        for mut b in self.builders {
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
