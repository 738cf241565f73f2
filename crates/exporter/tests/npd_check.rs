//! Issue 33, item 2: `dgx-pixels-exporter npd-check` against the real daemon, answering in
//! node-problem-detector's custom-plugin protocol (exit 0 OK, 1 problem, 2 unknown; one line
//! of at most 80 bytes): healthy, degraded (OK by default, a problem with
//! `--problem-at degraded`), unhealthy, the exporter unreachable, behind TLS and basic auth
//! (refused without the password, answered with it), and behind TLS requiring client
//! certificates (refused without one or with a stranger's, answered with the CA's).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Runs `npd-check` with the daemon's flags `daemon` before it and `own` after it.
fn npd(daemon: &[&str], own: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(daemon)
        .arg("npd-check")
        .args(own)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout:?}");
    let line = stdout.trim_end_matches('\n').to_string();
    assert!(line.len() <= 80, "{line}");
    (out.status.code().unwrap(), line)
}

/// Asks until `done` holds for the answer or 15 s pass; returns the last answer.
fn npd_until(
    daemon: &[&str],
    own: &[&str],
    done: impl Fn(&(i32, String)) -> bool,
) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let answer = npd(daemon, own);
        if done(&answer) || Instant::now() > deadline {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn fake_nvml(scenario: &str, start: &str) -> Daemon {
    start_with_env(
        &["--nvml.library", fake_nvml_library()],
        &[
            ("FAKE_NVML_SCENARIO", scenario),
            ("FAKE_NVML_START", start),
            ("FAKE_NVML_PCIE_DELAY_MS", "0"),
        ],
    )
}

#[test]
fn verdicts_become_exit_statuses_and_one_short_line() {
    let d = fake_nvml("dgx-h100", "0");
    let listen = format!("127.0.0.1:{}", d.port);
    let at = ["--web.listen-address", listen.as_str()];
    let answer = npd_until(&at, &[], |a| a.0 == 0);
    assert_eq!(answer, (0, "8 GPUs healthy".to_string()));
    // --address, by name, wins over the daemon's listen address.
    let named = format!("localhost:{}", d.port);
    let unused = format!("127.0.0.1:{}", free_port());
    let answer = npd(&["--web.listen-address", &unused], &["--address", &named]);
    assert_eq!(answer, (0, "8 GPUs healthy".to_string()));
    drop(d);

    // fault-xid-storm from 9 s: GPU 2's XID 13 storm starts 1 s in (restart_app: degraded).
    let d = fake_nvml("fault-xid-storm", "9");
    let listen = format!("127.0.0.1:{}", d.port);
    let at = ["--web.listen-address", listen.as_str()];
    let (status, message) = npd_until(&at, &[], |a| a.1.contains("degraded"));
    assert_eq!(status, 0, "degraded is not a problem by default: {message}");
    assert_eq!(message, "GPU 2 degraded: restart_app (xid_13)");
    let (status, message) = npd(&at, &["--problem-at", "degraded"]);
    assert_eq!(status, 1, "{message}");
    assert!(
        message.starts_with("GPU 2 degraded: restart_app (xid_13)"),
        "{message}"
    );
    drop(d);

    // From 44 s: GPU 1's XID 48 and its uncorrected ECC error 1 s in (reset_gpu: unhealthy).
    let d = fake_nvml("fault-xid-storm", "44");
    let listen = format!("127.0.0.1:{}", d.port);
    let at = ["--web.listen-address", listen.as_str()];
    let (status, message) = npd_until(&at, &[], |a| a.0 == 1);
    assert_eq!(status, 1, "{message}");
    assert!(
        message.starts_with("GPU 1 unhealthy: reset_gpu ("),
        "{message}"
    );
    drop(d);

    // Nothing listens: unknown, and it says so.
    let listen = format!("127.0.0.1:{}", free_port());
    let (status, message) = npd(&["--web.listen-address", listen.as_str()], &[]);
    assert_eq!(status, 2, "{message}");
    assert!(
        message.starts_with(&format!("exporter unreachable at {listen}")),
        "{message}"
    );
}

/// bcrypt of "s3cret", cost 4 (fast tests).
const HASH: &str = "$2b$04$dbOLcPL.cjY5q2E96PN19e22x8qzcVsI8JWU0LuwdjVxSKNZIwaX6";

#[test]
fn behind_tls_and_basic_auth_it_uses_the_web_config_and_the_password_file() {
    let dir = tempfile::tempdir().unwrap();
    // A self-signed certificate for a name that is not 127.0.0.1: the check pins it.
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["exporter.example".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.path().join("server.crt"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: {HASH}\n"
        ),
    )
    .unwrap();
    let (good, bad) = (dir.path().join("good"), dir.path().join("bad"));
    std::fs::write(&good, "s3cret\n").unwrap();
    std::fs::write(&bad, "wrong\n").unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let child = Command::new(BIN)
        .args(["--web.listen-address", &listen, "--simulate", "dgx-h100"])
        .arg("--web.config.file")
        .arg(&web)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _daemon = Daemon { child, port };
    let at = [
        "--web.listen-address",
        listen.as_str(),
        "--web.config.file",
        web.to_str().unwrap(),
    ];
    let with = |file: &std::path::Path| {
        vec![
            "--username".to_string(),
            "prometheus".to_string(),
            "--password-file".to_string(),
            file.to_str().unwrap().to_string(),
        ]
    };
    let good_args = with(&good);
    let good_args: Vec<&str> = good_args.iter().map(String::as_str).collect();
    let answer = npd_until(&at, &good_args, |a| a.0 == 0);
    assert_eq!(answer, (0, "8 GPUs healthy".to_string()));

    let refused = (
        2,
        "the exporter refused the check: HTTP 401 (basic auth)".to_string(),
    );
    assert_eq!(npd(&at, &[]), refused, "no credentials");
    let bad_args = with(&bad);
    let bad_args: Vec<&str> = bad_args.iter().map(String::as_str).collect();
    assert_eq!(npd(&at, &bad_args), refused, "a wrong password");
    // Without the web config it speaks plain HTTP to a TLS port: unknown, never OK.
    let (status, message) = npd(&["--web.listen-address", listen.as_str()], &good_args);
    assert_eq!(status, 2, "{message}");
}

/// A CA, and a certificate for `name` signed by it (`ca` none: self-signed); PEMs of the
/// certificate and key, and the CA's.
fn issue(name: &str, ca: Option<(&rcgen::Certificate, &rcgen::KeyPair)>) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    let cert = match ca {
        Some((ca, ca_key)) => params.signed_by(&key, ca, ca_key).unwrap(),
        None => params.self_signed(&key).unwrap(),
    };
    (cert.pem(), key.serialize_pem())
}

