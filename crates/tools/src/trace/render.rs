//! Human-readable and Markdown renderings of a [`Report`], and the text table of a
//! [`Comparison`] (`trace compare`).

use std::fmt::Write as _;

use dgx_pixels_trace::compare::Comparison;
use dgx_pixels_trace::{RankReport, Report};

fn ms(us: f64) -> String {
    format!("{:.3} ms", us / 1e3)
}

fn bytes(b: f64) -> String {
    const U: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < U.len() {
        v /= 1000.0;
        i += 1;
    }
    format!("{v:.2} {}", U[i])
}

fn short(name: &str, n: usize) -> String {
    if name.chars().count() <= n {
        name.to_string()
    } else {
        let s: String = name.chars().take(n.saturating_sub(1)).collect();
        format!("{s}…")
    }
}

fn rank_lines(r: &RankReport, out: &mut String) {
    rank_summary(r, out);
    activity_lines(r, out);
    launch_and_idle(r, out);
    if let Some(c) = r.kernels.get("computation") {
        for k in c.top.iter().take(3) {
            let _ = writeln!(
                out,
                "  top kernel {:>10}  {}",
                ms(k.sum_us as f64),
                short(&k.name, 70)
            );
        }
    }
}

/// A rank's first lines: its file and device, the time breakdown, the overlap and the steps.
fn rank_summary(r: &RankReport, out: &mut String) {
    let t = &r.temporal_breakdown;
    let _ = writeln!(
        out,
        "rank {} ({}){}",
        r.rank,
        r.file,
        r.device
            .as_ref()
            .map(|d| format!(", {d}"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "  GPU time {}: compute {:.2}%, non-compute {:.2}%, idle {:.2}%  (busy {:.1}%)",
        ms(t.kernel_time_us as f64),
        t.compute_pct,
        t.non_compute_pct,
        t.idle_pct,
        r.gpu_busy_ratio * 100.0
    );
    let _ = writeln!(
        out,
        "  communication hidden by compute: {:.2}%  (exposed comm {})",
        r.comm_comp_overlap_pct,
        ms(r.communication.exposed_time_us as f64)
    );
    if !r.steps.numbers.is_empty() {
        let _ = writeln!(
            out,
            "  steps: {} × {} (cv {:.3}), {:.2} steps/s{}",
            r.steps.numbers.len(),
            ms(r.steps.mean_us),
            r.steps.cv,
            r.throughput.steps_per_s,
            r.throughput
                .items_per_s
                .map(|x| format!(", {x:.0} items/s"))
                .unwrap_or_default()
        );
    }
}

/// A rank's collectives, phases and FSDP operations, one line each.
fn activity_lines(r: &RankReport, out: &mut String) {
    for c in &r.communication.collectives {
        let _ = writeln!(
            out,
            "  {:<15} {:>5} kernels {:>12} {:>12}  algbw {:>7.1} GB/s  busbw {:>7.1} GB/s",
            c.collective,
            c.count,
            ms(c.time_us),
            bytes(c.bytes),
            c.algbw_gbps,
            c.busbw_gbps
        );
    }
    for p in &r.phases {
        let _ = writeln!(
            out,
            "  phase {:<10} CPU {} ({:.1}% of steps), GPU {}",
            p.phase,
            ms(p.cpu_time_us),
            p.share_of_step * 100.0,
            ms(p.gpu_time_us)
        );
    }
    for f in &r.fsdp {
        let _ = writeln!(
            out,
            "  FSDP {:<15} {:>5}× CPU {} ({:.1}% of steps), comm GPU {}",
            f.op,
            f.count,
            ms(f.cpu_time_us),
            f.share_of_step * 100.0,
            ms(f.comm_gpu_time_us)
        );
    }
}

/// A rank's kernel launch statistics and idle gaps.
fn launch_and_idle(r: &RankReport, out: &mut String) {
    let l = &r.kernel_launch;
    if l.count > 0 {
        let _ = writeln!(
            out,
            "  launches: {} (CPU mean {:.1} µs, delay p50 {:.1} µs p95 {:.1} µs, {} GPU rows shorter than their launch)",
            l.count, l.cpu_duration.mean_us, l.launch_delay.p50_us, l.launch_delay.p95_us, l.gpu_shorter_than_cpu
        );
    }
    let idle: (i64, i64, i64) = r.idle_time_breakdown.iter().fold((0, 0, 0), |a, s| {
        (
            a.0 + s.host_wait_us,
            a.1 + s.kernel_wait_us,
            a.2 + s.other_us,
        )
    });
    let _ = writeln!(
        out,
        "  idle gaps (all streams): host wait {}, kernel wait {}, other {}",
        ms(idle.0 as f64),
        ms(idle.1 as f64),
        ms(idle.2 as f64)
    );
}

/// A terminal summary.
pub fn human(rep: &Report) -> String {
    let mut out = String::new();
    for r in &rep.ranks {
        rank_lines(r, &mut out);
    }
    let j = &rep.job;
    if j.ranks.len() > 1 {
        let _ = writeln!(
            out,
            "job: {} ranks, step {} ± {} across ranks (spread {}), {:.2} steps/s, busbw {:.1} GB/s",
            j.ranks.len(),
            ms(j.step_time_mean_us),
            ms(j.step_time_std_across_ranks_us),
            ms(j.step_time_spread_us),
            j.steps_per_s,
            j.busbw_gbps
        );
        if !j.stragglers.is_empty() {
            let _ = writeln!(
                out,
                "  straggler(s): {:?} (last to start {} of {} collectives)",
                j.stragglers,
                j.stragglers
                    .iter()
                    .map(|r| j.late_arrivals.get(r).copied().unwrap_or(0))
                    .max()
                    .unwrap_or(0),
                j.matched_collectives
            );
        }
    }
    for s in &rep.memory_snapshots {
        for d in &s.devices {
            let _ = writeln!(
                out,
                "memory {} cuda:{}: reserved {}, allocated {}, active {}, fragmentation {:.1}%{}",
                s.file,
                d.device,
                bytes(d.reserved_bytes as f64),
                bytes(d.allocated_bytes as f64),
                bytes(d.active_bytes as f64),
                d.fragmentation_ratio * 100.0,
                d.peak_allocated_bytes
                    .map(|p| format!(", peak allocated {}", bytes(p as f64)))
                    .unwrap_or_default()
            );
        }
    }
    out
}

/// A Markdown report.
pub fn markdown(rep: &Report) -> String {
    let mut out = String::from("# Trace analysis\n\n");
    md_time_breakdown(rep, &mut out);
    md_communication(rep, &mut out);
    md_phases_fsdp(rep, &mut out);
    md_top_kernels(rep, &mut out);
    md_job(rep, &mut out);
    md_memory(rep, &mut out);
    out
}

/// The time breakdown table, a row per rank.
fn md_time_breakdown(rep: &Report, out: &mut String) {
    out.push_str("## Time breakdown per rank (HTA definitions)\n\n| rank | GPU time (ms) | compute % | non-compute % | idle % | comm hidden % | exposed comm (ms) | steps | step (ms) | steps/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in &rep.ranks {
        let t = &r.temporal_breakdown;
        let _ = writeln!(
            out,
            "| {} | {:.3} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {} | {:.3} | {:.2} |",
            r.rank,
            t.kernel_time_us as f64 / 1e3,
            t.compute_pct,
            t.non_compute_pct,
            t.idle_pct,
            r.comm_comp_overlap_pct,
            r.communication.exposed_time_us as f64 / 1e3,
            r.steps.numbers.len(),
            r.steps.mean_us / 1e3,
            r.throughput.steps_per_s
        );
    }
}

/// The communication table, a row per rank and collective.
fn md_communication(rep: &Report, out: &mut String) {
    out.push_str("\n## Communication\n\n| rank | collective | kernels | per step | time (ms) | bytes | algbw (GB/s) | busbw (GB/s) |\n|---:|---|---:|---:|---:|---:|---:|---:|\n");
    for r in &rep.ranks {
        for c in &r.communication.collectives {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.3} | {} | {:.1} | {:.1} |",
                r.rank,
                c.collective,
                c.count,
                c.per_step,
                c.time_us / 1e3,
                bytes(c.bytes),
                c.algbw_gbps,
                c.busbw_gbps
            );
        }
    }
}

