//! What a refactoring must not change, pinned byte for byte against files written before it
//! (issue 30): the `--help` of the daemon and of every subcommand, the series (names and label
//! names) a fresh `--simulate dgx-h100` serves in its steady state, and the message and exit
//! status of each bad configuration. A deliberate change rewrites the files with
//! `PIN_UPDATE=1 cargo test -p dgx-pixels-exporter --test exporter pinned::` and shows in the diff.
#![allow(clippy::unwrap_used)] // a panic is the report

use crate::common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{start, text, BIN};

fn pinned(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/pinned")
        .join(name)
}

/// Compares `actual` with the pinned file, or rewrites it under `PIN_UPDATE=1`.
fn check(name: &str, actual: &str) {
    let path = pinned(name);
    if std::env::var_os("PIN_UPDATE").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap();
    if want != actual {
        let first = want
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from the pinned file at line {}:\n  pinned: {:?}\n  now:    {:?}",
            first + 1,
            want.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}

#[test]
fn help_of_the_daemon_and_every_subcommand() {
    let commands: &[&[&str]] = &[
        &[],
        &["docs"],
        &["docs", "metrics"],
        &["probe"],
        &["probe", "run"],
        &["probe", "compare"],
        &["trace"],
        &["trace", "analyze"],
        &["trace", "compare"],
    ];
    let mut all = String::new();
    for args in commands {
        let out = Command::new(BIN)
            .args(*args)
            .arg("--help")
            .env("COLUMNS", "100")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?} --help failed");
        all.push_str(&format!(
            "=== dgx-pixels-exporter {} --help\n",
            args.join(" ")
        ));
        all.push_str(&String::from_utf8(out.stdout).unwrap());
    }
    check("help.txt", &all);
}

/// The series of one exposition as `name{label names}` lines, sorted, without values.
fn shape(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let end = l.find([' ', '{']).unwrap_or(l.len());
            let name = &l[..end];
            if !l[end..].starts_with('{') {
                return name.to_string();
            }
            let body = &l[end + 1..l.rfind('}').unwrap()];
            let mut labels = Vec::new();
            let mut rest = body;
            // Label values are quoted and may hold commas: walk name="value" pairs.
            while let Some(eq) = rest.find("=\"") {
                labels.push(rest[..eq].trim_start_matches(',').to_string());
                let value = &rest[eq + 2..];
                let mut close = 0;
                let bytes = value.as_bytes();
                while close < bytes.len()
                    && !(bytes[close] == b'"' && (close == 0 || bytes[close - 1] != b'\\'))
                {
                    close += 1;
                }
                rest = &value[(close + 1).min(value.len())..];
            }
            format!("{name}{{{}}}", labels.join(","))
        })
        .collect()
}

