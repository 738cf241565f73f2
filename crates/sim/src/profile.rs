//! The profiling model: what DCGM's profiling fields (`DCGM_FI_PROF_*`) would report for a
//! simulated GPU, derived from its reading so that it is coherent with utilization, memory
//! traffic, the MIG layout and the link rates by construction.
//!
//! The exporter's simulated node serves these values, and the fake libdcgm (crates/fake-dcgm)
//! answers its profiling fields with them: one model, two consumers, so a test that compares
//! what the exporter serves through the fake with [`profile`] compares against the simulator.

use dgx_pixels_readout::GpuReadout;

use crate::types::{GpuReading, GpuStatic};

/// Profiling readings of one GPU: ratios in 0..1, rates in bytes per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// Graphics or compute engine active (`PROF_GR_ENGINE_ACTIVE`).
    pub gr_engine_active: f64,
    /// At least one warp resident on an SM, averaged over SMs (`PROF_SM_ACTIVE`).
    pub sm_active: f64,
    /// Resident warps relative to the maximum (`PROF_SM_OCCUPANCY`).
    pub sm_occupancy: f64,
    /// Tensor pipe active (`PROF_PIPE_TENSOR_ACTIVE`).
    pub tensor_active: f64,
    /// Device memory interface active (`PROF_DRAM_ACTIVE`).
    pub dram_active: f64,
    /// FP64 pipe active.
    pub fp64_active: f64,
    /// FP32 pipe active.
    pub fp32_active: f64,
    /// FP16 pipe active.
    pub fp16_active: f64,
    /// PCIe transmit rate (`PROF_PCIE_TX_BYTES`).
    pub pcie_tx_bytes_per_second: f64,
    /// PCIe receive rate (`PROF_PCIE_RX_BYTES`).
    pub pcie_rx_bytes_per_second: f64,
    /// NVLink transmit rate; `None` for GPUs without NVLink (DCGM has no value for them).
    pub nvlink_tx_bytes_per_second: Option<f64>,
    /// NVLink receive rate; `None` for GPUs without NVLink.
    pub nvlink_rx_bytes_per_second: Option<f64>,
}

/// Engine activity above which the simulated workload counts as tensor work (training
/// phases); below it (data loading, evaluation dips, checkpoints, idle) the tensor and FP16
/// pipes are idle.
pub const TENSOR_WORKLOAD_UTILIZATION: f64 = 0.6;

/// Share of engine-active time during which warps are resident on the SMs (kernel launch gaps
/// and tails leave some SMs empty while the engine counts as busy).
const SM_SHARE: f64 = 0.92;
/// Resident warps relative to the maximum, while an SM is active (register- and
/// shared-memory-heavy GEMM kernels run about half occupancy).
const OCCUPANCY: f64 = 0.55;
/// Compute slices of a full GPU (MIG profiles are named `Ng.MEM`, N of these 7).
const MIG_SLICES: f64 = 7.0;

/// The compute slices of a MIG profile name such as `3g.40gb`; 1 when it cannot be read.
fn slices(profile: &str) -> f64 {
    profile
        .split_once('g')
        .and_then(|(n, _)| n.parse::<u32>().ok())
        .map_or(1.0, f64::from)
}

/// A ratio of the reading; one it lacks counts as idle (the simulator fills them all).
fn ratio(v: Option<f64>) -> f64 {
    v.unwrap_or(0.0).clamp(0.0, 1.0)
}

/// Graphics-engine activity of the whole GPU: its utilization, or on a GPU in MIG mode the
/// activity of its instances weighted by their share of the compute slices (an idle slice
/// counts as idle, as DCGM's GPU-level profiling sees it).
fn engine_active(r: &GpuReadout) -> f64 {
    if r.mig.is_empty() {
        return ratio(r.utilization_ratio);
    }
    let weighted: f64 = r
        .mig
        .iter()
        .map(|m| m.graphics_engine_active_ratio.unwrap_or(0.0) * slices(&m.profile))
        .sum();
    (weighted / MIG_SLICES).clamp(0.0, 1.0)
}

