//! `dgx-pixels-exporter npd-check`: the health verdicts of the exporter running on this node,
//! answered in node-problem-detector's custom-plugin protocol (exit 0 OK, 1 problem, 2
//! unknown; one short line on stdout), so that NPD turns them into a node condition that
//! remediation controllers act on (docs/deploy.md, "node-problem-detector").
//!
//! It asks the daemon over its own listener rather than reading the GPUs itself: the verdicts
//! need the state the daemon keeps (latched XIDs, quiet periods), and a second reader of the
//! GPUs would cost what the daemon already paid. It reads the daemon's settings the way the
//! daemon does (config file, environment, flags) for the address, the metrics path and the web
//! config file; with TLS it trusts exactly the certificate the web config serves (pinned, so
//! no host name has to match 127.0.0.1), with basic auth it sends the user and password given
//! here (the web config holds only hashes), and where the web config asks for client
//! certificates it presents the certificate and key given here (`--client-cert`,
//! `--client-key`).
//!
//! It is a careful client of that answer: one deadline (`--timeout`) for the whole exchange,
//! the body's end taken from its framing (never from a close), the exposition read with the
//! textfile collector's parser, and whatever it cannot establish answered unknown.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::cli::{Cli, NpdCheckArgs};
use crate::config;

/// Longest message: NPD's default `max_output_length` (it cuts longer ones itself).
pub const MAX_MESSAGE: usize = 80;
/// Largest exposition read: far above 64 GPUs in the full profile.
const MAX_RESPONSE_BYTES: usize = 32 << 20;
/// Longest password file read.
const MAX_PASSWORD_BYTES: u64 = 4096;
/// Longest client certificate or key file read (a chain of a few certificates).
const MAX_CLIENT_PEM_BYTES: u64 = 256 << 10;

/// The answer: exit status and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// 0 OK, 1 problem, 2 unknown.
    pub status: u8,
    /// One line, at most [`MAX_MESSAGE`] bytes.
    pub message: String,
}

impl Answer {
    fn new(status: u8, message: impl Into<String>) -> Answer {
        Answer {
            status,
            message: one_line(&message.into()),
        }
    }

    fn unknown(message: impl Into<String>) -> Answer {
        Answer::new(2, message)
    }
}

/// Runs the check and prints its answer.
pub fn run(cli: &Cli, args: &NpdCheckArgs) -> ExitCode {
    let answer = check(cli, args);
    println!("{}", answer.message);
    ExitCode::from(answer.status)
}

fn check(cli: &Cli, args: &NpdCheckArgs) -> Answer {
    let deadline = Instant::now() + args.timeout;
    let settings =
        match config::environment(std::env::vars_os()).and_then(|env| config::resolve(cli, env)) {
            Ok(s) => s,
            Err(e) => return Answer::unknown(format!("config: {e}")),
        };
    let target = match args.address.as_deref() {
        // A name too (the chart's node-local Service), looked up within the deadline.
        Some(a) => match a.parse::<SocketAddr>() {
            Ok(addr) => Target::Addr(addr),
            Err(_) => Target::Name(a.to_string()),
        },
        None => match settings.listen_addr() {
            Ok(a) => Target::Addr(loopback_for(a)),
            Err(e) => return Answer::unknown(format!("config: {e}")),
        },
    };
    let pinned = match settings.web.config_file.as_deref().map(served_certificate) {
        Some(Ok(cert)) => cert,
        Some(Err(e)) => return Answer::unknown(e),
        None => None,
    };
    let auth = match (&args.username, &args.password_file) {
        (Some(user), Some(file)) => match read_password(file) {
            Ok(p) => Some(basic_auth(user, &p)),
            Err(e) => return Answer::unknown(e),
        },
        (Some(user), None) => Some(basic_auth(user, "")),
        _ => None,
    };
    let client = match (&args.client_cert, &args.client_key) {
        (Some(cert), Some(key)) => match client_identity(cert, key) {
            Ok(id) => Some(id),
            Err(e) => return Answer::unknown(e),
        },
        _ => None,
    };
    let request = Request {
        target,
        path: &settings.web.telemetry_path,
        auth: auth.as_deref(),
        pinned,
        client,
        deadline,
        timeout: args.timeout,
    };
    match request.get() {
        Ok(body) => judge(&body, args.problem_at),
        Err(e) => Answer::unknown(e),
    }
}

