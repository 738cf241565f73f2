//! Helpers shared by the integration tests that run the real binary.
#![allow(dead_code, clippy::unwrap_used)] // each test file uses a subset; a panic is the report

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dgx_pixels_kubernetes::fake::pod;
use dgx_pixels_kubernetes::proto::PodResources;

pub const BIN: &str = env!("CARGO_BIN_EXE_dgx-pixels-exporter");

/// The device-plugin resource of a whole GPU (or a time-slicing replica of one).
pub const GPU: &str = "nvidia.com/gpu";

/// Stops the daemon on drop.
pub struct Daemon {
    pub child: Child,
    pub port: u16,
}

impl Daemon {
    /// Sends SIGHUP (a reload of the configuration and web config files).
    pub fn hup(&self) {
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

/// Writes a configuration file that serves the simulated DGX H100 (polled every second) at
/// the series profile `detail`: what the SIGHUP profile-switch tests reload.
pub fn write_detail_config(file: &std::path::Path, detail: &str) {
    let text = format!(
        "[metrics]\ndetail = \"{detail}\"\n[simulation]\nscenario = \"dgx-h100\"\ninterval = \"1s\"\n"
    );
    std::fs::write(file, text).unwrap();
}

impl Drop for Daemon {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// SIGTERM, then SIGKILL after 2 s: a clean shutdown lets a simulated node remove its
/// temporary trace directory (a killed one would leave it in $TMPDIR).
pub fn terminate(child: &mut Child) {
    let pid = child.id().to_string();
    let _ = Command::new("kill")
        .args(["-TERM", &pid])
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn start(args: &[&str]) -> Daemon {
    start_with_env(args, &[])
}

/// Starts the daemon with extra environment variables and waits until it is ready.
pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Daemon {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new(BIN)
        .args(["--web.listen-address", &addr])
        .args(args)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let d = Daemon { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(d.port, "/-/ready", &[]).0 != 200 {
        assert!(Instant::now() < deadline, "not ready in 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    d
}

/// A minimal HTTP/1.1 GET returning status, headers (lower-case names) and body bytes.
pub fn get(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, vec![], vec![]);
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return (0, vec![], vec![]);
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let body = raw.get(split + 4..).unwrap_or_default().to_vec();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body)
}

pub fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

pub fn text(port: u16) -> String {
    let (status, _, body) = get(port, "/metrics", &[]);
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
}

pub fn series<'a>(exposition: &'a str, name: &str) -> Vec<&'a str> {
    exposition
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .collect()
}

/// The value of the one series of `name` whose label set contains every `label="value"` pair
/// in `labels`; `None` when there is no such series.
pub fn value(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<&str> = series(exposition, name)
        .into_iter()
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .collect();
    assert!(
        matching.len() <= 1,
        "{name} {labels:?} matches {matching:?}"
    );
    matching
        .first()
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap())
}

/// Stops the daemon and returns what it logged on stderr.
pub fn stop_and_logs(mut d: Daemon) -> String {
    terminate(&mut d.child);
    let mut logs = String::new();
    if let Some(mut err) = d.child.stderr.take() {
        let _ = err.read_to_string(&mut logs);
    }
    logs
}

/// Scrapes every 50 ms until `check` holds on the exposition or `timeout` passes; returns the
/// last exposition and how long it took.
pub fn wait_until(
    port: u16,
    timeout: Duration,
    check: impl Fn(&str) -> bool,
) -> (String, Duration) {
    let start = Instant::now();
    loop {
        let body = text(port);
        if check(&body) || start.elapsed() > timeout {
            return (body, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The daemon on every built-in scenario side by side (`--simulate NAME` then `args`), each
/// scraped every 400 ms for `window`; `fold(name, acc, exposition)` folds each scrape into
/// that scenario's `T`. Returns each scenario's name and what its scrapes folded into.
pub fn scrape_builtin_scenarios<T: Default + Send>(
    args: &[&str],
    window: Duration,
    fold: impl Fn(&str, &mut T, &str) + Sync,
) -> Vec<(String, T)> {
    std::thread::scope(|s| {
        let runs: Vec<_> = dgx_pixels_sim::BUILTIN_SCENARIOS
            .iter()
            .map(|name| {
                let fold = &fold;
                s.spawn(move || {
                    let mut all = vec!["--simulate", name];
                    all.extend_from_slice(args);
                    let d = start(&all);
                    let mut acc = T::default();
                    let until = Instant::now() + window;
                    while Instant::now() < until {
                        fold(name, &mut acc, &text(d.port));
                        std::thread::sleep(Duration::from_millis(400));
                    }
                    (name.to_string(), acc)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

/// Asserts that each scenario of `most` (as [`scrape_builtin_scenarios`] gives it, keyed by
/// device) served series of as many devices as `want` says (a MIG instance counts as one).
pub fn assert_devices<T>(most: &[(String, BTreeMap<String, T>)], want: &[(&str, usize)]) {
    for (name, devices) in want {
        let served = most.iter().find(|m| m.0 == *name).unwrap().1.len();
        assert_eq!(served, *devices, "{name}: devices serving series");
    }
}

/// The UUID of GPU `i` of the built-in `scenario`, as the simulator and the fakes give it.
pub fn uuid_of(scenario: &str) -> impl Fn(usize) -> String {
    let node = dgx_pixels_sim::Node::new(dgx_pixels_sim::Scenario::builtin(scenario).unwrap());
    move |i| node.gpu(i).unwrap().uuid.clone()
}

/// Pods nb/alice and nb/bob, notebooks each holding one time-slicing replica of the GPU
/// `uuid` (`UUID::0`, `UUID::1`), for a fake kubelet.
pub fn alice_and_bob(uuid: &str) -> [PodResources; 2] {
    [
        pod("nb", "alice", "notebook", GPU, &[&format!("{uuid}::0")]),
        pod("nb", "bob", "notebook", GPU, &[&format!("{uuid}::1")]),
    ]
}

/// Asserts that one `dgx_pixels_gpu_pod_info` series of the GPU `uuid` names each of `pods`.
pub fn assert_pod_info(body: &str, uuid: &str, pods: &[&str]) {
    for p in pods {
        assert_eq!(
            value(
                body,
                "dgx_pixels_gpu_pod_info",
                &[("uuid", uuid), ("pod", p)]
            ),
            Some(1.0),
            "{uuid}: pod {p}"
        );
    }
}

/// The fake libnvidia-ml's settings: `scenario`, without the 20 ms the real PCIe throughput
/// call samples for (it would slow every poll); its clock runs from 0 s.
pub fn fake_nvml(scenario: &str) -> Vec<(&'static str, &str)> {
    vec![
        ("FAKE_NVML_SCENARIO", scenario),
        ("FAKE_NVML_PCIE_DELAY_MS", "0"),
    ]
}

/// As [`fake_nvml`], with the scenario's clock frozen at 60 s (its jobs running, every
/// reading the same from scrape to scrape).
pub fn fake_nvml_at_60s(scenario: &str) -> Vec<(&'static str, &str)> {
    let mut env = fake_nvml(scenario);
    env.push(("FAKE_NVML_TIME", "60"));
    env
}

/// [`fake_nvml_at_60s`] with the pod-label watcher's service account (token and CA) in
/// `account_dir`, as a fake API server's test writes it.
pub fn fake_nvml_at_60s_with_account<'a>(
    scenario: &'a str,
    account_dir: &'a std::path::Path,
) -> Vec<(&'static str, &'a str)> {
    let mut env = fake_nvml_at_60s(scenario);
    env.push((
        "DGX_PIXELS_KUBERNETES__SERVICE_ACCOUNT_DIR",
        account_dir.to_str().unwrap_or_default(),
    ));
    env
}

/// Starts the daemon on the fake libnvidia-ml with its kubernetes collector reading the fake
/// kubelet at `socket`, `args` added; `env` holds the fake's settings ([`fake_nvml`]) and any
/// other variable.
pub fn start_with_kubelet(socket: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
    let mut all = vec![
        "--nvml.library",
        fake_nvml_library(),
        "--collector.kubernetes",
        "--kubernetes.pod-resources-socket",
        socket.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    start_with_env(&all, env)
}

/// The `.so` of `fake`, built once per test process (fake-support; cargo test builds no cdylib).
fn fake_cdylib(fake: fake_support::Fake) -> String {
    fake.build().unwrap().display().to_string()
}

/// The fake libdcgm (crates/fake-dcgm).
pub fn fake_dcgm_library() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| fake_cdylib(fake_support::Fake::Dcgm))
}

/// The fake libnvidia-ml (crates/fake-nvml).
pub fn fake_nvml_library() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| fake_cdylib(fake_support::Fake::Nvml))
}

/// The fake CUDA driver and cuBLAS (crates/fake-cuda) installed under their real names in a
/// directory of their own, for `LD_LIBRARY_PATH`.
pub fn fake_cuda_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let so = fake_support::Fake::Cuda.build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        fake_support::library::install(dir.path(), &so, fake_cuda::LINK_NAMES).unwrap();
        dir
    })
    .path()
}

/// The fake CUDA driver and cuBLAS with the fake NCCL (crates/fake-nccl) as `libnccl.so.2`,
/// in a directory of their own, for `LD_LIBRARY_PATH`.
pub fn fake_cuda_nccl_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let cuda = fake_support::Fake::Cuda.build().unwrap();
        let nccl = fake_support::Fake::Nccl.build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        fake_support::library::install(dir.path(), &cuda, fake_cuda::LINK_NAMES).unwrap();
        fake_support::library::install(dir.path(), &nccl, fake_nccl::LINK_NAMES).unwrap();
        dir
    })
    .path()
}

/// `trace analyze --format json PATHS`: the whole report (fails on a non-zero exit, with its
/// stderr).
pub fn trace_report<P: AsRef<std::ffi::OsStr>>(paths: &[P]) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["trace", "analyze", "--format", "json"])
        .args(paths)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs the hidden `probe-worker` subcommand with `input` on stdin, checking the GPU's other
/// users with the NVML library at `nvml`, without CUDA (the driver library is not found).
pub fn probe_worker(nvml: &str, input: &[u8], env: &[(&str, &str)]) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(["probe-worker", "--nvml-library", nvml])
        // No CUDA or NCCL from the host unless `env` names a directory of fakes.
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}
