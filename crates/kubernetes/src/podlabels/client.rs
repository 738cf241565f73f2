//! A minimal client of the Kubernetes API server: HTTP/1.1 GETs with a bearer token, over TLS
//! verified against the service account's CA.
//!
//! Why not kube-rs and k8s-openapi: they compile every API type of Kubernetes for one list and
//! watch of one resource. hyper's HTTP/1.1 client connection and tokio-rustls are already in
//! the binary (tonic, axum, the web server and npd-check use them), so this costs a few hundred
//! lines and no new crate. It runs on the pod-label thread's own runtime, never on the HTTP
//! server's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use dgx_pixels_settings::file::{read_untrusted, Untrusted};

/// Where the in-cluster service account's files are.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Largest token or CA bundle read.
const MAX_SECRET_FILE_BYTES: u64 = 256 << 10;

/// What went wrong with a request, by the reason `dgx_pixels_source_read_errors_total` counts.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// Connecting, TLS, the token or CA files, the transfer, a deadline, or an HTTP error
    /// other than those below.
    #[error("{0}")]
    Request(String),
    /// HTTP 401 or 403: the token is refused or lacks list/watch on pods.
    #[error("the API server refused the request: HTTP {0} (check the service account token and its RBAC: list and watch on pods)")]
    Unauthorized(u16),
    /// HTTP 410 or a watch ERROR event with code 410: the resource version is too old.
    #[error("resource version expired (HTTP 410 Gone)")]
    Expired,
    /// A response or one watch event over its bound.
    #[error("{0}")]
    TooLarge(String),
    /// A body that is not the JSON expected.
    #[error("{0}")]
    Parse(String),
}

impl ClientError {
    /// The `reason` label of its `dgx_pixels_source_read_errors_total` series.
    pub fn reason(&self) -> &'static str {
        match self {
            ClientError::Request(_) => "pod_labels_request",
            ClientError::Unauthorized(_) => "pod_labels_unauthorized",
            ClientError::Expired => "pod_labels_expired",
            ClientError::TooLarge(_) => "pod_labels_too_large",
            ClientError::Parse(_) => "pod_labels_parse",
        }
    }

    /// Every reason, in the order the source reports them.
    pub const REASONS: [&'static str; 5] = [
        "pod_labels_request",
        "pod_labels_unauthorized",
        "pod_labels_expired",
        "pod_labels_too_large",
        "pod_labels_parse",
    ];
}

/// The API server and the credentials to reach it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiServer {
    /// TLS (always, except plain HTTP to a loopback address: `kubectl proxy`, tests).
    https: bool,
    host: String,
    port: u16,
    /// Re-read on every request, so a rotated (projected) token is picked up.
    token_file: Option<PathBuf>,
    ca_file: PathBuf,
}

impl ApiServer {
    /// The API server at `url` (`https://HOST:PORT`, or `http://` to a loopback address),
    /// with the token and CA of the service account in `account_dir`; an empty `url` means
    /// in-cluster, from `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`.
    pub fn new(url: &str, account_dir: &Path) -> Result<ApiServer, String> {
        let url = if url.is_empty() {
            let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
                "KUBERNETES_SERVICE_HOST is not set (not in a pod?); set [kubernetes] api_server"
                    .to_string()
            })?;
            let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
            // An IPv6 service address needs brackets in a URL.
            if host.contains(':') {
                format!("https://[{host}]:{port}")
            } else {
                format!("https://{host}:{port}")
            }
        } else {
            url.to_string()
        };
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(format!(
                    "{url:?}: the scheme must be https (or http to loopback)"
                ))
            }
        };
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(format!("{url:?}: give the server only, without a path"));
        }
        let host = uri
            .host()
            .ok_or_else(|| format!("{url:?} has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if !https
            && !host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
        {
            return Err(format!(
                "{url:?}: plain http is allowed to a loopback address only (the token would travel in clear)"
            ));
        }
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let token = account_dir.join("token");
        Ok(ApiServer {
            https,
            host,
            port,
            // `kubectl proxy` authenticates itself: no token when there is none to send.
            token_file: (https || token.exists()).then_some(token),
            ca_file: account_dir.join("ca.crt"),
        })
    }

    /// `host:port`, for messages.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// Sends `GET path_and_query` and returns the response's status and body. Errors never
    /// contain the token.
    pub async fn get(
        &self,
        path_and_query: &str,
    ) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
        let mut request = hyper::Request::get(path_and_query)
            .header(hyper::header::HOST, self.address())
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::USER_AGENT, "dgx-pixels-exporter");
        if let Some(path) = &self.token_file {
            let token = read_untrusted(path, &Untrusted::regular(MAX_SECRET_FILE_BYTES))
                .map_err(|e| ClientError::Request(format!("token {}: {e}", path.display())))?;
            let token = String::from_utf8(token).map_err(|_| {
                ClientError::Request(format!("token {}: not UTF-8", path.display()))
            })?;
            let value = hyper::header::HeaderValue::from_str(&format!("Bearer {}", token.trim()))
                .map_err(|_| {
                ClientError::Request(format!("token {}: not a header value", path.display()))
            })?;
            request = request.header(hyper::header::AUTHORIZATION, value);
        }
        let request = request
            .body(http_body_util::Empty::<Bytes>::new())
            .map_err(|e| ClientError::Request(format!("request {path_and_query}: {e}")))?;
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| {
                ClientError::Request(format!("API server {} unreachable: {e}", self.address()))
            })?;
        if !self.https {
            return send(hyper_util::rt::TokioIo::new(tcp), request).await;
        }
        let tls = tokio_rustls::TlsConnector::from(Arc::new(self.tls_config()?));
        let name = ServerName::try_from(self.host.clone())
            .map_err(|e| ClientError::Request(format!("API server name {}: {e}", self.host)))?;
        let stream = tls
            .connect(name, tcp)
            .await
            .map_err(|e| ClientError::Request(format!("TLS with {}: {e}", self.address())))?;
        send(hyper_util::rt::TokioIo::new(stream), request).await
    }

    /// Trusts the service account's CA bundle only (read on every connection, as it rotates).
    fn tls_config(&self) -> Result<rustls::ClientConfig, ClientError> {
        let ca =
            |why: String| ClientError::Request(format!("CA {}: {why}", self.ca_file.display()));
        let pem = read_untrusted(&self.ca_file, &Untrusted::regular(MAX_SECRET_FILE_BYTES))
            .map_err(|e| ca(e.to_string()))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| ca(e.to_string()))?;
            roots.add(cert).map_err(|e| ca(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(ca("no certificate".into()));
        }
        Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Request(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
    }
}

