//! Settings: defaults, then the TOML config file, then `DGX_PIXELS_*` environment variables, then
//! flags, layered with the `config` crate and checked into a [`Settings`].
//!
//! The config file is also parsed on its own first, strictly, so that a mistake is reported in
//! one line naming the file, the line and the key.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::cli::Cli;
use crate::collectors::{self, COLLECTORS};

/// Default listen address: all interfaces, port 9403 (dcgm-exporter has 9400 and
/// nvidia_gpu_exporter 9835, so both can run beside us during a migration).
pub const DEFAULT_LISTEN_ADDRESS: &str = ":9403";
/// Environment variable prefix.
pub const ENV_PREFIX: &str = "DGX_PIXELS";
/// Largest accepted `web.max_requests` and `web.max_connections`.
pub const MAX_HTTP_LIMIT: usize = 1 << 20;

/// Log line formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// key=value pairs.
    #[default]
    Logfmt,
    /// One JSON object per line.
    Json,
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

/// Parses "1s", "500ms", "2m" (humantime syntax).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("invalid duration {s:?} ({e}); use e.g. 500ms, 1s, 2m"))
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    s.map(|s| parse_duration(&s).map_err(serde::de::Error::custom))
        .transpose()
}

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
    #[serde(deserialize_with = "de_duration")]
    pub interval: Option<Duration>,
    /// Poll deadline.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Option<Duration>,
}

/// `[simulation]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SimulationSettings {
    /// Built-in scenario name or scenario file; unset = real GPUs.
    pub scenario: Option<String>,
    /// Poll interval of the simulated node.
    #[serde(deserialize_with = "de_duration")]
    pub interval: Option<Duration>,
}

/// `[dcgm]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DcgmSettings {
    /// Path of libdcgm.
    pub library: Option<PathBuf>,
    /// Remote host engine, HOST:PORT or a unix socket path; unset = embedded.
    pub hostengine: Option<String>,
    /// A dcgm-exporter field-list CSV (`DCGM_FI_NAME, type, help`) replacing the default fields.
    pub field_list: Option<PathBuf>,
    /// Whether DCGM provides the device metrics (utilization, memory, power, ...) instead of
    /// NVML; default: only when the nvml collector is disabled. Profiling metrics always come
    /// from DCGM.
    pub device_metrics: Option<bool>,
}

/// `[path]`: where host filesystems are mounted (node_exporter's `--path.*`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PathSettings {
    /// procfs mount point; default `/proc`.
    pub procfs: Option<PathBuf>,
}

/// `[kubernetes]`: the kubelet pod-resources source (`--collector.kubernetes`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesSettings {
    /// The kubelet's pod-resources unix socket.
    pub pod_resources_socket: PathBuf,
    /// Largest `List` response accepted, in bytes.
    pub max_response_bytes: u64,
    /// Resource names whose devices are GPUs or MIG instances; a trailing `*` matches any
    /// suffix.
    pub resource_names: Vec<String>,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        let d = dgx_pixels_kubernetes::PodResourcesOptions::default();
        KubernetesSettings {
            pod_resources_socket: d.socket,
            max_response_bytes: d.max_response_bytes as u64,
            resource_names: d.resource_names,
        }
    }
}

/// `[hpc]`: HPC job files.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HpcSettings {
    /// Directory with one file per GPU listing job ids; unset = no hpc source.
    pub job_mapping_dir: Option<PathBuf>,
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
    #[serde(default, deserialize_with = "de_duration")]
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

/// `[probes]`: how the daemon runs the CUDA probes (when `collector.probes` is enabled).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProbesSettings {
    /// Comma-separated probes to rotate through [default: all].
    pub probes: Option<String>,
    /// Maximum fraction of GPU time spent in probes [default: 0.005].
    pub duty_cycle: Option<f64>,
    /// GPU utilization (0-1) above which a GPU is not probed [default: 0.05].
    pub busy_threshold: Option<f64>,
    /// Device memory one probe may allocate [default: 1073741824].
    pub memory_limit_bytes: Option<u64>,
}

