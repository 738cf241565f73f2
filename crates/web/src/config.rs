//! The web config file, in the format of Prometheus' exporter-toolkit, so one file works for
//! node_exporter and us: `tls_server_config`, `http_server_config`, `basic_auth_users`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use serde::Deserialize;

use crate::rate::RateLimit;
use dgx_pixels_settings::file::{read_regular, MAX_CONFIG_FILE_BYTES};

mod tls;
use tls::tls_config;

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
    basic_auth_users: Option<UniqueMap>,
    rate_limit: Option<RateFile>,
}

/// `rate_limit` (see rate.rs).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateFile {
    burst: Option<u32>,
    interval: Option<DurationValue>,
}

/// A duration as Go's YAML reads one: text such as `1s`, or a number of nanoseconds.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum DurationValue {
    Nanos(u64),
    Text(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    /// The certificate chain as PEM text, instead of `cert_file`.
    cert: Option<String>,
    /// The private key as PEM text, instead of `key_file`.
    key: Option<Secret>,
    /// The client CAs as PEM text, instead of `client_ca_file`.
    client_ca: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    /// Client certificates must name one of these among their SANs.
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

/// A value never shown: an inline private key. Its `Debug` prints a placeholder.
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    http2: Option<bool>,
    headers: Option<UniqueMap>,
}

/// A YAML mapping of strings that refuses a key given twice (serde's maps keep the last one
/// silently, so a second `basic_auth_users` entry for a user would replace the first unseen).
#[derive(Debug, Default)]
struct UniqueMap(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for UniqueMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = UniqueMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of strings")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<UniqueMap, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, v)) = m.next_entry::<String, String>()? {
                    if out.contains_key(&k) {
                        return Err(serde::de::Error::custom(format!("duplicate key `{k}`")));
                    }
                    out.insert(k, v);
                }
                Ok(UniqueMap(out))
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// Response headers the file may set (exporter-toolkit's list), with the only values allowed
/// for those whose values are an enumeration (none: any valid header value). As in
/// exporter-toolkit's `extraHTTPHeaders` and `validateHeaderConfig` (web/handler.go at commit
/// 19a7c2d590c599b7318733bd00eed83fab3b8dad), the values are compared exactly, case included,
/// so `DENY` is refused as it is there. Header names match whatever their case (the toolkit
/// wants them spelled as listed; a file it accepts is accepted here).
const ALLOWED_HEADERS: &[(&str, &[&str])] = &[
    ("Content-Security-Policy", &[]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-XSS-Protection", &[]),
    ("Strict-Transport-Security", &[]),
];

/// How client certificates are checked, weakest first (so a reload can compare).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClientAuth {
    /// No client certificate asked for.
    None,
    /// A client certificate is verified when given.
    VerifyIfGiven,
    /// Every client must present a certificate that verifies.
    Require,
}