async fn send<T>(
    io: T,
    request: hyper::Request<http_body_util::Empty<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, ClientError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let failed = |e: hyper::Error| ClientError::Request(format!("API server: {e}"));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(failed)?;
    // Driven beside the request; dropped with the runtime or when the body is dropped.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let response = sender.send_request(request).await.map_err(failed)?;
    match response.status().as_u16() {
        200 => Ok(response),
        s @ (401 | 403) => Err(ClientError::Unauthorized(s)),
        410 => Err(ClientError::Expired),
        s => Err(ClientError::Request(format!(
            "the API server answered HTTP {s}"
        ))),
    }
}

/// A response body read one line (one watch event) at a time, each at most `max` bytes.
pub struct Lines {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
    max: usize,
    ended: bool,
}

impl Lines {
    /// Lines of `body`, each at most `max` bytes.
    pub fn new(body: hyper::body::Incoming, max: usize) -> Lines {
        Lines {
            body,
            buf: Vec::new(),
            max,
            ended: false,
        }
    }

    fn too_large(&self) -> ClientError {
        ClientError::TooLarge(format!("a watch event is over the {} byte limit", self.max))
    }

    /// The next non-empty line, `None` at the end of the body; a line over the bound is an
    /// error before it is all in memory.
    pub async fn next(&mut self) -> Result<Option<Vec<u8>>, ClientError> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                if i > self.max {
                    return Err(self.too_large());
                }
                let mut line: Vec<u8> = self.buf.drain(..=i).collect();
                line.pop();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.buf.len() > self.max {
                return Err(self.too_large());
            }
            if self.ended {
                let rest = std::mem::take(&mut self.buf);
                return Ok((!rest.iter().all(u8::is_ascii_whitespace)).then_some(rest));
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => {
                    return Err(ClientError::Request(format!("API server stream: {e}")));
                }
                None => self.ended = true,
            }
        }
    }
}

/// The whole body, at most `max` bytes.
pub async fn read_all(body: hyper::body::Incoming, max: usize) -> Result<Bytes, ClientError> {
    http_body_util::Limited::new(body, max)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ClientError::TooLarge(format!("a pod list page is over the {max} byte limit"))
            } else {
                ClientError::Request(format!("API server: {e}"))
            }
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn urls_https_or_loopback_http_only() {
        let dir = Path::new("/sa");
        let s = ApiServer::new("https://10.96.0.1:443", dir).unwrap();
        assert_eq!(s.address(), "10.96.0.1:443");
        assert_eq!(s.token_file.as_deref(), Some(Path::new("/sa/token")));
        assert_eq!(s.ca_file, Path::new("/sa/ca.crt"));
        assert!(ApiServer::new("http://127.0.0.1:8001", dir).is_ok());
        assert!(ApiServer::new("http://[::1]:8001", dir).is_ok());
        for bad in [
            "http://10.0.0.1:80",
            "ftp://x",
            "https://h:1/api",
            "not a url",
        ] {
            assert!(ApiServer::new(bad, dir).is_err(), "{bad}");
        }
    }
}
