//! The web layer end to end on real sockets: TLS and client certificates with certificates made
//! by rcgen, basic auth, reloads and rotation, and the limits against slow or numerous clients.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use dgx_pixels_web::{guard, serve, Limits, WebConfig, WebState};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A CA, a server certificate for localhost signed by it, and a client certificate.
struct Pki {
    dir: tempfile::TempDir,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

fn issue(ca: &rcgen::Certificate, ca_key: &KeyPair, names: &[&str]) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    let cert = params.signed_by(&key, ca, ca_key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).unwrap();
    let (server_cert, server_key) = issue(&ca, &ca_key, &["localhost"]);
    let (client_cert_pem, client_key_pem) = issue(&ca, &ca_key, &["scraper"]);
    std::fs::write(dir.path().join("server.crt"), server_cert).unwrap();
    std::fs::write(dir.path().join("server.key"), server_key).unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca.pem()).unwrap();
    Pki {
        dir,
        ca_pem: ca.pem(),
        client_cert_pem,
        client_key_pem,
    }
}

// bcrypt of "s3cret" and of "other", cost 4 (fast tests; production hashes use 10 or more).
fn hash(password: &str) -> String {
    bcrypt::hash(password, 4).unwrap()
}

fn app(web: &Arc<WebState>) -> Router {
    Router::new()
        .route("/metrics", get(|| async { "metrics\n" }))
        .route("/-/healthy", get(|| async { "Healthy\n" }))
        .route("/big", get(|| async { vec![b'x'; 64 << 20] }))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(web), guard))
}

struct Server {
    port: u16,
    web: Arc<WebState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(config: Option<&Path>, limits: Limits) -> Server {
    let web = WebState::load(config, false).unwrap();
    // Tests write a file and reload at once; the settle period has its own test.
    web.set_settle(Duration::ZERO);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(serve(
        listener,
        app(&web),
        Arc::clone(&web),
        limits,
        std::future::pending(),
    ));
    Server { port, web, task }
}

fn write_config(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("web.yml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Sends one GET and returns the status code (0 when the connection failed or closed).
async fn get_on<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    path: &str,
    extra: &str,
) -> (u16, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{extra}\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

async fn plain_get(port: u16, path: &str, extra: &str) -> (u16, String) {
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    get_on(s, path, extra).await
}

fn client(pki: &Pki, with_cert: bool) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = if with_cert {
        use rustls::pki_types::pem::PemObject;
        builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(pki.client_cert_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(pki.client_key_pem.as_bytes()).unwrap(),
            )
            .unwrap()
    } else {
        builder.with_no_client_auth()
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

use rustls::pki_types::pem::PemObject;

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

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {token}\r\n")
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
async fn basic_auth_guards_metrics_but_not_the_probes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!("basic_auth_users:\n  prometheus: {}\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n", hash("s3cret")),
    );
    let s = start(Some(&cfg), Limits::default()).await;
    let (status, text) = plain_get(s.port, "/metrics", "").await;
    assert_eq!(status, 401);
    assert!(
        text.to_ascii_lowercase()
            .contains("www-authenticate: basic"),
        "{text}"
    );
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("prometheus", "wrong"))
            .await
            .0,
        401
    );
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("nobody", "s3cret"))
            .await
            .0,
        401
    );
    let (status, text) = plain_get(s.port, "/metrics", &basic("prometheus", "s3cret")).await;
    assert_eq!(status, 200);
    assert!(
        text.to_ascii_lowercase().contains("x-frame-options: deny"),
        "{text}"
    );
    // Cached: the second good scrape does not run bcrypt again (and still succeeds).
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("prometheus", "s3cret"))
            .await
            .0,
        200
    );
    assert_eq!(
        plain_get(s.port, "/-/healthy", "").await.0,
        200,
        "kubelet probes stay open"
    );
    assert_eq!(s.web.counters.unauthorized.load(Ordering::Relaxed), 3);
}

