//! `[simulation]`: the daemon's table that the collectors over a simulated node share.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// `[simulation]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SimulationSettings {
    /// Built-in scenario name or scenario file; unset = real GPUs.
    pub scenario: Option<String>,
    /// Poll interval of the simulated node.
    #[serde(deserialize_with = "dgx_pixels_settings::optional_duration")]
    pub interval: Option<Duration>,
    /// Whether the simulated node runs its training job, whose traces the trace collector
    /// analyses [default: true]; false leaves the collector to `--trace.directory` alone.
    pub traces: Option<bool>,
    /// Where the simulated training job drops its profiler traces (a `simulated-training`
    /// directory inside it); unset = a private temporary directory under `$TMPDIR`, removed
    /// at exit.
    pub trace_directory: Option<PathBuf>,
    /// Time between two of the simulated job's trace drops [default: 30s].
    #[serde(deserialize_with = "dgx_pixels_settings::optional_duration")]
    pub trace_period: Option<Duration>,
}
