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

/// The series budget's profile (`[metrics] detail`, `--metrics.detail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum MetricsDetail {
    /// What an SRE needs at fleet scale (docs/metrics.md, "Series budget").
    #[default]
    Default,
    /// Every series every source reads.
    Full,
}

impl MetricsDetail {
    /// The encoder's profile.
    pub fn profile(self) -> dgx_pixels_metrics::catalog::Detail {
        match self {
            MetricsDetail::Default => dgx_pixels_metrics::catalog::Detail::Default,
            MetricsDetail::Full => dgx_pixels_metrics::catalog::Detail::Full,
        }
    }
}

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

/// Longest duration any setting accepts (each key has its own, lower bound too): 100 years,
/// so that no instant advanced by a setting can overflow the clock.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

/// Longest interval, timeout or period of a poll or a drop: a day.
pub const MAX_PERIOD: Duration = Duration::from_secs(86_400);

/// Parses "1s", "500ms", "2m" (humantime syntax), at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("invalid duration {s:?} ({e}); use e.g. 500ms, 1s, 2m"))?;
    if d > MAX_DURATION {
        return Err(format!(
            "duration {s:?} is over the maximum of {}",
            humantime::format_duration(MAX_DURATION)
        ));
    }
    Ok(d)
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
    /// Whether the simulated node runs its training job, whose traces the trace collector
    /// analyses [default: true]; false leaves the collector to `--trace.directory` alone.
    pub traces: Option<bool>,
    /// Where the simulated training job drops its profiler traces (a `simulated-training`
    /// directory inside it); unset = a private temporary directory under `$TMPDIR`, removed
    /// at exit.
    pub trace_directory: Option<PathBuf>,
    /// Time between two of the simulated job's trace drops [default: 30s].
    #[serde(deserialize_with = "de_duration")]
    pub trace_period: Option<Duration>,
}

impl SimulationSettings {
    /// `trace_period` or its default.
    pub fn trace_period(&self) -> Duration {
        self.trace_period
            .unwrap_or(dgx_pixels_trace_source::DEFAULT_PERIOD)
    }
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
    /// Comma-separated probes to rotate through, or `all` [default:
    /// gemm_bf16,copy_d2d,copy_h2d,launch_latency].
    pub probes: Option<String>,
    /// Maximum fraction of GPU time spent in probes [default: 0.005].
    pub duty_cycle: Option<f64>,
    /// GPU utilization (0-1) above which a GPU is not probed [default: 0.05].
    pub busy_threshold: Option<f64>,
    /// Device memory one probe may allocate [default: 1073741824].
    pub memory_limit_bytes: Option<u64>,
    /// How long a GPU must read idle and free before it is probed [default: 10s].
    #[serde(deserialize_with = "de_duration")]
    pub settle: Option<Duration>,
    /// Deadline of one probe worker process, after which it is killed [default: 20s].
    #[serde(deserialize_with = "de_duration")]
    pub worker_timeout: Option<Duration>,
}

/// Default `[probes] worker_timeout`: a context, cuBLAS and four iterations take 1-3 s on a
/// real GPU; the deadline is for a hung one.
pub const DEFAULT_PROBE_WORKER_TIMEOUT: Duration = Duration::from_secs(20);
/// Bounds of the probe durations: a settle window of over an hour means never, and a worker
/// deadline must stay within the collector's poll deadline range.
const MAX_PROBE_SETTLE: Duration = Duration::from_secs(3600);
const PROBE_WORKER_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(600));

impl ProbesSettings {
    /// The scheduler settings, checked.
    pub fn schedule(&self) -> Result<dgx_pixels_probe_source::ScheduleSettings, ConfigError> {
        let mut s = dgx_pixels_probe_source::ScheduleSettings::default();
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
        if let Some(d) = self.settle {
            if d > MAX_PROBE_SETTLE {
                return Err(ConfigError(format!(
                    "probes.settle: {} is over the limit of {}",
                    humantime::format_duration(d),
                    humantime::format_duration(MAX_PROBE_SETTLE)
                )));
            }
            s.settle = d;
        }
        self.worker_timeout()?;
        s.validate().map_err(|e| ConfigError(e.to_string()))?;
        Ok(s)
    }
}

impl ProbesSettings {
    /// `worker_timeout` or its default, checked.
    pub fn worker_timeout(&self) -> Result<Duration, ConfigError> {
        let d = self.worker_timeout.unwrap_or(DEFAULT_PROBE_WORKER_TIMEOUT);
        let (min, max) = PROBE_WORKER_TIMEOUT_RANGE;
        if d < min || d > max {
            return Err(ConfigError(format!(
                "probes.worker_timeout: {} must be between {} and {}",
                humantime::format_duration(d),
                humantime::format_duration(min),
                humantime::format_duration(max)
            )));
        }
        Ok(d)
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
    /// What the exposition serves (the series budget).
    pub metrics: MetricsSettings,
    /// Logging.
    pub log: LogSettings,
    /// Simulated node.
    pub simulation: SimulationSettings,
    /// NVML: the nvml crate's own options (`library`, `slow_interval`, `processes_per_gpu`, `xid_quiet_period`).
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
    /// GPU health verdict.
    pub health: HealthSettings,
    /// Kernel log: the kmsg crate's own options (`path`, `state_directory`, `boot_id_path`).
    pub kmsg: dgx_pixels_kmsg::KmsgOptions,
    /// Profiler trace source.
    pub trace: dgx_pixels_trace_source::TraceOptions,
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
            ("nvml.slow_interval", Some(self.nvml.slow_interval)),
            ("nvml.xid_quiet_period", Some(self.nvml.xid_quiet_period)),
        ] {
            check_max(key, d, MAX_PERIOD)?;
        }
        for (key, d) in [
            ("health.clear_after", self.health.clear_after),
            ("health.idle_after", self.health.idle_after),
        ] {
            check_max(key, d, 30 * MAX_PERIOD)?;
        }
        self.probes.schedule()?;
        // A worker must be killed before the poll that waits for it overruns its own deadline
        // (the runner would serve the probes source down for a hang the worker timeout handles).
        let probe_deadline = self.collector_timing("probes").1;
        let worker = self.probes.worker_timeout()?;
        if worker >= probe_deadline {
            return Err(ConfigError(format!(
                "probes.worker_timeout: {} must be shorter than collector.probes.timeout ({})",
                humantime::format_duration(worker),
                humantime::format_duration(probe_deadline)
            )));
        }
        self.health.validate()?;
        self.trace
            .validate()
            .map_err(|e| ConfigError(e.to_string()))?;
        // A drop is 8 traces of a few hundred kB: faster than a second is no demo, only CPU.
        check_min(
            "simulation.trace_period",
            self.simulation.trace_period,
            Duration::from_secs(1),
        )?;
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
        check_power_sampling(&self.nvml)?;
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

mod files;
mod health;
mod sources;

pub use files::read_field_list;
use files::{check_hostengine, check_max, check_min, check_power_sampling};
pub use health::HealthSettings;
pub use sources::{environment, resolve};

#[cfg(test)]
mod tests;
