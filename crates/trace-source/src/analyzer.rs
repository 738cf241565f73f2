//! Who analyses a ready file: the source's worker thread hands each one to an [`Analyzer`].
//!
//! The daemon's analyzer runs every analysis in a short-lived child process (the exporter's
//! own binary, hidden subcommand `trace-worker`, started through `dgx_pixels_worker` with an
//! address-space limit, the analysis deadline and the lowest CPU priority), so a hostile file
//! costs that child, never the daemon: the child opens the listed file itself, analyses it with
//! [`serve`] and prints an [`AnalysisReply`] as JSON. [`InProcess`] does the same work on the
//! calling thread (unit tests of the source; the `trace analyze` command analyses in process
//! without this module). The trace crate knows nothing about processes: the exporter provides
//! the child-process analyzer.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::group::MAX_COMM_STARTS;
use super::series::Outcome;
use dgx_pixels_trace::analysis::{analyze_ranks, AnalyzeOptions, RankAnalysis, RankReport};
use dgx_pixels_trace::memory::{read_snapshot_with, SnapshotOptions, SnapshotReport};
use dgx_pixels_trace::open::FileKey;
use dgx_pixels_trace::parse::{parse_file, ParseOptions, CANCELLED};
use dgx_pixels_trace::pickle::Limits;
use dgx_pixels_trace::TraceError;

/// Largest request a `trace-worker` reads (a path and a few numbers).
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// Largest reply the daemon reads from a `trace-worker`: one rank's report is a few tens of
/// KiB; its communication start times (at most [`MAX_COMM_STARTS`], about 32 bytes each in
/// JSON) are the bulk. A longer reply kills the worker and counts as `bad_output`.
pub const MAX_REPLY_BYTES: usize = 40 << 20;

/// One file to analyse: what the child needs to open and bound it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnalysisRequest {
    /// The listed file.
    pub path: PathBuf,
    /// A memory snapshot (else a trace).
    pub snapshot: bool,
    /// Device of the listed file: the opened file must be it.
    pub dev: u64,
    /// Inode of the listed file.
    pub ino: u64,
    /// `[trace] max_event_bytes`.
    pub max_event_bytes: usize,
    /// `[trace] max_decompressed_bytes`.
    pub max_decompressed_bytes: u64,
    /// `[trace] max_rows`.
    pub max_rows: u64,
    /// `[trace] max_snapshot_bytes`.
    pub max_snapshot_bytes: u64,
    /// `[trace] max_analysis_time`, in milliseconds (the deadline counts from when the
    /// analysis starts).
    pub max_analysis_ms: u64,
}

/// One analysed rank as it crosses the pipe ([`RankAnalysis`]'s fields).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireRank {
    /// The rank's report.
    pub report: RankReport,
    /// Its communication kernels in start order (none past [`MAX_COMM_STARTS`]: the job
    /// analysis would drop them).
    pub comm_starts: Vec<(i64, f64)>,
}

/// What a `trace-worker` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnalysisReply {
    /// A trace: its world size and its rank(s).
    Trace {
        /// `distributedInfo.world_size`.
        world_size: Option<u64>,
        /// Its ranks (one per file in practice).
        ranks: Vec<WireRank>,
    },
    /// A memory snapshot.
    Snapshot(SnapshotReport),
    /// Not analysed.
    Failed(AnalysisFailure),
}

/// Why a file was not analysed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnalysisFailure {
    /// The outcome counted.
    pub outcome: Outcome,
    /// Whether trying the unchanged file again may help (a file still being written).
    pub retry: bool,
    /// Why, for the log.
    pub message: String,
    /// The analysis was cancelled (the source is stopping): neither analysed nor failed.
    #[serde(default)]
    pub cancelled: bool,
}

impl AnalysisFailure {
    /// A final failure with `outcome`.
    pub fn new(outcome: Outcome, message: impl Into<String>) -> AnalysisFailure {
        AnalysisFailure {
            outcome,
            retry: false,
            message: message.into(),
            cancelled: false,
        }
    }

    /// The source stopped during the analysis.
    pub fn cancelled() -> AnalysisFailure {
        AnalysisFailure {
            cancelled: true,
            ..AnalysisFailure::new(Outcome::InternalError, "cancelled")
        }
    }
}

/// What one file gave.
#[derive(Debug, Clone)]
pub enum Analysed {
    /// A trace: its world size and its rank(s).
    Trace(Option<u64>, Vec<RankAnalysis>),
    /// A memory snapshot.
    Snapshot(SnapshotReport),
}

impl AnalysisReply {
    /// The reply as the source uses it.
    pub fn into_result(self) -> Result<Analysed, AnalysisFailure> {
        match self {
            AnalysisReply::Trace { world_size, ranks } => Ok(Analysed::Trace(
                world_size,
                ranks
                    .into_iter()
                    .map(|r| RankAnalysis {
                        report: r.report,
                        comm_starts: r.comm_starts,
                    })
                    .collect(),
            )),
            AnalysisReply::Snapshot(s) => Ok(Analysed::Snapshot(s)),
            AnalysisReply::Failed(f) => Err(f),
        }
    }
}

