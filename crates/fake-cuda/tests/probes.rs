//! Runs the exporter's real probe code (`probe run`, and `dgx_pixels_probes::cuda` directly)
//! against the built `libfake_cuda.so`, loaded by cudarc through `LD_LIBRARY_PATH` as it loads
//! the real libraries, and checks its results against the simulator, its published contexts
//! against the fake NVML, and every fault knob.
//!
//! The fake keeps per-process state configured from the environment, so everything that loads
//! it runs in a child process: the exporter binary, or this test binary again (filtered to one
//! test) for the bodies that call the probe library or NVML directly.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dgx_pixels_probes::{ProbeKind, ProbeSizes, RunResults};
// The benchmark a probe runs: the simulated node's own mapping, so the fake and the simulated
// probes answer from one model.
use dgx_pixels_sim::{bench, GpuState, Node, Scenario};
use dgx_pixels_sim_source::probes::benchmark;

/// Set in the child processes: run the test body instead of spawning.
const CHILD: &str = "FAKE_CUDA_TEST_CHILD";
/// Scenario time every run is frozen at (GPU 0 trains, so its rates are below the idle ones).
const TIME: &str = "60";

/// `<target>/<profile>`, where the exporter and the libraries are built.
fn profile_dir() -> PathBuf {
    fake_support::library::profile_dir().unwrap()
}

/// Builds the exporter and both fake libraries once per test process (`cargo test` builds no
/// cdylib, and the exporter binary belongs to another package); returns a directory of
/// symlinks that makes cudarc load the fake.
fn setup() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "dgx-pixels-exporter"])
            .status()
            .unwrap();
        assert!(status.success(), "building the exporter failed");
        // Every fake, the NVML one included (fake-support builds them together).
        let so = fake_support::Fake::Cuda.build().unwrap();
        let dir = std::env::temp_dir().join(format!("fake-cuda-links-{}", std::process::id()));
        fake_support::library::install(&dir, &so, fake_cuda::LINK_NAMES).unwrap();
        for name in fake_cuda::LINK_NAMES {
            assert_eq!(std::fs::canonicalize(dir.join(name)).unwrap(), so);
        }
        dir
    })
}

/// The caller's variables no run of the fake inherits.
const CLEARED: &[&str] = &["FAKE_CUDA_", "FAKE_NVML_"];

/// Puts the fake on `cmd`'s loader path, its clock frozen at [`TIME`], and `env`.
fn fake_env(cmd: &mut Command, env: &[(&str, &str)]) {
    cmd.env("LD_LIBRARY_PATH", setup())
        .env("FAKE_CUDA_TIME", TIME)
        .envs(env.iter().copied());
}

/// A command with the fake on the loader's path and no `FAKE_*` variable of the caller.
fn command(program: &Path, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(program);
    for (k, _) in std::env::vars() {
        if CLEARED.iter().any(|p| k.starts_with(p)) {
            cmd.env_remove(k);
        }
    }
    fake_env(&mut cmd, env);
    cmd
}

/// `dgx-pixels-exporter probe run ARGS`.
fn probe_run(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = command(&profile_dir().join("dgx-pixels-exporter"), env);
    cmd.args(["probe", "run"]).args(args);
    cmd
}

/// Runs `body` in a child process (this test binary, `test` only) with `env`; returns what
/// it printed to stdout.
fn in_child(test: &str, env: &[(&str, &str)], body: impl FnOnce()) -> String {
    if fake_support::child::is_child(CHILD) {
        body();
        return String::new();
    }
    fake_support::child::run_alone(CHILD, test, CLEARED, |c| fake_env(c, env))
}

/// The value a child printed as `KEY=VALUE` (the harness may print `test NAME ... ` before
/// the first line).
fn printed<'a>(stdout: &'a str, key: &str) -> &'a str {
    let pat = format!("{key}=");
    stdout
        .lines()
        .find_map(|l| {
            let i = l.find(&pat)?;
            (i == 0 || l[..i].ends_with(' ')).then(|| &l[i + pat.len()..])
        })
        .unwrap_or_else(|| panic!("{key} not printed:\n{stdout}"))
}

