//! The interface every source implements; the exporter's runner calls it on a dedicated thread.

use std::fmt;

use crate::attribution::AttributionSet;
use crate::external::ExternalFamilies;
use crate::snapshot::Sample;

/// Why a poll produced no samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollError {
    /// A short, stable classification (e.g. "library_unavailable"), for logs and tests.
    pub kind: &'static str,
    /// What went wrong, in one line.
    pub message: String,
}

impl PollError {
    /// A poll error of `kind` with `message`.
    pub fn new(kind: &'static str, message: impl Into<String>) -> PollError {
        PollError {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for PollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PollError {}

/// A source of samples, polled on its own thread at its own interval.
///
/// `poll` may block (library calls); the runner enforces a deadline around it and marks the
/// source down when it is exceeded. A source that cannot reach its backend returns `Err`
/// quickly (and does its own retry backoff), so it never spins.
pub trait Source: Send {
    /// The source's name: the `source` label and the `--collector.NAME` flag.
    fn name(&self) -> &'static str;
    /// Reads the backend and returns every sample of this source.
    fn poll(&mut self) -> Result<Vec<Sample>, PollError>;

    /// Families outside the catalog (workload textfiles, the simulated workload) read by the
    /// last successful `poll`, or `None` for a source that has none. Called right after each
    /// successful poll; the runner publishes them with that poll's samples.
    fn take_external(&mut self) -> Option<ExternalFamilies> {
        None
    }

    /// Who holds which device, as read by the last successful `poll`, for an attribution
    /// source (kubelet pod-resources, HPC job files); `None` for every other source. Called
    /// right after each successful poll; the store joins it onto device series while this
    /// source is up.
    fn take_attribution(&mut self) -> Option<AttributionSet> {
        None
    }
}
