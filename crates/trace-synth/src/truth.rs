//! The ground truth of one rank, computed from the design with a µs bitmap.
//!
//! Separate on purpose: it must not share code with the writer or with the analyses it
//! checks (a different algorithm from the analysis' sweep).

use std::collections::BTreeMap;

use super::{Class, CpuAnno, GpuItem, RankTruth, SynthConfig};

pub(super) fn truth(
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
    busy_times(&kept, &mut t);
    idle_by_stream(&kept, &mut t);
    launches_and_collectives(&kept, &mut t);
    for a in annos.iter().filter(|a| a.step < kept_steps) {
        annotation(a, &mut t);
    }
    t.step_durations_us = bounds[..kept_steps.min(bounds.len())]
        .iter()
        .map(|(s, e)| (e - s) as f64 + 0.875)
        .collect();
    t
}

/// Kernel, idle, compute, communication and overlap time, from one µs bitmap per class.
fn busy_times(kept: &[&GpuItem], t: &mut RankTruth) {
    let lo = kept.iter().map(|g| g.t).min().unwrap_or(0);
    let hi = kept.iter().map(|g| g.e).max().unwrap_or(0);
    let len = (hi - lo) as usize;
    let (mut all, mut comp, mut comm) = (vec![false; len], vec![false; len], vec![false; len]);
    for g in kept {
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
}

/// Idle per stream, HTA's rule on the design values.
fn idle_by_stream(kept: &[&GpuItem], t: &mut RankTruth) {
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
}

/// Launch/GPU pairs, the collectives' counts, bytes and raw times, and their starts in order.
fn launches_and_collectives(kept: &[&GpuItem], t: &mut RankTruth) {
    for g in kept {
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
}

/// Counts an FSDP annotation or adds a phase annotation's raw time.
fn annotation(a: &CpuAnno, t: &mut RankTruth) {
    let raw = (a.e - a.t) as f64 + 0.375 + 0.5;
    if a.name.starts_with("FSDP::") {
        // FSDP2 appends the module index: `FSDP::pre_forward (3)`, `... for 2`.
        let base = a.name.split([' ', '(']).next().unwrap_or("");
        let key = match base {
            "FSDP::all_gather" | "FSDP::pre_forward" => "all_gather",
            "FSDP::all_gather_copy_in" => "copy_in",
            "FSDP::all_gather_copy_out" => "copy_out",
            "FSDP::post_backward_reduce" => "reduce_scatter",
            "FSDP::backward_prefetch" => "prefetch",
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
