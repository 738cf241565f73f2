//! Names to classes: HTA's kernel classes, NCCL collective types, dtype sizes, training phases
//! and FSDP operations. Each is one small table or function, so the rules live in one place.

use serde::Serialize;

/// HTA's kernel class of a GPU row, decided by its name (first match wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelClass {
    /// Collectives: `^nccl`, `^hip`, `^hccl`, or `ncclKernel` anywhere in the first line.
    Communication,
    /// `^(hip)?Memcpy`, `^(hip)?Memset`, `^dma`.
    Memory,
    /// Everything that is neither of the above nor in HTA's exclusion list.
    Computation,
    /// The rest: synchronization rows (`Context Sync`, `Event Sync`, `Stream Wait Event`), ...
    Other,
}

/// Python's `re.match(".*X", s)`: `X` occurs before the first newline (`.` skips no newline).
fn in_first_line(name: &str, needle: &str) -> bool {
    name.split('\n').next().unwrap_or("").contains(needle)
}

/// `re.match("cuda.*LaunchKernel", s)`.
fn cuda_launch_kernel(name: &str) -> bool {
    name.strip_prefix("cuda")
        .is_some_and(|rest| in_first_line(rest, "LaunchKernel"))
}

/// HTA's classification of a kernel name (`hta.utils.utils.get_kernel_type`).
pub fn kernel_class(name: &str) -> KernelClass {
    let p = |s: &str| name.starts_with(s);
    if p("nccl") || p("hip") || p("hccl") || in_first_line(name, "ncclKernel") {
        return KernelClass::Communication;
    }
    if p("Memcpy") || p("hipMemcpy") || p("Memset") || p("hipMemset") || p("dma") {
        return KernelClass::Memory;
    }
    let excluded = p("nccl")
        || in_first_line(name, "Memcpy")
        || in_first_line(name, "Memset")
        || in_first_line(name, "dma")
        || in_first_line(name, "Sync")
        || p("Stream Wait Event")
        || cuda_launch_kernel(name)
        || p("runFunction")
        || p("hip")
        || p("job_exe")
        || p("packet")
        || p("pe_exe")
        || p("cpum_exe_subgraph")
        || p("hccl")
        || p("collective_subgraph_execution");
    if excluded {
        KernelClass::Other
    } else {
        KernelClass::Computation
    }
}

/// The launch calls HTA's launch statistics join with their GPU rows.
pub fn is_hta_launch(name: &str) -> bool {
    matches!(
        name,
        "cudaLaunchKernel" | "cudaLaunchKernelExC" | "cudaMemcpyAsync" | "cudaMemsetAsync"
    )
}

/// A collective's type, normalized over PyTorch's and NCCL's spellings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// all-reduce
    AllReduce,
    /// all-gather (`_allgather_base`, `all_gather_into_tensor`, coalesced variants)
    AllGather,
    /// reduce-scatter (`reduce_scatter_tensor`, `_reduce_scatter_base`, coalesced variants)
    ReduceScatter,
    /// broadcast
    Broadcast,
    /// reduce
    Reduce,
    /// all-to-all
    AllToAll,
    /// point-to-point send/recv
    SendRecv,
    /// a collective we cannot name (barrier, gather, scatter, unknown)
    Other,
}

impl Collective {
    /// Every type, in report order.
    pub const ALL: [Collective; 8] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllToAll,
        Collective::SendRecv,
        Collective::Other,
    ];

    /// The snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllToAll => "all_to_all",
            Collective::SendRecv => "send_recv",
            Collective::Other => "other",
        }
    }

    /// From the `Collective name` kernel arg (e.g. `allreduce`, `_allgather_base`,
    /// `reduce_scatter_tensor_coalesced`, `all_to_all`, `send`).
    pub fn from_arg(name: &str) -> Collective {
        let n: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect();
        if n.contains("allreduce") {
            Collective::AllReduce
        } else if n.contains("allgather") {
            Collective::AllGather
        } else if n.contains("reducescatter") {
            Collective::ReduceScatter
        } else if n.contains("alltoall") {
            Collective::AllToAll
        } else if n.contains("broadcast") {
            Collective::Broadcast
        } else if n == "send" || n == "recv" || n.contains("sendrecv") || n.starts_with("p2p") {
            Collective::SendRecv
        } else if n.contains("reduce") {
            Collective::Reduce
        } else {
            Collective::Other
        }
    }

    /// From a kernel name (`ncclKernel_AllReduce_RING_LL_Sum_float`,
    /// `ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL`, `ncclDevKernel_SendRecv`); `None` when the
    /// name is not an NCCL kernel.
    pub fn from_kernel_name(name: &str) -> Option<Collective> {
        if !(name.starts_with("nccl") || name.contains("ncclKernel")) {
            return None;
        }
        Some(Collective::from_arg(name.split('(').next().unwrap_or(name)))
    }

    /// nccl-tests' bus-bandwidth factor for a group of `n` ranks: busbw = algbw × factor.
    pub fn bus_factor(self, n: u64) -> f64 {
        if n == 0 {
            return 0.0;
        }
        let n = n as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::Broadcast | Collective::Reduce | Collective::SendRecv => 1.0,
            Collective::Other => 0.0,
        }
    }
}

