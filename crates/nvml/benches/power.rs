//! Cost of fast power sampling (issue 20, part 2; docs/power.md): the NVML source polling the
//! fake libnvidia-ml once a second for 8 GPUs, with power sampling off and at 10 Hz, in the
//! same run. Exporter CPU = process CPU time (all threads) minus the CPU time the fake spent
//! inside NVML calls (its `fake_nvml_busy_ns`), over a fixed window, as a share of one core.
//!
//! Run: `cargo bench -p dgx-pixels-nvml --bench power`. Each measurement runs in a child
//! process (the fake's state and the sampling threads live for their process); the two
//! configurations alternate, ROUNDS times each, so drift in the machine's load hits both.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::Source;
use dgx_pixels_nvml::{NvmlOptions, NvmlSource};

const WINDOW: Duration = Duration::from_secs(20);
const ROUNDS: usize = 3;
const GPUS: u32 = 8;

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// (exporter CPU ns, library calls, samples per GPU) of one run.
type Run = (f64, f64, f64);

type Counter = libloading::Symbol<'static, unsafe extern "C" fn() -> u64>;

/// One measurement: polls every second for WINDOW after a 3 s warm-up; prints
/// `exporter_cpu_ns library_calls samples_per_gpu`.
fn child(lib: &str, interval: Duration) {
    let l = Box::leak(Box::new(unsafe { libloading::Library::new(lib) }.unwrap()));
    let (busy, calls): (Counter, Counter) = unsafe {
        (
            l.get(b"fake_nvml_busy_ns").unwrap(),
            l.get(b"fake_nvml_call_count").unwrap(),
        )
    };
    let mut source = NvmlSource::with_options(NvmlOptions {
        library: Some(PathBuf::from(lib)),
        gpu_deadline: Duration::from_secs(10),
        power_sample_interval: interval,
        ..NvmlOptions::default()
    });
    let mut poll_until = |end: Instant| {
        let mut next = Instant::now();
        let mut last = 0.0;
        while Instant::now() < end {
            let out = source.poll().unwrap().samples;
            last = out
                .iter()
                .filter(|s| s.metric.def().name == "dgx_pixels_gpu_power_sample_watts")
                .filter(|s| s.labels.last().is_some_and(|l| l == "+Inf"))
                .map(|s| s.value)
                .sum::<f64>();
            next += Duration::from_secs(1);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        last
    };
    let s0 = poll_until(Instant::now() + Duration::from_secs(3));
    let (c0, b0, n0) = unsafe { (cpu_time(), busy(), calls()) };
    let samples = poll_until(Instant::now() + WINDOW);
    let (c1, b1, n1) = unsafe { (cpu_time(), busy(), calls()) };
    let exporter = (c1 - c0).saturating_sub(Duration::from_nanos(b1 - b0));
    println!(
        "{} {} {}",
        exporter.as_nanos(),
        n1 - n0,
        (samples - s0) / f64::from(GPUS)
    );
}

fn main() {
    if let (Ok(lib), Ok(ms)) = (
        std::env::var("BENCH_LIB"),
        std::env::var("BENCH_INTERVAL_MS"),
    ) {
        child(&lib, Duration::from_millis(ms.parse().unwrap()));
        return;
    }
    let target = std::env::current_exe()
        .unwrap()
        .ancestors()
        .nth(3)
        .unwrap()
        .to_path_buf();
    let ok = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--release", "-p", "fake-nvml"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "building fake-nvml failed");
    let lib = target.join("release/libfake_nvml.so").display().to_string();
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/scenarios/training-swing.toml"
    );
    let mut results: Vec<(u64, Vec<Run>)> = vec![(0, vec![]), (100, vec![])];
    for _ in 0..ROUNDS {
        for (ms, runs) in results.iter_mut() {
            let out = Command::new(std::env::current_exe().unwrap())
                .env("BENCH_LIB", &lib)
                .env("BENCH_INTERVAL_MS", ms.to_string())
                .env("FAKE_NVML_SCENARIO", scenario)
                .env("FAKE_NVML_START", "30")
                .env("FAKE_NVML_PCIE_DELAY_MS", "0")
                .output()
                .unwrap();
            assert!(out.status.success());
            let line = String::from_utf8(out.stdout).unwrap();
            let v: Vec<f64> = line
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            runs.push((v[0], v[1], v[2]));
        }
    }
    let secs = WINDOW.as_secs_f64();
    println!("| power sampling | exporter CPU, % of one core (each run) | mean | library calls per s | samples per GPU per s |");
    println!("|---|---|---|---|---|");
    for (ms, runs) in &results {
        let pct: Vec<f64> = runs.iter().map(|r| r.0 / 1e9 / secs * 100.0).collect();
        let mean = pct.iter().sum::<f64>() / pct.len() as f64;
        let calls = runs.iter().map(|r| r.1).sum::<f64>() / runs.len() as f64 / secs;
        let samples = runs.iter().map(|r| r.2).sum::<f64>() / runs.len() as f64 / secs;
        let each: Vec<String> = pct.iter().map(|p| format!("{p:.3}")).collect();
        let name = if *ms == 0 {
            "off".to_string()
        } else {
            format!("every {ms} ms, {GPUS} GPUs")
        };
        println!(
            "| {name} | {} | {mean:.3} | {calls:.0} | {samples:.1} |",
            each.join(", ")
        );
    }
}
