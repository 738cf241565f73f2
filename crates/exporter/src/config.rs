//! Settings: defaults, then the TOML config file, then `DGX_PIXELS_*` environment variables, then
//! flags, layered with the `config` crate and checked into a [`Settings`].
//!
//! The config file is also parsed on its own first, strictly, so that a mistake is reported in
//! one line naming the file, the line and the key.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use dgx_pixels_registry::{Check, Collector, Timing};

pub use crate::cli::{LogFormat, MetricsDetail, DEFAULT_LISTEN_ADDRESS};
use crate::collectors::{self, COLLECTORS};

/// Environment variable prefix.
pub const ENV_PREFIX: &str = "DGX_PIXELS";
/// Largest accepted `web.max_requests` and `web.max_connections`.
pub const MAX_HTTP_LIMIT: usize = 1 << 20;

/// `[metrics]`: what the exposition serves.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSettings {
    /// `default` or `full` [default: default].
    pub detail: MetricsDetail,
}

/// A config error, in one line.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl From<dgx_pixels_settings::SettingError> for ConfigError {
    fn from(e: dgx_pixels_settings::SettingError) -> ConfigError {
        ConfigError(e.to_string())
    }
}

pub use dgx_pixels_settings::MAX_PERIOD;

/// `[web]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WebSettings {
    /// HOST:PORT or :PORT.
    pub listen_address: String,
    /// Path of the metrics endpoint.
    pub telemetry_path: String,
    /// Concurrent scrape limit; 0 = unlimited.
    pub max_requests: usize,
    /// exporter-toolkit web config file (TLS, basic auth, headers); unset = plain HTTP.
    pub config_file: Option<PathBuf>,
    /// Open connections at most; more are closed at once (a few reserved for the probe paths).
    pub max_connections: usize,
    /// Open connections from one client address at most; default 64, or `max_connections`
    /// when that is lower.
    pub max_connections_per_client: Option<usize>,
    /// Whether `/-/healthy` and `/-/ready` need basic auth too (kubelet probes cannot send it).
    pub probes_need_auth: bool,
}

impl Default for WebSettings {
    fn default() -> Self {
        WebSettings {
            listen_address: DEFAULT_LISTEN_ADDRESS.into(),
            telemetry_path: "/metrics".into(),
            max_requests: 40,
            config_file: None,
            max_connections: 512,
            max_connections_per_client: None,
            probes_need_auth: false,
        }
    }
}

impl WebSettings {
    /// `max_connections_per_client` with its default applied.
    pub fn connections_per_client(&self) -> usize {
        self.max_connections_per_client
            .unwrap_or(dgx_pixels_web::DEFAULT_MAX_CONNECTIONS_PER_CLIENT.min(self.max_connections))
    }
}

/// `[log]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// error, warn, info, debug, trace (or a tracing filter directive).
    pub level: String,
    /// logfmt or json.
    pub format: LogFormat,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            level: "info".into(),
            format: LogFormat::Logfmt,
        }
    }
}

/// `[collector.NAME]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CollectorSettings {
    /// Overrides the collector's default.
    pub enabled: Option<bool>,
    /// Poll interval.
    #[serde(deserialize_with = "dgx_pixels_settings::optional_duration")]
    pub interval: Option<Duration>,
    /// Poll deadline.
    #[serde(deserialize_with = "dgx_pixels_settings::optional_duration")]
    pub timeout: Option<Duration>,
}

pub use dgx_pixels_registry::SimulationSettings;

/// `[path]`: where host filesystems are mounted (node_exporter's `--path.*`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PathSettings {
    /// procfs mount point; default `/proc`.
    pub procfs: Option<PathBuf>,
}

fn default_currency() -> String {
    "USD".into()
}

fn default_pue() -> f64 {
    1.0
}

