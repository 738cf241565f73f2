//! Families from outside the catalog: workload, quality and job metrics that workloads write as
//! textfiles (and that the simulator plays in simulation mode), served beside the catalog's
//! families.
//!
//! Their names are the workloads' (docs/workloads.md), so they cannot be [`Metric`] rows. A
//! source returns them in its [`PollOutput`](crate::PollOutput); the store keeps the latest
//! output per source and serves it only while that source is up, exactly like its catalog
//! samples.
//!
//! The encoders convert them into the same family model as the catalog's series (`family.rs`),
//! after the catalog families, by source; the first source to serve a family name wins. In
//! OpenMetrics a counter's family is named without `_total`; a counter whose name does not end
//! in `_total` cannot be written as an OpenMetrics counter with the same sample name, so it is
//! declared `unknown` there.
//!
//! [`Metric`]: crate::Metric

use std::sync::Arc;

/// Type of an external family, as declared on its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExternalKind {
    /// Monotonic total.
    Counter,
    /// Value that goes up and down.
    Gauge,
    /// `_bucket{le}`, `_sum`, `_count` samples.
    Histogram,
    /// `{quantile}`, `_sum`, `_count` samples.
    Summary,
    /// No declared type (`untyped`; OpenMetrics `unknown`).
    Untyped,
}

impl ExternalKind {
    /// The type name in the classic text format.
    pub fn as_str(self) -> &'static str {
        match self {
            ExternalKind::Counter => "counter",
            ExternalKind::Gauge => "gauge",
            ExternalKind::Histogram => "histogram",
            ExternalKind::Summary => "summary",
            ExternalKind::Untyped => "untyped",
        }
    }

    /// Parses a classic `# TYPE` type name.
    pub fn parse(s: &str) -> Option<ExternalKind> {
        Some(match s {
            "counter" => ExternalKind::Counter,
            "gauge" => ExternalKind::Gauge,
            "histogram" => ExternalKind::Histogram,
            "summary" => ExternalKind::Summary,
            "untyped" => ExternalKind::Untyped,
            _ => return None,
        })
    }

    /// The sample-name suffixes a family of this kind may use besides its bare name.
    pub fn suffixes(self) -> &'static [&'static str] {
        match self {
            ExternalKind::Histogram => &["_bucket", "_sum", "_count"],
            ExternalKind::Summary => &["", "_sum", "_count"],
            _ => &[""],
        }
    }
}

/// The label pairs of an external sample, in the order they were given. Shared and immutable:
/// a clone of a sample is a few reference counts, and a reader may intern the names and values
/// it repeats (the textfile source does), so a family costs about its text size in memory.
pub type ExternalLabels = Arc<[(Arc<str>, Arc<str>)]>;

/// One series of an external family.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalSample {
    /// Full sample name (e.g. `..._bucket` for a histogram bucket).
    pub name: Arc<str>,
    /// Label pairs in the order they were given.
    pub labels: ExternalLabels,
    /// The value.
    pub value: f64,
}

impl ExternalSample {
    /// A sample from owned or borrowed strings.
    pub fn new<K, V>(
        name: impl Into<Arc<str>>,
        labels: impl IntoIterator<Item = (K, V)>,
        value: f64,
    ) -> ExternalSample
    where
        K: Into<Arc<str>>,
        V: Into<Arc<str>>,
    {
        ExternalSample {
            name: name.into(),
            labels: labels
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            value,
        }
    }

    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| &**v)
    }
}

/// One external family: a `# TYPE` block with its samples.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalFamily {
    /// Family name (for a histogram or summary, without the `_bucket`/`_sum`/`_count` suffix).
    pub name: String,
    /// Help text (unescaped).
    pub help: String,
    /// Declared type.
    pub kind: ExternalKind,
    /// The series, in the order they are to be written.
    pub samples: Vec<ExternalSample>,
}

