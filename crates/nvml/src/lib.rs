//! The NVML source: reads every GPU of the node through nvml-wrapper and maps the readings to
//! catalog samples with [`dgx_pixels_metrics::gpu::push_gpu_samples`].
//!
//! `libnvidia-ml.so.1` is loaded at run time (never linked), so the exporter builds and starts
//! on machines without a driver. When the library cannot be loaded or initialised, [`NvmlSource`]
//! returns an error at once and retries with exponential backoff (1 s doubling to 5 min), so a
//! GPU-less node neither spins nor floods the log; the exporter serves
//! `dgx_pixels_source_up{source="nvml"} 0` meanwhile.
//!
//! A GPU answering `GPU_IS_LOST` is reported with `dgx_pixels_gpu_up 0` and its readings are
//! omitted; the other GPUs carry on.
//!
//! ```
//! use dgx_pixels_metrics::Source;
//! use dgx_pixels_nvml::NvmlSource;
//!
//! let mut source = NvmlSource::new(Some("/nonexistent/libnvidia-ml.so.1".into()));
//! let err = source.poll().unwrap_err();
//! assert_eq!(err.kind, "library_unavailable");
//! ```
#![deny(missing_docs)]

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::gpu::{push_gpu_samples, throttle, ClockReadout, GpuIdentity, GpuReadout};
use dgx_pixels_metrics::{PollError, Sample, Source};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

/// The library NVML is loaded from unless a path is configured.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// Retry delays after a failed load: first, and the cap.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Exponential backoff between attempts to load NVML.
#[derive(Debug, Clone)]
struct Backoff {
    next_attempt: Option<Instant>,
    delay: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            next_attempt: None,
            delay: BACKOFF_FIRST,
        }
    }

    fn ready(&self, now: Instant) -> bool {
        self.next_attempt.is_none_or(|t| now >= t)
    }

    /// Records a failure at `now` and returns how long until the next attempt.
    fn failed(&mut self, now: Instant) -> Duration {
        let wait = self.delay;
        self.next_attempt = Some(now + wait);
        self.delay = (self.delay * 2).min(BACKOFF_MAX);
        wait
    }

    fn remaining(&self, now: Instant) -> Duration {
        self.next_attempt
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or_default()
    }
}

/// Throttle reasons as NVML names them, with our label values.
const THROTTLE_REASONS: &[(ThrottleReasons, &str)] = &[
    (ThrottleReasons::GPU_IDLE, throttle::GPU_IDLE),
    (
        ThrottleReasons::APPLICATIONS_CLOCKS_SETTING,
        throttle::APPLICATIONS_CLOCKS_SETTING,
    ),
    (ThrottleReasons::SW_POWER_CAP, throttle::SW_POWER_CAP),
    (ThrottleReasons::HW_SLOWDOWN, throttle::HW_SLOWDOWN),
    (ThrottleReasons::SYNC_BOOST, throttle::SYNC_BOOST),
    (
        ThrottleReasons::SW_THERMAL_SLOWDOWN,
        throttle::SW_THERMAL_SLOWDOWN,
    ),
    (
        ThrottleReasons::HW_THERMAL_SLOWDOWN,
        throttle::HW_THERMAL_SLOWDOWN,
    ),
    (
        ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN,
        throttle::HW_POWER_BRAKE_SLOWDOWN,
    ),
];

/// The NVML source. See the crate docs.
pub struct NvmlSource {
    library: Option<PathBuf>,
    nvml: Option<Nvml>,
    backoff: Backoff,
    last_error: String,
    identities: HashMap<u32, GpuIdentity>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource")
            .field("library", &self.library)
            .field("loaded", &self.nvml.is_some())
            .finish()
    }
}

impl NvmlSource {
    /// A source loading NVML from `library`, or from [`DEFAULT_LIBRARY`] through the dynamic
    /// loader's search path.
    pub fn new(library: Option<PathBuf>) -> NvmlSource {
        NvmlSource {
            library,
            nvml: None,
            backoff: Backoff::new(),
            last_error: String::new(),
            identities: HashMap::new(),
        }
    }