/// The daemon listening on every address answers on the loopback one of its family.
fn loopback_for(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, a.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, a.port()).into(),
        _ => a,
    }
}

/// The certificate the daemon serves, from its web config file; `None` without TLS.
fn served_certificate(path: &Path) -> Result<Option<CertificateDer<'static>>, String> {
    let read = |p: &Path| {
        dgx_pixels_web::read_regular(p, dgx_pixels_web::MAX_CONFIG_FILE_BYTES)
            .map_err(|e| format!("web config {}: {e}", p.display()))
    };
    let text = String::from_utf8(read(path)?)
        .map_err(|_| format!("web config {}: not UTF-8", path.display()))?;
    // Certificate first, then key and CA: only the certificate is read (the key stays the
    // daemon's secret).
    let Some(cert_file) = dgx_pixels_web::WebConfig::named_files(&text, path)
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let pem = read(&cert_file)?;
    match CertificateDer::pem_slice_iter(&pem).next() {
        Some(Ok(cert)) => Ok(Some(cert)),
        _ => Err(format!("no certificate in {}", cert_file.display())),
    }
}

/// A client certificate chain and its key, for an exporter that asks for client certificates.
type ClientIdentity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The client certificate chain and key from their PEM files (bounded reads).
fn client_identity(cert: &Path, key: &Path) -> Result<ClientIdentity, String> {
    let read = |p: &Path| {
        dgx_pixels_web::read_regular(p, MAX_CLIENT_PEM_BYTES)
            .map_err(|e| format!("client certificate {}: {e}", p.display()))
    };
    let pem = read(cert)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("client certificate {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("no certificate in {}", cert.display()));
    }
    let key_pem = read(key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("client key {}: {e}", key.display()))?;
    Ok((chain, key))
}

fn read_password(path: &Path) -> Result<String, String> {
    let bytes = dgx_pixels_web::read_regular(path, MAX_PASSWORD_BYTES)
        .map_err(|e| format!("password file {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("password file {}: not UTF-8", path.display()))?;
    Ok(text.trim_end_matches(['\r', '\n']).to_string())
}

/// `Basic base64(user:password)`.
fn basic_auth(user: &str, password: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{user}:{password}");
    let mut out = String::from("Basic ");
    for chunk in input.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Where the exporter is: an address, or a name resolved within the deadline.
enum Target {
    Addr(SocketAddr),
    Name(String),
}

struct Request<'a> {
    target: Target,
    path: &'a str,
    auth: Option<&'a str>,
    pinned: Option<CertificateDer<'static>>,
    client: Option<ClientIdentity>,
    deadline: Instant,
    timeout: Duration,
}

impl Request<'_> {
    /// The body of a 200 answer; anything else is the reason for an unknown verdict.
    ///
    /// One deadline bounds the whole exchange (name lookup, connect, TLS handshake, request,
    /// every byte of the body): a peer that stalls at any step, or trickles, costs `--timeout`
    /// and no more.
    fn get(&self) -> Result<String, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let answer = rt.block_on(async {
            match tokio::time::timeout_at(deadline, self.exchange()).await {
                Ok(answer) => answer,
                Err(_) => Err(format!(
                    "the exporter did not answer within {}",
                    humantime::format_duration(self.timeout)
                )),
            }
        });
        // A name lookup still blocked in its thread must not hold the exit.
        rt.shutdown_background();
        answer
    }

    async fn exchange(&self) -> Result<String, String> {
        let addr = match &self.target {
            Target::Addr(a) => *a,
            Target::Name(name) => match tokio::net::lookup_host(name.as_str())
                .await
                .map(|mut all| all.next())
            {
                Ok(Some(a)) => a,
                Ok(None) => return Err(format!("--address {name}: no address")),
                Err(e) => return Err(format!("--address {name}: {e}")),
            },
        };
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("exporter unreachable at {addr}: {e}"))?;
        let mut request = hyper::Request::get(self.path)
            .header(hyper::header::HOST, "localhost")
            .header(hyper::header::ACCEPT, "text/plain")
            .header(hyper::header::ACCEPT_ENCODING, "identity")
            .header(hyper::header::CONNECTION, "close");
        if let Some(auth) = self.auth {
            request = request.header(hyper::header::AUTHORIZATION, auth);
        }
        let request = request
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| format!("request for {}: {e}", self.path))?;
        let Some(cert) = &self.pinned else {
            return fetch(hyper_util::rt::TokioIo::new(tcp), request).await;
        };
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned::new(cert.clone())));
        let config = match &self.client {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .map_err(|e| format!("client certificate: {e}"))?,
            None => builder.with_no_client_auth(),
        };
        let name = ServerName::try_from("localhost").map_err(|e| format!("TLS: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| refusal(&e).unwrap_or_else(|| format!("TLS: {e}")))?;
        fetch(hyper_util::rt::TokioIo::new(tls), request).await
    }
}

