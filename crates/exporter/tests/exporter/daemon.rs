//! The real binary, started as a process: endpoints, formats, startup errors, GPU-less start and
//! shutdown. Each test gets its own port and kills what it starts (also when it fails).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common;
use common::*;

#[test]
fn simulated_node_serves_eight_gpus_and_says_it_is_simulated() {
    let d = start(&["--simulate", "dgx-h100", "--node.name", "dgx-07"]);
    let body = text(d.port);
    assert_eq!(series(&body, "dgx_pixels_gpu_power_watts").len(), 8);
    assert_eq!(series(&body, "dgx_pixels_gpu_info").len(), 8);
    let info = series(&body, "dgx_pixels_exporter_build_info");
    assert_eq!(info.len(), 1);
    assert!(
        info[0].contains("mode=\"simulated\"") && info[0].contains("scenario=\"dgx-h100\""),
        "{}",
        info[0]
    );
    assert!(info[0].contains("node=\"dgx-07\""));
    assert!(series(&body, "dgx_pixels_source_up")
        .contains(&"dgx_pixels_source_up{node=\"dgx-07\",source=\"sim\"} 1"));
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.contains("node=\"dgx-07\""), "{line}");
    }
    let (_, _, landing) = get(d.port, "/", &[]);
    assert!(String::from_utf8_lossy(&landing).contains("SIMULATED"));
}

