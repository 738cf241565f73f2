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