/// The external families of one source, as of its latest successful poll.
pub type ExternalFamilies = Arc<Vec<ExternalFamily>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{encode, EncodeOptions, ExpositionInput, Format};
    use crate::snapshot::{Snapshot, SourceHealth};

    fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> ExternalSample {
        ExternalSample::new(name, labels.iter().copied(), value)
    }

    fn families() -> ExternalFamilies {
        Arc::new(vec![
            ExternalFamily {
                name: "jobs_done_total".into(),
                help: "Jobs \"done\"\\n".into(),
                kind: ExternalKind::Counter,
                samples: vec![sample("jobs_done_total", &[("model", "a\"b")], 3.0)],
            },
            ExternalFamily {
                name: "legacy_count".into(),
                help: "A counter without _total.".into(),
                kind: ExternalKind::Counter,
                samples: vec![sample("legacy_count", &[], 1.0)],
            },
            ExternalFamily {
                name: "lat_seconds".into(),
                help: "Latency.".into(),
                kind: ExternalKind::Histogram,
                samples: vec![
                    sample("lat_seconds_bucket", &[("le", "0.2")], 4.0),
                    sample("lat_seconds_bucket", &[("le", "+Inf")], 5.0),
                    sample("lat_seconds_sum", &[], 0.9),
                    sample("lat_seconds_count", &[], 5.0),
                ],
            },
            ExternalFamily {
                name: "free".into(),
                help: "Untyped.".into(),
                kind: ExternalKind::Untyped,
                samples: vec![sample("free", &[], f64::NAN)],
            },
        ])
    }

    fn snapshot(source: &str, up: bool, external: ExternalFamilies) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            source: source.into(),
            health: SourceHealth {
                up,
                ..Default::default()
            },
            output: crate::PollOutput {
                external,
                ..Default::default()
            },
        })
    }

    /// The exposition of `snapshots` (their health series included).
    fn exposition(snapshots: Vec<Arc<Snapshot>>, consts: &[(&str, &str)], f: Format) -> String {
        let const_labels = consts
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let input = ExpositionInput {
            statics: Arc::new(vec![]),
            snapshots,
            options: Arc::new(EncodeOptions { const_labels }),
        };
        encode(&input, f)
    }

    #[test]
    fn text_keeps_names_and_types() {
        let snaps = vec![snapshot("textfile", true, families())];
        let out = exposition(snaps, &[("node", "n1")], Format::Text);
        assert!(out.contains("\n# HELP jobs_done_total Jobs \"done\"\\\\n\n# TYPE jobs_done_total counter\njobs_done_total{node=\"n1\",model=\"a\\\"b\"} 3\n"), "{out}");
        assert!(out.contains("# TYPE legacy_count counter\nlegacy_count{node=\"n1\"} 1\n"));
        assert!(out.contains("# TYPE lat_seconds histogram\nlat_seconds_bucket{node=\"n1\",le=\"0.2\"} 4\nlat_seconds_bucket{node=\"n1\",le=\"+Inf\"} 5\nlat_seconds_sum{node=\"n1\"} 0.9\nlat_seconds_count{node=\"n1\"} 5\n"));
        assert!(
            out.ends_with("# TYPE free untyped\nfree{node=\"n1\"} NaN\n"),
            "{out}"
        );
        // After the catalog's families.
        assert!(out.find("dgx_pixels_source_up") < out.find("jobs_done_total"));
    }

    /// prometheus-client writes HELP before TYPE and the histogram's sum and count before its
    /// buckets; the families are the same as the small writer's.
    #[test]
    fn openmetrics_names_counter_families_without_total_and_keeps_eof_last() {
        let snaps = vec![snapshot("textfile", true, families())];
        let out = exposition(snaps, &[], Format::OpenMetrics);
        assert!(out.contains("# HELP jobs_done Jobs \\\"done\\\"\\\\n\n# TYPE jobs_done counter\njobs_done_total{model=\"a\\\"b\"} 3\n"), "{out}");
        assert!(out.contains("# TYPE legacy_count unknown\nlegacy_count 1\n"));
        assert!(out.contains("# TYPE lat_seconds histogram\nlat_seconds_sum 0.9\nlat_seconds_count 5\nlat_seconds_bucket{le=\"0.2\"} 4\nlat_seconds_bucket{le=\"+Inf\"} 5\n"), "{out}");
        assert!(out.contains("# TYPE free unknown\n"));
        assert!(out.ends_with("free NaN\n# EOF\n"));
        assert_eq!(out.matches("# EOF").count(), 1);
    }

    #[test]
    fn a_down_source_serves_no_external_families_and_duplicates_are_dropped() {
        let down = exposition(
            vec![snapshot("textfile", false, families())],
            &[],
            Format::Text,
        );
        assert!(!down.contains("jobs_done"), "{down}");
        let twice = exposition(
            vec![
                snapshot("a", true, families()),
                snapshot("b", true, families()),
            ],
            &[],
            Format::Text,
        );
        assert_eq!(twice.matches("# TYPE lat_seconds ").count(), 1);
    }

    /// Issue 15: a textfile's 1e-300 was written as a 302-character decimal.
    #[test]
    fn values_are_written_short_in_both_formats_issue_15() {
        let f = Arc::new(vec![ExternalFamily {
            name: "tiny".into(),
            help: "h".into(),
            kind: ExternalKind::Gauge,
            samples: vec![
                sample("tiny", &[], 1e-300),
                sample("tiny", &[("a", "b")], f64::NAN),
            ],
        }]);
        for format in [Format::Text, Format::OpenMetrics] {
            let out = exposition(vec![snapshot("t", true, f.clone())], &[], format);
            assert!(out.contains("\ntiny 1e-300\ntiny{a=\"b\"} NaN\n"), "{out}");
        }
    }

    #[test]
    fn samples_carrying_a_constant_label_are_skipped() {
        let f = Arc::new(vec![ExternalFamily {
            name: "g".into(),
            help: "h".into(),
            kind: ExternalKind::Gauge,
            samples: vec![
                sample("g", &[("node", "other")], 1.0),
                sample("g", &[("a", "b")], 2.0),
            ],
        }]);
        for format in [Format::Text, Format::OpenMetrics] {
            let out = exposition(
                vec![snapshot("t", true, f.clone())],
                &[("node", "n")],
                format,
            );
            assert!(!out.contains("other"));
            assert!(out.contains("g{node=\"n\",a=\"b\"} 2\n"), "{out}");
        }
    }
}
