//! Workers own their whole process tree: a descendant that leaves the worker's session and
//! process group (`setsid`), is orphaned (a double fork), holds stdout open and ignores SIGTERM
//! neither holds [`run`] past the worker's deadline nor outlives the worker. This test process
//! adopts orphans as the daemon does ([`adopt_orphans`]); it starts no other children.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dgx_pixels_worker::{adopt_orphans, run, Limits, Request, WorkerError};

fn sh(script: &str, timeout: Duration) -> Request {
    Request {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: Vec::new(),
        input: Vec::new(),
        limits: Limits {
            timeout,
            ..Limits::default()
        },
    }
}

/// A file for the escapees' pids.
fn pid_file(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("worker-tree-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// A descendant that calls setsid(), is orphaned by its parent's exit, ignores SIGTERM and
/// SIGHUP and holds stdout and stderr open for a minute, its pid (and its sleeping child's)
/// appended to `file`.
fn escapee(file: &Path) -> String {
    let f = file.display();
    format!("setsid -f sh -c 'trap \"\" TERM HUP; echo $$ >>{f}; sleep 60 & echo $! >>{f}; wait' ")
}

fn pids(file: &Path) -> Vec<u32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// Whether `pid` is gone (reaped) within a second.
fn gone_soon(pid: u32) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(1) {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Waits until `file` lists `n` pids (the escapees started), at most 5 s.
fn started(file: &Path, n: usize) -> Vec<u32> {
    let t0 = Instant::now();
    while pids(file).len() < n && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    pids(file)
}

#[test]
fn a_setsid_descendant_holding_stdout_neither_holds_the_run_nor_outlives_the_worker() {
    adopt_orphans().unwrap();
    let file = pid_file("exits");
    // The worker answers and exits at once; its escapee sleeps on with stdout open. The
    // worker waits for the escapee to have started so the pids are known.
    let script = format!(
        "{} ; while [ $(wc -w <{f} 2>/dev/null || echo 0) -lt 2 ]; do sleep 0.01; done; echo reply",
        escapee(&file),
        f = file.display()
    );
    let t0 = Instant::now();
    let done = run(&sh(&script, Duration::from_secs(10))).unwrap();
    let took = t0.elapsed();
    assert_eq!(done.output, b"reply\n");
    assert!(
        took < Duration::from_secs(3),
        "held by the escapee: {took:?}"
    );
    let escaped = started(&file, 2);
    assert_eq!(escaped.len(), 2, "{escaped:?}");
    for pid in escaped {
        assert!(gone_soon(pid), "escapee {pid} outlived the worker");
    }
    let _ = std::fs::remove_file(&file);
}

#[test]
fn a_worker_past_its_deadline_takes_its_escaped_descendants_with_it() {
    adopt_orphans().unwrap();
    let file = pid_file("deadline");
    let timeout = Duration::from_millis(500);
    // The worker itself ignores SIGTERM and keeps running.
    let script = format!("trap '' TERM; {} ; sleep 60", escapee(&file));
    let t0 = Instant::now();
    let err = run(&sh(&script, timeout)).unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(err, WorkerError::TimedOut(_)), "{err}");
    assert!(took >= timeout, "{took:?}");
    assert!(took < timeout + Duration::from_secs(2), "{took:?}");
    let escaped = started(&file, 2);
    assert_eq!(escaped.len(), 2, "{escaped:?}");
    for pid in escaped {
        assert!(gone_soon(pid), "escapee {pid} outlived the deadline");
    }
    let _ = std::fs::remove_file(&file);
}

#[test]
fn an_escaped_fork_loop_is_killed_to_the_last_process() {
    adopt_orphans().unwrap();
    let file = pid_file("loop");
    let f = file.display();
    // For 3 s an escaped shell starts a sleeper after a sleeper; the worker is killed at 500 ms.
    let script = format!(
        "setsid -f sh -c 'trap \"\" TERM HUP; echo $$ >>{f}; end=$(($(date +%s)+3)); \
         while [ $(date +%s) -lt $end ]; do sleep 60 & echo $! >>{f}; done' ; sleep 60"
    );
    let timeout = Duration::from_millis(500);
    let t0 = Instant::now();
    let err = run(&sh(&script, timeout)).unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(err, WorkerError::TimedOut(_)), "{err}");
    assert!(took < timeout + Duration::from_secs(3), "{took:?}");
    // Nothing of the loop starts anything after the run.
    let escaped = pids(&file);
    assert!(escaped.len() >= 2, "the loop ran: {escaped:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(pids(&file).len(), escaped.len(), "the loop went on");
    for pid in escaped {
        assert!(gone_soon(pid), "{pid} of the loop is alive");
    }
    let _ = std::fs::remove_file(&file);
}

#[test]
fn kill_all_ends_running_workers_and_their_escapees() {
    adopt_orphans().unwrap();
    let file = pid_file("kill-all");
    let script = format!("{} ; sleep 60", escapee(&file));
    let h = std::thread::spawn(move || run(&sh(&script, Duration::from_secs(30))));
    let escaped = started(&file, 2);
    assert_eq!(escaped.len(), 2, "{escaped:?}");
    let t0 = Instant::now();
    // As on the daemon's exit.
    dgx_pixels_worker::kill_all();
    let result = h.join().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(
        matches!(result, Err(WorkerError::Signalled { signal: 9, .. })),
        "{result:?}"
    );
    for pid in escaped {
        assert!(gone_soon(pid), "escapee {pid} outlived kill_all");
    }
    let _ = std::fs::remove_file(&file);
}