/// `[cost]`: the inputs of the cost model, exported as `dgx_pixels_cost_*` gauges.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CostSettings {
    /// Currency code of every price, e.g. USD or EUR (the `currency` label).
    #[serde(default = "default_currency")]
    pub currency: String,
    /// Electricity price per kWh.
    pub electricity_price_per_kwh: f64,
    /// Power usage effectiveness of the facility (1.0 = no cooling or conversion overhead).
    #[serde(default = "default_pue")]
    pub pue: f64,
    /// Amortized hardware cost of one GPU per hour (instead of purchase price and lifetime).
    pub gpu_cost_per_hour: Option<f64>,
    /// Purchase price of one GPU (its share of the server), amortized over `gpu_lifetime`.
    pub gpu_purchase_price: Option<f64>,
    /// Service life over which the purchase price is amortized, e.g. "4years".
    #[serde(default, deserialize_with = "dgx_pixels_settings::optional_duration")]
    pub gpu_lifetime: Option<Duration>,
}

impl CostSettings {
    /// A simulated scenario's `[cost]` table (same keys as the config file's), checked.
    pub fn from_scenario(scenario: &str, table: &toml::Table) -> Result<CostSettings, ConfigError> {
        let cost = CostSettings::deserialize(toml::Value::Table(table.clone()))
            .map_err(|e| ConfigError(format!("scenario {scenario}: [cost]: {}", e.message())))?;
        cost.validate()
            .map_err(|e| ConfigError(format!("scenario {scenario}: {}", e.0)))?;
        Ok(cost)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError(format!("cost.{key}: {why}")));
        let c = &self.currency;
        if c.is_empty() || c.len() > 16 || !c.chars().all(|ch| ch.is_ascii_alphabetic()) {
            return bad("currency", "must be a currency code of letters, e.g. USD");
        }
        if !self.electricity_price_per_kwh.is_finite() || self.electricity_price_per_kwh < 0.0 {
            return bad("electricity_price_per_kwh", "must be a number >= 0");
        }
        if !self.pue.is_finite() || self.pue < 1.0 {
            return bad("pue", "must be >= 1 (facility energy over IT energy)");
        }
        match (self.gpu_cost_per_hour, self.gpu_purchase_price, self.gpu_lifetime) {
            (Some(h), None, None) if h.is_finite() && h >= 0.0 => Ok(()),
            (Some(_), None, None) => bad("gpu_cost_per_hour", "must be a number >= 0"),
            (None, Some(p), Some(l)) if p.is_finite() && p >= 0.0 && !l.is_zero() => Ok(()),
            (None, Some(_), Some(_)) => bad(
                "gpu_purchase_price",
                "must be a number >= 0, with a gpu_lifetime > 0",
            ),
            _ => bad(
                "gpu_cost_per_hour",
                "set either gpu_cost_per_hour, or gpu_purchase_price and gpu_lifetime (0 is allowed)",
            ),
        }
    }

    /// Electricity price per joule.
    pub fn price_per_joule(&self) -> f64 {
        self.electricity_price_per_kwh / 3.6e6
    }

    /// Hardware cost of one GPU per second.
    pub fn gpu_amortization_per_second(&self) -> f64 {
        match (
            self.gpu_cost_per_hour,
            self.gpu_purchase_price,
            self.gpu_lifetime,
        ) {
            (Some(h), _, _) => h / 3600.0,
            (None, Some(p), Some(l)) => p / l.as_secs_f64(),
            _ => 0.0,
        }
    }
}

/// Everything the daemon is configured with: its own tables, and each registered collector's
/// table in [`Settings::tables`] (read by the collector's descriptor, see `collectors/`).
///
/// Unknown top-level keys are refused by [`Settings::from_toml`] and
/// [`Settings::from_config`], which know the collectors' table names; serde alone does not.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default)]
pub struct Settings {
    /// Adds `node="..."` to every series when set.
    pub node_name: Option<String>,
    /// HTTP server.
    pub web: WebSettings,
    /// What the exposition serves (the series budget).
    pub metrics: MetricsSettings,
    /// Logging.
    pub log: LogSettings,
    /// Simulated node.
    pub simulation: SimulationSettings,
    /// Host filesystem mount points.
    pub path: PathSettings,
    /// Per-collector on/off and timing, keyed by collector name.
    pub collector: BTreeMap<String, CollectorSettings>,
    /// Cost model; absent = no cost gauges.
    pub cost: Option<CostSettings>,
    /// Each collector's own table (`[nvml]`, `[trace]`, ...), typed by its crate.
    #[serde(skip, default = "collectors::default_tables")]
    pub tables: collectors::Tables,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            node_name: None,
            web: WebSettings::default(),
            metrics: MetricsSettings::default(),
            log: LogSettings::default(),
            simulation: SimulationSettings::default(),
            path: PathSettings::default(),
            collector: BTreeMap::new(),
            cost: None,
            tables: collectors::default_tables(),
        }
    }
}

