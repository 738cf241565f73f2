//! The series the analysed traces add to: counters of analysed time per job and rank (they
//! add over files, ranks, steps and jobs, so PromQL sums stay correct), bytes and kernels per
//! collective, time per phase, and the source's own counters (files by outcome, analysis time,
//! bytes read). Bounded: at most `max_ranks` (job, rank) pairs, the least recently updated job
//! dropped first; collectives and phases are closed sets; no kernel name ever becomes a label.

use std::collections::{BTreeMap, HashMap};

use dgx_pixels_metrics::{Metric, Sample};
use serde::{Deserialize, Serialize};

use dgx_pixels_trace::analysis::RankReport;
use dgx_pixels_trace::memory::SnapshotReport;

/// Longest `trace_job` label value, in bytes; longer directory paths keep their end (the most
/// specific part) after a hash of the whole path.
pub const MAX_JOB_BYTES: usize = 128;

/// How the analysis of one file ended, or why a file name found was left alone: the `outcome`
/// label of `dgx_pixels_trace_files_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Parsed and analysed; its numbers are in the series.
    Analysed,
    /// Larger than `[trace] max_file_bytes`; not read.
    TooLarge,
    /// The JSON or gzip stream ends early, still after `max_attempts` tries of the unchanged
    /// file.
    Truncated,
    /// JSON, but not a Kineto trace (no `traceEvents`, not an object).
    NotATrace,
    /// Invalid JSON, a corrupt gzip stream, or an event over `max_event_bytes`.
    ParseError,
    /// The file could not be opened or read.
    Unreadable,
    /// The parse took longer than `max_analysis_time`.
    Timeout,
    /// The analysis failed in an unexpected way (a bug; logged).
    InternalError,
    /// Over a bound of one file: decompressed bytes (`max_decompressed_bytes`), rows
    /// (`max_rows`), a snapshot's values or nesting.
    OverLimit,
    /// When opened, not the regular file listed (a symlink, a FIFO or another file was put in
    /// its place).
    Replaced,
    /// The analysis worker process went over its address-space limit
    /// (`[trace] max_worker_memory`).
    OutOfMemory,
    /// The analysis worker process died (a signal other than its limits) or exited with an
    /// error instead of a reply.
    Crashed,
    /// The analysis worker process printed more than the reply bound, or a reply that does not
    /// parse.
    BadOutput,
    /// A trace-named entry that is a symlink: never followed (counted once per name).
    Symlink,
    /// A trace-named entry that is not a regular file (a FIFO, socket or device; once per
    /// name).
    NotRegular,
    /// A trace-named entry whose name is not UTF-8 (once per name).
    InvalidName,
    /// A file found but forgotten before it was analysed: the files waiting outgrew twice
    /// `max_entries`.
    Dropped,
}

impl Outcome {
    /// Every outcome, in exposition order.
    pub const ALL: [Outcome; 17] = [
        Outcome::Analysed,
        Outcome::TooLarge,
        Outcome::Truncated,
        Outcome::NotATrace,
        Outcome::ParseError,
        Outcome::Unreadable,
        Outcome::Timeout,
        Outcome::InternalError,
        Outcome::OverLimit,
        Outcome::Replaced,
        Outcome::OutOfMemory,
        Outcome::Crashed,
        Outcome::BadOutput,
        Outcome::Symlink,
        Outcome::NotRegular,
        Outcome::InvalidName,
        Outcome::Dropped,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Analysed => "analysed",
            Outcome::TooLarge => "too_large",
            Outcome::Truncated => "truncated",
            Outcome::NotATrace => "not_a_trace",
            Outcome::ParseError => "parse_error",
            Outcome::Unreadable => "unreadable",
            Outcome::Timeout => "timeout",
            Outcome::InternalError => "internal_error",
            Outcome::OverLimit => "over_limit",
            Outcome::Replaced => "replaced",
            Outcome::OutOfMemory => "out_of_memory",
            Outcome::Crashed => "crashed",
            Outcome::BadOutput => "bad_output",
            Outcome::Symlink => "symlink",
            Outcome::NotRegular => "not_regular",
            Outcome::InvalidName => "invalid_name",
            Outcome::Dropped => "dropped",
        }
    }
}

