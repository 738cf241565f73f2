//! Event sets: critical XID events from the simulator's XID counts.
//!
//! A registration remembers the GPU's XID counts at that moment; each wait compares the current
//! counts with what was already delivered and queues one event per new occurrence (a lost GPU
//! counts its XID once, see [`Driver::xid_counts`]). With nothing pending, a wait polls in short
//! slices until its timeout.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::{c_uint, c_ulonglong};
use std::time::{Duration, Instant};

use crate::state::{self, device_call_mut, nvml_fn, out, Driver, Handle};
use crate::types::*;

/// How often a waiting call looks for new events.
const WAIT_SLICE: Duration = Duration::from_millis(10);
/// Marks our event-set handles; the id is in the low 16 bits.
const SET_TAG: usize = 0x4E45_0000;

#[derive(Debug)]
struct Registration {
    gpu: usize,
    /// XID counts already accounted for (delivered or older than the registration).
    seen: BTreeMap<u32, u64>,
}

#[derive(Debug, Default)]
struct Set {
    registrations: Vec<Registration>,
    /// `(gpu, xid)` occurrences found but not yet delivered.
    pending: VecDeque<(usize, u32)>,
}

/// All live event sets of the driver.
#[derive(Debug, Default)]
pub struct Registry {
    sets: HashMap<usize, Set>,
    next: usize,
}

impl Registry {
    fn create(&mut self) -> Option<usize> {
        for _ in 0..=0xFFFF {
            let key = SET_TAG | (self.next & 0xFFFF);
            self.next = self.next.wrapping_add(1);
            if key != SET_TAG && !self.sets.contains_key(&key) {
                self.sets.insert(key, Set::default());
                return Some(key);
            }
        }
        None
    }
}

impl Driver {
    /// The next event of set `key`, if any occurred by `now`.
    fn next_event(
        &mut self,
        key: usize,
        now: Duration,
    ) -> Result<Option<(usize, u32)>, NvmlReturn> {
        let gpus: Vec<usize> = self
            .events
            .sets
            .get(&key)
            .ok_or(ERROR_INVALID_ARGUMENT)?
            .registrations
            .iter()
            .map(|r| r.gpu)
            .collect();
        let mut current = Vec::with_capacity(gpus.len());
        for gpu in gpus {
            let counts = if state::is_hung(self, gpu, now) {
                None
            } else {
                Some(self.xid_counts(gpu, now))
            };
            current.push(counts);
        }
        let set = self
            .events
            .sets
            .get_mut(&key)
            .ok_or(ERROR_INVALID_ARGUMENT)?;
        for (reg, counts) in set.registrations.iter_mut().zip(current) {
            for (xid, n) in counts.into_iter().flatten() {
                let seen = reg.seen.entry(xid).or_insert(0);
                for _ in *seen..n {
                    set.pending.push_back((reg.gpu, xid));
                }
                *seen = (*seen).max(n);
            }
        }
        Ok(set.pending.pop_front())
    }
}

fn set_key(set: EventSet) -> usize {
    set as usize
}

nvml_fn! {
    /// Creates an empty event set.
    fn nvmlEventSetCreate(set: *mut EventSet) {
        // SAFETY: NVML contract for out-parameters.
        let set = unsafe { out(set) }?;
        let key = state::with_driver(|d, _| d.events.create().ok_or(ERROR_UNKNOWN))?;
        *set = key as EventSet;
        Ok(())
    }
}

nvml_fn! {
    /// Frees an event set and its registrations.
    fn nvmlEventSetFree(set: EventSet) {
        state::with_driver(|d, _| {
            d.events
                .sets
                .remove(&set_key(set))
                .map(|_| ())
                .ok_or(ERROR_INVALID_ARGUMENT)
        })
    }
}

nvml_fn! {
    /// The event types a GPU can deliver: critical XID errors only.
    fn nvmlDeviceGetSupportedEventTypes(device: Device, event_types: *mut c_ulonglong) {
        // SAFETY: NVML contract for out-parameters.
        let event_types = unsafe { out(event_types) }?;
        let v = state::device_call(device, state::Access::Reading, |dev| {
            if dev.handle.mig.is_some() {
                return Err(ERROR_NOT_SUPPORTED);
            }
            Ok(EVENT_TYPE_XID_CRITICAL_ERROR)
        })?;
        *event_types = v;
        Ok(())
    }
}

nvml_fn! {
    /// Registers a GPU for critical XID events; XIDs from before the registration are not
    /// delivered.
    fn nvmlDeviceRegisterEvents(device: Device, event_types: c_ulonglong, set: EventSet) {
        device_call_mut(device, |d, handle: Handle, now| {
            if !d.events.sets.contains_key(&set_key(set)) {
                return Err(ERROR_INVALID_ARGUMENT);
            }
            if handle.mig.is_some()
                || !d.config.xid_events
                || event_types == 0
                || event_types & !EVENT_TYPE_XID_CRITICAL_ERROR != 0
            {
                return Err(ERROR_NOT_SUPPORTED);
            }
            if matches!(d.state(handle.gpu, now), Some(dgx_pixels_sim::GpuState::Lost { .. })) {
                return Err(ERROR_GPU_IS_LOST);
            }
            let seen = d.xid_counts(handle.gpu, now);
            let s = d
                .events
                .sets
                .get_mut(&set_key(set))
                .ok_or(ERROR_INVALID_ARGUMENT)?;
            if !s.registrations.iter().any(|r| r.gpu == handle.gpu) {
                s.registrations.push(Registration {
                    gpu: handle.gpu,
                    seen,
                });
            }
            Ok(())
        })
    }
}

/// Waits up to `timeout_ms` for the next event of `set`.
///
/// # Safety
///
/// `data` must be null or valid for writes.
unsafe fn wait(set: EventSet, data: *mut EventData, timeout_ms: c_uint) -> Result<(), NvmlReturn> {
    // SAFETY: NVML contract for out-parameters.
    let data = unsafe { out(data) }?;
    let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
    loop {
        if let Some((gpu, xid)) = state::with_driver(|d, now| d.next_event(set_key(set), now))? {
            *data = EventData {
                device: Handle { gpu, mig: None }.to_ptr(),
                event_type: EVENT_TYPE_XID_CRITICAL_ERROR,
                event_data: c_ulonglong::from(xid),
                gpu_instance_id: NO_INSTANCE,
                compute_instance_id: NO_INSTANCE,
            };
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ERROR_TIMEOUT);
        }
        std::thread::sleep(left.min(WAIT_SLICE));
    }
}

nvml_fn! {
    /// Delivers one pending event, waiting up to `timeoutms` for one.
    fn nvmlEventSetWait_v2(set: EventSet, data: *mut EventData, timeoutms: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { wait(set, data, timeoutms) }
    }
}

nvml_fn! {
    /// The older name of [`nvmlEventSetWait_v2`], same behaviour.
    fn nvmlEventSetWait(set: EventSet, data: *mut EventData, timeoutms: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { wait(set, data, timeoutms) }
    }
}