/// The daemon's own top-level keys, in the order of [`Settings`].
const DAEMON_KEYS: &[&str] = &[
    "node_name",
    "web",
    "metrics",
    "log",
    "simulation",
    "path",
    "collector",
    "cost",
];

/// Every accepted top-level key: the daemon's, then each collector's table in registry order.
fn known_keys() -> &'static [&'static str] {
    static KNOWN: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KNOWN.get_or_init(|| {
        DAEMON_KEYS
            .iter()
            .copied()
            .chain(
                COLLECTORS
                    .iter()
                    .filter(|c| c.table.is_some())
                    .map(|c| c.name),
            )
            .collect()
    })
}

/// serde's own words for an unknown key, so every layer says it alike.
fn unknown_key(key: &str) -> String {
    <serde::de::value::Error as serde::de::Error>::unknown_field(key, known_keys()).to_string()
}

impl Settings {
    /// Reads a config file's text strictly: the daemon's tables, then each collector's table
    /// by its descriptor; errors carry the span of the offending key.
    pub(crate) fn from_toml(text: &str) -> Result<Settings, toml::de::Error> {
        // Top-level keys first, so an unknown one is named at its own line.
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a TOML document")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
                while map.next_key_seed(KnownKey)?.is_some() {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Ok(())
            }
        }
        struct KnownKey;
        impl<'de> serde::de::DeserializeSeed<'de> for KnownKey {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                let key = String::deserialize(d)?;
                if known_keys().contains(&key.as_str()) {
                    Ok(())
                } else {
                    Err(serde::de::Error::unknown_field(&key, known_keys()))
                }
            }
        }
        serde::Deserializer::deserialize_map(toml::Deserializer::new(text), Keys)?;
        let mut settings: Settings = toml::from_str(text)?;
        for c in COLLECTORS {
            if let Some(table) = &c.table {
                if let Some(options) = table.read_file(text, c.name)? {
                    settings.tables.set(c.name, options);
                }
            }
        }
        Ok(settings)
    }

    /// Reads the layered configuration (file, environment, flags).
    pub(crate) fn from_config(config: &config::Config) -> Result<Settings, ConfigError> {
        let err = |e: config::ConfigError| ConfigError(format!("configuration: {e}"));
        let top: config::Map<String, config::Value> =
            config.clone().try_deserialize().map_err(err)?;
        if let Some(key) = top.keys().find(|k| !known_keys().contains(&k.as_str())) {
            return Err(ConfigError(format!("configuration: {}", unknown_key(key))));
        }
        let mut settings: Settings = config.clone().try_deserialize().map_err(err)?;
        for c in COLLECTORS {
            let Some(table) = &c.table else { continue };
            // The table is deserialized by its own crate's type, from the layered value.
            let value = match config.get::<config::Value>(c.name) {
                Ok(value) => value,
                Err(config::ConfigError::NotFound(_)) => continue,
                Err(e) => return Err(err(e)),
            };
            let mut value = <dyn erased_serde::Deserializer>::erase(value);
            let options = table
                .deserialize(&mut value)
                .map_err(|e| ConfigError(format!("configuration: {e} for key `{}`", c.name)))?;
            settings.tables.set(c.name, options);
        }
        Ok(settings)
    }
}

pub use dgx_pixels_registry::{MIN_INTERVAL, MIN_TIMEOUT};

/// Longest label value taken from configuration (`node_name`, a scenario's name): each is
/// repeated on many series, so a huge one would multiply into every scrape.
pub const MAX_LABEL_VALUE_BYTES: usize = 1024;

