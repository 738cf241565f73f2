//! In-process CUDA probe workloads: what they measure, how to run them once as a benchmark, how
//! to compare two runs; the daemon runs them politely as metrics through dgx-pixels-probe-source.
//!
//! Why a crate of its own: it is the only part of the exporter that puts work on the GPU, and
//! the only one that talks to CUDA (through [`cudarc`], which opens `libcuda` and cuBLAS at
//! run time: nothing NVIDIA is linked, and the crate builds and tests without CUDA).
//!
//! - [`probe`]: the probes ([`ProbeKind`]: GEMM in bf16/fp16/tf32/fp32/fp64, device and host
//!   copy bandwidth, launch latency), their units and sizes ([`ProbeSizes`]).
//! - [`cuda`]: runs them on a GPU; guards every call (see "Missing libraries" below).
//! - [`stats`]: mean, median, percentiles, CV, Student-t confidence intervals, Welch's test.
//! - [`results`]: result files (JSON/CSV) with the environment they were measured in.
//! - [`compare`]: overhead, significance and verdict between two result files, as data (the
//!   Markdown report and PNG chart of `probe compare` are dgx-pixels-tools').
//! - [`peaks`]: published peak rates per GPU model.
//! - [`nccl`]: `nccl_allreduce`, the node probe of NCCL all-reduce bandwidth (NCCL opened at
//!   run time by its SONAME).
//! - [`storage`]: `storage_read`, the node probe of configured paths' read throughput.
//! - [`worker`]: the protocol of the short-lived worker process each probe runs in (so the
//!   daemon never holds a GPU), and [`worker::serve`], what the `probe-worker` child runs.
//!
//! The daemon's `probes` source (the polite scheduler, the worker processes' daemon side, the
//! series) is dgx-pixels-probe-source; the `probe` subcommand's flags, reports and chart are
//! dgx-pixels-tools. This crate depends on neither the metrics crate nor plotters
//! (`scripts/check-crate-deps.sh`).
//!
//! # Which CUDA
//!
//! cudarc needs one CUDA version feature at build time; it decides the API bindings and which
//! library names are tried at run time. We build with `cuda-13000`: the shipped binary must
//! run on current systems (driver 580+, CUDA 13), and a CUDA 12 build never tries
//! `libcublas.so.13`. A 13.0 build tries `libcuda.so`, then `.so.13`, `.so.12`, ..., and
//! `libcuda.so.1` (the driver's real soname), and for cuBLAS `libcublas.so`, `.so.13`, then
//! `.so.12`, so a CUDA 12 cuBLAS is found too. We only call entry points that exist in both
//! 12.x and 13.x (context, memory, events, module load, `cublasGemmEx`, `cublasSgemm`,
//! `cublasDgemm`, `cublasSetMathMode`). The driver must support CUDA 13.0 (driver 580 or
//! newer) for the 13.0 driver entry points; an older driver fails cleanly (see below).
//! cuBLAS is found through the loader's normal search: system CUDA installs register it with
//! ld.so; for a pip-installed cuBLAS (PyTorch's `nvidia-cublas` wheels) add its `lib`
//! directory to `LD_LIBRARY_PATH` (scripts/gpu-validate-probes.sh does this).
//!
//! # Missing libraries
//!
//! cudarc panics when a library or symbol is missing. Each entry point first checks that the
//! library opens ([`cuda::availability`]), then runs inside `catch_unwind`: without CUDA a
//! probe reports [`ProbeError::Unavailable`], the daemon's `probes` source reports down, and
//! everything else goes on.
//!
//! ```
//! use dgx_pixels_probes::{stats, ProbeKind};
//!
//! let s = stats::summarize(&[700e12, 705e12, 698e12]).unwrap();
//! assert!(s.ci95.unwrap().0 < s.mean);
//! assert_eq!("gemm_bf16".parse::<ProbeKind>().unwrap(), ProbeKind::GemmBf16);
//! ```
#![deny(missing_docs)]

pub mod compare;
pub mod cuda;
pub mod nccl;
pub mod peaks;
pub mod probe;
pub mod results;
pub mod stats;
pub mod storage;
pub mod worker;

pub use probe::{ProbeKind, ProbeSizes, ProbeUnit};
pub use results::{Environment, NodeResult, ProbeResult, RunResults};

