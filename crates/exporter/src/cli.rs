//! Command-line flags, Prometheus exporter style. Every flag is optional here: a flag that is
//! given overrides the environment, the config file and the defaults (see `config.rs`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command, FromArgMatches, Parser, Subcommand};

use crate::collectors::{Flag, FlagKind, COLLECTORS};
use dgx_pixels_settings::parse_duration;
use serde::Deserialize;

const ABOUT: &str = "GPU telemetry exporter for Prometheus: every GPU of the node (or of a \
simulated node) through NVML and DCGM, its health verdict and kernel-log XIDs, CUDA probes on \
idle GPUs, the pods and jobs that hold it, and the workload metrics and profiler traces jobs \
write, served under the dgx_pixels_* namespace (beside the exporter's own process_* metrics, \
named as every Prometheus client library names them).";

const AFTER_HELP: &str = "\
Settings come from, highest precedence first: flags, DGX_PIXELS_* environment variables \
(nested keys joined by '__', e.g. DGX_PIXELS_WEB__LISTEN_ADDRESS), the --config.file TOML file, \
then defaults.

Without a GPU, try the simulated 8x H100 node:  dgx-pixels-exporter --simulate dgx-h100";

/// The flags that do not depend on the collector registry.
#[derive(Debug, Parser)]
#[command(name = "dgx-pixels-exporter", version, about = ABOUT, after_help = AFTER_HELP)]
pub struct Cli {
    /// Address to listen on, HOST:PORT or :PORT for all interfaces.
    #[arg(long = "web.listen-address", display_order = 10, value_name = "ADDR", help = format!("Address to listen on, HOST:PORT or :PORT for all interfaces [default: {DEFAULT_LISTEN_ADDRESS}]"))]
    pub listen_address: Option<String>,

    /// Path under which to expose metrics [default: /metrics].
    #[arg(long = "web.telemetry-path", display_order = 20, value_name = "PATH")]
    pub telemetry_path: Option<String>,

    /// Maximum number of concurrent scrapes; more are answered 503. 0 means no limit [default: 40].
    #[arg(long = "web.max-requests", display_order = 30, value_name = "N")]
    pub max_requests: Option<usize>,

    /// TOML configuration file.
    #[arg(long = "config.file", display_order = 40, value_name = "FILE")]
    pub config_file: Option<PathBuf>,

