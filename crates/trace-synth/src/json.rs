//! Writes a designed timeline as a Kineto trace, with the CPU noise, flow events and args a
//! real PyTorch profiler trace carries.
//!
//! Separate because it is only serialization: the design is fixed before a byte is written.

use std::fmt::Write as _;
use std::io::Write;

use super::{Class, CpuAnno, GpuItem, SynthConfig, SYNC_STREAM, T0};

pub(super) fn write_json(
    cfg: &SynthConfig,
    rank: usize,
    gpu: &[GpuItem],
    annos: &[CpuAnno],
    _bounds: &[(i64, i64)],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let dist = distributed_info(cfg, rank);
    let device = if cfg.device_per_rank { rank } else { 0 };
    write!(
        out,
        r#"{{
  "schemaVersion": 1,
  "deviceProperties": [{{"id": {device}, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929347584, "computeMajor": 9, "computeMinor": 0}}],
"#
    )?;
    members_before_events(cfg, &dist, out)?;
    let mut w = Events::new(cfg, rank, device, out);
    w.process_name()?;
    for a in annos {
        w.annotation(a)?;
    }
    for (i, g) in gpu.iter().enumerate() {
        w.gpu_row(i, g)?;
    }
    w.window_marks()?;
    members_after_events(cfg, rank, &dist, out)?;
    writeln!(out, "\n}}")?;
    Ok(())
}

/// The `distributedInfo` member (without a trailing comma).
fn distributed_info(cfg: &SynthConfig, rank: usize) -> String {
    format!(
        r#""distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {n}, "pg_count": 1, "pg_config": [{{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": {n}, "ranks": "{ranks:?}"}}], "nccl_version": "2.21.5"{sim}}}"#,
        n = cfg.ranks,
        sim = if cfg.simulated {
            r#", "simulated": true"#
        } else {
            ""
        },
        ranks = (0..cfg.ranks).collect::<Vec<_>>()
    )
}