#[tokio::test]
async fn a_good_reload_applies_and_a_bad_one_keeps_the_old_config() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!("basic_auth_users:\n  a: {}\n", hash("s3cret")),
    );
    let s = start(Some(&cfg), Limits::default()).await;
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("a", "s3cret")).await.0,
        200
    );

    write_config(
        dir.path(),
        &format!("basic_auth_users:\n  b: {}\n", hash("other")),
    );
    assert!(s.web.reload().unwrap());
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("a", "s3cret")).await.0,
        401
    );
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("b", "other")).await.0,
        200
    );

    write_config(dir.path(), "basic_auth_users:\n  c: not-a-hash\n");
    let e = s.web.reload().unwrap_err().to_string();
    assert!(
        e.contains("line 2: key basic_auth_users.c: not a bcrypt hash"),
        "{e}"
    );
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("b", "other")).await.0,
        200,
        "old config stays"
    );
    let c = &s.web.counters;
    assert_eq!(c.reloads_ok.load(Ordering::Relaxed), 1);
    assert_eq!(c.reloads_failed.load(Ordering::Relaxed), 1);
    assert!(!c.last_reload_ok.load(Ordering::Relaxed));
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

#[tokio::test]
async fn connections_beyond_the_cap_are_closed_at_once() {
    let s = start(
        None,
        Limits {
            max_connections: 2,
            ..Limits::default()
        },
    )
    .await;
    let _a = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    let _b = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // At the cap, a few reserve connections still answer the probe paths, and only them.
    assert_eq!(plain_get(s.port, "/-/healthy", "").await.0, 200);
    assert_eq!(plain_get(s.port, "/metrics", "").await.0, 503);
    assert_eq!(
        s.web.counters.rejected_connections.load(Ordering::Relaxed),
        1
    );
    // With the reserve held too, connections are closed at once, and counted.
    let mut reserve = Vec::new();
    for _ in 0..dgx_pixels_web::PROBE_RESERVE {
        reserve.push(TcpStream::connect(("127.0.0.1", s.port)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(plain_get(s.port, "/-/healthy", "").await.0, 0);
    assert_eq!(
        s.web.counters.rejected_connections.load(Ordering::Relaxed),
        2
    );
    drop(reserve);
    drop(_a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        plain_get(s.port, "/metrics", "").await.0,
        200,
        "a slot freed up"
    );
}

#[tokio::test]
async fn slow_headers_and_stalled_readers_are_cut_off_honest_slow_readers_are_not() {
    let s = start(
        None,
        Limits {
            header_read_timeout: Duration::from_millis(300),
            write_stall_timeout: Duration::from_millis(300),
            ..Limits::default()
        },
    )
    .await;
    // Slowloris: half a request head, then nothing.
    let mut slow = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), slow.read_to_end(&mut buf)).await;
    assert!(
        closed.is_ok(),
        "connection still open after the header timeout"
    );

    // A reader that stops reading a 64 MiB response is dropped after the stall timeout.
    let mut stalled = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    stalled
        .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        s.web.counters.stalled_connections.load(Ordering::Relaxed),
        1
    );

    // A reader that reads slowly (pauses shorter than the timeout) gets everything.
    let mut honest = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    honest
        .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut total = 0usize;
    let mut chunk = vec![0u8; 4 << 20];
    loop {
        let n = honest.read(&mut chunk).await.unwrap();
        if n == 0 {
            break;
        }
        total += n;
        if total < (16 << 20) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(total > 64 << 20, "got {total} bytes");
    assert_eq!(
        s.web.counters.stalled_connections.load(Ordering::Relaxed),
        1
    );
}

#[tokio::test]
async fn request_bodies_are_refused() {
    let s = start(None, Limits::default()).await;
    let (status, _) = plain_get(s.port, "/metrics", "Content-Length: 5\r\n\r\nhello").await;
    assert_eq!(status, 413);
    assert_eq!(s.web.counters.bodies_refused.load(Ordering::Relaxed), 1);
}

#[test]
fn invalid_files_name_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str)] = &[
        (
            "tls_server_config:\n  cert_fil: x\n",
            "line 2: key tls_server_config.cert_fil: unknown key, expected one of `cert_file`",
        ),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
            "line 2: key tls_server_config.cert_file: ",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n",
            "key tls_server_config.min_version: TLS10 is insecure",
        ),
        (
            "http_server_config:\n  headers:\n    Server: me\n",
            "line 3: key http_server_config.headers.Server: header not allowed",
        ),
        (
            "basic_auth_users:\n  u: plain\n",
            "line 2: key basic_auth_users.u: not a bcrypt hash",
        ),
        ("basic_auth_users: [\n", "line "),
    ];
    for (text, want) in cases {
        let p = write_config(dir.path(), text);
        let e = WebConfig::load(&p).unwrap_err().to_string();
        assert!(e.starts_with(&format!("web config {}", p.display())), "{e}");
        assert!(e.contains(want), "{text:?}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
    // Key and certificate that do not match.
    let a = pki();
    let b = pki();
    std::fs::copy(
        b.dir.path().join("server.key"),
        a.dir.path().join("other.key"),
    )
    .unwrap();
    let p = write_config(
        a.dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: other.key\n",
    );
    let e = WebConfig::load(&p).unwrap_err().to_string();
    assert!(e.contains("does not match"), "{e}");
    // An empty file is valid at startup: plain HTTP.
    let p = write_config(dir.path(), "");
    assert!(WebConfig::load(&p).unwrap().tls.is_none());
}

/// Regression (hardening round 2): bcrypt costs outside 4..=31 parse as hashes but can never
/// verify, so their user could never log in; keys given twice were taken silently.
#[test]
fn unusable_hashes_and_duplicate_keys_are_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let good = hash("s3cret");
    let cases = [
        (
            format!("basic_auth_users:\n  u: {}\n", good.replacen("$04$", "$99$", 1)),
            "line 2: key basic_auth_users.u: bcrypt cost 99 is outside 4..=31".to_string(),
        ),
        (
            format!("basic_auth_users:\n  u: {}\n", good.replacen("$04$", "$03$", 1)),
            "key basic_auth_users.u: bcrypt cost 3 is outside 4..=31".to_string(),
        ),
        (
            format!("basic_auth_users:\n  u: {good}\n  u: {good}\n"),
            "key basic_auth_users.u: given twice".to_string(),
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Frame-Options: sameorigin\n".to_string(),
            "key http_server_config.headers.X-Frame-Options: given twice".to_string(),
        ),
        (
            format!("basic_auth_users:\n  u: {good}\nbasic_auth_users:\n  v: {good}\n"),
            "key basic_auth_users: given twice".to_string(),
        ),
    ];
    for (text, want) in cases {
        let p = write_config(dir.path(), &text);
        let e = WebConfig::load(&p).unwrap_err().to_string();
        assert!(e.contains(&want), "{text:?}: {e}");
    }
}

