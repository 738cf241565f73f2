//! Immutable per-source snapshots: what one poll of one source saw.

use std::time::{Duration, SystemTime};

use crate::attribution::AttributionSet;
use crate::catalog::Metric;
use crate::external::ExternalFamilies;

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
        let def = self.metric.def();
        // Histogram samples carry one more value: the bucket bound or "sum" (see `histogram`).
        let extra = usize::from(def.kind == crate::catalog::Kind::Histogram);
        self.labels.len() == def.labels.len() + extra
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

/// Everything one successful poll of a source produced, kept whole from the source to the
/// encoder: one value, so no part of a poll can be published, filtered or dropped without the
/// others.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PollOutput {
    /// Catalog series.
    pub samples: Vec<Sample>,
    /// Families outside the catalog (workload textfiles, the simulated workload); empty for
    /// most sources.
    pub external: ExternalFamilies,
    /// Who holds which device, for an attribution source (kubelet pod-resources, HPC job
    /// files); `None` for every other source. Joined onto device series while the source is up.
    pub attribution: Option<AttributionSet>,
}

impl PollOutput {
    /// An output of catalog samples only.
    pub fn samples(samples: Vec<Sample>) -> PollOutput {
        PollOutput {
            samples,
            ..PollOutput::default()
        }
    }
}

impl From<Vec<Sample>> for PollOutput {
    fn from(samples: Vec<Sample>) -> PollOutput {
        PollOutput::samples(samples)
    }
}

/// The latest state of one source: its health and the output of its last successful poll.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The source's name (the `source` label).
    pub source: String,
    /// Health counters and timings.
    pub health: SourceHealth,
    /// What the source produced; served only while `health.up` (see [`Snapshot::served`]).
    pub output: PollOutput,
}

impl Snapshot {
    /// The snapshot of a source that has not completed a poll yet.
    pub fn pending(source: impl Into<String>) -> Snapshot {
        Snapshot::down(source, SourceHealth::default())
    }

    /// The snapshot of a source whose last poll failed: health only, nothing to serve.
    pub fn down(source: impl Into<String>, health: SourceHealth) -> Snapshot {
        Snapshot {
            source: source.into(),
            health,
            output: PollOutput::default(),
        }
    }

    /// The output to serve: the one place that decides "served only while up". Every reader of
    /// a generation (catalog series, external families, the attribution join) goes through it.
    pub fn served(&self) -> Option<&PollOutput> {
        self.health.up.then_some(&self.output)
    }
}
