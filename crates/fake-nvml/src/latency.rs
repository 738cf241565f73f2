//! Per-function call latency (`FAKE_NVML_LATENCY`), so that benchmarks and tests see what a
//! poll costs on a real driver, where every call is a round trip into the kernel module, and
//! not the microseconds the fake answers in.
//!
//! The delay is a sleep taken before the call's body and outside the driver lock, so calls of
//! different threads (different GPUs) overlap as they do on a real driver; it is not CPU time
//! (`fake_nvml_busy_ns` leaves it out). `nvmlDeviceGetPcieThroughput`'s own sampling time is
//! `FAKE_NVML_PCIE_DELAY_MS`, on top.
//!
//! [`MODEL`] holds the defaults, measured on one H200 (driver 580.159.04, 2026-11-26,
//! `scripts/gpu-nvml-latency.py`, medians of 200 calls; docs/validation.md): most getters answer
//! in 1-2 µs (the driver keeps their values), a handful ask the GPU and take 0.2-3 ms. Where a
//! function was not measured (GPM, MIG handles, init) the figure is a guess, marked so.

use std::sync::{PoisonError, RwLock};
use std::time::Duration;

/// The model's latency per function, in microseconds; [`MODEL_OTHER_US`] for the others.
pub const MODEL: &[(&str, u64)] = &[
    // Measured: the calls that ask the GPU.
    ("nvmlDeviceGetTotalEnergyConsumption", 2_500),
    // The source's batch includes the total energy (field 83), which costs what the getter
    // does; a batch without it measured 1 µs.
    ("nvmlDeviceGetFieldValues", 2_500),
    ("nvmlDeviceGetViolationStatus", 575),
    ("nvmlDeviceGetPcieReplayCounter", 220),
    ("nvmlDeviceGetEccMode", 215),
    ("nvmlDeviceGetBAR1MemoryInfo", 215),
    ("nvmlDeviceGetMigMode", 210),
    ("nvmlDeviceGetCurrPcieLinkWidth", 30),
    ("nvmlDeviceGetComputeRunningProcesses_v2", 9),
    ("nvmlDeviceGetComputeRunningProcesses_v3", 9),
    ("nvmlDeviceGetGraphicsRunningProcesses_v2", 9),
    ("nvmlDeviceGetGraphicsRunningProcesses_v3", 9),
    ("nvmlDeviceGetNvLinkState", 8),
    ("nvmlDeviceGetNvLinkErrorCounter", 9),
    ("nvmlDeviceGetComputeMode", 5),
    ("nvmlDeviceGetRemappedRows", 2),
    // Guesses (not measured): GPM samples read counters from the GPU; init attaches to every
    // GPU; the event wait blocks for its own timeout.
    ("nvmlGpmSampleGet", 300),
    ("nvmlGpmMetricsGet", 20),
    ("nvmlInit_v2", 50_000),
    ("nvmlInitWithFlags", 50_000),
    ("nvmlEventSetWait", 0),
    ("nvmlEventSetWait_v2", 0),
    ("nvmlErrorString", 0),
];

/// The model's latency of a function [`MODEL`] does not list: measured 1.0-2.1 µs for every
/// other getter the source calls (utilization, memory, power, temperature, clocks, P-state,
/// throttle reasons, ECC totals, encoder/decoder, PCIe generation, identity, handles).
pub const MODEL_OTHER_US: u64 = 2;

/// Latency per function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latency {
    /// Functions not listed in `by_name`.
    other: Duration,
    by_name: Vec<(String, Duration)>,
}

impl Latency {
    /// No delay at all (the default: tests run at the fake's own speed).
    pub fn none() -> Latency {
        Latency::default()
    }

    /// The model's defaults.
    pub fn model() -> Latency {
        Latency {
            other: Duration::from_micros(MODEL_OTHER_US),
            by_name: MODEL
                .iter()
                .map(|(n, us)| (n.to_string(), Duration::from_micros(*us)))
                .collect(),
        }
    }

