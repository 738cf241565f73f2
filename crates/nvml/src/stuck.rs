//! Threads that a dropped source left inside a library call.
//!
//! A library call cannot be abandoned, so a thread of a hung GPU stays in its call after the
//! source that started it is gone (a reload that restarts NVML, or a driver reset). Before,
//! every restart started a new thread for that GPU, which hung in turn: one more stuck thread
//! per restart (issue 28, item 18). Now a dropped source records here each of its threads that
//! is in a call, by [`Slot`]; a new source does not start the thread of a slot whose old thread
//! is still in its call ([`Thread::Waiting`]) and starts it at the first poll after that call
//! returns. A hung GPU holds at most one thread per role, however often NVML restarts.
//!
//! The record is process-wide (sources come and go, the stuck threads stay) and bounded: one
//! entry per thread left in a call, and a slot gets a new thread only once its entries have
//! returned; entries are pruned as their calls return.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tracing::info;

/// What a thread does for a loaded library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A GPU's basic reading (`nvml-gpu<N>`).
    Reader,
    /// A GPU's GPM reading (`nvml-gpm<N>`).
    Gpm,
    /// A GPU's fast power sampling (`nvml-power<N>`).
    Power,
    /// The XID event thread (`nvml-xid`, one for all GPUs: index 0).
    Xid,
}

/// One thread of a loaded library: its role and GPU index.
pub type Slot = (Role, u32);

/// In-call flags of the threads dropped sources left in a call.
static LEFT: Mutex<Vec<(Slot, Arc<AtomicBool>)>> = Mutex::new(Vec::new());

fn left() -> MutexGuard<'static, Vec<(Slot, Arc<AtomicBool>)>> {
    let mut left = LEFT.lock().unwrap_or_else(PoisonError::into_inner);
    // A thread whose call returned ends (its source is gone): forget it.
    left.retain(|(_, in_call)| in_call.load(Ordering::Acquire));
    left
}

/// Called when a source drops the thread of `slot`: if it is in a library call, remember it
/// until the call returns.
pub fn leave(slot: Slot, in_call: &Arc<AtomicBool>) {
    if in_call.load(Ordering::Acquire) {
        left().push((slot, Arc::clone(in_call)));
    }
}

/// Whether a new thread may start for `slot`: no thread left there is still in a call.
pub fn is_free(slot: Slot) -> bool {
    !left().iter().any(|(s, _)| *s == slot)
}

/// A thread of a loaded source.
#[derive(Debug)]
pub enum Thread<T> {
    /// Running; how to reach it.
    Up(T),
    /// Not started: the thread a dropped source left in this slot is still in its call.
    Waiting,
    /// Not running: not wanted, or it could not start (logged where it failed).
    Off,
}

impl<T> Thread<T> {
    /// Starts the thread of `slot` with `spawn` (`None`: could not start) unless the one a
    /// dropped source left there is still in a call.
    pub fn start(slot: Slot, spawn: impl FnOnce() -> Option<T>) -> Thread<T> {
        if !is_free(slot) {
            info!(
                gpu = slot.1,
                role = ?slot.0,
                "the thread from before NVML restarted is still in a library call; \
                 a new one starts when that call returns"
            );
            return Thread::Waiting;
        }
        spawn().map_or(Thread::Off, Thread::Up)
    }

    /// A waiting thread starts once its slot is free.
    pub fn retry(&mut self, slot: Slot, spawn: impl FnOnce() -> Option<T>) {
        if matches!(self, Thread::Waiting) && is_free(slot) {
            info!(gpu = slot.1, role = ?slot.0, "the stuck call returned; thread started");
            *self = spawn().map_or(Thread::Off, Thread::Up);
        }
    }

    /// The running thread, if any.
    pub fn up(&self) -> Option<&T> {
        match self {
            Thread::Up(t) => Some(t),
            Thread::Waiting | Thread::Off => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The record is process-wide: each test uses GPU indices of its own.

    #[test]
    fn a_slot_left_in_a_call_is_busy_until_the_call_returns() {
        let slot = (Role::Reader, 1000);
        let in_call = Arc::new(AtomicBool::new(true));
        assert!(is_free(slot));
        leave(slot, &in_call);
        assert!(!is_free(slot));
        assert!(is_free((Role::Gpm, 1000)), "other roles are not held");
        assert!(is_free((Role::Reader, 1001)), "other GPUs are not held");
        let mut t: Thread<u32> = Thread::start(slot, || Some(1));
        assert!(matches!(t, Thread::Waiting));
        t.retry(slot, || Some(2));
        assert!(matches!(t, Thread::Waiting));
        in_call.store(false, Ordering::Release);
        assert!(is_free(slot));
        t.retry(slot, || Some(3));
        assert_eq!(t.up(), Some(&3));
    }

    #[test]
    fn an_idle_thread_is_not_recorded() {
        let slot = (Role::Power, 1002);
        leave(slot, &Arc::new(AtomicBool::new(false)));
        assert!(is_free(slot));
        let t: Thread<u32> = Thread::start(slot, || None);
        assert!(
            matches!(t, Thread::Off),
            "a failed spawn is off, not retried"
        );
    }
}