#[test]
fn the_simulated_dgx_h100_serves_the_same_series() {
    let want = std::fs::read_to_string(pinned("simulate-dgx-h100-series.txt")).unwrap_or_default();
    let d = start(&["--simulate", "dgx-h100"]);
    // Probe results (after the 10 s settle window, every kind in the first pass), the
    // job-level trace series (after the first drop's analysis) and the job's processes (from
    // 30 s) come last; the set is steady from about 35 s on.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last;
    loop {
        let now = text(d.port);
        let metadata: BTreeSet<&str> = now.lines().filter(|l| l.starts_with("# ")).collect();
        last = shape(&now).into_iter().collect::<Vec<_>>().join("\n")
            + "\n=== metadata\n"
            + &metadata.into_iter().collect::<Vec<_>>().join("\n")
            + "\n";
        // The first pass reaches every probe kind in the node's idle first 30 s (issue 44),
        // the pair probe and the node probes included; the job's processes come after it.
        let steady = last.contains("dgx_pixels_trace_job_complete{trace_job}")
            && last.contains("dgx_pixels_probe_gemm_flops{")
            && last.contains("dgx_pixels_probe_bandwidth_bytes_per_second{")
            && last.contains("dgx_pixels_probe_launch_latency_seconds{")
            && last.contains("dgx_pixels_probe_p2p_worst_bandwidth_bytes_per_second{")
            && last.contains("dgx_pixels_probe_storage_read_bytes_per_second{")
            && last.contains("dgx_pixels_probe_nccl_largest_bus_bandwidth_bytes_per_second")
            && last.contains("dgx_pixels_process_memory_used_bytes{");
        if (steady && std::env::var_os("PIN_UPDATE").is_some()) || last == want {
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    check("simulate-dgx-h100-series.txt", &last);
}

/// How a bad configuration is given.
enum Input<'a> {
    File(&'a str),
    Env(&'a str, &'a str),
    Args(&'a [&'a str]),
}

const BAD: &[Input] = &[
    Input::File("[web]\nlisten_address = 9403\n"),
    Input::File("[web]\nlisten_adress = \":1\"\n"),
    Input::File("[log]\nlevel = \"info\"\nformat = \"xml\"\n"),
    Input::File("[collector.nvml]\ninterval = \"soon\"\n"),
    Input::File("[web\n"),
    Input::File("[collector.gpu]\nenabled = true\n"),
    Input::Args(&["--web.telemetry-path", "metrics"]),
    Input::Args(&["--web.telemetry-path", "/metrics/{gpu}"]),
    Input::Env("DGX_PIXELS_WEB__MAX_CONNECTIONS", "9223372036854775807"),
    Input::Args(&["--web.max-requests", "2000000"]),
    Input::Args(&["--web.listen-address", "nonsense"]),
    Input::Env("DGX_PIXELS_WEB__NOPE", "1"),
    Input::Env("DGX_PIXELS_EXPORTER_PORTS", "1"),
    Input::File("[probes]\nduty_cycle = 2.0\n"),
    Input::File("[probes]\nprobes = \"gemm_int4\"\n"),
    Input::File("[probes]\nsettle = \"2h\"\n"),
    Input::File("[probes]\nworker_timeout = \"500ms\"\n"),
    Input::File("[probes]\nworker_timeout = \"30s\"\n"),
    Input::File("[probes]\nworker_timeout = \"4s\"\n[collector.probes]\ntimeout = \"3s\"\n"),
    Input::File("[probes]\nnccl_allreduce = true\nnccl_timeout = \"30s\"\n"),
    Input::File("[probes]\nnccl_timeout = \"0s\"\n"),
    Input::File("[probes]\nsettle = \"soon\"\n"),
    Input::File("[kubernetes]\nmax_response_bytes = 0\n"),
    Input::File("[kubernetes]\nresource_names = []\n"),
    Input::File("[kubernetes]\n\nsocket = \"/x\"\n"),
    Input::File("[kubernetes]\npod_labels = [\"team\", \"-bad\"]\n"),
    Input::File("[kubernetes]\npod_labels = [\"a.b\", \"a_b\"]\n"),
    Input::File("[kubernetes]\npod_labels = \"team\"\napi_server = \"http://10.0.0.1:8080\"\n"),
    Input::File("[kubernetes]\nnode_name = \"Node_1\"\n"),
    Input::File("[hpc]\njob_dir = \"/x\"\n"),
    Input::File("[cost]\nelectricity_price_per_kwh = 0.1\n"),
    Input::File("[cost]\nelectricity_price_per_kwh = 0.1\ngpu_cost_per_hour = 1\npue = 0.8\n"),
    Input::File("[cost]\nelectricity_price_per_kwh = -1\ngpu_cost_per_hour = 1\n"),
    Input::File("[cost]\nelectricity_price_per_kwh = 0.1\nprice = 1\n"),
    Input::File("[cost]\ngpu_cost_per_hour = 1\n"),
    Input::File("[textfile]\nmax_files = 0\n"),
    Input::File("[textfile]\nmax_total_bytes = 0\n"),
    Input::File("[nvml]\nprocfs = \"/p\"\n"),
    Input::File("[nvml]\nslow_interval = \"soon\"\n"),
    Input::File("[nvml]\nslow_interval = \"1ms\"\n"),
    Input::File("[nvml]\npower_sample_interval = \"1ms\"\n"),
    Input::File("[health]\nclear_after = \"1s\"\n"),
    Input::File("[health]\nclear_after = \"later\"\n"),
    Input::File("[health]\nquiet = \"1m\"\n"),
    Input::Args(&["--config.file", "/nonexistent/dgx.toml"]),
    Input::File("[dcgm]\nhostengine = 5555\n"),
    Input::File("[dcgm]\nhostengine = \"host:99999\"\n"),
    Input::File("[dcgm]\nfield_list = \"/nonexistent.csv\"\n"),
    Input::Args(&["--dcgm.hostengine", ":5555"]),
    Input::File("[kmsg]\npath = 1\n"),
    Input::File("[trace]\ndirectories = \"/a\"\n"),
    Input::File("[trace]\nmax_analysis_time = \"soon\"\n"),
    Input::File("[trace]\nmax_file_bytes = 0\n"),
    Input::File("[trace]\nmax_depth = 99\n"),
    Input::File("[simulation]\ntrace_period = \"100ms\"\n"),
    Input::File("[trace]\ngroup_timeout = \"580000000000years\"\n"),
    Input::File("[simulation]\ninterval = \"2days\"\n"),
    Input::File("[collector.nvml]\ntimeout = \"3days\"\n"),
    Input::File("[nvml]\nxid_quiet_period = \"2days\"\n"),
    Input::File("[health]\nidle_after = \"1year\"\n"),
    Input::File("[health.xid_policy]\n\"13\" = \"ignore\"\n\"999\" = \"ignore\"\n"),
    Input::File("[health]\nxid_policy = { \"31-32\" = { count = 0, window = \"10m\" } }\n"),
    Input::File("[cost]\nelectricity_price_per_kwh = 0.1\ngpu_purchase_price = 1\ngpu_lifetime = \"200years\"\n"),
    Input::Args(&["--collector.nvml.interval", "1ms"]),
    Input::Args(&["--collector.trace.timeout", "soon"]),
    Input::Args(&["--nvml.power-window", "soon"]),
    Input::Args(&["--simulate", "no-such-scenario"]),
    Input::Args(&["--kubernetes.max-response-bytes", "x"]),
    // The OTLP push refuses what it cannot do rather than push in the clear or guess.
    Input::Args(&["--otlp.endpoint", "https://collector!:4318/v1/metrics"]),
    Input::Args(&["--otlp.endpoint", "collector:4318"]),
];

/// Runs `cmd` to its end, killing it after `limit` (a case that starts serving is a failure).
fn output_within(mut cmd: Command, limit: Duration) -> std::process::Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn each_bad_configuration_gets_the_same_message() {
    let mut all = String::new();
    for input in BAD {
        let mut cmd = Command::new(BIN);
        cmd.env_remove("RUST_LOG");
        // Every case fails before binding; a port of its own keeps one that does not from
        // taking the default port.
        if !matches!(input, Input::Args(a) if a.contains(&"--web.listen-address")) {
            cmd.args(["--web.listen-address", "127.0.0.1:0"]);
        }
        let mut file = None;
        let shown = match input {
            Input::File(text) => {
                let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
                f.write_all(text.as_bytes()).unwrap();
                cmd.arg("--config.file").arg(f.path());
                file = Some(f);
                format!("file {text:?}")
            }
            Input::Env(k, v) => {
                cmd.env(k, v);
                format!("env {k}={v}")
            }
            Input::Args(args) => {
                cmd.args(*args);
                format!("args {args:?}")
            }
        };
        let out = output_within(cmd, Duration::from_secs(20));
        let mut stderr = String::from_utf8(out.stderr).unwrap();
        if let Some(f) = &file {
            stderr = stderr.replace(&f.path().display().to_string(), "FILE");
        }
        all.push_str(&format!(
            "=== {shown}\nexit {:?}\n{stderr}",
            out.status.code()
        ));
    }
    check("config-errors.txt", &all);
}