/// Regression (hardening round 2, item 1, severe): truncating the live web config was taken as
/// a valid reload and the server went on without TLS, client certificates or authentication;
/// a half-written file did the same. A reload now never takes them away.
#[tokio::test]
async fn reloads_never_remove_tls_client_certificates_or_authentication() {
    let pki = pki();
    let full = format!(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\nbasic_auth_users:\n  a: {}\n",
        hash("s3cret")
    );
    let cfg = write_config(pki.dir.path(), &full);
    let s = start(Some(&cfg), Limits::default()).await;
    let mtls = client(&pki, true);
    let auth = basic("a", "s3cret");
    let get = |connector: tokio_rustls::TlsConnector, extra: String| async move {
        let tcp = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
        match connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
        {
            Ok(tls) => get_on(tls, "/metrics", &extra).await.0,
            Err(_) => 0,
        }
    };
    assert_eq!(get(mtls.clone(), auth.clone()).await, 200);

    let weaker = [
        ("", "the file is empty"),
        ("\n  \n", "the file is empty"),
        // Half written: TLS there, the users not yet.
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
            "would remove basic authentication",
        ),
        (
            &format!("basic_auth_users:\n  a: {}\n", hash("s3cret")),
            "would remove TLS and client certificate verification",
        ),
        (
            &format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\nbasic_auth_users:\n  a: {}\n", hash("s3cret")),
            "would remove client certificate verification",
        ),
        ("tls_server_config:\n  cert_file: server.crt\n", "tls_server_config.key_file"),
    ];
    for (n, (text, why)) in weaker.iter().enumerate() {
        write_config(pki.dir.path(), text);
        let e = s.web.reload().unwrap_err().to_string();
        assert!(e.contains(why), "{text:?}: {e}");
        assert_eq!(
            s.web.counters.reloads_failed.load(Ordering::Relaxed),
            n as u64 + 1
        );
        assert!(!s.web.counters.last_reload_ok.load(Ordering::Relaxed));
        // Still TLS, still client certificates, still a password.
        assert_eq!(get(client(&pki, false), auth.clone()).await, 0, "{text:?}");
        assert_eq!(get(mtls.clone(), String::new()).await, 401, "{text:?}");
        assert_eq!(get(mtls.clone(), auth.clone()).await, 200, "{text:?}");
    }
    // Changing the users is a reload like any other.
    write_config(
        pki.dir.path(),
        &full.replace("  a: ", &format!("  b: {}\n  a: ", hash("other"))),
    );
    assert!(s.web.reload().unwrap());
    assert_eq!(get(mtls.clone(), basic("b", "other")).await, 200);
    assert_eq!(s.web.counters.reloads_ok.load(Ordering::Relaxed), 1);
}

