//! Short-lived worker processes for the work the daemon must not do in its own process: CUDA
//! probes (a CUDA context, once created, stays with its process on real drivers) and the
//! analysis of files other users drop (a hostile file must cost a child, never the daemon).
//!
//! [`run`] spawns a program (the exporter's own binary with a hidden subcommand), writes one
//! request to its stdin and returns what it printed on stdout, under [`Limits`]:
//! - a deadline, after which the worker and every descendant of it are killed;
//! - a bound on stdout (exceeding it kills the worker's tree) and on the stderr kept; the pipes
//!   are read with `poll` under the deadline, never by waiting for an EOF that a descendant
//!   holding them could hold back;
//! - the worker is a child subreaper: orphans of its tree (a `setsid()` and a double fork) stay
//!   under it, so the kill at the deadline (the worker stopped, then its descendants found by
//!   their parent links in `/proc` and SIGKILLed in rounds until none is left) reaches them;
//!   what outlives a worker that exits on its own is handed to the calling process when that
//!   process has called [`adopt_orphans`] (the daemon does), and killed and reaped after each
//!   run and by [`kill_all`] on exit;
//! - optional address-space and CPU-time limits (`setrlimit` in the child before `exec`), no
//!   core dumps, optionally the lowest CPU priority;
//! - the child is killed if the thread that spawned it dies (`PR_SET_PDEATHSIG`), and it is
//!   always reaped: no zombie, whatever happened.
//!
//! The worker side writes its reply on [`reply_channel`], so that what libraries print on
//! stdout goes to stderr instead.
//!
//! The pids of live workers are listed by [`is_ours`], so sources that list GPU processes can
//! leave the exporter's own workers out.
//!
//! Linux only: the exporter runs on Linux GPU nodes.
#![deny(missing_docs)]

mod pipes;
mod tree;

use pipes::{exit_signal, poll, pollfd, push, read_available, set_nonblocking, write_available};
pub use tree::{adopt_orphans, kill_all};
use tree::{kill_group, kill_tree, sweep_orphans};

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How much of a worker's stderr is kept (the end of it), for the error message.
pub const STDERR_TAIL_BYTES: usize = 2048;

/// What a worker may cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline from spawn; the worker's process group is killed after it.
    pub timeout: Duration,
    /// Most bytes the worker may print on stdout; more kills it.
    pub max_output_bytes: usize,
    /// `RLIMIT_AS`, bytes. Not for CUDA workers: the driver reserves far more address space
    /// than it uses, and `cuInit` fails under a tight limit.
    pub max_address_space_bytes: Option<u64>,
    /// `RLIMIT_CPU`, seconds of CPU time (SIGXCPU, then SIGKILL one second later).
    pub max_cpu_seconds: Option<u64>,
    /// Run at nice 19 and `SCHED_IDLE`.
    pub lowest_priority: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(30),
            max_output_bytes: 1 << 20,
            max_address_space_bytes: None,
            max_cpu_seconds: None,
            lowest_priority: false,
        }
    }
}

/// One worker to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The program (normally [`std::env::current_exe`]).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables set on top of the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// Written to its stdin, which is then closed.
    pub input: Vec<u8>,
    /// Its limits.
    pub limits: Limits,
}

/// A worker that exited with status 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// What it printed on stdout.
    pub output: Vec<u8>,
    /// Its pid (gone now).
    pub pid: u32,
    /// Wall time from spawn to exit.
    pub wall: Duration,
    /// CPU time it used (user + system).
    pub cpu: Duration,
    /// Its peak resident set size, bytes (`ru_maxrss`).
    pub peak_rss_bytes: u64,
}