    /// Parses `FAKE_NVML_LATENCY`: `off` (or empty), `model`, or a comma-separated list of
    /// `FUNCTION=MICROSECONDS`, where `*=MICROSECONDS` is every unlisted function and a
    /// `model` item starts from the model (`model,nvmlDeviceGetPowerUsage=500`). A function
    /// listed twice takes the later value. Bounded: at most 256 items, each at most 1 s.
    pub fn parse(text: &str) -> Result<Latency, &'static str> {
        let text = text.trim();
        if text.is_empty() || text == "off" || text == "0" {
            return Ok(Latency::none());
        }
        let mut l = Latency::none();
        for (n, item) in text.split(',').map(str::trim).enumerate() {
            if n >= 256 {
                return Err("at most 256 items");
            }
            if item == "model" {
                l = Latency::model();
                continue;
            }
            let (name, us) = item
                .split_once('=')
                .ok_or("expected off, model or FUNCTION=MICROSECONDS,...")?;
            let us: u64 = us
                .trim()
                .parse()
                .map_err(|_| "expected whole microseconds after =")?;
            if us > 1_000_000 {
                return Err("at most 1000000 microseconds per call");
            }
            let (name, d) = (name.trim(), Duration::from_micros(us));
            if name == "*" {
                l.other = d;
            } else if !name.starts_with("nvml") {
                return Err("a function name starts with nvml");
            } else {
                l.by_name.retain(|(n, _)| n != name);
                l.by_name.push((name.to_string(), d));
            }
        }
        Ok(l)
    }

    /// The delay of function `name`.
    pub fn of(&self, name: &str) -> Duration {
        self.by_name
            .iter()
            .find(|(n, _)| n == name)
            .map_or(self.other, |(_, d)| *d)
    }
}

static CURRENT: RwLock<Option<Latency>> = RwLock::new(None);

/// Makes `l` the latency of every later call (at `nvmlInit`).
pub fn set(l: Latency) {
    let off = l == Latency::none();
    *CURRENT.write().unwrap_or_else(PoisonError::into_inner) = (!off).then_some(l);
}

/// Sleeps for function `name`'s latency, if any.
pub fn delay(name: &str) {
    let d = match CURRENT
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
    {
        Some(l) => l.of(name),
        None => return,
    };
    if d.is_zero() {
        return;
    }
    thread_local! {
        static PRECISE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    PRECISE.with(|p| {
        if !p.get() {
            // Linux lets a sleep overrun by 50 µs by default, half a modelled call: ask for
            // precise wake-ups on this thread.
            // SAFETY: prctl with PR_SET_TIMERSLACK takes a plain integer.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
            p.set(true);
        }
    });
    std::thread::sleep(d);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_off_model_and_overrides() {
        assert_eq!(Latency::parse("").unwrap(), Latency::none());
        assert_eq!(Latency::parse("off").unwrap(), Latency::none());
        let m = Latency::parse("model").unwrap();
        assert_eq!(m.of("nvmlDeviceGetPowerUsage"), Duration::from_micros(2));
        assert_eq!(
            m.of("nvmlDeviceGetFieldValues"),
            Duration::from_micros(2_500)
        );
        assert_eq!(
            m.of("nvmlDeviceGetViolationStatus"),
            Duration::from_micros(575)
        );
        let o = Latency::parse("model, nvmlDeviceGetPowerUsage=7,*=3").unwrap();
        assert_eq!(o.of("nvmlDeviceGetPowerUsage"), Duration::from_micros(7));
        assert_eq!(o.of("nvmlDeviceGetTemperature"), Duration::from_micros(3));
        assert_eq!(
            o.of("nvmlDeviceGetFieldValues"),
            Duration::from_micros(2_500)
        );
        let only = Latency::parse("nvmlDeviceGetName=40").unwrap();
        assert_eq!(only.of("nvmlDeviceGetName"), Duration::from_micros(40));
        assert_eq!(only.of("nvmlDeviceGetUUID"), Duration::ZERO);
    }

    #[test]
    fn rejects_what_it_cannot_use() {
        for bad in [
            "fast",
            "nvmlX",
            "nvmlX=",
            "nvmlX=-1",
            "x=5",
            "nvmlX=2000000",
        ] {
            assert!(Latency::parse(bad).is_err(), "{bad}");
        }
        assert!(Latency::parse(&vec!["*=1"; 300].join(",")).is_err());
    }
}
