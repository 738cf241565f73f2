//! What each DCGM field answers for a simulated GPU, in DCGM's own units (percent, MiB, MHz,
//! millijoules, nanoseconds). Profiling fields answer the simulator's profiling model
//! ([`dgx_pixels_sim::profile`]), the same values the exporter's simulated node serves.

use dgx_pixels_sim::labels::{
    ClockDomain, EccCounter, EccErrorType, RemappedRowCause, TemperatureSensor, ViolationPolicy,
};
use dgx_pixels_sim::{profile, GpuReading, GpuStatic};

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

const MIB: f64 = 1024.0 * 1024.0;

fn mib(v: Option<f64>) -> Value {
    v.map_or(Value::Blank(b'i'), |b| Value::Int((b / MIB).round() as i64))
}

/// The value of `field` for a GPU: `reading` is `None` when it is lost (every reading blank).
pub fn value(
    field: u16,
    g: &GpuStatic,
    driver_version: &str,
    reading: Option<&GpuReading>,
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
    let Some(reading) = reading else {
        return blank;
    };
    let p = profile(g, reading);
    let r = &reading.readout;
    // DCGM's integer fields; a reading the GPU lacks is blank.
    let int = |v: Option<f64>, scale: f64| {
        v.map_or(blank.clone(), |v| Value::Int((v * scale).round() as i64))
    };
    let pct = |v: Option<f64>| int(v, 100.0);
    let ecc = |t, c| int(r.ecc.map(|e| e.get(t, c)), 1.0);
    let rows = |cause| int(r.remapped_rows.map(|rr| rr.get(cause)), 1.0);
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    match field {
        id::SM_CLOCK => int(r.clocks.get(ClockDomain::Sm).map(|hz| hz / 1e6), 1.0),
        id::MEM_CLOCK => int(r.clocks.get(ClockDomain::Memory).map(|hz| hz / 1e6), 1.0),
        id::MEMORY_TEMP => int(r.temperature(TemperatureSensor::Memory), 1.0),
        id::GPU_TEMP => int(r.temperature(TemperatureSensor::Gpu), 1.0),
        // The driver's 1 s average, and the model's instantaneous power.
        id::POWER_USAGE => r.power_watts.map_or(blank, Value::Double),
        id::POWER_USAGE_INSTANT => Value::Double(reading.power_instant_watts),
        id::TOTAL_ENERGY => int(r.energy_joules, 1000.0),
        id::PSTATE => int(r.performance_state.map(f64::from), 1.0),
        id::FAN_SPEED => pct(r.fan_speed_ratios.first().copied()),
        id::GPU_UTIL => pct(r.utilization_ratio),
        id::MEM_COPY_UTIL => pct(r.memory_utilization_ratio),
        id::ENC_UTIL => pct(r.encoder_utilization_ratio),
        id::DEC_UTIL => pct(r.decoder_utilization_ratio),
        id::POWER_VIOLATION => int(r.violation_seconds(ViolationPolicy::Power), 1e9),
        id::THERMAL_VIOLATION => int(r.violation_seconds(ViolationPolicy::Thermal), 1e9),
        id::FB_TOTAL => mib(r.memory_total_bytes),
        id::FB_FREE => mib(r.memory_free_bytes),
        id::FB_USED => mib(r.memory_used_bytes),
        id::FB_RESERVED => mib(r.memory_reserved_bytes),
        id::ECC_SBE_VOL => ecc(EccErrorType::Corrected, EccCounter::Volatile),
        id::ECC_DBE_VOL => ecc(EccErrorType::Uncorrected, EccCounter::Volatile),
        id::ECC_SBE_AGG => ecc(EccErrorType::Corrected, EccCounter::Aggregate),
        id::ECC_DBE_AGG => ecc(EccErrorType::Uncorrected, EccCounter::Aggregate),
        id::ROW_REMAP_UNCORRECTABLE => rows(RemappedRowCause::Uncorrectable),
        id::ROW_REMAP_CORRECTABLE => rows(RemappedRowCause::Correctable),
        id::ROW_REMAP_FAILURE => int(r.remapped_rows.map(|rr| flag(rr.failure)), 1.0),
        id::ROW_REMAP_PENDING => int(r.remapped_rows.map(|rr| flag(rr.pending)), 1.0),
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
        id::PROF_NVLINK_TX_BYTES => p.nvlink_tx_bytes_per_second.map_or(blank, Value::Double),
        id::PROF_NVLINK_RX_BYTES => p.nvlink_rx_bytes_per_second.map_or(blank, Value::Double),
        _ => blank,
    }
}
