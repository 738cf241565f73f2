//! The collectors' own tables through the daemon's configuration: each its crate's type,
//! read strictly from the file, layered with the environment and flags, and checked.

use super::*;

#[test]
fn kubernetes_and_hpc_tables_parse_validate_and_yield_to_flags() {
    let f = file(
        "[kubernetes]\npod_resources_socket = \"/run/k.sock\"\nmax_response_bytes = 33554432\nresource_names = [\"nvidia.com/gpu\", \"example.com/gpu-*\"]\n[hpc]\njob_mapping_dir = \"/run/jobs\"\n[collector.kubernetes]\nenabled = true\n",
    );
    let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
    let s = resolve(&cli, []).unwrap();
    assert_eq!(
        s.kubernetes().pod_resources_socket,
        Path::new("/run/k.sock")
    );
    assert_eq!(s.kubernetes().max_response_bytes, 32 << 20);
    assert_eq!(s.kubernetes().resource_names[1], "example.com/gpu-*");
    assert_eq!(
        s.hpc().job_mapping_dir.as_deref(),
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
    assert_eq!(s.kubernetes().pod_resources_socket, Path::new("/flag.sock"));
    assert_eq!(s.kubernetes().max_response_bytes, 1024);
    assert_eq!(s.hpc().job_mapping_dir.as_deref(), Some(Path::new("/flag")));
    // Defaults: off, the kubelet's standard socket, 16 MiB.
    let s = resolve(&parse_from(["x"]).unwrap(), []).unwrap();
    assert!(!s.collector_enabled("kubernetes"));
    assert_eq!(
        s.kubernetes().pod_resources_socket,
        Path::new("/var/lib/kubelet/pod-resources/kubelet.sock")
    );
    assert_eq!(s.kubernetes().max_response_bytes, 16 << 20);
    assert_eq!(s.kubernetes().dra_drivers, ["gpu.nvidia.com"]);
    // The device checkpoint: the kubelet's path by default, a flag moves it, empty turns it off.
    assert_eq!(
        s.kubernetes().checkpoint().as_deref(),
        Some(Path::new(
            "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
        ))
    );
    for (arg, want) in [
        (
            "--kubernetes.device-checkpoint=/k/cp",
            Some(Path::new("/k/cp")),
        ),
        ("--kubernetes.device-checkpoint=", None),
    ] {
        let s = resolve(&parse_from(["x", arg]).unwrap(), []).unwrap();
        assert_eq!(s.kubernetes().checkpoint().as_deref(), want, "{arg}");
    }
    for (text, want) in [
        (
            "[kubernetes]\ndra_drivers = [\"gpu.nvidia.com\", \" \"]\n",
            "kubernetes.dra_drivers: a driver name must not be empty",
        ),
        (
            "[nvml]\nprocess_activity = \"some\"\n",
            "line 2 key nvml.process_activity: unknown variant `some`",
        ),
        (
            "[nvml]\nprocess_activity_top_k = 0\n",
            "nvml.process_activity_top_k: 0 is outside 1 to 16",
        ),
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
    assert_eq!(
        s.textfile().directory.as_deref(),
        Some(Path::new("/tmp/tf"))
    );
    let cost = s.cost.unwrap();
    assert_eq!(cost.currency, "EUR");
    assert!((cost.price_per_joule() - 1.0e-7).abs() < 1e-18);
    // humantime's year is 365.25 days = 31_557_600 s.
    assert!((cost.gpu_amortization_per_second() - 0.001).abs() < 1e-12);
    let cli = parse_from(["x", "--textfile.directory", "/flag"]).unwrap();
    let s = resolve(&cli, env(&[("DGX_PIXELS_TEXTFILE__DIRECTORY", "/env")])).unwrap();
    assert_eq!(s.textfile().directory.as_deref(), Some(Path::new("/flag")));
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
fn the_health_table_sets_the_quiet_period() {
    let s = resolve(&parse_from(["x"]).unwrap(), []).unwrap();
    assert_eq!(s.health().clear_after(), Duration::from_secs(300));
    let f = file("[health]\nclear_after = \"90s\"\n");
    let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
    assert_eq!(
        resolve(&cli, []).unwrap().health().clear_after(),
        Duration::from_secs(90)
    );
}

#[test]
fn the_nvml_table_is_the_nvml_crates_own_options() {
    let f = file("[nvml]\nlibrary = \"/opt/libnvidia-ml.so.1\"\nslow_interval = \"2s\"\nprocesses_per_gpu = 3\nxid_quiet_period = \"10m\"\n");
    let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
    let s = resolve(&cli, env(&[("DGX_PIXELS_NVML__PROCESSES_PER_GPU", "4")])).unwrap();
    assert_eq!(
        s.nvml().library,
        Some(PathBuf::from("/opt/libnvidia-ml.so.1"))
    );
    assert_eq!(s.nvml().slow_interval, Duration::from_secs(2));
    assert_eq!(s.nvml().xid_quiet_period, Duration::from_secs(600));
    assert_eq!(s.nvml().max_processes_per_gpu, 4, "env beats file");
    let d = dgx_pixels_nvml::NvmlOptions::default();
    assert_eq!(
        (s.nvml().gpu_deadline, &s.nvml().procfs),
        (d.gpu_deadline, &d.procfs)
    );
    let s = resolve(&parse_from(["x"]).unwrap(), []).unwrap();
    assert_eq!(s.nvml(), &d, "defaults are the crate's");
    for (text, want) in [
        ("[nvml]\nprocfs = \"/p\"\n", "line 2 key nvml.procfs"),
        (
            "[nvml]\ngpu_deadline = \"1s\"\n",
            "line 2 key nvml.gpu_deadline",
        ),
        ("[nvml]\nmax_processes_per_gpu = 1\n", "unknown field"),
        ("[nvml]\nslow_interval = \"soon\"\n", "invalid duration"),
        ("[nvml]\nxid_quiet_period = \"soon\"\n", "xid_quiet_period"),
        (
            "[nvml]\nslow_interval = \"1ms\"\n",
            "nvml.slow_interval: 1ms is below the minimum",
        ),
        (
            "[health]\nclear_after = \"1s\"\n",
            "health.clear_after: 1s is below the minimum of 10s",
        ),
        ("[health]\nclear_after = \"later\"\n", "clear_after"),
        ("[health]\nquiet = \"1m\"\n", "line 2 key health.quiet"),
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
    assert_eq!(s.dcgm().hostengine.as_deref(), Some("10.0.0.1:5555"));
    assert_eq!(s.dcgm().library, Some(PathBuf::from("/opt/libdcgm.so.4")));
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
    assert_eq!(
        s.dcgm().hostengine.as_deref(),
        Some("/run/nvidia-dcgm.sock")
    );
    assert_eq!(s.dcgm().library, Some(PathBuf::from("/x/libdcgm.so.3")));
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

/// `[kmsg]`: defaults, the file, and flags over the environment over the file; the collector
/// is off unless asked for, on hardware and on a simulated node.
#[test]
fn kmsg_settings_layer_and_the_collector_is_opt_in() {
    let s = resolve(&parse_from(["x"]).unwrap(), []).unwrap();
    assert_eq!(s.kmsg().path, Path::new("/dev/kmsg"));
    assert_eq!(
        s.kmsg().state_directory.as_deref(),
        Some(Path::new("/var/lib/dgx-pixels-exporter"))
    );
    assert!(!s.collector_enabled("kmsg") && !s.simulated_collector_enabled("kmsg"));
    let f = file("[kmsg]\npath = \"/file/kmsg\"\nstate_directory = \"/file/state\"\n[collector.kmsg]\nenabled = true\n");
    let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
    let s = resolve(&cli, env(&[("DGX_PIXELS_KMSG__PATH", "/env/kmsg")])).unwrap();
    assert_eq!(s.kmsg().path, Path::new("/env/kmsg"));
    assert_eq!(
        s.kmsg().state_directory.as_deref(),
        Some(Path::new("/file/state"))
    );
    assert!(s.collector_enabled("kmsg"));
    let cli = parse_from([
        "x",
        "--config.file",
        f.path().to_str().unwrap(),
        "--kmsg.path",
        "/flag/kmsg",
        "--kmsg.state-directory",
        "/flag/state",
    ])
    .unwrap();
    let s = resolve(&cli, env(&[("DGX_PIXELS_KMSG__PATH", "/env/kmsg")])).unwrap();
    assert_eq!(s.kmsg().path, Path::new("/flag/kmsg"));
    assert_eq!(
        s.kmsg().state_directory.as_deref(),
        Some(Path::new("/flag/state"))
    );
}

#[test]
fn the_trace_table_parses_strictly_validates_and_yields_to_flags() {
    let f = file(
        "[trace]\ndirectory = [\"/a\", \"/b/iteration_*\"]\nmax_file_bytes = 1024\nmax_analysis_time = \"2m\"\ngroup_timeout = \"30s\"\n",
    );
    let path = f.path().to_str().unwrap();
    let s = resolve(&parse_from(["x", "--config.file", path]).unwrap(), []).unwrap();
    assert_eq!(
        s.trace().directory,
        [PathBuf::from("/a"), PathBuf::from("/b/iteration_*")]
    );
    assert_eq!(s.trace().max_file_bytes, 1024);
    assert_eq!(s.trace().max_analysis_time, Duration::from_secs(120));
    assert_eq!(s.trace().group_timeout, Duration::from_secs(30));
    // One path is a list of one; the environment gives one path.
    let s = resolve(
        &parse_from(["x", "--config.file", path]).unwrap(),
        env(&[("DGX_PIXELS_TRACE__DIRECTORY", "/env")]),
    )
    .unwrap();
    assert_eq!(s.trace().directory, [PathBuf::from("/env")]);
    // Repeated flags win over both.
    let cli = parse_from([
        "x",
        "--config.file",
        path,
        "--trace.directory",
        "/f1",
        "--trace.directory",
        "/f2/*",
    ])
    .unwrap();
    let s = resolve(&cli, env(&[("DGX_PIXELS_TRACE__DIRECTORY", "/env")])).unwrap();
    assert_eq!(
        s.trace().directory,
        [PathBuf::from("/f1"), PathBuf::from("/f2/*")]
    );
    assert_eq!(s.trace().max_file_bytes, 1024, "the file's other keys stay");

    for (text, place, what) in [
        (
            "[trace]\ndirectories = \"/a\"\n",
            "line 2 key trace.directories",
            "unknown field",
        ),
        (
            "[trace]\nmax_analysis_time = \"soon\"\n",
            "line 2 key trace.max_analysis_time",
            "invalid duration",
        ),
        (
            "[trace]\nmax_file_bytes = 0\n",
            "",
            "trace.max_file_bytes: must be > 0",
        ),
        (
            "[trace]\nmax_depth = 99\n",
            "",
            "trace.max_depth: 99 is over 8",
        ),
        (
            "[simulation]\ntrace_period = \"100ms\"\n",
            "",
            "simulation.trace_period: 100ms is below the minimum of 1s",
        ),
    ] {
        let f = file(text);
        let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(e.contains(&f.path().display().to_string()), "{e}");
        assert!(e.contains(place) && e.contains(what), "{text:?}: {e}");
    }
    let cli = parse_from(["x", "--simulate.trace-directory", "/sim"]).unwrap();
    let s = resolve(&cli, []).unwrap().simulation;
    assert_eq!(s.trace_directory.as_deref(), Some(Path::new("/sim")));
}

/// Issue 28, item 8: "580000000000years" was accepted, then panicked a thread (an `Instant`
/// overflow). Every duration setting has an upper bound, and the error names the key.
#[test]
fn every_duration_setting_has_an_upper_bound() {
    let huge = "580000000000years";
    let cases = [
        (format!("[trace]\nmax_analysis_time = \"{huge}\"\n"), "trace.max_analysis_time"),
        ("[trace]\nmax_analysis_time = \"2days\"\n".into(), "trace.max_analysis_time"),
        (format!("[trace]\ngroup_timeout = \"{huge}\"\n"), "trace.group_timeout"),
        (format!("[simulation]\ntrace_period = \"{huge}\"\n"), "trace_period"),
        ("[simulation]\ntrace_period = \"25h\"\n".into(), "simulation.trace_period"),
        ("[simulation]\ninterval = \"2days\"\n".into(), "simulation.interval"),
        ("[collector.nvml]\ninterval = \"25h\"\n".into(), "collector.nvml.interval"),
        ("[collector.nvml]\ntimeout = \"3days\"\n".into(), "collector.nvml.timeout"),
        (format!("[collector.nvml]\ninterval = \"{huge}\"\n"), "interval"),
        ("[nvml]\nslow_interval = \"2days\"\n".into(), "nvml.slow_interval"),
        ("[nvml]\nxid_quiet_period = \"2days\"\n".into(), "nvml.xid_quiet_period"),
        ("[health]\nclear_after = \"1year\"\n".into(), "health.clear_after"),
        ("[health]\nidle_after = \"1year\"\n".into(), "health.idle_after"),
        (
            "[cost]\nelectricity_price_per_kwh = 0.1\ngpu_purchase_price = 1\ngpu_lifetime = \"200years\"\n".into(),
            "gpu_lifetime",
        ),
    ];
    for (text, key) in cases {
        let f = file(&text);
        let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
        let e = resolve(&cli, []).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains("maximum"), "{text:?}: {e}");
    }
    // At the bound, accepted.
    let f = file("[simulation]\ntrace_period = \"24h\"\n[trace]\nmax_analysis_time = \"1day\"\n");
    let cli = parse_from(["x", "--config.file", f.path().to_str().unwrap()]).unwrap();
    assert!(resolve(&cli, []).is_ok());
    assert!(parse_duration("100years").is_ok() && parse_duration("101years").is_err());
}