/// Why a probe did not produce a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProbeError {
    /// CUDA (the driver or cuBLAS) cannot be loaded on this machine.
    #[error("CUDA unavailable: {0}")]
    Unavailable(String),
    /// A CUDA or cuBLAS call failed.
    #[error("{0}")]
    Cuda(String),
    /// Bad settings.
    #[error("{0}")]
    Config(String),
    /// Reading or writing a file failed.
    #[error("{0}")]
    Io(String),
    /// A result file is malformed.
    #[error("{0}")]
    Parse(String),
    /// Another process used the GPU during the run (this many): the result is discarded.
    #[error("contended: {0} other process(es) used the GPU during the run; result discarded")]
    Contended(usize),
    /// The GPU was left alone.
    #[error("{outcome}: {detail}", outcome = .0.outcome(), detail = .1)]
    Skipped(worker::Skip, String),
    /// The worker process failed.
    #[error("probe worker {kind}: {message}", kind = .kind.as_str())]
    Worker {
        /// What happened.
        kind: WorkerFailure,
        /// The details.
        message: String,
    },
}

/// How a probe worker process failed ([`ProbeError::Worker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkerFailure {
    /// It could not be started.
    SpawnFailed,
    /// It was killed at its deadline.
    Timeout,
    /// It printed more than a reply may hold.
    OutputTooLarge,
    /// It exited with a non-zero status (or waiting for it failed).
    Failed,
    /// A signal ended it.
    Crashed,
    /// The caller cancelled it.
    Cancelled,
    /// Its reply was not understood, or did not belong to the request.
    BadReply,
}

impl WorkerFailure {
    /// Every failure kind.
    pub const ALL: &'static [WorkerFailure] = &[
        WorkerFailure::SpawnFailed,
        WorkerFailure::Timeout,
        WorkerFailure::OutputTooLarge,
        WorkerFailure::Failed,
        WorkerFailure::Crashed,
        WorkerFailure::Cancelled,
        WorkerFailure::BadReply,
    ];

    /// Its short stable name, as error messages and logs show it.
    pub fn as_str(&self) -> &'static str {
        match self {
            WorkerFailure::SpawnFailed => "spawn_failed",
            WorkerFailure::Timeout => "timeout",
            WorkerFailure::OutputTooLarge => "output_too_large",
            WorkerFailure::Failed => "failed",
            WorkerFailure::Crashed => "crashed",
            WorkerFailure::Cancelled => "cancelled",
            WorkerFailure::BadReply => "bad_reply",
        }
    }
}

impl std::fmt::Display for WorkerFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to run in one-shot mode.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// Probes, in order.
    pub probes: Vec<ProbeKind>,
    /// CUDA ordinals; `None` means every visible GPU.
    pub gpus: Option<Vec<usize>>,
    /// Unrecorded iterations before measuring.
    pub warmup: usize,
    /// Recorded iterations.
    pub iterations: usize,
    /// Seed of the input data.
    pub seed: u64,
    /// Workload sizes.
    pub sizes: ProbeSizes,
}

/// Progress of a one-shot run, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Total iterations (warm-up included) about to run.
    Planned(u64),
    /// A probe starts on a GPU.
    Started(ProbeKind, usize),
    /// One iteration done.
    Step,
}

/// A probe that failed on a GPU (CUDA ordinal) in a one-shot run.
pub type Failure = (ProbeKind, usize, ProbeError);

