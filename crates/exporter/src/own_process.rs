//! The exporter's own process, as every Prometheus client library serves its own: the
//! `process_*` families of client_golang's process collector on Linux
//! (prometheus/client_golang, `process_collector_procfsenabled.go`; all but the two network
//! ones, see below), with its names, types, units and values, read from /proc with bounded
//! reads. The `exporter` source serves them (`collectors::exporter`), in every profile and on a
//! simulated node too: they are facts about this process, never simulated.
//!
//! What each is, as client_golang computes it (through prometheus/procfs):
//! - `process_cpu_seconds_total`: utime + stime of /proc/self/stat over the clock tick
//!   (`sysconf(_SC_CLK_TCK)`; procfs assumes 100). Worker processes are not included.
//! - `process_virtual_memory_bytes`, `process_resident_memory_bytes`: vsize, and rss times
//!   the page size, of /proc/self/stat.
//! - `process_start_time_seconds`: btime of /proc/stat (whole seconds) plus starttime over the
//!   clock tick; read until it succeeds once, then kept (it cannot change).
//! - `process_open_fds`: the entries of /proc/self/fd. Linux 6.2 and later give the count as the
//!   directory's size (procfs' fast path, one `stat`); an older kernel's directory is walked,
//!   and the walk stops at the soft limit + 1 (at most [`FD_WALK_CEILING`] + 1), so a leak
//!   never costs more than that per poll; the walk's own descriptor is not counted.
//! - `process_max_fds`, `process_virtual_memory_max_bytes`: the soft limits "Max open files"
//!   (RLIMIT_NOFILE) and "Max address space" (RLIMIT_AS) of /proc/self/limits. "unlimited" is
//!   served as 18446744073709551615 (2^64 - 1, RLIM_INFINITY), as client_golang does: procfs
//!   parses it so since v0.3.0 (2021; before, client_golang served -1).
//!
//! A reading that fails is left out, never served as 0 (client_golang without ReportErrors
//! does the same). client_golang also serves `process_network_{receive,transmit}_bytes_total`
//! from /proc/self/net/netstat, which counts the whole network namespace, not the process:
//! left out here.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use dgx_pixels_metrics::{Metric, Sample};
use dgx_pixels_settings::file::{read_untrusted, Untrusted};

/// Most bytes read of /proc/self/stat: one line of 52 numbers and a name of at most 15 bytes
/// (about 350 bytes).
const STAT_MAX_BYTES: usize = 4096;
/// Most bytes read of /proc/self/limits: a header and 16 lines of 80 columns.
const LIMITS_MAX_BYTES: usize = 8192;
/// Most bytes read of /proc/stat: its `intr` line, before `btime`, counts every interrupt
/// number (tens of KiB on a large node).
const PROC_STAT_MAX_BYTES: usize = 1 << 20;
/// Most entries of /proc/self/fd walked on a kernel that does not count them (before 6.2).
pub const FD_WALK_CEILING: u64 = 65_536;

/// Reads the `process_*` families of one process's /proc directory.
#[derive(Debug)]
pub struct OwnProcess {
    /// `/proc/self` (a directory of fixed files in tests).
    dir: PathBuf,
    /// `/proc/stat`, for btime.
    proc_stat: PathBuf,
    /// Whether `dir` is procfs: the size of its `fd` directory is then its count of entries
    /// (Linux 6.2 and later, else 0), and a walk of it lists the walk's own descriptor.
    procfs: bool,
    /// Clock ticks per second (`sysconf(_SC_CLK_TCK)`); `None` leaves out CPU and start time.
    ticks_per_second: Option<f64>,
    /// The page size (`sysconf(_SC_PAGESIZE)`); `None` leaves out resident memory.
    page_size: Option<f64>,
    /// The start time, once read.
    start_time: Option<f64>,
}

impl OwnProcess {
    /// This process.
    pub fn new() -> OwnProcess {
        OwnProcess {
            dir: PathBuf::from("/proc/self"),
            proc_stat: PathBuf::from("/proc/stat"),
            procfs: true,
            ticks_per_second: sysconf(libc::_SC_CLK_TCK),
            page_size: sysconf(libc::_SC_PAGESIZE),
            start_time: None,
        }
    }

    /// The samples of every reading that succeeds now.
    pub fn samples(&mut self) -> Vec<Sample> {
        let none: [&str; 0] = [];
        let mut out = Vec::with_capacity(7);
        let mut push = |metric, value: Option<f64>| {
            if let Some(v) = value {
                out.push(Sample::new(metric, none, v));
            }
        };
        let stat = read_bounded(&self.dir.join("stat"), STAT_MAX_BYTES)
            .ok()
            .and_then(|b| parse_stat(&b));
        let limits = read_bounded(&self.dir.join("limits"), LIMITS_MAX_BYTES)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .map(|t| parse_limits(&t))
            .unwrap_or_default();
        let ticks = self.ticks_per_second;
        push(
            Metric::OwnCpuSeconds,
            stat.zip(ticks)
                .map(|(s, t)| (s.utime as f64 + s.stime as f64) / t),
        );
        push(Metric::OwnOpenFds, self.open_fds(limits.open_files));
        push(Metric::OwnMaxFds, limits.open_files.map(|v| v as f64));
        push(Metric::OwnVirtualMemory, stat.map(|s| s.vsize as f64));
        push(
            Metric::OwnVirtualMemoryMax,
            limits.address_space.map(|v| v as f64),
        );
        push(
            Metric::OwnResidentMemory,
            stat.zip(self.page_size).map(|(s, p)| s.rss as f64 * p),
        );
        if self.start_time.is_none() {
            self.start_time = stat.zip(ticks).and_then(|(s, t)| {
                let btime = read_bounded(&self.proc_stat, PROC_STAT_MAX_BYTES)
                    .ok()
                    .and_then(|b| parse_btime(&String::from_utf8(b).ok()?))?;
                Some(btime as f64 + s.starttime as f64 / t)
            });
        }
        push(Metric::OwnStartTime, self.start_time);
        out
    }