/// Size in bytes of one element of a PyTorch dtype as Kineto writes it (`Float`, `BFloat16`,
/// `Half`, `Long`, ...); `None` when unknown.
pub fn dtype_size(dtype: &str) -> Option<u64> {
    let d = dtype
        .trim()
        .trim_start_matches("torch.")
        .to_ascii_lowercase();
    Some(match d.as_str() {
        "float" | "float32" | "int" | "int32" | "uint32" | "f32" | "i32" => 4,
        "double" | "float64" | "long" | "int64" | "uint64" | "complexfloat" | "f64" | "i64" => 8,
        "half" | "float16" | "bfloat16" | "short" | "int16" | "uint16" | "bf16" | "f16" => 2,
        "byte" | "char" | "bool" | "int8" | "uint8" | "float8_e4m3fn" | "float8_e5m2"
        | "float8_e4m3fnuz" | "float8_e5m2fnuz" | "u8" | "i8" => 1,
        "complexdouble" | "complex128" => 16,
        _ => return None,
    })
}

/// Training phase of a CPU annotation, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// forward pass
    Forward,
    /// backward pass
    Backward,
    /// optimizer step
    Optimizer,
}

impl Phase {
    /// Every phase, in report order.
    pub const ALL: [Phase; 3] = [Phase::Forward, Phase::Backward, Phase::Optimizer];

    /// The snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// The phase an annotation marks: `## forward ##`, `forward`, `*.forward` (not FSDP's
/// internal `FSDP::pre_forward` hooks), `## backward ##`, `backward`, `Optimizer.step#...`,
/// `optimizer_step`, `## optimizer ##`.
pub fn phase_of(name: &str) -> Option<Phase> {
    if name.starts_with("FSDP::") || name.starts_with("ProfilerStep") {
        return None;
    }
    let n = name.trim().trim_matches('#').trim().to_ascii_lowercase();
    if n.starts_with("optimizer") || n.contains("optimizer.step") || n == "optimizer_step" {
        return Some(Phase::Optimizer);
    }
    if n == "forward" || n.ends_with(".forward") || n == "## forward ##" {
        return Some(Phase::Forward);
    }
    if n == "backward" || n.ends_with(".backward") {
        return Some(Phase::Backward);
    }
    None
}

/// FSDP operation kind of an annotation: the seed's split of FSDP overhead (all-gather or
/// unshard, reduce-scatter, reshard), prefetch, and copy-in/copy-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FsdpOp {
    /// gathering (unsharding) parameters: FSDP2 `FSDP::all_gather`, `FSDP::pre_forward (N)`,
    /// `FSDP::pre_backward (N)`; FSDP1 `._pre_forward`, `._pre_backward_hook`, `*unshard*`
    AllGather,
    /// reducing gradients: FSDP2 `FSDP::post_backward_reduce (N)`; FSDP1
    /// `._post_backward_hook` (which reduce-scatters the gradient); `*reduce_scatter*`
    ReduceScatter,
    /// freeing the unsharded parameters: `FSDP::post_backward_reshard (N)`,
    /// `FSDP::post_forward (N)`, FSDP1 `._post_forward`, `*reshard*`
    Reshard,
    /// issuing the next module's all-gather early: `FSDP::backward_prefetch for N`, FSDP1
    /// `._pre_forward_prefetch`, `._pre_backward_prefetch`, `._post_backward_prefetch`
    Prefetch,
    /// copying shards into a collective's buffer: `FSDP::all_gather_copy_in`,
    /// `fsdp::all_gather_copy_in`, `fsdp::chunk_cat` (reduce-scatter's copy-in)
    CopyIn,
    /// copying the gathered buffer out to parameters: `FSDP::all_gather_copy_out`,
    /// `fsdp::split_with_sizes_copy`
    CopyOut,
    /// any other FSDP hook (`FSDP::root_pre_forward`, `FSDP::post_backward_accumulate (N)`,
    /// FSDP1 `._root_pre_forward`, `._to_kwargs`, ...)
    Other,
}