/// Why a worker gave no result. Every variant means the worker is gone and reaped.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The program could not be started.
    #[error("could not start the worker {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// It ran past its deadline and was killed.
    #[error("worker killed: still running after its deadline of {0:?}")]
    TimedOut(Duration),
    /// It printed more than allowed and was killed.
    #[error("worker killed: it printed more than {0} bytes")]
    OutputTooLarge(usize),
    /// It exited with a non-zero status.
    #[error("worker exited with status {code}{}", tail(.stderr))]
    Failed {
        /// Exit status.
        code: i32,
        /// The end of its stderr.
        stderr: String,
    },
    /// A signal ended it (a crash, or a resource limit: SIGKILL/SIGXCPU for CPU time,
    /// SIGSEGV/SIGABRT when out of address space).
    #[error("worker killed by signal {signal}{}", tail(.stderr))]
    Signalled {
        /// The signal number.
        signal: i32,
        /// The end of its stderr.
        stderr: String,
    },
    /// Waiting for it failed (should not happen; the worker was killed and reaped).
    #[error("worker: {0}")]
    Io(std::io::Error),
    /// The caller cancelled it ([`run_cancellable`]); it was killed.
    #[error("worker killed: cancelled")]
    Cancelled,
}

fn tail(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        String::new()
    } else {
        format!(": {s}")
    }
}

impl WorkerError {
    /// A short stable name for an outcome label: `timeout`, `output_too_large`, `crashed`,
    /// `failed`, `spawn_failed`, `cancelled`.
    pub fn kind(&self) -> &'static str {
        match self {
            WorkerError::Spawn { .. } => "spawn_failed",
            WorkerError::TimedOut(_) => "timeout",
            WorkerError::OutputTooLarge(_) => "output_too_large",
            WorkerError::Failed { .. } | WorkerError::Io(_) => "failed",
            WorkerError::Signalled { .. } => "crashed",
            WorkerError::Cancelled => "cancelled",
        }
    }
}

static LIVE: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
/// Held while a worker is spawned and listed, and while orphans are swept.
static SPAWN: Mutex<()> = Mutex::new(());
/// Set by [`adopt_orphans`]: this process is a subreaper and its children other than live
/// workers are escaped worker descendants.
static ADOPTING: AtomicBool = AtomicBool::new(false);

/// Whether `pid` is a worker this process started and has not reaped yet.
pub fn is_ours(pid: u32) -> bool {
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(&pid)
}

/// Pids of the workers alive now.
pub fn live_pids() -> Vec<u32> {
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .copied()
        .collect()
}

/// Runs one worker to the end. Blocks the calling thread until the worker exited or was
/// killed and reaped (at most `timeout` plus the time a SIGKILL takes).
pub fn run(req: &Request) -> Result<Finished, WorkerError> {
    run_inner(req, None)
}

/// [`run`], and the worker is killed (within [`CANCEL_POLL`]) once `cancel` is set:
/// [`WorkerError::Cancelled`].
pub fn run_cancellable(req: &Request, cancel: &AtomicBool) -> Result<Finished, WorkerError> {
    run_inner(req, Some(cancel))
}

/// How often a cancellable run looks at its flag.
pub const CANCEL_POLL: Duration = Duration::from_millis(50);

fn run_inner(req: &Request, cancel: Option<&AtomicBool>) -> Result<Finished, WorkerError> {
    let limits = req.limits.clone();
    let mut cmd = Command::new(&req.program);
    cmd.args(&req.args)
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let pre = limits.clone();
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe system calls (setpgid, prctl, getppid, setrlimit, setpriority,
    // sched_setscheduler, _exit) on values captured by copy.
    unsafe {
        cmd.pre_exec(move || in_child(&pre, parent));
    }
    let started = Instant::now();
    // Spawned and listed under the lock the orphan sweep holds: the sweep never takes a worker
    // just started for an orphan.
    let (mut child, pid) = {
        let _spawning = SPAWN.lock().unwrap_or_else(PoisonError::into_inner);
        let child = cmd.spawn().map_err(|source| WorkerError::Spawn {
            program: req.program.display().to_string(),
            source,
        })?;
        let pid = child.id();
        LIVE.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(pid);
        (child, pid)
    };
    let result = supervise(&mut child, pid, req, started, cancel);
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&pid);
    result
}

