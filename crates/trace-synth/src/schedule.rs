//! The design of one rank's timeline: every GPU row, launch and CPU annotation of every step,
//! in whole µs.
//!
//! Separate because it is the one place that decides what the trace contains; the writer
//! and the ground truth both read its output.

use super::{Class, CpuAnno, GpuItem, SynthConfig, SYNC_STREAM, T0};

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

const COMPUTE_NAMES: [&str; 6] = [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8::Params)",
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)",
    "flash_fwd_kernel",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
];

/// The fill kernel of every third forward layer, shorter than 1 µs.
const FILL_KERNEL: &str =
    "void at::native::unrolled_elementwise_kernel<at::native::FillFunctor<float> >()";
/// The optimizer's fused Adam kernel.
const ADAM_KERNEL: &str = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, 1>>()";
/// The kernel launch most GPU rows come from.
const LAUNCH: &str = "cudaLaunchKernel";

type Schedule = (Vec<GpuItem>, Vec<CpuAnno>, Vec<(i64, i64)>);

pub(super) fn schedule(cfg: &SynthConfig, rank: usize) -> Schedule {
    let late = cfg.straggler == Some(rank);
    let delay = if late { cfg.straggler_delay_us } else { 0 };
    let mut plan = Planner::new(cfg);
    let mut bounds = Vec::new();
    let mut step_start = T0 + 1000;
    for step in 0..cfg.steps {
        let step_end = plan.step(step, step_start, delay);
        bounds.push((step_start, step_end));
        step_start = step_end + 30;
    }
    (plan.gpu, plan.annos, bounds)
}

/// The design of one rank in progress: the rows so far, the duration sequence and the
/// cursors of the current step.
///
/// One value rather than loose locals so that each phase of a step is a method: the phases
/// share the random sequence (whose order decides every duration) and the stream-7 cursors.
struct Planner<'a> {
    cfg: &'a SynthConfig,
    rng: Rng,
    /// Ranks, the group size of every collective.
    n: u64,
    gpu: Vec<GpuItem>,
    annos: Vec<CpuAnno>,
    /// The step being designed.
    step: usize,
    /// Its start.
    s: i64,
    /// Where the next stream-7 kernel may start.
    c7: i64,
    /// End of the last stream-7 kernel.
    prev7: i64,
    /// The step's FSDP annotations (start, end, name), written after the phases'.
    fsdp: Vec<(i64, i64, String)>,
}

impl<'a> Planner<'a> {
    fn new(cfg: &'a SynthConfig) -> Self {
        Planner {
            cfg,
            rng: Rng(cfg.seed.wrapping_mul(0x9e3779b97f4a7c15) | 1),
            n: cfg.ranks as u64,
            gpu: Vec::new(),
            annos: Vec::new(),
            step: 0,
            s: 0,
            c7: 0,
            prev7: T0,
            fsdp: Vec::new(),
        }
    }

    /// Designs step `step` starting at `s` with the rank's `delay`; returns its end.
    fn step(&mut self, step: usize, s: i64, delay: i64) -> i64 {
        self.step = step;
        self.s = s;
        // The step's durations are the same on every rank (same seed sequence).
        let g = s + 40 + delay;
        self.input_copy(g);
        let fwd_end = self.forward();
        let bwd_end = self.backward(fwd_end + 1);
        let opt_end = self.optimizer(bwd_end + 1);
        let step_end = self.device_sync(opt_end);
        for (t, e, name) in std::mem::take(&mut self.fsdp) {
            self.annos.push(CpuAnno { t, e, name, step });
        }
        self.annos.push(CpuAnno {
            t: s,
            e: step_end,
            name: format!("ProfilerStep#{}", step + 3),
            step,
        });
        step_end
    }

    /// Adds a GPU row `[t, e)` of the current step launched at `launch` by `cudaLaunchKernel`
    /// (the caller changes what differs); its rounding fractions come from the sequence.
    fn push(
        &mut self,
        stream: i64,
        t: i64,
        e: i64,
        name: &'static str,
        class: Class,
        launch: i64,
    ) -> &mut GpuItem {
        let item = GpuItem {
            stream,
            t,
            e,
            a: self.rng.frac(),
            b: self.rng.frac(),
            name,
            class,
            launch,
            launch_name: LAUNCH,
            nccl: None,
            bytes: None,
            step: self.step,
        };
        self.gpu.push(item);
        let last = self.gpu.len() - 1;
        &mut self.gpu[last]
    }