/// The `trace_job` label for a directory relative to the watched root: printable ASCII, `_` for
/// anything else, at most [`MAX_JOB_BYTES`]. One-to-one: when a character had to be replaced,
/// `~` and a hash of the original follow (`a b` is `a_b~…`, distinct from `a_b`; `~` never
/// survives sanitizing, so no directory's own name can take that form); a longer one keeps a
/// hash of the whole and its end.
pub fn job_label(dir: &str) -> String {
    let clean: String = dir
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-/:@+=".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    // FNV-1a of the original: stable across runs and platforms.
    let hash = dir.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    if clean == dir && clean.len() <= MAX_JOB_BYTES {
        return clean;
    }
    let suffix = format!("~{:012x}", hash >> 16);
    if clean.len() + suffix.len() <= MAX_JOB_BYTES {
        return format!("{clean}{suffix}");
    }
    let prefix = format!("{hash:016x}~");
    let keep = MAX_JOB_BYTES - prefix.len();
    format!("{prefix}{}", &clean[clean.len() - keep..])
}

/// Analysed time and volume of one (job, rank), in base units.
#[derive(Debug, Default, Clone)]
struct Group {
    /// Sequence number of the last update (for eviction).
    touched: u64,
    last_analysis: f64,
    /// The host pid the rank's latest analysed trace names.
    pid: Option<u32>,
    gpu: f64,
    compute: f64,
    non_compute: f64,
    idle: f64,
    communication: f64,
    exposed: f64,
    overlapped: f64,
    steps: f64,
    step_seconds: f64,
    /// Per collective: kernels, seconds, sized seconds, bytes, bus bytes.
    collectives: BTreeMap<String, [f64; 5]>,
    /// Per phase: CPU seconds.
    phases: BTreeMap<String, f64>,
}

/// Every series of the source.
#[derive(Debug)]
pub struct Series {
    max_ranks: usize,
    seq: u64,
    groups: HashMap<(String, i64), Group>,
    files: BTreeMap<Outcome, u64>,
    analysis_seconds: f64,
    read_bytes: f64,
    /// The latest memory snapshot per (job, rank or "", CUDA device): sequence number of the
    /// update, reserved, allocated, fragmentation, peak allocated (with history).
    memory: HashMap<MemoryKey, (u64, [Option<f64>; 4])>,
}

/// (job, rank or "", CUDA device) of a memory snapshot's device.
type MemoryKey = (String, String, i64);

const US: f64 = 1e-6;

/// Adds `x` to a counter only when it is a finite positive number: HTA's rounding gives a
/// sub-µs row a negative duration, and a counter must never go down (Prometheus would read a
/// reset) nor become infinite.
fn inc(counter: &mut f64, x: f64) {
    if x.is_finite() && x > 0.0 {
        let v = *counter + x;
        if v.is_finite() {
            *counter = v;
        }
    }
}

impl Series {
    /// Empty, keeping at most `max_ranks` (job, rank) pairs.
    pub fn new(max_ranks: usize) -> Series {
        Series {
            max_ranks: max_ranks.max(1),
            seq: 0,
            groups: HashMap::new(),
            files: Outcome::ALL.iter().map(|&o| (o, 0)).collect(),
            analysis_seconds: 0.0,
            read_bytes: 0.0,
            memory: HashMap::new(),
        }
    }

    /// Sets the memory gauges of `job` and `rank` (empty when the file name gives none) from a
    /// snapshot; at most `max_ranks` (job, rank, device) entries, the oldest dropped first.
    pub fn snapshot(&mut self, job: &str, rank: &str, report: &SnapshotReport) {
        for d in &report.devices {
            self.seq += 1;
            let values = [
                Some(d.reserved_bytes as f64),
                Some(d.allocated_bytes as f64),
                Some(d.fragmentation_ratio),
                d.peak_allocated_bytes.map(|b| b as f64),
            ];
            self.memory.insert(
                (job.to_string(), rank.to_string(), d.device),
                (self.seq, values),
            );
        }
        self.evict_memory();
    }