impl Settings {
    /// Whether collector `name` runs on real GPUs (its registered default unless configured).
    /// Tests look collectors up by name; the daemon asks the descriptors.
    #[cfg(test)]
    pub fn collector_enabled(&self, name: &str) -> bool {
        collectors::find(name).is_some_and(|c| self.runs(c, false))
    }

    /// Whether collector `name` runs on a simulated node. Its descriptor says when that
    /// differs from real GPUs: `dcgm` and `probes` select the simulated profiling and probe
    /// families there, and are on unless turned off (their reasons to be off by default on
    /// hardware, a privileged host engine and work put on the GPUs, do not apply to a
    /// simulation; see docs/architecture.md).
    #[cfg(test)]
    pub fn simulated_collector_enabled(&self, name: &str) -> bool {
        collectors::find(name).is_some_and(|c| self.runs(c, true))
    }

    /// Interval and deadline of collector `name` (its registered defaults unless configured).
    #[cfg(test)]
    pub fn collector_timing(&self, name: &str) -> (Duration, Duration) {
        collectors::find(name).map_or(
            (
                dgx_pixels_registry::DEFAULT_INTERVAL,
                dgx_pixels_registry::DEFAULT_TIMEOUT,
            ),
            |c| {
                let t = self.timing(c);
                (t.interval, t.timeout)
            },
        )
    }

    /// Whether collector `c` runs, on a simulated node or on real GPUs: as configured, else
    /// its descriptor's default.
    pub fn runs(&self, c: &Collector, simulated: bool) -> bool {
        c.enabled(
            self.collector.get(c.name).and_then(|s| s.enabled),
            simulated,
        )
    }

    /// Collector `c`'s interval and deadline: configured, else its defaults. The simulated
    /// node's interval is `[simulation] interval`.
    pub fn timing(&self, c: &Collector) -> Timing {
        let own = self.collector.get(c.name);
        let daemon = if c.name == collectors::sim::COLLECTOR.name {
            self.simulation.interval
        } else {
            None
        };
        Timing {
            interval: daemon
                .or(own.and_then(|s| s.interval))
                .unwrap_or(c.default_interval),
            timeout: own.and_then(|s| s.timeout).unwrap_or(c.default_timeout),
        }
    }