    /// Minimum level of log messages: error, warn, info, debug or trace [default: info].
    #[arg(long = "log.level", display_order = 50, value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// Log line format [default: logfmt].
    #[arg(
        long = "log.format",
        display_order = 60,
        value_name = "FORMAT",
        value_enum
    )]
    pub log_format: Option<LogFormat>,

    /// Series profile: lean (what fleet dashboards and alerts read, at most 25 series per GPU
    /// plus the health verdict: every metric the shipped rules and the Fleet dashboard use),
    /// default (what an SRE needs at fleet scale: every signal the shipped rules, alerts and
    /// dashboards use, per-part detail only while it says something) or full (every series every
    /// source reads). See docs/metrics.md, "Series budget" [default: default].
    #[arg(
        long = "metrics.detail",
        display_order = 70,
        value_name = "PROFILE",
        value_enum
    )]
    pub metrics_detail: Option<MetricsDetail>,

    /// Serve a simulated node instead of real GPUs: a built-in scenario (dgx-h100, dgx-a100-mig,
    /// dgx-spark, fault-gpu-lost, fault-xid-storm, fault-ecc, fault-thermal, fault-health,
    /// dgx-b200, gb200-nvl72-tray, fault-fabric, fault-rail) or a scenario TOML file. dgx_pixels_exporter_build_info then says mode="simulated" and names the scenario.
    #[arg(long = "simulate", display_order = 80, value_name = "SCENARIO")]
    pub simulate: Option<String>,

    /// Web config file in the exporter-toolkit format: TLS, client certificates, basic auth,
    /// response headers. Re-read when it changes and on SIGHUP.
    #[arg(long = "web.config.file", display_order = 100, value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// procfs mount point, read to map GPU processes to containers [default: /proc].
    #[arg(long = "path.procfs", display_order = 120, value_name = "PATH")]
    pub path_procfs: Option<PathBuf>,
    /// Where a simulated node (--simulate) drops the profiler traces of its simulated training
    /// job, watched by the trace collector [default: a private temporary directory under
    /// $TMPDIR, removed at exit].
    #[arg(
        long = "simulate.trace-directory",
        display_order = 150,
        value_name = "DIR"
    )]
    pub simulate_trace_directory: Option<PathBuf>,

    /// Adds a node="NAME" label to every series (e.g. from the NODE_NAME downward-API variable).
    #[arg(long = "node.name", display_order = 190, value_name = "NAME")]
    pub node_name: Option<String>,

    /// Push every generation to an OTLP/HTTP collector as well (http/protobuf), configured by
    /// the OTEL_EXPORTER_OTLP_* and OTEL_METRIC_EXPORT_INTERVAL variables; see docs/otlp.md.
    #[arg(long = "otlp.push", display_order = 200)]
    pub otlp_push: bool,

    /// The OTLP metrics URL, http:// or https://, used as is (overrides
    /// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT and OTEL_EXPORTER_OTLP_ENDPOINT) [default:
    /// http://localhost:4318/v1/metrics]. Implies --otlp.push.
    #[arg(long = "otlp.endpoint", display_order = 201, value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    #[command(subcommand)]
    pub command: Option<Commands>,

    /// Per-collector flags, filled from the registry (not parsed by derive).
    #[arg(skip)]
    pub collectors: Vec<CollectorFlags>,

    /// The settings keys that given collector flags (`--nvml.library`, ...) override, with
    /// their values, filled from the registry.
    #[arg(skip)]
    pub collector_options: Vec<(&'static str, config::Value)>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Commands {
    /// Print generated documentation.
    Docs {
        #[command(subcommand)]
        what: DocsCommand,
    },
    /// One-shot GPU benchmarks with the CUDA probes (run, compare).
    Probe {
        #[command(subcommand)]
        what: dgx_pixels_tools::probe::ProbeCommand,
    },
    /// Analyse PyTorch profiler traces and memory snapshots (analyze, compare).
    Trace {
        #[command(subcommand)]
        what: dgx_pixels_tools::trace::TraceCommand,
    },
    /// The local exporter's GPU verdicts as a node-problem-detector plugin (exit 0, 1, 2)
    ///
    /// Asks the exporter running on this node over its own listener and answers in NPD's
    /// custom-plugin protocol: exit 0 OK, 1 problem, 2 unknown, one line of at most 80 bytes
    /// (docs/deploy.md). Give it the daemon's flags (--config.file, --web.config.file, ...)
    /// before the subcommand, so that it finds the listener, TLS and the metrics path.
    #[command(name = "npd-check")]
    NpdCheck(NpdCheckArgs),
    /// Internal: one probe run (or GPU discovery) in a short-lived worker process, started by
    /// the daemon's probes collector; reads a JSON request on stdin, answers on stdout.
    #[command(name = "probe-worker", hide = true)]
    ProbeWorker {
        /// NVML library to check the GPU's other users with (the daemon's `nvml.library`).
        #[arg(long, value_name = "PATH")]
        nvml_library: Option<std::path::PathBuf>,
    },
    /// Internal: the analysis of one trace or memory snapshot in a short-lived worker process,
    /// started by the daemon's trace collector; reads a JSON request on stdin, answers on
    /// stdout.
    #[command(name = "trace-worker", hide = true)]
    TraceWorker,
}

/// What `docs` prints.
#[derive(Debug, Subcommand)]
pub enum DocsCommand {
    /// The metric catalog as Markdown (docs/metrics.md).
    Metrics,
    /// The DCGM field mapping as Markdown (docs/dcgm-fields.md).
    DcgmFields,
    /// The GPU health rules as Markdown (docs/health.md).
    Health,
}

/// Flags of one registered collector; `None` where not given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectorFlags {
    pub name: &'static str,
    pub enabled: Option<bool>,
    pub interval: Option<Duration>,
    pub timeout: Option<Duration>,
}

/// Default listen address: all interfaces, port 9403 (dcgm-exporter has 9400 and
/// nvidia_gpu_exporter 9835, so both can run beside us during a migration).
pub const DEFAULT_LISTEN_ADDRESS: &str = ":9403";
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
    /// What fleet dashboards and alerts read, at most 25 series per GPU plus the verdict.
    Lean,
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
            MetricsDetail::Lean => dgx_pixels_metrics::catalog::Detail::Lean,
            MetricsDetail::Default => dgx_pixels_metrics::catalog::Detail::Default,
            MetricsDetail::Full => dgx_pixels_metrics::catalog::Detail::Full,
        }
    }
}

