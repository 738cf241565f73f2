//! Cost of an NVML poll against the fake libnvidia-ml, for 8 and 64 GPUs: exporter CPU per GPU
//! per poll (process CPU time minus the time spent inside the library), library calls per GPU per
//! poll, and wall time per poll, with and without GPM (the profiling families on Hopper). The
//! peer, measured in the same run, is a naive poll: the same
//! readings through nvml-wrapper's getters one by one on one thread, as simple exporters do.
//!
//! Run: `cargo bench -p dgx-pixels-nvml --bench poll`. Each configuration runs in a child
//! process, because the fake library's state (scenario, GPU count) lives for its process.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::Source;
use dgx_pixels_nvml::{NvmlOptions, NvmlSource};
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::Nvml;

const POLLS: u32 = 400;
const WARMUP: u32 = 20;

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

struct Fake {
    calls: libloading::Symbol<'static, unsafe extern "C" fn() -> u64>,
    busy: libloading::Symbol<'static, unsafe extern "C" fn() -> u64>,
}

fn fake(path: &str) -> Fake {
    let lib = Box::leak(Box::new(unsafe { libloading::Library::new(path) }.unwrap()));
    unsafe {
        Fake {
            calls: lib.get(b"fake_nvml_call_count").unwrap(),
            busy: lib.get(b"fake_nvml_busy_ns").unwrap(),
        }
    }
}

/// Measures `poll` over POLLS iterations: (wall, exporter cpu, library calls) per poll.
fn measure(f: &Fake, mut poll: impl FnMut()) -> (Duration, Duration, f64) {
    for _ in 0..WARMUP {
        poll();
    }
    let (c0, b0, n0, t0) = unsafe { (cpu_time(), (f.busy)(), (f.calls)(), Instant::now()) };
    for _ in 0..POLLS {
        poll();
    }
    let wall = t0.elapsed();
    let (c1, b1, n1) = unsafe { (cpu_time(), (f.busy)(), (f.calls)()) };
    let library = Duration::from_nanos(b1 - b0);
    let exporter = (c1 - c0).saturating_sub(library);
    (
        wall / POLLS,
        exporter / POLLS,
        (n1 - n0) as f64 / f64::from(POLLS),
    )
}