impl FsdpOp {
    /// Every kind, in report order.
    pub const ALL: [FsdpOp; 7] = [
        FsdpOp::AllGather,
        FsdpOp::ReduceScatter,
        FsdpOp::Reshard,
        FsdpOp::Prefetch,
        FsdpOp::CopyIn,
        FsdpOp::CopyOut,
        FsdpOp::Other,
    ];

    /// The snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            FsdpOp::AllGather => "all_gather",
            FsdpOp::ReduceScatter => "reduce_scatter",
            FsdpOp::Reshard => "reshard",
            FsdpOp::Prefetch => "prefetch",
            FsdpOp::CopyIn => "copy_in",
            FsdpOp::CopyOut => "copy_out",
            FsdpOp::Other => "other",
        }
    }
}

/// The FSDP operation an annotation marks, from the names both generations write: FSDP2's
/// `FSDP::<hook> (N)` / `FSDP::backward_prefetch for N` record_functions and its `fsdp::` custom
/// ops, FSDP1's `FullyShardedDataParallel.<_hook>`; `None` for non-FSDP names and for FSDP1's
/// `FullyShardedDataParallel.forward`, which spans the module's whole forward (a phase, not
/// overhead). Nested hooks (a copy-in inside a pre-forward) count in both kinds.
pub fn fsdp_op(name: &str) -> Option<FsdpOp> {
    if let Some(op) = name.strip_prefix("fsdp::") {
        // The custom ops FSDP2 runs on the CPU side of its collectives.
        return match op {
            "all_gather_copy_in" | "chunk_cat" => Some(FsdpOp::CopyIn),
            "split_with_sizes_copy" => Some(FsdpOp::CopyOut),
            _ => None,
        };
    }
    let rest = name
        .strip_prefix("FSDP::")
        .or_else(|| name.strip_prefix("FullyShardedDataParallel."))?;
    // FSDP2 appends the module index (` (3)`, ` for 3`); FSDP1 prefixes hooks with `_`.
    let r = rest.to_ascii_lowercase();
    let r = r.trim_start_matches('_');
    if r == "forward" {
        return None;
    }
    Some(if r.contains("prefetch") {
        FsdpOp::Prefetch
    } else if r.contains("copy_in") {
        FsdpOp::CopyIn
    } else if r.contains("copy_out") {
        FsdpOp::CopyOut
    } else if r.contains("all_gather")
        || r.contains("unshard")
        || r.starts_with("pre_forward")
        || r.starts_with("pre_backward")
    {
        FsdpOp::AllGather
    } else if r.contains("reduce_scatter")
        || r.starts_with("post_backward_reduce")
        || r.starts_with("post_backward_hook")
    {
        FsdpOp::ReduceScatter
    } else if r.contains("reshard") || r.starts_with("post_forward") {
        FsdpOp::Reshard
    } else {
        FsdpOp::Other
    })
}

