//! Regression tests of the second hardening round, on the real binary: each names the defect
//! it pins (see docs/security.md and docs/reliability.md).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStringExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use common::*;

/// Runs the binary to completion (it must fail before serving): exit code and stderr.
fn fails_with(args: &[&str], env: &[(OsString, OsString)]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.clone(), v.clone())))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn os(bytes: &[u8]) -> OsString {
    OsString::from_vec(bytes.to_vec())
}

/// One plain line, the same format for every error before serving.
fn one_plain_line(err: &str) {
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("dgx-pixels-exporter: error: "), "{err}");
}

/// Item 3: any environment variable that was not UTF-8 (even an unrelated one) crashed the
/// daemon at startup with a panic (exit 101).
#[test]
fn non_utf8_environment_variables() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(BIN)
        .args(["--simulate", "dgx-spark", "--web.listen-address", &addr])
        .env(os(b"UNRELATED_\xff"), os(b"\xfe\xfd"))
        .env("OTHER", os(b"caf\xe9"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(port, "/-/ready", &[]).0 != 200 {
        assert!(child.try_wait().unwrap().is_none(), "exited");
        assert!(Instant::now() < deadline, "not ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    terminate(&mut child);

    let (code, err) = fails_with(
        &["--simulate", "dgx-spark"],
        &[(os(b"DGX_PIXELS_NODE_NAME"), os(b"n\xff"))],
    );
    assert_eq!(code, 2, "{err}");
    one_plain_line(&err);
    assert!(
        err.contains("DGX_PIXELS_NODE_NAME: its value is not valid UTF-8"),
        "{err}"
    );
    let (code, err) = fails_with(
        &["--simulate", "dgx-spark"],
        &[(os(b"DGX_PIXELS_\xff"), os(b"1"))],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("its name is not valid UTF-8"), "{err}");
}

/// Items 10 and "rough edges": exit codes and formats were mixed (an unknown scenario exited 1
/// with a logfmt line), intervals had no lower bound (1ns kept a core busy), `max_connections
/// = 0` meant a cap of 1, and label values from configuration had no size limit.
#[test]
fn config_errors_exit_2_with_one_plain_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad_scenario = dir.path().join("bad.toml");
    std::fs::write(&bad_scenario, "name = 3\n").unwrap();
    let zero_conns = dir.path().join("conns.toml");
    std::fs::write(&zero_conns, "[web]\nmax_connections = 0\n").unwrap();
    let huge = "n".repeat(100 * 1024);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--simulate", "dgx-h900"], "unknown scenario"),
        (
            vec!["--simulate", bad_scenario.to_str().unwrap()],
            "bad.toml",
        ),
        (
            vec!["--collector.nvml.interval", "1ns"],
            "collector.nvml.interval: 1ns is below the minimum of 50ms",
        ),
        (
            vec![
                "--simulate",
                "dgx-spark",
                "--collector.textfile.timeout",
                "1us",
            ],
            "collector.textfile.timeout: 1us is below the minimum of 10ms",
        ),
        (
            vec!["--config.file", zero_conns.to_str().unwrap()],
            "web.max_connections: must be at least 1",
        ),
        (
            vec!["--simulate", "dgx-spark", "--node.name", &huge],
            "node_name: 102400 bytes is over the 1024 byte limit",
        ),
    ];
    for (args, want) in cases {
        let (code, err) = fails_with(&args, &[]);
        assert_eq!(code, 2, "{args:?}: {err}");
        one_plain_line(&err);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // Not a config error, but the same format before serving.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, err) = fails_with(
        &["--simulate", "dgx-spark", "--web.listen-address", &addr],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    one_plain_line(&err);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

/// Starts the binary with `args` and returns it with its stderr lines as they come.
fn spawn(args: &[&str]) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// The first line containing `needle` within `timeout`.
fn line_with(rx: &std::sync::mpsc::Receiver<String>, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return l,
            Ok(_) => {}
            Err(_) => panic!("no line with {needle:?}"),
        }
    }
}

/// Rough edges: `127.0.0.1:0` was logged as port 0; `--no-collector.nvml` alone served only
/// self-metrics without the "no source enabled" warning; `--simulate` ignored GPU-library
/// flags silently; an empty web config started a plain, unauthenticated server silently.
#[test]
fn startup_says_what_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, "").unwrap();
    let (mut child, rx) = spawn(&[
        "--no-collector.nvml",
        "--web.listen-address",
        "127.0.0.1:0",
        "--web.config.file",
        web.to_str().unwrap(),
    ]);
    let plain = line_with(
        &rx,
        "plain HTTP without authentication",
        Duration::from_secs(10),
    );
    assert!(plain.contains("level=warn"), "{plain}");
    let none = line_with(&rx, "no source enabled", Duration::from_secs(10));
    assert!(none.contains("level=warn"), "{none}");
    let listening = line_with(&rx, "listening", Duration::from_secs(10));
    let addr = listening
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("address="))
        .unwrap();
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    assert_ne!(port, 0, "{listening}");
    assert_eq!(get(port, "/-/healthy", &[]).0, 200);
    terminate(&mut child);

    let (mut child, rx) = spawn(&[
        "--simulate",
        "dgx-spark",
        "--web.listen-address",
        "127.0.0.1:0",
        "--collector.dcgm",
        "--nvml.library",
        "/opt/libnvidia-ml.so.1",
    ]);
    let ignored = line_with(&rx, "--simulate replaces", Duration::from_secs(10));
    assert!(ignored.contains("--nvml.library"), "{ignored}");
    // --collector.dcgm selects the simulated profiling families: it has an effect.
    assert!(!ignored.contains("--collector.dcgm"), "{ignored}");
    terminate(&mut child);
}