    /// Open descriptors: the kernel's count, else a walk that stops past the soft limit.
    fn open_fds(&self, max_fds: Option<u64>) -> Option<f64> {
        let fd = self.dir.join("fd");
        if self.procfs {
            let size = fs::metadata(&fd).ok()?.len();
            if size > 0 {
                return Some(size as f64);
            }
        }
        let cap = max_fds.unwrap_or(FD_WALK_CEILING).min(FD_WALK_CEILING) + 1;
        // On procfs the walk's own descriptor is one of the entries: one more to walk, and
        // not counted.
        let own = u64::from(self.procfs);
        let walked = count_entries(&fd, cap + own).ok()?;
        Some(walked.saturating_sub(own) as f64)
    }
}

impl Default for OwnProcess {
    fn default() -> OwnProcess {
        OwnProcess::new()
    }
}

/// `sysconf(name)`, `None` unless positive.
fn sysconf(name: libc::c_int) -> Option<f64> {
    // SAFETY: sysconf only reads a system constant; any name is allowed (-1 when unknown).
    let v = unsafe { libc::sysconf(name) };
    (v > 0).then_some(v as f64)
}

/// A /proc file through the project's one bounded reader, as an attribute (its stated size
/// is 0, so only the byte bound applies): a file over `max` is refused whole, never parsed in
/// part.
fn read_bounded(path: &Path, max: usize) -> io::Result<Vec<u8>> {
    read_untrusted(path, &Untrusted::attribute(max as u64))
}

/// Entries of `dir`, counting no further than `cap`.
fn count_entries(dir: &Path, cap: u64) -> io::Result<u64> {
    let mut n = 0;
    for entry in fs::read_dir(dir)? {
        entry?;
        n += 1;
        if n >= cap {
            break;
        }
    }
    Ok(n)
}

/// The fields of /proc/PID/stat read here, numbered as in proc(5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// (14) CPU time in user mode, in clock ticks.
    pub utime: u64,
    /// (15) CPU time in kernel mode, in clock ticks.
    pub stime: u64,
    /// (22) Start time after boot, in clock ticks.
    pub starttime: u64,
    /// (23) Virtual memory size, in bytes.
    pub vsize: u64,
    /// (24) Resident set size, in pages.
    pub rss: u64,
}

/// Parses /proc/PID/stat: `PID (COMM) STATE PPID ...`. COMM is the process name as set, any 15
/// bytes, spaces, parentheses and bytes that are no UTF-8 included, so the fields start after
/// the line's *last* `)` (what follows it is numbers and the state letter). `None` for a line
/// cut short or malformed.
pub fn parse_stat(bytes: &[u8]) -> Option<Stat> {
    let open = bytes.iter().position(|&b| b == b'(')?;
    let close = bytes.iter().rposition(|&b| b == b')')?;
    let pid = std::str::from_utf8(&bytes[..open]).ok()?;
    if close < open || pid.trim_end().parse::<u32>().is_err() || !pid.ends_with(' ') {
        return None;
    }
    let rest = std::str::from_utf8(&bytes[close + 1..]).ok()?;
    if !rest.starts_with(' ') {
        return None;
    }
    // fields[0] is field 3, the state.
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let state = fields.first()?;
    if state.len() != 1 || !state.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
        vsize: field(23)?,
        rss: field(24)?,
    })
}

/// The soft limits of /proc/PID/limits read here; "unlimited" is `u64::MAX` (RLIM_INFINITY).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// "Max open files" (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// "Max address space" (RLIMIT_AS), in bytes.
    pub address_space: Option<u64>,
}

/// Parses /proc/PID/limits: a header, then `NAME  SOFT  HARD  [UNITS]` per line, the name in
/// words. A line whose soft limit is neither a number nor "unlimited" leaves its limit out;
/// the first line of a name counts.
pub fn parse_limits(text: &str) -> Limits {
    let soft = |rest: &str| -> Option<u64> {
        if !rest.starts_with(' ') {
            return None;
        }
        match rest.split_ascii_whitespace().next()? {
            "unlimited" => Some(u64::MAX),
            v => v.parse().ok(),
        }
    };
    let mut limits = Limits::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Max open files") {
            limits.open_files = limits.open_files.or_else(|| soft(rest));
        } else if let Some(rest) = line.strip_prefix("Max address space") {
            limits.address_space = limits.address_space.or_else(|| soft(rest));
        }
    }
    limits
}

/// The boot time of /proc/stat's `btime` line, in whole seconds since the epoch.
pub fn parse_btime(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests;
