//! Per-function call latency (`FAKE_NVML_LATENCY`), so that benchmarks and tests see what a
//! poll costs on a real driver, where every call is a round trip into the kernel module, and
//! not the microseconds the fake answers in.
//!
//! The delay is a sleep taken before the call's body and outside the driver lock, so calls of
//! different threads (different GPUs) overlap as they do on a real driver; it is not CPU time
//! (`fake_nvml_busy_ns` leaves it out). `nvmlDeviceGetPcieThroughput`'s own sampling time is
//! `FAKE_NVML_PCIE_DELAY_MS`, on top. `nvmlDeviceGetFieldValues` costs its own latency plus
//! that of each field it is asked for ([`MODEL_FIELDS`]), so a batch costs what its fields ask
//! of the GPU and the power sampler's one-field batch stays cheap.
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
    // The batch itself: 1-2 µs measured with 11 fields and with 1 (power instant); what its
    // fields cost comes on top (MODEL_FIELDS).
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

/// The model's extra latency per field of a `nvmlDeviceGetFieldValues` call, in microseconds,
/// for the fields whose getters ask the GPU. Inferred, not measured: that a field costs what
/// its getter does (`scripts/gpu-nvml-latency.py` times these batches on the next GPU).
pub const MODEL_FIELDS: &[(u32, u64)] = &[
    // NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: nvmlDeviceGetTotalEnergyConsumption took 2.5 ms.
    (83, 2_500),
    // NVML_FI_DEV_PCIE_REPLAY_COUNTER: nvmlDeviceGetPcieReplayCounter took 220 µs.
    (94, 220),
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
    /// Extra latency of `nvmlDeviceGetFieldValues` per field id asked for.
    fields: Vec<(u32, Duration)>,
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
            fields: MODEL_FIELDS
                .iter()
                .map(|(id, us)| (*id, Duration::from_micros(*us)))
                .collect(),
        }
    }

    /// Parses `FAKE_NVML_LATENCY`: `off` (or empty), `model`, or a comma-separated list of
    /// `FUNCTION=MICROSECONDS`, where `*=MICROSECONDS` is every unlisted function,
    /// `field:ID=MICROSECONDS` is what field `ID` adds to a `nvmlDeviceGetFieldValues` call that
    /// asks for it, and a `model` item starts from the model (`model,field:83=0`). A function
    /// or field listed twice takes the later value. Bounded: at most 256 items, each at most 1 s.
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
            } else if let Some(id) = name.strip_prefix("field:") {
                let id: u32 = id.trim().parse().map_err(|_| "expected field:ID=...")?;
                l.fields.retain(|(f, _)| *f != id);
                l.fields.push((id, d));
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

    /// The extra delay of a field-values call asking for `ids`: the sum of theirs.
    pub fn of_fields(&self, ids: impl IntoIterator<Item = u32>) -> Duration {
        ids.into_iter()
            .filter_map(|id| self.fields.iter().find(|(f, _)| *f == id))
            .map(|(_, d)| *d)
            .sum()
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
    sleep_for(|l| l.of(name));
}

/// Sleeps for what fields `ids` add to a field-values call, if anything.
pub fn delay_fields(ids: impl IntoIterator<Item = u32>) {
    sleep_for(|l| l.of_fields(ids));
}

fn sleep_for(of: impl FnOnce(&Latency) -> Duration) {
    let d = match CURRENT
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
    {
        Some(l) => of(l),
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
        assert_eq!(m.of("nvmlDeviceGetFieldValues"), Duration::from_micros(2));
        // The poll's batch without the energy and replays, the slow one with them, the power
        // sampler's one field.
        assert_eq!(m.of_fields([3, 4, 82, 138, 142]), Duration::ZERO);
        assert_eq!(m.of_fields([83, 94]), Duration::from_micros(2_720));
        assert_eq!(m.of_fields([186]), Duration::ZERO);
        assert_eq!(
            m.of("nvmlDeviceGetViolationStatus"),
            Duration::from_micros(575)
        );
        let o = Latency::parse("model, nvmlDeviceGetPowerUsage=7,*=3").unwrap();
        assert_eq!(o.of("nvmlDeviceGetPowerUsage"), Duration::from_micros(7));
        assert_eq!(o.of("nvmlDeviceGetTemperature"), Duration::from_micros(3));
        assert_eq!(o.of_fields([83]), Duration::from_micros(2_500));
        let f = Latency::parse("model,field:83=10,field:186=4").unwrap();
        assert_eq!(f.of_fields([83, 94, 186]), Duration::from_micros(234));
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
            "field:x=5",
            "field:=5",
        ] {
            assert!(Latency::parse(bad).is_err(), "{bad}");
        }
        assert!(Latency::parse(&vec!["*=1"; 300].join(",")).is_err());
    }
}
