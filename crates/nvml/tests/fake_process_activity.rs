//! Against the fake libnvidia-ml (crates/fake-nvml) on dgx-a100-mig, whose GPU 4 is
//! time-sliced between two processes (70/30 % of its work) and GPU 5 shared through MPS by two
//! clients (60/40 %, listed only by NVML's MPS call): per-process activity from NVML's
//! process-utilization samples, on shared GPUs only by default (not in MIG mode), capped at
//! the top K with the rest under pid "other".
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_nvml::{NvmlOptions, NvmlSource, ProcessActivity};

/// `(gpu, pid, sm)` of every per-process SM activity sample of one poll (after the first).
fn sm_activity(options: NvmlOptions) -> (Vec<(u32, String, f64)>, Vec<Sample>) {
    let mut s = NvmlSource::with_options(NvmlOptions {
        gpu_deadline: Duration::from_secs(10),
        power_sample_interval: Duration::ZERO,
        profiling: false,
        ..options
    });
    // The first answer is NVML's whole buffer, from before the source started: it only marks
    // where the next interval begins, and no activity is served from it (issue 43).
    let first = s.poll().unwrap().samples;
    assert!(
        !first.iter().any(|x| x.metric == Metric::ProcessUtilization),
        "activity served from the first answer"
    );
    // NVML samples each process every 200 ms: the next answer has a sample the first had not.
    std::thread::sleep(Duration::from_millis(250));
    let out = s.poll().unwrap().samples;
    let sm = out
        .iter()
        .filter(|x| x.metric == Metric::ProcessUtilization && x.label("engine") == Some("sm"))
        .map(|x| {
            let d = x.device.as_ref().unwrap();
            (d.index(), x.label("pid").unwrap().to_string(), x.value)
        })
        .collect();
    (sm, out)
}

#[test]
fn shared_gpus_serve_the_top_k_processes_and_the_rest_as_other() {
    let lib = common::fake_library();
    common::frozen_at("dgx-a100-mig", "60");
    let options = || NvmlOptions {
        library: Some(lib.clone()),
        ..NvmlOptions::default()
    };
    let (sm, out) = sm_activity(options());
    let gpu = |i| {
        out.iter()
            .find(|x| x.metric == Metric::GpuUtilization && x.device.as_ref().unwrap().index() == i)
            .unwrap()
            .value
    };
    let (gpu4, gpu5) = (gpu(4), gpu(5));
    assert!(gpu4 > 0.5, "GPU 4 trains at 60 s: {gpu4}");
    assert!(gpu5 > 0.5, "GPU 5 trains at 60 s: {gpu5}");
    // Only GPUs 4 and 5 are shared (GPUs 0 and 1 run one process per MIG instance); each one's
    // two processes are within the default top 3. GPU 5's are MPS clients: without NVML's MPS
    // call it would have no process at all.
    let expected = [
        (4, "20400", 0.7 * gpu4),
        (4, "20401", 0.3 * gpu4),
        (5, "20500", 0.6 * gpu5),
        (5, "20501", 0.4 * gpu5),
    ];
    assert_eq!(sm.len(), expected.len(), "{sm:?}");
    for ((gpu, pid, v), (want_gpu, want_pid, want)) in sm.iter().zip(expected) {
        assert_eq!((*gpu, pid.as_str()), (want_gpu, want_pid), "{sm:?}");
        // NVML answers whole percents.
        assert!((v - want).abs() <= 0.011, "{pid}: {v} vs {want}");
    }
    // The MPS clients' memory is served too, one series per process.
    assert_eq!(
        out.iter()
            .filter(|x| x.metric == Metric::ProcessMemoryUsed
                && x.device.as_ref().unwrap().index() == 5)
            .count(),
        2
    );
    // Four engines per process at full detail; the fake's workloads do no video.
    let engines: Vec<_> = out
        .iter()
        .filter(|x| x.metric == Metric::ProcessUtilization && x.label("pid") == Some("20400"))
        .map(|x| (x.label("engine").unwrap().to_string(), x.value))
        .collect();
    assert_eq!(engines.len(), 4, "{engines:?}");
    assert!(engines.contains(&("encoder".to_string(), 0.0)));

    // `all` with K = 1: every busy whole GPU's one process, and on GPU 4 the most active one
    // plus the rest; still nothing in MIG mode.
    let (sm, _) = sm_activity(NvmlOptions {
        process_activity: ProcessActivity::All,
        process_activity_top_k: 1,
        ..options()
    });
    let on4: Vec<_> = sm.iter().filter(|(g, _, _)| *g == 4).collect();
    assert_eq!(on4.len(), 2, "{sm:?}");
    assert_eq!((on4[0].1.as_str(), on4[1].1.as_str()), ("20400", "other"));
    assert!((on4[1].2 - 0.3 * gpu4).abs() <= 0.011, "{on4:?}");
    assert!(!sm.iter().any(|(g, _, _)| *g < 2), "{sm:?}");
    let on5: Vec<_> = sm.iter().filter(|(g, _, _)| *g == 5).collect();
    assert_eq!(on5.len(), 2, "{sm:?}");
    assert_eq!((on5[0].1.as_str(), on5[1].1.as_str()), ("20500", "other"));
    for g in [2, 3, 6, 7] {
        assert_eq!(
            sm.iter().filter(|(i, _, _)| *i == g).count(),
            1,
            "GPU {g}: {sm:?}"
        );
    }

    // `off`: NVML is not asked.
    let (sm, _) = sm_activity(NvmlOptions {
        process_activity: ProcessActivity::Off,
        ..options()
    });
    assert!(sm.is_empty(), "{sm:?}");
}
