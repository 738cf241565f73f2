//! What each DCGM field answers for a simulated GPU, in DCGM's own units (percent, MiB, MHz,
//! millijoules, nanoseconds), and the profiling model derived from the simulator's readings.

use dgx_pixels_sim::{GpuReading, GpuStatic};

/// A field's value as DCGM returns it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `DCGM_FT_INT64`.
    Int(i64),
    /// `DCGM_FT_DOUBLE`.
    Double(f64),
    /// `DCGM_FT_STRING`.
    Str(String),
    /// Not supported on this GPU: the type's blank sentinel (+2, NOT_SUPPORTED).
    Blank(u8),
}

/// Field ids the fake knows (see docs/dcgm-fields.md for their meaning), as [`crate::abi`]
/// states them.
pub use crate::abi::field as id;

/// Whether `field` is a profiling (DCP) field, which needs the profiling module.
pub fn is_profiling(field: u16) -> bool {
    (1001..=1012).contains(&field)
}

/// The profiling metric groups the fake reports: `(major, minor, fields)`.
pub const PROFILING_GROUPS: &[(u16, u16, &[u16])] = &[
    (1, 0, &[1001, 1002, 1003]),
    (1, 1, &[1004, 1006, 1007, 1008]),
    (1, 2, &[1005]),
    (2, 0, &[1009, 1010]),
    (3, 0, &[1011, 1012]),
];

/// Profiling readings of one GPU, ratios in 0..1 and bytes per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// Graphics or compute engine active.
    pub gr_engine_active: f64,
    /// At least one warp resident on an SM, averaged over SMs.
    pub sm_active: f64,
    /// Resident warps relative to the maximum.
    pub sm_occupancy: f64,
    /// Tensor pipe active.
    pub tensor_active: f64,
    /// Device memory interface active.
    pub dram_active: f64,
    /// FP64 pipe active.
    pub fp64_active: f64,
    /// FP32 pipe active.
    pub fp32_active: f64,
    /// FP16 pipe active.
    pub fp16_active: f64,
    /// PCIe transmit rate.
    pub pcie_tx_bytes_per_second: f64,
    /// PCIe receive rate.
    pub pcie_rx_bytes_per_second: f64,
}

/// Utilization above which the simulated workload counts as tensor work (training phases);
/// below it (data loading, evaluation dips, idle) the tensor pipes are idle.
pub const TENSOR_WORKLOAD_UTILIZATION: f64 = 0.6;

/// The fake's profiling model: coherent with utilization by construction. SM activity is a
/// fixed share of engine activity (never above it), occupancy a share of SM activity, and the
/// tensor and FP16 pipes are busy only under a tensor workload.
pub fn profile(r: &GpuReading) -> Profile {
    let gr = r.utilization_ratio.clamp(0.0, 1.0);
    let sm = 0.92 * gr;
    let tensor_workload = gr >= TENSOR_WORKLOAD_UTILIZATION;
    Profile {
        gr_engine_active: gr,
        sm_active: sm,
        sm_occupancy: 0.55 * sm,
        tensor_active: if tensor_workload { 0.7 * sm } else { 0.0 },
        dram_active: r.memory_utilization_ratio.clamp(0.0, 1.0),
        fp64_active: 0.01 * sm,
        fp32_active: 0.25 * sm,
        fp16_active: if tensor_workload { 0.2 * sm } else { 0.0 },
        pcie_tx_bytes_per_second: r.pcie_tx_bytes_per_second,
        pcie_rx_bytes_per_second: r.pcie_rx_bytes_per_second,
    }
}

const MIB: f64 = 1024.0 * 1024.0;

fn mib(v: Option<u64>) -> Value {
    v.map_or(Value::Blank(b'i'), |b| {
        Value::Int((b as f64 / MIB).round() as i64)
    })
}

fn pct(ratio: f64) -> Value {
    Value::Int((ratio * 100.0).round() as i64)
}