    fn library_name(&self) -> String {
        self.library
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| DEFAULT_LIBRARY.to_string())
    }

    fn load(&mut self) -> Result<(), PollError> {
        let now = Instant::now();
        if !self.backoff.ready(now) {
            return Err(PollError::new(
                "library_unavailable",
                format!(
                    "{}; next attempt in {:.0}s",
                    self.last_error,
                    self.backoff.remaining(now).as_secs_f64().ceil()
                ),
            ));
        }
        let mut builder = Nvml::builder();
        if let Some(path) = &self.library {
            builder.lib_path(path.as_os_str());
        } else {
            builder.lib_path(OsStr::new(DEFAULT_LIBRARY));
        }
        match builder.init() {
            Ok(nvml) => {
                self.nvml = Some(nvml);
                self.backoff = Backoff::new();
                Ok(())
            }
            Err(e) => {
                let wait = self.backoff.failed(now);
                self.last_error = format!(
                    "NVML unavailable: cannot load or initialise {} ({e}); is the NVIDIA driver installed and the device visible?",
                    self.library_name()
                );
                Err(PollError::new(
                    "library_unavailable",
                    format!(
                        "{}; next attempt in {:.0}s",
                        self.last_error,
                        wait.as_secs_f64()
                    ),
                ))
            }
        }
    }
}

fn opt<T>(r: Result<T, NvmlError>, lost: &mut bool) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(NvmlError::GpuLost) => {
            *lost = true;
            None
        }
        Err(_) => None,
    }
}

fn identity(nvml: &Nvml, index: u32, dev: &Device<'_>) -> Result<GpuIdentity, NvmlError> {
    Ok(GpuIdentity {
        index,
        uuid: dev.uuid()?,
        model: dev.name().unwrap_or_default(),
        serial: dev.serial().unwrap_or_default(),
        pci_bus_id: dev.pci_info().map(|p| p.bus_id).unwrap_or_default(),
        vbios_version: dev.vbios_version().unwrap_or_default(),
        driver_version: nvml.sys_driver_version().unwrap_or_default(),
        minor_number: dev.minor_number().unwrap_or(index),
    })
}

fn clocks(dev: &Device<'_>, max: bool, lost: &mut bool) -> ClockReadout {
    let mut read = |c: Clock| {
        let r = if max {
            dev.max_clock_info(c)
        } else {
            dev.clock_info(c)
        };
        opt(r, lost).map(|mhz| f64::from(mhz) * 1e6)
    };
    ClockReadout {
        graphics: read(Clock::Graphics),
        sm: read(Clock::SM),
        memory: read(Clock::Memory),
        video: read(Clock::Video),
    }
}

