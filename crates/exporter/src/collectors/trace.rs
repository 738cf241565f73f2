//! The `trace` collector: training efficiency from the PyTorch profiler traces jobs drop in
//! `--trace.directory` (docs/traces.md, "The trace collector"). Off by default on real GPUs:
//! it reads job files and spends CPU on them (on one thread at the lowest priority), which an
//! operator should choose. On a simulated node it is on: the node runs a simulated training job
//! that drops a step's traces of every GPU (one rank each) into a directory of its own
//! ([`SimulatedTraces`]), watched beside any `--trace.directory`.
//!
//! Each file is analysed in a child process ([`WorkerAnalyzer`]: this binary's hidden
//! `trace-worker`), so a hostile file costs the child, never the daemon. Across reloads the
//! sources hand their state on through a [`Handoff`] kept for the life of the process.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use dgx_pixels_metrics::{PollError, PollOutput, Source};
use dgx_pixels_sim::Scenario;
use dgx_pixels_trace_source::analyzer::MAX_REPLY_BYTES;
use dgx_pixels_trace_source::{
    Analysed, AnalysisFailure, AnalysisReply, AnalysisRequest, Analyzer, Handoff, Outcome,
    SimulatedJob, SimulatedTraces, TraceOptions, TraceSource, DEFAULT_KEEP,
};
use dgx_pixels_worker::{Limits, Request, WorkerError};

use dgx_pixels_registry::{
    BuildContext, Built, Collector, Flag, FlagDefault, FlagKind, RestartKey, Shared,
    SimulationSettings, Table, DEFAULT_TIMEOUT,
};

const FLAGS: &[Flag] = &[Flag {
    name: "trace.directory",
    key: "trace.directory",
    value_name: "DIR",
    help: "Directory where jobs drop PyTorch profiler traces, analysed by the trace collector (--collector.trace); repeatable, a component may be a glob (quote it), e.g. '/data/profile_traces/iteration_*'. See docs/traces.md",
    default: FlagDefault::None,
    kind: FlagKind::Paths,
    order: 140,
}];

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "trace",
    enabled_by_default: false,
    enabled_in_simulation: true,
    // Also the period of the directory listing: a file is analysed once stable across two.
    default_interval: Duration::from_secs(5),
    default_timeout: DEFAULT_TIMEOUT,
    help: "training efficiency from the PyTorch profiler traces in --trace.directory, analysed in the background at low priority ([trace]); off unless enabled; on a simulated node, over the traces of its simulated job",
    yields_owned_series: false,
    derived: false,
    table: Some(Table::of::<TraceOptions>()),
    flags: FLAGS,
    prepare: None,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> Result<Built> {
    let mut options = ctx.options::<TraceOptions>().clone();
    let simulated = match ctx.simulated {
        Some(node) if ctx.shared.simulation.traces != Some(false) => {
            start_simulated(&ctx.shared.simulation, &node.scenario)?
        }
        _ => None,
    };
    if let Some(sim) = &simulated {
        options.directory.push(sim.directory().to_path_buf());
    }
    if options.directory.is_empty() {
        if ctx.simulated.is_some() {
            return Ok(None);
        }
        return Err(anyhow!(
            "the trace collector needs a directory to watch: set --trace.directory or [trace] directory"
        ));
    }
    let analyzer = Arc::new(WorkerAnalyzer::new(&options)?);
    let handoff = ctx.kept::<Handoff>();
    let source = TraceSource::start_with(options, ctx.timing.interval, analyzer, Some(handoff))
        .map_err(|e| anyhow!(e))?;
    Ok(Some(Box::new(Traces {
        source,
        _simulated: simulated,
    })))
}

/// The simulated node's training job: one rank per GPU, a step's traces every
/// `[simulation] trace_period`. It is named after the scenario, so the jobs of several
/// simulated nodes are told apart (`trace_job="simulated-dgx-h100"`). A directory the operator
/// chose must work; without a writable `$TMPDIR` (a read-only root filesystem without an
/// emptyDir) the node runs without simulated traces rather than not at all.
/// How long the simulated job runs before its first profiler window ends and is dropped.
const FIRST_DROP_INTO_JOB: std::time::Duration = std::time::Duration::from_secs(1);

fn start_simulated(
    sim: &SimulationSettings,
    scenario: &Scenario,
) -> Result<Option<SimulatedTraces>> {
    let name: String = scenario
        .name()
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let job = SimulatedJob {
        directory: sim.trace_directory.clone(),
        name,
        ranks: scenario.gpus().len().max(1),
        process_ids: (0..scenario.gpus().len() as u64)
            .map(dgx_pixels_sim::process_id)
            .collect(),
        // The first drop once the job has run for a few seconds (its processes exist, so the
        // ranks' pids join them), not during the scenario's idle start.
        first_drop_after: scenario.job_starts_at() + FIRST_DROP_INTO_JOB,
        period: sim
            .trace_period
            .unwrap_or(dgx_pixels_trace_source::DEFAULT_PERIOD),
        keep: DEFAULT_KEEP,
    };
    match (SimulatedTraces::start(job), &sim.trace_directory) {
        (Ok(traces), _) => {
            // Debug: the plan is built before the address is bound, and a failed start is
            // one line.
            tracing::debug!(directory = %traces.directory().display(), "simulated training job drops its traces");
            Ok(Some(traces))
        }
        (Err(e), Some(dir)) => Err(anyhow!(
            "simulation.trace_directory: cannot write to {}: {e}",
            dir.display()
        )),
        (Err(e), None) => {
            tracing::warn!(
                "no simulated traces: cannot create a directory under $TMPDIR ({e}); mount a writable /tmp or set --simulate.trace-directory"
            );
            Ok(None)
        }
    }
}

