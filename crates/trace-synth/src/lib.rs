//! A generator of realistic multi-rank Kineto traces with a known ground truth, for tests and
//! benchmarks (no GPU needed).
//!
//! Each rank runs FSDP-style training steps: an input copy (`Memcpy HtoD`, stream 9), forward
//! layers whose parameter all-gathers (stream 20) hide behind the previous layer's GEMM
//! (stream 7) except the first, a second compute stream (13) with sub-µs kernels, backward layers
//! with hidden reduce-scatters except the last, an optimizer with an exposed grad-norm
//! all-reduce, and a `Context Sync` on the context-wide stream 4294967295. CPU side: one
//! `ProfilerStep#N` per step, phase annotations (`## forward ##`, `## backward ##`,
//! `Optimizer.step#AdamW.step`), FSDP annotations, launches with correlation ids, flow events,
//! and as many `cpu_op`/`python_function` events as asked (the bulk of a real trace).
//! NCCL kernels carry the args Kineto copies from `record_param_comms`.
//!
//! Every time is designed in whole µs `[T, E)` and written as `ts = T − a`, `dur = E − T + a + b`
//! with `a, b` in eighths, so HTA's rounding gives back exactly `[T, E)`; the ground truth is
//! computed from the design with a µs bitmap (a different algorithm from the analysis' sweep).
//!
//! The parts: this module holds the configuration, the ground-truth types and the design
//! records shared by the others; `schedule` designs a rank's timeline, `json` writes it as a
//! Kineto trace and `truth` computes the ground truth from the design.

#![deny(missing_docs)]

mod json;
mod schedule;
mod truth;

use std::collections::BTreeMap;
use std::io::Write;

use self::json::write_json;
use self::schedule::schedule;
use self::truth::truth;

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthConfig {
    /// Ranks.
    pub ranks: usize,
    /// Profiler steps per rank (HTA drops the last).
    pub steps: usize,
    /// Layers per step.
    pub layers: usize,
    /// CPU events (`cpu_op` / `python_function`) written per GPU row: what makes traces big.
    pub cpu_events_per_kernel: usize,
    /// Rank that starts its steps late (host-bound), if any.
    pub straggler: Option<usize>,
    /// How late (µs per step).
    pub straggler_delay_us: i64,
    /// Seed of the durations.
    pub seed: u64,
    /// Write `distributedInfo` after `traceEvents` (as on-demand traces do).
    pub distributed_info_last: bool,
    /// Rank N runs on CUDA device N (`deviceProperties` id, GPU rows' `pid` and `device`), as
    /// in a one-node job without per-rank `CUDA_VISIBLE_DEVICES`; else every rank on device 0.
    pub device_per_rank: bool,
    /// Mark the trace as generated: `"simulated": true` in `distributedInfo` and the trace name
    /// (readers ignore unknown keys; a person opening the file sees it).
    pub simulated: bool,
    /// Host process id of each rank's CPU rows (rank N: entry N, else 4242 + N).
    pub host_pids: Vec<u32>,
    /// Write times as recent PyTorch does on some hosts: epoch-based (about 1.7e15 µs) with
    /// nanosecond fractions (`1700000001234567.891`), plus a sub-2 µs memset or memcpy beside
    /// every GPU row. At that magnitude float64 resolves 0.25 µs, so HTA's rounding (ts, dur
    /// parsed as float64, ceil of ts, floor of ts + dur) differs from exact decimal arithmetic on
    /// many rows. The designed whole-µs times no longer round back exactly: the ground truth
    /// does not hold for such a trace; compare it with HTA (crates/trace/tests/hta-compare.sh).
    pub ns_epoch: bool,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            ranks: 4,
            steps: 4,
            layers: 6,
            cpu_events_per_kernel: 2,
            straggler: Some(2),
            straggler_delay_us: 300,
            seed: 7,
            distributed_info_last: true,
            device_per_rank: false,
            simulated: false,
            host_pids: Vec::new(),
            ns_epoch: false,
        }
    }
}

