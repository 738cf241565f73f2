//! The push's configuration from the OpenTelemetry SDK's environment variables
//! (<https://opentelemetry.io/docs/specs/otel/protocol/exporter/>,
//! <https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/>) and the
//! binary's flag, which wins over them. Every value is checked at startup; an error names the
//! variable and never echoes a header's value (headers carry tokens).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};

use crate::tls::{PemFile, TlsClient, TlsFiles};

/// The default collector endpoint of OTLP/HTTP.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/metrics";
/// The spec's default export timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The spec's default export interval (`OTEL_METRIC_EXPORT_INTERVAL`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// The shortest export interval accepted: a push per generation at most every 100 ms.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The longest export interval or timeout accepted (one hour).
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// At most this many bytes of `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_RESOURCE_ATTRIBUTES`.
pub const MAX_LIST_BYTES: usize = 16 * 1024;

/// A bad setting: the variable (or flag) it came from and what is wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{variable}: {problem}")]
pub struct ConfigError {
    /// The environment variable or flag.
    pub variable: String,
    /// What is wrong with it.
    pub problem: String,
}

pub(crate) fn error(variable: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        variable: variable.to_string(),
        problem: problem.into(),
    }
}

/// Where the push goes: an `http://` or `https://` URL split into what the client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `https://`: TLS, verifying the collector as [`host`](Self::host).
    pub https: bool,
    /// The host, without brackets or port: the name the collector's certificate must have (a
    /// DNS name or an IP address).
    pub host: String,
    /// `host:port` for the TCP connection and the `Host` header.
    pub authority: String,
    /// The path and query sent in the request line.
    pub path: String,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority, self.path)
    }
}

/// Everything the push needs, checked.
#[derive(Clone)]
pub struct PushConfig {
    /// The metrics URL.
    pub endpoint: Endpoint,
    /// Extra request headers (never logged).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Deadline of one export, retries included.
    pub timeout: Duration,
    /// Whether the body is gzip-compressed.
    pub gzip: bool,
    /// Time between pushes.
    pub interval: Duration,
    /// `OTEL_RESOURCE_ATTRIBUTES`, in order (`OTEL_SERVICE_NAME` applied as `service.name`).
    pub resource: Vec<(String, String)>,
    /// The TLS client of an `https://` endpoint, its files read and checked.
    pub tls: Option<Arc<TlsClient>>,
}

// Headers carry tokens: Debug shows their names only.
impl std::fmt::Debug for PushConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("PushConfig")
            .field("endpoint", &self.endpoint)
            .field("header_names", &names)
            .field("timeout", &self.timeout)
            .field("gzip", &self.gzip)
            .field("interval", &self.interval)
            .field("resource", &self.resource)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The flag's URL, else the metrics-specific variable's, else the generic one's with the spec's
/// `/v1/metrics`, else the default.
fn endpoint(
    flag: Option<&str>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Endpoint, ConfigError> {
    match flag {
        Some(url) => parse_url("--otlp.endpoint", url, false),
        None => match (
            env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
            env("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => parse_url("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", &url, false),
            (None, Some(url)) => parse_url("OTEL_EXPORTER_OTLP_ENDPOINT", &url, true),
            (None, None) => parse_url("default", DEFAULT_ENDPOINT, false),
        },
    }
}

/// The metrics-specific variable if set, else the generic one: `(name, value)`.
fn either(
    env: &impl Fn(&str) -> Option<String>,
    specific: &str,
    generic: &str,
) -> Option<(String, String)> {
    env(specific)
        .map(|v| (specific.to_string(), v))
        .or_else(|| env(generic).map(|v| (generic.to_string(), v)))
}

impl PushConfig {
    /// The configuration from `flag_endpoint` (`--otlp.endpoint`, the metrics URL as is) and the
    /// environment as `env` reads it. The spec's path rule: the metrics-specific
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is used as is, the generic
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` gets `/v1/metrics` appended to its path.
    /// As the SDK configuration spec says, a variable set to an empty value is unset (a
    /// chart's empty `OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE` does not hide the generic one).
    pub fn from_env(
        flag_endpoint: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<PushConfig, ConfigError> {
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let endpoint = endpoint(flag_endpoint, &env)?;
        if let Some((name, value)) = either(
            &env,
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ) {
            if value.trim() != "http/protobuf" {
                return Err(error(
                    &name,
                    format!("{:?} is not supported: only http/protobuf is", value.trim()),
                ));
            }
        }
        let headers = match either(
            &env,
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ) {
            Some((name, value)) => parse_headers(&name, &value)?,
            None => Vec::new(),
        };
        let timeout = match either(
            &env,
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ) {
            Some((name, value)) => millis(&name, &value, Duration::from_millis(1))?,
            None => DEFAULT_TIMEOUT,
        };
        let gzip = match either(
            &env,
            "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ) {
            Some((name, value)) => match value.trim() {
                "gzip" => true,
                "none" | "" => false,
                other => {
                    return Err(error(
                        &name,
                        format!("{other:?} is not supported: gzip or none"),
                    ))
                }
            },
            None => false,
        };
        let interval = match env("OTEL_METRIC_EXPORT_INTERVAL") {
            Some(value) => millis("OTEL_METRIC_EXPORT_INTERVAL", &value, MIN_INTERVAL)?,
            None => DEFAULT_INTERVAL,
        };
        let mut resource = match env("OTEL_RESOURCE_ATTRIBUTES") {
            Some(value) => parse_list("OTEL_RESOURCE_ATTRIBUTES", &value)?,
            None => Vec::new(),
        };
        if let Some(name) = env("OTEL_SERVICE_NAME").filter(|n| !n.trim().is_empty()) {
            resource.retain(|(k, _)| k != "service.name");
            resource.push(("service.name".to_string(), name.trim().to_string()));
        }
        let files = tls_files(&env)?;
        let tls = if endpoint.https {
            Some(Arc::new(TlsClient::load(files, &env)?))
        } else {
            // Fail closed: whoever names a CA or a client certificate expects TLS, and an
            // `http://` endpoint would send the push (and its headers) in the clear.
            if let Some(file) = files
                .ca
                .iter()
                .chain(files.client.iter().map(|(cert, _)| cert))
                .next()
            {
                return Err(error(
                    &file.variable,
                    format!("is set, but the endpoint {endpoint} is not https://"),
                ));
            }
            None
        };
        Ok(PushConfig {
            endpoint,
            headers,
            timeout,
            gzip,
            interval,
            resource,
            tls,
        })
    }
}

