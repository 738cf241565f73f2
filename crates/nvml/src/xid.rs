//! XID errors: a dedicated thread blocks in `nvmlEventSetWait` for critical XID events and
//! records every occurrence per GPU (by uuid) and XID code in the shared [`XidLedger`], which
//! also hears the kernel log and counts an event seen both ways once. The poll only reads the
//! ledger's counts, so an event is never missed between polls and a poll never waits for events.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::{XidLedger, XidOrigin};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::Nvml;
use tracing::{debug, info, warn};

use crate::stuck::{self, Role};

/// How long one wait blocks before the thread checks whether it should stop.
const WAIT_MS: u32 = 500;
/// XID code recorded when the driver reports an XID without a value.
pub const XID_UNKNOWN: u32 = 999;

/// The running event thread; dropping it asks the thread to stop.
#[derive(Debug)]
pub struct XidWatcher {
    stop: Arc<AtomicBool>,
    /// Whether the thread may be in a library call: from its start until it returns, but for
    /// its pauses. The event wait counts, so a new watcher starts only once the old one is gone
    /// and no XID is counted by both (see `stuck.rs`).
    in_call: Arc<AtomicBool>,
}

/// Clears an in-call flag when the thread ends, however it ends.
struct Ended(Arc<AtomicBool>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl XidWatcher {
    /// Starts watching the GPUs with the given indices, recording their XIDs in `ledger`.
    pub fn spawn(nvml: Arc<Nvml>, gpus: Vec<u32>, ledger: Arc<XidLedger>) -> XidWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let in_call = Arc::new(AtomicBool::new(true));
        let (s, c) = (stop.clone(), in_call.clone());
        let spawned = thread::Builder::new()
            .name("nvml-xid".into())
            .spawn(move || {
                let _ended = Ended(c.clone());
                watch(&nvml, &gpus, &ledger, &s, &c);
            });
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the XID event thread; XID errors are not counted");
            in_call.store(false, Ordering::Release);
        }
        XidWatcher { stop, in_call }
    }
}

impl Drop for XidWatcher {
    fn drop(&mut self) {
        stuck::leave((Role::Xid, 0), &self.in_call);
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Notes that NVML watches none of `gpus` for XIDs (so the health verdict can say it cannot
/// see them).
fn watching_none(nvml: &Nvml, gpus: &[u32], ledger: &XidLedger) {
    for &index in gpus {
        if let Ok(uuid) = nvml.device_by_index(index).and_then(|d| d.uuid()) {
            ledger.set_nvml_watching(&uuid, false);
        }
    }
}

fn watch(nvml: &Nvml, gpus: &[u32], ledger: &XidLedger, stop: &AtomicBool, in_call: &AtomicBool) {
    let set = match nvml.create_event_set() {
        Ok(s) => s,
        Err(e) => {
            info!(error = %e, "NVML event sets unavailable; XID errors are not counted");
            watching_none(nvml, gpus, ledger);
            return;
        }
    };
    let Ok(register) = nvml.lib().nvmlDeviceRegisterEvents.as_ref() else {
        info!("nvmlDeviceRegisterEvents missing; XID errors are not counted");
        watching_none(nvml, gpus, ledger);
        return;
    };
    // Event data names the device by handle; map handles back to indices and uuids.
    let mut by_handle: HashMap<usize, (u32, String)> = HashMap::new();
    for &index in gpus {
        let device = nvml
            .device_by_index(index)
            .and_then(|dev| dev.uuid().map(|uuid| (dev, uuid)));
        let (dev, uuid) = match device {
            Ok(d) => d,
            Err(e) => {
                debug!(gpu = index, error = %e, "XID events not available for this GPU");
                continue;
            }
        };
        // SAFETY: raw call with a live device handle and event set. The raw call is used
        // because the wrapper frees the whole set when one device cannot register.
        let handle = unsafe { dev.handle() };
        let ret = unsafe { register(handle, EventTypes::CRITICAL_XID_ERROR.bits(), set.handle()) };
        match nvml_try(ret) {
            Ok(()) => {
                ledger.set_nvml_watching(&uuid, true);
                by_handle.insert(handle as usize, (index, uuid));
            }
            Err(e) => {
                debug!(gpu = index, error = %e, "XID events not available for this GPU");
                ledger.set_nvml_watching(&uuid, false);
            }
        }
    }
    if by_handle.is_empty() {
        info!("no GPU accepts XID event registration; XID errors are not counted");
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        match set.wait(WAIT_MS) {
            Ok(event) => {
                // SAFETY: only compared, never dereferenced.
                let handle = unsafe { event.device.handle() } as usize;
                let xid = match event.event_data {
                    Some(XidError::Value(v)) => u32::try_from(v).unwrap_or(XID_UNKNOWN),
                    Some(XidError::Unknown) | None => XID_UNKNOWN,
                };
                if let Some((index, uuid)) = by_handle.get(&handle) {
                    let new = ledger.record(uuid, xid, Instant::now(), XidOrigin::Nvml);
                    warn!(gpu = index, xid, already_in_kernel_log = !new, "XID error");
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(NvmlError::Uninitialized) => {
                debug!("NVML shut down; XID thread stops");
                return;
            }
            Err(e) => {
                // GPU_IS_LOST and friends: keep waiting for the other GPUs, without spinning.
                debug!(error = %e, "XID event wait failed");
                in_call.store(false, Ordering::Release);
                thread::sleep(Duration::from_millis(u64::from(WAIT_MS)));
                in_call.store(true, Ordering::Release);
            }
        }
    }
}