/// The phases and FSDP table.
fn md_phases_fsdp(rep: &Report, out: &mut String) {
    out.push_str("\n## Phases and FSDP\n\n| rank | what | count | CPU (ms) | share of step | GPU (ms) |\n|---:|---|---:|---:|---:|---:|\n");
    for r in &rep.ranks {
        for p in &r.phases {
            let _ = writeln!(
                out,
                "| {} | phase {} | {} | {:.3} | {:.1}% | {:.3} |",
                r.rank,
                p.phase,
                p.count,
                p.cpu_time_us / 1e3,
                p.share_of_step * 100.0,
                p.gpu_time_us / 1e3
            );
        }
        for f in &r.fsdp {
            let _ = writeln!(
                out,
                "| {} | FSDP {} | {} | {:.3} | {:.1}% | {:.3} |",
                r.rank,
                f.op,
                f.count,
                f.cpu_time_us / 1e3,
                f.share_of_step * 100.0,
                f.comm_gpu_time_us / 1e3
            );
        }
    }
}

/// The top 5 computation kernels of each rank.
fn md_top_kernels(rep: &Report, out: &mut String) {
    out.push_str("\n## Top computation kernels\n\n| rank | kernel | count | total (ms) | mean (µs) |\n|---:|---|---:|---:|---:|\n");
    for r in &rep.ranks {
        if let Some(c) = r.kernels.get("computation") {
            for k in c.top.iter().take(5) {
                let _ = writeln!(
                    out,
                    "| {} | `{}` | {} | {:.3} | {:.1} |",
                    r.rank,
                    short(&k.name, 80).replace('|', "\\|"),
                    k.count,
                    k.sum_us as f64 / 1e3,
                    k.mean_us
                );
            }
        }
    }
}