/// A validated web config, ready to serve with.
#[derive(Clone)]
pub struct WebConfig {
    /// TLS settings; `None` serves plain HTTP.
    pub tls: Option<Arc<ServerConfig>>,
    /// Client-certificate verification (always `None` without TLS).
    pub client_auth: ClientAuth,
    /// Whether client certificates are verified against the system's trust store (no client
    /// CA given), which trusts far more issuers than a CA of one's own.
    pub client_ca_system: bool,
    /// The client certificate SANs allowed (`None`: any).
    pub client_allowed_sans: Option<Vec<String>>,
    /// Whether TLS 1.2 is served besides TLS 1.3 (false without TLS).
    pub tls12: bool,
    /// User name to bcrypt hash; empty = no authentication.
    pub users: BTreeMap<String, String>,
    /// The request rate limit, if any (exporter-toolkit's `rate_limit`).
    pub rate_limit: Option<RateLimit>,
    /// Extra response headers.
    pub headers: Vec<(axum::http::HeaderName, axum::http::HeaderValue)>,
    /// Certificate, key and CA files it read (watched for rotation).
    pub files: Vec<PathBuf>,
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("client_auth", &self.client_auth)
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
            client_auth: ClientAuth::None,
            client_ca_system: false,
            client_allowed_sans: None,
            tls12: false,
            rate_limit: None,
            users: BTreeMap::new(),
            headers: Vec::new(),
            files: Vec::new(),
        }
    }

    /// What `new` would take away from a server running with `self`: TLS, client-certificate
    /// verification or authentication. A running server never loses them on a reload (a
    /// truncated or half-written file must not turn security off); that takes a restart.
    /// Changing users, passwords, certificates and CAs is fine.
    pub fn weakened_by(&self, new: &WebConfig) -> Option<String> {
        let mut lost = Vec::new();
        if self.tls.is_some() && new.tls.is_none() {
            lost.push("TLS");
        }
        if new.client_auth < self.client_auth {
            lost.push("client certificate verification");
        } else if self.client_auth > ClientAuth::None
            && !self.client_ca_system
            && new.client_ca_system
        {
            lost.push("client certificate verification against a client CA of its own (the new file trusts the system's trust store)");
        }
        if self.client_allowed_sans.is_some() && new.client_allowed_sans.is_none() {
            lost.push("the client certificate SAN restriction");
        }
        if !self.users.is_empty() && new.users.is_empty() {
            lost.push("basic authentication");
        }
        (!lost.is_empty()).then(|| {
            format!(
                "the new file would remove {} from the running server; refused (restart the exporter to serve with less security)",
                lost.join(" and ")
            )
        })
    }

    /// What `new` loosens that a reload may loosen, but never silently (the reload logs each
    /// at warn): the rate limit removed or raised, a response header removed or changed, TLS
    /// 1.2 served again after TLS 1.3 only. Unlike [`WebConfig::weakened_by`]'s losses these
    /// are what an operator edits on purpose, and none lets in a client that was kept out.
    pub fn loosened_by(&self, new: &WebConfig) -> Vec<String> {
        let mut looser = Vec::new();
        match (self.rate_limit, new.rate_limit) {
            (Some(_), None) => looser.push("rate_limit removed".to_string()),
            (Some(a), Some(b)) if b.burst > a.burst || b.interval < a.interval => {
                looser.push(format!(
                    "rate_limit raised (burst {} to {}, interval {:?} to {:?})",
                    a.burst, b.burst, a.interval, b.interval
                ));
            }
            _ => {}
        }
        for (name, value) in &self.headers {
            match new.headers.iter().find(|(n, _)| n == name) {
                None => looser.push(format!("response header {name} removed")),
                Some((_, v)) if v != value => {
                    looser.push(format!("response header {name} changed"));
                }
                Some(_) => {}
            }
        }
        if self.tls.is_some() && !self.tls12 && new.tls12 {
            looser.push("TLS 1.2 served again (was TLS 1.3 only)".to_string());
        }
        looser
    }

    /// The certificate, key and CA files the text of a config file at `path` names, resolved
    /// as [`WebConfig::parse`] does, whether or not those files exist or are valid (nothing
    /// when the text is not a web config).
    pub fn named_files(text: &str, path: &Path) -> Vec<PathBuf> {
        let Ok(file) = serde_yaml_ng::from_str::<File>(text) else {
            return Vec::new();
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let Some(t) = file.tls_server_config else {
            return Vec::new();
        };
        [t.cert_file, t.key_file, t.client_ca_file]
            .into_iter()
            .flatten()
            .filter(|p| !p.as_os_str().is_empty())
            .map(|p| if p.is_absolute() { p } else { dir.join(p) })
            .collect()
    }

    /// Reads and validates a web config file; certificate and key files are read too.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let cannot = |message: String| WebConfigError {
            file: path.to_path_buf(),
            line: None,
            key: None,
            message,
        };
        let bytes = read_regular(path, MAX_CONFIG_FILE_BYTES)
            .map_err(|e| cannot(format!("cannot read: {e}")))?;
        let text = String::from_utf8(bytes).map_err(|_| cannot("not valid UTF-8".into()))?;
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
        let file = parse_file(text, path)?;
        let mut files = Vec::new();
        let (tls, client_auth, client_ca_system, client_allowed_sans, tls12) =
            match file.tls_server_config {
                Some(t) => {
                    let tls = tls_config(t, path, &err, &mut files)?;
                    let sans = tls.allowed_sans;
                    (
                        Some(Arc::new(tls.config)),
                        tls.client_auth,
                        tls.system_roots,
                        sans,
                        tls.tls12,
                    )
                }
                None => (None, ClientAuth::None, false, None, false),
            };
        let users = file.basic_auth_users.unwrap_or_default().0;
        check_users(&users, &err)?;
        let rate_limit = match file.rate_limit {
            Some(r) => rate_limit(r, &err)?,
            None => None,
        };
        let headers = match file.http_server_config {
            Some(http) => headers(http, &err)?,
            None => Vec::new(),
        };
        Ok(WebConfig {
            tls,
            client_auth,
            client_ca_system,
            client_allowed_sans,
            tls12,
            rate_limit,
            users,
            headers,
            files,
        })
    }
}

/// The file's YAML (an empty file is an empty config), or serde's error with the line and,
/// where its text names one, the key.
fn parse_file(text: &str, path: &Path) -> Result<File, WebConfigError> {
    if text.trim().is_empty() {
        return Ok(File::default());
    }
    serde_yaml_ng::from_str(text).map_err(|e| {
        let line = e.location().map(|l| l.line());
        let message = e.to_string();
        // "unknown field `x`, expected ..." names the key; keep serde's text.
        let message = match message.find(" at line ") {
            Some(i) => message[..i].to_string(),
            None => message,
        };
        let (key, message) = match unknown_key(&message).or_else(|| duplicate_key(&message)) {
            Some((key, message)) => (Some(key), message),
            None => (None, message),
        };
        WebConfigError {
            file: path.to_path_buf(),
            line,
            key,
            message,
        }
    })
}