#[test]
fn with_client_certificates_required_it_presents_the_one_given() {
    let dir = tempfile::tempdir().unwrap();
    let path = |f: &str| dir.path().join(f);
    let (server_crt, server_key) = issue("exporter.example", None);
    std::fs::write(path("server.crt"), server_crt).unwrap();
    std::fs::write(path("server.key"), server_key).unwrap();
    // The CA the exporter trusts for clients, one client it signed, and a stranger.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).unwrap();
    std::fs::write(path("clients.crt"), ca.pem()).unwrap();
    let (client_crt, client_key) = issue("npd", Some((&ca, &ca_key)));
    std::fs::write(path("client.crt"), client_crt).unwrap();
    std::fs::write(path("client.key"), client_key).unwrap();
    let (other_crt, other_key) = issue("npd", None);
    std::fs::write(path("other.crt"), other_crt).unwrap();
    std::fs::write(path("other.key"), other_key).unwrap();
    let web = path("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: clients.crt\n",
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let child = Command::new(BIN)
        .args(["--web.listen-address", &listen, "--simulate", "dgx-h100"])
        .arg("--web.config.file")
        .arg(&web)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _daemon = Daemon { child, port };
    let at = [
        "--web.listen-address",
        listen.as_str(),
        "--web.config.file",
        web.to_str().unwrap(),
    ];
    let client = |name: &str| {
        [
            "--client-cert".to_string(),
            path(&format!("{name}.crt")).display().to_string(),
            "--client-key".to_string(),
            path(&format!("{name}.key")).display().to_string(),
        ]
    };
    let good = client("client");
    let good: Vec<&str> = good.iter().map(String::as_str).collect();
    let answer = npd_until(&at, &good, |a| a.0 == 0);
    assert_eq!(answer, (0, "8 GPUs healthy".to_string()));

    // Refused without a certificate and with one the exporter's CA did not sign: unknown,
    // saying why.
    assert_eq!(
        npd(&at, &[]),
        (
            2,
            "the exporter requires a client certificate (--client-cert, --client-key)".into()
        )
    );
    let other = client("other");
    let other: Vec<&str> = other.iter().map(String::as_str).collect();
    assert_eq!(
        npd(&at, &other),
        (2, "the exporter refused the client certificate".into())
    );
    // A key file that is not a key: unknown before any connection.
    let broken = ["--client-cert", good[1], "--client-key", good[1]];
    let (status, message) = npd(&at, &broken);
    assert_eq!(status, 2, "{message}");
    assert!(message.starts_with("client key"), "{message}");
}
