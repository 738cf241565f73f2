//! The status page at `/` from the real binary: the simulated node's eight GPUs and its
//! sources over plain HTTP, and behind TLS and basic auth the same page only with credentials.
//! (scripts/test-status-page.sh loads it in a real headless Chromium.)
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::common;
use common::*;

/// Checks what any rendering of the dgx-h100 node must show.
fn assert_dgx_h100_page(page: &str) {
    assert!(page.starts_with("<!doctype html>"), "{page}");
    assert_eq!(page.matches("<tr class=\"gpu\"").count(), 8, "{page}");
    for i in 0..8 {
        assert!(page.contains(&format!("id=\"gpu-{i}\"")), "GPU {i}");
    }
    // A verdict cell per GPU: "not evaluated" until the health collector serves one.
    assert_eq!(page.matches("<td class=\"health ").count(), 8);
    assert!(page.contains(
        "<div class=\"banner simulated\" id=\"simulated\">SIMULATED node (scenario dgx-h100)"
    ));
    assert!(page.contains("<table id=\"sources\">"));
    assert!(
        page.contains("id=\"source-sim\" data-state=\"up\""),
        "{page}"
    );
    assert!(page.contains("H100"), "the model from dgx_pixels_gpu_info");
    // Every GPU of the simulated node serves utilization, memory, power and temperature.
    assert_eq!(page.matches(" GiB</td>").count(), 8, "{page}");
    assert_eq!(page.matches(" W</td>").count(), 8);
    assert_eq!(page.matches(" °C</td>").count(), 8);
    assert!(
        !page.contains("/ — W"),
        "the simulated node serves every power limit"
    );
}

#[test]
fn the_simulated_node_at_a_glance() {
    let d = start(&["--simulate", "dgx-h100", "--node.name", "dgx-07"]);
    let (status, headers, body) = get(d.port, "/", &[]);
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/html; charset=utf-8")
    );
    let page = String::from_utf8(body).unwrap();
    assert_dgx_h100_page(&page);
    assert!(page.contains("<b id=\"node\">dgx-07</b>"));
    assert!(page.contains("<a href=\"/metrics\">/metrics</a>"));
    // A path the page does not own is not the page.
    assert_eq!(get(d.port, "/index.html", &[]).0, 404);
}

/// bcrypt of "s3cret", cost 4 (fast tests).
const HASH: &str = "$2b$04$dbOLcPL.cjY5q2E96PN19e22x8qzcVsI8JWU0LuwdjVxSKNZIwaX6";
/// `prometheus:s3cret` and `prometheus:wrong` in base64.
const GOOD: &str = "Basic cHJvbWV0aGV1czpzM2NyZXQ=";
const BAD: &str = "Basic cHJvbWV0aGV1czp3cm9uZw==";

/// A CA and a server certificate for localhost signed by it, written into `dir`; returns the
/// CA's PEM.
fn pki(dir: &std::path::Path) -> String {
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    ca.pem()
}