/// Runs every selected probe on every selected GPU. A probe that fails on a GPU is reported in
/// the second list and the run goes on; the error is for when nothing could run at all.
pub fn run_once(
    opts: &RunOptions,
    mut environment: Environment,
    progress: &mut dyn FnMut(Progress),
) -> Result<(RunResults, Vec<Failure>), ProbeError> {
    opts.sizes.validate()?;
    if opts.iterations == 0 {
        return Err(ProbeError::Config("--iterations must be at least 1".into()));
    }
    let count = cuda::device_count()?;
    if count == 0 {
        return Err(ProbeError::Unavailable(
            "the CUDA driver sees no GPU".into(),
        ));
    }
    let gpus = match &opts.gpus {
        Some(list) => {
            if let Some(bad) = list.iter().find(|g| **g >= count) {
                return Err(ProbeError::Config(format!(
                    "--gpus: GPU {bad} does not exist; this machine has {count} (0..{})",
                    count - 1
                )));
            }
            list.clone()
        }
        None => (0..count).collect(),
    };
    environment.cuda_version = cuda::driver_cuda_version().unwrap_or_default();
    let (pair, single): (Vec<ProbeKind>, Vec<ProbeKind>) =
        opts.probes.iter().partition(|k| k.needs_peer());
    let ordered_pairs = gpus.len() * gpus.len().saturating_sub(1);
    let rounds = (opts.warmup + opts.iterations) as u64;
    progress(Progress::Planned(
        (gpus.len() * single.len()) as u64 * rounds + (ordered_pairs * pair.len()) as u64 * rounds,
    ));
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for &ordinal in &gpus {
        if single.is_empty() {
            break;
        }
        let mut gpu = match cuda::Gpu::open(ordinal) {
            Ok(g) => g,
            Err(e) => {
                for k in &single {
                    failures.push((*k, ordinal, e.clone()));
                }
                continue;
            }
        };
        for &kind in &single {
            progress(Progress::Started(kind, ordinal));
            match gpu.run(
                kind,
                &opts.sizes,
                opts.seed,
                opts.warmup,
                opts.iterations,
                &mut || progress(Progress::Step),
            ) {
                Ok(values) => results.push(ProbeResult {
                    probe: kind.name().to_string(),
                    gpu: ordinal,
                    uuid: gpu.uuid.clone(),
                    model: gpu.name.clone(),
                    unit: kind.unit(),
                    peer: None,
                    summary: stats::summarize(&values),
                    values,
                }),
                Err(e) => failures.push((kind, ordinal, e)),
            }
        }
        // A failed release follows a CUDA fault: report it against the GPU's last probe.
        if let (Err(e), Some(&last)) = (gpu.release(), single.last()) {
            failures.push((last, ordinal, e));
        }
    }
    if !pair.is_empty() {
        run_pairs(opts, &gpus, &pair, &mut results, &mut failures, progress);
    }
    Ok((
        RunResults {
            format: results::FORMAT.to_string(),
            environment,
            warmup: opts.warmup,
            iterations: opts.iterations,
            seed: opts.seed,
            sizes: opts.sizes.clone(),
            results,
            node_results: Vec::new(),
        },
        failures,
    ))
}

/// What node probes a one-shot run measures (`probe run --probe nccl_allreduce,storage_read`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeOptions {
    /// `nccl_allreduce` up to this many bytes per GPU, over the selected GPUs.
    pub nccl_max_bytes: Option<u64>,
    /// `storage_read` of each of these paths (a file, or a directory for the scratch file).
    pub storage_paths: Vec<std::path::PathBuf>,
    /// Bytes each `storage_read` reads.
    pub storage_bytes: u64,
}

/// A node probe that failed in a one-shot run: its label and why.
pub type NodeFailure = (String, ProbeError);

