//! The `trace` subcommand: `trace analyze PATH...` and `trace compare A B`. The exporter binary
//! mounts [`TraceCommand`] and calls [`run`]; everything else lives here.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use clap::{Args, Subcommand, ValueEnum};

use crate::analysis::{analyze, AnalyzeOptions, Report};
use crate::memory::{is_pickle, read_snapshot};
use crate::parse::{
    parse_file, ParseOptions, DEFAULT_MAX_ROWS, DEFAULT_MAX_TEXT_BYTES, DEFAULT_MAX_VALUE_BYTES,
};
use crate::{RankTrace, TraceError};

const NAME: &str = "dgx-pixels-exporter trace";

/// `trace` subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Analyse PyTorch profiler traces (one per rank) and memory snapshots: time breakdown,
    /// overlap, kernels, idle time, launches (as HTA defines them), communication volume and
    /// bandwidth, phases, FSDP, steps, stragglers, throughput.
    Analyze(AnalyzeArgs),
    /// Compare two runs (each a trace file or a directory of rank traces): where did the time go?
    Compare(CompareArgs),
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A terminal summary.
    Human,
    /// The full report as JSON.
    Json,
    /// A Markdown report.
    Markdown,
}

/// Flags shared by both subcommands.
#[derive(Debug, Clone, Args)]
pub struct InputArgs {
    /// Work items (tokens, images, samples) processed per step on each rank: adds items/s.
    #[arg(long = "items-per-step", value_name = "N")]
    pub items_per_step: Option<f64>,
    /// What the items are called in reports.
    #[arg(long = "items-name", value_name = "NAME", default_value = "items")]
    pub items_name: String,
    /// Largest single JSON value (one event) accepted, in bytes.
    #[arg(long = "max-event-bytes", value_name = "BYTES", default_value_t = DEFAULT_MAX_VALUE_BYTES)]
    pub max_event_bytes: usize,
    /// Largest decompressed text of one trace read, in bytes.
    #[arg(long = "max-decompressed-bytes", value_name = "BYTES", default_value_t = DEFAULT_MAX_TEXT_BYTES)]
    pub max_decompressed_bytes: u64,
    /// Most rows (GPU rows, launches, annotations) kept from one trace.
    #[arg(long = "max-rows", value_name = "N", default_value_t = DEFAULT_MAX_ROWS)]
    pub max_rows: u64,
}

/// Flags of `trace analyze`.
#[derive(Debug, Clone, Args)]
pub struct AnalyzeArgs {
    /// Trace files (.json, .json.gz), memory snapshots (.pickle), or directories of them.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long = "format", value_enum, default_value = "human")]
    pub format: Format,
    /// Also draw a PNG chart (per-rank stacked time breakdown and overlap).
    #[arg(long = "chart", value_name = "FILE.png")]
    pub chart: Option<PathBuf>,
    /// Input options.
    #[command(flatten)]
    pub input: InputArgs,
}

/// Flags of `trace compare`.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The baseline run (e.g. native): a trace file or a directory.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The run compared with it (e.g. in a container).
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Output format (human or json).
    #[arg(long = "format", value_enum, default_value = "human")]
    pub format: Format,
    /// Input options.
    #[command(flatten)]
    pub input: InputArgs,
}

/// Runs a `trace` subcommand; exit code 0 on success, 1 when an input cannot be analysed, 2 on
/// bad arguments.
pub fn run(cmd: &TraceCommand) -> ExitCode {
    let r = match cmd {
        TraceCommand::Analyze(a) => run_analyze(a),
        TraceCommand::Compare(c) => run_compare(c),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Trace files and snapshot files under the given paths (directories: one level, sorted).
pub fn collect_inputs(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), TraceError> {
    let is_trace = |p: &Path| {
        let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        n.ends_with(".json") || n.ends_with(".json.gz")
    };
    let (mut traces, mut snaps) = (Vec::new(), Vec::new());
    for p in paths {
        if p.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|source| TraceError::Io {
                path: p.clone(),
                source,
            })?;
            let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            entries.sort();
            for e in entries.into_iter().filter(|e| e.is_file()) {
                if is_pickle(&e) {
                    snaps.push(e);
                } else if is_trace(&e) {
                    traces.push(e);
                }
            }
        } else if is_pickle(p) {
            snaps.push(p.clone());
        } else {
            traces.push(p.clone());
        }
    }
    Ok((traces, snaps))
}

