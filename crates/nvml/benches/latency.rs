//! Wall time of an NVML poll per GPU with the fake's latency model (`FAKE_NVML_LATENCY=model`,
//! crates/fake-nvml; `nvmlDeviceGetPcieThroughput` samples 20 ms as the real call does), for
//! 1 and 8 GPUs: a steady poll, a poll that also takes the slow readings, and the average at
//! the default cadence (a 1 s poll, slow readings every 5 s). With 8 GPUs the per-GPU reads
//! overlap, so the poll should take about as long as with one. Also the library calls per GPU
//! per poll, from the fake's counter. Each configuration runs twice: "before" reads the energy
//! and PCIe replay counters every poll, as the source did before issue 36
//! (`NvmlOptions::counters_every_poll`), "after" on the slow cadence. Then, for one GPU, the
//! steady poll's time per NVML function from the source's own counters
//! (`dgx_pixels_nvml_call_seconds_total`). docs/performance.md records the results.
//!
//! Run: `cargo bench -p dgx-pixels-nvml --bench latency` (or `--profile dev`: the figures are
//! the model's sleeps, not CPU). Each configuration runs in a child process, because the fake
//! library's state lives for its process.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use dgx_pixels_metrics::Source;
use dgx_pixels_nvml::{call_stats, CallStat, NvmlOptions, NvmlSource};

/// Polls of a GPU at the default cadence per slow reading (5 s / 1 s).
const FAST_PER_SLOW: f64 = 5.0;

fn calls(lib: &str) -> u64 {
    // SAFETY: the fake exports this symbol with this signature; the library stays loaded.
    unsafe {
        let l = Box::leak(Box::new(libloading::Library::new(lib).unwrap()));
        let f: libloading::Symbol<unsafe extern "C" fn() -> u64> =
            l.get(b"fake_nvml_call_count").unwrap();
        f()
    }
}

/// Mean wall time and library calls per poll of `source` over `polls` polls, after 3 polls of
/// warm-up (the first reads identity).
fn measure(lib: &str, source: &mut NvmlSource, polls: u32) -> (Duration, f64) {
    for _ in 0..3 {
        source.poll().unwrap();
    }
    let (n0, t0) = (calls(lib), Instant::now());
    for _ in 0..polls {
        source.poll().unwrap();
    }
    (
        t0.elapsed() / polls,
        (calls(lib) - n0) as f64 / f64::from(polls),
    )
}

fn source(lib: &str, slow_interval: Duration, before: bool) -> NvmlSource {
    NvmlSource::with_options(NvmlOptions {
        library: Some(PathBuf::from(lib)),
        gpu_deadline: Duration::from_secs(10),
        slow_interval,
        // The power sampler's own thread is not part of the poll.
        power_sample_interval: Duration::ZERO,
        counters_every_poll: before,
        ..NvmlOptions::default()
    })
}

