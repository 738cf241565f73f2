//! Calls and wall time per NVML function (issue 36), so a run on real hardware names the calls
//! that cost a poll its time instead of a model guessing them. Served at full detail as
//! `dgx_pixels_nvml_calls_total` and `dgx_pixels_nvml_call_seconds_total{function}`.
//!
//! Process-wide: NVML itself is, and a source started again after a reload keeps counting where
//! the last one stopped, as counters must. Cheap: an `Instant` pair and two relaxed atomic adds
//! per call, no allocation; the label set is this file's fixed list.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dgx_pixels_metrics::{Metric, Sample};

macro_rules! functions {
    ($($variant:ident => $name:literal,)*) => {
        /// An NVML function the source calls (an nvml-wrapper method that makes two library
        /// calls, a size query then the fill, counts once under its function).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum Function {
            $($variant,)*
        }

        impl Function {
            /// Every function, in the order of [`STATS`].
            pub const ALL: &'static [Function] = &[$(Function::$variant,)*];

            /// The `function` label: NVML's name of the function.
            pub fn name(self) -> &'static str {
                match self {
                    $(Function::$variant => $name,)*
                }
            }
        }
    };
}

functions! {
    HandleByIndex => "nvmlDeviceGetHandleByIndex_v2",
    // Identity and maxima, once per GPU.
    Uuid => "nvmlDeviceGetUUID",
    Name => "nvmlDeviceGetName",
    Serial => "nvmlDeviceGetSerial",
    PciInfo => "nvmlDeviceGetPciInfo_v3",
    VbiosVersion => "nvmlDeviceGetVbiosVersion",
    DriverVersion => "nvmlSystemGetDriverVersion",
    CudaDriverVersion => "nvmlSystemGetCudaDriverVersion_v2",
    MinorNumber => "nvmlDeviceGetMinorNumber",
    MaxClockInfo => "nvmlDeviceGetMaxClockInfo",
    NumFans => "nvmlDeviceGetNumFans",
    MaxPcieLinkGeneration => "nvmlDeviceGetMaxPcieLinkGeneration",
    MaxPcieLinkWidth => "nvmlDeviceGetMaxPcieLinkWidth",
    // Every poll.
    UtilizationRates => "nvmlDeviceGetUtilizationRates",
    MemoryInfo => "nvmlDeviceGetMemoryInfo_v2",
    Bar1MemoryInfo => "nvmlDeviceGetBAR1MemoryInfo",
    ThrottleReasons => "nvmlDeviceGetCurrentClocksThrottleReasons",
    FieldValuesPoll => "nvmlDeviceGetFieldValues(poll)",
    ClockInfo => "nvmlDeviceGetClockInfo",
    FanSpeed => "nvmlDeviceGetFanSpeed_v2",
    TotalEccErrors => "nvmlDeviceGetTotalEccErrors",
    EncoderUtilization => "nvmlDeviceGetEncoderUtilization",
    DecoderUtilization => "nvmlDeviceGetDecoderUtilization",
    PowerUsage => "nvmlDeviceGetPowerUsage",
    EnforcedPowerLimit => "nvmlDeviceGetEnforcedPowerLimit",
    Temperature => "nvmlDeviceGetTemperature",
    PerformanceState => "nvmlDeviceGetPerformanceState",
    CurrPcieLinkGeneration => "nvmlDeviceGetCurrPcieLinkGeneration",
    CurrPcieLinkWidth => "nvmlDeviceGetCurrPcieLinkWidth",
    ComputeRunningProcesses => "nvmlDeviceGetComputeRunningProcesses_v3",
    MpsComputeRunningProcesses => "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    ProcessUtilization => "nvmlDeviceGetProcessUtilization",
    MigDeviceHandleByIndex => "nvmlDeviceGetMigDeviceHandleByIndex",
    // Every slow_interval.
    FieldValuesSlow => "nvmlDeviceGetFieldValues(slow)",
    // The NVLink 5 error counters of the whole GPU (aggregate scope; Blackwell, a refusal
    // asked again after a growing pause, see nvlink5.rs).
    FieldValuesNvlink => "nvmlDeviceGetFieldValues(nvlink)",
    // The same counters per link, where the driver answers them.
    FieldValuesNvlinkPerLink => "nvmlDeviceGetFieldValues(nvlink per link)",
    PcieThroughput => "nvmlDeviceGetPcieThroughput",
    NvLinkState => "nvmlDeviceGetNvLinkState",
    NvLinkErrorCounter => "nvmlDeviceGetNvLinkErrorCounter",
    ViolationStatus => "nvmlDeviceGetViolationStatus",
    EccMode => "nvmlDeviceGetEccMode",
    RetiredPages => "nvmlDeviceGetRetiredPages_v2",
    RetiredPagesPendingStatus => "nvmlDeviceGetRetiredPagesPendingStatus",
    MigMode => "nvmlDeviceGetMigMode",
    MaxMigDeviceCount => "nvmlDeviceGetMaxMigDeviceCount",
    GpuInstanceId => "nvmlDeviceGetGpuInstanceId",
    GpuFabricInfo => "nvmlDeviceGetGpuFabricInfoV",
    PlatformInfo => "nvmlDeviceGetPlatformInfo",
    ComputeInstanceId => "nvmlDeviceGetComputeInstanceId",
    // GPM, on its own thread every poll.
    GpmQueryDeviceSupport => "nvmlGpmQueryDeviceSupport",
    GpmSampleGet => "nvmlGpmSampleGet",
    GpmMigSampleGet => "nvmlGpmMigSampleGet",
    GpmMetricsGet => "nvmlGpmMetricsGet",
    GpmSampleFree => "nvmlGpmSampleFree",
    // Fast power sampling, on its own thread per GPU.
    FieldValuesPower => "nvmlDeviceGetFieldValues(power instant)",
}