    /// The latest launch of the current step, or `or` if it has none.
    fn last_launch(&self, or: i64) -> i64 {
        self.gpu
            .iter()
            .filter(|g| g.step == self.step)
            .map(|g| g.launch)
            .max()
            .unwrap_or(or)
    }

    /// The input copy (stream 9) at `g`; stream 7 starts after it.
    fn input_copy(&mut self, g: i64) {
        let m = 30 + self.rng.range(0, 20);
        let s = self.s;
        let row = self.push(
            9,
            g,
            g + m,
            "Memcpy HtoD (Pinned -> Device)",
            Class::Mem,
            s + 5,
        );
        row.launch_name = "cudaMemcpyAsync";
        row.bytes = Some(4 << 20);
        self.c7 = g + m + 2;
    }

    /// The forward layers and their annotation; returns the annotation's end.
    fn forward(&mut self) -> i64 {
        let fwd_start = self.s + 2;
        let mut k_prev: Option<i64> = None;
        for l in 0..self.cfg.layers {
            self.all_gather(l, k_prev);
            let (kt, c) = self.forward_compute(l);
            k_prev = Some(kt);
            self.prev7 = kt + c;
            self.c7 = kt + c;
        }
        let fwd_end = self.last_launch(self.s) + 6;
        self.annos.push(CpuAnno {
            t: fwd_start,
            e: fwd_end,
            name: "## forward ##".into(),
            step: self.step,
        });
        fwd_end
    }

    /// Layer `l`'s parameter all-gather (stream 20) and its FSDP annotations: hidden behind
    /// the previous layer's GEMM (started at `k_prev`), the first layer's exposed.
    fn all_gather(&mut self, l: usize, k_prev: Option<i64>) {
        let params = 1_000_000 + 250_000 * l as u64;
        let a = 20 + self.rng.range(0, 10);
        let (at, ae) = match k_prev {
            None => {
                let at = self.c7;
                self.c7 = at + a + 4;
                (at, at + a)
            }
            Some(kt) => (kt + 3, kt + 3 + a),
        };
        let al = (at - 12).max(self.s + 6);
        let n = self.n;
        let name = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
        let row = self.push(20, at, ae, name, Class::Comm, al);
        row.nccl = Some(("_allgather_base", params, params * n, "BFloat16", n));
        // FSDP2's names: the pre-forward hook of module l wraps its copy-in and all-gather.
        self.fsdp
            .push((al - 5, al + 7, format!("FSDP::pre_forward ({l})")));
        self.fsdp.push((al - 2, al + 6, "FSDP::all_gather".into()));
        self.fsdp
            .push((al - 4, al - 2, "FSDP::all_gather_copy_in".into()));
        self.fsdp
            .push((ae + 1, ae + 3, "FSDP::all_gather_copy_out".into()));
    }

    /// Layer `l`'s forward kernels: its GEMM (stream 7) and, on stream 13, a reduction every
    /// other layer and a sub-µs fill every third. Returns the GEMM's start and duration.
    fn forward_compute(&mut self, l: usize) -> (i64, i64) {
        let gap = [2, 45, 0, 8][l % 4];
        let c = 60 + self.rng.range(0, 40);
        let kt = self.c7.max(self.prev7) + gap;
        let launch = (kt - gap - 10).max(self.s + 8);
        let name = COMPUTE_NAMES[l % COMPUTE_NAMES.len()];
        self.push(7, kt, kt + c, name, Class::Comp, launch);
        if l % 2 == 0 {
            let name = "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)";
            self.push(13, kt + 5, kt + 5 + c / 3, name, Class::Comp, launch + 1);
        }
        if l % 3 == 1 {
            // A sub-µs kernel: HTA rounds it to end < start (inside the GEMM above).
            let (t, e) = (kt + c / 2 + 1, kt + c / 2);
            let row = self.push(13, t, e, FILL_KERNEL, Class::Comp, launch + 2);
            row.a = 0.75;
            row.b = 0.75 - 0.5 + 0.25; // dur = E − T + a + b = −1 + 1.25 = 0.25
        }
        (kt, c)
    }