/// The trace source, and the simulated job whose traces it watches (stopped and its directory
/// removed when the source goes: the field is dropped after the source).
struct Traces {
    source: TraceSource,
    _simulated: Option<SimulatedTraces>,
}

impl Source for Traces {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        self.source.poll()
    }
}

/// The hidden subcommand that analyses one file.
pub const WORKER_SUBCOMMAND: &str = "trace-worker";

/// Analyses each file in a child process: this binary's `trace-worker`, with `[trace]
/// max_worker_memory` of address space, the analysis deadline (wall and CPU time), the
/// lowest CPU priority and a bounded reply. Whatever the child does (dies, overruns, runs out
/// of memory, prints garbage) is an outcome of the file.
#[derive(Debug)]
pub struct WorkerAnalyzer {
    program: PathBuf,
    limits: Limits,
}

impl WorkerAnalyzer {
    /// The analyzer for `options`, running this program.
    pub fn new(options: &TraceOptions) -> Result<WorkerAnalyzer> {
        let program = std::env::current_exe().map_err(|e| {
            anyhow!("trace: cannot find this program to start its analysis workers: {e}")
        })?;
        Ok(WorkerAnalyzer::with_program(program, options))
    }

    /// The analyzer for `options`, running `program` (tests).
    pub fn with_program(program: PathBuf, options: &TraceOptions) -> WorkerAnalyzer {
        let deadline = options.max_analysis_time;
        WorkerAnalyzer {
            program,
            limits: Limits {
                timeout: deadline,
                max_output_bytes: MAX_REPLY_BYTES,
                max_address_space_bytes: Some(options.max_worker_memory),
                // At the lowest priority CPU time never outruns the wall clock; the limit is
                // a second line behind the deadline.
                max_cpu_seconds: Some(deadline.as_secs().saturating_add(1)),
                lowest_priority: true,
            },
        }
    }
}

impl Analyzer for WorkerAnalyzer {
    fn analyse(
        &self,
        request: &AnalysisRequest,
        cancel: &Arc<AtomicBool>,
    ) -> Result<Analysed, AnalysisFailure> {
        let input = serde_json::to_vec(request)
            .map_err(|e| AnalysisFailure::new(Outcome::InternalError, e.to_string()))?;
        let req = Request {
            program: self.program.clone(),
            args: vec![WORKER_SUBCOMMAND.into()],
            env: Vec::new(),
            input,
            limits: self.limits.clone(),
        };
        match dgx_pixels_worker::run_cancellable(&req, cancel) {
            Ok(done) => serde_json::from_slice::<AnalysisReply>(&done.output)
                .map_err(|e| {
                    AnalysisFailure::new(
                        Outcome::BadOutput,
                        format!("the analysis worker's reply does not parse: {e}"),
                    )
                })?
                .into_result(),
            Err(e) => Err(worker_failure(&e)),
        }
    }
}

/// Linux signal numbers (the same on x86_64 and aarch64).
const SIGABRT: i32 = 6;
const SIGKILL: i32 = 9;
const SIGXCPU: i32 = 24;

/// The outcome of a worker that gave no reply.
fn worker_failure(e: &WorkerError) -> AnalysisFailure {
    let outcome = match e {
        WorkerError::Cancelled => return AnalysisFailure::cancelled(),
        WorkerError::TimedOut(_) => Outcome::Timeout,
        WorkerError::OutputTooLarge(_) => Outcome::BadOutput,
        // Rust's allocator reports a failed allocation on stderr, then aborts.
        WorkerError::Signalled { signal, stderr }
            if *signal == SIGABRT && stderr.contains("memory allocation") =>
        {
            Outcome::OutOfMemory
        }
        WorkerError::Signalled { signal, .. } if *signal == SIGXCPU => Outcome::Timeout,
        // Not ours (ours is TimedOut): the kernel's OOM killer, for which the worker is
        // first in line (oom_score_adj 1000).
        WorkerError::Signalled { signal, .. } if *signal == SIGKILL => Outcome::OutOfMemory,
        WorkerError::Failed { stderr, .. } if stderr.contains("memory allocation") => {
            Outcome::OutOfMemory
        }
        WorkerError::Signalled { .. } | WorkerError::Failed { .. } => Outcome::Crashed,
        WorkerError::Spawn { .. } | WorkerError::Io(_) => Outcome::InternalError,
    };
    AnalysisFailure::new(outcome, format!("analysis worker: {e}"))
}

/// On a simulated node, its scenario (the job's ranks and name) and `[simulation]`'s trace
/// keys.
fn shared_inputs(s: &Shared) -> RestartKey {
    Box::new((
        s.simulation.scenario.clone(),
        s.simulation.traces,
        s.simulation.trace_directory.clone(),
        s.simulation.trace_period,
    ))
}
