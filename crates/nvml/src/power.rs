//! Fast power sampling (docs/power.md): each GPU's board power read every
//! [`NvmlOptions::power_sample_interval`](crate::NvmlOptions::power_sample_interval) (10 Hz by
//! default) by a thread of its own, counted into a [`PowerTally`] that a poll only copies.
//!
//! - The reading is `NVML_FI_DEV_POWER_INSTANT` through `nvmlDeviceGetFieldValues`; where a GPU
//!   answers that field `NOT_SUPPORTED`, the thread falls back for good to
//!   `nvmlDeviceGetPowerUsage` (the driver's averaged reading) and says so through the
//!   `reading` label.
//! - One thread per GPU, because a library call cannot be abandoned: a GPU that hangs holds
//!   its own thread only. The tally's lock is never held across a library call, so a poll
//!   never waits on one; a tally whose latest sample is older than [`stale_after`] serves
//!   nothing, and a failed read (a lost GPU) or a gap empties the window, so a peak or minimum
//!   is never served from before it.
//! - Dropping the [`PowerSampler`] wakes every thread at once and they return (one stuck in
//!   the library returns when the call does; until then the next sampler starts no thread for
//!   that GPU, see `stuck.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::gpu::{PowerSamples, PowerTally};
use dgx_pixels_metrics::labels::PowerReading;
use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlFieldValue_t};
use tracing::{info, warn};

use crate::calls::{timed, Function};
use crate::stuck::{self, Role, Thread};

/// `NVML_FI_DEV_POWER_INSTANT`: instantaneous board power in milliwatts.
const NVML_FI_DEV_POWER_INSTANT: u32 = 186;

/// How old a GPU's latest sample may be before its samples are not served: three missed
/// samples, and never less than a second (a poll's own timing wobbles by that much).
pub fn stale_after(interval: Duration) -> Duration {
    (interval * 3).max(Duration::from_secs(1))
}

/// What a GPU's sampling thread shares with the poll.
#[derive(Debug, Default)]
struct Shared {
    tally: Option<PowerTally>,
    /// When the latest sample was taken.
    latest: Option<Instant>,
}

/// One GPU's running sampling thread, as the poll sees it.
#[derive(Debug)]
struct Running {
    /// Dropped with the sampler: the thread's wait returns and it ends.
    _stop: mpsc::Sender<()>,
    shared: Arc<Mutex<Shared>>,
    /// Whether the thread is in a library call (see `stuck.rs`).
    in_call: Arc<AtomicBool>,
}

/// The running sampling threads of the GPUs of one loaded library.
#[derive(Debug)]
pub struct PowerSampler {
    nvml: Arc<Nvml>,
    gpus: Vec<(u32, Thread<Running>)>,
    interval: Duration,
    window: Duration,
    /// Time 0 of the tallies' clock.
    origin: Instant,
}

impl PowerSampler {
    /// Starts one sampling thread for each of GPUs `0..count`, every `interval`, keeping the
    /// peak and minimum over `window` (a GPU whose thread of a dropped source is still stuck in
    /// a call gets its thread later, see [`PowerSampler::start_waiting`]).
    pub fn spawn(nvml: &Arc<Nvml>, count: u32, interval: Duration, window: Duration) -> Self {
        let mut sampler = PowerSampler {
            nvml: Arc::clone(nvml),
            gpus: Vec::with_capacity(count as usize),
            interval,
            window,
            origin: Instant::now(),
        };
        for index in 0..count {
            let thread = Thread::start((Role::Power, index), || sampler.spawn_one(index));
            sampler.gpus.push((index, thread));
        }
        sampler
    }

    /// Starts the threads that waited for a stuck call of a dropped source to return.
    pub fn start_waiting(&mut self) {
        let mut gpus = std::mem::take(&mut self.gpus);
        for (index, thread) in &mut gpus {
            thread.retry((Role::Power, *index), || self.spawn_one(*index));
        }
        self.gpus = gpus;
    }

    fn spawn_one(&self, index: u32) -> Option<Running> {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let in_call = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel::<()>();
        let sampler = Sampler {
            nvml: Arc::clone(&self.nvml),
            index,
            shared: Arc::clone(&shared),
            in_call: Arc::clone(&in_call),
            interval: self.interval,
            window: self.window,
            origin: self.origin,
        };
        let spawned = thread::Builder::new()
            .name(format!("nvml-power{index}"))
            .spawn(move || sampler.run(&stopped));
        match spawned {
            Ok(_) => Some(Running {
                _stop: stop,
                shared,
                in_call,
            }),
            Err(e) => {
                warn!(gpu = index, error = %e, "cannot start the power sampling thread; no fast power samples for this GPU");
                None
            }
        }
    }