/// The simulator's expected value of `kind` on `gpu` at [`TIME`] (NaN for the pair probe:
/// [`peer_expected`]), and the GPU's UUID and name.
fn expected(gpu: usize, kind: ProbeKind) -> (f64, String, String) {
    let mut node = Node::new(Scenario::load("dgx-h100").unwrap());
    let t = Duration::from_secs(TIME.parse().unwrap());
    let Some(GpuState::Ok(r)) = node.reading(gpu, t) else {
        panic!("GPU {gpu} is healthy")
    };
    let g = node.gpu(gpu).unwrap();
    let v = benchmark(kind).map_or(f64::NAN, |b| bench::expected(g, &r, b).unwrap());
    (v, g.uuid.clone(), g.name.clone())
}

/// The simulator's expected copy bandwidth from `gpu` to `peer` at [`TIME`] in `scenario`.
fn peer_expected(scenario: &str, gpu: usize, peer: usize) -> f64 {
    let mut node = Node::new(Scenario::load(scenario).unwrap());
    node.peer_expected(gpu, peer, Duration::from_secs(TIME.parse().unwrap()))
        .unwrap()
}

fn ctx_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("ctx."))
        .collect();
    v.sort();
    v
}

fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills a child on drop (a failed assertion must not leave it running).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn every_probe_reports_the_simulators_expected_value_and_leaves_no_context() {
    let state = tempfile::tempdir().unwrap();
    let out = state.path().join("results.json");
    let status = probe_run(
        &[
            "--gpus",
            "0,5",
            "--warmup",
            "1",
            "--iterations",
            "3",
            "--output",
            out.to_str().unwrap(),
        ],
        &[("FAKE_CUDA_STATE_DIR", state.path().to_str().unwrap())],
    )
    .stdout(Stdio::null())
    .status()
    .unwrap();
    assert!(status.success(), "{status}");
    let results = RunResults::read(&out).unwrap();
    assert_eq!(results.results.len(), 2 * ProbeKind::ALL.len());
    for r in &results.results {
        let kind: ProbeKind = r.probe.parse().unwrap();
        let (mut want, uuid, name) = expected(r.gpu, kind);
        if kind == ProbeKind::P2pCopy {
            // Between the two selected GPUs, each way.
            let peer = r.peer.unwrap();
            assert_eq!((r.gpu, peer), if r.gpu == 0 { (0, 5) } else { (5, 0) });
            want = peer_expected("dgx-h100", r.gpu, peer);
        } else {
            assert_eq!(r.peer, None);
        }
        // The GPU is the simulated one NVML reports: same UUID (CUDA's bytes formatted as NVML
        // does) and name, at the same index.
        assert_eq!((&r.uuid, &r.model), (&uuid, &name), "{}", r.probe);
        let s = r.summary.as_ref().unwrap();
        if kind == ProbeKind::LaunchLatency {
            // Timed on the host: the fake waits the modeled latency, plus whatever a loaded
            // machine adds (never less).
            assert!(
                s.min >= 0.97 * want && s.median < want + 1e-3,
                "{} on GPU {}: {s:?}, expected {want}",
                r.probe,
                r.gpu
            );
        } else {
            // Timed by events on the modeled timeline: within the 1% noise of the model.
            assert!(
                (s.mean / want - 1.0).abs() < 0.01,
                "{} on GPU {}: {} vs expected {want}",
                r.probe,
                r.gpu,
                s.mean
            );
        }
    }
    // Every probe in the daemon's default set ran on both GPUs.
    for kind in ProbeKind::DAEMON_DEFAULT {
        assert_eq!(
            results
                .results
                .iter()
                .filter(|r| r.probe == kind.name())
                .count(),
            2
        );
    }
    assert_eq!(results.environment.cuda_version, "13.0");
    // The contexts were released before the process exited.
    assert_eq!(ctx_files(state.path()), Vec::<String>::new());
}