/// Waits for `child` to exit (killing it past 5 s after `since`).
fn exit_status(child: &mut std::process::Child, since: Instant) -> std::process::ExitStatus {
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if since.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            panic!("still running 5 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Item 6: with a reload stuck (here: waiting for a web config that never stops changing;
/// before the fix, a FIFO in its place blocked it forever), SIGTERM logged "shutting down" and
/// the process never exited. It now exits within 2 s whatever a reload is doing.
#[test]
fn sigterm_exits_within_2s_during_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    )
    .unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let (mut child, rx) = spawn(&[
        "--simulate",
        "dgx-spark",
        "--web.listen-address",
        &addr,
        "--web.config.file",
        web.to_str().unwrap(),
    ]);
    line_with(&rx, "listening", Duration::from_secs(10));
    // Keep rewriting the file so the SIGHUP reload waits for it to settle.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, web) = (std::sync::Arc::clone(&stop), web.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::write(
                    &web,
                    "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
                )
                .unwrap();
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let pid = child.id().to_string();
    Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    line_with(&rx, "SIGHUP", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = exit_status(&mut child, t);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert!(status.success(), "{status:?}");

    // The original report: a FIFO in place of the web config blocked the reload in open(), and
    // SIGTERM then never ended the process. Now the FIFO is refused at once, and SIGTERM works.
    let (mut child, rx) = spawn(&[
        "--simulate",
        "dgx-spark",
        "--web.listen-address",
        "127.0.0.1:0",
        "--web.config.file",
        web.to_str().unwrap(),
    ]);
    line_with(&rx, "listening", Duration::from_secs(10));
    std::fs::remove_file(&web).unwrap();
    assert!(Command::new("mkfifo").arg(&web).status().unwrap().success());
    let pid = child.id().to_string();
    Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    let refused = line_with(&rx, "web config not reloaded", Duration::from_secs(5));
    assert!(refused.contains("not a regular file"), "{refused}");
    let t = Instant::now();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = exit_status(&mut child, t);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert!(status.success(), "{status:?}");
}
