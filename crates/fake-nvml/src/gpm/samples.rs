//! GPM sample buffers: opaque handles we hand out, each remembering which GPU it sampled and
//! when (scenario time). Bounded: past [`MAX_SAMPLES`] live buffers, allocation fails as malloc
//! would; a handle that was never allocated, or was freed, is `INVALID_ARGUMENT`.
//!
//! Apart from the driver state on purpose: allocating and freeing need no session (a sample
//! freed after a driver reset must still be freed), and this lock is never held while the
//! driver's is taken.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::types::*;

/// Live sample buffers at most (a leak in the caller shows as `NVML_ERROR_MEMORY`).
pub const MAX_SAMPLES: usize = 4096;
/// `NVML_ERROR_MEMORY`: insufficient memory.
pub const ERROR_MEMORY: NvmlReturn = 20;
/// Marks our sample handles; the id is in the low 32 bits.
const TAG: usize = 0x4750_0000_0000;
const TAG_MASK: usize = !0xFFFF_FFFF;

/// A filled sample: the GPU (and MIG GPU instance, for `nvmlGpmMigSampleGet`) it read and the
/// scenario time it read it at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub gpu: usize,
    pub gpu_instance: Option<u32>,
    pub at: Duration,
}

#[derive(Debug, Default)]
struct Samples {
    live: HashMap<usize, Option<Taken>>,
    next: u32,
}

static SAMPLES: Mutex<Option<Samples>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<Samples>> {
    SAMPLES.lock().unwrap_or_else(PoisonError::into_inner)
}

fn key(p: *mut c_void) -> Option<usize> {
    let v = p as usize;
    (v & TAG_MASK == TAG).then_some(v)
}

/// A new, empty sample buffer.
pub fn alloc() -> Result<*mut c_void, NvmlReturn> {
    let mut guard = lock();
    let s = guard.get_or_insert_with(Samples::default);
    if s.live.len() >= MAX_SAMPLES {
        return Err(ERROR_MEMORY);
    }
    loop {
        let k = TAG | s.next as usize;
        s.next = s.next.wrapping_add(1);
        if k != TAG && !s.live.contains_key(&k) {
            s.live.insert(k, None);
            return Ok(k as *mut c_void);
        }
    }
}

/// Frees a buffer.
pub fn free(p: *mut c_void) -> Result<(), NvmlReturn> {
    let k = key(p).ok_or(ERROR_INVALID_ARGUMENT)?;
    let mut guard = lock();
    let s = guard.as_mut().ok_or(ERROR_INVALID_ARGUMENT)?;
    s.live.remove(&k).map(|_| ()).ok_or(ERROR_INVALID_ARGUMENT)
}

/// Whether `p` is a live buffer.
pub fn is_live(p: *mut c_void) -> bool {
    key(p).is_some_and(|k| lock().as_ref().is_some_and(|s| s.live.contains_key(&k)))
}

/// Records what a buffer sampled.
pub fn fill(p: *mut c_void, taken: Taken) -> Result<(), NvmlReturn> {
    let k = key(p).ok_or(ERROR_INVALID_ARGUMENT)?;
    let mut guard = lock();
    let slot = guard
        .as_mut()
        .and_then(|s| s.live.get_mut(&k))
        .ok_or(ERROR_INVALID_ARGUMENT)?;
    *slot = Some(taken);
    Ok(())
}

/// What a live, filled buffer sampled; `INVALID_ARGUMENT` for anything else.
pub fn taken(p: *mut c_void) -> Result<Taken, NvmlReturn> {
    let k = key(p).ok_or(ERROR_INVALID_ARGUMENT)?;
    lock()
        .as_ref()
        .and_then(|s| s.live.get(&k).copied().flatten())
        .ok_or(ERROR_INVALID_ARGUMENT)
}

/// Live buffers (tests: every allocation is freed).
pub fn live() -> usize {
    lock().as_ref().map_or(0, |s| s.live.len())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn handles_are_checked_freed_once_and_bounded() {
        let p = alloc().unwrap();
        assert!(is_live(p));
        assert_eq!(taken(p), Err(ERROR_INVALID_ARGUMENT), "not filled yet");
        let t = Taken {
            gpu: 3,
            gpu_instance: None,
            at: Duration::from_millis(1500),
        };
        fill(p, t).unwrap();
        assert_eq!(taken(p), Ok(t));
        for bad in [
            std::ptr::null_mut(),
            0x1234usize as *mut c_void,
            (TAG | 0xFFFF_FFF0) as *mut c_void,
        ] {
            assert_eq!(free(bad), Err(ERROR_INVALID_ARGUMENT));
            assert_eq!(taken(bad), Err(ERROR_INVALID_ARGUMENT));
            assert_eq!(fill(bad, t), Err(ERROR_INVALID_ARGUMENT));
        }
        free(p).unwrap();
        assert_eq!(free(p), Err(ERROR_INVALID_ARGUMENT), "double free");
        assert_eq!(taken(p), Err(ERROR_INVALID_ARGUMENT), "use after free");

        // Bounded (the only test in this binary that allocates, so the count is its own).
        let mut held = Vec::new();
        let err = loop {
            match alloc() {
                Ok(p) => held.push(p),
                Err(e) => break e,
            }
            assert!(held.len() <= MAX_SAMPLES, "no bound");
        };
        assert_eq!(err, ERROR_MEMORY);
        let one = held.pop().unwrap();
        free(one).unwrap();
        let again = alloc().unwrap();
        held.push(again);
        for p in held {
            free(p).unwrap();
        }
    }
}
