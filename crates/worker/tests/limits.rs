//! The worker facility against real processes (`/bin/sh`): every way a worker can end is an
//! outcome, and every worker is reaped.

use std::path::Path;
use std::time::{Duration, Instant};

use dgx_pixels_worker::{is_ours, live_pids, run, Limits, Request, WorkerError};

fn sh(script: &str, limits: Limits) -> Request {
    Request {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![("WORKER_TEST".into(), "yes".into())],
        input: Vec::new(),
        limits,
    }
}

fn quick() -> Limits {
    Limits {
        timeout: Duration::from_secs(10),
        ..Limits::default()
    }
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn output_input_and_environment_round_trip() {
    let mut req = sh("cat; echo \" $WORKER_TEST\"", quick());
    req.input = b"request".to_vec();
    let done = run(&req).unwrap();
    assert_eq!(String::from_utf8(done.output).unwrap(), "request yes\n");
    assert!(gone(done.pid), "the worker is reaped");
    assert!(!is_ours(done.pid));
    assert!(done.peak_rss_bytes > 0);
}

#[test]
fn a_worker_past_its_deadline_is_killed_with_its_children_and_reaped() {
    for timeout_ms in [100u64, 400] {
        let limits = Limits {
            timeout: Duration::from_millis(timeout_ms),
            ..Limits::default()
        };
        let t0 = Instant::now();
        // A grandchild that holds stdout open, and a leader that ignores SIGTERM.
        let err = run(&sh("trap '' TERM; sleep 60 & sleep 60", limits)).unwrap_err();
        let took = t0.elapsed();
        assert!(
            matches!(err, WorkerError::TimedOut(d) if d == Duration::from_millis(timeout_ms)),
            "{err}"
        );
        assert_eq!(err.kind(), "timeout");
        assert!(took >= Duration::from_millis(timeout_ms), "{took:?}");
        assert!(
            took < Duration::from_millis(timeout_ms) + Duration::from_secs(5),
            "{took:?}"
        );
    }
}

#[test]
fn a_leader_that_exits_leaves_no_grandchild_holding_the_pipes() {
    let t0 = Instant::now();
    let done = run(&sh("sleep 60 & echo $!", quick())).unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "not blocked by the grandchild"
    );
    let grandchild: u32 = String::from_utf8(done.output)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Killed with the group; its new parent reaps it shortly after.
    let t0 = Instant::now();
    while !gone(grandchild) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
    assert!(
        gone(grandchild) || state.contains(") Z"),
        "grandchild still running: {state}"
    );
}

#[test]
fn output_past_the_bound_kills_the_worker() {
    for max in [10usize, 100_000] {
        let limits = Limits {
            max_output_bytes: max,
            ..quick()
        };
        let err = run(&sh("yes", limits)).unwrap_err();
        assert!(
            matches!(err, WorkerError::OutputTooLarge(m) if m == max),
            "{err}"
        );
    }
    // Exactly the bound is fine.
    let limits = Limits {
        max_output_bytes: 6,
        ..quick()
    };
    assert_eq!(run(&sh("printf 123456", limits)).unwrap().output, b"123456");
}

#[test]
fn exit_status_and_signals_are_outcomes_with_a_printable_stderr_tail() {
    let err = run(&sh("printf 'bad\\nthing\\033[31m' >&2; exit 3", quick())).unwrap_err();
    match &err {
        WorkerError::Failed { code, stderr } => {
            assert_eq!(*code, 3);
            assert!(
                !stderr.contains('\n') && !stderr.contains('\u{1b}'),
                "{stderr:?}"
            );
            assert!(stderr.starts_with("bad thing"), "{stderr:?}");
        }
        e => panic!("{e}"),
    }
    for (sig, num) in [("SEGV", 11), ("ABRT", 6), ("KILL", 9)] {
        let err = run(&sh(&format!("kill -{sig} $$"), quick())).unwrap_err();
        assert!(
            matches!(err, WorkerError::Signalled { signal, .. } if signal == num),
            "{err}"
        );
        assert_eq!(err.kind(), "crashed");
    }
}

#[test]
fn stderr_is_bounded() {
    let err = run(&sh(
        "head -c 1000000 /dev/zero | tr '\\0' x >&2; exit 1",
        quick(),
    ))
    .unwrap_err();
    let WorkerError::Failed { stderr, .. } = err else {
        panic!("{err}")
    };
    assert!(
        stderr.len() <= dgx_pixels_worker::STDERR_TAIL_BYTES,
        "{}",
        stderr.len()
    );
}

#[test]
fn resource_limits_apply_in_the_child() {
    let limits = Limits {
        max_address_space_bytes: Some(512 << 20),
        max_cpu_seconds: Some(7),
        ..quick()
    };
    let out = run(&sh("ulimit -v; ulimit -t; ulimit -c", limits))
        .unwrap()
        .output;
    assert_eq!(String::from_utf8(out).unwrap(), "524288\n7\n0\n");
    // A busy loop is stopped by the CPU limit (SIGXCPU, or SIGKILL at the hard limit).
    let limits = Limits {
        max_cpu_seconds: Some(1),
        ..quick()
    };
    let err = run(&sh("while :; do :; done", limits)).unwrap_err();
    assert!(
        matches!(err, WorkerError::Signalled { signal, .. } if signal == libc_sigxcpu() || signal == 9),
        "{err}"
    );
}

fn libc_sigxcpu() -> i32 {
    24
}

#[test]
fn lowest_priority_is_nice_19() {
    let limits = Limits {
        lowest_priority: true,
        ..quick()
    };
    // Field 19 of /proc/self/stat is the nice value.
    let out = run(&sh("cut -d' ' -f19 /proc/self/stat", limits))
        .unwrap()
        .output;
    assert_eq!(String::from_utf8(out).unwrap().trim(), "19");
}

#[test]
fn a_missing_program_is_a_spawn_error() {
    let mut req = sh("true", quick());
    req.program = "/nonexistent/worker".into();
    let err = run(&req).unwrap_err();
    assert_eq!(err.kind(), "spawn_failed");
    assert!(err.to_string().contains("/nonexistent/worker"));
}

#[test]
fn a_live_worker_is_listed_as_ours_until_reaped() {
    let h = std::thread::spawn(|| run(&sh("sleep 1", quick())));
    // Other tests of this binary run workers too: remember every pid seen alive.
    let mut seen = std::collections::BTreeSet::new();
    while !h.is_finished() {
        seen.extend(live_pids());
        std::thread::sleep(Duration::from_millis(10));
    }
    let done = h.join().unwrap().unwrap();
    assert!(seen.contains(&done.pid), "the running worker was listed");
    assert!(!is_ours(done.pid));
    assert!(gone(done.pid));
}

#[test]
fn a_cancelled_worker_is_killed_with_its_children_and_reaped() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    for after_ms in [0u64, 150] {
        let cancel = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&cancel);
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(after_ms));
            flag.store(true, Ordering::Relaxed);
        });
        let t0 = Instant::now();
        let req = sh("sleep 60 & sleep 60", quick());
        let err = dgx_pixels_worker::run_cancellable(&req, &cancel).unwrap_err();
        setter.join().unwrap();
        assert!(matches!(err, WorkerError::Cancelled), "{err}");
        assert_eq!(err.kind(), "cancelled");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }
    // Not cancelled: an ordinary run.
    let cancel = AtomicBool::new(false);
    let done = dgx_pixels_worker::run_cancellable(&sh("echo ok", quick()), &cancel).unwrap();
    assert_eq!(done.output, b"ok\n");
}