/// dgx-h100 with 6 of GPU 3's 18 NVLink links down for good: a degraded link.
fn degraded_scenario(dir: &Path) -> PathBuf {
    let mut text = Scenario::builtin_text("dgx-h100").unwrap().to_string();
    for link in 0..6 {
        text.push_str(&format!(
            "\n[[faults]]\nkind = \"nvlink_down\"\ngpu = 3\nlink = {link}\nat_s = 0\n"
        ));
    }
    let path = dir.join("degraded-nvlink.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn peer_copies_follow_the_nvlink_model_and_a_degraded_link_is_the_worst_peer() {
    let state = tempfile::tempdir().unwrap();
    let scenario = degraded_scenario(state.path());
    let scenario = scenario.to_str().unwrap();
    let out = state.path().join("p2p.csv");
    let status = probe_run(
        &[
            "--probe",
            "p2p_copy",
            "--gpus",
            "0,3,5",
            "--warmup",
            "1",
            "--iterations",
            "3",
            "--output",
            out.to_str().unwrap(),
        ],
        &[
            ("FAKE_CUDA_SCENARIO", scenario),
            ("FAKE_CUDA_STATE_DIR", state.path().to_str().unwrap()),
        ],
    )
    .stdout(Stdio::null())
    .status()
    .unwrap();
    assert!(status.success(), "{status}");
    let results = RunResults::read(&out).unwrap();
    assert_eq!(results.results.len(), 6, "every ordered pair of 3 GPUs");
    let mut worst: BTreeMap<usize, (f64, usize)> = BTreeMap::new();
    for r in &results.results {
        let peer = r.peer.unwrap();
        let want = peer_expected(scenario, r.gpu, peer);
        let mean = r.summary.as_ref().unwrap().mean;
        assert!(
            (mean / want - 1.0).abs() < 0.01,
            "{} -> {peer}: {mean} vs expected {want}",
            r.gpu
        );
        let w = worst.entry(r.gpu).or_insert((f64::MAX, usize::MAX));
        if mean < w.0 {
            *w = (mean, peer);
        }
    }
    // GPUs 0 and 5 copy slowest to GPU 3, which has 12 of 18 links: two thirds of the
    // bandwidth of their healthy pair (both at 60 s train, with the same link traffic).
    assert_eq!(worst[&0].1, 3);
    assert_eq!(worst[&5].1, 3);
    let healthy = peer_expected(scenario, 0, 5);
    let degraded = peer_expected(scenario, 0, 3);
    assert!(degraded < 0.8 * healthy, "{degraded} vs {healthy}");
    // Without peer access the copy is staged through the host: the probe enables it.
    assert!(worst[&0].0 > 60e9, "{:?}", worst[&0]);
    assert_eq!(ctx_files(state.path()), Vec::<String>::new());
}

/// Without a context NVML lists only the simulated workload. In a child (run by
/// [`nvml_processes`]) it prints the compute processes NVML (the fake, reading the CUDA state
/// directory) lists on GPUs 0 and 1, as `gpu<i>=pid:bytes,...`.
#[test]
fn nvml_lists_only_the_simulated_processes_without_contexts() {
    if std::env::var_os(CHILD).is_none() {
        let empty = tempfile::tempdir().unwrap();
        let mut node = Node::new(Scenario::load("dgx-h100").unwrap());
        let t = Duration::from_secs(TIME.parse().unwrap());
        for (gpu, listed) in nvml_processes(empty.path()).iter().enumerate() {
            let Some(GpuState::Ok(r)) = node.reading(gpu, t) else {
                panic!("GPU {gpu} is healthy")
            };
            let pids: Vec<u32> = r.readout.processes.iter().map(|p| p.pid).collect();
            assert!(!pids.is_empty(), "the scenario trains on GPU {gpu}");
            assert_eq!(listed.keys().copied().collect::<Vec<_>>(), pids);
        }
        return;
    }
    let lib = profile_dir().join("libfake_nvml.so");
    let nvml = nvml_wrapper::Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .unwrap();
    for gpu in 0..2 {
        let procs = nvml
            .device_by_index(gpu)
            .unwrap()
            .running_compute_processes()
            .unwrap();
        let list: Vec<String> = procs
            .iter()
            .map(|p| {
                let bytes = match p.used_gpu_memory {
                    nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => b,
                    nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => 0,
                };
                format!("{}:{bytes}", p.pid)
            })
            .collect();
        println!("gpu{gpu}={}", list.join(","));
    }
}

/// What NVML lists on GPUs 0 and 1 now: pid → bytes.
fn nvml_processes(state: &Path) -> [BTreeMap<u32, u64>; 2] {
    let out = in_child(
        "nvml_lists_only_the_simulated_processes_without_contexts",
        &[
            ("FAKE_NVML_CUDA_STATE_DIR", state.to_str().unwrap()),
            ("FAKE_NVML_TIME", TIME),
        ],
        || {},
    );
    [0, 1].map(|gpu| {
        printed(&out, &format!("gpu{gpu}"))
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|p| {
                let (pid, bytes) = p.split_once(':').unwrap();
                (pid.parse().unwrap(), bytes.parse().unwrap())
            })
            .collect()
    })
}