fn supervise(
    child: &mut std::process::Child,
    pid: u32,
    req: &Request,
    started: Instant,
    cancel: Option<&AtomicBool>,
) -> Result<Finished, WorkerError> {
    let limits = &req.limits;
    // The pipes are read and written here, with poll and a deadline, never by a blocking read
    // that waits for an EOF: a descendant that escaped the group (setsid) and holds a pipe open
    // must not hold this thread past the worker's end.
    let mut stdin = child.stdin.take().map(OwnedFd::from);
    let mut stdout = child.stdout.take().map(OwnedFd::from);
    let mut stderr = child.stderr.take().map(OwnedFd::from);
    for fd in [&stdin, &stdout, &stderr].into_iter().flatten() {
        set_nonblocking(fd);
    }
    if req.input.is_empty() {
        stdin = None;
    }
    let exited = exit_signal(pid).map_err(|e| {
        // Without the exit pipe the worker cannot be watched: end it now.
        kill_tree(pid);
        let _ = reap(pid);
        WorkerError::Io(e)
    })?;

    let deadline = started + limits.timeout;
    let mut written = 0usize;
    let mut out: Vec<u8> = Vec::new();
    let mut err: Vec<u8> = Vec::new();
    let mut killed: Option<WorkerError> = None;
    loop {
        let now = Instant::now();
        if killed.is_none() {
            if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                killed = Some(WorkerError::Cancelled);
            } else if now >= deadline {
                killed = Some(WorkerError::TimedOut(limits.timeout));
            }
            if killed.is_some() {
                kill_tree(pid);
            }
        }
        let mut wait = if killed.is_some() {
            // Killed: only its exit is awaited (as long as a SIGKILL takes).
            KILLED_POLL
        } else {
            deadline.saturating_duration_since(now)
        };
        if cancel.is_some() {
            wait = wait.min(CANCEL_POLL);
        }
        let mut fds = vec![pollfd(&exited, libc::POLLIN)];
        let at_stdout = stdout.as_ref().map(|f| push(&mut fds, f, libc::POLLIN));
        let at_stderr = stderr.as_ref().map(|f| push(&mut fds, f, libc::POLLIN));
        let at_stdin = stdin.as_ref().map(|f| push(&mut fds, f, libc::POLLOUT));
        poll(&mut fds, wait);
        if at_stdout.is_some_and(|i| fds[i].revents != 0) {
            let open = read_available(stdout.as_ref(), &mut out, limits.max_output_bytes, false);
            if out.len() > limits.max_output_bytes {
                out.clear();
                stdout = None;
                if killed.is_none() {
                    killed = Some(WorkerError::OutputTooLarge(limits.max_output_bytes));
                    kill_tree(pid);
                }
            } else if !open {
                stdout = None;
            }
        }
        if at_stderr.is_some_and(|i| fds[i].revents != 0)
            && !read_available(stderr.as_ref(), &mut err, 0, true)
        {
            stderr = None;
        }
        if at_stdin.is_some_and(|i| fds[i].revents != 0)
            && !write_available(stdin.as_ref(), &req.input, &mut written)
        {
            stdin = None;
        }
        if fds[0].revents != 0 {
            break;
        }
    }
    // The worker is a zombie now: its pid and group id cannot be reused until it is reaped.
    // What it wrote before it exited is in the pipes: take it without waiting for an EOF.
    if killed.is_none() {
        let _ = read_available(stdout.as_ref(), &mut out, limits.max_output_bytes, false);
        if out.len() > limits.max_output_bytes {
            killed = Some(WorkerError::OutputTooLarge(limits.max_output_bytes));
        }
    }
    let _ = read_available(stderr.as_ref(), &mut err, 0, true);
    drop((stdin, stdout, stderr));
    // What the worker left behind: its group, and the orphans of its tree, which were handed to
    // this process (a subreaper, see `adopt_orphans`) when the worker died.
    kill_group(pid);
    sweep_orphans();
    let reaped = reap(pid);
    let wall = started.elapsed();
    let err_tail = printable_tail(&err);
    // `child` was reaped by `reap`; dropping a `Child` never waits, so nothing waits twice.
    if let Some(e) = killed {
        return Err(e);
    }
    let (status, usage) = reaped.map_err(WorkerError::Io)?;
    if libc::WIFSIGNALED(status) {
        return Err(WorkerError::Signalled {
            signal: libc::WTERMSIG(status),
            stderr: err_tail,
        });
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    if code != 0 {
        return Err(WorkerError::Failed {
            code,
            stderr: err_tail,
        });
    }
    Ok(Finished {
        output: out,
        pid,
        wall,
        cpu: usage.0,
        peak_rss_bytes: usage.1,
    })
}