    /// What to serve now for GPU `index`: `None` when it has no current sample.
    pub fn samples(&self, index: u32) -> Option<PowerSamples> {
        let running = self
            .gpus
            .iter()
            .find(|(i, _)| *i == index)
            .and_then(|(_, t)| t.up())?;
        let mut s = running
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if s.latest?.elapsed() > stale_after(self.interval) {
            return None;
        }
        let now = self.origin.elapsed();
        s.tally.as_mut().map(|t| t.samples(now))
    }
}

impl Drop for PowerSampler {
    fn drop(&mut self) {
        // A thread in a call stays there: the next sampler must not start another beside it.
        for (index, thread) in &self.gpus {
            if let Some(r) = thread.up() {
                stuck::leave((Role::Power, *index), &r.in_call);
            }
        }
    }
}

/// One GPU's sampling thread.
struct Sampler {
    nvml: Arc<Nvml>,
    index: u32,
    shared: Arc<Mutex<Shared>>,
    in_call: Arc<AtomicBool>,
    interval: Duration,
    window: Duration,
    origin: Instant,
}

impl Sampler {
    fn run(self, stopped: &mpsc::Receiver<()>) {
        let mut reading = PowerReading::Instant;
        let mut next = Instant::now();
        loop {
            self.in_call.store(true, Ordering::Release);
            let read = self.read(&mut reading);
            self.in_call.store(false, Ordering::Release);
            match read {
                Ok(watts) => self.record(reading, watts),
                Err(_) => self.forget(),
            }
            let now = Instant::now();
            next += self.interval;
            if next < now {
                // Behind (a slow call): skip the missed ticks rather than burst.
                next = now + self.interval;
            }
            // Only a timeout goes on: the sampler never sends, so anything else is its drop.
            if stopped.recv_timeout(next - now) != Err(mpsc::RecvTimeoutError::Timeout) {
                return;
            }
        }
    }

    /// One reading in watts, falling back to the averaged reading for good when the GPU does
    /// not support the instantaneous one.
    fn read(&self, reading: &mut PowerReading) -> Result<f64, NvmlError> {
        let dev = timed(Function::HandleByIndex, || {
            self.nvml.device_by_index(self.index)
        })?;
        if *reading == PowerReading::Instant {
            // SAFETY: a live handle of this library, used only for the call below.
            let handle = unsafe { dev.handle() };
            match read_instant(&self.nvml, handle)? {
                Some(watts) => return Ok(watts),
                None => {
                    info!(
                        gpu = self.index,
                        "NVML_FI_DEV_POWER_INSTANT not supported; sampling the averaged power reading"
                    );
                    *reading = PowerReading::Average;
                }
            }
        }
        timed(Function::PowerUsage, || dev.power_usage()).map(|mw| f64::from(mw) / 1e3)
    }

    fn record(&self, reading: PowerReading, watts: f64) {
        let now = Instant::now();
        let mut s = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let gap = s
            .latest
            .is_some_and(|t| now.duration_since(t) > stale_after(self.interval));
        match &mut s.tally {
            Some(t) if t.reading() == reading => {
                if gap {
                    t.clear_window();
                }
            }
            // The first sample, or a switch to the averaged reading: counts start afresh.
            _ => s.tally = Some(PowerTally::new(reading, self.window)),
        }
        if let Some(t) = s.tally.as_mut() {
            t.observe(now.duration_since(self.origin), watts);
        }
        s.latest = Some(now);
    }

    fn forget(&self) {
        let mut s = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = s.tally.as_mut() {
            t.clear_window();
        }
        s.latest = None;
    }
}

/// `NVML_FI_DEV_POWER_INSTANT` in watts; `None` when the GPU or driver does not support it (or
/// it answers anything but a number).
fn read_instant(nvml: &Nvml, device: nvmlDevice_t) -> Result<Option<f64>, NvmlError> {
    let Ok(sym) = nvml.lib().nvmlDeviceGetFieldValues.as_ref() else {
        return Ok(None);
    };
    // SAFETY: nvmlFieldValue_t is plain old data; all-zero is a valid value.
    let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
    v.fieldId = NVML_FI_DEV_POWER_INSTANT;
    // SAFETY: one initialised entry that NVML fills in place.
    match nvml_try(timed(Function::FieldValuesPower, || unsafe {
        sym(device, 1, &mut v)
    })) {
        // A driver without field values, or one refusing them for this GPU.
        Err(NvmlError::NotSupported | NvmlError::FunctionNotFound) => return Ok(None),
        other => other?,
    }
    // Only NOT_SUPPORTED means the field is missing; another error (a lost GPU) is a failed
    // read, which must not switch the GPU to the averaged reading for good.
    match nvml_try(v.nvmlReturn) {
        Ok(()) => Ok(crate::fields::value(&v).map(|mw| mw / 1e3)),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(e),
    }
}