/// Regression (hardening round 2, items 1 and 6): the watcher read files still being written,
/// and a FIFO in place of the web config hung the reload (and then shutdown).
#[tokio::test]
async fn files_being_written_and_fifos_are_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!("basic_auth_users:\n  a: {}\n", hash("s3cret")),
    );
    let s = start(Some(&cfg), Limits::default()).await;
    s.web.set_settle(Duration::from_millis(600));
    let watcher = s.web.watch(Duration::from_millis(50)).unwrap();
    // Rewritten, and then left alone: read only once it has settled.
    write_config(
        dir.path(),
        &format!("basic_auth_users:\n  b: {}\n", hash("other")),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.web.counters.reloads_ok.load(Ordering::Relaxed), 0);
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("a", "s3cret")).await.0,
        200
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(s.web.counters.reloads_ok.load(Ordering::Relaxed), 1);
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("b", "other")).await.0,
        200
    );
    watcher.abort();

    // A FIFO: refused at once (a blocking open would wait for a writer forever).
    std::fs::remove_file(&cfg).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(&cfg)
        .status()
        .unwrap()
        .success());
    s.web.set_settle(Duration::ZERO);
    let web = Arc::clone(&s.web);
    let t = std::time::Instant::now();
    let e = tokio::task::spawn_blocking(move || web.reload())
        .await
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(e.contains("not a regular file"), "{e}");
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("b", "other")).await.0,
        200
    );
}

/// Regression (hardening round 2, item 8): verified credentials were forgotten at every reload,
/// so a scraper queued behind a wrong-password flood for 22-30 s; the queue had no bound; and an
/// unknown user was checked against a cost-10 dummy whatever the users' cost (timing oracle).
#[tokio::test]
async fn password_checks_are_bounded_cached_across_reloads_and_the_same_for_unknown_users() {
    let dir = tempfile::tempdir().unwrap();
    // Cost 9: slow enough that a flood holds every check slot while we look.
    let slow = bcrypt::hash("s3cret", 9).unwrap();
    let cfg = write_config(dir.path(), &format!("basic_auth_users:\n  a: {slow}\n"));
    let s = start(Some(&cfg), Limits::default()).await;
    let checks = || s.web.counters.password_checks.load(Ordering::Relaxed);
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("a", "s3cret")).await.0,
        200
    );
    assert_eq!(checks(), 1);
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("a", "s3cret")).await.0,
        200
    );
    assert_eq!(checks(), 1, "verified credentials are remembered");
    // A reload that keeps the user's hash keeps the credential verified.
    write_config(
        dir.path(),
        &format!("basic_auth_users:\n  a: {slow}\n  b: {slow}\n"),
    );
    assert!(s.web.reload().unwrap());
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("a", "s3cret")).await.0,
        200
    );
    assert_eq!(checks(), 1, "still remembered after the reload");

    // A flood of wrong passwords: beyond the check slots they are refused at once (429), and
    // the verified scraper is served meanwhile without waiting for a slot.
    let port = s.port;
    let flood: Vec<_> = (0..12)
        .map(|i| {
            tokio::spawn(async move {
                plain_get(port, "/metrics", &basic("a", &format!("wrong{i}")))
                    .await
                    .0
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t = std::time::Instant::now();
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("a", "s3cret")).await.0,
        200
    );
    let honest = t.elapsed();
    let mut statuses = Vec::new();
    for f in flood {
        statuses.push(f.await.unwrap());
    }
    assert!(
        statuses.iter().all(|c| *c == 401 || *c == 429),
        "{statuses:?}"
    );
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(
        statuses.iter().filter(|c| **c == 401).count() >= dgx_pixels_web::MAX_PASSWORD_CHECKS,
        "{statuses:?}"
    );
    assert!(s.web.counters.auth_throttled.load(Ordering::Relaxed) > 0);
    assert!(
        honest < Duration::from_millis(500),
        "honest scrape took {honest:?}"
    );

    // A changed password hash forgets the old credential.
    write_config(
        dir.path(),
        &format!("basic_auth_users:\n  a: {}\n", hash("new")),
    );
    assert!(s.web.reload().unwrap());
    let before = checks();
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("a", "s3cret")).await.0,
        401
    );
    assert_eq!(checks(), before + 1);

    // An unknown user runs the same bcrypt check as a known one with a wrong password.
    let before = checks();
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("nobody", "x")).await.0,
        401
    );
    assert_eq!(checks(), before + 1, "unknown users are checked too");
}

