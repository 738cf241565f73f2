use super::sources::*;
use super::*;
use crate::cli::parse_from;
use dgx_pixels_settings::parse_duration;
use std::io::Write;
use std::path::Path;

/// Each collector's table, typed, as the descriptors read them.
trait Tables {
    fn probes(&self) -> &dgx_pixels_probe_source::settings::ProbesSettings;
    fn kubernetes(&self) -> &dgx_pixels_kubernetes::KubernetesSettings;
    fn hpc(&self) -> &dgx_pixels_kubernetes::HpcSettings;
    fn textfile(&self) -> &dgx_pixels_textfile::TextfileOptions;
    fn health(&self) -> &dgx_pixels_health::HealthSettings;
    fn nvml(&self) -> &dgx_pixels_nvml::NvmlOptions;
    fn dcgm(&self) -> &dgx_pixels_dcgm::DcgmSettings;
    fn kmsg(&self) -> &dgx_pixels_kmsg::KmsgOptions;
    fn trace(&self) -> &dgx_pixels_trace_source::TraceOptions;
}

impl Tables for Settings {
    fn probes(&self) -> &dgx_pixels_probe_source::settings::ProbesSettings {
        self.tables.get_as(&crate::collectors::probes::COLLECTOR)
    }
    fn kubernetes(&self) -> &dgx_pixels_kubernetes::KubernetesSettings {
        self.tables
            .get_as(&dgx_pixels_kubernetes::collector::KUBERNETES)
    }
    fn hpc(&self) -> &dgx_pixels_kubernetes::HpcSettings {
        self.tables.get_as(&dgx_pixels_kubernetes::collector::HPC)
    }
    fn textfile(&self) -> &dgx_pixels_textfile::TextfileOptions {
        self.tables
            .get_as(&dgx_pixels_textfile::collector::COLLECTOR)
    }
    fn health(&self) -> &dgx_pixels_health::HealthSettings {
        self.tables.get_as(&dgx_pixels_health::collector::COLLECTOR)
    }
    fn nvml(&self) -> &dgx_pixels_nvml::NvmlOptions {
        self.tables.get_as(&dgx_pixels_nvml::collector::COLLECTOR)
    }
    fn dcgm(&self) -> &dgx_pixels_dcgm::DcgmSettings {
        self.tables.get_as(&dgx_pixels_dcgm::collector::COLLECTOR)
    }
    fn kmsg(&self) -> &dgx_pixels_kmsg::KmsgOptions {
        self.tables.get_as(&dgx_pixels_kmsg::collector::COLLECTOR)
    }
    fn trace(&self) -> &dgx_pixels_trace_source::TraceOptions {
        self.tables.get_as(&crate::collectors::trace::COLLECTOR)
    }
}

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
    let sched = s.probes().schedule().unwrap();
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
fn probe_worker_and_settle_durations_are_bounded_with_the_key_named() {
    let ok = file("[probes]\nsettle = \"30s\"\nworker_timeout = \"5s\"\n");
    let cli = parse_from(["x", "--config.file", ok.path().to_str().unwrap()]).unwrap();
    let s = resolve(&cli, []).unwrap();
    assert_eq!(
        s.probes().schedule().unwrap().settle,
        Duration::from_secs(30)
    );
    assert_eq!(s.probes().worker_timeout().unwrap(), Duration::from_secs(5));
    let defaults = resolve(&parse_from(["x"]).unwrap(), []).unwrap();
    assert_eq!(
        defaults.probes().worker_timeout().unwrap(),
        Duration::from_secs(20)
    );
    assert_eq!(
        defaults.probes().schedule().unwrap().settle,
        Duration::from_secs(10)
    );
    for (text, key, words) in [
        (
            "[probes]\nsettle = \"2h\"\n",
            "probes.settle",
            "over the limit of 1h",
        ),
        (
            "[probes]\nworker_timeout = \"500ms\"\n",
            "probes.worker_timeout",
            "between 1s and 10m",
        ),
        (
            "[probes]\nworker_timeout = \"11m\"\n",
            "probes.worker_timeout",
            "between 1s and 10m",
        ),
        // The worker must die before the poll waiting for it overruns (default 30 s).
        (
            "[probes]\nworker_timeout = \"30s\"\n",
            "probes.worker_timeout",
            "shorter than collector.probes.timeout (30s)",
        ),
        (
            "[probes]\nworker_timeout = \"4s\"\n[collector.probes]\ntimeout = \"3s\"\n",
            "probes.worker_timeout",
            "shorter than collector.probes.timeout (3s)",
        ),
        (
            "[probes]\nsettle = \"soon\"\n",
            "probes.settle",
            "invalid duration",
        ),
    ] {
        let bad = file(text);
        let cli = parse_from(["x", "--config.file", bad.path().to_str().unwrap()]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains(words), "{text}: {e}");
    }
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
    let bad: toml::Table = toml::from_str("electricity_price_per_kwh = 0.1\nprice = 1\n").unwrap();
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
        (
            dgx_pixels_registry::DEFAULT_INTERVAL,
            dgx_pixels_registry::DEFAULT_TIMEOUT
        )
    );
}

#[test]
fn precedence_is_flags_then_env_then_file_then_defaults() {
    let f = file(
        "node_name = \"from-file\"\n[web]\nlisten_address = \":1111\"\ntelemetry_path = \"/file\"\n[log]\nlevel = \"debug\"\n[collector.nvml]\ninterval = \"5s\"\n",
    );
    let path = f.path().to_str().unwrap();
    let cli = parse_from(["x", "--config.file", path, "--web.listen-address", ":3333"]).unwrap();
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
        e.contains("collector.gpu: unknown collector; known: nvml, textfile, probes, dcgm, kubernetes, hpc, health"),
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

/// The collectors' own tables, each its crate's type.
mod tables;