#[test]
fn nvml_lists_the_probe_process_and_an_intruder_during_the_run_and_neither_after() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let intruder = Reaped(Command::new("sleep").arg("120").spawn().unwrap());
    let intruder_pid = intruder.0.id();
    // About 2 s of GEMMs on GPU 0 (100 measurements of 20 ms).
    let mut run = Reaped(
        probe_run(
            &[
                "--gpus",
                "0",
                "--probe",
                "gemm_bf16",
                "--warmup",
                "1",
                "--iterations",
                "100",
            ],
            &[
                ("FAKE_CUDA_STATE_DIR", dir),
                ("FAKE_CUDA_INTRUDER_PID", &intruder_pid.to_string()),
            ],
        )
        .stdout(Stdio::null())
        .spawn()
        .unwrap(),
    );
    let pid = run.0.id();
    let mine = format!("ctx.{pid}.0");
    let theirs = format!("ctx.{intruder_pid}.0");
    wait_for("both contexts published", Duration::from_secs(20), || {
        let files = ctx_files(state.path());
        files.contains(&mine) && files.contains(&theirs)
    });
    let [gpu0, gpu1] = nvml_processes(state.path());
    // The probe holds its context and three 8192² bf16 matrices; the intruder 2 GiB.
    let held = gpu0.get(&pid).copied().unwrap_or(0);
    assert!(
        held >= fake_cuda::CONTEXT_BYTES + ProbeSizes::default().device_bytes(ProbeKind::GemmBf16),
        "{gpu0:?}"
    );
    assert_eq!(gpu0.get(&intruder_pid), Some(&fake_cuda::INTRUDER_BYTES));
    assert!(!gpu1.contains_key(&pid) && !gpu1.contains_key(&intruder_pid));
    let status = run.0.wait().unwrap();
    assert!(status.success(), "{status}");
    // Released: both files withdrawn, NVML lists neither (the intruder process still lives).
    assert_eq!(ctx_files(state.path()), Vec::<String>::new());
    let [gpu0, _] = nvml_processes(state.path());
    assert!(!gpu0.contains_key(&pid) && !gpu0.contains_key(&intruder_pid));
}

#[test]
fn nvml_ignores_the_file_of_a_killed_process() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let mut run = Reaped(
        probe_run(
            &[
                "--gpus",
                "0",
                "--probe",
                "gemm_bf16",
                "--iterations",
                "1000",
            ],
            &[("FAKE_CUDA_STATE_DIR", dir)],
        )
        .stdout(Stdio::null())
        .spawn()
        .unwrap(),
    );
    let pid = run.0.id();
    wait_for("context published", Duration::from_secs(20), || {
        ctx_files(state.path()).contains(&format!("ctx.{pid}.0"))
    });
    assert!(nvml_processes(state.path())[0].contains_key(&pid));
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    // The file stays (nothing ran to remove it), but the driver frees a dead process's context.
    assert_eq!(ctx_files(state.path()), [format!("ctx.{pid}.0")]);
    assert!(!nvml_processes(state.path())[0].contains_key(&pid));
}

/// Through the probe library itself: opens GPU 0, runs a small GEMM and a copy, releases the
/// GPU; the fake then counts no context and the state file is gone, unless the driver leaks
/// the context. A GEMM larger than the GPU's memory fails cleanly.
#[test]
fn a_released_context_is_gone_unless_the_driver_leaks_it() {
    if std::env::var_os(CHILD).is_some() {
        released_in_child();
        return;
    }
    for (leak, open, released, file) in [("0", "1", "0", "false"), ("1", "1", "1", "true")] {
        let state = tempfile::tempdir().unwrap();
        let out = in_child(
            "a_released_context_is_gone_unless_the_driver_leaks_it",
            &[
                ("FAKE_CUDA_STATE_DIR", state.path().to_str().unwrap()),
                ("FAKE_CUDA_LEAK_CONTEXT", leak),
            ],
            || {},
        );
        assert_eq!(printed(&out, "open"), open, "leak={leak}");
        assert_eq!(printed(&out, "released"), released, "leak={leak}");
        assert_eq!(printed(&out, "file"), file, "leak={leak}");
        assert!(
            printed(&out, "oom").contains("CUDA_ERROR_OUT_OF_MEMORY"),
            "{out}"
        );
    }
}

