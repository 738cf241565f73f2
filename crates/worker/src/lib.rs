//! Short-lived worker processes for the work the daemon must not do in its own process: CUDA
//! probes (a CUDA context, once created, stays with its process on real drivers) and the
//! analysis of files other users drop (a hostile file must cost a child, never the daemon).
//!
//! [`run`] spawns a program (the exporter's own binary with a hidden subcommand), writes one
//! request to its stdin and returns what it printed on stdout, under [`Limits`]:
//! - a deadline, after which the whole process group is killed;
//! - a bound on stdout (exceeding it kills the group) and on the stderr kept;
//! - optional address-space and CPU-time limits (`setrlimit` in the child before `exec`), no
//!   core dumps, optionally the lowest CPU priority;
//! - the child is killed if the thread that spawned it dies (`PR_SET_PDEATHSIG`), and it is
//!   always reaped: no zombie, whatever happened.
//!
//! The pids of live workers are listed by [`is_ours`], so sources that list GPU processes can
//! leave the exporter's own workers out.
//!
//! Linux only: the exporter runs on Linux GPU nodes.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
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

enum Event {
    /// The child exited; it is a zombie until reaped, so its pid (and group) cannot be reused.
    Exited,
    /// stdout passed the bound.
    Overflow,
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
    let mut child = cmd.spawn().map_err(|source| WorkerError::Spawn {
        program: req.program.display().to_string(),
        source,
    })?;
    let pid = child.id();
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(pid);
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
    let (tx, rx) = mpsc::channel::<Event>();

    // stdin: written on its own thread, so a worker that never reads cannot block us.
    let stdin = child.stdin.take().map(|mut w| {
        let input = req.input.clone();
        std::thread::spawn(move || {
            let _ = w.write_all(&input);
        })
    });
    let stdout = child.stdout.take().map(|mut r| {
        let max = limits.max_output_bytes;
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if out.len() + n > max {
                            let _ = tx.send(Event::Overflow);
                            // Drain without keeping, so the child is not blocked on a full
                            // pipe before the kill arrives.
                            while matches!(r.read(&mut buf), Ok(n) if n > 0) {}
                            return None;
                        }
                        out.extend_from_slice(&buf[..n]);
                    }
                }
            }
            Some(out)
        })
    });
    let stderr = child.stderr.take().map(|mut r| {
        std::thread::spawn(move || {
            let mut kept: Vec<u8> = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * STDERR_TAIL_BYTES {
                    kept.drain(..kept.len() - STDERR_TAIL_BYTES);
                }
            }
            kept
        })
    });
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            wait_exited(pid);
            let _ = tx.send(Event::Exited);
        });
    }
    drop(tx);

    let deadline = started + limits.timeout;
    let mut killed: Option<WorkerError> = None;
    loop {
        let mut left = deadline.saturating_duration_since(Instant::now());
        if let Some(c) = cancel {
            if killed.is_none() && c.load(Ordering::Relaxed) {
                killed = Some(WorkerError::Cancelled);
                kill_group(pid);
            }
            left = left.min(CANCEL_POLL);
        }
        match rx.recv_timeout(left) {
            Ok(Event::Exited) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Ok(Event::Overflow) => {
                if killed.is_none() {
                    killed = Some(WorkerError::OutputTooLarge(limits.max_output_bytes));
                    kill_group(pid);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if killed.is_none() && Instant::now() >= deadline {
                    killed = Some(WorkerError::TimedOut(limits.timeout));
                    kill_group(pid);
                }
            }
        }
    }
    // The leader is a zombie now: its group id cannot have been reused, so killing the group
    // reaches only what it left behind (a grandchild holding the pipes open).
    kill_group(pid);
    let reaped = reap(pid);
    let wall = started.elapsed();
    if let Some(h) = stdin {
        let _ = h.join();
    }
    let output = stdout.and_then(|h| h.join().ok().flatten());
    let err_tail = stderr
        .and_then(|h| h.join().ok())
        .map(|b| printable_tail(&b))
        .unwrap_or_default();
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
        output: output.unwrap_or_default(),
        pid,
        wall,
        cpu: usage.0,
        peak_rss_bytes: usage.1,
    })
}

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

fn kill_group(pid: u32) {
    // SAFETY: kill takes no pointers. The group id is the worker's pid (setpgid in the
    // child), which stays reserved until we reap the worker.
    unsafe {
        libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
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