/// From which verdict on a GPU is a problem (exit 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProblemAt {
    /// Only an unhealthy GPU (the `GpuUnhealthy` condition).
    Unhealthy,
    /// A degraded GPU too (a `GpuDegraded` condition).
    Degraded,
}

/// The subcommand's own flags.
#[derive(Debug, Clone, clap::Args)]
pub struct NpdCheckArgs {
    /// Which verdict makes a problem (exit 1): unhealthy, or degraded and worse.
    #[arg(long, value_enum, default_value = "unhealthy")]
    pub problem_at: ProblemAt,
    /// Address of the exporter, HOST:PORT (a name too, such as the chart's node-local Service)
    /// [default: the daemon's web.listen_address, on the loopback address when it listens on
    /// all addresses].
    #[arg(long, value_name = "HOST:PORT")]
    pub address: Option<String>,
    /// User for basic auth, when the web config file asks for it.
    #[arg(long, value_name = "USER")]
    pub username: Option<String>,
    /// File holding that user's password (one line; a trailing newline is ignored).
    #[arg(long, value_name = "PATH", requires = "username")]
    pub password_file: Option<PathBuf>,
    /// Client certificate (PEM, the chain the exporter's client_ca_file verifies), when the web
    /// config requires or verifies client certificates.
    #[arg(long, value_name = "PATH", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "PATH", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// Time allowed for the whole check, within NPD's own plugin timeout.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_timeout)]
    pub timeout: Duration,
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(100) || d > Duration::from_secs(300) {
        return Err(format!("{s:?} is outside 100ms to 5m"));
    }
    Ok(d)
}

pub(crate) fn duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

/// The clap argument of a collector's flag.
fn flag_arg(flag: &Flag) -> Arg {
    let arg = Arg::new(flag.name)
        .long(flag.name)
        .value_name(flag.value_name)
        .help(flag.help_with_default())
        .display_order(flag.order);
    match flag.kind {
        FlagKind::Path => arg.value_parser(clap::value_parser!(PathBuf)),
        FlagKind::Paths => arg
            .value_parser(clap::value_parser!(PathBuf))
            .action(ArgAction::Append),
        FlagKind::Text => arg,
        FlagKind::Duration => arg.value_parser(duration_arg),
        FlagKind::Count => arg.value_parser(clap::value_parser!(u64)),
    }
}

/// The override a collector flag's given value makes, if given.
fn flag_value(flag: &Flag, m: &ArgMatches) -> Option<config::Value> {
    let path = |p: &PathBuf| p.display().to_string();
    match flag.kind {
        FlagKind::Path => m.get_one::<PathBuf>(flag.name).map(|p| path(p).into()),
        FlagKind::Paths => m
            .get_many::<PathBuf>(flag.name)
            .map(|ps| ps.map(path).collect::<Vec<_>>().into()),
        FlagKind::Text => m.get_one::<String>(flag.name).map(|s| s.clone().into()),
        FlagKind::Duration => m
            .get_one::<Duration>(flag.name)
            .map(|d| humantime::format_duration(*d).to_string().into()),
        FlagKind::Count => m.get_one::<u64>(flag.name).map(|n| (*n).into()),
    }
}

/// The full command, with the registry's flags added.
pub fn command() -> Command {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    // Each collector's own flags, among the daemon's (by their display order).
    for flag in COLLECTORS.iter().flat_map(|c| c.flags) {
        cmd = cmd.arg(flag_arg(flag));
    }
    for c in COLLECTORS {
        let on = format!("collector.{}", c.name);
        let off = format!("no-collector.{}", c.name);
        let default = if c.enabled_by_default {
            "enabled"
        } else {
            "disabled"
        };
        cmd = cmd
            .arg(
                Arg::new(on.clone())
                    .long(on.clone())
                    .action(ArgAction::SetTrue)
                    .help(format!("Enable the {} collector: {} [default: {default}]", c.name, c.help))
                    .help_heading("Collectors"),
            )
            .arg(
                Arg::new(off.clone())
                    .long(off)
                    .action(ArgAction::SetTrue)
                    .conflicts_with(on)
                    .help(format!("Disable the {} collector", c.name))
                    .help_heading("Collectors"),
            )
            .arg(
                Arg::new(format!("collector.{}.interval", c.name))
                    .long(format!("collector.{}.interval", c.name))
                    .value_name("DURATION")
                    .value_parser(duration_arg)
                    .help(format!(
                        "How often the {} collector polls [default: {}]",
                        c.name,
                        humantime::format_duration(c.default_interval)
                    ))
                    .help_heading("Collectors"),
            )
            .arg(
                Arg::new(format!("collector.{}.timeout", c.name))
                    .long(format!("collector.{}.timeout", c.name))
                    .value_name("DURATION")
                    .value_parser(duration_arg)
                    .help(format!(
                        "Deadline of one {} poll; past it the source is marked down and its series dropped [default: {}]",
                        c.name,
                        humantime::format_duration(c.default_timeout)
                    ))
                    .help_heading("Collectors"),
            );
    }
    cmd
}

