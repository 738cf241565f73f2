//! Immutable per-source snapshots: what one poll of one source saw.

use std::time::{Duration, SystemTime};

use crate::catalog::Metric;
use crate::extra::ExtraSample;

/// One series value: a catalog metric, its label values (in the order of the metric's label
/// names) and the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The catalog row.
    pub metric: Metric,
    /// Label values, one per label name of the catalog row.
    pub labels: Vec<String>,
    /// The value in the metric's base unit.
    pub value: f64,
}

impl Sample {
    /// A sample of `metric` with the given label values.
    pub fn new<S: Into<String>>(
        metric: Metric,
        labels: impl IntoIterator<Item = S>,
        value: f64,
    ) -> Sample {
        Sample {
            metric,
            labels: labels.into_iter().map(Into::into).collect(),
            value,
        }
    }

    /// Whether the number of label values matches the catalog row (the encoders skip samples
    /// that do not, rather than emit a malformed series).
    pub fn is_well_formed(&self) -> bool {
        self.labels.len() == self.metric.def().labels.len()
    }
}

/// How a source is doing, as of its latest snapshot; rendered as the `dgx_pixels_source_*`
/// self-metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceHealth {
    /// The last poll succeeded and is within its deadline.
    pub up: bool,
    /// Duration of the last completed poll; `None` before the first one.
    pub last_poll_duration: Option<Duration>,
    /// Wall-clock time of the last successful poll.
    pub last_success: Option<SystemTime>,
    /// Polls completed, successful or not.
    pub polls: u64,
    /// Polls that failed or missed their deadline.
    pub errors: u64,
}

/// The latest state of one source: its health and, when it is up, its samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The source's name (the `source` label).
    pub source: String,
    /// Health counters and timings.
    pub health: SourceHealth,
    /// The series; the encoders ignore them unless `health.up`.
    pub samples: Vec<Sample>,
    /// Series of families defined at run time (see [`crate::extra`]), same rule.
    pub extra: Vec<ExtraSample>,
}

impl Snapshot {
    /// The snapshot of a source that has not completed a poll yet.
    pub fn pending(source: impl Into<String>) -> Snapshot {
        Snapshot {
            source: source.into(),
            health: SourceHealth::default(),
            samples: Vec::new(),
            extra: Vec::new(),
        }
    }
}
