//! The web config file, in the format of Prometheus' exporter-toolkit, so one file works for
//! node_exporter and us: `tls_server_config`, `http_server_config`, `basic_auth_users`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::ring as provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};
use serde::Deserialize;

/// A web config error: names the file, and the line and key where they are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// Dotted key, when known.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for WebConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "web config {}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, " line {line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key {key}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for WebConfigError {}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    http_server_config: Option<HttpFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// Response headers the file may set (exporter-toolkit's list).
const ALLOWED_HEADERS: &[&str] = &[
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
];

/// A validated web config, ready to serve with.
#[derive(Clone)]
pub struct WebConfig {
    /// TLS settings; `None` serves plain HTTP.
    pub tls: Option<Arc<ServerConfig>>,
    /// User name to bcrypt hash; empty = no authentication.
    pub users: BTreeMap<String, String>,
    /// Extra response headers.
    pub headers: Vec<(axum::http::HeaderName, axum::http::HeaderValue)>,
    /// Certificate, key and CA files it read (watched for rotation).
    pub files: Vec<PathBuf>,
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .field("headers", &self.headers)
            .finish()
    }
}

impl WebConfig {
    /// No TLS, no authentication, no extra headers: what runs without a web config file.
    pub fn plain() -> WebConfig {
        WebConfig {
            tls: None,
            users: BTreeMap::new(),
            headers: Vec::new(),
            files: Vec::new(),
        }
    }

    /// Reads and validates a web config file; certificate and key files are read too.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| WebConfigError {
            file: path.to_path_buf(),
            line: None,
            key: None,
            message: format!("cannot read: {e}"),
        })?;
        WebConfig::parse(&text, path)
    }

    /// Validates the text of a web config file found at `path` (relative certificate paths are
    /// resolved against its directory, as exporter-toolkit does).
    pub fn parse(text: &str, path: &Path) -> Result<WebConfig, WebConfigError> {
        let err = |key: &str, message: String| WebConfigError {
            file: path.to_path_buf(),
            line: line_of(text, key),
            key: Some(key.to_string()),
            message,
        };
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| {
                let line = e.location().map(|l| l.line());
                let message = e.to_string();
                // "unknown field `x`, expected ..." names the key; keep serde's text.
                let message = match message.find(" at line ") {
                    Some(i) => message[..i].to_string(),
                    None => message,
                };
                // "a.b: unknown field `c`, expected ..." names the key a.b.c.
                let (key, message) = match message.split_once(": unknown field `") {
                    Some((parent, rest)) if !parent.contains(' ') => {
                        let (field, tail) = rest.split_once('`').unwrap_or((rest, ""));
                        (
                            Some(format!("{parent}.{field}")),
                            format!("unknown key{tail}"),
                        )
                    }
                    _ => (None, message),
                };
                WebConfigError {
                    file: path.to_path_buf(),
                    line,
                    key,
                    message,
                }
            })?
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut files = Vec::new();
        let tls = match file.tls_server_config {
            Some(t) => Some(Arc::new(tls_config(t, dir, &err, &mut files)?)),
            None => None,
        };
        let users = file.basic_auth_users.unwrap_or_default();
        for (user, hash) in &users {
            if user.contains(':') {
                return Err(err(
                    "basic_auth_users",
                    format!("user name {user:?} contains ':'"),
                ));
            }
            if hash.parse::<bcrypt::HashParts>().is_err() {
                return Err(err(
                    &format!("basic_auth_users.{user}"),
                    "not a bcrypt hash (generate one with htpasswd -nBC 10 \"\" | tr -d ':\\n')"
                        .to_string(),
                ));
            }
        }
        let mut headers = Vec::new();
        if let Some(http) = file.http_server_config {
            if http.http2 == Some(true) {
                // Accepted for compatibility; scrapes are served over HTTP/1.1.
                tracing::debug!("http_server_config.http2 ignored: HTTP/1.1 only");
            }
            for (name, value) in http.headers.unwrap_or_default() {
                let key = format!("http_server_config.headers.{name}");
                let Some(allowed) = ALLOWED_HEADERS
                    .iter()
                    .find(|h| h.eq_ignore_ascii_case(&name))
                else {
                    return Err(err(
                        &key,
                        format!(
                            "header not allowed; allowed: {}",
                            ALLOWED_HEADERS.join(", ")
                        ),
                    ));
                };
                let v = axum::http::HeaderValue::from_str(&value)
                    .map_err(|e| err(&key, format!("invalid header value: {e}")))?;
                headers.push((
                    axum::http::HeaderName::from_static(to_static_lower(allowed)),
                    v,
                ));
            }
        }
        Ok(WebConfig {
            tls,
            users,
            headers,
            files,
        })
    }
}

fn to_static_lower(name: &'static str) -> &'static str {
    match name {
        "Content-Security-Policy" => "content-security-policy",
        "X-Frame-Options" => "x-frame-options",
        "X-Content-Type-Options" => "x-content-type-options",
        "X-XSS-Protection" => "x-xss-protection",
        _ => "strict-transport-security",
    }
}

/// 1-based line of the first line that mentions the last part of a dotted key.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let leaf = key.rsplit('.').next()?;
    text.lines()
        .position(|l| {
            let t = l.trim_start().trim_start_matches("- ");
            t.starts_with(&format!("{leaf}:")) || t.starts_with(&format!("\"{leaf}\":"))
        })
        .map(|i| i + 1)
}