/// The child's part of [`a_released_context_is_gone_unless_the_driver_leaks_it`].
fn released_in_child() {
    use dgx_pixels_probes::cuda::Gpu;
    let sizes = ProbeSizes {
        gemm_n_16bit: 1024,
        copy_bytes: 1 << 20,
        ..ProbeSizes::default()
    };
    // SAFETY: the fake's control symbols take no argument and return a number.
    let live = || unsafe {
        let lib = cudarc::driver::sys::culib();
        let f = lib
            .get::<unsafe extern "C" fn() -> u64>(b"fake_cuda_live_contexts")
            .unwrap();
        f()
    };
    let mut gpu = Gpu::open(0).unwrap();
    for kind in [ProbeKind::GemmBf16, ProbeKind::CopyD2D] {
        let v = gpu.run(kind, &sizes, 1, 0, 1, &mut || {}).unwrap();
        assert_eq!(v.len(), 1);
    }
    println!("open={}", live());
    gpu.release().unwrap();
    let file = PathBuf::from(std::env::var("FAKE_CUDA_STATE_DIR").unwrap())
        .join(format!("ctx.{}.0", std::process::id()));
    println!("released={}", live());
    println!("file={}", file.exists());
    // Out of memory: more than the H100's 80 GB.
    let gpu = Gpu::open(0).unwrap();
    let huge = ProbeSizes {
        gemm_n_32bit: 90_000,
        ..ProbeSizes::default()
    };
    let mut gpu = gpu;
    let err = gpu
        .run(ProbeKind::GemmFp32, &huge, 1, 0, 1, &mut || {})
        .unwrap_err();
    println!("oom={err}");
}

#[test]
fn a_hung_kernel_blocks_the_run_until_it_is_killed() {
    let state = tempfile::tempdir().unwrap();
    let mut run = Reaped(
        probe_run(
            &["--gpus", "0", "--probe", "copy_d2d"],
            &[
                ("FAKE_CUDA_HANG", "1"),
                ("FAKE_CUDA_STATE_DIR", state.path().to_str().unwrap()),
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    );
    let pid = run.0.id();
    wait_for("context published", Duration::from_secs(20), || {
        ctx_files(state.path()).contains(&format!("ctx.{pid}.0"))
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(run.0.try_wait().unwrap().is_none(), "the hung run exited");
    run.0.kill().unwrap();
    // SIGKILL: the test's, not a crash of the run.
    assert_eq!(run.0.wait().unwrap().signal(), Some(9));
}

fn output(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

#[test]
fn a_crash_kills_the_process_by_sigabrt() {
    for probe in ["launch_latency", "gemm_bf16"] {
        let out = output(
            probe_run(
                &["--gpus", "0", "--probe", probe],
                &[("FAKE_CUDA_CRASH", "1")],
            )
            .stdout(Stdio::null()),
        );
        // SIGABRT.
        assert_eq!(out.status.signal(), Some(6), "{probe}: {:?}", out.status);
        assert!(String::from_utf8_lossy(&out.stderr).contains("FAKE_CUDA_CRASH"));
    }
}

#[test]
fn no_device_and_a_bad_setting_are_clear_errors() {
    let out = output(&mut probe_run(&[], &[("FAKE_CUDA_NO_DEVICE", "1")]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cuInit") && stderr.contains("no CUDA-capable device is detected"),
        "{stderr}"
    );
    let out = output(&mut probe_run(&[], &[("FAKE_CUDA_TIME", "soon")]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("fake-cuda: FAKE_CUDA_TIME=\"soon\": expected a number of seconds"),
        "{stderr}"
    );
}

#[test]
fn devices_follow_the_scenario_and_mig_gpus_refuse_a_context() {
    let out = output(
        probe_run(
            &[
                "--gpus",
                "0,2",
                "--probe",
                "copy_h2d",
                "--warmup",
                "0",
                "--iterations",
                "1",
            ],
            &[("FAKE_CUDA_SCENARIO", "dgx-a100-mig")],
        )
        .stdout(Stdio::piped()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // GPU 0 is in MIG mode: no context; GPU 2 is a whole A100.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("CUDA_ERROR_DEVICE_UNAVAILABLE"), "{stderr}");
    let node = Node::new(Scenario::load("dgx-a100-mig").unwrap());
    let g = node.gpu(2).unwrap();
    assert!(
        stdout.contains(&format!("copy_h2d on GPU 2 ({}, {})", g.name, g.uuid)),
        "{stdout}"
    );
}