    /// The backward layers, last first, and their annotation starting at `bwd_start`;
    /// returns the annotation's end.
    fn backward(&mut self, bwd_start: i64) -> i64 {
        let first_bwd = self.gpu.len();
        for l in (0..self.cfg.layers).rev() {
            self.backward_layer(l, bwd_start);
        }
        let bwd_end = self.gpu[first_bwd..]
            .iter()
            .map(|g| g.launch)
            .max()
            .unwrap_or(bwd_start)
            + 9;
        self.annos.push(CpuAnno {
            t: bwd_start,
            e: bwd_end,
            name: "## backward ##".into(),
            step: self.step,
        });
        bwd_end
    }

    /// Layer `l`'s backward GEMM and its gradients' reduce-scatter (hidden behind it except
    /// layer 0's), with the FSDP annotations.
    fn backward_layer(&mut self, l: usize, bwd_start: i64) {
        let c = 2 * (60 + self.rng.range(0, 40));
        let gap = [3, 35][l % 2];
        let kt = self.c7 + gap;
        let launch = (kt - gap - 10).max(bwd_start + 1);
        let name = COMPUTE_NAMES[(l + 2) % COMPUTE_NAMES.len()];
        self.push(7, kt, kt + c, name, Class::Comp, launch);
        let params = 1_000_000 + 250_000 * l as u64;
        let r = 25 + self.rng.range(0, 10);
        let (rt, re) = if l == 0 {
            (kt + c + 5, kt + c + 5 + r)
        } else {
            (kt + 4, kt + 4 + r)
        };
        let rl = (rt - 12).max(bwd_start + 1);
        let n = self.n;
        let name = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
        let row = self.push(20, rt, re, name, Class::Comm, rl);
        row.nccl = Some(("reduce_scatter_tensor", params * n, params, "Float", n));
        if l > 0 {
            self.fsdp.push((
                rl - 4,
                rl - 3,
                format!("FSDP::backward_prefetch for {}", l - 1),
            ));
        }
        self.fsdp
            .push((rl - 2, rl + 5, format!("FSDP::post_backward_reduce ({l})")));
        self.fsdp
            .push((rl + 6, rl + 8, format!("FSDP::post_backward_reshard ({l})")));
        self.c7 = if l == 0 { re + 10 } else { kt + c };
        self.prev7 = kt + c;
    }

    /// The optimizer from `opt_start`: an exposed grad-norm all-reduce, two Adam kernels and
    /// the annotation; returns the annotation's end.
    fn optimizer(&mut self, opt_start: i64) -> i64 {
        let ar = 15 + self.rng.range(0, 5);
        let art = self.c7 + 5;
        let n = self.n;
        let name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
        let launch = (art - 12).max(opt_start + 1);
        let row = self.push(20, art, art + ar, name, Class::Comm, launch);
        row.nccl = Some(("allreduce", 1, 1, "Float", n));
        self.c7 = art + ar + 5;
        for i in 0..2 {
            let c = 40 + self.rng.range(0, 20);
            let kt = self.c7 + 2;
            let launch = (kt - 12).max(opt_start + 2 + i);
            self.push(7, kt, kt + c, ADAM_KERNEL, Class::Comp, launch);
            self.prev7 = kt + c;
            self.c7 = kt + c;
        }
        let opt_end = self.last_launch(opt_start) + 6;
        self.annos.push(CpuAnno {
            t: opt_start,
            e: opt_end,
            name: "Optimizer.step#AdamW.step".into(),
            step: self.step,
        });
        opt_end
    }

    /// cudaDeviceSynchronize after the optimizer's annotation (ended at `opt_end`): the CPU
    /// waits for the GPU; Context Sync on the GPU. Returns the step's end.
    fn device_sync(&mut self, opt_end: i64) -> i64 {
        let sy = self.c7 + 3;
        let row = self.push(
            SYNC_STREAM,
            sy,
            sy + 4,
            "Context Sync",
            Class::Sync,
            opt_end + 1,
        );
        row.launch_name = "cudaDeviceSynchronize";
        sy + 4 + 20
    }
}
