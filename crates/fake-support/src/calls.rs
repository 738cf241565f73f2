//! What every fake does around an exported call: count it, add the CPU time it takes to a
//! busy total (benchmarks subtract the fake's own cost from the caller's), and keep a panic
//! from crossing the C boundary.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fake's call counter and busy time, in a `static` of the library.
#[derive(Debug, Default)]
pub struct CallStats {
    calls: AtomicU64,
    busy_ns: AtomicU64,
}

impl CallStats {
    /// Zero calls, zero busy time.
    pub const fn new() -> CallStats {
        CallStats {
            calls: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
        }
    }

    /// Counts one call.
    pub fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls counted since load or the last [`CallStats::reset`].
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// CPU time of the calling threads inside [`CallStats::guard`], nanoseconds.
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns.load(Ordering::Relaxed)
    }

    /// Sets the call counter and the busy time back to zero.
    pub fn reset(&self) {
        self.calls.store(0, Ordering::Relaxed);
        self.busy_ns.store(0, Ordering::Relaxed);
    }

    /// Runs an export's body and answers its code: `ok` for `Ok(())`, the error's code, or
    /// `panicked` when it panics. The thread CPU time it takes is added to the busy time; the
    /// call is not counted (a fake counts where its export starts, see [`CallStats::count`]).
    pub fn guard<C>(&self, ok: C, panicked: C, body: impl FnOnce() -> Result<(), C>) -> C {
        let start = thread_cpu_ns();
        let code = catch(ok, panicked, body);
        self.busy_ns
            .fetch_add(thread_cpu_ns().saturating_sub(start), Ordering::Relaxed);
        code
    }
}

/// Runs an export's body and answers its code: `ok` for `Ok(())`, the error's code, or
/// `panicked` when it panics (a panic must never unwind into the C caller).
pub fn catch<C>(ok: C, panicked: C, body: impl FnOnce() -> Result<(), C>) -> C {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ok,
        Ok(Err(code)) => code,
        Err(_) => panicked,
    }
}

/// CPU time of the calling thread, nanoseconds (0 if the clock is unavailable).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_answers_codes_and_adds_busy_time() {
        let stats = CallStats::new();
        assert_eq!(stats.guard(0, 99, || Ok(())), 0);
        assert_eq!(stats.guard(0, 99, || Err(7)), 7);
        assert_eq!(stats.calls(), 0, "guard does not count");
        let spun = stats.guard(0, 99, || {
            let start = thread_cpu_ns();
            while thread_cpu_ns().saturating_sub(start) < 2_000_000 {
                std::hint::black_box(start);
            }
            Ok(())
        });
        assert_eq!(spun, 0);
        assert!(stats.busy_ns() >= 2_000_000, "{}", stats.busy_ns());
        stats.count();
        stats.count();
        assert_eq!(stats.calls(), 2);
        stats.reset();
        assert_eq!((stats.calls(), stats.busy_ns()), (0, 0));
    }

    #[test]
    fn a_panic_answers_the_panic_code() {
        let stats = CallStats::new();
        let code = stats.guard(0, 99, || -> Result<(), i32> { panic!("in the body") });
        assert_eq!(code, 99);
    }
}