struct Stat {
    calls: AtomicU64,
    nanos: AtomicU64,
}

// A const item, so the array below can repeat it.
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: Stat = Stat {
    calls: AtomicU64::new(0),
    nanos: AtomicU64::new(0),
};

static STATS: [Stat; Function::ALL.len()] = [ZERO; Function::ALL.len()];

/// Runs `call`, counting it and its wall time under `f`.
pub fn timed<T>(f: Function, call: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = call();
    let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let s = &STATS[f as usize];
    s.calls.fetch_add(1, Ordering::Relaxed);
    s.nanos.fetch_add(nanos, Ordering::Relaxed);
    out
}

/// Calls and wall time of one function so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallStat {
    /// NVML's name of the function (the `function` label).
    pub function: &'static str,
    /// Calls made.
    pub calls: u64,
    /// Wall time spent in them.
    pub time: Duration,
}

/// Every function called at least once since the process started, in [`Function::ALL`]'s
/// order.
pub fn call_stats() -> Vec<CallStat> {
    Function::ALL
        .iter()
        .zip(&STATS)
        .filter_map(|(f, s)| {
            let calls = s.calls.load(Ordering::Relaxed);
            (calls > 0).then(|| CallStat {
                function: f.name(),
                calls,
                time: Duration::from_nanos(s.nanos.load(Ordering::Relaxed)),
            })
        })
        .collect()
}

/// The two counters of every function called so far.
pub(crate) fn push_samples(out: &mut Vec<Sample>) {
    for s in call_stats() {
        out.push(Sample::new(Metric::NvmlCalls, [s.function], s.calls as f64));
        out.push(Sample::new(
            Metric::NvmlCallSeconds,
            [s.function],
            s.time.as_secs_f64(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_nvml_functions_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for f in Function::ALL {
            assert!(f.name().starts_with("nvml"), "{f:?}");
            assert!(seen.insert(f.name()), "{} twice", f.name());
            assert_eq!(Function::ALL[*f as usize], *f);
        }
    }

    #[test]
    fn a_timed_call_counts_once_with_its_wall_time() {
        // A function no other unit test of this crate calls.
        let f = Function::GpmSampleFree;
        let before = call_stats()
            .into_iter()
            .find(|s| s.function == f.name())
            .map_or((0, Duration::ZERO), |s| (s.calls, s.time));
        let v = timed(f, || {
            std::thread::sleep(Duration::from_millis(20));
            7
        });
        assert_eq!(v, 7);
        let after = call_stats()
            .into_iter()
            .find(|s| s.function == f.name())
            .unwrap();
        assert_eq!(after.calls, before.0 + 1);
        assert!(
            after.time - before.1 >= Duration::from_millis(20),
            "{after:?}"
        );
        let mut out = Vec::new();
        push_samples(&mut out);
        let served: Vec<&Sample> = out
            .iter()
            .filter(|s| s.label("function") == Some(f.name()))
            .collect();
        assert_eq!(served.len(), 2);
        assert_eq!(served[0].metric, Metric::NvmlCalls);
        assert_eq!(served[1].metric, Metric::NvmlCallSeconds);
    }
}