/// The members between the device and the events: `distributedInfo` unless it goes last, the
/// base time and the opening of `traceEvents`.
fn members_before_events(
    cfg: &SynthConfig,
    dist: &str,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    if !cfg.distributed_info_last {
        writeln!(out, "  {dist},")?;
    }
    writeln!(out, r#"  "baseTimeNanoseconds": 1699999999000000000,"#)?;
    writeln!(out, r#"  "traceEvents": ["#)
}

/// The end of `traceEvents` and the members after it: the trace name, and `distributedInfo`
/// when it goes last.
fn members_after_events(
    cfg: &SynthConfig,
    rank: usize,
    dist: &str,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let prefix = if cfg.simulated { "simulated-" } else { "" };
    write!(
        out,
        "\n  ],\n  \"traceName\": \"{prefix}rank{rank}.pt.trace.json\""
    )?;
    if cfg.distributed_info_last {
        write!(out, ",\n  {dist}")?;
    }
    Ok(())
}

/// The writer of the `traceEvents` list: separators, the rank's ids and the time format.
struct Events<'a> {
    out: &'a mut dyn Write,
    /// No event written yet (no separator before the next).
    first: bool,
    /// A reused buffer for the long event lines.
    line: String,
    cfg: &'a SynthConfig,
    /// Host process id of the CPU rows.
    pid: u64,
    /// CUDA device of the GPU rows.
    device: usize,
    /// Epoch-based ns times ([`SynthConfig::ns_epoch`]).
    ns: bool,
    /// The time of the process and window marks.
    t0: i64,
    /// The last CPU noise event's id.
    pad: u64,
}

impl<'a> Events<'a> {
    fn new(cfg: &'a SynthConfig, rank: usize, device: usize, out: &'a mut dyn Write) -> Self {
        let pid = cfg
            .host_pids
            .get(rank)
            .map_or(4242 + rank as u64, |p| u64::from(*p));
        let ns = cfg.ns_epoch;
        Events {
            out,
            first: true,
            line: String::with_capacity(1024),
            cfg,
            pid,
            device,
            ns,
            t0: if ns { T0 + NS_EPOCH_SHIFT_US } else { T0 },
            pad: 0,
        }
    }

    /// Writes one event, after a separator unless it is the first.
    fn emit(out: &mut dyn Write, first: &mut bool, s: &str) -> std::io::Result<()> {
        if !std::mem::replace(first, false) {
            out.write_all(b",\n")?;
        }
        out.write_all(b"  ")?;
        out.write_all(s.as_bytes())
    }

    /// Writes `s` as one event.
    fn event(&mut self, s: &str) -> std::io::Result<()> {
        Self::emit(self.out, &mut self.first, s)
    }

    /// Writes the line buffer as one event.
    fn event_line(&mut self) -> std::io::Result<()> {
        Self::emit(self.out, &mut self.first, &self.line)
    }

    /// `ts` and `dur` of the designed `[t, e)` with rounding fractions `a`, `b`.
    fn times(&self, t: i64, e: i64, a: f64, b: f64) -> (String, String) {
        if self.ns {
            return ns_times(t, e);
        }
        let ts = t as f64 - a;
        let dur = (e - t) as f64 + a + b;
        (format!("{ts:.3}"), format!("{dur:.3}"))
    }

    fn process_name(&mut self) -> std::io::Result<()> {
        let (t0, pid) = (self.t0, self.pid);
        self.event(&format!(
            r#"{{"name": "process_name", "ph": "M", "ts": {t0}, "pid": {pid}, "tid": 0, "args": {{"name": "python3"}}}}"#
        ))
    }

    fn annotation(&mut self, a: &CpuAnno) -> std::io::Result<()> {
        let (ts, dur) = self.times(a.t, a.e, 0.375, 0.5);
        let pid = self.pid;
        self.event(&format!(
            r#"{{"ph": "X", "cat": "user_annotation", "name": "{}", "pid": {pid}, "tid": {pid}, "ts": {ts}, "dur": {dur}, "args": {{"External id": 1, "Record function id": 0, "Ev Idx": 0}}}}"#,
            a.name
        ))
    }

    /// GPU row `i` with everything around it: the CPU noise, its launch, the row itself, the
    /// ns memset/copy beside it and the flow events.
    fn gpu_row(&mut self, i: usize, g: &GpuItem) -> std::io::Result<()> {
        let corr = 1000 + i;
        let (ts, dur) = self.times(g.t, g.e, g.a, g.b);
        let (lts, ldur) = self.times(g.launch, g.launch + 4, 0.25, 0.125);
        self.cpu_noise(g)?;
        self.line.clear();
        let pid = self.pid;
        let _ = write!(
            self.line,
            r#"{{"ph": "X", "cat": "cuda_runtime", "name": "{}", "pid": {pid}, "tid": {pid}, "ts": {lts}, "dur": {ldur}, "args": {{"External id": {corr}, "cbid": 211, "correlation": {corr}}}}}"#,
            g.launch_name
        );
        self.event_line()?;
        let tid = if g.stream == SYNC_STREAM { 0 } else { g.stream };
        self.gpu_event(g, corr, tid, &ts, &dur)?;
        if self.ns {
            self.ns_companion(i, g)?;
        }
        if g.class != Class::Sync {
            let device = self.device;
            self.event(&format!(
                r#"{{"ph": "s", "id": {corr}, "pid": {pid}, "tid": {pid}, "ts": {lts}, "cat": "ac2g", "name": "ac2g"}}"#
            ))?;
            self.event(&format!(
                r#"{{"ph": "f", "id": {corr}, "pid": {device}, "tid": {tid}, "ts": {ts}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}"#
            ))?;
        }
        Ok(())
    }

    /// CPU-side noise around the launch: operator and python events (never analysed).
    fn cpu_noise(&mut self, g: &GpuItem) -> std::io::Result<()> {
        let pid = self.pid;
        for k in 0..self.cfg.cpu_events_per_kernel {
            self.pad += 1;
            let pad = self.pad;
            let t = if self.ns {
                ns_text((g.launch + NS_EPOCH_SHIFT_US) * 1000 - 875 + k as i64)
            } else {
                format!("{:.3}", g.launch as f64 - 0.875 + k as f64 * 0.001)
            };
            let (cat, name) = if k % 2 == 0 {
                ("cpu_op", "aten::mm")
            } else {
                (
                    "python_function",
                    "torch/nn/modules/linear.py(125): forward",
                )
            };
            self.line.clear();
            let _ = write!(
                self.line,
                r#"{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {pid}, "ts": {t}, "dur": 0.500, "args": {{"External id": {pad}, "Sequence number": {pad}, "Fwd thread id": 0, "Record function id": 0, "Concrete Inputs": ["", "", ""], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"], "Input Strides": [[4096, 1], [4096, 1], []], "Input Dims": [[8, 4096], [4096, 4096], []], "Ev Idx": {pad}}}}}"#
            );
            self.event_line()?;
        }
        Ok(())
    }

    /// The GPU row itself (kernel, copy or sync) on thread `tid`, with the NCCL args if any.
    fn gpu_event(
        &mut self,
        g: &GpuItem,
        corr: usize,
        tid: i64,
        ts: &str,
        dur: &str,
    ) -> std::io::Result<()> {
        self.line.clear();
        let (cat, extra) = match g.class {
            Class::Mem => ("gpu_memcpy", format!(r#", "bytes": {}, "memory bandwidth (GB/s)": 20.0"#, g.bytes.unwrap_or(0))),
            Class::Sync => ("cuda_sync", String::new()),
            _ => ("kernel", r#", "registers per thread": 128, "shared memory": 0, "blocks per SM": 1.5, "warps per SM": 6.0, "grid": [132, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 25"#.to_string()),
        };
        let mut nccl = String::new();
        if let Some((coll, i, o, dt, gs)) = g.nccl {
            let _ = write!(
                nccl,
                r#", "Collective name": "{coll}", "In msg nelems": {i}, "Out msg nelems": {o}, "Group size": {gs}, "dtype": "{dt}", "In split size": "[]", "Out split size": "[]", "Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks": "{:?}", "Seq": {corr}"#,
                (0..self.cfg.ranks).collect::<Vec<_>>()
            );
        }
        let device = self.device;
        let _ = write!(
            self.line,
            r#"{{"ph": "X", "cat": "{cat}", "name": "{}", "pid": {device}, "tid": {tid}, "ts": {ts}, "dur": {dur}, "args": {{"External id": {corr}, "device": {device}, "stream": {}, "correlation": {corr}{extra}{nccl}}}}}"#,
            g.name, g.stream
        );
        self.event_line()
    }

    /// A sub-2 µs memset or device copy beside GPU row `i`, on the copy stream, launched
    /// from the CPU like any other (HTA counts both in its breakdowns).
    fn ns_companion(&mut self, i: usize, g: &GpuItem) -> std::io::Result<()> {
        let c = 500_000 + i;
        let (name, cat, launch) = if i % 2 == 0 {
            ("Memset (Device)", "gpu_memset", "cudaMemsetAsync")
        } else {
            (
                "Memcpy DtoD (Device -> Device)",
                "gpu_memcpy",
                "cudaMemcpyAsync",
            )
        };
        let h = mix(g.t, i as i64);
        let start = (g.launch + 2 + NS_EPOCH_SHIFT_US) * 1000 + (h % 1000) as i64;
        let dur = 200 + ((h >> 10) % 1700) as i64;
        let lstart = (g.launch + 1 + NS_EPOCH_SHIFT_US) * 1000 + ((h >> 21) % 1000) as i64;
        let (pid, device) = (self.pid, self.device);
        self.line.clear();
        let _ = write!(
            self.line,
            r#"{{"ph": "X", "cat": "cuda_runtime", "name": "{launch}", "pid": {pid}, "tid": {pid}, "ts": {}, "dur": 0.731, "args": {{"External id": {c}, "cbid": 51, "correlation": {c}}}}}"#,
            ns_text(lstart)
        );
        self.event_line()?;
        self.line.clear();
        let _ = write!(
            self.line,
            r#"{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {device}, "tid": 9, "ts": {}, "dur": {}, "args": {{"External id": {c}, "device": {device}, "stream": 9, "correlation": {c}, "bytes": 4096, "memory bandwidth (GB/s)": 2.5}}}}"#,
            ns_text(start),
            ns_text(dur)
        );
        self.event_line()
    }

    /// The profiler's instant marks of the recording window.
    fn window_marks(&mut self) -> std::io::Result<()> {
        let t0 = self.t0;
        self.event(&format!(
            r#"{{"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {t0}}}"#
        ))?;
        self.event(&format!(
            r#"{{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": {}}}"#,
            t0 + 10_000_000
        ))
    }
}

/// What [`SynthConfig::ns_epoch`] adds to every time: T0 (1.7e12 µs) becomes about 1.7e15 µs,
/// a Unix epoch in µs, where float64 resolves 0.25 µs.
const NS_EPOCH_SHIFT_US: i64 = 1_698_300_000_000_000;

/// A deterministic scramble of two integers (SplitMix64's finalizer): the ns fractions.
fn mix(a: i64, b: i64) -> u64 {
    let mut z = (a as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (b as u64).rotate_left(29);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A time in ns written as µs with three decimals, exactly as the text Kineto writes.
fn ns_text(ns: i64) -> String {
    format!("{}.{:03}", ns.div_euclid(1000), ns.rem_euclid(1000))
}

/// `[t, e)` (µs, designed) as epoch-based ns text: the start moved back and the end forward by
/// pseudo-random ns fractions, durations of at least 1 ns.
fn ns_times(t: i64, e: i64) -> (String, String) {
    let h = mix(t, e);
    let (a, b) = ((h % 1000) as i64, ((h >> 10) % 1000) as i64);
    let ts = (t + NS_EPOCH_SHIFT_US) * 1000 - a;
    let dur = ((e - t) * 1000 + a + b).max(1 + ((h >> 20) % 999) as i64);
    (ns_text(ts), ns_text(dur))
}