/// Parses the traces (in parallel, one thread per core) and analyses them as one job.
pub fn load_and_analyze(
    paths: &[PathBuf],
    input: &InputArgs,
    progress: bool,
) -> Result<Report, TraceError> {
    let (traces, snaps) = collect_inputs(paths)?;
    if traces.is_empty() && snaps.is_empty() {
        return Err(TraceError::Input(format!(
            "no trace (.json, .json.gz) or memory snapshot (.pickle) in {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // Snapshots alone: a report with no ranks and their memory analysis.
    let analyze_opts = AnalyzeOptions {
        items_per_step: input.items_per_step,
        items_name: Some(input.items_name.clone()),
    };
    if traces.is_empty() {
        let mut rep = analyze(&[], &analyze_opts)?;
        for s in snaps {
            rep.memory_snapshots.push(read_snapshot(&s)?);
        }
        return Ok(rep);
    }
    let total: u64 = traces
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok().map(|m| m.len()))
        .sum();
    let counter = Arc::new(AtomicU64::new(0));
    let opts = ParseOptions {
        max_value_bytes: input.max_event_bytes,
        progress: Some(counter.clone()),
        max_text_bytes: input.max_decompressed_bytes,
        max_rows: input.max_rows,
        ..ParseOptions::default()
    };
    let bar = (progress && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        ) {
            b.set_style(style);
        }
        b
    });
    let results: Mutex<Vec<(usize, Result<RankTrace, TraceError>)>> = Mutex::new(Vec::new());
    let next = AtomicU64::new(0);
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(traces.len());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(p) = traces.get(i) else { break };
                let r = parse_file(p, &opts);
                if let Ok(mut v) = results.lock() {
                    v.push((i, r));
                }
            });
        }
        if let Some(b) = &bar {
            while results.lock().map(|v| v.len()).unwrap_or(traces.len()) < traces.len() {
                b.set_position(counter.load(Ordering::Relaxed));
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            b.finish_and_clear();
        }
    });
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|r| r.0);
    let parsed: Vec<RankTrace> = results.into_iter().map(|r| r.1).collect::<Result<_, _>>()?;
    let mut rep = analyze(&parsed, &analyze_opts)?;
    for s in snaps {
        rep.memory_snapshots.push(read_snapshot(&s)?);
    }
    Ok(rep)
}

/// Writes to stdout; a closed pipe (`| head`) ends the output quietly.
fn emit(s: &str) -> Result<(), TraceError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out
        .write_all(s.trim_end().as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(TraceError::Io {
            path: PathBuf::from("<stdout>"),
            source: e,
        }),
        _ => Ok(()),
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, TraceError> {
    serde_json::to_string_pretty(v)
        .map_err(|e| TraceError::Input(format!("cannot encode the report: {e}")))
}

fn run_analyze(a: &AnalyzeArgs) -> Result<(), TraceError> {
    let rep = load_and_analyze(&a.paths, &a.input, true)?;
    let out = match a.format {
        Format::Human => crate::render::human(&rep),
        Format::Json => json(&rep)?,
        Format::Markdown => crate::render::markdown(&rep),
    };
    emit(&out)?;
    if let Some(c) = &a.chart {
        crate::chart::chart(&rep, c)?;
    }
    Ok(())
}

fn run_compare(c: &CompareArgs) -> Result<(), TraceError> {
    let a = load_and_analyze(std::slice::from_ref(&c.a), &c.input, true)?;
    let b = load_and_analyze(std::slice::from_ref(&c.b), &c.input, true)?;
    let cmp = crate::compare::compare(&a, &b);
    let out = match c.format {
        Format::Json => json(&cmp)?,
        _ => crate::compare::text(&cmp),
    };
    emit(&out)
}