fn readout(dev: &Device<'_>) -> GpuReadout {
    let mut lost = false;
    let l = &mut lost;
    let util = opt(dev.utilization_rates(), l);
    let mem = opt(dev.memory_info(), l);
    let throttle = opt(dev.current_throttle_reasons(), l);
    let mut r = GpuReadout {
        up: true,
        utilization_ratio: util.as_ref().map(|u| f64::from(u.gpu) / 100.0),
        memory_utilization_ratio: util.as_ref().map(|u| f64::from(u.memory) / 100.0),
        memory_used_bytes: mem.as_ref().map(|m| m.used as f64),
        memory_free_bytes: mem.as_ref().map(|m| m.free as f64),
        memory_reserved_bytes: mem.as_ref().map(|m| m.reserved as f64),
        memory_total_bytes: mem.as_ref().map(|m| m.total as f64),
        power_watts: opt(dev.power_usage(), l).map(|mw| f64::from(mw) / 1e3),
        power_limit_watts: opt(dev.enforced_power_limit(), l).map(|mw| f64::from(mw) / 1e3),
        energy_joules: opt(dev.total_energy_consumption(), l).map(|mj| mj as f64 / 1e3),
        temperature_gpu_celsius: opt(dev.temperature(TemperatureSensor::Gpu), l).map(f64::from),
        performance_state: opt(dev.performance_state(), l)
            .map(|p| p.as_c())
            .filter(|p| *p <= 15),
        throttle_reasons: throttle
            .map(|t| {
                THROTTLE_REASONS
                    .iter()
                    .map(|(bit, name)| (*name, t.contains(*bit)))
                    .collect()
            })
            .unwrap_or_default(),
        // NVML reports KB/s.
        pcie_transmit_bytes_per_second: opt(dev.pcie_throughput(PcieUtilCounter::Send), l)
            .map(|kb| f64::from(kb) * 1e3),
        pcie_receive_bytes_per_second: opt(dev.pcie_throughput(PcieUtilCounter::Receive), l)
            .map(|kb| f64::from(kb) * 1e3),
        ..Default::default()
    };
    r.clocks = clocks(dev, false, l);
    r.max_clocks = clocks(dev, true, l);
    if lost {
        // Never mix readings from before the loss with a lost GPU.
        return GpuReadout::default();
    }
    r
}

impl Source for NvmlSource {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn poll(&mut self) -> Result<Vec<Sample>, PollError> {
        if self.nvml.is_none() {
            self.load()?;
        }
        let Some(nvml) = self.nvml.as_ref() else {
            return Err(PollError::new("library_unavailable", "NVML not loaded"));
        };
        let count = nvml
            .device_count()
            .map_err(|e| PollError::new("device_count", format!("nvmlDeviceGetCount: {e}")))?;
        let mut out = Vec::with_capacity(count as usize * 48);
        for index in 0..count {
            let dev = match nvml.device_by_index(index) {
                Ok(d) => d,
                Err(_) => {
                    // A device that cannot even be opened: report it down if we knew it.
                    if let Some(id) = self.identities.get(&index) {
                        push_gpu_samples(id, &GpuReadout::default(), &mut out);
                    }
                    continue;
                }
            };
            if let std::collections::hash_map::Entry::Vacant(slot) = self.identities.entry(index) {
                match identity(nvml, index, &dev) {
                    Ok(id) => {
                        slot.insert(id);
                    }
                    Err(_) => continue,
                }
            }
            if let Some(id) = self.identities.get(&index) {
                push_gpu_samples(id, &readout(&dev), &mut out);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let mut b = Backoff::new();
        let t0 = Instant::now();
        assert!(b.ready(t0));
        assert_eq!(b.failed(t0), Duration::from_secs(1));
        assert!(!b.ready(t0 + Duration::from_millis(500)));
        assert!(b.ready(t0 + Duration::from_secs(1)));
        assert_eq!(b.failed(t0), Duration::from_secs(2));
        assert_eq!(b.failed(t0), Duration::from_secs(4));
        for _ in 0..20 {
            b.failed(t0);
        }
        assert_eq!(b.failed(t0), BACKOFF_MAX);
    }

    #[test]
    fn a_missing_library_fails_fast_names_the_library_and_backs_off() {
        let mut s = NvmlSource::new(Some("/nonexistent/libnvidia-ml.so.1".into()));
        let first = s.poll().unwrap_err();
        assert_eq!(first.kind, "library_unavailable");
        assert!(
            first.message.contains("/nonexistent/libnvidia-ml.so.1"),
            "{first}"
        );
        assert!(first.message.contains("next attempt in 1s"), "{first}");
        // Within the backoff window no new attempt is made: same cause, remaining wait.
        let second = s.poll().unwrap_err();
        assert!(second.message.starts_with(&s.last_error), "{second}");
        assert_eq!(
            s.backoff.delay,
            Duration::from_secs(2),
            "no second attempt yet"
        );
    }
}
