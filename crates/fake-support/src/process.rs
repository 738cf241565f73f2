//! The scenario clock's source: how long this process has been running, the same in every
//! load of a fake within one process (a fake may be loaded, unloaded and loaded again).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// When process `pid` started, in clock ticks after boot (field 22 of `/proc/<pid>/stat`);
/// `None` where procfs does not say (no such process, no procfs).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing paren.
    let after = stat.get(stat.rfind(')')? + 2..)?;
    after.split(' ').nth(19)?.parse().ok()
}

/// How long this process has been running, from its start time in procfs and the boot clock;
/// the time since the first call in this load where either is missing.
pub fn process_age() -> Duration {
    fn from_proc() -> Option<Duration> {
        let start = start_ticks(std::process::id()).filter(|t| *t > 0)?;
        // SAFETY: sysconf has no preconditions.
        let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
            .ok()
            .filter(|hz| *hz > 0)?;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec.
        if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
            return None;
        }
        let now = Duration::new(
            u64::try_from(ts.tv_sec).ok()?,
            u32::try_from(ts.tv_nsec).ok()?,
        );
        let start = Duration::from_nanos(start.saturating_mul(1_000_000_000 / hz));
        Some(now.saturating_sub(start))
    }
    static FALLBACK: OnceLock<Instant> = OnceLock::new();
    from_proc().unwrap_or_else(|| FALLBACK.get_or_init(Instant::now).elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_start_and_a_growing_age() {
        assert!(start_ticks(std::process::id()).is_some_and(|t| t > 0));
        assert_eq!(start_ticks(u32::MAX), None);
        let a = process_age();
        std::thread::sleep(Duration::from_millis(30));
        let b = process_age();
        // The boot clock and the start tick agree to a tick (10 ms), so the age is the test's
        // running time, not hours of uptime; and it advances.
        assert!(b > a, "{a:?} then {b:?}");
        assert!(b < Duration::from_secs(3600), "{b:?}");
    }
}