/// Ground truth of one rank, over the complete steps (all but the last).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankTruth {
    /// Rank.
    pub rank: i64,
    /// Last end − first start of kept GPU rows (µs).
    pub kernel_time_us: i64,
    /// kernel_time − busy (µs).
    pub idle_time_us: i64,
    /// Busy µs of computation kernels.
    pub compute_time_us: i64,
    /// Busy µs of communication kernels.
    pub comm_time_us: i64,
    /// Busy µs where both run.
    pub overlap_time_us: i64,
    /// Per stream: (host wait, kernel wait, other) idle µs.
    pub idle_by_stream: BTreeMap<i64, (i64, i64, i64)>,
    /// Per collective type: (kernels, bytes S, raw µs).
    pub collectives: BTreeMap<&'static str, (u64, f64, f64)>,
    /// Raw step durations (µs) of the complete steps.
    pub step_durations_us: Vec<f64>,
    /// Launch/GPU pairs of cudaLaunchKernel / cudaMemcpyAsync.
    pub launches: u64,
    /// FSDP annotations in complete steps, per op name.
    pub fsdp_counts: BTreeMap<&'static str, u64>,
    /// Raw µs of each phase's annotations in complete steps.
    pub phase_cpu_us: BTreeMap<&'static str, f64>,
    /// Start (raw µs) of each communication kernel, in order.
    pub comm_starts: Vec<f64>,
}

/// Ground truth of a job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Truth {
    /// Per rank.
    pub ranks: Vec<RankTruth>,
    /// The straggler.
    pub straggler: Option<i64>,
    /// Per rank: Σ over collectives of (latest start − its start), µs.
    pub sync_wait_us: BTreeMap<i64, f64>,
}

const T0: i64 = 1_700_000_000_000;
const SYNC_STREAM: i64 = 4_294_967_295;

#[derive(Clone, Copy, PartialEq)]
enum Class {
    Comp,
    Comm,
    Mem,
    Sync,
}

struct GpuItem {
    stream: i64,
    t: i64,
    e: i64,
    a: f64,
    b: f64,
    name: &'static str,
    class: Class,
    launch: i64,
    launch_name: &'static str,
    nccl: Option<(&'static str, u64, u64, &'static str, u64)>,
    bytes: Option<u64>,
    step: usize,
}

struct CpuAnno {
    t: i64,
    e: i64,
    name: String,
    step: usize,
}

/// Generates one rank's trace into `out` and returns its ground truth. `gz` is not handled
/// here: wrap `out` in a gzip encoder.
pub fn write_rank(
    cfg: &SynthConfig,
    rank: usize,
    out: &mut dyn Write,
) -> std::io::Result<RankTruth> {
    let (gpu, annos, step_bounds) = schedule(cfg, rank);
    write_json(cfg, rank, &gpu, &annos, &step_bounds, out)?;
    Ok(truth(cfg, rank, &gpu, &annos, &step_bounds))
}

/// Writes every rank as `rank{N}.pt.trace.json` (or `.json.gz`) under `dir`; returns the truth.
pub fn write_job(cfg: &SynthConfig, dir: &std::path::Path, gzip: bool) -> std::io::Result<Truth> {
    std::fs::create_dir_all(dir)?;
    let mut truth = Truth {
        straggler: cfg.straggler.filter(|&s| s < cfg.ranks).map(|s| s as i64),
        ..Truth::default()
    };
    for r in 0..cfg.ranks {
        let name = if gzip {
            format!("rank{r}.pt.trace.json.gz")
        } else {
            format!("rank{r}.pt.trace.json")
        };
        let f = std::fs::File::create(dir.join(name))?;
        let t = if gzip {
            let mut w = flate2::write::GzEncoder::new(
                std::io::BufWriter::new(f),
                flate2::Compression::fast(),
            );
            let t = write_rank(cfg, r, &mut w)?;
            w.finish()?.flush()?;
            t
        } else {
            let mut w = std::io::BufWriter::new(f);
            let t = write_rank(cfg, r, &mut w)?;
            w.flush()?;
            t
        };
        truth.ranks.push(t);
    }
    let n = truth
        .ranks
        .iter()
        .map(|r| r.comm_starts.len())
        .min()
        .unwrap_or(0);
    for k in 0..n {
        let last = truth
            .ranks
            .iter()
            .map(|r| r.comm_starts[k])
            .fold(f64::NEG_INFINITY, f64::max);
        for r in &truth.ranks {
            *truth.sync_wait_us.entry(r.rank).or_default() += last - r.comm_starts[k];
        }
    }
    Ok(truth)
}
