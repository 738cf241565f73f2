//! The readings every poll asks with a getter call of their own, as rows: a new one is a row
//! here, not a branch in `read_fast`.

use super::*;

/// A reading the GPU answers with one getter call of its own: a new reading is a row in
/// [`BEFORE_FIELDS`], [`CLOCKS`] or [`GETTERS`], not a branch. [`read_rows`] applies the policy
/// once for all: an answer goes into the readout, "not supported" leaves its fields out (logged
/// once), GPU_IS_LOST and UNINITIALIZED mark the poll.
pub(super) struct Reading {
    /// The NVML function, for the call timings (`calls.rs`).
    function: F,
    /// The reading's name in the log and in the set of unanswered readings.
    name: &'static str,
    /// Calls the getter and writes its answer into the readout.
    read: fn(&Device<'_>, &mut GpuReadout) -> Result<(), NvmlError>,
}

/// Asked first, before the field-values batch (the order of the calls is kept as it was).
pub(super) const BEFORE_FIELDS: &[Reading] = &[
    Reading {
        function: F::UtilizationRates,
        name: "utilization",
        read: |d, r| {
            let u = d.utilization_rates()?;
            r.utilization_ratio = Some(f64::from(u.gpu) / 100.0);
            r.memory_utilization_ratio = Some(f64::from(u.memory) / 100.0);
            Ok(())
        },
    },
    Reading {
        function: F::MemoryInfo,
        name: "memory_info",
        read: |d, r| {
            let m = d.memory_info()?;
            r.memory_used_bytes = Some(m.used as f64);
            r.memory_free_bytes = Some(m.free as f64);
            r.memory_reserved_bytes = Some(m.reserved as f64);
            r.memory_total_bytes = Some(m.total as f64);
            Ok(())
        },
    },
    Reading {
        function: F::Bar1MemoryInfo,
        name: "bar1_memory_info",
        read: |d, r| {
            let b = d.bar1_memory_info()?;
            r.bar1_used_bytes = Some(b.used as f64);
            r.bar1_total_bytes = Some(b.total as f64);
            Ok(())
        },
    },
    Reading {
        function: F::ThrottleReasons,
        name: "throttle_reasons",
        read: |d, r| {
            let t = d.current_throttle_reasons()?;
            r.throttle_reasons = THROTTLE_REASONS
                .iter()
                .map(|(bit, name)| (*name, t.contains(*bit)))
                .collect();
            Ok(())
        },
    },
];

/// The current clocks, after the field-values batch.
pub(super) const CLOCKS: &[Reading] = &[
    Reading {
        function: F::ClockInfo,
        name: "clock_graphics",
        read: |d, r| set(&mut r.clocks.graphics, mhz(d.clock_info(Clock::Graphics)?)),
    },
    Reading {
        function: F::ClockInfo,
        name: "clock_sm",
        read: |d, r| set(&mut r.clocks.sm, mhz(d.clock_info(Clock::SM)?)),
    },
    Reading {
        function: F::ClockInfo,
        name: "clock_memory",
        read: |d, r| set(&mut r.clocks.memory, mhz(d.clock_info(Clock::Memory)?)),
    },
    Reading {
        function: F::ClockInfo,
        name: "clock_video",
        read: |d, r| set(&mut r.clocks.video, mhz(d.clock_info(Clock::Video)?)),
    },
];

/// The other getters, last.
pub(super) const GETTERS: &[Reading] = &[
    Reading {
        function: F::EncoderUtilization,
        name: "encoder_utilization",
        read: |d, r| {
            let u = d.encoder_utilization()?;
            set(
                &mut r.encoder_utilization_ratio,
                f64::from(u.utilization) / 100.0,
            )
        },
    },
    Reading {
        function: F::DecoderUtilization,
        name: "decoder_utilization",
        read: |d, r| {
            let u = d.decoder_utilization()?;
            set(
                &mut r.decoder_utilization_ratio,
                f64::from(u.utilization) / 100.0,
            )
        },
    },
    Reading {
        function: F::PowerUsage,
        name: "power_usage",
        read: |d, r| set(&mut r.power_watts, f64::from(d.power_usage()?) / 1e3),
    },
    Reading {
        function: F::EnforcedPowerLimit,
        name: "enforced_power_limit",
        read: |d, r| {
            set(
                &mut r.power_limit_watts,
                f64::from(d.enforced_power_limit()?) / 1e3,
            )
        },
    },
    Reading {
        function: F::Temperature,
        name: "temperature",
        read: |d, r| {
            let t = d.temperature(TemperatureSensor::Gpu)?;
            set(&mut r.temperature_gpu_celsius, f64::from(t))
        },
    },
    Reading {
        function: F::PerformanceState,
        name: "performance_state",
        read: |d, r| {
            // P0 to P15; anything else ("unknown") is left out.
            r.performance_state = Some(d.performance_state()?.as_c()).filter(|p| *p <= 15);
            Ok(())
        },
    },
    Reading {
        function: F::CurrPcieLinkGeneration,
        name: "pcie_link_generation",
        read: |d, r| {
            set(
                &mut r.pcie_link_generation,
                f64::from(d.current_pcie_link_gen()?),
            )
        },
    },
    Reading {
        function: F::CurrPcieLinkWidth,
        name: "pcie_link_width",
        read: |d, r| {
            set(
                &mut r.pcie_link_width,
                f64::from(d.current_pcie_link_width()?),
            )
        },
    },
];

/// Sets a reading's field to the getter's answer.
fn set<T>(field: &mut Option<T>, v: T) -> Result<(), NvmlError> {
    *field = Some(v);
    Ok(())
}

/// Asks each row's getter, in order, through `check`'s policy.
pub(super) fn read_rows(
    dev: &Device<'_>,
    check: &mut Check<'_>,
    rows: &[Reading],
    out: &mut GpuReadout,
) {
    for row in rows {
        check.call(row.function, row.name, || (row.read)(dev, out));
    }
}