    fn evict_memory(&mut self) {
        while self.memory.len() > self.max_ranks {
            let oldest = self
                .memory
                .iter()
                .min_by_key(|(_, (seq, _))| *seq)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.memory.remove(&k);
            }
        }
    }

    /// Keeps at most `max_ranks` (job, rank) pairs from now on (a reload may change it).
    pub fn set_max_ranks(&mut self, max_ranks: usize) {
        self.max_ranks = max_ranks.max(1);
        self.evict("");
        self.evict_memory();
    }

    /// Adds what `newer` counted (a source that started before this state was handed to it):
    /// its counts add, its ranks and snapshots replace those of the same keys.
    pub fn absorb(&mut self, newer: Series) {
        for (o, n) in newer.files {
            *self.files.entry(o).or_default() += n;
        }
        inc(&mut self.analysis_seconds, newer.analysis_seconds);
        inc(&mut self.read_bytes, newer.read_bytes);
        for (k, mut g) in newer.groups {
            self.seq += 1;
            g.touched = self.seq;
            self.groups.insert(k, g);
        }
        for (k, (_, v)) in newer.memory {
            self.seq += 1;
            self.memory.insert(k, (self.seq, v));
        }
        self.evict("");
        self.evict_memory();
    }

    /// Counts one file's outcome.
    pub fn count(&mut self, outcome: Outcome) {
        *self.files.entry(outcome).or_default() += 1;
    }

    /// Adds the cost of one analysis attempt.
    pub fn cost(&mut self, seconds: f64, bytes: u64) {
        inc(&mut self.analysis_seconds, seconds);
        inc(&mut self.read_bytes, bytes as f64);
    }

    /// Adds one analysed rank of `job` (at unix time `now`).
    pub fn add(&mut self, job: &str, r: &RankReport, now: f64) {
        self.seq += 1;
        let key = (job.to_string(), r.rank);
        let g = self.groups.entry(key).or_default();
        g.touched = self.seq;
        g.last_analysis = now;
        g.pid = r.process_id;
        let t = &r.temporal_breakdown;
        inc(&mut g.gpu, t.kernel_time_us as f64 * US);
        inc(&mut g.compute, t.compute_time_us as f64 * US);
        inc(&mut g.non_compute, t.non_compute_time_us as f64 * US);
        inc(&mut g.idle, t.idle_time_us as f64 * US);
        let c = &r.communication;
        inc(&mut g.communication, c.time_us as f64 * US);
        inc(&mut g.exposed, c.exposed_time_us as f64 * US);
        inc(&mut g.overlapped, c.overlapped_time_us as f64 * US);
        inc(&mut g.steps, r.steps.numbers.len() as f64);
        let step_us: f64 = r.steps.durations_us.iter().map(|d| d.max(0.0)).sum();
        inc(&mut g.step_seconds, step_us * US);
        for s in &c.collectives {
            let e = g.collectives.entry(s.collective.clone()).or_default();
            inc(&mut e[0], s.count as f64);
            inc(&mut e[1], s.time_us * US);
            inc(&mut e[2], s.sized_time_us * US);
            inc(&mut e[3], s.bytes);
            inc(&mut e[4], s.bus_bytes);
        }
        for p in &r.phases {
            inc(
                g.phases.entry(p.phase.clone()).or_default(),
                p.cpu_time_us * US,
            );
        }
        self.evict(job);
    }

    /// Drops the least recently updated jobs (never `current`, unless it alone is over the
    /// bound: then its least recently updated ranks) until at most `max_ranks` pairs remain.
    fn evict(&mut self, current: &str) {
        while self.groups.len() > self.max_ranks {
            let mut latest: HashMap<&str, u64> = HashMap::new();
            for ((job, _), g) in &self.groups {
                let e = latest.entry(job.as_str()).or_default();
                *e = (*e).max(g.touched);
            }
            let victim = latest
                .into_iter()
                .filter(|(j, _)| *j != current)
                .min_by_key(|(_, t)| *t)
                .map(|(j, _)| j.to_string());
            match victim {
                Some(job) => self.groups.retain(|(j, _), _| *j != job),
                None => {
                    let oldest = self
                        .groups
                        .iter()
                        .min_by_key(|(_, g)| g.touched)
                        .map(|(k, _)| k.clone());
                    if let Some(k) = oldest {
                        self.groups.remove(&k);
                    }
                }
            }
        }
    }

    /// The samples to serve, with `pending` files waiting and `unlisted` trace-named files the
    /// last listing did not look at.
    pub fn samples(&self, pending: usize, unlisted: usize) -> Vec<Sample> {
        let mut out = Vec::with_capacity(12 + self.groups.len() * 24);
        for (o, n) in &self.files {
            out.push(Sample::new(Metric::TraceFiles, [o.as_str()], *n as f64));
        }
        out.push(Sample::new(
            Metric::TracePendingFiles,
            [""; 0],
            pending as f64,
        ));
        out.push(Sample::new(
            Metric::TraceUnlistedFiles,
            [""; 0],
            unlisted as f64,
        ));
        out.push(Sample::new(
            Metric::TraceAnalysisSeconds,
            [""; 0],
            self.analysis_seconds,
        ));
        out.push(Sample::new(
            Metric::TraceReadBytes,
            [""; 0],
            self.read_bytes,
        ));
        let mut keys: Vec<&(String, i64)> = self.groups.keys().collect();
        keys.sort_unstable();
        for key in keys {
            let Some(g) = self.groups.get(key) else {
                continue;
            };
            let (job, rank) = (key.0.as_str(), key.1.to_string());
            let jr = [job, rank.as_str()];
            for (m, v) in [
                (Metric::TraceLastAnalysis, g.last_analysis),
                (Metric::TraceGpuSeconds, g.gpu),
                (Metric::TraceComputeSeconds, g.compute),
                (Metric::TraceNonComputeSeconds, g.non_compute),
                (Metric::TraceIdleSeconds, g.idle),
                (Metric::TraceCommunicationSeconds, g.communication),
                (Metric::TraceExposedCommunicationSeconds, g.exposed),
                (Metric::TraceOverlappedCommunicationSeconds, g.overlapped),
                (Metric::TraceSteps, g.steps),
                (Metric::TraceStepSeconds, g.step_seconds),
            ] {
                out.push(Sample::new(m, jr, v));
            }
            if let Some(pid) = g.pid {
                let pid = pid.to_string();
                let l = [job, rank.as_str(), pid.as_str()];
                out.push(Sample::new(Metric::TraceRankProcess, l, 1.0));
            }
            for (coll, v) in &g.collectives {
                let l = [job, rank.as_str(), coll.as_str()];
                for (m, x) in [
                    (Metric::TraceCollectiveKernels, v[0]),
                    (Metric::TraceCollectiveSeconds, v[1]),
                    (Metric::TraceCollectiveSizedSeconds, v[2]),
                    (Metric::TraceCollectiveBytes, v[3]),
                    (Metric::TraceCollectiveBusBytes, v[4]),
                ] {
                    out.push(Sample::new(m, l, x));
                }
            }
            for (phase, v) in &g.phases {
                out.push(Sample::new(
                    Metric::TracePhaseSeconds,
                    [job, rank.as_str(), phase.as_str()],
                    *v,
                ));
            }
        }
        let mut keys: Vec<&MemoryKey> = self.memory.keys().collect();
        keys.sort_unstable();
        for key in keys {
            let Some((_, values)) = self.memory.get(key) else {
                continue;
            };
            let device = key.2.to_string();
            let l = [key.0.as_str(), key.1.as_str(), device.as_str()];
            for (m, v) in [
                Metric::TraceMemoryReserved,
                Metric::TraceMemoryAllocated,
                Metric::TraceMemoryFragmentation,
                Metric::TraceMemoryPeakAllocated,
            ]
            .into_iter()
            .zip(values)
            {
                if let Some(v) = v {
                    out.push(Sample::new(m, l, *v));
                }
            }
        }
        out
    }
}
