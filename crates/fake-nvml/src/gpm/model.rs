//! What GPM answers: the simulator's profiling model ([`dgx_pixels_sim::profile`]) averaged over
//! the interval between two samples, in GPM's units (percent, MiB/s), per metric id.

use std::time::Duration;

use dgx_pixels_sim::{profile, GpuReading, GpuState, GpuStatic, Node, Profile};

use crate::types::*;

/// `NVML_GPM_METRIC_MAX`: metric ids are below it, and a request holds at most this many.
pub const METRIC_MAX: u32 = 210;

/// GPM metric ids the fake models (`nvmlGpmMetricId_t`).
pub const GRAPHICS_UTIL: u32 = 1;
pub const SM_UTIL: u32 = 2;
pub const SM_OCCUPANCY: u32 = 3;
pub const ANY_TENSOR_UTIL: u32 = 5;
pub const DRAM_BW_UTIL: u32 = 10;
pub const FP64_UTIL: u32 = 11;
pub const FP32_UTIL: u32 = 12;
pub const FP16_UTIL: u32 = 13;
pub const PCIE_TX_PER_SEC: u32 = 20;
pub const PCIE_RX_PER_SEC: u32 = 21;
pub const NVLINK_TOTAL_RX_PER_SEC: u32 = 60;
pub const NVLINK_TOTAL_TX_PER_SEC: u32 = 61;

/// The ids above, in the order [`values`] answers them.
pub const MODELLED: [u32; 12] = [
    GRAPHICS_UTIL,
    SM_UTIL,
    SM_OCCUPANCY,
    ANY_TENSOR_UTIL,
    DRAM_BW_UTIL,
    FP64_UTIL,
    FP32_UTIL,
    FP16_UTIL,
    PCIE_TX_PER_SEC,
    PCIE_RX_PER_SEC,
    NVLINK_TOTAL_RX_PER_SEC,
    NVLINK_TOTAL_TX_PER_SEC,
];

const MIB: f64 = 1024.0 * 1024.0;
/// The simulator's step in milliseconds: readings are constant within one.
const STEP_MS: u64 = dgx_pixels_sim::STEP.as_millis() as u64;
/// At most this many readings (+ 1) per average (a longer interval averages coarser steps).
const MAX_POINTS: u64 = 600;

/// Hopper and newer have GPM (NVML: "Hopper or newer fully supported devices").
pub fn has_gpm(g: &GpuStatic) -> bool {
    ["Hopper", "Blackwell"]
        .iter()
        .any(|a| g.architecture.eq_ignore_ascii_case(a))
}

/// One profile's answer per modelled id, in GPM units; `None` for what the part lacks (PCIe on
/// a part not attached by PCIe, NVLink without links), which GPM answers `NOT_SUPPORTED`.
pub fn values(g: &GpuStatic, p: &Profile) -> [Option<f64>; 12] {
    let pct = |r: f64| Some(r * 100.0);
    let pcie = |b: f64| g.pcie_link.map(|_| b / MIB);
    [
        pct(p.gr_engine_active),
        pct(p.sm_active),
        pct(p.sm_occupancy),
        pct(p.tensor_active),
        pct(p.dram_active),
        pct(p.fp64_active),
        pct(p.fp32_active),
        pct(p.fp16_active),
        pcie(p.pcie_tx_bytes_per_second),
        pcie(p.pcie_rx_bytes_per_second),
        p.nvlink_rx_bytes_per_second.map(|b| b / MIB),
        p.nvlink_tx_bytes_per_second.map(|b| b / MIB),
    ]
}

/// One MIG GPU instance's answers: its graphics activity as the simulator models it, and the
/// GPU's other activity ratios scaled by the instance's share of the GPU's graphics activity
/// (at most 1); PCIe and NVLink are the GPU's, not an instance's (`NOT_SUPPORTED`). `None`
/// for every metric while the reading has no such instance.
pub fn mig_values(g: &GpuStatic, r: &GpuReading, gpu_instance: u32) -> [Option<f64>; 12] {
    let Some(active) = r
        .readout
        .mig
        .iter()
        .find(|m| m.gpu_instance == gpu_instance)
        .and_then(|m| m.graphics_engine_active_ratio)
    else {
        return [None; 12];
    };
    let p = profile(g, r);
    let scale = if p.gr_engine_active > 0.0 {
        active / p.gr_engine_active
    } else {
        0.0
    };
    let pct = |ratio: f64| Some((ratio * scale).clamp(0.0, 1.0) * 100.0);
    [
        Some(active.clamp(0.0, 1.0) * 100.0),
        pct(p.sm_active),
        pct(p.sm_occupancy),
        pct(p.tensor_active),
        pct(p.dram_active),
        pct(p.fp64_active),
        pct(p.fp32_active),
        pct(p.fp16_active),
        None,
        None,
        None,
        None,
    ]
}

