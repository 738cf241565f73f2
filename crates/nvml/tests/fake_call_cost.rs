//! Against the fake libnvidia-ml (crates/fake-nvml) with per-call latency: the source's own
//! per-function counters name the slow call, and the energy counter is a slow reading that is
//! still served at every poll (issue 36).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use dgx_pixels_metrics::{Metric, Source};
use dgx_pixels_nvml::{call_stats, CallStat, NvmlOptions, NvmlSource};

fn stat(stats: &[CallStat], function: &str) -> CallStat {
    stats
        .iter()
        .find(|s| s.function == function)
        .copied()
        .unwrap_or(CallStat {
            function: "",
            calls: 0,
            time: Duration::ZERO,
        })
}

fn served(out: &[dgx_pixels_metrics::Sample], metric: Metric, gpu: &str) -> Option<f64> {
    out.iter()
        .find(|s| s.metric == metric && s.label("gpu") == Some(gpu))
        .map(|s| s.value)
}

// One test in this file: the fake reads its environment at init, for this process.
#[test]
fn per_function_seconds_name_the_slow_call_and_energy_is_a_slow_reading_served_every_poll() {
    let lib = common::fake_library();
    common::frozen_at("dgx-h100", "60");
    // Temperature 20 ms per call, the energy field 30 ms, every other call at the fake's speed.
    std::env::set_var(
        "FAKE_NVML_LATENCY",
        "nvmlDeviceGetTemperature=20000,field:83=30000",
    );
    let mut s = NvmlSource::with_options(NvmlOptions {
        library: Some(lib),
        gpu_deadline: Duration::from_secs(10),
        slow_interval: Duration::from_secs(3600),
        power_sample_interval: Duration::ZERO,
        profiling: false,
        ..NvmlOptions::default()
    });
    // The first poll takes the slow readings, energy among them.
    let first = s.poll().unwrap().samples;
    let start = call_stats();
    let polls = 3;
    let mut last = Vec::new();
    for _ in 0..polls {
        last = s.poll().unwrap().samples;
    }
    let end = call_stats();
    let delta = |f: &str| {
        let (a, b) = (stat(&start, f), stat(&end, f));
        (b.calls - a.calls, b.time - a.time)
    };
    let gpus = 8;
    let (temp_calls, temp_time) = delta("nvmlDeviceGetTemperature");
    assert_eq!(temp_calls, polls * gpus);
    assert!(
        temp_time >= Duration::from_millis(20) * (polls * gpus) as u32,
        "{temp_time:?}"
    );
    let (power_calls, power_time) = delta("nvmlDeviceGetPowerUsage");
    assert_eq!(power_calls, polls * gpus);
    assert!(
        power_time * 20 < temp_time,
        "the slow function shows the larger seconds: power {power_time:?}, temperature {temp_time:?}"
    );
    // Steady polls: one field batch per GPU without the energy, no slow batch; it stays cheap.
    let (batches, batch_time) = delta("nvmlDeviceGetFieldValues(poll)");
    assert_eq!(batches, polls * gpus);
    assert!(
        batch_time < Duration::from_millis(30),
        "the poll's batch asked for the energy: {batch_time:?}"
    );
    assert_eq!(delta("nvmlDeviceGetFieldValues(slow)").0, 0);
    // The slow batch was read once per GPU, by the first poll, and paid the energy's 30 ms.
    let slow = stat(&end, "nvmlDeviceGetFieldValues(slow)");
    assert_eq!(slow.calls, gpus);
    assert!(
        slow.time >= Duration::from_millis(30) * gpus as u32,
        "{slow:?}"
    );
    // Served at every poll, from the first, with the driver's value (a frozen clock: equal).
    for gpu in ["0", "7"] {
        let e0 = served(&first, Metric::GpuEnergy, gpu).unwrap();
        assert!(e0 > 0.0);
        assert_eq!(served(&last, Metric::GpuEnergy, gpu), Some(e0));
        assert!(served(&last, Metric::PcieReplays, gpu).is_some());
    }
    // The counters themselves are served, one pair per function called.
    let calls = last
        .iter()
        .find(|x| {
            x.metric == Metric::NvmlCalls && x.label("function") == Some("nvmlDeviceGetTemperature")
        })
        .unwrap();
    assert_eq!(
        calls.value,
        stat(&call_stats(), "nvmlDeviceGetTemperature").calls as f64
    );
    assert!(last.iter().any(|x| x.metric == Metric::NvmlCallSeconds
        && x.label("function") == Some("nvmlDeviceGetTemperature")
        && x.value >= 0.02 * (polls * gpus) as f64));
}