#[test]
fn formats_follow_accept_and_gzip_follows_accept_encoding() {
    let d = start(&["--simulate", "dgx-spark"]);
    let (status, h, body) = get(
        d.port,
        "/metrics",
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        )],
    );
    assert_eq!(status, 200);
    assert!(header(&h, "content-type")
        .unwrap()
        .starts_with("application/openmetrics-text; version=1.0.0"));
    assert!(String::from_utf8(body).unwrap().ends_with("# EOF\n"));

    let (_, h, body) = get(d.port, "/metrics", &[("Accept-Encoding", "gzip")]);
    assert_eq!(header(&h, "content-encoding"), Some("gzip"));
    assert!(header(&h, "content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let mut plain = String::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_string(&mut plain)
        .unwrap();
    assert!(plain.contains("# TYPE dgx_pixels_gpu_power_watts gauge"));
    // Unified memory: no framebuffer series at all rather than zeros.
    assert!(series(&plain, "dgx_pixels_gpu_memory_used_bytes").is_empty());

    assert_eq!(get(d.port, "/-/healthy", &[]).0, 200);
    assert_eq!(get(d.port, "/nope", &[]).0, 404);
}

#[test]
fn without_a_gpu_nvml_is_down_ready_and_logged_once() {
    let mut d = start(&["--nvml.library", "/nonexistent/libnvidia-ml.so.1"]);
    let body = text(d.port);
    let mut up = series(&body, "dgx_pixels_source_up");
    up.sort();
    assert_eq!(
        up,
        [
            "dgx_pixels_source_up{source=\"exporter\"} 1",
            // Up, with nothing to judge: no GPU was ever read.
            "dgx_pixels_source_up{source=\"health\"} 1",
            "dgx_pixels_source_up{source=\"nvml\"} 0"
        ]
    );
    assert!(series(&body, "dgx_pixels_gpu_power_watts").is_empty());
    assert!(series(&body, "dgx_pixels_exporter_build_info")[0].contains("mode=\"hardware\""));
    // Let it retry (backoff 1 s, 2 s) and check it said why only once.
    std::thread::sleep(Duration::from_millis(3500));
    let polls: f64 = series(&text(d.port), "dgx_pixels_source_polls_total")[0]
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(polls >= 3.0, "keeps polling: {polls}");
    terminate(&mut d.child);
    let mut stderr = String::new();
    d.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("NVML unavailable"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("level=warn")
            && warnings[0].contains("/nonexistent/libnvidia-ml.so.1")
    );
}

fn fails(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn bad_input_exits_non_zero_with_one_clear_line() {
    let (code, err) = fails(&["--web.listen-adress", ":1"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("--web.listen-adress"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[web]\ntelemetry_path = 3\n").unwrap();
    let (code, err) = fails(&["--config.file", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.toml line 2 key web.telemetry_path"),
        "{err}"
    );

    let (code, err) = fails(
        &[
            "--simulate",
            "dgx-h900",
            "--web.listen-address",
            "127.0.0.1:0",
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown scenario") && err.contains("dgx-h100"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let (code, err) = fails(&["--log.level", "loud"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("log.level"), "{err}");

    let (code, err) = fails(&[], &[("DGX_PIXELS_WEB__LISTEN_ADDRESS", "not-an-address")]);
    assert_eq!(code, 2);
    assert!(err.contains("web.listen_address"), "{err}");
}

#[test]
fn address_in_use_is_an_error_before_serving() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, err) = fails(
        &["--simulate", "dgx-h100", "--web.listen-address", &addr],
        &[],
    );
    assert_eq!(code, 1);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn sigterm_and_sigint_stop_within_a_second() {
    for signal in ["TERM", "INT"] {
        let mut d = start(&["--simulate", "dgx-h100"]);
        // Hold an idle keep-alive connection open: shutdown must not wait for it.
        let idle = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
        let t = Instant::now();
        Command::new("kill")
            .args([&format!("-{signal}"), &d.child.id().to_string()])
            .status()
            .unwrap();
        let status = loop {
            if let Some(s) = d.child.try_wait().unwrap() {
                break s;
            }
            assert!(t.elapsed() < Duration::from_secs(3), "still running");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{signal}: took {:?}",
            t.elapsed()
        );
        assert!(status.success(), "{signal}: {status:?}");
        let mut lines = BufReader::new(d.child.stderr.take().unwrap()).lines();
        assert!(lines.any(|l| l.unwrap().contains("shutting down")));
        drop(idle);
    }
}

#[test]
fn textfiles_are_served_in_both_formats_and_bad_ones_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.prom"),
        "# HELP dgx_pixels_workload_images_generated_total Images.\n\
         # TYPE dgx_pixels_workload_images_generated_total counter\n\
         dgx_pixels_workload_images_generated_total{gpu=\"0\",uuid=\"GPU-a\",model=\"m\",lora=\"\",dataset=\"d\"} 12\n\
         # TYPE lat_seconds histogram\n\
         lat_seconds_bucket{le=\"0.2\"} 1\nlat_seconds_bucket{le=\"+Inf\"} 2\nlat_seconds_sum 0.5\nlat_seconds_count 2\n",
    )
    .unwrap();
    // Sets the node label the exporter adds itself: refused whole.
    std::fs::write(dir.path().join("node.prom"), "mine{node=\"x\"} 1\n").unwrap();
    let d = start(&[
        "--no-collector.nvml",
        "--textfile.directory",
        dir.path().to_str().unwrap(),
        "--node.name",
        "n1",
    ]);
    let body = text(d.port);
    assert!(body.contains("# TYPE dgx_pixels_workload_images_generated_total counter\n"));
    assert!(body.contains("dgx_pixels_workload_images_generated_total{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\",model=\"m\",lora=\"\",dataset=\"d\"} 12\n"), "{body}");
    assert!(body.contains("lat_seconds_bucket{node=\"n1\",le=\"+Inf\"} 2\n"));
    assert!(body.contains("dgx_pixels_textfile_scrape_error{node=\"n1\",file=\"job.prom\"} 0\n"));
    assert!(body.contains("dgx_pixels_textfile_scrape_error{node=\"n1\",file=\"node.prom\"} 1\n"));
    assert!(!body.contains("mine{"));
    assert!(series(&body, "dgx_pixels_textfile_mtime_seconds").len() == 1);

    let (_, _, om) = get(
        d.port,
        "/metrics",
        &[("Accept", "application/openmetrics-text;version=1.0.0")],
    );
    let om = String::from_utf8(om).unwrap();
    assert!(
        om.contains("# TYPE dgx_pixels_workload_images_generated counter\n"),
        "{om}"
    );
    assert!(om.contains("# TYPE lat_seconds histogram\n"));
    assert!(om.ends_with("# EOF\n") && om.matches("# EOF").count() == 1);
}

#[test]
fn in_simulation_textfiles_may_not_serve_the_simulated_workloads_names() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("w.prom"),
        "dgx_pixels_workload_images_generated_total{model=\"m\"} 1\n",
    )
    .unwrap();
    let path = dir.path().to_str().unwrap();
    // dgx-h100 plays an image-generation workload: its names are taken.
    let d = start(&["--simulate", "dgx-h100", "--textfile.directory", path]);
    let body = text(d.port);
    assert!(body.contains("dgx_pixels_textfile_scrape_error{file=\"w.prom\"} 1\n"));
    assert_eq!(
        series(&body, "dgx_pixels_workload_images_generated_total").len(),
        4,
        "only the simulated GPUs 0-3"
    );
    drop(d);
    // fault-ecc plays none: the textfile's series is served.
    let d = start(&["--simulate", "fault-ecc", "--textfile.directory", path]);
    let body = text(d.port);
    assert!(body.contains("dgx_pixels_textfile_scrape_error{file=\"w.prom\"} 0\n"));
    assert!(body.contains("dgx_pixels_workload_images_generated_total{model=\"m\"} 1\n"));
}

/// bcrypt of "s3cret" (cost 4, to keep the test fast).
const HASH: &str = "$2b$04$dbOLcPL.cjY5q2E96PN19e22x8qzcVsI8JWU0LuwdjVxSKNZIwaX6";

fn basic(user: &str, password: &str) -> String {
    // base64 by hand: the tests have no base64 dependency and the alphabet is short.
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{user}:{password}");
    let mut out = String::new();
    for chunk in input.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

/// The web config file: a bad one stops startup with a one-line error; basic auth guards
/// /metrics but not the probes; SIGHUP with a broken file keeps the old config and says so.
#[test]
fn web_config_file_basic_auth_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, "basic_auth_users:\n  prometheus: plain-text\n").unwrap();
    let (code, err) = fails(
        &[
            "--simulate",
            "dgx-h100",
            "--web.config.file",
            web.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "web config {} line 2: key basic_auth_users.prometheus: not a bcrypt hash",
            web.display()
        )),
        "{err}"
    );

    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: {HASH}\n")).unwrap();
    let d = start(&[
        "--simulate",
        "dgx-h100",
        "--web.config.file",
        web.to_str().unwrap(),
    ]);
    assert_eq!(get(d.port, "/metrics", &[]).0, 401);
    let auth = basic("prometheus", "s3cret");
    let (status, _, body) = get(d.port, "/metrics", &[("Authorization", &auth)]);
    assert_eq!(status, 200);
    let body = String::from_utf8(body).unwrap();
    assert!(body.contains("dgx_pixels_exporter_web_config_last_reload_successful 1"));

    std::fs::write(&web, "basic_auth_users: [broken\n").unwrap();
    d.hup();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, _, body) = get(d.port, "/metrics", &[("Authorization", &auth)]);
        assert_eq!(status, 200, "the old config keeps serving");
        let body = String::from_utf8(body).unwrap();
        if body.contains("dgx_pixels_exporter_web_config_last_reload_successful 0") {
            assert!(
                body.contains("dgx_pixels_exporter_web_config_reloads_total{result=\"failure\"} 1"),
                "{body}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "reload failure never reported");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        get(d.port, "/-/healthy", &[]).0,
        200,
        "probes need no credentials"
    );
}
