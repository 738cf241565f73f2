//! Against the fake libnvidia-ml (crates/fake-nvml) on dgx-a100-mig at 310 s, 10 s into its
//! second cycle: GPU 4 is time-sliced between two processes (70/30 % of its work) that
//! evaluated at 50 % until 300 s and train at 93 % since. NVML's first process-utilization
//! answer is its whole sample buffer, 20 s of it, half from before 300 s: a source serving
//! that answer would serve activity from before it started. It must only start its interval
//! there (issue 43); this test fails if the first-answer skip in `read_activity` (src/device.rs)
//! is deleted.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_nvml::{NvmlOptions, NvmlSource};

/// `(pid, sm)` of GPU 4's per-process SM activity in one poll's samples.
fn gpu4_sm(out: &[Sample]) -> Vec<(String, f64)> {
    out.iter()
        .filter(|x| {
            x.metric == Metric::ProcessUtilization
                && x.label("engine") == Some("sm")
                && x.device.as_ref().unwrap().index() == 4
        })
        .map(|x| (x.label("pid").unwrap().to_string(), x.value))
        .collect()
}

#[test]
fn activity_from_before_the_source_started_is_never_served() {
    let lib = common::fake_library();
    common::frozen_at("dgx-a100-mig", "310");

    // The premise: the buffer a first answer gives holds GPU 4's evaluation (290-300 s) as
    // well as its training, one sample per process every 200 ms, each with its own stamp.
    // (Kept open to the end, so that the source below shares this load of the library.)
    let nvml = nvml_wrapper::Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .unwrap();
    let buffer: Vec<_> = nvml
        .device_by_index(4)
        .unwrap()
        .process_utilization_stats(0)
        .unwrap()
        .into_iter()
        .filter(|s| s.pid == 20400)
        .collect();
    assert_eq!(buffer.len(), 100, "20 s of samples, 200 ms apart");
    for w in buffer.windows(2) {
        assert_eq!(w[1].timestamp - w[0].timestamp, 200_000, "{:?}", &w);
    }
    let (old, new) = (buffer[0].sm_util, buffer[99].sm_util);
    assert!(
        old + 20 < new,
        "the buffer's oldest sample is from the evaluation: {old} % vs {new} %"
    );

    let mut s = NvmlSource::with_options(NvmlOptions {
        library: Some(lib),
        gpu_deadline: Duration::from_secs(10),
        power_sample_interval: Duration::ZERO,
        profiling: false,
        ..NvmlOptions::default()
    });
    let first = s.poll().unwrap().samples;
    // NVML samples each process every 200 ms: the next answer has a sample the first had not.
    std::thread::sleep(Duration::from_millis(250));
    let second = s.poll().unwrap().samples;
    let gpu4 = second
        .iter()
        .find(|x| x.metric == Metric::GpuUtilization && x.device.as_ref().unwrap().index() == 4)
        .unwrap()
        .value;
    assert!(gpu4 > 0.8, "GPU 4 trains at 310 s: {gpu4}");
    let share = |pid: &str| match pid {
        "20400" => 0.7,
        "20401" => 0.3,
        other => panic!("pid {other} is not one of GPU 4's"),
    };
    for (poll, out) in [("first", &first), ("second", &second)] {
        for (pid, v) in gpu4_sm(out) {
            let now = share(&pid) * gpu4;
            // NVML answers whole percents.
            assert!(
                (v - now).abs() <= 0.011,
                "{poll} poll served pid {pid} at {v}, its activity now {now}: activity from \
                 NVML's buffer of before the source started"
            );
        }
    }
    // Served at all (else the check above could not fail): both processes on the second poll.
    assert_eq!(gpu4_sm(&second).len(), 2, "{:?}", gpu4_sm(&second));
    drop(nvml);
}