fn child(gpus: u32, lib: &str) {
    let f = fake(lib);
    let mut source = NvmlSource::with_options(NvmlOptions {
        library: Some(PathBuf::from(lib)),
        gpu_deadline: Duration::from_secs(10),
        slow_interval: Duration::from_secs(3600),
        ..NvmlOptions::default()
    });
    let ours = measure(&f, || {
        let samples = source.poll().unwrap().samples;
        assert!(samples.len() > gpus as usize * 20);
    });
    // The same steady poll without GPM (as when DCGM provides the profiling families): the
    // difference is what GPM costs.
    let mut no_gpm = NvmlSource::with_options(NvmlOptions {
        library: Some(PathBuf::from(lib)),
        gpu_deadline: Duration::from_secs(10),
        slow_interval: Duration::from_secs(3600),
        profiling: false,
        ..NvmlOptions::default()
    });
    let ours_no_gpm = measure(&f, || {
        no_gpm.poll().unwrap();
    });
    let mut every = NvmlSource::with_options(NvmlOptions {
        library: Some(PathBuf::from(lib)),
        gpu_deadline: Duration::from_secs(10),
        slow_interval: Duration::ZERO,
        ..NvmlOptions::default()
    });
    let ours_slow = measure(&f, || {
        every.poll().unwrap();
    });
    let nvml = Nvml::builder().lib_path(OsStr::new(lib)).init().unwrap();
    let naive = measure(&f, || {
        let mut acc = 0.0f64;
        for i in 0..gpus {
            let d = nvml.device_by_index(i).unwrap();
            let _ = d.uuid();
            acc += d
                .utilization_rates()
                .map(|u| f64::from(u.gpu))
                .unwrap_or(0.0);
            acc += d.memory_info().map(|m| m.used as f64).unwrap_or(0.0);
            acc += d.power_usage().map(f64::from).unwrap_or(0.0);
            acc += d.enforced_power_limit().map(f64::from).unwrap_or(0.0);
            acc += d
                .total_energy_consumption()
                .map(|v| v as f64)
                .unwrap_or(0.0);
            acc += d
                .temperature(TemperatureSensor::Gpu)
                .map(f64::from)
                .unwrap_or(0.0);
            for c in [Clock::Graphics, Clock::SM, Clock::Memory, Clock::Video] {
                acc += d.clock_info(c).map(f64::from).unwrap_or(0.0);
                acc += d.max_clock_info(c).map(f64::from).unwrap_or(0.0);
            }
            acc += d
                .performance_state()
                .map(|p| p.as_c() as f64)
                .unwrap_or(0.0);
            acc += d
                .current_throttle_reasons()
                .map(|t| t.bits() as f64)
                .unwrap_or(0.0);
            acc += d.bar1_memory_info().map(|b| b.used as f64).unwrap_or(0.0);
            acc += d
                .encoder_utilization()
                .map(|u| f64::from(u.utilization))
                .unwrap_or(0.0);
            acc += d
                .decoder_utilization()
                .map(|u| f64::from(u.utilization))
                .unwrap_or(0.0);
            acc += d.pcie_replay_counter().map(f64::from).unwrap_or(0.0);
            acc += d.current_pcie_link_gen().map(f64::from).unwrap_or(0.0);
            acc += d.current_pcie_link_width().map(f64::from).unwrap_or(0.0);
            acc += d
                .running_compute_processes()
                .map(|p| p.len() as f64)
                .unwrap_or(0.0);
        }
        std::hint::black_box(acc);
    });
    let row = |name: &str, (wall, cpu, calls): (Duration, Duration, f64)| {
        println!(
            "| {gpus} | {name} | {:.1} | {:.1} | {:.1} |",
            cpu.as_secs_f64() * 1e6 / f64::from(gpus),
            calls / f64::from(gpus),
            wall.as_secs_f64() * 1e3,
        );
    };
    row("dgx-pixels nvml source, steady poll (GPM included)", ours);
    row(
        "dgx-pixels nvml source, steady poll without GPM",
        ours_no_gpm,
    );
    row("dgx-pixels nvml source, poll with slow readings", ours_slow);
    row("naive serial getters (peer)", naive);
}

fn main() {
    let target = std::env::current_exe()
        .unwrap()
        .ancestors()
        .nth(3)
        .unwrap()
        .to_path_buf();
    let lib = target.join("debug/libfake_nvml.so").display().to_string();
    if let (Ok(gpus), Ok(lib)) = (std::env::var("BENCH_GPUS"), std::env::var("BENCH_LIB")) {
        child(gpus.parse().unwrap(), &lib);
        return;
    }
    let ok = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--release", "-p", "fake-nvml"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "building fake-nvml failed");
    let lib = lib.replace("/debug/", "/release/");
    let text = dgx_pixels_sim::Scenario::builtin_text("dgx-h100").unwrap();
    println!("| GPUs | poll | exporter CPU per GPU per poll (µs) | library calls per GPU per poll | wall per poll (ms) |");
    println!("|---|---|---|---|---|");
    for gpus in [8u32, 64] {
        // dgx-h100 with N GPUs (default PCI bus ids: the scenario lists eight).
        let start = text.find("pci_bus_ids").unwrap();
        let end = start + text[start..].find(']').unwrap() + 1;
        let scenario = format!("{}{}", &text[..start], &text[end..])
            .replace("count = 8", &format!("count = {gpus}"));
        let file = std::env::temp_dir().join(format!("dgx-pixels-bench-{gpus}.toml"));
        std::fs::write(&file, scenario).unwrap();
        let status = Command::new(std::env::current_exe().unwrap())
            .env("BENCH_GPUS", gpus.to_string())
            .env("BENCH_LIB", &lib)
            .env("FAKE_NVML_SCENARIO", &file)
            .env("FAKE_NVML_TIME", "60")
            .env("FAKE_NVML_PCIE_DELAY_MS", "0")
            .status()
            .unwrap();
        assert!(status.success());
    }
}