/// Runs the node probes of `node` with `warmup` unrecorded and `iterations` recorded runs each:
/// `storage_read` of each path, then `nccl_allreduce` over `gpus` (every visible GPU when
/// `None`). A probe that fails is reported in the second list and the others go on.
pub fn run_node(
    node: &NodeOptions,
    gpus: Option<&[usize]>,
    warmup: usize,
    iterations: usize,
    progress: &mut dyn FnMut(Progress),
) -> (Vec<NodeResult>, Vec<NodeFailure>) {
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for path in &node.storage_paths {
        let label = format!("storage_read {}", path.display());
        let mut values = Vec::with_capacity(iterations);
        // Resolved once: a link swapped in during the runs makes them fail, never lead away.
        let real = storage::resolve(path);
        let mut failed = None;
        for i in 0..warmup + iterations {
            match real.clone().and_then(|real| {
                storage::read_throughput(&real, std::slice::from_ref(&real), node.storage_bytes)
            }) {
                Ok(r) if i >= warmup => values.push(r.bytes_per_second),
                Ok(_) => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            progress(Progress::Step);
        }
        match failed {
            Some(e) => failures.push((label, e)),
            None => results.push(NodeResult {
                probe: "storage_read".into(),
                target: path.display().to_string(),
                bytes: node.storage_bytes,
                unit: ProbeUnit::BytesPerSecond,
                summary: stats::summarize(&values),
                values,
            }),
        }
    }
    if let Some(max_bytes) = node.nccl_max_bytes {
        match run_nccl_once(max_bytes, gpus, warmup, iterations, progress) {
            Ok(r) => results.extend(r),
            Err(e) => failures.push(("nccl_allreduce".into(), e)),
        }
    }
    (results, failures)
}

fn run_nccl_once(
    max_bytes: u64,
    gpus: Option<&[usize]>,
    warmup: usize,
    iterations: usize,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<NodeResult>, ProbeError> {
    let nccl = nccl::Nccl::load().map_err(ProbeError::Unavailable)?;
    let ordinals: Vec<usize> = match gpus {
        Some(g) => g.to_vec(),
        None => (0..cuda::device_count()?).collect(),
    };
    let mut open = Vec::with_capacity(ordinals.len());
    for o in ordinals {
        match cuda::Gpu::open(o) {
            Ok(g) => open.push(g),
            Err(e) => {
                for g in open {
                    let _ = g.release();
                }
                return Err(e);
            }
        }
    }
    let sizes = ProbeSizes::default();
    let r = nccl::run_allreduce(
        &nccl,
        &open,
        max_bytes,
        warmup,
        iterations,
        sizes.target_seconds,
        &mut || progress(Progress::Step),
    );
    let mut released = Ok(());
    for g in open {
        released = released.and(g.release());
    }
    let r = r?;
    released?;
    Ok(r.sizes
        .into_iter()
        .map(|s| NodeResult {
            probe: "nccl_allreduce".into(),
            target: format!("{} GPUs", r.gpus),
            bytes: s.bytes,
            unit: ProbeUnit::BytesPerSecond,
            summary: stats::summarize(&s.busbw_values),
            values: s.busbw_values,
        })
        .collect())
}

/// Runs the pair probes from each selected GPU to each other one, with every GPU open at once
/// (a context per GPU for the whole pass, rather than two per pair).
fn run_pairs(
    opts: &RunOptions,
    gpus: &[usize],
    pair: &[ProbeKind],
    results: &mut Vec<ProbeResult>,
    failures: &mut Vec<Failure>,
    progress: &mut dyn FnMut(Progress),
) {
    let mut open: Vec<(usize, Result<cuda::Gpu, ProbeError>)> =
        gpus.iter().map(|&o| (o, cuda::Gpu::open(o))).collect();
    for a in 0..open.len() {
        for b in 0..open.len() {
            if a == b {
                continue;
            }
            // Split borrows: the source mutably, the peer shared.
            let (src, dst) = if a < b {
                let (lo, hi) = open.split_at_mut(b);
                (&mut lo[a], &hi[0])
            } else {
                let (lo, hi) = open.split_at_mut(a);
                (&mut hi[0], &lo[b])
            };
            let ordinal = src.0;
            for &kind in pair {
                progress(Progress::Started(kind, ordinal));
                let run = match (&mut src.1, &dst.1) {
                    (Ok(g), Ok(p)) => {
                        g.run_peer(p, &opts.sizes, opts.warmup, opts.iterations, &mut || {
                            progress(Progress::Step)
                        })
                    }
                    (Err(e), _) => Err(e.clone()),
                    (_, Err(e)) => Err(e.clone()),
                };
                match (run, &src.1) {
                    (Ok(values), Ok(g)) => results.push(ProbeResult {
                        probe: kind.name().to_string(),
                        gpu: ordinal,
                        uuid: g.uuid.clone(),
                        model: g.name.clone(),
                        unit: kind.unit(),
                        peer: Some(dst.0),
                        summary: stats::summarize(&values),
                        values,
                    }),
                    (Err(e), _) => failures.push((kind, ordinal, e)),
                    (Ok(_), Err(e)) => failures.push((kind, ordinal, e.clone())),
                }
            }
        }
    }
    for (ordinal, g) in open.drain(..) {
        if let (Ok(g), Some(&last)) = (g, pair.last()) {
            if let Err(e) = g.release() {
                failures.push((last, ordinal, e));
            }
        }
    }
}
