//! TLS and client certificates: served, required, verified, rotated without a restart.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dgx_pixels_web::Limits;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use super::{client, get_on, pki, plain_get, start, write_config, Pki};

async fn tls_get(port: u16, connector: &tokio_rustls::TlsConnector, path: &str) -> (u16, String) {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    match connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
    {
        Ok(tls) => get_on(tls, path, "").await,
        Err(_) => (0, String::new()),
    }
}

#[tokio::test]
async fn tls_serves_scrapes_and_refuses_plain_http() {
    let pki = pki();
    let cfg = write_config(
        pki.dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    );
    let s = start(Some(&cfg), Limits::default()).await;
    let (status, body) = tls_get(s.port, &client(&pki, false), "/metrics").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("metrics\n"));
    assert_eq!(
        plain_get(s.port, "/metrics", "").await.0,
        0,
        "plain HTTP on a TLS port"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(s.web.counters.failed_handshakes.load(Ordering::Relaxed) >= 1);
}

#[tokio::test]
async fn client_certificates_are_required_and_verified() {
    let pki = pki();
    let cfg = write_config(
        pki.dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    );
    let s = start(Some(&cfg), Limits::default()).await;
    assert_eq!(
        tls_get(s.port, &client(&pki, true), "/metrics").await.0,
        200
    );
    assert_eq!(
        tls_get(s.port, &client(&pki, false), "/metrics").await.0,
        0,
        "no client certificate, no scrape"
    );
}

#[tokio::test]
async fn a_rotated_certificate_is_picked_up_without_a_restart() {
    let pki = pki();
    let cfg = write_config(
        pki.dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    );
    let s = start(Some(&cfg), Limits::default()).await;
    s.web.set_settle(Duration::from_millis(300));
    let watcher = s.web.watch(Duration::from_millis(100)).unwrap();
    assert_eq!(
        tls_get(s.port, &client(&pki, false), "/metrics").await.0,
        200
    );
    // Rotate to a certificate from a new CA, in place: old clients' trust no longer matches.
    let other = pki_in(pki.dir.path());
    // Not before the files have settled: they might be half written.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(s.web.counters.reloads_ok.load(Ordering::Relaxed), 0);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(tls_get(s.port, &client(&pki, false), "/metrics").await.0, 0);
    assert_eq!(
        tls_get(s.port, &client(&other, false), "/metrics").await.0,
        200
    );
    assert_eq!(s.web.counters.reloads_ok.load(Ordering::Relaxed), 1);
    watcher.abort();
}

/// Writes a fresh PKI's server certificate over the one in `dir`.
fn pki_in(dir: &Path) -> Pki {
    let fresh = pki();
    for f in ["server.crt", "server.key"] {
        std::fs::copy(fresh.dir.path().join(f), dir.join(f)).unwrap();
    }
    fresh
}

/// A web config naming a certificate that is not there yet is refused, and picked up by the
/// watcher once the certificate arrives (its arrival is a change, though the config file
/// itself did not change again).
#[tokio::test]
async fn a_certificate_arriving_after_its_config_is_picked_up() {
    let old = pki();
    let cfg = write_config(
        old.dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    );
    let s = start(Some(&cfg), Limits::default()).await;
    s.web.set_settle(Duration::from_millis(200));
    let watcher = s.web.watch(Duration::from_millis(50)).unwrap();
    write_config(
        old.dir.path(),
        "tls_server_config:\n  cert_file: next.crt\n  key_file: next.key\n",
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(s.web.counters.reloads_failed.load(Ordering::Relaxed), 1);
    assert_eq!(s.web.counters.reloads_ok.load(Ordering::Relaxed), 0);
    let fresh = pki();
    for (from, to) in [("server.crt", "next.crt"), ("server.key", "next.key")] {
        std::fs::copy(fresh.dir.path().join(from), old.dir.path().join(to)).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(s.web.counters.reloads_ok.load(Ordering::Relaxed), 1);
    assert_eq!(
        tls_get(s.port, &client(&fresh, false), "/metrics").await.0,
        200
    );
    watcher.abort();
}