/// "a.b: unknown field `c`, expected ..." names the key a.b.c: the key, and the message
/// without it.
fn unknown_key(message: &str) -> Option<(String, String)> {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        // At the top level there is no parent.
        let (field, tail) = rest.split_once('`').unwrap_or((rest, ""));
        return Some((field.to_string(), format!("unknown key{tail}")));
    }
    match message.split_once(": unknown field `") {
        Some((parent, rest)) if !parent.contains(' ') => {
            let (field, tail) = rest.split_once('`').unwrap_or((rest, ""));
            Some((format!("{parent}.{field}"), format!("unknown key{tail}")))
        }
        _ => None,
    }
}

/// "duplicate field `a`" (a struct) or "a.b: duplicate key `c`" (a map): the key given
/// twice.
fn duplicate_key(message: &str) -> Option<(String, String)> {
    match message
        .split_once("duplicate ")
        .map(|(p, rest)| (p.trim_end().trim_end_matches(':'), rest))
    {
        Some((parent, rest)) if !parent.contains(' ') => {
            let name = rest.split('`').nth(1).unwrap_or("");
            let key = if parent.is_empty() {
                name.to_string()
            } else {
                format!("{parent}.{name}")
            };
            Some((key, "given twice".to_string()))
        }
        _ => None,
    }
}

/// The rate limit `rate_limit` sets: none with an interval of 0 (or none), as in
/// exporter-toolkit.
fn rate_limit(
    r: RateFile,
    err: &dyn Fn(&str, String) -> WebConfigError,
) -> Result<Option<RateLimit>, WebConfigError> {
    let interval = match r.interval {
        None => Duration::ZERO,
        Some(DurationValue::Nanos(n)) => crate::rate::at_most_a_day(Duration::from_nanos(n))
            .map_err(|m| err("rate_limit.interval", m))?,
        Some(DurationValue::Text(t)) => {
            crate::rate::go_duration(&t).map_err(|m| err("rate_limit.interval", m))?
        }
    };
    if interval.is_zero() {
        return Ok(None);
    }
    let burst = r.burst.unwrap_or(0);
    if burst == 0 {
        tracing::warn!("rate_limit.burst is 0: every request but the open probes is refused (429), as exporter-toolkit does");
    }
    Ok(Some(RateLimit { interval, burst }))
}

/// Refuses a user name with `:` and a password hash that is not bcrypt, or whose cost no
/// password can ever match.
fn check_users(
    users: &BTreeMap<String, String>,
    err: &dyn Fn(&str, String) -> WebConfigError,
) -> Result<(), WebConfigError> {
    for (user, hash) in users {
        if user.contains(':') {
            return Err(err(
                "basic_auth_users",
                format!("user name {user:?} contains ':'"),
            ));
        }
        let key = format!("basic_auth_users.{user}");
        let Ok(parts) = hash.parse::<bcrypt::HashParts>() else {
            return Err(err(
                &key,
                "not a bcrypt hash (generate one with htpasswd -nBC 10 \"\" | tr -d ':\\n')"
                    .to_string(),
            ));
        };
        // bcrypt accepts costs 4 to 31; a hash outside them parses but never verifies, so
        // its user could never log in.
        if !(4..=31).contains(&parts.get_cost()) {
            return Err(err(
                &key,
                format!(
                    "bcrypt cost {} is outside 4..=31, so no password can ever match it",
                    parts.get_cost()
                ),
            ));
        }
    }
    Ok(())
}

/// The response headers `http_server_config` sets: only those of [`ALLOWED_HEADERS`], with
/// valid values.
fn headers(
    http: HttpFile,
    err: &dyn Fn(&str, String) -> WebConfigError,
) -> Result<Vec<(axum::http::HeaderName, axum::http::HeaderValue)>, WebConfigError> {
    if http.http2 == Some(true) {
        // Accepted for compatibility; scrapes are served over HTTP/1.1, which ALPN announces
        // (docs/security.md, "HTTP/2").
        tracing::debug!("http_server_config.http2: served as HTTP/1.1 (ALPN offers http/1.1 only)");
    }
    let mut headers = Vec::new();
    for (name, value) in http.headers.unwrap_or_default().0 {
        let key = format!("http_server_config.headers.{name}");
        let Some((allowed, values)) = ALLOWED_HEADERS
            .iter()
            .find(|(h, _)| h.eq_ignore_ascii_case(&name))
        else {
            let names: Vec<&str> = ALLOWED_HEADERS.iter().map(|(h, _)| *h).collect();
            return Err(err(
                &key,
                format!("header not allowed; allowed: {}", names.join(", ")),
            ));
        };
        if !values.is_empty() && !values.contains(&value.as_str()) {
            return Err(err(
                &key,
                format!(
                    "invalid value {value:?}; expected one of: {} (exactly, lower case)",
                    values.join(", ")
                ),
            ));
        }
        let v = axum::http::HeaderValue::from_str(&value)
            .map_err(|e| err(&key, format!("invalid header value: {e}")))?;
        // Names match in any case, so two spellings of one header would otherwise leave
        // one value silently in force.
        let name = axum::http::HeaderName::from_static(to_static_lower(allowed));
        if headers.iter().any(|(n, _)| *n == name) {
            return Err(err(
                &key,
                format!("{allowed} given twice (header names match in any case)"),
            ));
        }
        headers.push((name, v));
    }
    Ok(headers)
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