/// Sends `request` over `io` (HTTP/1.1) and reads the whole body as its framing says.
///
/// The body ends where its `Content-Length` or its last chunk says, never at a close: a
/// connection that ends before (a plain FIN, TLS without `close_notify`) or a malformed chunk
/// is an error, and an answer without either framing is refused, since a cut in it could not be
/// told from its end.
async fn fetch<T>(
    io: T,
    request: hyper::Request<http_body_util::Empty<bytes::Bytes>>,
) -> Result<String, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    use http_body_util::BodyExt;

    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| failure("exporter", &e))?;
    // Driven beside the request; the runtime drops it with the check.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| failure("exporter", &e))?;
    match response.status().as_u16() {
        200 => {}
        401 => return Err("the exporter refused the check: HTTP 401 (basic auth)".into()),
        s => return Err(format!("the exporter answered HTTP {s}")),
    }
    let headers = response.headers();
    let chunked = headers
        .get_all(hyper::header::TRANSFER_ENCODING)
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"));
    if !chunked && !headers.contains_key(hyper::header::CONTENT_LENGTH) {
        return Err("the exporter's answer has neither Content-Length nor chunks".into());
    }
    let body = http_body_util::Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                format!(
                    "the exporter's answer is over {} MiB",
                    MAX_RESPONSE_BYTES >> 20
                )
            } else {
                failure("the exporter's answer is incomplete", &*e)
            }
        })?
        .to_bytes();
    String::from_utf8(body.to_vec()).map_err(|_| "the exporter's answer is not UTF-8".into())
}

/// `what: <innermost cause>`, or what the exporter's TLS alert says about our client
/// certificate.
fn failure(what: &str, e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(r) = refusal(e) {
        return r;
    }
    let mut cause: &(dyn std::error::Error + 'static) = e;
    loop {
        let next = cause.source().or_else(|| {
            // An io::Error's source skips the error it wraps.
            cause
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|inner| inner as &(dyn std::error::Error + 'static))
        });
        match next {
            Some(n) => cause = n,
            None => break,
        }
    }
    format!("{what}: {cause}")
}

/// The TLS error somewhere in `e`'s chain, through the io::Errors that wrap it.
fn tls_error<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut at = Some(e);
    while let Some(e) = at {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        at = inner.or_else(|| e.source());
    }
    None
}

/// What the exporter's TLS alert says about our client certificate, in words an operator
/// acts on; `None` for any other error.
fn refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    use rustls::AlertDescription as A;
    match tls_error(e)? {
        rustls::Error::AlertReceived(A::CertificateRequired) => {
            Some("the exporter requires a client certificate (--client-cert, --client-key)".into())
        }
        rustls::Error::AlertReceived(
            A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::DecryptError,
        ) => Some("the exporter refused the client certificate".into()),
        _ => None,
    }
}

/// Trusts exactly one certificate: the one the daemon's web config serves.
#[derive(Debug)]
struct Pinned {
    cert: CertificateDer<'static>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl Pinned {
    fn new(cert: CertificateDer<'static>) -> Pinned {
        Pinned {
            cert,
            algorithms: rustls::crypto::ring::default_provider().signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "not the certificate of the web config file".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// One line of at most [`MAX_MESSAGE`] bytes, cut at a character boundary.
fn one_line(s: &str) -> String {
    let mut line: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE - 3;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str("...");
    }
    line
}

mod judge;
pub use judge::judge;

#[cfg(test)]
mod tests;