/// The spec's TLS file variables, metrics-specific first. `OTEL_EXPORTER_OTLP_INSECURE` is not
/// read: the spec applies it to gRPC only (docs/otlp.md).
fn tls_files(env: &impl Fn(&str) -> Option<String>) -> Result<TlsFiles, ConfigError> {
    let file = |specific: &str, generic: &str| -> Result<Option<PemFile>, ConfigError> {
        match either(env, specific, generic) {
            Some((variable, path)) => Ok(Some(PemFile {
                variable,
                path: PathBuf::from(path.trim()),
            })),
            None => Ok(None),
        }
    };
    let ca = file(
        "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
    )?;
    let cert = file(
        "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    )?;
    let key = file(
        "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    )?;
    let client = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(f), None) | (None, Some(f)) => {
            return Err(error(
                &f.variable,
                "mutual TLS needs both OTEL_EXPORTER_OTLP_[METRICS_]CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_[METRICS_]CLIENT_KEY; only this one is set",
            ))
        }
    };
    Ok(TlsFiles { ca, client })
}

/// An `http[s]://host[:port][/path]` URL; `generic` appends the spec's `v1/metrics` to the
/// path.
pub fn parse_url(variable: &str, url: &str, generic: bool) -> Result<Endpoint, ConfigError> {
    let url = url.trim();
    let (https, rest) = match url.split_once("://") {
        Some(("http", rest)) => (false, rest),
        Some(("https", rest)) => (true, rest),
        _ => {
            return Err(error(
                variable,
                format!("{url:?} is not an http:// or https:// URL"),
            ))
        }
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') || authority.contains(char::is_whitespace) {
        return Err(error(variable, format!("{url:?} has no usable host")));
    }
    let authority = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.contains(']'))
    {
        let (_, port) = authority.rsplit_once(':').unwrap_or_default();
        port.parse::<u16>()
            .map_err(|_| error(variable, format!("{url:?} has a bad port")))?;
        authority.to_string()
    } else {
        format!("{authority}:{}", if https { 443 } else { 80 })
    };
    let host = authority
        .rsplit_once(':')
        .map_or(authority.as_str(), |(host, _)| host);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .to_string();
    // The name the certificate is checked against: a DNS name or an IP address.
    if https && rustls::pki_types::ServerName::try_from(host.as_str()).is_err() {
        return Err(error(
            variable,
            format!("{url:?}: {host:?} is neither a DNS name nor an IP address"),
        ));
    }
    let mut path = if path.is_empty() {
        "/".to_string()
    } else {
        path.to_string()
    };
    if generic {
        if !path.ends_with('/') {
            path.push('/');
        }
        path.push_str("v1/metrics");
    }
    if path.parse::<hyper::Uri>().is_err() {
        return Err(error(variable, format!("{url:?} has a bad path")));
    }
    Ok(Endpoint {
        https,
        host,
        authority,
        path,
    })
}

/// Whole milliseconds, at least `min` and at most [`MAX_DURATION`].
fn millis(variable: &str, value: &str, min: Duration) -> Result<Duration, ConfigError> {
    let ms: u64 = value.trim().parse().map_err(|_| {
        error(
            variable,
            format!("{value:?} is not a whole number of milliseconds"),
        )
    })?;
    let d = Duration::from_millis(ms);
    if d < min || d > MAX_DURATION {
        return Err(error(
            variable,
            format!(
                "{ms} ms is out of range ({} to {} ms)",
                min.as_millis(),
                MAX_DURATION.as_millis()
            ),
        ));
    }
    Ok(d)
}

/// `key=value,key=value` with percent-encoded values (the W3C Baggage form the spec uses).
fn parse_list(variable: &str, value: &str) -> Result<Vec<(String, String)>, ConfigError> {
    if value.len() > MAX_LIST_BYTES {
        return Err(error(
            variable,
            format!("longer than {MAX_LIST_BYTES} bytes"),
        ));
    }
    let mut out = Vec::new();
    for (i, item) in value.split(',').enumerate() {
        if item.trim().is_empty() {
            continue;
        }
        let Some((k, v)) = item.split_once('=') else {
            return Err(error(variable, format!("item {} has no '='", i + 1)));
        };
        let k = k.trim();
        let v = percent_decode(v.trim())
            .ok_or_else(|| error(variable, format!("item {} has a bad %-escape", i + 1)))?;
        if k.is_empty() {
            return Err(error(variable, format!("item {} has an empty key", i + 1)));
        }
        out.push((k.to_string(), v));
    }
    Ok(out)
}

/// The headers; a bad one is named by its position, its value never shown.
fn parse_headers(
    variable: &str,
    value: &str,
) -> Result<Vec<(HeaderName, HeaderValue)>, ConfigError> {
    parse_list(variable, value)?
        .into_iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                error(
                    variable,
                    format!("item {} is not a valid header name", i + 1),
                )
            })?;
            let mut value = HeaderValue::from_str(&v)
                .map_err(|_| error(variable, format!("the value of header {name} is not valid")))?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests;
