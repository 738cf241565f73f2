//! `probe run` and `probe compare`: one-shot benchmarks with the CUDA probes. The exporter
//! binary mounts [`ProbeCommand`] and calls [`run`]; the measurements are the probes crate's,
//! the flags, reports, chart and progress bar are here.

pub mod comparison;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use clap::Subcommand;
use dgx_pixels_probes::compare::compare;
use dgx_pixels_probes::results::{detect_container, hostname, human, nvidia_driver_version};
use dgx_pixels_probes::{
    probe, run_node, run_once, Environment, NodeOptions, ProbeSizes, Progress, RunOptions,
    RunResults,
};
use indicatif::{ProgressBar, ProgressStyle};

use self::comparison::{chart, markdown};

/// `probe` subcommands: one-shot benchmarks with the CUDA probes.
#[derive(Debug, Subcommand)]
pub enum ProbeCommand {
    /// Run probes once on this machine's GPUs and print statistics per probe.
    #[command(after_help = PROBE_RUN_AFTER_HELP)]
    Run(ProbeRunArgs),
    /// Compare two result files (e.g. container vs native): overhead, Welch's t-test, verdict;
    /// writes a Markdown report and a PNG chart.
    Compare(ProbeCompareArgs),
}

const PROBE_RUN_AFTER_HELP: &str = "\
Probes: gemm_bf16, gemm_fp16, gemm_tf32, gemm_fp32, gemm_fp64 (cuBLAS, FLOP/s), copy_d2d, \
copy_h2d, copy_d2h (bytes/s; d2d counts bytes read plus written), launch_latency (seconds), \
p2p_copy (bytes/s from each selected GPU to each other one, peer access enabled; needs 2 GPUs). \
Node probes (not in \"all\"): nccl_allreduce (NCCL bus bandwidth across the selected GPUs at \
--nccl-max-bytes and 1/16, 1/256 of it; needs libnccl.so.2 and 2 GPUs), storage_read \
(read throughput of each --storage-path, bytes/s). \
Needs libcuda.so.1 and, for GEMMs, cuBLAS (libcublas.so.13 or .12) on the loader's path.";

/// Flags of `probe run`.
#[derive(Debug, clap::Args)]
pub struct ProbeRunArgs {
    /// Comma-separated probes to run, or "all".
    #[arg(long = "probe", value_name = "LIST", default_value = "all")]
    pub probe: String,
    /// Comma-separated CUDA device ordinals [default: every visible GPU].
    #[arg(long = "gpus", value_name = "LIST")]
    pub gpus: Option<String>,
    /// Unrecorded warm-up iterations per probe.
    #[arg(long = "warmup", value_name = "N", default_value_t = 10)]
    pub warmup: usize,
    /// Recorded iterations per probe.
    #[arg(long = "iterations", value_name = "N", default_value_t = 100)]
    pub iterations: usize,
    /// Seed of the GEMM input data.
    #[arg(long = "seed", value_name = "N", default_value_t = 42)]
    pub seed: u64,
    /// Write the results to FILE (.csv for CSV, otherwise JSON).
    #[arg(long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Matrix side of the bf16/fp16/tf32/fp32 GEMMs [default: 8192].
    #[arg(long = "gemm-size", value_name = "N")]
    pub gemm_size: Option<usize>,
    /// Matrix side of the fp64 GEMM [default: 4096].
    #[arg(long = "gemm-fp64-size", value_name = "N")]
    pub gemm_fp64_size: Option<usize>,
    /// Bytes per device-to-device and GPU-to-GPU copy [default: 268435456].
    #[arg(long = "copy-bytes", value_name = "BYTES")]
    pub copy_bytes: Option<usize>,
    /// Bytes per host-to-device / device-to-host copy [default: 67108864].
    #[arg(long = "host-copy-bytes", value_name = "BYTES")]
    pub host_copy_bytes: Option<usize>,
    /// Largest nccl_allreduce message, bytes per GPU [default: 268435456].
    #[arg(long = "nccl-max-bytes", value_name = "BYTES")]
    pub nccl_max_bytes: Option<u64>,
    /// A path storage_read reads (a file, or a directory for a scratch file); repeatable.
    #[arg(long = "storage-path", value_name = "PATH")]
    pub storage_path: Vec<PathBuf>,
    /// Bytes each storage_read run reads [default: 268435456].
    #[arg(long = "storage-bytes", value_name = "BYTES")]
    pub storage_bytes: Option<u64>,
}