impl ProbesSettings {
    /// The scheduler settings, checked.
    pub fn schedule(&self) -> Result<dgx_pixels_probes::scheduler::ScheduleSettings, ConfigError> {
        let mut s = dgx_pixels_probes::scheduler::ScheduleSettings::default();
        if let Some(list) = &self.probes {
            s.probes = dgx_pixels_probes::probe::parse_list(list)
                .map_err(|e| ConfigError(format!("probes.probes: {e}")))?;
        }
        if let Some(d) = self.duty_cycle {
            s.duty_cycle = d;
        }
        if let Some(b) = self.busy_threshold {
            s.busy_threshold = b;
        }
        if let Some(m) = self.memory_limit_bytes {
            s.memory_limit_bytes = m;
        }
        s.validate().map_err(|e| ConfigError(e.to_string()))?;
        Ok(s)
    }
}

/// Everything the daemon is configured with.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Adds `node="..."` to every series when set.
    pub node_name: Option<String>,
    /// HTTP server.
    pub web: WebSettings,
    /// Logging.
    pub log: LogSettings,
    /// Simulated node.
    pub simulation: SimulationSettings,
    /// NVML: the nvml crate's own options (`library`, `slow_interval`, `processes_per_gpu`).
    pub nvml: dgx_pixels_nvml::NvmlOptions,
    /// DCGM.
    pub dcgm: DcgmSettings,
    /// Host filesystem mount points.
    pub path: PathSettings,
    /// Per-collector settings, keyed by collector name.
    pub collector: BTreeMap<String, CollectorSettings>,
    /// Textfile source.
    pub textfile: dgx_pixels_textfile::TextfileOptions,
    /// Kubelet pod-resources source.
    pub kubernetes: KubernetesSettings,
    /// HPC job files.
    pub hpc: HpcSettings,
    /// Cost model; absent = no cost gauges.
    pub cost: Option<CostSettings>,
    /// CUDA probes.
    pub probes: ProbesSettings,
}

pub use collectors::{DEFAULT_INTERVAL, DEFAULT_TIMEOUT, MIN_INTERVAL, MIN_TIMEOUT};

/// Longest label value taken from configuration (`node_name`, a scenario's name): each is
/// repeated on many series, so a huge one would multiply into every scrape.
pub const MAX_LABEL_VALUE_BYTES: usize = 1024;

impl Settings {
    /// Whether collector `name` runs on real GPUs (its registered default unless configured).
    /// Tests look collectors up by name; the daemon asks the descriptors.
    #[cfg(test)]
    pub fn collector_enabled(&self, name: &str) -> bool {
        collectors::find(name).is_some_and(|c| c.enabled(self, false))
    }

    /// Whether collector `name` runs on a simulated node. Its descriptor says when that
    /// differs from real GPUs: `dcgm` and `probes` select the simulated profiling and probe
    /// families there, and are on unless turned off (their reasons to be off by default on
    /// hardware, a privileged host engine and work put on the GPUs, do not apply to a
    /// simulation; see docs/architecture.md).
    #[cfg(test)]
    pub fn simulated_collector_enabled(&self, name: &str) -> bool {
        collectors::find(name).is_some_and(|c| c.enabled(self, true))
    }

    /// Interval and deadline of collector `name` (its registered defaults unless configured).
    #[cfg(test)]
    pub fn collector_timing(&self, name: &str) -> (Duration, Duration) {
        collectors::find(name).map_or((DEFAULT_INTERVAL, DEFAULT_TIMEOUT), |c| {
            let t = c.timing(self);
            (t.interval, t.timeout)
        })
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
        }
        self.probes.schedule()?;
        if let Some(address) = &self.dcgm.hostengine {
            check_hostengine(address)?;
        }
        if let Some(path) = &self.dcgm.field_list {
            read_field_list(path)?;
        }
        check_min(
            "simulation.interval",
            self.simulation.interval,
            MIN_INTERVAL,
        )?;
        check_min(
            "nvml.slow_interval",
            Some(self.nvml.slow_interval),
            MIN_INTERVAL,
        )?;
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
        if self.textfile.max_files == 0 || self.textfile.max_file_bytes == 0 {
            return Err(ConfigError(
                "textfile.max_files and textfile.max_file_bytes: must be > 0".into(),
            ));
        }
        if self.textfile.max_total_bytes == 0 {
            return Err(ConfigError("textfile.max_total_bytes: must be > 0".into()));
        }
        if let Some(cost) = &self.cost {
            cost.validate()?;
        }
        let k = &self.kubernetes;
        if k.max_response_bytes == 0 || usize::try_from(k.max_response_bytes).is_err() {
            return Err(ConfigError(
                "kubernetes.max_response_bytes: must be > 0 and fit in memory".into(),
            ));
        }
        if k.resource_names.is_empty() || k.resource_names.iter().any(|r| r.trim().is_empty()) {
            return Err(ConfigError(
                "kubernetes.resource_names: must list at least one non-empty resource name".into(),
            ));
        }
        Ok(())
    }
}