/// The value of `field` for a GPU: `reading` is `None` when it is lost (every reading blank);
/// `nvlink_rate` is `(tx, rx)` bytes per second over the last second.
pub fn value(
    field: u16,
    g: &GpuStatic,
    driver_version: &str,
    reading: Option<&GpuReading>,
    nvlink_rate: (f64, f64),
) -> Value {
    match field {
        id::DRIVER_VERSION => return Value::Str(driver_version.to_string()),
        id::NAME => return Value::Str(g.name.clone()),
        id::UUID => return Value::Str(g.uuid.clone()),
        id::PCI_BUSID => return Value::Str(g.pci_bus_id.clone()),
        _ => {}
    }
    let blank = if is_profiling(field) || matches!(field, id::POWER_USAGE | id::POWER_USAGE_INSTANT)
    {
        Value::Blank(b'd')
    } else {
        Value::Blank(b'i')
    };
    let Some(r) = reading else { return blank };
    let p = profile(r);
    match field {
        id::SM_CLOCK => Value::Int((r.clocks.sm_hz / 1e6).round() as i64),
        id::MEM_CLOCK => Value::Int((r.clocks.memory_hz / 1e6).round() as i64),
        id::MEMORY_TEMP => r
            .temperature_memory_celsius
            .map_or(blank, |t| Value::Int(t.round() as i64)),
        id::GPU_TEMP => Value::Int(r.temperature_gpu_celsius.round() as i64),
        id::POWER_USAGE | id::POWER_USAGE_INSTANT => Value::Double(r.power_watts),
        id::TOTAL_ENERGY => Value::Int((r.energy_joules * 1000.0).round() as i64),
        id::PSTATE => Value::Int(i64::from(r.pstate)),
        id::FAN_SPEED => r.fan_speed_ratio.map_or(blank, pct),
        id::GPU_UTIL => pct(r.utilization_ratio),
        id::MEM_COPY_UTIL => pct(r.memory_utilization_ratio),
        id::ENC_UTIL => pct(r.encoder_utilization_ratio),
        id::DEC_UTIL => pct(r.decoder_utilization_ratio),
        id::POWER_VIOLATION => Value::Int((r.violation_power_seconds * 1e9).round() as i64),
        id::THERMAL_VIOLATION => Value::Int((r.violation_thermal_seconds * 1e9).round() as i64),
        id::FB_TOTAL => mib(g.memory_total_bytes),
        id::FB_FREE => mib(r.memory_free_bytes),
        id::FB_USED => mib(r.memory_used_bytes),
        id::FB_RESERVED => mib(r.memory_reserved_bytes),
        id::ECC_SBE_VOL => Value::Int(r.ecc.volatile_corrected as i64),
        id::ECC_DBE_VOL => Value::Int(r.ecc.volatile_uncorrected as i64),
        id::ECC_SBE_AGG => Value::Int(r.ecc.aggregate_corrected as i64),
        id::ECC_DBE_AGG => Value::Int(r.ecc.aggregate_uncorrected as i64),
        id::ROW_REMAP_UNCORRECTABLE => Value::Int(r.remapped_rows.uncorrectable as i64),
        id::ROW_REMAP_CORRECTABLE => Value::Int(r.remapped_rows.correctable as i64),
        id::ROW_REMAP_FAILURE => Value::Int(i64::from(r.remapped_rows.failure)),
        id::ROW_REMAP_PENDING => Value::Int(i64::from(r.remapped_rows.pending)),
        id::PROF_GR_ENGINE_ACTIVE => Value::Double(p.gr_engine_active),
        id::PROF_SM_ACTIVE => Value::Double(p.sm_active),
        id::PROF_SM_OCCUPANCY => Value::Double(p.sm_occupancy),
        id::PROF_PIPE_TENSOR_ACTIVE => Value::Double(p.tensor_active),
        id::PROF_DRAM_ACTIVE => Value::Double(p.dram_active),
        id::PROF_PIPE_FP64_ACTIVE => Value::Double(p.fp64_active),
        id::PROF_PIPE_FP32_ACTIVE => Value::Double(p.fp32_active),
        id::PROF_PIPE_FP16_ACTIVE => Value::Double(p.fp16_active),
        id::PROF_PCIE_TX_BYTES => Value::Double(p.pcie_tx_bytes_per_second),
        id::PROF_PCIE_RX_BYTES => Value::Double(p.pcie_rx_bytes_per_second),
        id::PROF_NVLINK_TX_BYTES if g.nvlink_count > 0 => Value::Double(nvlink_rate.0),
        id::PROF_NVLINK_RX_BYTES if g.nvlink_count > 0 => Value::Double(nvlink_rate.1),
        _ => blank,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dgx_pixels_sim::{GpuState, Node, Scenario};
    use std::time::Duration;

    #[test]
    fn profiling_is_coherent_with_utilization_over_a_whole_workload_cycle() {
        let mut node = Node::new(Scenario::builtin("dgx-h100").unwrap());
        let (mut tensor_seen, mut idle_tensor_seen) = (false, false);
        for s in (0..480).step_by(3) {
            let Some(GpuState::Ok(r)) = node.reading(0, Duration::from_secs(s)) else {
                panic!()
            };
            let p = profile(&r);
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
            if r.utilization_ratio < TENSOR_WORKLOAD_UTILIZATION {
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
}