    /// The socket address to bind.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        let raw = self.web.listen_address.trim();
        let full = if raw.starts_with(':') {
            format!("0.0.0.0{raw}")
        } else {
            raw.to_string()
        };
        full.to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                ConfigError(format!(
                    "web.listen_address: invalid address {raw:?}; expected HOST:PORT or :PORT"
                ))
            })
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.validate_web()?;
        self.validate_log()?;
        self.validate_collectors()?;
        self.validate_simulation()?;
        self.validate_label_sizes()?;
        self.validate_connections()?;
        if let Some(cost) = &self.cost {
            cost.validate()?;
        }
        Ok(())
    }

    /// The metrics path, the request and connection caps, the listen address.
    fn validate_web(&self) -> Result<(), ConfigError> {
        let path = &self.web.telemetry_path;
        if !path.starts_with('/') || path == "/" || path.starts_with("/-/") {
            return Err(ConfigError(format!(
                "web.telemetry_path: {path:?} must start with '/' and not be '/' or under '/-/'"
            )));
        }
        // axum treats '{', '}', ':' and '*' in a route as parameters: accept plain paths only.
        if !path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/-._~".contains(c))
        {
            return Err(ConfigError(format!(
                "web.telemetry_path: {path:?} may contain only letters, digits and / - . _ ~"
            )));
        }
        for (key, n) in [
            ("max_requests", self.web.max_requests),
            ("max_connections", self.web.max_connections),
        ] {
            if n > MAX_HTTP_LIMIT {
                return Err(ConfigError(format!(
                    "web.{key}: {n} is over the largest accepted value, {MAX_HTTP_LIMIT}"
                )));
            }
        }
        self.listen_addr()?;
        Ok(())
    }

    /// The log level: a plain level or full tracing directives.
    fn validate_log(&self) -> Result<(), ConfigError> {
        let level = self.log.level.trim().to_ascii_lowercase();
        let plain = ["error", "warn", "info", "debug", "trace", "off"].contains(&level.as_str());
        // Full tracing directives ("info,dgx_pixels_nvml=debug") are accepted too.
        if !(plain || level.contains('=') && tracing_subscriber::EnvFilter::try_new(&level).is_ok())
        {
            return Err(ConfigError(format!(
                "log.level: invalid level {:?}; use error, warn, info, debug or trace",
                self.log.level
            )));
        }
        Ok(())
    }

    /// `[collector.NAME]` names and timing, the longest periods, and each collector's table.
    fn validate_collectors(&self) -> Result<(), ConfigError> {
        for (name, c) in &self.collector {
            if collectors::find(name).is_none() {
                let known: Vec<_> = COLLECTORS.iter().map(|c| c.name).collect();
                return Err(ConfigError(format!(
                    "collector.{name}: unknown collector; known: {}",
                    known.join(", ")
                )));
            }
            check_min(
                &format!("collector.{name}.interval"),
                c.interval,
                MIN_INTERVAL,
            )?;
            check_min(&format!("collector.{name}.timeout"), c.timeout, MIN_TIMEOUT)?;
            check_max(
                &format!("collector.{name}.interval"),
                c.interval,
                MAX_PERIOD,
            )?;
            check_max(&format!("collector.{name}.timeout"), c.timeout, MAX_PERIOD)?;
        }
        // Upper bounds: an instant advanced by any of these must stay in the clock's range.
        for (key, d) in [
            ("simulation.trace_period", self.simulation.trace_period),
            ("simulation.interval", self.simulation.interval),
        ] {
            check_max(key, d, MAX_PERIOD)?;
        }
        let simulated = self.simulation.scenario.is_some();
        for c in COLLECTORS {
            if let Some(options) = self.tables.get(c.name) {
                let check = Check {
                    simulated,
                    timing: self.timing(c),
                };
                options
                    .validate_options(&check)
                    .map_err(|e| ConfigError(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// The simulated node's shortest periods.
    fn validate_simulation(&self) -> Result<(), ConfigError> {
        // A drop is 8 traces of a few hundred kB: faster than a second is no demo, only CPU.
        check_min(
            "simulation.trace_period",
            self.simulation.trace_period,
            Duration::from_secs(1),
        )?;
        check_min(
            "simulation.interval",
            self.simulation.interval,
            MIN_INTERVAL,
        )?;
        Ok(())
    }

    /// Label values from configuration stay small: each is repeated on many series.
    fn validate_label_sizes(&self) -> Result<(), ConfigError> {
        if let Some(n) = self
            .node_name
            .as_ref()
            .filter(|n| n.len() > MAX_LABEL_VALUE_BYTES)
        {
            return Err(ConfigError(format!(
                "node_name: {} bytes is over the {MAX_LABEL_VALUE_BYTES} byte limit of a label value",
                n.len()
            )));
        }
        if let Some(n) = self
            .simulation
            .scenario
            .as_ref()
            .filter(|n| n.len() > MAX_LABEL_VALUE_BYTES * 4)
        {
            return Err(ConfigError(format!(
                "simulation.scenario: {} bytes is not a scenario name or path",
                n.len()
            )));
        }
        Ok(())
    }

    /// The connection caps agree.
    fn validate_connections(&self) -> Result<(), ConfigError> {
        if self.web.max_connections == 0 {
            return Err(ConfigError(
                "web.max_connections: must be at least 1 (it caps open connections; there is no unlimited setting)".into(),
            ));
        }
        let per_client = self.web.connections_per_client();
        if per_client == 0 || per_client > self.web.max_connections {
            return Err(ConfigError(format!(
                "web.max_connections_per_client: {per_client} must be between 1 and web.max_connections ({})",
                self.web.max_connections
            )));
        }
        Ok(())
    }
}

mod files;
mod sources;

use files::{check_max, check_min};
pub use sources::{environment, resolve};

#[cfg(test)]
mod tests;