/// How often a killed worker's exit is looked for (the exit pipe answers at once; this bounds
/// a missed wake-up).
const KILLED_POLL: Duration = Duration::from_millis(100);

/// Blocks until `pid` has exited, leaving it a zombie (`WNOWAIT`).
fn wait_exited(pid: u32) {
    loop {
        // SAFETY: siginfo_t is plain data; waitid writes into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid with a valid pointer; WNOWAIT leaves the child unreaped.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Reaps `pid`: its wait status and (CPU time, peak RSS bytes).
fn reap(pid: u32) -> std::io::Result<(i32, (Duration, u64))> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data; wait4 writes into both valid pointers.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
        if r == pid as libc::pid_t {
            let tv = |t: libc::timeval| {
                Duration::from_secs(t.tv_sec.max(0) as u64)
                    + Duration::from_micros(t.tv_usec.max(0) as u64)
            };
            let cpu = tv(usage.ru_utime) + tv(usage.ru_stime);
            let rss = u64::try_from(usage.ru_maxrss)
                .unwrap_or(0)
                .saturating_mul(1024);
            return Ok((status, (cpu, rss)));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// The child side, between fork and exec: only async-signal-safe calls.
fn in_child(limits: &Limits, parent: u32) -> std::io::Result<()> {
    // SAFETY (all calls below): plain system calls on integers and stack values.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Dies with the thread that spawned it; if that is already gone, do not run at all.
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != parent as libc::pid_t {
            libc::_exit(125);
        }
        // Orphans of the worker's tree (a setsid() and a double fork) stay under the worker
        // while it lives, where the deadline's kill finds them. Kept across exec.
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
        let set = |res, soft: u64, hard: u64| {
            let lim = libc::rlimit {
                rlim_cur: soft as libc::rlim_t,
                rlim_max: hard as libc::rlim_t,
            };
            if libc::setrlimit(res, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        };
        set(libc::RLIMIT_CORE, 0, 0)?;
        if let Some(bytes) = limits.max_address_space_bytes {
            set(libc::RLIMIT_AS, bytes, bytes)?;
        }
        if let Some(secs) = limits.max_cpu_seconds {
            set(libc::RLIMIT_CPU, secs, secs.saturating_add(1))?;
        }
        if limits.lowest_priority {
            libc::setpriority(libc::PRIO_PROCESS, 0, 19);
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        }
    }
    Ok(())
}

/// The last [`STDERR_TAIL_BYTES`] of `bytes` as one printable line: control characters become
/// spaces, so a worker cannot forge log lines.
fn printable_tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
    String::from_utf8_lossy(&bytes[start..])
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

/// The worker side, first thing in `main`: the stdout the daemon reads, kept on a private
/// descriptor (close-on-exec) for the reply alone, while descriptor 1 becomes a copy of stderr.
/// Whatever the libraries loaded later print on stdout (NCCL's debug output goes there by
/// default) then lands in the worker's bounded stderr tail and can never be taken for, or break,
/// the reply; processes the worker starts inherit the stderr copy, not the reply channel.
pub fn reply_channel() -> std::io::Result<std::fs::File> {
    // SAFETY: fcntl and dup2 on the standard descriptors; the new descriptor is owned by the
    // returned File only.
    unsafe {
        let fd = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let reply = std::fs::File::from_raw_fd(fd);
        if libc::dup2(2, 1) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(reply)
    }
}

/// The worker side: reads the request from stdin, at most `max` bytes (more is an error).
pub fn read_request(max: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    std::io::stdin()
        .lock()
        .take(max as u64 + 1)
        .read_to_end(&mut buf)?;
    if buf.len() > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("request larger than {max} bytes"),
        ));
    }
    Ok(buf)
}
