//! Compact records kept from a trace: what the analyses need and nothing else.
//!
//! A Kineto trace is mostly CPU events (`python_function`, `cpu_op`); the analyses need the GPU
//! rows, the CPU rows that carry a correlation id (the launches), and the annotations. Times
//! are kept raw (µs, as `f64`) until the whole file is read, because HTA's rounding applies to
//! every row or to none depending on whether any timestamp in the file is fractional.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::classify::KernelClass;

/// What kind of GPU row, from its category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuKind {
    /// `kernel` / `Kernel`
    Kernel,
    /// `gpu_memcpy` / `Memcpy`
    Memcpy,
    /// `gpu_memset` / `Memset`
    Memset,
    /// `cuda_sync`
    Sync,
    /// any other category with a stream (e.g. `gpu_user_annotation` with a stream arg)
    Other,
}

impl GpuKind {
    /// The categories HTA's idle-time breakdown looks at (kernels, memcpy, memset).
    pub fn in_idle_breakdown(self) -> bool {
        matches!(self, GpuKind::Kernel | GpuKind::Memcpy | GpuKind::Memset)
    }
}

/// A row HTA treats as GPU work: it has a `stream` arg that is not −1.
#[derive(Debug, Clone)]
pub struct GpuRow {
    /// Raw start (µs).
    pub ts: f64,
    /// Raw end, `ts + dur` computed in f64 as HTA does (µs).
    pub end: f64,
    /// Stream (`args.stream`, coerced to an integer as pandas does).
    pub stream: i64,
    /// `args.correlation`, −1 when absent.
    pub correlation: i64,
    /// Index into [`RankTrace::names`].
    pub name: u32,
    /// Index + 1 into [`RankTrace::aux`], 0 when the row has no extra args.
    pub aux: u32,
    /// Category kind.
    pub kind: GpuKind,
    /// HTA's class of the name.
    pub class: KernelClass,
    /// Whether HTA's step filter sees it as GPU (stream ≥ 0 and correlation ≥ 0, or a
    /// `Context Sync`/`Event Sync` row); otherwise the filter treats it as a CPU row.
    pub filter_gpu: bool,
}

/// Extra args of a GPU row: NCCL collective args and memcpy/memset sizes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Aux {
    /// `Collective name`.
    pub collective: Option<String>,
    /// `In msg nelems`.
    pub in_nelems: Option<u64>,
    /// `Out msg nelems`.
    pub out_nelems: Option<u64>,
    /// `Group size`.
    pub group_size: Option<u64>,
    /// `dtype`.
    pub dtype: Option<String>,
    /// `Process Group Name`.
    pub pg_name: Option<String>,
    /// `bytes` of a memcpy/memset.
    pub bytes: Option<u64>,
}

/// A CPU row that carries a correlation id (a launch or another runtime call).
#[derive(Debug, Clone, Copy)]
pub struct CpuCorr {
    /// Raw start (µs).
    pub ts: f64,
    /// Raw end (µs).
    pub end: f64,
    /// `args.correlation`.
    pub correlation: i64,
    /// Index into [`RankTrace::names`].
    pub name: u32,
    /// `args.stream` is −1 or absent (HTA's launch statistics take CPU rows from these).
    pub no_stream: bool,
}

/// A CPU annotation: `ProfilerStep#N`, phases, FSDP operations, other `user_annotation`s.
#[derive(Debug, Clone, Copy)]
pub struct Annotation {
    /// Raw start (µs).
    pub ts: f64,
    /// Raw end (µs).
    pub end: f64,
    /// Index into [`RankTrace::names`].
    pub name: u32,
    /// Thread id (strings are hashed).
    pub tid: i64,
}

/// The first element of `traceEvents`, when HTA keeps it as a row (HTA's idle breakdown falls
/// back to this row's start for kernels whose launch is missing: its "index 0").
#[derive(Debug, Clone, Copy)]
pub struct FirstRow {
    /// Raw start (µs).
    pub ts: f64,
    /// Whether it is a GPU row for the step filter.
    pub filter_gpu: bool,
    /// Its correlation (−1 when absent).
    pub correlation: i64,
}

/// Counters of what the parser saw and how it handled odd input.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ParseStats {
    /// Bytes of (decompressed) JSON read.
    pub bytes: u64,
    /// Elements of `traceEvents`.
    pub events: u64,
    /// Rows with `dur` and `cat` (HTA's rows).
    pub rows: u64,
    /// GPU rows kept.
    pub gpu_rows: u64,
    /// CPU rows with a correlation id kept.
    pub cpu_launch_rows: u64,
    /// Annotations kept.
    pub annotations: u64,
    /// Rows with a negative or non-finite duration (counted as zero-length).
    pub bad_durations: u64,
    /// Rows whose timestamp is not a finite number (dropped).
    pub bad_timestamps: u64,
    /// NCCL element counts above [`crate::MAX_NELEMS`] (clamped to it).
    pub clamped_counts: u64,
}

/// Everything kept from one trace file (one rank).
#[derive(Debug, Clone, Default)]
pub struct RankTrace {
    /// The file.
    pub path: PathBuf,
    /// `distributedInfo.rank`, when present.
    pub rank: Option<i64>,
    /// `distributedInfo.world_size`, when present.
    pub world_size: Option<u64>,
    /// `baseTimeNanoseconds`, when present.
    pub base_time_ns: Option<i64>,
    /// `deviceProperties[0].name`, when present.
    pub device_name: Option<String>,
    /// The host process id of the first kernel launch (a CPU row with a correlation id and an
    /// integer `pid`): the training process, which NVML lists on the GPU it uses.
    pub host_pid: Option<u32>,
    /// Interned names.
    pub names: Vec<String>,
    /// GPU rows, in file order.
    pub gpu: Vec<GpuRow>,
    /// Extra args of GPU rows.
    pub aux: Vec<Aux>,
    /// CPU rows with a correlation id, in file order.
    pub cpu_corr: Vec<CpuCorr>,
    /// Annotations, in file order.
    pub annotations: Vec<Annotation>,
    /// Distinct `ProfilerStep#N` names among rows (HTA filters steps when, over all ranks,
    /// there are at least two).
    pub step_names: BTreeSet<String>,
    /// Smallest raw start of a CPU (filter) row without a correlation id.
    pub cpu_nocorr_min_ts: Option<f64>,
    /// Smallest raw start of any row.
    pub min_ts: Option<f64>,
    /// The first element of `traceEvents`, when it is a row.
    pub first_row: Option<FirstRow>,
    /// Whether HTA rounds this trace's times to whole µs (some timestamp is fractional or
    /// missing).
    pub round: bool,
    /// What the parser saw.
    pub stats: ParseStats,
}

impl RankTrace {
    /// The name behind an interned index.
    pub fn name(&self, idx: u32) -> &str {
        self.names
            .get(idx as usize)
            .map(String::as_str)
            .unwrap_or("")
    }

    /// HTA's rounded `(ts, end)` in whole µs for a raw interval.
    pub fn rounded(&self, ts: f64, end: f64) -> (i64, i64) {
        if self.round {
            (ts.ceil() as i64, end.floor() as i64)
        } else {
            (ts as i64, end.floor() as i64)
        }
    }
}