/// The node probes `--probe` may name beside the GPU probes.
const NODE_PROBES: &[&str] = &["nccl_allreduce", "storage_read"];

/// Flags of `probe compare`.
#[derive(Debug, clap::Args)]
pub struct ProbeCompareArgs {
    /// The baseline result file (e.g. native).
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The result file compared with it (e.g. in a container).
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Directory for report.md and chart.png (created if missing).
    #[arg(
        long = "output-dir",
        value_name = "DIR",
        default_value = "probe-compare"
    )]
    pub output_dir: PathBuf,
}

/// The build of the binary that runs the probes, recorded in every result file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Build<'a> {
    /// The exporter's version.
    pub version: &'a str,
    /// Its git revision.
    pub revision: &'a str,
}

/// Most iterations (or warm-up iterations) per probe: every value is kept for the statistics.
const MAX_ITERATIONS: usize = 1_000_000;

const NAME: &str = "dgx-pixels-exporter probe";

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("{NAME}: error: {msg}");
    ExitCode::from(2)
}

/// Runs a `probe` subcommand; the exit code says how it went (2: bad arguments or input).
pub fn run(cmd: &ProbeCommand, build: Build<'_>) -> ExitCode {
    match cmd {
        ProbeCommand::Run(args) => run_probes(args, build),
        ProbeCommand::Compare(args) => compare_files(args),
    }
}

fn parse_gpus(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<usize>()
                .map_err(|_| format!("--gpus: {p:?} is not a GPU index; expected e.g. 0,1"))
        })
        .collect()
}

/// The node probes of `--probe` and their flags.
fn node_options(args: &ProbeRunArgs) -> Result<NodeOptions, String> {
    let named = |n: &str| args.probe.split(',').any(|p| p.trim() == n);
    let mut node = NodeOptions {
        storage_bytes: args
            .storage_bytes
            .unwrap_or(dgx_pixels_probes::storage::DEFAULT_READ_BYTES),
        ..NodeOptions::default()
    };
    if named("nccl_allreduce") {
        let max = args
            .nccl_max_bytes
            .unwrap_or(dgx_pixels_probes::nccl::DEFAULT_MAX_BYTES);
        dgx_pixels_probes::nccl::check_max_bytes(max).map_err(|e| {
            e.to_string()
                .replace("probes.nccl_max_bytes", "--nccl-max-bytes")
        })?;
        node.nccl_max_bytes = Some(max);
    }
    if named("storage_read") {
        if args.storage_path.is_empty() {
            return Err("--probe storage_read needs --storage-path PATH".into());
        }
        let (lo, hi) = (
            dgx_pixels_probes::storage::MIN_READ_BYTES,
            dgx_pixels_probes::storage::MAX_READ_BYTES,
        );
        if !(lo..=hi).contains(&node.storage_bytes) {
            return Err(format!("--storage-bytes must be between {lo} and {hi}"));
        }
        node.storage_paths = args.storage_path.clone();
    }
    Ok(node)
}

fn options(args: &ProbeRunArgs) -> Result<RunOptions, String> {
    // The GPU probes: the list without the node probes (which may be all it names).
    let gpu_list: Vec<&str> = args
        .probe
        .split(',')
        .map(str::trim)
        .filter(|p| !NODE_PROBES.contains(p))
        .collect();
    let probes = if gpu_list.iter().all(|p| p.is_empty()) {
        Vec::new()
    } else {
        probe::parse_list(&gpu_list.join(",")).map_err(|e| format!("--probe: {e}"))?
    };
    let gpus = args.gpus.as_deref().map(parse_gpus).transpose()?;
    let mut sizes = ProbeSizes::default();
    if let Some(n) = args.gemm_size {
        sizes.gemm_n_16bit = n;
        sizes.gemm_n_32bit = n;
    }
    if let Some(n) = args.gemm_fp64_size {
        sizes.gemm_n_64bit = n;
    }
    if let Some(n) = args.copy_bytes {
        sizes.copy_bytes = n;
    }
    if let Some(n) = args.host_copy_bytes {
        sizes.host_copy_bytes = n;
    }
    sizes.validate().map_err(|e| e.to_string())?;
    if args.iterations == 0 || args.iterations > MAX_ITERATIONS {
        return Err(format!(
            "--iterations must be between 1 and {MAX_ITERATIONS}"
        ));
    }
    if args.warmup > MAX_ITERATIONS {
        return Err(format!("--warmup must be at most {MAX_ITERATIONS}"));
    }
    Ok(RunOptions {
        probes,
        gpus,
        warmup: args.warmup,
        iterations: args.iterations,
        seed: args.seed,
        sizes,
    })
}