/// One GET over TLS; returns the status (0 when the connection failed) and the whole response.
fn tls_get(port: u16, ca_pem: &str, path: &str, auth: Option<&str>) -> (u16, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let Ok(tcp) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\r\n");
    if tls.write_all(req.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[test]
fn behind_tls_and_basic_auth_the_page_needs_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki(dir.path());
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: {HASH}\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new(BIN)
        .args(["--web.listen-address", &format!("127.0.0.1:{port}")])
        .args(["--simulate", "dgx-h100", "--web.config.file"])
        .arg(&web)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _daemon = Daemon { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while tls_get(port, &ca, "/-/ready", None).0 != 200 {
        assert!(Instant::now() < deadline, "not ready over TLS in 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }

    let (status, response) = tls_get(port, &ca, "/", None);
    assert_eq!(status, 401, "{response}");
    assert!(!response.contains("<tr class=\"gpu\""));
    assert_eq!(tls_get(port, &ca, "/", Some(BAD)).0, 401);
    let (status, response) = tls_get(port, &ca, "/", Some(GOOD));
    assert_eq!(status, 200, "{response}");
    assert!(response
        .to_ascii_lowercase()
        .contains("content-type: text/html; charset=utf-8"));
    let page = &response[response.find("<!doctype html>").unwrap()..];
    assert_dgx_h100_page(page);
    // Probes stay open; plain HTTP on the TLS port gets no page.
    assert_eq!(tls_get(port, &ca, "/-/healthy", None).0, 200);
    let (status, _, body) = get(port, "/", &[("Authorization", GOOD)]);
    assert_ne!(status, 200);
    assert!(!String::from_utf8_lossy(&body).contains("<tr class=\"gpu\""));
}

/// Four GPUs that differ in memory size and power limit: each row of the page shows its own
/// GPU's uuid, memory total and power limit (as /metrics serves them for that GPU), so a row
/// showing another GPU's readings fails.
#[test]
fn each_row_shows_its_own_gpus_readings() {
    let dir = tempfile::tempdir().unwrap();
    let block = |i: usize, gib: u64, watts: u64| {
        // dgx-h100's GPU table with this GPU's memory, limit and bus id.
        let h100 = dgx_pixels_sim::Scenario::builtin_text("dgx-h100").unwrap();
        let start = h100.find("[[gpus]]").unwrap();
        let end = start + h100[start..].find("pci_bus_ids").unwrap();
        h100[start..end]
            .replace("count = 8", "count = 1")
            .replace(
                "memory_total_bytes = 85_899_345_920",
                &format!("memory_total_bytes = {}", gib << 30),
            )
            .replace(
                "power_limit_watts = 700.0",
                &format!("power_limit_watts = {watts}.0"),
            )
            + &format!(
                "pci_bus_ids = [\"00000000:{:02X}:00.0\"]\n",
                0x18 + 0x10 * i
            )
    };
    let mut toml = String::from(
        "[node]\nname = \"distinct\"\ndescription = \"four different GPUs\"\nseed = 7\n\
         driver_version = \"550.54.15\"\ncuda_driver_version = 12040\n\n",
    );
    let gpus = [(40u64, 300u64), (48, 400), (80, 500), (96, 700)];
    for (i, (gib, watts)) in gpus.iter().enumerate() {
        toml += &block(i, *gib, *watts);
    }
    let scenario = dir.path().join("distinct.toml");
    std::fs::write(&scenario, toml).unwrap();
    let d = start(&["--simulate", scenario.to_str().unwrap()]);
    let metrics = text(d.port);
    let (_, _, body) = get(d.port, "/", &[]);
    let page = String::from_utf8(body).unwrap();
    assert_eq!(page.matches("<tr class=\"gpu\"").count(), 4, "{page}");
    for (i, (gib, watts)) in gpus.iter().enumerate() {
        let start = page.find(&format!("id=\"gpu-{i}\"")).unwrap();
        let row = &page[start..start + page[start..].find("</tr>").unwrap()];
        let gpu = i.to_string();
        let uuid = series(&metrics, "dgx_pixels_gpu_memory_total_bytes")
            .into_iter()
            .find(|l| l.contains(&format!("gpu=\"{gpu}\"")))
            .and_then(|l| {
                l.split("uuid=\"")
                    .nth(1)
                    .map(|r| r.split('"').next().unwrap().to_string())
            })
            .unwrap();
        assert!(row.contains(&format!("title=\"{uuid}\"")), "GPU {i}: {row}");
        let total = value(
            &metrics,
            "dgx_pixels_gpu_memory_total_bytes",
            &[("gpu", &gpu)],
        );
        assert_eq!(total, Some((gib << 30) as f64), "GPU {i}");
        assert!(
            row.contains(&format!(" / {gib}.0 GiB</td>")),
            "GPU {i}: {row}"
        );
        let limit = value(
            &metrics,
            "dgx_pixels_gpu_power_limit_watts",
            &[("gpu", &gpu)],
        );
        assert_eq!(limit, Some(*watts as f64), "GPU {i}");
        assert!(
            row.contains(&format!(" / {watts} W</td>")),
            "GPU {i}: {row}"
        );
    }
}

/// Issue 32: a GB200 NVL72 tray shows each GPU's NVLink domain and fabric state and its rail
/// port under the GPU's row, from the series the simulated node serves.
#[test]
fn the_gb200_tray_shows_fabric_and_rail_state_per_gpu() {
    let d = start(&["--simulate", "gb200-nvl72-tray"]);
    wait_until(d.port, Duration::from_secs(10), |b| {
        b.contains("dgx_pixels_gpu_rail_port_up{") && b.contains("dgx_pixels_gpu_fabric_info{")
    });
    let (status, _, body) = get(d.port, "/", &[]);
    assert_eq!(status, 200);
    let page = String::from_utf8(body).unwrap();
    assert_eq!(page.matches("<tr class=\"links\"").count(), 4, "{page}");
    for i in 0..4 {
        assert!(
            page.contains(&format!("id=\"links-{i}\"")),
            "GPU {i}: {page}"
        );
        assert!(
            page.contains(&format!(
                "data-port=\"mlx5_{i}/1\">mlx5_{i}/1 <span class=\"up\">up</span> 400 Gb/s"
            )),
            "GPU {i}: {page}"
        );
    }
    assert_eq!(
        page.matches("<b class=\"fabric-domain\">32766</b>").count(),
        4
    );
    assert_eq!(
        page.matches("<span class=\"fabric-state up\">completed, success</span>")
            .count(),
        4
    );
}

/// Issue 44: once the simulated node's probes have run, each GPU's row is followed by its probe
/// state and last results as /metrics serves them, and the node's NCCL all-reduce and storage
/// read show below the GPUs. Four idle simulated H100s (the demo's job holds every GPU of
/// dgx-h100, so its node probes wait for an idle node) with NCCL and a (modelled) storage path.
#[test]
fn the_page_shows_each_gpus_probes_and_the_nodes_nccl_and_storage() {
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/p2p-node.toml");
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        "[probes]\nsettle = \"0s\"\nnccl_allreduce = true\nstorage_paths = [\"/raid\"]\n",
    )
    .unwrap();
    // Full detail: /metrics serves the per-GPU state the page shows in every profile.
    let d = start(&[
        "--simulate",
        scenario,
        "--config.file",
        config.path().to_str().unwrap(),
        "--metrics.detail",
        "full",
    ]);
    let (_, waited) = wait_until(d.port, Duration::from_secs(60), |b| {
        b.contains("dgx_pixels_probe_nccl_largest_bus_bandwidth_bytes_per_second ")
            && b.contains("dgx_pixels_probe_storage_read_bytes_per_second{")
            && b.contains("dgx_pixels_probe_gemm_flops{")
    });
    assert!(
        waited < Duration::from_secs(60),
        "no NCCL, storage and GEMM result in 60 s"
    );
    let states = |metrics: &str| -> Vec<String> {
        (0..4)
            .map(|i| {
                series(metrics, "dgx_pixels_probe_gpu_state_info")
                    .into_iter()
                    .find(|l| l.contains(&format!("gpu=\"{i}\"")))
                    .and_then(|l| l.split("state=\"").nth(1))
                    .map(|r| r.split('"').next().unwrap().to_string())
                    .unwrap()
            })
            .collect()
    };
    // The page against /metrics read before and after it: a probe attempt between them may
    // change a state, so try until both reads agree.
    let mut page = String::new();
    for attempt in 0.. {
        let before = states(&text(d.port));
        page = String::from_utf8(get(d.port, "/", &[]).2).unwrap();
        if before != states(&text(d.port)) && attempt < 20 {
            continue;
        }
        assert_eq!(page.matches("<tr class=\"probes\"").count(), 4, "{page}");
        for (i, state) in before.iter().enumerate() {
            let start = page.find(&format!("id=\"probes-{i}\"")).unwrap();
            let row = &page[start..start + page[start..].find("</tr>").unwrap()];
            assert!(
                row.starts_with(&format!("id=\"probes-{i}\" data-state=\"{state}\">")),
                "GPU {i}: {row}"
            );
            assert!(row.contains("<span class=\"probe-state "), "GPU {i}: {row}");
        }
        break;
    }
    // At least one GEMM result with its fraction of the H100's peak.
    assert!(page.contains("TFLOP/s ("), "{page}");
    assert!(page.contains("% of peak)"), "{page}");
    assert!(
        page.contains("<p id=\"nccl\">NCCL all-reduce: <b>"),
        "{page}"
    );
    // Four GPUs are no whole baseboard: no expected figure (the unit tests show one).
    assert!(page.contains(" over 4 GPUs"), "{page}");
    assert!(!page.contains("(expected "), "{page}");
    assert!(
        page.contains("<span class=\"storage-path\" data-path=\""),
        "{page}"
    );
    assert!(page.contains("<p id=\"probe-states\">GPUs by probe state: "));
}
