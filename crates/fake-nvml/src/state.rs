//! The per-process fake driver: configuration, the simulated node behind a mutex, the scenario
//! clock, the reading cache, device handles, and the checks every call goes through.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_uint};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use dgx_pixels_sim::{GpuReadout, GpuState, GpuStatic, MigInstance, Node, Scenario};
use fake_support::process::process_age;
use fake_support::CallStats;

use crate::config::{ClockMode, Config, FromVars};
use crate::events::Registry;
use crate::types::*;

static DRIVER: Mutex<Option<Driver>> = Mutex::new(None);
/// NVML calls served (every exported `nvml*` symbol counts, whatever it returns) and the CPU
/// time of the calling threads inside them, since load or the last reset.
pub static CALLS: CallStats = CallStats::new();

/// Runs an exported function's body: no panic ever crosses the C boundary (it answers
/// `NVML_ERROR_UNKNOWN`). The thread CPU time it takes is added to [`CALLS`]' busy time
/// (benchmarks subtract it from the caller's CPU time).
pub fn guard(body: impl FnOnce() -> Result<(), NvmlReturn>) -> NvmlReturn {
    CALLS.guard(SUCCESS, ERROR_UNKNOWN, body)
}

/// Defines an exported NVML function whose body returns `Result<(), NvmlReturn>`; the call is
/// counted and any panic becomes `NVML_ERROR_UNKNOWN`.
macro_rules! nvml_fn {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        ///
        /// # Safety
        ///
        /// Pointer arguments must be null or valid for the reads and writes NVML documents.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::types::NvmlReturn {
            $crate::state::CALLS.count();
            $crate::latency::delay(stringify!($name));
            $crate::state::guard(move || -> Result<(), $crate::types::NvmlReturn> { $body })
        }
    };
}
pub(crate) use nvml_fn;

/// The out-parameter `p`, or `INVALID_ARGUMENT` when it is null.
///
/// # Safety
///
/// `p` must be null or valid for writes of `T`.
pub unsafe fn out<'a, T>(p: *mut T) -> Result<&'a mut T, NvmlReturn> {
    // SAFETY: the caller guarantees that a non-null `p` is valid.
    unsafe { p.as_mut() }.ok_or(ERROR_INVALID_ARGUMENT)
}