/// The step number of a `ProfilerStep#N` name (HTA's `^ProfilerStep#(\d+)`).
pub fn profiler_step(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("ProfilerStep#")?;
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hta_kernel_classes() {
        use KernelClass::*;
        for (name, class) in [
            ("ncclKernel_AllReduce_RING_LL_Sum_float", Communication),
            (
                "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                Communication,
            ),
            ("void foo<ncclKernel>()", Communication),
            ("Memcpy HtoD (Pinned -> Device)", Memory),
            ("Memset (Device)", Memory),
            ("dma_copy", Memory),
            (
                "void at::native::vectorized_elementwise_kernel<4>()",
                Computation,
            ),
            ("sm90_xmma_gemm_bf16bf16_bf16f32", Computation),
            ("Context Sync", Other),
            ("Event Sync", Other),
            ("Stream Wait Event", Other),
            ("cudaLaunchKernel", Other),
            ("my_Memcpy_kernel", Other),
            ("x\nSync", Computation),
        ] {
            assert_eq!(kernel_class(name), class, "{name}");
        }
    }

    #[test]
    fn collectives_and_sizes() {
        assert_eq!(Collective::from_arg("allreduce"), Collective::AllReduce);
        assert_eq!(
            Collective::from_arg("_allgather_base"),
            Collective::AllGather
        );
        assert_eq!(
            Collective::from_arg("reduce_scatter_tensor_coalesced"),
            Collective::ReduceScatter
        );
        assert_eq!(Collective::from_arg("all_to_all"), Collective::AllToAll);
        assert_eq!(Collective::from_arg("send"), Collective::SendRecv);
        assert_eq!(Collective::from_arg("reduce"), Collective::Reduce);
        assert_eq!(Collective::from_arg("barrier"), Collective::Other);
        assert_eq!(
            Collective::from_kernel_name("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"),
            Some(Collective::ReduceScatter)
        );
        assert_eq!(Collective::from_kernel_name("gemm"), None);
        assert_eq!(dtype_size("BFloat16"), Some(2));
        assert_eq!(dtype_size("Float"), Some(4));
        assert_eq!(dtype_size("Long"), Some(8));
        assert_eq!(dtype_size("Quaternion"), None);
        assert!((Collective::AllReduce.bus_factor(8) - 1.75).abs() < 1e-12);
        assert!((Collective::AllGather.bus_factor(4) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn phases_fsdp_steps() {
        assert_eq!(phase_of("## forward ##"), Some(Phase::Forward));
        assert_eq!(
            phase_of("FullyShardedDataParallel.forward"),
            Some(Phase::Forward)
        );
        assert_eq!(phase_of("## backward ##"), Some(Phase::Backward));
        assert_eq!(
            phase_of("Optimizer.step#AdamW.step"),
            Some(Phase::Optimizer)
        );
        assert_eq!(phase_of("FSDP::pre_forward"), None);
        assert_eq!(fsdp_op("FSDP::all_gather"), Some(FsdpOp::AllGather));
        assert_eq!(fsdp_op("FSDP::all_gather_copy_in"), Some(FsdpOp::CopyIn));
        assert_eq!(fsdp_op("FSDP::all_gather_copy_out"), Some(FsdpOp::CopyOut));
        assert_eq!(
            fsdp_op("FSDP::post_backward_reshard"),
            Some(FsdpOp::Reshard)
        );
        assert_eq!(
            fsdp_op("FSDP::post_backward_reduce"),
            Some(FsdpOp::ReduceScatter)
        );
        assert_eq!(fsdp_op("FSDP::root_pre_forward"), Some(FsdpOp::Other));
        assert_eq!(fsdp_op("aten::mm"), None);
        // The names real FSDP2 and FSDP1 traces carry (fixtures/h200-2026-11-26).
        use FsdpOp::*;
        for (name, op) in [
            ("FSDP::pre_forward (3)", Some(AllGather)),
            ("FSDP::pre_backward (7)", Some(AllGather)),
            ("FSDP::post_forward (3)", Some(Reshard)),
            ("FSDP::post_backward_reduce (7)", Some(ReduceScatter)),
            ("FSDP::post_backward_reshard (7)", Some(Reshard)),
            ("FSDP::post_backward_accumulate (7)", Some(Other)),
            ("FSDP::backward_prefetch for 6", Some(Prefetch)),
            ("FSDP::inputs_to_device", Some(Other)),
            ("FSDP::root_post_backward_callback", Some(Other)),
            ("fsdp::chunk_cat", Some(CopyIn)),
            ("fsdp::all_gather_copy_in", Some(CopyIn)),
            ("fsdp::split_with_sizes_copy", Some(CopyOut)),
            ("fsdp::something_new", None),
            ("FullyShardedDataParallel.forward", None),
            ("FullyShardedDataParallel._root_pre_forward", Some(Other)),
            ("FullyShardedDataParallel._pre_forward", Some(AllGather)),
            (
                "FullyShardedDataParallel._pre_forward_prefetch",
                Some(Prefetch),
            ),
            ("FullyShardedDataParallel._post_forward", Some(Reshard)),
            (
                "FullyShardedDataParallel._pre_backward_hook",
                Some(AllGather),
            ),
            (
                "FullyShardedDataParallel._pre_backward_prefetch",
                Some(Prefetch),
            ),
            (
                "FullyShardedDataParallel._post_backward_hook",
                Some(ReduceScatter),
            ),
            (
                "FullyShardedDataParallel._post_backward_prefetch",
                Some(Prefetch),
            ),
            ("FullyShardedDataParallel._to_kwargs", Some(Other)),
            ("FullyShardedDataParallel._unshard", Some(AllGather)),
        ] {
            assert_eq!(fsdp_op(name), op, "{name}");
        }
        assert_eq!(profiler_step("ProfilerStep#12"), Some(12));
        assert_eq!(profiler_step("ProfilerStep#"), None);
    }
}