/// The job section.
fn md_job(rep: &Report, out: &mut String) {
    let j = &rep.job;
    let _ = writeln!(
        out,
        "\n## Job\n\n- ranks: {:?}\n- mean step: {:.3} ms; std across ranks: {:.3} ms; spread: {:.3} ms\n- stragglers: {:?}; late arrivals: {:?}\n- sync wait per rank (µs): {:?}\n- bus bandwidth: {:.1} GB/s over {}",
        j.ranks,
        j.step_time_mean_us / 1e3,
        j.step_time_std_across_ranks_us / 1e3,
        j.step_time_spread_us / 1e3,
        j.stragglers,
        j.late_arrivals,
        j.sync_wait_us
            .iter()
            .map(|(r, w)| (*r, w.round()))
            .collect::<Vec<_>>(),
        j.busbw_gbps,
        bytes(j.comm_bytes)
    );
}

/// The memory snapshots table, when there are snapshots.
fn md_memory(rep: &Report, out: &mut String) {
    if !rep.memory_snapshots.is_empty() {
        out.push_str("\n## Memory snapshots\n\n| file | device | reserved | allocated | active | fragmentation | peak allocated | peak reserved |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
        let peak = |p: Option<u64>| p.map(|p| bytes(p as f64)).unwrap_or_else(|| "-".into());
        for s in &rep.memory_snapshots {
            for d in &s.devices {
                let _ = writeln!(
                    out,
                    "| `{}` | cuda:{} | {} | {} | {} | {:.1}% | {} | {} |",
                    s.file.replace('|', "\\|"),
                    d.device,
                    bytes(d.reserved_bytes as f64),
                    bytes(d.allocated_bytes as f64),
                    bytes(d.active_bytes as f64),
                    d.fragmentation_ratio * 100.0,
                    peak(d.peak_allocated_bytes),
                    peak(d.peak_reserved_bytes)
                );
            }
        }
    }
}

/// A text table of the comparison.
pub fn comparison(c: &Comparison) -> String {
    let mut out = format!(
        "{:<34} {:>14} {:>14} {:>14} {:>9}\n",
        "metric (mean over ranks)", "A", "B", "B − A", "change"
    );
    let pct = |p: Option<f64>| p.map(|p| format!("{p:+.1}%")).unwrap_or_else(|| "-".into());
    for d in &c.metrics {
        let _ = writeln!(
            out,
            "{:<34} {:>14.2} {:>14.2} {:>+14.2} {:>9}",
            d.metric,
            d.a,
            d.b,
            d.diff,
            pct(d.change_pct)
        );
    }
    out.push_str("\nkernels with the largest change (Σ µs per rank):\n");
    for d in &c.kernels {
        let name: String = d.metric.chars().take(60).collect();
        let _ = writeln!(
            out,
            "  {:>+12.1} µs {:>9}  {name}",
            d.diff,
            pct(d.change_pct)
        );
    }
    out
}