/// The profiling readings of GPU `g` in state `r`.
///
/// SM activity is a fixed share of engine activity (never above it), occupancy a share of SM
/// activity; the tensor and FP16 pipes are busy only under a tensor workload, the FP32 and
/// FP64 pipes a little always while kernels run; DRAM activity is the memory utilization; the
/// link rates are the reading's. An idle GPU reads 0 everywhere but the link rates.
pub fn profile(g: &GpuStatic, r: &GpuReading) -> Profile {
    let gr = engine_active(&r.readout);
    let sm = SM_SHARE * gr;
    let tensor_workload = gr >= TENSOR_WORKLOAD_UTILIZATION;
    let nvlink = g.nvlink_count > 0;
    Profile {
        gr_engine_active: gr,
        sm_active: sm,
        sm_occupancy: OCCUPANCY * sm,
        tensor_active: if tensor_workload { 0.7 * sm } else { 0.0 },
        dram_active: ratio(r.readout.memory_utilization_ratio),
        fp64_active: 0.01 * sm,
        fp32_active: 0.25 * sm,
        fp16_active: if tensor_workload { 0.2 * sm } else { 0.0 },
        pcie_tx_bytes_per_second: r.readout.pcie_transmit_bytes_per_second.unwrap_or(0.0),
        pcie_rx_bytes_per_second: r.readout.pcie_receive_bytes_per_second.unwrap_or(0.0),
        nvlink_tx_bytes_per_second: nvlink.then_some(r.nvlink_tx_bytes_per_second),
        nvlink_rx_bytes_per_second: nvlink.then_some(r.nvlink_rx_bytes_per_second),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{GpuState, Node, Scenario};
    use std::time::Duration;

    fn node(name: &str) -> Node {
        Node::new(Scenario::builtin(name).unwrap())
    }

    #[test]
    fn profiling_is_coherent_with_utilization_over_a_whole_workload_cycle() {
        let mut n = node("dgx-h100");
        let g = n.gpu(0).unwrap().clone();
        let (mut tensor_seen, mut idle_tensor_seen) = (false, false);
        for s in (0..480).step_by(3) {
            let Some(GpuState::Ok(r)) = n.reading(0, Duration::from_secs(s)) else {
                panic!()
            };
            let p = profile(&g, &r);
            let utilization = r.readout.utilization_ratio.unwrap();
            assert_eq!(p.gr_engine_active, utilization);
            assert!(p.sm_active <= p.gr_engine_active, "{p:?}");
            assert!(p.sm_occupancy <= p.sm_active);
            assert!(p.tensor_active <= p.sm_active);
            for v in [
                p.gr_engine_active,
                p.sm_active,
                p.dram_active,
                p.fp32_active,
            ] {
                assert!((0.0..=1.0).contains(&v));
            }
            assert_eq!(
                p.nvlink_tx_bytes_per_second,
                Some(r.nvlink_tx_bytes_per_second)
            );
            if utilization < TENSOR_WORKLOAD_UTILIZATION {
                assert_eq!(p.tensor_active, 0.0, "tensor idle outside tensor work");
                idle_tensor_seen = true;
            } else {
                assert!(p.tensor_active > 0.0);
                tensor_seen = true;
            }
        }
        assert!(
            tensor_seen && idle_tensor_seen,
            "the cycle has both kinds of phase"
        );
    }

    #[test]
    fn an_idle_gpu_has_idle_sms() {
        // dgx-spark ends its cycle idle.
        let mut n = node("dgx-spark");
        let g = n.gpu(0).unwrap().clone();
        let idle = (0..1200)
            .filter_map(|s| n.reading(0, Duration::from_secs(s))?.ok().cloned())
            .find(|r| r.readout.utilization_ratio == Some(0.0))
            .expect("the spark scenario has an idle phase");
        let p = profile(&g, &idle);
        assert_eq!(
            (p.gr_engine_active, p.sm_active, p.tensor_active),
            (0.0, 0.0, 0.0)
        );
        assert_eq!(p.nvlink_tx_bytes_per_second, None, "GB10 has no NVLink");
    }

    #[test]
    fn a_mig_gpu_is_as_active_as_its_instances_weighted_by_slices() {
        let mut n = node("dgx-a100-mig");
        let g = n.gpu(1).unwrap().clone(); // 3g.40gb + 2x 2g.20gb: 7 slices
        let r = n
            .reading(1, Duration::from_secs(150))
            .unwrap()
            .ok()
            .cloned()
            .unwrap();
        let a: Vec<f64> = r
            .readout
            .mig
            .iter()
            .map(|m| m.graphics_engine_active_ratio.unwrap())
            .collect();
        let p = profile(&g, &r);
        let want = (3.0 * a[0] + 2.0 * a[1] + 2.0 * a[2]) / 7.0;
        assert!((p.gr_engine_active - want).abs() < 1e-12, "{p:?} {a:?}");
        let max = a.iter().copied().fold(0.0, f64::max);
        let min = a.iter().copied().fold(1.0, f64::min);
        assert!(p.gr_engine_active <= max && p.gr_engine_active >= min);
        assert!(p.sm_active < p.gr_engine_active);
        // GPU 0: seven 1g slices, the plain mean.
        let g0 = n.gpu(0).unwrap().clone();
        let r0 = n
            .reading(0, Duration::from_secs(150))
            .unwrap()
            .ok()
            .cloned()
            .unwrap();
        let mean = r0
            .readout
            .mig
            .iter()
            .map(|m| m.graphics_engine_active_ratio.unwrap())
            .sum::<f64>()
            / 7.0;
        assert!((profile(&g0, &r0).gr_engine_active - mean).abs() < 1e-12);
        assert_eq!(slices("3g.40gb"), 3.0);
        assert_eq!(slices("odd"), 1.0);
    }
}