/// Regression (hardening round 2, item 7): one client holding every connection locked all the
/// others out; connections that never sent a request stayed; and idle keep-alive connections
/// were closed after 10 s, so Prometheus never reused one.
#[tokio::test]
async fn one_client_cannot_hold_every_connection_and_silent_ones_are_closed() {
    let s = start(
        None,
        Limits {
            max_connections_per_client: 3,
            header_read_timeout: Duration::from_millis(400),
            ..Limits::default()
        },
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(("127.0.0.1", s.port)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The fourth from the same address is closed at once and counted.
    assert_eq!(plain_get(s.port, "/-/healthy", "").await.0, 0);
    assert_eq!(
        s.web.counters.rejected_per_client.load(Ordering::Relaxed),
        1
    );
    // They never send a request: closed after the header timeout, and counted.
    for mut h in held {
        let mut buf = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(2), h.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "a silent connection is still open");
    }
    assert_eq!(s.web.counters.request_timeouts.load(Ordering::Relaxed), 3);
    assert_eq!(plain_get(s.port, "/-/healthy", "").await.0, 200);

    // A keep-alive connection idle between requests for longer than the header timeout stays.
    let mut keep = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    let req = b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut buf = vec![0u8; 4096];
    for _ in 0..2 {
        keep.write_all(req).await.unwrap();
        let n = keep.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    keep.write_all(req).await.unwrap();
    let n = keep.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert_eq!(s.web.counters.request_timeouts.load(Ordering::Relaxed), 3);
}

/// Request heads are timed inside TLS: a TLS keep-alive connection idle between scrapes for
/// longer than the header timeout stays open, and one that never sends a request is closed.
#[tokio::test]
async fn tls_keep_alive_connections_idle_between_requests_and_silent_ones_close() {
    let pki = pki();
    let cfg = write_config(
        pki.dir.path(),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    );
    let s = start(
        Some(&cfg),
        Limits {
            header_read_timeout: Duration::from_millis(400),
            ..Limits::default()
        },
    )
    .await;
    let connect = || async {
        let tcp = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
        client(&pki, false)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap()
    };
    let mut keep = connect().await;
    let mut buf = vec![0u8; 4096];
    for _ in 0..3 {
        keep.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let n = keep.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    let mut silent = connect().await;
    let closed = tokio::time::timeout(Duration::from_secs(2), silent.read(&mut buf)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
    assert_eq!(s.web.counters.request_timeouts.load(Ordering::Relaxed), 1);
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

/// A refused body closes the connection: body bytes left unread are never taken for the start
/// of the next request (which would also start a request-head deadline on an idle connection).
#[tokio::test]
async fn a_refused_body_closes_the_connection() {
    let s = start(None, Limits::default()).await;
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let mut out = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(2), c.read_to_end(&mut out)).await;
    assert!(closed.is_ok(), "still open after the 413");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
}

/// A web config whose modification time lies in the future is not taken for one still being
/// written: the watcher reloads it (before, such a file blocked reloads until that time).
#[tokio::test]
async fn a_future_modification_time_does_not_block_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!("basic_auth_users:\n  a: {}\n", hash("s3cret")),
    );
    let s = start(Some(&cfg), Limits::default()).await;
    s.web.set_settle(Duration::from_millis(300));
    let watcher = s.web.watch(Duration::from_millis(50)).unwrap();
    write_config(
        dir.path(),
        &format!("basic_auth_users:\n  b: {}\n", hash("other")),
    );
    let future = std::time::SystemTime::now() + Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&cfg)
        .unwrap()
        .set_modified(future)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(s.web.counters.reloads_ok.load(Ordering::Relaxed), 1);
    assert_eq!(
        plain_get(s.port, "/metrics", &basic("b", "other")).await.0,
        200
    );
    watcher.abort();
}