/// The answers of GPU `gpu` averaged over `[from, to]` (the samples' scenario times, either
/// order), each reading weighted by how long it holds; at a single instant, that instant's.
/// A lost GPU's time counts for nothing; lost throughout, `GPU_IS_LOST`.
pub fn averaged(
    node: &mut Node,
    gpu: usize,
    a: Duration,
    b: Duration,
) -> Result<[Option<f64>; 12], NvmlReturn> {
    averaged_by(node, gpu, a, b, |g, r| values(g, &profile(g, r)))
}

/// As [`averaged`], for MIG GPU instance `gpu_instance` of GPU `gpu` ([`mig_values`]).
pub fn averaged_mig(
    node: &mut Node,
    gpu: usize,
    gpu_instance: u32,
    a: Duration,
    b: Duration,
) -> Result<[Option<f64>; 12], NvmlReturn> {
    averaged_by(node, gpu, a, b, |g, r| mig_values(g, r, gpu_instance))
}

fn averaged_by(
    node: &mut Node,
    gpu: usize,
    a: Duration,
    b: Duration,
    answers: impl Fn(&GpuStatic, &GpuReading) -> [Option<f64>; 12],
) -> Result<[Option<f64>; 12], NvmlReturn> {
    let g = node.gpu(gpu).ok_or(ERROR_INVALID_ARGUMENT)?.clone();
    let (from, to) = (ms(a.min(b)), ms(a.max(b)));
    let mut sum = [0.0; 12];
    let mut seen = [false; 12];
    let mut weight_total = 0.0;
    for (at, end) in points(from, to) {
        let weight = if to == from { 1.0 } else { (end - at) as f64 };
        if let Some(GpuState::Ok(r)) = node.reading(gpu, Duration::from_millis(at)) {
            for (i, v) in answers(&g, &r).iter().enumerate() {
                if let Some(v) = v {
                    sum[i] += v * weight;
                    seen[i] = true;
                }
            }
            weight_total += weight;
        }
    }
    if weight_total == 0.0 {
        return Err(ERROR_GPU_IS_LOST);
    }
    let mut out = [None; 12];
    for i in 0..12 {
        out[i] = seen[i].then(|| sum[i] / weight_total);
    }
    Ok(out)
}

/// The readings [`averaged`] takes over `[from, to]` ms: (time read, end of the span it
/// stands for), tiling the interval. Readings change at step boundaries, so each stands for its
/// stride; the stride grows with the interval so that there are at most `MAX_POINTS` + 1 (the
/// first and last spans may be partial).
fn points(from: u64, to: u64) -> impl Iterator<Item = (u64, u64)> {
    let stride = STEP_MS * (to - from).div_ceil(STEP_MS * MAX_POINTS).max(1);
    let first = (from, ((from / stride + 1) * stride).min(to));
    std::iter::successors(Some(first), move |&(_, end)| {
        (end < to).then(|| (end, ((end / stride + 1) * stride).min(to)))
    })
}

