//! The `trace` subcommand: `trace analyze PATH...` and `trace compare A B`. The exporter binary
//! mounts [`TraceCommand`] and calls [`run`]; the analysis is the engine's
//! (`dgx_pixels_trace::load`), the flags, reports, chart and progress bar are here.

pub mod chart;
pub mod render;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

use dgx_pixels_trace::load::{load_and_analyze, LoadOptions, LoadProgress};
use dgx_pixels_trace::parse::{DEFAULT_MAX_ROWS, DEFAULT_MAX_TEXT_BYTES, DEFAULT_MAX_VALUE_BYTES};
use dgx_pixels_trace::{Report, TraceError};

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

impl InputArgs {
    /// The engine's options these flags give.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            items_per_step: self.items_per_step,
            items_name: self.items_name.clone(),
            max_event_bytes: self.max_event_bytes,
            max_decompressed_bytes: self.max_decompressed_bytes,
            max_rows: self.max_rows,
        }
    }
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

/// Loads a run with a progress bar on a terminal.
fn load(paths: &[PathBuf], input: &InputArgs) -> Result<Report, TraceError> {
    let options = input.load_options();
    if !std::io::stderr().is_terminal() {
        return load_and_analyze(paths, &options, None);
    }
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style);
    }
    let mut show = |p: LoadProgress| match p {
        LoadProgress::Planned(total) => bar.set_length(total),
        LoadProgress::Read(bytes) => bar.set_position(bytes),
        LoadProgress::Done => bar.finish_and_clear(),
    };
    load_and_analyze(paths, &options, Some(&mut show))
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
    let rep = load(&a.paths, &a.input)?;
    let out = match a.format {
        Format::Human => render::human(&rep),
        Format::Json => json(&rep)?,
        Format::Markdown => render::markdown(&rep),
    };
    emit(&out)?;
    if let Some(c) = &a.chart {
        chart::chart(&rep, c)?;
    }
    Ok(())
}

fn run_compare(c: &CompareArgs) -> Result<(), TraceError> {
    let a = load(std::slice::from_ref(&c.a), &c.input)?;
    let b = load(std::slice::from_ref(&c.b), &c.input)?;
    let cmp = dgx_pixels_trace::compare::compare(&a, &b);
    let out = match c.format {
        Format::Json => json(&cmp)?,
        _ => render::comparison(&cmp),
    };
    emit(&out)
}