/// Refuses a duration under `min` (e.g. an interval of 1ns, which would keep a core busy).
fn check_min(key: &str, d: Option<Duration>, min: Duration) -> Result<(), ConfigError> {
    match d {
        Some(d) if d < min => Err(ConfigError(format!(
            "{key}: {} is below the minimum of {}",
            humantime::format_duration(d),
            humantime::format_duration(min)
        ))),
        _ => Ok(()),
    }
}

/// Checks `dcgm.hostengine`: a unix socket path, or HOST[:PORT].
fn check_hostengine(address: &str) -> Result<(), ConfigError> {
    let bad = |why: &str| {
        ConfigError(format!(
            "dcgm.hostengine: {address:?} {why}; expected HOST:PORT or a unix socket path"
        ))
    };
    if address.starts_with('/') {
        return Ok(());
    }
    let (host, port) = match address.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (address, None),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(bad("has no host"));
    }
    if port.is_some_and(|p| p.parse::<u16>().map_or(true, |p| p == 0)) {
        return Err(bad("has an invalid port"));
    }
    Ok(())
}

/// Reads and parses `dcgm.field_list`.
pub fn read_field_list(path: &Path) -> Result<dgx_pixels_dcgm::fields::FieldList, ConfigError> {
    let text = read_text(path).map_err(|e| {
        ConfigError(format!(
            "dcgm.field_list: cannot read {}: {e}",
            path.display()
        ))
    })?;
    dgx_pixels_dcgm::fields::parse_field_list(&text, &path.display().to_string())
        .map_err(|e| ConfigError(format!("dcgm.field_list: {e}")))
}

/// Line (1-based) of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The dotted key at `line`: the nearest `[table]` header above it plus the line's own key.
fn key_at(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let own = lines.get(line.checked_sub(1)?)?.trim();
    let leaf = own
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_string());
    let table = lines[..line - 1].iter().rev().find_map(|l| {
        let l = l.trim();
        (l.starts_with('[') && !l.starts_with("[["))
            .then(|| l.trim_matches(['[', ']']).trim().to_string())
    });
    if own.starts_with('[') {
        return Some(own.trim_matches(['[', ']']).trim().to_string());
    }
    match (table, leaf) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (None, Some(k)) => Some(k),
        (t, None) => t,
    }
}

/// Reads a config or field-list file: a regular file (a FIFO in its place must not hang a
/// reload), of a sane size, in UTF-8.
fn read_text(path: &Path) -> Result<String, String> {
    let bytes = dgx_pixels_web::read_regular(path, dgx_pixels_web::MAX_CONFIG_FILE_BYTES)
        .map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "not valid UTF-8".to_string())
}