/// Writes `s` and a NUL into the caller's buffer of `len` bytes.
///
/// # Safety
///
/// `buf` must be null or valid for writes of `len` bytes.
pub unsafe fn write_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), NvmlReturn> {
    if buf.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    let bytes = s.as_bytes();
    if (len as usize) < bytes.len() + 1 {
        return Err(ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` holds at least `bytes.len() + 1` bytes (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    Ok(())
}

/// Wall-clock microseconds since the Unix epoch (NVML's timestamps).
pub fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// What a device handle points at: a GPU, or one MIG instance of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    /// GPU index.
    pub gpu: usize,
    /// MIG instance (position in the GPU's instance list), `None` for the whole GPU.
    pub mig: Option<usize>,
}

/// Marks our handles; GPU index in bits 8..16, MIG slot (instance + 1) in bits 0..8.
const HANDLE_TAG: usize = 0x4E56_0000;
const HANDLE_TAG_MASK: usize = !0xFFFF;

impl Handle {
    /// The opaque pointer given to callers.
    pub fn to_ptr(self) -> Device {
        let slot = self.mig.map_or(0, |m| m + 1);
        (HANDLE_TAG | (self.gpu << 8) | slot) as Device
    }

    /// Decodes a pointer we may have given out (not yet checked against the node).
    pub fn from_ptr(p: Device) -> Option<Handle> {
        let v = p as usize;
        if v & HANDLE_TAG_MASK != HANDLE_TAG {
            return None;
        }
        let slot = v & 0xFF;
        Some(Handle {
            gpu: (v >> 8) & 0xFF,
            mig: slot.checked_sub(1),
        })
    }
}

/// One loaded scenario and its session state.
pub struct Driver {
    pub config: Config,
    node: Node,
    /// `nvmlInit` reference count of the current session.
    init_count: u32,
    /// Scenario time of the last successful init.
    init_at: Duration,
    /// Last reading per GPU and the (quantised) time it is for.
    cache: Vec<Option<(Duration, GpuState)>>,
    /// XID counts just before each loss, by `(gpu, lost since)`.
    loss_counts: HashMap<(usize, Duration), BTreeMap<u32, u64>>,
    pub events: Registry,
    /// What the driver printed to the fake kernel log (`FAKE_NVML_KMSG`).
    pub kmsg: crate::kmsg::Printed,
    /// GPM's own copy of the node, loaded at the first metrics request (see `gpm`).
    pub gpm: Option<Node>,
    /// The process-utilization samples' own copy of the node, read forward from a window
    /// before the first request (see `processes`), so the buffer's history never takes the
    /// readings' node back.
    pub process_node: Option<Node>,
    /// Each GPU's process-utilization sample buffer, by index.
    pub process_samples: HashMap<usize, crate::process_samples::SampleBuffer>,
}

/// A device call's view of its GPU.
pub struct Dev<'a> {
    pub handle: Handle,
    pub gpu: &'a GpuStatic,
    /// The MIG instance, for a MIG handle.
    pub mig: Option<&'a MigInstance>,
    /// What the GPU reports at the current time (`Access::Reading` only).
    pub reading: Option<&'a GpuReadout>,
    /// Instantaneous power now, where the fake answers `NVML_FI_DEV_POWER_INSTANT`.
    pub power_instant_watts: Option<f64>,
}

impl Dev<'_> {
    /// The current reading; present for every `Access::Reading` call.
    pub fn r(&self) -> Result<&GpuReadout, NvmlReturn> {
        self.reading.ok_or(ERROR_UNKNOWN)
    }
}

/// What a device call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Static identity (name, UUID, PCI, serial, minor, index): answered even for a lost GPU.
    Identity,
    /// A reading: `GPU_IS_LOST` for a lost GPU.
    Reading,
}

impl Driver {
    fn load(config: Config) -> Result<Driver, String> {
        let scenario = Scenario::load(&config.scenario).map_err(|e| e.to_string())?;
        let node = Node::new(scenario);
        let gpus = node.gpu_count();
        Ok(Driver {
            config,
            node,
            init_count: 0,
            init_at: Duration::ZERO,
            cache: vec![None; gpus],
            loss_counts: HashMap::new(),
            events: Registry::default(),
            kmsg: Default::default(),
            gpm: None,
            process_node: None,
            process_samples: HashMap::new(),
        })
    }

    /// Current scenario time, quantised to 1 ms so that calls within a millisecond share one
    /// simulator reading.
    pub fn now(&self) -> Duration {
        let t = match self.config.clock {
            ClockMode::Frozen(t) => t,
            // The age of the process, not the time since this load: the library is unloaded when
            // the exporter shuts NVML down and loaded again on re-init, and a clock restarting
            // there would replay the scenario (a driver reset every few seconds, not once).
            ClockMode::Running(start) => start.saturating_add(process_age()),
        };
        Duration::from_millis(u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Applies a driver reset window: inside it nothing works; a session begun before it is gone.
    fn check_session(&mut self, now: Duration) -> Result<(), NvmlReturn> {
        if let Some((from, to)) = self.config.uninitialized {
            if now >= from && self.init_at < from {
                self.init_count = 0;
            }
            if from <= now && now < to {
                self.init_count = 0;
                return Err(ERROR_UNINITIALIZED);
            }
        }
        if self.init_count == 0 {
            return Err(ERROR_UNINITIALIZED);
        }
        Ok(())
    }

    fn hangs(&self, gpu: usize, now: Duration) -> bool {
        matches!(self.config.hang, Some((g, after)) if g as usize == gpu && now >= after)
    }

    /// Checks that `h` names an existing GPU or MIG instance.
    pub fn valid(&self, h: Handle) -> bool {
        match (self.node.gpu(h.gpu), h.mig) {
            (Some(_), None) => true,
            (Some(g), Some(m)) => g.mig.as_ref().is_some_and(|list| m < list.len()),
            (None, _) => false,
        }
    }

    /// The state of GPU `gpu` at `now`, from the cache when already computed for that time.
    pub fn state(&mut self, gpu: usize, now: Duration) -> Option<&GpuState> {
        let slot = self.cache.get_mut(gpu)?;
        if !matches!(slot, Some((t, _)) if *t == now) {
            *slot = Some((now, self.node.reading(gpu, now)?));
        }
        slot.as_ref().map(|(_, s)| s)
    }

    /// XIDs reported so far by `gpu`, counting a loss's XID once from the moment of the loss.
    pub fn xid_counts(&mut self, gpu: usize, now: Duration) -> BTreeMap<u32, u64> {
        let (since, xid) = match self.state(gpu, now) {
            Some(GpuState::Ok(r)) => return r.readout.xid_counts.clone(),
            Some(GpuState::Lost { since, xid }) => (*since, *xid),
            None => return BTreeMap::new(),
        };
        if let Some(c) = self.loss_counts.get(&(gpu, since)) {
            return c.clone();
        }
        // While lost the simulator gives no counts: take those just before the loss, plus the
        // loss's own XID (which the counts include again once the GPU recovers).
        let before = since.checked_sub(Duration::from_nanos(1));
        let mut counts = match before.and_then(|t| self.node.reading(gpu, t)) {
            Some(GpuState::Ok(r)) => r.readout.xid_counts,
            _ => BTreeMap::new(),
        };
        *counts.entry(xid).or_insert(0) += 1;
        self.loss_counts.insert((gpu, since), counts.clone());
        counts
    }
}

fn lock() -> MutexGuard<'static, Option<Driver>> {
    DRIVER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Blocks the calling thread for good (a hung GPU).
fn hang_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// `nvmlInit_v2` / `nvmlInitWithFlags`: (re)reads the environment, loads the scenario when the
/// configuration changed (or nothing is loaded), and opens or joins the session.
pub fn init() -> Result<(), NvmlReturn> {
    let config = Config::from_env().map_err(|e| {
        eprintln!("fake-nvml: {e}");
        ERROR_UNKNOWN
    })?;
    crate::latency::set(config.latency.clone());
    let mut guard = lock();
    let keep = match guard.as_ref() {
        Some(d) if d.config == config => true,
        Some(d) if d.init_count > 0 => {
            eprintln!(
                "fake-nvml: FAKE_NVML_* changed while a session is open; keeping the running \
                 scenario until every session has shut down"
            );
            true
        }
        _ => false,
    };
    if !keep {
        let driver = Driver::load(config).map_err(|e| {
            eprintln!("fake-nvml: cannot load scenario: {e}");
            ERROR_UNKNOWN
        })?;
        *guard = Some(driver);
    }
    let d = guard.as_mut().ok_or(ERROR_UNKNOWN)?;
    let now = d.now();
    match d.check_session(now) {
        Ok(()) => {}
        Err(_)
            if !d
                .config
                .uninitialized
                .is_some_and(|(f, t)| f <= now && now < t) => {}
        Err(e) => return Err(e),
    }
    d.init_count = d.init_count.saturating_add(1);
    d.init_at = now;
    Ok(())
}

/// `nvmlShutdown`: closes one reference of the session.
pub fn shutdown() -> Result<(), NvmlReturn> {
    with_driver(|d, _| {
        d.init_count = d.init_count.saturating_sub(1);
        Ok(())
    })
}

/// Runs `f` on the initialised driver at the current scenario time.
pub fn with_driver<R>(
    f: impl FnOnce(&mut Driver, Duration) -> Result<R, NvmlReturn>,
) -> Result<R, NvmlReturn> {
    let mut guard = lock();
    let d = guard.as_mut().ok_or(ERROR_UNINITIALIZED)?;
    let now = d.now();
    d.check_session(now)?;
    d.print_xids(now);
    f(d, now)
}

/// Resolves a GPU for a handle-returning call (by index or UUID), hanging if that GPU hangs.
pub fn gpu_handle_call<R>(
    pick: impl FnOnce(&Node) -> Result<(usize, R), NvmlReturn>,
) -> Result<R, NvmlReturn> {
    let mut guard = lock();
    let d = guard.as_mut().ok_or(ERROR_UNINITIALIZED)?;
    let now = d.now();
    d.check_session(now)?;
    let (gpu, r) = pick(&d.node)?;
    if d.hangs(gpu, now) {
        drop(guard);
        hang_forever();
    }
    Ok(r)
}

/// Runs a device call: session checks, handle validation, the hang, and for
/// [`Access::Reading`] the current reading (or `GPU_IS_LOST`).
pub fn device_call<R>(
    device: Device,
    access: Access,
    f: impl FnOnce(&Dev<'_>) -> Result<R, NvmlReturn>,
) -> Result<R, NvmlReturn> {
    let mut guard = lock();
    let d = guard.as_mut().ok_or(ERROR_UNINITIALIZED)?;
    let now = d.now();
    d.check_session(now)?;
    let handle = Handle::from_ptr(device)
        .filter(|h| d.valid(*h))
        .ok_or(ERROR_INVALID_ARGUMENT)?;
    if d.hangs(handle.gpu, now) {
        drop(guard);
        hang_forever();
    }
    d.print_xids(now);
    let reading = match access {
        Access::Identity => None,
        Access::Reading => match d.state(handle.gpu, now) {
            Some(GpuState::Ok(_)) => Some(()),
            Some(GpuState::Lost { .. }) => return Err(ERROR_GPU_IS_LOST),
            None => return Err(ERROR_INVALID_ARGUMENT),
        },
    };
    let reading = match reading {
        Some(()) => d
            .cache
            .get(handle.gpu)
            .and_then(|s| s.as_ref())
            .and_then(|(_, s)| s.ok()),
        None => None,
    };
    let power_instant_watts = reading
        .filter(|_| d.config.power_instant)
        .map(|r| r.power_instant_watts);
    let reading = reading.map(|r| &r.readout);
    let gpu = d.node.gpu(handle.gpu).ok_or(ERROR_INVALID_ARGUMENT)?;
    let mig = match handle.mig {
        Some(m) => Some(
            gpu.mig
                .as_ref()
                .and_then(|l| l.get(m))
                .ok_or(ERROR_INVALID_ARGUMENT)?,
        ),
        None => None,
    };
    f(&Dev {
        handle,
        gpu,
        mig,
        reading,
        power_instant_watts,
    })
}

/// Like [`device_call`] but with the driver itself, for calls that change driver state
/// (event registration). No reading is taken.
pub fn device_call_mut<R>(
    device: Device,
    f: impl FnOnce(&mut Driver, Handle, Duration) -> Result<R, NvmlReturn>,
) -> Result<R, NvmlReturn> {
    let mut guard = lock();
    let d = guard.as_mut().ok_or(ERROR_UNINITIALIZED)?;
    let now = d.now();
    d.check_session(now)?;
    let handle = Handle::from_ptr(device)
        .filter(|h| d.valid(*h))
        .ok_or(ERROR_INVALID_ARGUMENT)?;
    if d.hangs(handle.gpu, now) {
        drop(guard);
        hang_forever();
    }
    f(d, handle, now)
}

/// Blocks the calling thread for good when `device` is the GPU whose GPM calls hang
/// (`FAKE_NVML_GPM_HANG_GPU`); returns at once otherwise.
pub fn gpm_hang(device: Device) {
    let hangs = {
        let guard = lock();
        guard.as_ref().is_some_and(|d| {
            Handle::from_ptr(device)
                .is_some_and(|h| d.config.gpm_hang_gpu.is_some_and(|g| g as usize == h.gpu))
        })
    };
    if hangs {
        hang_forever();
    }
}

/// Whether `gpu` is hung at `now` (event waits skip hung GPUs instead of blocking).
pub fn is_hung(d: &Driver, gpu: usize, now: Duration) -> bool {
    d.hangs(gpu, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_reject_foreign_pointers() {
        for h in [
            Handle { gpu: 0, mig: None },
            Handle { gpu: 7, mig: None },
            Handle {
                gpu: 63,
                mig: Some(6),
            },
        ] {
            let p = h.to_ptr();
            assert!(!p.is_null());
            assert_eq!(Handle::from_ptr(p), Some(h));
        }
        assert_eq!(Handle::from_ptr(std::ptr::null_mut()), None);
        assert_eq!(Handle::from_ptr(0x1234_5678usize as Device), None);
        assert_eq!(Handle::from_ptr(0x7fff_0000_1000usize as Device), None);
    }

    #[test]
    fn strings_need_room_for_the_nul() {
        let mut buf = [1 as c_char; 8];
        // SAFETY: `buf` is valid for 8 bytes.
        unsafe {
            assert_eq!(
                write_str(buf.as_mut_ptr(), 5, "hello"),
                Err(ERROR_INSUFFICIENT_SIZE)
            );
            assert_eq!(write_str(buf.as_mut_ptr(), 6, "hello"), Ok(()));
            assert_eq!(
                write_str(std::ptr::null_mut(), 6, "hello"),
                Err(ERROR_INVALID_ARGUMENT)
            );
        }
        assert_eq!(buf[5], 0);
        assert_eq!(buf[0], b'h' as c_char);
    }
}