fn ms(t: Duration) -> u64 {
    u64::try_from(t.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dgx_pixels_sim::Scenario;

    fn node(name: &str) -> Node {
        Node::new(Scenario::builtin(name).unwrap())
    }

    fn at(n: &mut Node, gpu: usize, t_ms: u64) -> [Option<f64>; 12] {
        let g = n.gpu(gpu).unwrap().clone();
        let Some(GpuState::Ok(r)) = n.reading(gpu, Duration::from_millis(t_ms)) else {
            panic!()
        };
        values(&g, &profile(&g, &r))
    }

    #[test]
    fn an_instant_answers_that_instants_profile_in_gpm_units() {
        let mut n = node("dgx-h100");
        let g = n.gpu(0).unwrap().clone();
        let Some(GpuState::Ok(r)) = n.reading(0, Duration::from_secs(60)) else {
            panic!()
        };
        let p = profile(&g, &r);
        let t = Duration::from_secs(60);
        let v = averaged(&mut node("dgx-h100"), 0, t, t).unwrap();
        assert_eq!(v[1], Some(p.sm_active * 100.0));
        assert_eq!(v[8], Some(p.pcie_tx_bytes_per_second / MIB));
        assert_eq!(v[11], Some(p.nvlink_tx_bytes_per_second.unwrap() / MIB));
    }

    #[test]
    fn an_interval_averages_every_step_weighted_by_its_share() {
        // 61.05 s to 62.25 s: a partial step, eleven whole ones, a partial one.
        let mut n = node("dgx-h100");
        let (from, to) = (61_050u64, 62_250u64);
        let mut want = [0.0; 12];
        let mut t = from;
        while t < to {
            let end = ((t / 100 + 1) * 100).min(to);
            for (w, v) in want.iter_mut().zip(at(&mut n, 2, t)) {
                *w += v.unwrap() * (end - t) as f64 / (to - from) as f64;
            }
            t = end;
        }
        let got = averaged(
            &mut node("dgx-h100"),
            2,
            Duration::from_millis(to),
            Duration::from_millis(from),
        )
        .unwrap();
        for (g, w) in got.iter().zip(want) {
            assert!((g.unwrap() - w).abs() < 1e-9, "{got:?} vs {want:?}");
        }
        // The average differs from either end's reading (the workload moves within a second).
        assert_ne!(got[0], at(&mut n, 2, from)[0]);
    }

    #[test]
    fn a_mig_instance_answers_its_own_activity_and_its_share_of_the_gpus() {
        let text = include_str!("../../../../examples/scenarios/h100-mig.toml");
        let mut n = Node::new(Scenario::from_toml_str(text, "h100-mig.toml").unwrap());
        let g = n.gpu(0).unwrap().clone();
        let t = Duration::from_secs(30);
        let Some(GpuState::Ok(r)) = n.reading(0, t) else {
            panic!()
        };
        let p = profile(&g, &r);
        for m in &r.readout.mig {
            let v = mig_values(&g, &r, m.gpu_instance);
            let active = m.graphics_engine_active_ratio.unwrap();
            assert_eq!(v[0], Some(active * 100.0));
            let share = active / p.gr_engine_active;
            assert!((v[1].unwrap() - p.sm_active * share * 100.0).abs() < 1e-9);
            assert!((v[3].unwrap() - p.tensor_active * share * 100.0).abs() < 1e-9);
            // PCIe and NVLink are the GPU's.
            assert!(v[8..].iter().all(Option::is_none), "{v:?}");
        }
        // The instances differ (their weights do), and an unknown instance answers nothing.
        let a = mig_values(&g, &r, 1)[1];
        assert_ne!(a, mig_values(&g, &r, 2)[1]);
        assert_eq!(mig_values(&g, &r, 9), [None; 12]);
        let avg = averaged_mig(&mut n, 0, 1, t, t).unwrap();
        assert_eq!(avg[1], a);
    }

    #[test]
    fn parts_without_links_answer_not_supported_for_them() {
        let mut spark = node("dgx-spark");
        let t = Duration::from_secs(10);
        let v = averaged(&mut spark, 0, t, t).unwrap();
        assert_eq!((v[10], v[11]), (None, None), "GB10 has no NVLink");
        assert!(v[0].is_some());
        assert!(has_gpm(spark.gpu(0).unwrap()));
        assert!(!has_gpm(node("dgx-a100-mig").gpu(0).unwrap()));
    }

    #[test]
    fn a_long_interval_is_bounded_in_readings() {
        // An hour: 36,000 steps, read as at most MAX_POINTS + 1 coarser ones that tile it,
        // whether or not the interval starts on a stride boundary.
        for (from, to) in [(0, 3_600_000), (12_345, 3_612_345), (7, 8), (500, 500)] {
            let p: Vec<(u64, u64)> = points(from, to).collect();
            assert!(
                p.len() as u64 <= MAX_POINTS + 1,
                "{from}..{to}: {}",
                p.len()
            );
            assert_eq!(p[0].0, from);
            assert_eq!(p[p.len() - 1].1, to);
            assert!(p.windows(2).all(|w| w[0].1 == w[1].0 && w[0].0 < w[0].1));
        }
        assert!(
            points(0, 3_600_000).count() > 100,
            "still sampled finely enough"
        );
        let hour = Duration::from_secs(3_600);
        let v = averaged(&mut node("dgx-h100"), 0, Duration::ZERO, hour).unwrap();
        assert!(v[0].unwrap() >= 0.0 && v[0].unwrap() <= 100.0);
    }
}
