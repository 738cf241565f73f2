//! What each DCGM field answers for a simulated GPU, in DCGM's own units (percent, MiB, MHz,
//! millijoules, nanoseconds; bytes, hertz, joules and a ratio for the base-unit fields
//! 1600-1612 of DCGM 4.6.1). Profiling fields answer the simulator's profiling model
//! ([`dgx_pixels_sim::profile`]), the same values the exporter's simulated node serves.
//!
//! The value types of the base-unit fields are in no NVIDIA source we could read (DCGM 4.6.0's
//! `dcgm_fields.cpp` predates them): the fake answers INT64 for 1600-1611 and DOUBLE for the
//! fan speed ratio (its header text says "0.0-1.0+"), as a third-party description of DCGM 4.7
//! gives them. The exporter reads either type.

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
    let blank = if is_profiling(field)
        || matches!(
            field,
            id::POWER_USAGE | id::POWER_USAGE_INSTANT | id::FAN_SPEED_RATIO
        ) {
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
    if let Some(v) = base_unit(field, reading) {
        return v.unwrap_or(blank);
    }
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

/// A base-unit field's value (`Some(None)`: the GPU lacks the reading), in bytes, hertz,
/// joules or a ratio: the same simulator reading as its legacy field, without the legacy
/// unit's rounding (MiB, MHz, mJ, percent). `None` for other fields.
fn base_unit(field: u16, reading: &GpuReading) -> Option<Option<Value>> {
    let r = &reading.readout;
    let int = |v: Option<f64>| v.map(|v| Value::Int(v.round() as i64));
    Some(match field {
        id::BAR1_CAPACITY_BYTES => int(r.bar1_total_bytes),
        id::BAR1_USED_BYTES => int(r.bar1_used_bytes),
        // The simulator models the BAR1 size and its use; free is the rest.
        id::BAR1_FREE_BYTES => int(r
            .bar1_total_bytes
            .zip(r.bar1_used_bytes)
            .map(|(t, u)| t - u)),
        id::SM_CLOCK_HERTZ => int(r.clocks.get(ClockDomain::Sm)),
        id::MEMORY_CLOCK_HERTZ => int(r.clocks.get(ClockDomain::Memory)),
        id::VIDEO_CLOCK_HERTZ => int(r.clocks.get(ClockDomain::Video)),
        id::SM_MAX_CLOCK_HERTZ => int(r.max_clocks.get(ClockDomain::Sm)),
        id::MEMORY_MAX_CLOCK_HERTZ => int(r.max_clocks.get(ClockDomain::Memory)),
        id::VIDEO_MAX_CLOCK_HERTZ => int(r.max_clocks.get(ClockDomain::Video)),
        id::GPU_ENERGY_JOULES_TOTAL => int(r.energy_joules),
        id::FAN_SPEED_RATIO => r.fan_speed_ratios.first().copied().map(Value::Double),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dgx_pixels_sim::{GpuState, Node, Scenario};
    use std::time::Duration;

    fn number(v: &Value) -> Option<f64> {
        match v {
            Value::Int(i) => Some(*i as f64),
            Value::Double(d) => Some(*d),
            Value::Str(_) | Value::Blank(_) => None,
        }
    }

    /// Each base-unit field answers what its legacy field answers, converted by the legacy
    /// unit (MHz, mJ, percent), to within the legacy unit's rounding; both blank together. The
    /// BAR1 fields, whose legacy fields the fake does not serve, answer the simulator's reading
    /// in bytes, and free is the size less the use.
    #[test]
    fn base_unit_fields_agree_with_their_legacy_fields() {
        // (base-unit field, legacy field, legacy unit in base units, tolerance: half a legacy
        // unit of rounding, plus half a base unit where the base-unit answer is an integer).
        let pairs: [(u16, u16, f64, f64); 4] = [
            (id::SM_CLOCK_HERTZ, id::SM_CLOCK, 1e6, 0.5e6 + 0.5),
            (id::MEMORY_CLOCK_HERTZ, id::MEM_CLOCK, 1e6, 0.5e6 + 0.5),
            (
                id::GPU_ENERGY_JOULES_TOTAL,
                id::TOTAL_ENERGY,
                1e-3,
                0.5e-3 + 0.5,
            ),
            (id::FAN_SPEED_RATIO, id::FAN_SPEED, 1e-2, 0.5e-2),
        ];
        let (mut compared, mut fans, mut bar1) = (0, 0, 0);
        // No built-in scenario has a fan: one H100 with a fan too.
        let h100 = Scenario::builtin_text("dgx-h100").unwrap();
        let with_fan = h100.replacen("fan = false", "fan = true", 1);
        assert_ne!(with_fan, h100);
        for scenario in ["dgx-h100", "dgx-b200", "dgx-spark", "h100-with-fan"] {
            let s = match scenario {
                "h100-with-fan" => Scenario::from_toml_str(&with_fan, scenario).unwrap(),
                name => Scenario::builtin(name).unwrap(),
            };
            let mut node = Node::new(s);
            let g = node.gpu(0).unwrap().clone();
            let Some(GpuState::Ok(r)) = node.reading(0, Duration::from_secs(60)) else {
                panic!("{scenario}: GPU 0 not ok")
            };
            for (new, old, unit, tolerance) in pairs {
                let (n, o) = (value(new, &g, "d", Some(&r)), value(old, &g, "d", Some(&r)));
                match (number(&n), number(&o)) {
                    (Some(n), Some(o)) => {
                        assert!(
                            (n - o * unit).abs() <= tolerance,
                            "{scenario} {new}: {n} vs {o}"
                        );
                        compared += 1;
                        fans += usize::from(new == id::FAN_SPEED_RATIO);
                    }
                    (None, None) => {}
                    other => panic!("{scenario} {new}/{old}: {other:?}"),
                }
            }
            let total = number(&value(id::BAR1_CAPACITY_BYTES, &g, "d", Some(&r)));
            let used = number(&value(id::BAR1_USED_BYTES, &g, "d", Some(&r)));
            let free = number(&value(id::BAR1_FREE_BYTES, &g, "d", Some(&r)));
            assert_eq!(total, r.readout.bar1_total_bytes, "{scenario}");
            assert_eq!(used, r.readout.bar1_used_bytes, "{scenario}");
            if let (Some(t), Some(u)) = (total, used) {
                assert_eq!(free, Some(t - u), "{scenario}");
                bar1 += 1;
            }
            for (field, domain) in [
                (id::VIDEO_CLOCK_HERTZ, ClockDomain::Video),
                (id::SM_MAX_CLOCK_HERTZ, ClockDomain::Sm),
            ] {
                let clocks = if field == id::VIDEO_CLOCK_HERTZ {
                    &r.readout.clocks
                } else {
                    &r.readout.max_clocks
                };
                let want = clocks.get(domain).map(f64::round);
                assert_eq!(
                    number(&value(field, &g, "d", Some(&r))),
                    want,
                    "{scenario} {field}"
                );
            }
        }
        assert_eq!((compared, fans), (13, 1));
        assert!(bar1 >= 1);
        // A lost GPU: every base-unit field blank, the ratio with DOUBLE's sentinel.
        let g = Node::new(Scenario::builtin("dgx-h100").unwrap())
            .gpu(0)
            .unwrap()
            .clone();
        assert_eq!(
            value(id::FAN_SPEED_RATIO, &g, "d", None),
            Value::Blank(b'd')
        );
        assert_eq!(value(id::SM_CLOCK_HERTZ, &g, "d", None), Value::Blank(b'i'));
    }
}