/// Reads and parses a config file strictly, for error messages that name the file, line and
/// key; returns its text for the layered parse.
fn check_file(path: &Path) -> Result<String, ConfigError> {
    let text = read_text(path)
        .map_err(|e| ConfigError(format!("config file {}: cannot read: {e}", path.display())))?;
    match toml::from_str::<Settings>(&text) {
        Ok(s) => s
            .validate()
            .map(|()| text)
            .map_err(|e| ConfigError(format!("config file {}: {e}", path.display()))),
        Err(e) => {
            let line = e.span().map(|s| line_of(&text, s.start));
            let mut msg = format!("config file {}", path.display());
            if let Some(line) = line {
                msg.push_str(&format!(" line {line}"));
                if let Some(key) = key_at(&text, line) {
                    msg.push_str(&format!(" key {key}"));
                }
            }
            msg.push_str(": ");
            msg.push_str(e.message().trim());
            Err(ConfigError(msg.replace('\n', " ")))
        }
    }
}

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
    let overrides: [(&str, Option<config::Value>); 16] = [
        (
            "dcgm.library",
            cli.dcgm_library
                .as_ref()
                .map(|p| p.display().to_string().into()),
        ),
        (
            "dcgm.hostengine",
            cli.dcgm_hostengine.clone().map(Into::into),
        ),
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
        ("simulation.scenario", cli.simulate.clone().map(Into::into)),
        (
            "nvml.library",
            cli.nvml_library
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
        (
            "textfile.directory",
            cli.textfile_directory
                .as_ref()
                .map(|p| p.display().to_string().into()),
        ),
        (
            "kubernetes.pod_resources_socket",
            cli.kubernetes_socket
                .as_ref()
                .map(|p| p.display().to_string().into()),
        ),
        (
            "kubernetes.max_response_bytes",
            cli.kubernetes_max_response_bytes.map(Into::into),
        ),
        (
            "hpc.job_mapping_dir",
            cli.hpc_job_mapping_dir
                .as_ref()
                .map(|p| p.display().to_string().into()),
        ),
    ];
    for (key, value) in overrides {
        if let Some(v) = value {
            b = b.set_override(key, v).map_err(err)?;
        }
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
    let settings: Settings = b
        .build()
        .and_then(|c| c.try_deserialize())
        .map_err(|e| ConfigError(format!("configuration: {e}")))?;
    settings.validate()?;
    Ok(settings)
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
fn is_service_link(name: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse_from;
    use std::io::Write;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn probe_settings_come_from_file_and_env_and_are_checked() {
        let f = file("[probes]\nprobes = \"gemm_bf16,copy_d2d\"\nduty_cycle = 0.01\n");
        let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
        let s = resolve(&cli, env(&[("DGX_PIXELS_PROBES__BUSY_THRESHOLD", "0.2")])).unwrap();
        let sched = s.probes.schedule().unwrap();
        assert_eq!(sched.duty_cycle, 0.01);
        assert_eq!(sched.busy_threshold, 0.2);
        assert_eq!(sched.probes.len(), 2);
        assert_eq!(sched.memory_limit_bytes, 1 << 30);
        let bad = file("[probes]\nduty_cycle = 2.0\n");
        let cli = parse_from(["x", "--config.file", bad.path().to_str().unwrap()]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(
            e.contains("probes.duty_cycle") && e.contains("[0.000001, 1]"),
            "{e}"
        );
        let bad = file("[probes]\nprobes = \"gemm_int4\"\n");
        let cli = parse_from(["x", "--config.file", bad.path().to_str().unwrap()]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(
            e.contains("probes.probes: unknown probe \"gemm_int4\""),
            "{e}"
        );
    }

    #[test]
    fn simulation_turns_profiling_and_probes_on_unless_they_are_turned_off() {
        let s = resolve(&parse_from(["x", "--simulate", "dgx-h100"]).unwrap(), []).unwrap();
        assert!(!s.collector_enabled("dcgm") && !s.collector_enabled("probes"));
        assert!(s.simulated_collector_enabled("dcgm"));
        assert!(s.simulated_collector_enabled("probes"));
        assert!(
            !s.simulated_collector_enabled("kubernetes"),
            "others as on hardware"
        );
        let cli = parse_from(["x", "--simulate", "dgx-h100", "--no-collector.probes"]).unwrap();
        let s = resolve(
            &cli,
            [("DGX_PIXELS_COLLECTOR__DCGM__ENABLED".into(), "false".into())],
        );
        let s = s.unwrap();
        assert!(!s.simulated_collector_enabled("probes"));
        assert!(!s.simulated_collector_enabled("dcgm"));
    }

    #[test]
    fn a_scenarios_cost_table_is_checked_like_the_config_files() {
        let table: toml::Table =
            toml::from_str("currency = \"USD\"\nelectricity_price_per_kwh = 0.15\npue = 1.3\ngpu_cost_per_hour = 1.0\n")
                .unwrap();
        let c = CostSettings::from_scenario("dgx-h100", &table).unwrap();
        assert_eq!((c.currency.as_str(), c.pue), ("USD", 1.3));
        let bad: toml::Table =
            toml::from_str("electricity_price_per_kwh = 0.1\npue = 0.5\ngpu_cost_per_hour = 1\n")
                .unwrap();
        let e = CostSettings::from_scenario("mine.toml", &bad)
            .unwrap_err()
            .0;
        assert!(e.starts_with("scenario mine.toml: cost.pue"), "{e}");
        let bad: toml::Table =
            toml::from_str("electricity_price_per_kwh = 0.1\nprice = 1\n").unwrap();
        let e = CostSettings::from_scenario("mine.toml", &bad)
            .unwrap_err()
            .0;
        assert!(
            e.contains("scenario mine.toml: [cost]") && e.contains("price"),
            "{e}"
        );
    }

    #[test]
    fn defaults_apply_without_any_input() {
        let s = resolve(&parse_from(["x"]).unwrap(), []).unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(s.listen_addr().unwrap().port(), 9403);
        assert!(s.collector_enabled("nvml"));
        assert_eq!(
            s.collector_timing("nvml"),
            (DEFAULT_INTERVAL, DEFAULT_TIMEOUT)
        );
    }

    #[test]
    fn precedence_is_flags_then_env_then_file_then_defaults() {
        let f = file(
            "node_name = \"from-file\"\n[web]\nlisten_address = \":1111\"\ntelemetry_path = \"/file\"\n[log]\nlevel = \"debug\"\n[collector.nvml]\ninterval = \"5s\"\n",
        );
        let path = f.path().to_str().unwrap();
        let cli =
            parse_from(["x", "--config.file", path, "--web.listen-address", ":3333"]).unwrap();
        let s = resolve(
            &cli,
            env(&[
                ("DGX_PIXELS_WEB__LISTEN_ADDRESS", ":2222"),
                ("DGX_PIXELS_WEB__TELEMETRY_PATH", "/env"),
                ("DGX_PIXELS_COLLECTOR__NVML__TIMEOUT", "3s"),
                ("UNRELATED", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(s.web.listen_address, ":3333", "flag beats env and file");
        assert_eq!(s.web.telemetry_path, "/env", "env beats file");
        assert_eq!(s.log.level, "debug", "file beats default");
        assert_eq!(s.node_name.as_deref(), Some("from-file"));
        assert_eq!(s.log.format, LogFormat::Logfmt, "default");
        assert_eq!(
            s.collector_timing("nvml"),
            (Duration::from_secs(5), Duration::from_secs(3))
        );
        let cli = parse_from([
            "x",
            "--config.file",
            path,
            "--no-collector.nvml",
            "--collector.nvml.interval",
            "250ms",
        ])
        .unwrap();
        let s = resolve(&cli, []).unwrap();
        assert!(!s.collector_enabled("nvml"));
        assert_eq!(s.collector_timing("nvml").0, Duration::from_millis(250));
    }

    #[test]
    fn file_errors_name_file_line_and_key() {
        let cases = [
            (
                "[web]\nlisten_address = 9403\n",
                "line 2 key web.listen_address",
                "invalid type",
            ),
            (
                "[web]\nlisten_adress = \":1\"\n",
                "line 2 key web.listen_adress",
                "unknown field",
            ),
            (
                "[log]\nlevel = \"info\"\nformat = \"xml\"\n",
                "line 3 key log.format",
                "unknown variant",
            ),
            (
                "[collector.nvml]\ninterval = \"soon\"\n",
                "line 2 key collector.nvml.interval",
                "invalid duration",
            ),
            ("[web\n", "line 1", ""),
        ];
        for (text, place, what) in cases {
            let f = file(text);
            let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
            let e = resolve(&cli, []).unwrap_err().to_string();
            assert!(e.contains(&f.path().display().to_string()), "{e}");
            assert!(e.contains(place), "{text:?}: {e}");
            assert!(e.contains(what), "{text:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn semantic_errors_name_the_key() {
        let f = file("[collector.gpu]\nenabled = true\n");
        let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(
            e.contains("collector.gpu: unknown collector; known: nvml, textfile, probes, dcgm, kubernetes, hpc"),
            "{e}"
        );

        let cli = parse_from(["x", "--web.telemetry-path", "metrics"]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(e.starts_with("web.telemetry_path:"), "{e}");

        // axum would panic on a route parameter; the config must refuse it first.
        for path in ["/metrics/{gpu}", "/:x", "/*rest", "/a b"] {
            let cli = parse_from(["x", "--web.telemetry-path", path]).unwrap();
            let e = resolve(&cli, []).unwrap_err().to_string();
            assert!(e.starts_with("web.telemetry_path:"), "{path}: {e}");
        }
        // tokio's Semaphore panics above usize::MAX >> 3 permits.
        let e = resolve(
            &parse_from(["x"]).unwrap(),
            env(&[("DGX_PIXELS_WEB__MAX_CONNECTIONS", "9223372036854775807")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("web.max_connections: 9223372036854775807 is over"),
            "{e}"
        );
        let cli = parse_from(["x", "--web.max-requests", "2000000"]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(e.starts_with("web.max_requests: 2000000 is over"), "{e}");

        let cli = parse_from(["x", "--web.listen-address", "nonsense"]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(e.starts_with("web.listen_address: invalid address"), "{e}");

        let e = resolve(
            &parse_from(["x"]).unwrap(),
            env(&[("DGX_PIXELS_WEB__NOPE", "1")]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("nope"), "{e}");
    }

    #[test]
    fn kubernetes_service_links_are_not_settings() {
        let links = [
            ("DGX_PIXELS_EXPORTER_SERVICE_HOST", "10.0.0.1"),
            ("DGX_PIXELS_EXPORTER_SERVICE_PORT", "9403"),
            ("DGX_PIXELS_EXPORTER_SERVICE_PORT_METRICS", "9403"),
            ("DGX_PIXELS_EXPORTER_PORT", "tcp://10.0.0.1:9403"),
            ("DGX_PIXELS_EXPORTER_PORT_9403_TCP", "tcp://10.0.0.1:9403"),
            ("DGX_PIXELS_EXPORTER_PORT_9403_TCP_PROTO", "tcp"),
            ("DGX_PIXELS_EXPORTER_PORT_9403_TCP_PORT", "9403"),
            ("DGX_PIXELS_EXPORTER_PORT_9403_TCP_ADDR", "10.0.0.1"),
        ];
        let mut vars = links.to_vec();
        vars.push(("DGX_PIXELS_NODE_NAME", "gpu-17"));
        let s = resolve(&parse_from(["x"]).unwrap(), env(&vars)).unwrap();
        assert_eq!(
            s.node_name.as_deref(),
            Some("gpu-17"),
            "real settings still apply"
        );
        // Anything else unknown is still an error.
        let e = resolve(
            &parse_from(["x"]).unwrap(),
            env(&[("DGX_PIXELS_EXPORTER_PORTS", "1")]),
        );
        assert!(e.is_err());
    }

    #[test]
    fn kubernetes_and_hpc_tables_parse_validate_and_yield_to_flags() {
        let f = file(
            "[kubernetes]\npod_resources_socket = \"/run/k.sock\"\nmax_response_bytes = 33554432\nresource_names = [\"nvidia.com/gpu\", \"example.com/gpu-*\"]\n[hpc]\njob_mapping_dir = \"/run/jobs\"\n[collector.kubernetes]\nenabled = true\n",
        );
        let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
        let s = resolve(&cli, []).unwrap();
        assert_eq!(s.kubernetes.pod_resources_socket, Path::new("/run/k.sock"));
        assert_eq!(s.kubernetes.max_response_bytes, 32 << 20);
        assert_eq!(s.kubernetes.resource_names[1], "example.com/gpu-*");
        assert_eq!(
            s.hpc.job_mapping_dir.as_deref(),
            Some(Path::new("/run/jobs"))
        );
        assert!(s.collector_enabled("kubernetes"));
        assert_eq!(s.collector_timing("kubernetes").0, Duration::from_secs(5));
        let cli = parse_from([
            "x",
            "--config.file",
            f.path().to_str().unwrap(),
            "--kubernetes.pod-resources-socket",
            "/flag.sock",
            "--kubernetes.max-response-bytes",
            "1024",
            "--hpc.job-mapping-dir",
            "/flag",
        ])
        .unwrap();
        let s = resolve(&cli, []).unwrap();
        assert_eq!(s.kubernetes.pod_resources_socket, Path::new("/flag.sock"));
        assert_eq!(s.kubernetes.max_response_bytes, 1024);
        assert_eq!(s.hpc.job_mapping_dir.as_deref(), Some(Path::new("/flag")));
        // Defaults: off, the kubelet's standard socket, 16 MiB.
        let s = resolve(&parse_from(["x"]).unwrap(), []).unwrap();
        assert!(!s.collector_enabled("kubernetes"));
        assert_eq!(
            s.kubernetes.pod_resources_socket,
            Path::new("/var/lib/kubelet/pod-resources/kubelet.sock")
        );
        assert_eq!(s.kubernetes.max_response_bytes, 16 << 20);
        for (text, want) in [
            (
                "[kubernetes]\nmax_response_bytes = 0\n",
                "kubernetes.max_response_bytes",
            ),
            (
                "[kubernetes]\nresource_names = []\n",
                "kubernetes.resource_names",
            ),
            (
                "[kubernetes]\n\nsocket = \"/x\"\n",
                "line 3 key kubernetes.socket",
            ),
            ("[hpc]\njob_dir = \"/x\"\n", "line 2 key hpc.job_dir"),
        ] {
            let f = file(text);
            let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
            let e = resolve(&cli, []).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains(&f.path().display().to_string()), "{e}");
        }
    }

    #[test]
    fn cost_and_textfile_tables_parse_and_validate() {
        let f = file(
            "[textfile]\ndirectory = \"/tmp/tf\"\n[cost]\ncurrency = \"EUR\"\nelectricity_price_per_kwh = 0.36\npue = 1.25\ngpu_purchase_price = 31557.6\ngpu_lifetime = \"1year\"\n",
        );
        let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
        let s = resolve(&cli, []).unwrap();
        assert_eq!(s.textfile.directory.as_deref(), Some(Path::new("/tmp/tf")));
        let cost = s.cost.unwrap();
        assert_eq!(cost.currency, "EUR");
        assert!((cost.price_per_joule() - 1.0e-7).abs() < 1e-18);
        // humantime's year is 365.25 days = 31_557_600 s.
        assert!((cost.gpu_amortization_per_second() - 0.001).abs() < 1e-12);
        let cli = parse_from(["x", "--textfile.directory", "/flag"]).unwrap();
        let s = resolve(&cli, env(&[("DGX_PIXELS_TEXTFILE__DIRECTORY", "/env")])).unwrap();
        assert_eq!(s.textfile.directory.as_deref(), Some(Path::new("/flag")));
        assert!(s.cost.is_none());
        let s = resolve(
            &parse_from(["x"]).unwrap(),
            env(&[
                ("DGX_PIXELS_COST__ELECTRICITY_PRICE_PER_KWH", "0.18"),
                ("DGX_PIXELS_COST__GPU_COST_PER_HOUR", "3.6"),
            ]),
        )
        .unwrap();
        let cost = s.cost.unwrap();
        assert_eq!((cost.currency.as_str(), cost.pue), ("USD", 1.0), "defaults");
        assert!((cost.gpu_amortization_per_second() - 0.001).abs() < 1e-15);
        assert!((cost.price_per_joule() - 0.05e-6).abs() < 1e-18);

        let cases = [
            ("[cost]\nelectricity_price_per_kwh = 0.1\n", "cost.gpu_cost_per_hour: set either"),
            (
                "[cost]\nelectricity_price_per_kwh = 0.1\ngpu_cost_per_hour = 1\npue = 0.8\n",
                "cost.pue: must be >= 1",
            ),
            (
                "[cost]\nelectricity_price_per_kwh = -1\ngpu_cost_per_hour = 1\n",
                "cost.electricity_price_per_kwh",
            ),
            (
                "[cost]\nelectricity_price_per_kwh = 0.1\ngpu_cost_per_hour = 1\ngpu_purchase_price = 2\n",
                "set either",
            ),
            ("[cost]\nelectricity_price_per_kwh = 0.1\nprice = 1\n", "line 3 key cost.price"),
            ("[cost]\ngpu_cost_per_hour = 1\n", "electricity_price_per_kwh"),
            ("[textfile]\nmax_files = 0\n", "textfile.max_files"),
            ("[textfile]\nmax_total_bytes = 0\n", "textfile.max_total_bytes"),
        ];
        for (text, want) in cases {
            let f = file(text);
            let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
            let e = resolve(&cli, []).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains(&f.path().display().to_string()), "{e}");
        }
    }

    #[test]
    fn the_nvml_table_is_the_nvml_crates_own_options() {
        let f = file("[nvml]\nlibrary = \"/opt/libnvidia-ml.so.1\"\nslow_interval = \"2s\"\nprocesses_per_gpu = 3\n");
        let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
        let s = resolve(&cli, env(&[("DGX_PIXELS_NVML__PROCESSES_PER_GPU", "4")])).unwrap();
        assert_eq!(
            s.nvml.library,
            Some(PathBuf::from("/opt/libnvidia-ml.so.1"))
        );
        assert_eq!(s.nvml.slow_interval, Duration::from_secs(2));
        assert_eq!(s.nvml.max_processes_per_gpu, 4, "env beats file");
        let d = dgx_pixels_nvml::NvmlOptions::default();
        assert_eq!(
            (s.nvml.gpu_deadline, &s.nvml.procfs),
            (d.gpu_deadline, &d.procfs)
        );
        let s = resolve(&parse_from(["x"]).unwrap(), []).unwrap();
        assert_eq!(s.nvml, d, "defaults are the crate's");
        for (text, want) in [
            ("[nvml]\nprocfs = \"/p\"\n", "line 2 key nvml.procfs"),
            (
                "[nvml]\ngpu_deadline = \"1s\"\n",
                "line 2 key nvml.gpu_deadline",
            ),
            ("[nvml]\nmax_processes_per_gpu = 1\n", "unknown field"),
            ("[nvml]\nslow_interval = \"soon\"\n", "invalid duration"),
            (
                "[nvml]\nslow_interval = \"1ms\"\n",
                "nvml.slow_interval: 1ms is below the minimum",
            ),
        ] {
            let f = file(text);
            let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
            let e = resolve(&cli, []).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn an_unreadable_file_is_named() {
        let cli = parse_from(["x", "--config.file", "/nonexistent/dgx.toml"]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(
            e.starts_with("config file /nonexistent/dgx.toml: cannot read"),
            "{e}"
        );
    }

    #[test]
    fn dcgm_settings_parse_strictly_and_flags_win() {
        let f = file("[dcgm]\nhostengine = \"10.0.0.1:5555\"\nlibrary = \"/opt/libdcgm.so.4\"\n");
        let path = f.path().to_str().unwrap();
        let s = resolve(&parse_from(["x", "--config.file", path]).unwrap(), []).unwrap();
        assert_eq!(s.dcgm.hostengine.as_deref(), Some("10.0.0.1:5555"));
        assert_eq!(s.dcgm.library, Some(PathBuf::from("/opt/libdcgm.so.4")));
        assert!(!s.collector_enabled("dcgm"), "off by default");
        let cli = parse_from([
            "x",
            "--config.file",
            path,
            "--dcgm.hostengine",
            "/run/nvidia-dcgm.sock",
            "--dcgm.library",
            "/x/libdcgm.so.3",
            "--collector.dcgm",
        ])
        .unwrap();
        let s = resolve(&cli, []).unwrap();
        assert_eq!(s.dcgm.hostengine.as_deref(), Some("/run/nvidia-dcgm.sock"));
        assert_eq!(s.dcgm.library, Some(PathBuf::from("/x/libdcgm.so.3")));
        assert!(s.collector_enabled("dcgm"));

        for (text, want) in [
            ("[dcgm]\nhostengine = 5555\n", "line 2 key dcgm.hostengine"),
            ("[dcgm]\nlibary = \"x\"\n", "line 2 key dcgm.libary"),
            (
                "[dcgm]\nhostengine = \"host:99999\"\n",
                "dcgm.hostengine: \"host:99999\" has an invalid port",
            ),
            (
                "[dcgm]\nfield_list = \"/nonexistent.csv\"\n",
                "dcgm.field_list: cannot read /nonexistent.csv",
            ),
        ] {
            let f = file(text);
            let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
            let e = resolve(&cli, []).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let cli = parse_from(["x", "--dcgm.hostengine", ":5555"]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(e.contains("has no host"), "{e}");
    }
}