fn collector_flags(m: &ArgMatches) -> Vec<CollectorFlags> {
    COLLECTORS
        .iter()
        .map(|c| {
            let enabled = if m.get_flag(&format!("collector.{}", c.name)) {
                Some(true)
            } else if m.get_flag(&format!("no-collector.{}", c.name)) {
                Some(false)
            } else {
                None
            };
            CollectorFlags {
                name: c.name,
                enabled,
                interval: m
                    .get_one::<Duration>(&format!("collector.{}.interval", c.name))
                    .copied(),
                timeout: m
                    .get_one::<Duration>(&format!("collector.{}.timeout", c.name))
                    .copied(),
            }
        })
        .collect()
}

/// Parses the process arguments (exits with a usage error on bad flags, as clap does).
pub fn parse() -> Cli {
    parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit())
}

/// Parses the given arguments.
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = command().try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    cli.collectors = collector_flags(&matches);
    cli.collector_options = COLLECTORS
        .iter()
        .flat_map(|c| c.flags)
        .filter_map(|f| Some((f.key, flag_value(f, &matches)?)))
        .collect();
    Ok(cli)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_well_formed() {
        command().debug_assert();
    }

    /// Regression (hardening round 2): `--help` said 1s for the kubernetes interval (really 5s)
    /// and 2s for the probes timeout (really 30s). It prints what the daemon then uses.
    #[test]
    fn help_prints_the_defaults_the_daemon_uses() {
        let help = command().render_long_help().to_string();
        let settings = crate::config::resolve(&parse_from(["x"]).unwrap(), []).unwrap();
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for c in COLLECTORS {
            let (interval, timeout) = settings.collector_timing(c.name);
            for (flag, d) in [("interval", interval), ("timeout", timeout)] {
                let at = flat
                    .find(&format!("--collector.{}.{flag} <DURATION>", c.name))
                    .unwrap_or_else(|| panic!("no --collector.{}.{flag}", c.name));
                let text = &flat[at..];
                let default = text[..text.find(']').unwrap() + 1]
                    .rsplit("[default: ")
                    .next()
                    .unwrap()
                    .trim_end_matches(']');
                assert_eq!(
                    default,
                    humantime::format_duration(d).to_string(),
                    "--collector.{}.{flag}",
                    c.name
                );
            }
        }
        assert!(flat.contains("--collector.kubernetes.interval <DURATION> How often the kubernetes collector polls [default: 5s]"), "{flat}");
        assert!(flat.contains("[default: 30s]"));
    }

    #[test]
    fn collector_flags_come_from_the_registry() {
        let cli = parse_from([
            "x",
            "--no-collector.nvml",
            "--collector.nvml.interval",
            "500ms",
        ])
        .unwrap();
        assert_eq!(
            cli.collectors[0],
            CollectorFlags {
                name: "nvml",
                enabled: Some(false),
                interval: Some(Duration::from_millis(500)),
                timeout: None,
            }
        );
        let cli = parse_from(["x"]).unwrap();
        assert_eq!(cli.collectors[0].enabled, None);
    }

    #[test]
    fn enabling_and_disabling_the_same_collector_is_an_error() {
        assert!(parse_from(["x", "--collector.nvml", "--no-collector.nvml"]).is_err());
        assert!(parse_from(["x", "--collector.nope"]).is_err());
        assert!(parse_from(["x", "--collector.nvml.interval", "soon"]).is_err());
    }

    #[test]
    fn prometheus_style_flags_parse() {
        let cli = parse_from([
            "x",
            "--web.listen-address",
            ":9999",
            "--web.telemetry-path",
            "/m",
            "--log.format",
            "json",
            "--simulate",
            "dgx-h100",
        ])
        .unwrap();
        assert_eq!(cli.listen_address.as_deref(), Some(":9999"));
        assert_eq!(cli.telemetry_path.as_deref(), Some("/m"));
        assert_eq!(cli.log_format, Some(LogFormat::Json));
        assert_eq!(cli.simulate.as_deref(), Some("dgx-h100"));
    }
}
