//! Immutable per-source snapshots: what one poll of one source saw.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::attribution::AttributionSet;
use crate::catalog::Metric;
use crate::device::{DeviceKey, Scope};
use crate::external::ExternalFamilies;
use crate::histogram::HistogramPoint;
use crate::source::PollErrorKind;

/// One series value: a catalog metric, the device it describes (for a device row), its own
/// label values (in the order of the row's [`own_labels`](crate::MetricDef::own_labels)) and the
/// value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The catalog row.
    pub metric: Metric,
    /// The GPU or MIG instance, for a row whose scope is not [`Scope::None`]; shared by every
    /// sample of that device.
    pub device: Option<Arc<DeviceKey>>,
    /// Label values, one per own label name of the catalog row.
    pub labels: Vec<String>,
    /// The value in the metric's base unit (a histogram's: its count).
    pub value: f64,
    /// The reading of a [`Kind::Histogram`](crate::Kind::Histogram) row, bounds as numbers
    /// (see [`histogram`](crate::histogram)); `None` for every other row.
    pub histogram: Option<Box<HistogramPoint>>,
}

impl Sample {
    /// A sample of a row that is not about a device, with the given label values.
    pub fn new<S: Into<String>>(
        metric: Metric,
        labels: impl IntoIterator<Item = S>,
        value: f64,
    ) -> Sample {
        Sample {
            metric,
            device: None,
            labels: labels.into_iter().map(Into::into).collect(),
            value,
            histogram: None,
        }
    }

    /// A sample of a device row: `device`'s labels, then the given own label values.
    pub fn of<S: Into<String>>(
        device: &Arc<DeviceKey>,
        metric: Metric,
        labels: impl IntoIterator<Item = S>,
        value: f64,
    ) -> Sample {
        Sample {
            metric,
            device: Some(Arc::clone(device)),
            labels: labels.into_iter().map(Into::into).collect(),
            value,
            histogram: None,
        }
    }

    /// The sample of a histogram row: `point` as series `labels`, about `device` where the row
    /// is a device row. Its value is the point's count.
    pub fn histogram<S: Into<String>>(
        device: Option<&Arc<DeviceKey>>,
        metric: Metric,
        labels: impl IntoIterator<Item = S>,
        point: HistogramPoint,
    ) -> Sample {
        Sample {
            metric,
            device: device.cloned(),
            labels: labels.into_iter().map(Into::into).collect(),
            value: point.count as f64,
            histogram: Some(Box::new(point)),
        }
    }

    /// A sample of a whole GPU with a key of its own: for tests and one-off series (a source
    /// shares one key over all the samples of a GPU, [`Sample::of`]).
    pub fn for_gpu(gpu: u32, uuid: &str, metric: Metric, labels: &[&str], value: f64) -> Sample {
        Sample::of(
            &Arc::new(DeviceKey::gpu(gpu, uuid)),
            metric,
            labels.iter().copied(),
            value,
        )
    }

    /// A sample of one MIG instance with a key of its own (tests and one-off series).
    pub fn for_mig(
        gpu: u32,
        uuid: &str,
        mig: crate::MigInstance,
        metric: Metric,
        labels: &[&str],
        value: f64,
    ) -> Sample {
        let key = DeviceKey::new(gpu, uuid.into(), Some(mig));
        Sample::of(&Arc::new(key), metric, labels.iter().copied(), value)
    }

    /// Every label value in exposition order: the device key's, then the sample's own.
    pub fn label_values(&self) -> Vec<&str> {
        let scope = self.metric.def().scope;
        self.device
            .iter()
            .flat_map(|d| d.labels(scope).map(|(_, v)| v))
            .chain(self.labels.iter().map(String::as_str))
            .collect()
    }

    /// The value of the label `name`, whether the device key or the sample provides it.
    pub fn label(&self, name: &str) -> Option<&str> {
        let def = self.metric.def();
        if let Some(device) = &self.device {
            if let Some((_, v)) = device.labels(def.scope).find(|(k, _)| *k == name) {
                return Some(v);
            }
        }
        let i = def.own_labels().iter().position(|n| *n == name)?;
        self.labels.get(i).map(String::as_str)
    }

    /// Whether the sample fits its catalog row: a device key exactly when the row is about a
    /// device, one value per own label, and a well-formed histogram point exactly when the row
    /// is a histogram (the encoders skip samples that do not fit, rather than emit a malformed
    /// series).
    pub fn is_well_formed(&self) -> bool {
        let def = self.metric.def();
        let histogram = def.kind == crate::catalog::Kind::Histogram;
        self.device.is_some() == (def.scope != Scope::None)
            && self.labels.len() == def.own_labels().len()
            && match &self.histogram {
                Some(point) => histogram && point.is_well_formed(),
                None => !histogram,
            }
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
    /// The latest failed or overrun poll, kept after the source recovers (the status page
    /// shows it with its age); `None` while the source has never failed.
    pub last_error: Option<SourceError>,
}

/// Longest [`SourceError::message`] kept, in characters: a poll error is one line of our own
/// text (a path, an OS or library error), and the status page shows it whole.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 300;

/// Why and when a source's poll last failed.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceError {
    /// The classification of the failure.
    pub kind: PollErrorKind,
    /// The poll error's message on one line, at most [`MAX_ERROR_MESSAGE_CHARS`] characters
    /// (longer ones are cut and end in `…`); control characters become spaces.
    pub message: String,
    /// Wall-clock time of the failure.
    pub at: SystemTime,
}

impl SourceError {
    /// The failure `kind` with `message`, bounded as [`SourceError::message`] says.
    pub fn new(kind: PollErrorKind, message: &str, at: SystemTime) -> SourceError {
        let line = |c: char| if c.is_control() { ' ' } else { c };
        let mut chars = message.chars();
        let mut bounded: String = chars
            .by_ref()
            .take(MAX_ERROR_MESSAGE_CHARS - 1)
            .map(line)
            .collect();
        match (chars.next(), chars.next()) {
            (Some(last), None) => bounded.push(line(last)),
            (Some(_), Some(_)) => bounded.push('…'),
            (None, _) => {}
        }
        SourceError {
            kind,
            message: bounded,
            at,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_error_is_one_bounded_line() {
        let at = SystemTime::UNIX_EPOCH;
        let short = SourceError::new(PollErrorKind::ReadFailed, "read\nfailed\t!", at);
        assert_eq!(short.message, "read failed !");
        let exact = "é".repeat(MAX_ERROR_MESSAGE_CHARS);
        assert_eq!(
            SourceError::new(PollErrorKind::Timeout, &exact, at).message,
            exact,
            "a message of exactly the limit is kept whole"
        );
        let long = format!("{exact}x");
        let cut = SourceError::new(PollErrorKind::Timeout, &long, at).message;
        assert_eq!(cut.chars().count(), MAX_ERROR_MESSAGE_CHARS);
        assert!(cut.ends_with("é…"), "{cut}");
        let huge = "y".repeat(1 << 20);
        let cut = SourceError::new(PollErrorKind::Timeout, &huge, at).message;
        assert_eq!(cut.len(), MAX_ERROR_MESSAGE_CHARS - 1 + '…'.len_utf8());
    }
}
