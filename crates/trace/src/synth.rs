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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

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

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo) as u64) as i64
    }
    fn frac(&mut self) -> f64 {
        // 1/8 .. 7/8, exact in binary.
        (1 + self.next() % 7) as f64 / 8.0
    }
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

const COMPUTE_NAMES: [&str; 6] = [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8::Params)",
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)",
    "flash_fwd_kernel",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
];

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

type Schedule = (Vec<GpuItem>, Vec<CpuAnno>, Vec<(i64, i64)>);

fn schedule(cfg: &SynthConfig, rank: usize) -> Schedule {
    let mut rng = Rng(cfg.seed.wrapping_mul(0x9e3779b97f4a7c15) | 1);
    let late = cfg.straggler == Some(rank);
    let delay = if late { cfg.straggler_delay_us } else { 0 };
    let n = cfg.ranks as u64;
    let mut gpu: Vec<GpuItem> = Vec::new();
    let mut annos: Vec<CpuAnno> = Vec::new();
    let mut bounds = Vec::new();
    let mut step_start = T0 + 1000;
    let mut prev7 = T0; // end of the last stream-7 kernel
    for step in 0..cfg.steps {
        let s = step_start;
        // The step's durations are the same on every rank (same seed sequence).
        let lead = 40 + delay;
        let g = s + lead;
        let item = |gpu: &mut Vec<GpuItem>,
                    rng: &mut Rng,
                    stream,
                    t: i64,
                    e: i64,
                    name,
                    class,
                    launch,
                    launch_name| {
            gpu.push(GpuItem {
                stream,
                t,
                e,
                a: rng.frac(),
                b: rng.frac(),
                name,
                class,
                launch,
                launch_name,
                nccl: None,
                bytes: None,
                step,
            });
        };
        // Input copy.
        let m = 30 + rng.range(0, 20);
        item(
            &mut gpu,
            &mut rng,
            9,
            g,
            g + m,
            "Memcpy HtoD (Pinned -> Device)",
            Class::Mem,
            s + 5,
            "cudaMemcpyAsync",
        );
        if let Some(last) = gpu.last_mut() {
            last.bytes = Some(4 << 20);
        }
        let mut c7 = g + m + 2;
        let fwd_start = s + 2;
        let mut k_prev: Option<(i64, i64)> = None;
        let mut fsdp: Vec<(i64, i64, &'static str)> = Vec::new();
        for l in 0..cfg.layers {
            let params = 1_000_000 + 250_000 * l as u64;
            let a = 20 + rng.range(0, 10);
            let (at, ae) = match k_prev {
                None => {
                    let at = c7;
                    c7 = at + a + 4;
                    (at, at + a)
                }
                Some((kt, _)) => (kt + 3, kt + 3 + a),
            };
            let al = (at - 12).max(s + 6);
            item(
                &mut gpu,
                &mut rng,
                20,
                at,
                ae,
                "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                Class::Comm,
                al,
                "cudaLaunchKernel",
            );
            if let Some(last) = gpu.last_mut() {
                last.nccl = Some(("_allgather_base", params, params * n, "BFloat16", n));
            }
            fsdp.push((al - 2, al + 6, "FSDP::all_gather"));
            fsdp.push((al - 4, al - 2, "FSDP::all_gather_copy_in"));
            let gap = [2, 45, 0, 8][l % 4];
            let c = 60 + rng.range(0, 40);
            let kt = c7.max(prev7) + gap;
            let launch = (kt - gap - 10).max(s + 8);
            item(
                &mut gpu,
                &mut rng,
                7,
                kt,
                kt + c,
                COMPUTE_NAMES[l % COMPUTE_NAMES.len()],
                Class::Comp,
                launch,
                "cudaLaunchKernel",
            );
            if l % 2 == 0 {
                item(
                    &mut gpu,
                    &mut rng,
                    13,
                    kt + 5,
                    kt + 5 + c / 3,
                    "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)",
                    Class::Comp,
                    launch + 1,
                    "cudaLaunchKernel",
                );
            }
            if l % 3 == 1 {
                // A sub-µs kernel: HTA rounds it to end < start (inside the GEMM above).
                item(&mut gpu, &mut rng, 13, kt + c / 2 + 1, kt + c / 2, "void at::native::unrolled_elementwise_kernel<at::native::FillFunctor<float> >()", Class::Comp, launch + 2, "cudaLaunchKernel");
                if let Some(last) = gpu.last_mut() {
                    last.a = 0.75;
                    last.b = 0.75 - 0.5 + 0.25; // dur = E − T + a + b = −1 + 1.25 = 0.25
                }
            }
            fsdp.push((ae + 1, ae + 3, "FSDP::all_gather_copy_out"));
            k_prev = Some((kt, kt + c));
            prev7 = kt + c;
            c7 = kt + c;
        }
        let fwd_end = gpu
            .iter()
            .filter(|g| g.step == step)
            .map(|g| g.launch)
            .max()
            .unwrap_or(s)
            + 6;
        annos.push(CpuAnno {
            t: fwd_start,
            e: fwd_end,
            name: "## forward ##".into(),
            step,
        });
        let bwd_start = fwd_end + 1;
        let first_bwd = gpu.len();
        for l in (0..cfg.layers).rev() {
            let c = 2 * (60 + rng.range(0, 40));
            let gap = [3, 35][l % 2];
            let kt = c7 + gap;
            let launch = (kt - gap - 10).max(bwd_start + 1);
            item(
                &mut gpu,
                &mut rng,
                7,
                kt,
                kt + c,
                COMPUTE_NAMES[(l + 2) % COMPUTE_NAMES.len()],
                Class::Comp,
                launch,
                "cudaLaunchKernel",
            );
            let params = 1_000_000 + 250_000 * l as u64;
            let r = 25 + rng.range(0, 10);
            let (rt, re) = if l == 0 {
                (kt + c + 5, kt + c + 5 + r)
            } else {
                (kt + 4, kt + 4 + r)
            };
            let rl = (rt - 12).max(bwd_start + 1);
            item(
                &mut gpu,
                &mut rng,
                20,
                rt,
                re,
                "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                Class::Comm,
                rl,
                "cudaLaunchKernel",
            );
            if let Some(last) = gpu.last_mut() {
                last.nccl = Some(("reduce_scatter_tensor", params * n, params, "Float", n));
            }
            fsdp.push((rl - 2, rl + 5, "FSDP::post_backward_reduce"));
            fsdp.push((rl + 6, rl + 8, "FSDP::post_backward_reshard"));
            c7 = if l == 0 { re + 10 } else { kt + c };
            prev7 = kt + c;
        }
        let bwd_end = gpu[first_bwd..]
            .iter()
            .map(|g| g.launch)
            .max()
            .unwrap_or(bwd_start)
            + 9;
        annos.push(CpuAnno {
            t: bwd_start,
            e: bwd_end,
            name: "## backward ##".into(),
            step,
        });
        let opt_start = bwd_end + 1;
        let ar = 15 + rng.range(0, 5);
        let art = c7 + 5;
        item(
            &mut gpu,
            &mut rng,
            20,
            art,
            art + ar,
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            Class::Comm,
            (art - 12).max(opt_start + 1),
            "cudaLaunchKernel",
        );
        if let Some(last) = gpu.last_mut() {
            last.nccl = Some(("allreduce", 1, 1, "Float", n));
        }
        c7 = art + ar + 5;
        for i in 0..2 {
            let c = 40 + rng.range(0, 20);
            let kt = c7 + 2;
            item(&mut gpu, &mut rng, 7, kt, kt + c, "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, 1>>()", Class::Comp, (kt - 12).max(opt_start + 2 + i), "cudaLaunchKernel");
            prev7 = kt + c;
            c7 = kt + c;
        }
        let opt_end = gpu
            .iter()
            .filter(|g| g.step == step)
            .map(|g| g.launch)
            .max()
            .unwrap_or(opt_start)
            + 6;
        annos.push(CpuAnno {
            t: opt_start,
            e: opt_end,
            name: "Optimizer.step#AdamW.step".into(),
            step,
        });
        // cudaDeviceSynchronize: the CPU waits for the GPU; Context Sync on the GPU.
        let sy = c7 + 3;
        item(
            &mut gpu,
            &mut rng,
            SYNC_STREAM,
            sy,
            sy + 4,
            "Context Sync",
            Class::Sync,
            opt_end + 1,
            "cudaDeviceSynchronize",
        );
        let step_end = sy + 4 + 20;
        for (t, e, name) in fsdp {
            annos.push(CpuAnno {
                t,
                e,
                name: name.to_string(),
                step,
            });
        }
        annos.push(CpuAnno {
            t: s,
            e: step_end,
            name: format!("ProfilerStep#{}", step + 3),
            step,
        });
        bounds.push((s, step_end));
        step_start = step_end + 30;
    }
    (gpu, annos, bounds)
}

fn write_json(
    cfg: &SynthConfig,
    rank: usize,
    gpu: &[GpuItem],
    annos: &[CpuAnno],
    _bounds: &[(i64, i64)],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let dist = format!(
        r#""distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {n}, "pg_count": 1, "pg_config": [{{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": {n}, "ranks": "{ranks:?}"}}], "nccl_version": "2.21.5"}}"#,
        n = cfg.ranks,
        ranks = (0..cfg.ranks).collect::<Vec<_>>()
    );
    write!(
        out,
        r#"{{
  "schemaVersion": 1,
  "deviceProperties": [{{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929347584, "computeMajor": 9, "computeMinor": 0}}],
"#
    )?;
    if !cfg.distributed_info_last {
        writeln!(out, "  {dist},")?;
    }
    writeln!(out, r#"  "baseTimeNanoseconds": 1699999999000000000,"#)?;
    writeln!(out, r#"  "traceEvents": ["#)?;
    let pid = 4242 + rank;
    let mut first = true;
    let mut line = String::with_capacity(1024);
    let mut emit = |out: &mut dyn Write, s: &str| -> std::io::Result<()> {
        if !std::mem::replace(&mut first, false) {
            out.write_all(b",\n")?;
        }
        out.write_all(b"  ")?;
        out.write_all(s.as_bytes())
    };
    let fmt = |t: i64, e: i64, a: f64, b: f64| -> (String, String) {
        let ts = t as f64 - a;
        let dur = (e - t) as f64 + a + b;
        (format!("{ts:.3}"), format!("{dur:.3}"))
    };
    emit(
        out,
        &format!(
            r#"{{"name": "process_name", "ph": "M", "ts": {T0}, "pid": {pid}, "tid": 0, "args": {{"name": "python3"}}}}"#
        ),
    )?;
    for a in annos {
        let (ts, dur) = fmt(a.t, a.e, 0.375, 0.5);
        emit(
            out,
            &format!(
                r#"{{"ph": "X", "cat": "user_annotation", "name": "{}", "pid": {pid}, "tid": {pid}, "ts": {ts}, "dur": {dur}, "args": {{"External id": 1, "Record function id": 0, "Ev Idx": 0}}}}"#,
                a.name
            ),
        )?;
    }
    let mut pad = 0u64;
    for (i, g) in gpu.iter().enumerate() {
        let corr = 1000 + i;
        let (ts, dur) = fmt(g.t, g.e, g.a, g.b);
        let (lts, ldur) = fmt(g.launch, g.launch + 4, 0.25, 0.125);
        // CPU-side noise around the launch: operator and python events (never analysed).
        for k in 0..cfg.cpu_events_per_kernel {
            pad += 1;
            let t = g.launch as f64 - 0.875 + k as f64 * 0.001;
            let (cat, name) = if k % 2 == 0 {
                ("cpu_op", "aten::mm")
            } else {
                (
                    "python_function",
                    "torch/nn/modules/linear.py(125): forward",
                )
            };
            line.clear();
            let _ = write!(
                line,
                r#"{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {pid}, "ts": {t:.3}, "dur": 0.500, "args": {{"External id": {pad}, "Sequence number": {pad}, "Fwd thread id": 0, "Record function id": 0, "Concrete Inputs": ["", "", ""], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"], "Input Strides": [[4096, 1], [4096, 1], []], "Input Dims": [[8, 4096], [4096, 4096], []], "Ev Idx": {pad}}}}}"#
            );
            emit(out, &line)?;
        }
        line.clear();
        let _ = write!(
            line,
            r#"{{"ph": "X", "cat": "cuda_runtime", "name": "{}", "pid": {pid}, "tid": {pid}, "ts": {lts}, "dur": {ldur}, "args": {{"External id": {corr}, "cbid": 211, "correlation": {corr}}}}}"#,
            g.launch_name
        );
        emit(out, &line)?;
        line.clear();
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
                (0..cfg.ranks).collect::<Vec<_>>()
            );
        }
        let tid = if g.stream == SYNC_STREAM { 0 } else { g.stream };
        let _ = write!(
            line,
            r#"{{"ph": "X", "cat": "{cat}", "name": "{}", "pid": 0, "tid": {tid}, "ts": {ts}, "dur": {dur}, "args": {{"External id": {corr}, "device": 0, "stream": {}, "correlation": {corr}{extra}{nccl}}}}}"#,
            g.name, g.stream
        );
        emit(out, &line)?;
        if g.class != Class::Sync {
            emit(
                out,
                &format!(
                    r#"{{"ph": "s", "id": {corr}, "pid": {pid}, "tid": {pid}, "ts": {lts}, "cat": "ac2g", "name": "ac2g"}}"#
                ),
            )?;
            emit(
                out,
                &format!(
                    r#"{{"ph": "f", "id": {corr}, "pid": 0, "tid": {tid}, "ts": {ts}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}"#
                ),
            )?;
        }
    }
    emit(
        out,
        &format!(
            r#"{{"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {T0}}}"#
        ),
    )?;
    emit(
        out,
        &format!(
            r#"{{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": {}}}"#,
            T0 + 10_000_000
        ),
    )?;
    write!(out, "\n  ],\n  \"traceName\": \"rank{rank}.pt.trace.json\"")?;
    if cfg.distributed_info_last {
        write!(out, ",\n  {dist}")?;
    }
    writeln!(out, "\n}}")?;
    Ok(())
}

fn truth(
    cfg: &SynthConfig,
    rank: usize,
    gpu: &[GpuItem],
    annos: &[CpuAnno],
    bounds: &[(i64, i64)],
) -> RankTruth {
    let kept_steps = cfg.steps.saturating_sub(1);
    let kept: Vec<&GpuItem> = gpu.iter().filter(|g| g.step < kept_steps).collect();
    let mut t = RankTruth {
        rank: rank as i64,
        ..RankTruth::default()
    };
    if kept.is_empty() {
        return t;
    }
    let lo = kept.iter().map(|g| g.t).min().unwrap_or(0);
    let hi = kept.iter().map(|g| g.e).max().unwrap_or(0);
    let len = (hi - lo) as usize;
    let (mut all, mut comp, mut comm) = (vec![false; len], vec![false; len], vec![false; len]);
    for g in &kept {
        for x in g.t.max(lo)..g.e.min(hi) {
            let i = (x - lo) as usize;
            all[i] = true;
            match g.class {
                Class::Comp => comp[i] = true,
                Class::Comm => comm[i] = true,
                _ => {}
            }
        }
    }
    let count = |v: &[bool]| v.iter().filter(|&&b| b).count() as i64;
    t.kernel_time_us = hi - lo;
    t.idle_time_us = t.kernel_time_us - count(&all);
    t.compute_time_us = count(&comp);
    t.comm_time_us = count(&comm);
    t.overlap_time_us = comp.iter().zip(&comm).filter(|(a, b)| **a && **b).count() as i64;
    // Idle per stream, HTA's rule on the design values.
    let mut streams: BTreeMap<i64, Vec<&GpuItem>> = BTreeMap::new();
    for g in kept.iter().filter(|g| g.class != Class::Sync) {
        streams.entry(g.stream).or_default().push(g);
    }
    for (s, mut v) in streams {
        v.sort_by_key(|g| g.t);
        let e = t.idle_by_stream.entry(s).or_default();
        for w in v.windows(2) {
            let (prev, cur) = (w[0], w[1]);
            let gap = cur.t - prev.e;
            if cur.launch > prev.e {
                e.0 += gap;
            } else if gap < 30 {
                e.1 += gap;
            } else {
                e.2 += gap;
            }
        }
    }
    for g in &kept {
        let raw = (g.e - g.t) as f64 + g.a + g.b;
        if matches!(g.launch_name, "cudaLaunchKernel" | "cudaMemcpyAsync") {
            t.launches += 1;
        }
        if let Some((coll, i, o, dt, n)) = g.nccl {
            let dts = if dt == "BFloat16" { 2.0 } else { 4.0 };
            let (kind, bytes) = match coll {
                "_allgather_base" => ("all_gather", i as f64 * n as f64 * dts),
                "reduce_scatter_tensor" => ("reduce_scatter", o as f64 * n as f64 * dts),
                _ => ("all_reduce", i as f64 * dts),
            };
            let e = t.collectives.entry(kind).or_default();
            e.0 += 1;
            e.1 += bytes;
            e.2 += raw;
            t.comm_starts.push(g.t as f64 - g.a);
        }
    }
    t.comm_starts.sort_by(f64::total_cmp);
    for a in annos.iter().filter(|a| a.step < kept_steps) {
        let raw = (a.e - a.t) as f64 + 0.375 + 0.5;
        if a.name.starts_with("FSDP::") {
            let key = match a.name.as_str() {
                "FSDP::all_gather" => "all_gather",
                "FSDP::all_gather_copy_in" => "copy_in",
                "FSDP::all_gather_copy_out" => "copy_out",
                "FSDP::post_backward_reduce" => "reduce_scatter",
                _ => "reshard",
            };
            *t.fsdp_counts.entry(key).or_default() += 1;
        } else if !a.name.starts_with("ProfilerStep") {
            let key = match a.name.as_str() {
                "## forward ##" => "forward",
                "## backward ##" => "backward",
                _ => "optimizer",
            };
            *t.phase_cpu_us.entry(key).or_default() += raw;
        }
    }
    t.step_durations_us = bounds[..kept_steps.min(bounds.len())]
        .iter()
        .map(|(s, e)| (e - s) as f64 + 0.875)
        .collect();
    t
}