/// What each function took over the steady polls: `(function, calls, time)` per poll, from
/// the source's counters before and after them.
fn per_function(start: &[CallStat], end: &[CallStat], polls: u32) -> Vec<(&'static str, f64, f64)> {
    let mut rows: Vec<(&'static str, f64, f64)> = end
        .iter()
        .map(|e| {
            let s = start.iter().find(|s| s.function == e.function);
            let calls = e.calls - s.map_or(0, |s| s.calls);
            let time = e.time - s.map_or(Duration::ZERO, |s| s.time);
            (
                e.function,
                calls as f64 / f64::from(polls),
                time.as_secs_f64() * 1e6 / f64::from(polls),
            )
        })
        .filter(|(_, calls, _)| *calls > 0.0)
        .collect();
    rows.sort_by(|a, b| b.2.total_cmp(&a.2));
    rows
}

const STEADY_POLLS: u32 = 40;

fn child(gpus: u32, lib: &str, before: bool) {
    let mut steady = source(lib, Duration::from_secs(3600), before);
    steady.poll().unwrap();
    let start = call_stats();
    let (fast, fast_calls) = measure(lib, &mut steady, STEADY_POLLS);
    // measure() polls 3 times more before its timed polls: count those too.
    let functions = per_function(&start, &call_stats(), STEADY_POLLS + 3);
    let (slow, slow_calls) = measure(lib, &mut source(lib, Duration::ZERO, before), 10);
    let average = fast + (slow.saturating_sub(fast)).div_f64(FAST_PER_SLOW);
    let g = f64::from(gpus);
    let calls = fast_calls + (slow_calls - fast_calls) / FAST_PER_SLOW;
    println!(
        "| {gpus} | {} | {:.2} | {:.2} | {:.2} | {:.1} |",
        if before { "before" } else { "after" },
        fast.as_secs_f64() * 1e3,
        slow.as_secs_f64() * 1e3,
        average.as_secs_f64() * 1e3,
        calls / g,
    );
    for (function, calls, micros) in functions {
        println!(
            "| `{function}` | {:.1} | {:.0} | {:.0} |",
            calls / g,
            micros / g,
            micros / calls,
        );
    }
}

fn main() {
    if let (Ok(gpus), Ok(lib)) = (std::env::var("BENCH_GPUS"), std::env::var("BENCH_LIB")) {
        let before = std::env::var("BENCH_BEFORE").is_ok_and(|v| v == "1");
        child(gpus.parse().unwrap(), &lib, before);
        return;
    }
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    let ok = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--profile", profile, "-p", "fake-nvml"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "building fake-nvml failed");
    let dir = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let target = std::env::current_exe()
        .unwrap()
        .ancestors()
        .nth(3)
        .unwrap()
        .to_path_buf();
    let lib = target.join(dir).join("libfake_nvml.so");
    let text = dgx_pixels_sim::Scenario::builtin_text("dgx-h100").unwrap();
    let mut rows = Vec::new();
    let mut breakdowns = Vec::new();
    for gpus in [1u32, 8] {
        // dgx-h100 with N GPUs (default PCI bus ids: the scenario lists eight).
        let start = text.find("pci_bus_ids").unwrap();
        let end = start + text[start..].find(']').unwrap() + 1;
        let mut scenario = format!("{}{}", &text[..start], &text[end..])
            .replace("count = 8", &format!("count = {gpus}"));
        if gpus == 1 {
            // Phases that name GPUs name GPU 0 only (GPU 7's own phase becomes GPU 0's).
            scenario = scenario
                .replace("gpus = [0, 1, 2, 3, 4, 5, 6]", "gpus = [0]")
                .replace("gpus = [7]", "gpus = [0]");
        }
        let file = std::env::temp_dir().join(format!("dgx-pixels-latency-{gpus}.toml"));
        std::fs::write(&file, scenario).unwrap();
        for before in [true, false] {
            let out = Command::new(std::env::current_exe().unwrap())
                .env("BENCH_GPUS", gpus.to_string())
                .env("BENCH_LIB", &lib)
                .env("BENCH_BEFORE", if before { "1" } else { "0" })
                .env("FAKE_NVML_SCENARIO", &file)
                .env("FAKE_NVML_TIME", "60")
                .env("FAKE_NVML_PCIE_DELAY_MS", "20")
                .env("FAKE_NVML_LATENCY", "model")
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            let text = String::from_utf8(out.stdout).unwrap();
            let mut lines = text.lines();
            rows.push(lines.next().unwrap().to_string());
            if gpus == 1 {
                breakdowns.push((before, lines.map(str::to_string).collect::<Vec<_>>()));
            }
        }
    }
    println!("| GPUs | | steady poll (ms) | poll with slow readings (ms) | average at 1 s / 5 s (ms) | library calls per GPU per poll |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    for (before, lines) in breakdowns {
        println!(
            "\nSteady poll of 1 GPU, {}: per NVML function (the source's counters; GPM's thread runs beside the reader, so the times add up to more than the poll)\n",
            if before { "before" } else { "after" }
        );
        println!("| function | calls per poll | µs per poll | µs per call |");
        println!("|---|---|---|---|");
        for l in lines {
            println!("{l}");
        }
    }
}