/// What the run happened on, apart from what CUDA reports.
fn environment(build: Build<'_>) -> Environment {
    Environment {
        hostname: hostname(),
        container: detect_container(),
        driver_version: nvidia_driver_version(),
        cuda_version: String::new(),
        exporter_version: build.version.to_string(),
        git_revision: build.revision.to_string(),
        started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
    }
}

fn run_probes(args: &ProbeRunArgs, build: Build<'_>) -> ExitCode {
    let (opts, node) = match options(args).and_then(|o| Ok((o, node_options(args)?))) {
        Ok(o) => o,
        Err(e) => return usage(e),
    };
    // Fail before minutes of GPU work, not after; a file made only for this check is removed
    // again if the run produces nothing.
    let created = match &args.output {
        Some(out) if !out.exists() => {
            if let Err(e) = std::fs::File::create(out) {
                return usage(format!("--output {}: {e}", out.display()));
            }
            Some(out.clone())
        }
        _ => None,
    };
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template("{msg:32} [{bar:40}] {pos}/{len} {elapsed}") {
        bar.set_style(style.progress_chars("=> "));
    }
    let mut on_progress = |p| match p {
        Progress::Planned(n) => bar.set_length(n),
        Progress::Started(kind, gpu) => bar.set_message(format!("{kind} on GPU {gpu}")),
        Progress::Step => bar.inc(1),
    };
    // Node probes alone need no GPU probe pass (storage_read needs no GPU at all).
    let mut outcome = if opts.probes.is_empty() {
        Ok((
            RunResults {
                format: dgx_pixels_probes::results::FORMAT.into(),
                environment: environment(build),
                warmup: opts.warmup,
                iterations: opts.iterations,
                seed: opts.seed,
                sizes: opts.sizes.clone(),
                results: Vec::new(),
                node_results: Vec::new(),
            },
            Vec::new(),
        ))
    } else {
        run_once(&opts, environment(build), &mut on_progress)
    };
    let node_steps = (opts.warmup + opts.iterations) as u64
        * (node.storage_paths.len() as u64 + 3 * u64::from(node.nccl_max_bytes.is_some()));
    let node_failures = match &mut outcome {
        Ok((results, _)) => {
            bar.inc_length(node_steps);
            let (r, f) = run_node(
                &node,
                opts.gpus.as_deref(),
                opts.warmup,
                opts.iterations,
                &mut on_progress,
            );
            results.node_results = r;
            f
        }
        Err(_) => Vec::new(),
    };
    bar.finish_and_clear();
    let (results, failures) = match outcome {
        Ok(r) => r,
        Err(e) => {
            if let Some(path) = &created {
                let _ = std::fs::remove_file(path);
            }
            eprintln!("{NAME} run: {e}");
            if matches!(e, dgx_pixels_probes::ProbeError::Config(_)) {
                return ExitCode::from(2);
            }
            return ExitCode::FAILURE;
        }
    };
    print!("{}", report(&results));
    for (kind, gpu, e) in &failures {
        eprintln!("{NAME} run: {kind} on GPU {gpu} failed: {e}");
    }
    for (label, e) in &node_failures {
        eprintln!("{NAME} run: {label} failed: {e}");
    }
    if let Some(out) = &args.output {
        if let Err(e) = results.write(out) {
            eprintln!("{NAME} run: cannot write results: {e}");
            return ExitCode::FAILURE;
        }
        eprintln!("results written to {}", out.display());
    }
    if failures.is_empty() && node_failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The environment and one statistics table per probe, as printed after a run.
pub fn report(r: &RunResults) -> String {
    let e = &r.environment;
    let mut out = format!(
        "host {}  container {}  driver {}  CUDA {}  exporter {} ({})\n\
         warm-up {}  iterations {}  seed {}\n",
        e.hostname,
        e.container,
        or_dash(&e.driver_version),
        or_dash(&e.cuda_version),
        e.exporter_version,
        e.git_revision,
        r.warmup,
        r.iterations,
        r.seed
    );
    let gpu = r.results.iter().map(|res| {
        let peer = res.peer.map(|p| format!(" to GPU {p}")).unwrap_or_default();
        (
            format!(
                "{} on GPU {}{peer} ({}, {})",
                res.probe, res.gpu, res.model, res.uuid
            ),
            res.unit,
            &res.summary,
        )
    });
    let node = r
        .node_results
        .iter()
        .map(|res| (res.label(), res.unit, &res.summary));
    for (title, unit, summary) in gpu.chain(node) {
        let Some(s) = summary else { continue };
        let h = |v: f64| human(v, unit);
        out.push_str(&format!("\n{title}\n"));
        let rows = [
            ("mean", h(s.mean)),
            ("median", h(s.median)),
            ("std", h(s.std)),
            ("min", h(s.min)),
            ("max", h(s.max)),
            ("p50", h(s.p50)),
            ("p95", h(s.p95)),
            ("p99", h(s.p99)),
            (
                "cv",
                s.cv.map(|c| format!("{:.2}%", c * 100.0))
                    .unwrap_or_else(|| "-".into()),
            ),
            (
                "95% CI",
                s.ci95
                    .map(|(lo, hi)| format!("[{}, {}]", h(lo), h(hi)))
                    .unwrap_or_else(|| "-".into()),
            ),
        ];
        for (k, v) in rows {
            out.push_str(&format!("  {k:<8} {v}\n"));
        }
    }
    out
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

fn compare_files(args: &ProbeCompareArgs) -> ExitCode {
    let read = |p: &Path| RunResults::read(p).map_err(|e| e.to_string());
    let (a, b) = match (read(&args.a), read(&args.b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return usage(e),
    };
    let cmp = match compare(&a, &b) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };
    if let Err(e) = std::fs::create_dir_all(&args.output_dir) {
        eprintln!(
            "{NAME} compare: cannot create {}: {e}",
            args.output_dir.display()
        );
        return ExitCode::FAILURE;
    }
    let png = args.output_dir.join("chart.png");
    let chart_ok = match chart(&cmp, &png) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("{NAME} compare: {e}");
            false
        }
    };
    let md = markdown(
        &args.a.display().to_string(),
        &args.b.display().to_string(),
        &a,
        &b,
        &cmp,
        chart_ok.then_some("chart.png"),
    );
    let report = args.output_dir.join("report.md");
    if let Err(e) = std::fs::write(&report, &md) {
        eprintln!("{NAME} compare: cannot write {}: {e}", report.display());
        return ExitCode::FAILURE;
    }
    print!("{md}");
    eprintln!("report written to {}", report.display());
    if !chart_ok {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_report_has_every_statistic_per_probe() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../probes/tests/fixtures/native.json");
        let r = RunResults::read(&path).unwrap();
        let text = report(&r);
        assert!(text.starts_with("host dgx-01  container no  driver 580.65.06  CUDA 13.0  exporter 0.1.0 (abc1234)\n"), "{text}");
        assert!(text.contains("\ngemm_bf16 on GPU 3 (NVIDIA H100 80GB HBM3, GPU-a)\n"));
        for key in [
            "mean", "median", "std", "min", "max", "p50", "p95", "p99", "cv", "95% CI",
        ] {
            assert_eq!(
                text.matches(&format!("\n  {key:<8} ")).count(),
                4,
                "{key}: {text}"
            );
        }
        assert!(text.contains("  mean     700.17 TFLOP/s\n"), "{text}");
    }

    #[test]
    fn gpu_lists_parse() {
        assert_eq!(parse_gpus("0, 2").unwrap(), [0, 2]);
        assert!(parse_gpus("0,-1").is_err());
    }
}
