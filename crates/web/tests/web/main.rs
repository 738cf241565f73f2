//! The web layer end to end on real sockets: TLS and client certificates with certificates made
//! by rcgen, basic auth, reloads and rotation, and the limits against slow or numerous clients.
//!
//! One module a topic; the certificates, the server and the clients they share are here.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod auth;
mod config;
mod limits;
mod tls;
mod toolkit;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use dgx_pixels_web::{guard, serve, Limits, WebState};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A CA, a server certificate for localhost signed by it, and a client certificate.
struct Pki {
    dir: tempfile::TempDir,
    ca_pem: String,
    /// The CA's key (a test presents the CA's own certificate as a client's).
    ca_key_pem: String,
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
        ca_key_pem: ca_key.serialize_pem(),
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
    if with_cert {
        client_with(pki, &pki.client_cert_pem, &pki.client_key_pem)
    } else {
        connector(pki, None)
    }
}

/// A client trusting `pki`'s CA that presents `cert_pem` with `key_pem`.
fn client_with(pki: &Pki, cert_pem: &str, key_pem: &str) -> tokio_rustls::TlsConnector {
    connector(pki, Some((cert_pem, key_pem)))
}

fn connector(pki: &Pki, cert: Option<(&str, &str)>) -> tokio_rustls::TlsConnector {
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
    let config = match cert {
        Some((cert, key)) => builder.with_client_cert_resolver(Arc::new(Presents::new(cert, key))),
        None => builder.with_no_client_auth(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A client certificate presented whatever it is: `with_client_auth_cert` refuses to send
/// one webpki cannot parse (a version 1 certificate), and the server's refusal is the test.
#[derive(Debug)]
struct Presents(Arc<rustls::sign::CertifiedKey>);

impl Presents {
    fn new(cert: &str, key: &str) -> Presents {
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let signer = rustls::crypto::ring::default_provider()
            .key_provider
            .load_private_key(key)
            .unwrap();
        let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
        Presents(Arc::new(rustls::sign::CertifiedKey::new(chain, signer)))
    }
}

impl rustls::client::ResolvesClientCert for Presents {
    fn resolve(
        &self,
        _hints: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {token}\r\n")
}

/// Log lines written while a [`capture`] guard is held (on this thread), without colours.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Captures what this thread logs at info and above (a current-thread runtime's tasks
/// included) until the guard is dropped.
fn capture() -> (tracing::subscriber::DefaultGuard, Captured) {
    let out = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(out.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    (tracing::subscriber::set_default(subscriber), out)
}

/// Whether this machine has a system trust store where Go (and the web config, without a
/// client CA) looks for one.
fn system_store() -> bool {
    std::env::var_os("SSL_CERT_FILE").is_some_and(|p| Path::new(&p).is_file())
        || [
            "/etc/ssl/certs/ca-certificates.crt",
            "/etc/pki/tls/certs/ca-bundle.crt",
            "/etc/ssl/ca-bundle.pem",
            "/etc/pki/tls/cacert.pem",
            "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
            "/etc/ssl/cert.pem",
        ]
        .iter()
        .any(|p| Path::new(p).is_file())
}