/// Analyses one listed file. `cancel` is set when the source stops; an analyzer should then
/// give up soon and return [`AnalysisFailure::cancelled`].
pub trait Analyzer: Send + Sync + std::fmt::Debug {
    /// Analyses `request`'s file.
    fn analyse(
        &self,
        request: &AnalysisRequest,
        cancel: &Arc<AtomicBool>,
    ) -> Result<Analysed, AnalysisFailure>;
}

/// Analyses on the calling thread: for tests of the source. The daemon analyses in a child
/// process (the exporter's `trace-worker`), which runs [`serve`].
#[derive(Debug, Default, Clone, Copy)]
pub struct InProcess;

impl Analyzer for InProcess {
    fn analyse(
        &self,
        request: &AnalysisRequest,
        cancel: &Arc<AtomicBool>,
    ) -> Result<Analysed, AnalysisFailure> {
        analyse_file(request, Some(Arc::clone(cancel))).into_result()
    }
}

/// The child side: analyses the file `request` names (opened with the checks of
/// [`dgx_pixels_trace::open::open_input`] against the listed device and inode) and returns the reply to
/// print.
pub fn serve(request: &AnalysisRequest) -> AnalysisReply {
    analyse_file(request, None)
}

fn analyse_file(request: &AnalysisRequest, cancel: Option<Arc<AtomicBool>>) -> AnalysisReply {
    let deadline = Instant::now().checked_add(Duration::from_millis(request.max_analysis_ms));
    let listed = Some(FileKey {
        dev: request.dev,
        ino: request.ino,
    });
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if request.snapshot {
            let opts = SnapshotOptions {
                max_bytes: request.max_snapshot_bytes,
                limits: Limits {
                    max_bytes: 0,
                    max_depth: 0,
                    deadline,
                    cancel: cancel.clone(),
                },
                listed,
            };
            return read_snapshot_with(&request.path, &opts).map(AnalysisReply::Snapshot);
        }
        let opts = ParseOptions {
            max_value_bytes: request.max_event_bytes,
            progress: None,
            cancel: cancel.clone(),
            deadline,
            max_text_bytes: request.max_decompressed_bytes,
            max_rows: request.max_rows,
            listed,
        };
        parse_file(&request.path, &opts).and_then(|t| {
            let world_size = t.world_size;
            let ranks = analyze_ranks(std::slice::from_ref(&t), &AnalyzeOptions::default())?;
            Ok(AnalysisReply::Trace {
                world_size,
                ranks: ranks.into_iter().map(wire_rank).collect(),
            })
        })
    }));
    match result {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => {
            let stopping = cancel
                .as_ref()
                .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed));
            if stopping && is_cancelled(&e) {
                return AnalysisReply::Failed(AnalysisFailure::cancelled());
            }
            let (outcome, retry) = classify(&e);
            AnalysisReply::Failed(AnalysisFailure {
                outcome,
                retry,
                message: e.to_string(),
                cancelled: false,
            })
        }
        Err(panic) => AnalysisReply::Failed(AnalysisFailure::new(
            Outcome::InternalError,
            dgx_pixels_metrics::panic_message(panic.as_ref()),
        )),
    }
}

/// A rank for the pipe: the report without what neither the series nor the job analysis read
/// (the per-stream idle breakdown grows with the streams of a hostile file), and no
/// communication start times past the job analysis' bound.
fn wire_rank(mut r: RankAnalysis) -> WireRank {
    r.report.idle_time_breakdown = Vec::new();
    if r.comm_starts.len() > MAX_COMM_STARTS {
        r.comm_starts = Vec::new();
    }
    WireRank {
        report: r.report,
        comm_starts: r.comm_starts,
    }
}

fn is_cancelled(e: &TraceError) -> bool {
    matches!(e, TraceError::Io { source, .. } if source.to_string().contains(CANCELLED))
}

/// The outcome of a failed analysis and whether trying the unchanged file again may help (a
/// file still being written).
pub(super) fn classify(e: &TraceError) -> (Outcome, bool) {
    use std::io::ErrorKind;
    match e {
        TraceError::Truncated { .. } => (Outcome::Truncated, true),
        TraceError::Json { .. } => (Outcome::ParseError, true),
        TraceError::Io { source, .. } => match source.kind() {
            ErrorKind::TimedOut => (Outcome::Timeout, false),
            // A corrupt gzip stream (possibly one still being written).
            ErrorKind::InvalidData | ErrorKind::InvalidInput => (Outcome::ParseError, true),
            ErrorKind::NotFound => (Outcome::Unreadable, false),
            _ => (Outcome::Unreadable, true),
        },
        TraceError::NotATrace { .. } => (Outcome::NotATrace, false),
        // A snapshot pickled into place may be incomplete.
        TraceError::Snapshot { .. } => (Outcome::ParseError, true),
        TraceError::ValueTooLarge { .. } | TraceError::Input(_) => (Outcome::ParseError, false),
        TraceError::OverLimit { .. } => (Outcome::OverLimit, false),
        TraceError::Replaced { .. } => (Outcome::Replaced, false),
    }
}
