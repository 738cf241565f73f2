//! Layering of the sources of settings: defaults, config file, environment and flags.

use super::files::check_file;
use super::{ConfigError, LogFormat, MetricsDetail, Settings, ENV_PREFIX};
use crate::cli::Cli;

/// Resolves settings from the flags, the environment `env` (name, value pairs), the config file
/// and defaults.
///
/// Kubernetes adds service-link variables for every Service in the namespace
/// (`DGX_PIXELS_EXPORTER_SERVICE_HOST`, `DGX_PIXELS_EXPORTER_PORT_9403_TCP`, ...); those are
/// not settings and are skipped, so a Service named after us never stops the daemon.
pub fn resolve(
    cli: &Cli,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Settings, ConfigError> {
    let err = |e: config::ConfigError| ConfigError(e.to_string());
    let mut b = config::Config::builder();
    if let Some(path) = &cli.config_file {
        // The text checked is the text used: the file is read once.
        let text = check_file(path)?;
        b = b.add_source(config::File::from_str(&text, config::FileFormat::Toml));
    }
    let env: config::Map<String, String> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(&format!("{ENV_PREFIX}_")) && !is_service_link(k))
        .collect();
    b = b.add_source(
        config::Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("_")
            .separator("__")
            .source(Some(env)),
    );
    // The daemon's own flags; each collector's come from its descriptor (below).
    for (key, value) in daemon_flags(cli) {
        if let Some(v) = value {
            b = b.set_override(key, v).map_err(err)?;
        }
    }
    for (key, value) in &cli.collector_options {
        b = b.set_override(*key, value.clone()).map_err(err)?;
    }
    for c in &cli.collectors {
        let key = |k: &str| format!("collector.{}.{k}", c.name);
        if let Some(e) = c.enabled {
            b = b.set_override(key("enabled"), e).map_err(err)?;
        }
        if let Some(d) = c.interval {
            b = b
                .set_override(key("interval"), humantime::format_duration(d).to_string())
                .map_err(err)?;
        }
        if let Some(d) = c.timeout {
            b = b
                .set_override(key("timeout"), humantime::format_duration(d).to_string())
                .map_err(err)?;
        }
    }
    let config = b
        .build()
        .map_err(|e| ConfigError(format!("configuration: {e}")))?;
    let settings = Settings::from_config(&config)?;
    settings.validate()?;
    Ok(settings)
}

/// The settings key each of the daemon's own flags overrides, with its value when given.
fn daemon_flags(cli: &Cli) -> [(&'static str, Option<config::Value>); 11] {
    [
        (
            "web.listen_address",
            cli.listen_address.clone().map(Into::into),
        ),
        (
            "web.telemetry_path",
            cli.telemetry_path.clone().map(Into::into),
        ),
        (
            "web.max_requests",
            cli.max_requests.map(|n| (n as u64).into()),
        ),
        ("log.level", cli.log_level.clone().map(Into::into)),
        (
            "log.format",
            cli.log_format.map(|f| {
                match f {
                    LogFormat::Logfmt => "logfmt",
                    LogFormat::Json => "json",
                }
                .into()
            }),
        ),
        (
            "metrics.detail",
            cli.metrics_detail.map(|d| {
                match d {
                    MetricsDetail::Lean => "lean",
                    MetricsDetail::Default => "default",
                    MetricsDetail::Full => "full",
                }
                .into()
            }),
        ),
        ("simulation.scenario", cli.simulate.clone().map(Into::into)),
        (
            "simulation.trace_directory",
            cli.simulate_trace_directory
                .as_ref()
                .map(|p| p.display().to_string().into()),
        ),
        ("node_name", cli.node_name.clone().map(Into::into)),
        (
            "web.config_file",
            cli.web_config_file
                .as_ref()
                .map(|p| p.display().to_string().into()),
        ),
        (
            "path.procfs",
            cli.path_procfs
                .as_ref()
                .map(|p| p.display().to_string().into()),
        ),
    ]
}

/// The `DGX_PIXELS_*` variables of `vars` (e.g. `std::env::vars_os()`). Other variables are
/// never looked at beyond their name, so one that is not UTF-8 cannot stop the daemon (as
/// `std::env::vars()` would, by panicking); a `DGX_PIXELS_*` one that is not UTF-8 is an error.
pub fn environment(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<Vec<(String, String)>, ConfigError> {
    use std::os::unix::ffi::OsStrExt;
    let prefix = format!("{ENV_PREFIX}_");
    let mut out = Vec::new();
    for (k, v) in vars {
        if !k.as_bytes().starts_with(prefix.as_bytes()) {
            continue;
        }
        let shown = String::from_utf8_lossy(k.as_bytes()).into_owned();
        let Ok(name) = k.into_string() else {
            return Err(ConfigError(format!(
                "environment variable {shown}: its name is not valid UTF-8"
            )));
        };
        let Ok(value) = v.into_string() else {
            return Err(ConfigError(format!(
                "environment variable {name}: its value is not valid UTF-8"
            )));
        };
        out.push((name, value));
    }
    Ok(out)
}

/// Whether `name` has the shape of a Kubernetes service-link variable.
pub(super) fn is_service_link(name: &str) -> bool {
    if name.ends_with("_SERVICE_HOST") || name.contains("_SERVICE_PORT") || name.ends_with("_PORT")
    {
        return true;
    }
    // NAME_PORT_<port>_<proto>[_PROTO|_PORT|_ADDR]
    let Some((_, rest)) = name.rsplit_once("_PORT_") else {
        return false;
    };
    let mut parts = rest.split('_');
    let port_ok = parts
        .next()
        .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let proto_ok = parts
        .next()
        .is_some_and(|p| matches!(p, "TCP" | "UDP" | "SCTP"));
    let tail_ok = parts
        .next()
        .is_none_or(|t| matches!(t, "PROTO" | "PORT" | "ADDR"));
    port_ok && proto_ok && tail_ok && parts.next().is_none()
}