fn tls_config(
    t: TlsFile,
    dir: &Path,
    err: &dyn Fn(&str, String) -> WebConfigError,
    files: &mut Vec<PathBuf>,
) -> Result<ServerConfig, WebConfigError> {
    let resolve = |p: &PathBuf| {
        if p.is_absolute() {
            p.clone()
        } else {
            dir.join(p)
        }
    };
    let cert_path = t.cert_file.as_ref().map(resolve).ok_or_else(|| {
        err(
            "tls_server_config.cert_file",
            "required with tls_server_config".into(),
        )
    })?;
    let key_path = t.key_file.as_ref().map(resolve).ok_or_else(|| {
        err(
            "tls_server_config.key_file",
            "required with tls_server_config".into(),
        )
    })?;
    // Settings first, so a wrong value is reported even before the files exist.
    let versions = versions(t.min_version.as_deref(), t.max_version.as_deref(), err)?;
    files.push(cert_path.clone());
    files.push(key_path.clone());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            err(
                "tls_server_config.cert_file",
                format!("{}: {e}", cert_path.display()),
            )
        })?;
    if certs.is_empty() {
        return Err(err(
            "tls_server_config.cert_file",
            format!("{}: no certificate in it", cert_path.display()),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| {
        err(
            "tls_server_config.key_file",
            format!("{}: {e}", key_path.display()),
        )
    })?;

    let mut crypto = provider::default_provider();
    if let Some(names) = &t.cipher_suites {
        let mut suites: Vec<SupportedCipherSuite> = Vec::new();
        for name in names {
            let suite = provider::ALL_CIPHER_SUITES
                .iter()
                .find(|s| s.suite().as_str() == Some(name.as_str()))
                .ok_or_else(|| {
                    err(
                        "tls_server_config.cipher_suites",
                        format!(
                            "{name} is not supported; supported: {}",
                            supported_suites().join(", ")
                        ),
                    )
                })?;
            suites.push(*suite);
        }
        // TLS 1.3 suites are not configurable in exporter-toolkit: keep them all.
        suites.extend(
            provider::ALL_CIPHER_SUITES
                .iter()
                .filter(|s| s.tls13().is_some())
                .copied(),
        );
        crypto.cipher_suites = suites;
    }
    if let Some(curves) = &t.curve_preferences {
        let mut groups = Vec::new();
        for c in curves {
            let g = match c.as_str() {
                "X25519" => provider::kx_group::X25519,
                "CurveP256" => provider::kx_group::SECP256R1,
                "CurveP384" => provider::kx_group::SECP384R1,
                other => {
                    return Err(err(
                        "tls_server_config.curve_preferences",
                        format!(
                            "{other} is not supported; supported: X25519, CurveP256, CurveP384"
                        ),
                    ))
                }
            };
            groups.push(g);
        }
        crypto.kx_groups = groups;
    }
    let crypto = Arc::new(crypto);
    let builder = ServerConfig::builder_with_provider(crypto.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| err("tls_server_config.cipher_suites", e.to_string()))?;

    let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let needs_ca = matches!(
        auth,
        "VerifyClientCertIfGiven" | "RequireAndVerifyClientCert"
    );
    let builder = match auth {
        "NoClientCert" => builder.with_no_client_auth(),
        "VerifyClientCertIfGiven" | "RequireAndVerifyClientCert" => {
            let ca_path = t.client_ca_file.as_ref().map(resolve).ok_or_else(|| {
                err(
                    "tls_server_config.client_ca_file",
                    format!("required with client_auth_type {auth}"),
                )
            })?;
            files.push(ca_path.clone());
            let mut roots = RootCertStore::empty();
            let cas = CertificateDer::pem_file_iter(&ca_path)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    err("tls_server_config.client_ca_file", format!("{}: {e}", ca_path.display()))
                })?;
            for ca in cas {
                roots.add(ca).map_err(|e| {
                    err("tls_server_config.client_ca_file", format!("{}: {e}", ca_path.display()))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto);
            let verifier = if auth == "VerifyClientCertIfGiven" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| err("tls_server_config.client_ca_file", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(err(
                "tls_server_config.client_auth_type",
                format!("{auth} accepts unverified certificates and is not supported; use VerifyClientCertIfGiven or RequireAndVerifyClientCert"),
            ))
        }
        other => {
            return Err(err(
                "tls_server_config.client_auth_type",
                format!("unknown value {other:?}; expected NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"),
            ))
        }
    };
    if !needs_ca && t.client_ca_file.is_some() {
        return Err(err(
            "tls_server_config.client_ca_file",
            "set, but client_auth_type does not verify client certificates".into(),
        ));
    }
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        err(
            "tls_server_config.key_file",
            format!("does not match the certificate: {e}"),
        )
    })?;
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn supported_suites() -> Vec<&'static str> {
    provider::ALL_CIPHER_SUITES
        .iter()
        .filter(|s| s.tls13().is_none())
        .filter_map(|s| s.suite().as_str())
        .collect()
}

fn versions(
    min: Option<&str>,
    max: Option<&str>,
    err: &dyn Fn(&str, String) -> WebConfigError,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, WebConfigError> {
    let parse = |key: &str, v: Option<&str>, default: u8| -> Result<u8, WebConfigError> {
        match v {
            None => Ok(default),
            Some("TLS12") => Ok(12),
            Some("TLS13") => Ok(13),
            Some(v @ ("TLS10" | "TLS11")) => Err(err(
                key,
                format!("{v} is insecure and not supported; use TLS12 or TLS13"),
            )),
            Some(v) => Err(err(
                key,
                format!("unknown version {v:?}; expected TLS12 or TLS13"),
            )),
        }
    };
    let lo = parse("tls_server_config.min_version", min, 12)?;
    let hi = parse("tls_server_config.max_version", max, 13)?;
    if lo > hi {
        return Err(err(
            "tls_server_config.max_version",
            "below min_version".to_string(),
        ));
    }
    Ok(
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (lo..=hi).contains(v))
            .map(|(_, p)| p)
            .collect(),
    )
}
