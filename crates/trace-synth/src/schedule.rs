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

type Schedule = (Vec<GpuItem>, Vec<CpuAnno>, Vec<(i64, i64)>);

pub(super) fn schedule(cfg: &SynthConfig, rank: usize) -> Schedule {
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
        let mut fsdp: Vec<(i64, i64, String)> = Vec::new();
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
            // FSDP2's names: the pre-forward hook of module l wraps its copy-in and all-gather.
            fsdp.push((al - 5, al + 7, format!("FSDP::pre_forward ({l})")));
            fsdp.push((al - 2, al + 6, "FSDP::all_gather".into()));
            fsdp.push((al - 4, al - 2, "FSDP::all_gather_copy_in".into()));
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
            fsdp.push((ae + 1, ae + 3, "FSDP::all_gather_copy_out".into()));
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
            if l > 0 {
                fsdp.push((
                    rl - 4,
                    rl - 3,
                    format!("FSDP::backward_prefetch for {}", l - 1),
                ));
            }
            fsdp.push((rl - 2, rl + 5, format!("FSDP::post_backward_reduce ({l})")));
            fsdp.push((rl + 6, rl + 8, format!("FSDP::post_backward_reshard ({l})")));
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
            annos.push(CpuAnno { t, e, name, step });
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
