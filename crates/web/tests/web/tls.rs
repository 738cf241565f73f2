//! TLS and client certificates: served, required, verified, rotated without a restart.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dgx_pixels_web::Limits;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use super::{capture, client, client_with, get_on, pki, plain_get, start, write_config, Pki};

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

/// Issue 47: each refused client certificate logs one warning line with rustls' reason, so an
/// operator sees why a scraper is turned away: a certificate of another CA (issuer name alike, signature not), a self-signed
/// CA:TRUE certificate (refused as a client's even when it is its own CA), a certificate
/// without X.509v3 extensions, none at all.
#[tokio::test]
async fn each_refused_client_certificate_logs_one_line_with_the_reason() {
    let pki = pki();
    let (_guard, out) = capture();
    let cfg = write_config(
        pki.dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    );
    let s = start(Some(&cfg), Limits::default()).await;
    let other = super::pki();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let v1 = client_with(
        &pki,
        &std::fs::read_to_string(data.join("v1-client.pem")).unwrap(),
        &std::fs::read_to_string(data.join("v1-client.key")).unwrap(),
    );
    let foreign = client_with(&pki, &other.client_cert_pem, &other.client_key_pem);
    let refused = |reason: &str| {
        out.lines()
            .into_iter()
            .filter(|l| l.contains("client certificate refused"))
            .filter(|l| l.contains("WARN") && l.contains(reason))
            .count()
    };
    for (connector, reason) in [
        // Same issuer name (rcgen's default), another key: the signature does not verify.
        (foreign, "BadSignature"),
        (v1, "UnsupportedCertVersion"),
        (client(&pki, false), "peer sent no certificates"),
    ] {
        let before = out.lines().len();
        assert_eq!(
            tls_get(s.port, &connector, "/metrics").await.0,
            0,
            "{reason}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(refused(reason), 1, "{reason}: {:?}", out.lines());
        assert_eq!(out.lines().len(), before + 1, "{:?}", out.lines());
    }
    // A self-signed CA:TRUE certificate, trusted as the client CA, presented as a client's.
    let ca_as_client = client_with(&pki, &pki.ca_pem, &pki.ca_key_pem);
    assert_eq!(tls_get(s.port, &ca_as_client, "/metrics").await.0, 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(refused("CaUsedAsEndEntity"), 1, "{:?}", out.lines());
    // The good one still gets in, and logs nothing.
    let before = out.lines().len();
    assert_eq!(
        tls_get(s.port, &client(&pki, true), "/metrics").await.0,
        200
    );
    assert_eq!(out.lines().len(), before);
}

/// Issue 47: RequestClientCert asks for a certificate and takes any, or none, unverified (Go's
/// meaning), after a warning at load that it authenticates nobody.
#[tokio::test]
async fn request_client_cert_takes_any_certificate_or_none_and_says_so() {
    let pki = pki();
    let (_guard, out) = capture();
    let cfg = write_config(
        pki.dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequestClientCert\n",
    );
    let s = start(Some(&cfg), Limits::default()).await;
    let warned = out
        .lines()
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("authenticate nobody"))
        .count();
    assert_eq!(warned, 1, "{:?}", out.lines());
    let other = super::pki();
    let foreign = client_with(&pki, &other.client_cert_pem, &other.client_key_pem);
    assert_eq!(tls_get(s.port, &foreign, "/metrics").await.0, 200);
    assert_eq!(
        tls_get(s.port, &client(&pki, false), "/metrics").await.0,
        200
    );
}

/// Issue 47: client_allowed_sans (exporter-toolkit's check, exact strings): a verified client
/// certificate naming an allowed SAN gets in, one naming none is refused with one warning
/// line saying which SANs it has, and with the list set a certificate is required.
#[tokio::test]
async fn client_allowed_sans_let_in_only_the_names_listed() {
    let pki = pki();
    let (_guard, out) = capture();
    let with = |sans: &str, auth: &str| {
        format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: {auth}\n  client_ca_file: ca.crt\n  client_allowed_sans: [{sans}]\n")
    };
    let cfg = write_config(
        pki.dir.path(),
        &with("other, scraper", "RequireAndVerifyClientCert"),
    );
    let s = start(Some(&cfg), Limits::default()).await;
    assert_eq!(
        tls_get(s.port, &client(&pki, true), "/metrics").await.0,
        200
    );
    drop(s);
    let cfg = write_config(
        pki.dir.path(),
        &with("other, Scraper", "VerifyClientCertIfGiven"),
    );
    let s = start(Some(&cfg), Limits::default()).await;
    assert_eq!(tls_get(s.port, &client(&pki, true), "/metrics").await.0, 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused: Vec<String> = out
        .lines()
        .into_iter()
        .filter(|l| l.contains("client certificate refused"))
        .collect();
    assert_eq!(refused.len(), 1, "{:?}", out.lines());
    assert!(
        refused[0].contains(
            "no SAN of the client certificate is in client_allowed_sans (it has: scraper)"
        ),
        "{}",
        refused[0]
    );
    assert_eq!(
        tls_get(s.port, &client(&pki, false), "/metrics").await.0,
        0,
        "a certificate is required"
    );
    // A reload may not drop the list (it would let any verified certificate in).
    write_config(
        pki.dir.path(),
        &with("x", "VerifyClientCertIfGiven").replace("  client_allowed_sans: [x]\n", ""),
    );
    let e = s.web.reload().unwrap_err().to_string();
    assert!(
        e.contains("would remove the client certificate SAN restriction"),
        "{e}"
    );
    let e = dgx_pixels_web::WebConfig::load(&write_config(
        pki.dir.path(),
        &with("a", "NoClientCert").replace("  client_ca_file: ca.crt\n", ""),
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("key tls_server_config.client_allowed_sans: set, but client_auth_type asks for no client certificate"), "{e}");
}

/// Issue 47: `http2` (true by default in exporter-toolkit) is accepted, but HTTP/1.1 is what is
/// served, and ALPN says so: a client offering `h2` first negotiates `http/1.1` and scrapes.
/// Were `h2` ever offered without being served, such a client would fail every scrape.
#[tokio::test]
async fn a_client_offering_h2_negotiates_http_1_1() {
    let pki = pki();
    let cfg = write_config(
        pki.dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nhttp_server_config:\n  http2: true\n",
    );
    let s = start(Some(&cfg), Limits::default()).await;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::pem::PemObject::from_pem_slice(pki.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (status, text) = get_on(tls, "/metrics", "").await;
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}
