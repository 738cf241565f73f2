//! The `nccl_allreduce` node probe in the scheduler, against a scripted backend: it runs only
//! while every GPU of its set is idle, holds them all while it runs (then rests on its own share
//! of their budget, not on their probes), serves its sizes and counts each outcome.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_probe_source::{Backend, GpuId, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::nccl::{AllReduce, SizeResult};
use dgx_pixels_probes::worker::Skip;
use dgx_pixels_probes::{ProbeError, ProbeKind};

#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<String>>>);

struct Fake {
    calls: Calls,
    missing: bool,
    /// GPUs discovered.
    count: usize,
}

impl Backend for Fake {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok((0..self.count)
            .map(|i| GpuId {
                ordinal: i,
                uuid: format!("GPU-{i}"),
                model: "NVIDIA H100 80GB HBM3".into(),
            })
            .collect())
    }
    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        self.calls
            .0
            .lock()
            .unwrap()
            .push(format!("{kind} {}", gpu.ordinal));
        Ok(vec![1e12; 3])
    }
    fn run_nccl(&mut self, gpus: &[GpuId], max_bytes: u64) -> Result<AllReduce, ProbeError> {
        let ords: Vec<String> = gpus.iter().map(|g| g.ordinal.to_string()).collect();
        self.calls
            .0
            .lock()
            .unwrap()
            .push(format!("nccl {} {max_bytes}", ords.join(",")));
        if self.missing {
            return Err(ProbeError::Skipped(Skip::NoNccl, "no libnccl.so.2".into()));
        }
        std::thread::sleep(Duration::from_millis(50));
        Ok(AllReduce {
            gpus: gpus.len(),
            version: "2.27.3".into(),
            sizes: [1u64 << 20, 16 << 20]
                .iter()
                .map(|&bytes| SizeResult {
                    bytes,
                    algbw: bytes as f64 * 1e3,
                    busbw: bytes as f64 * 1e3 * 4.0 / 3.0,
                    busbw_values: Vec::new(),
                })
                .collect(),
        })
    }
}

#[derive(Clone, Default)]
struct Util(Arc<Mutex<HashMap<String, (u32, f64)>>>);
impl UtilizationView for Util {
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)> {
        self.0.lock().unwrap().get(uuid).cloned()
    }
}

fn value(samples: &[Sample], metric: Metric, labels: &[&str]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.metric == metric
                && s.labels
                    .iter()
                    .map(|l| l.as_str())
                    .eq(labels.iter().copied())
        })
        .map(|s| s.value)
}

fn source(missing: bool, gpus: Option<Vec<usize>>) -> (ProbeSource<Fake, Util>, Calls, Util) {
    source_of(3, missing, gpus)
}

fn source_of(
    count: usize,
    missing: bool,
    gpus: Option<Vec<usize>>,
) -> (ProbeSource<Fake, Util>, Calls, Util) {
    let calls = Calls::default();
    let util = Util::default();
    let s = ProbeSource::new(
        Fake {
            calls: calls.clone(),
            missing,
            count,
        },
        util.clone(),
        ScheduleSettings {
            probes: vec![ProbeKind::CopyD2D],
            duty_cycle: 0.5,
            settle: Duration::ZERO,
            nccl_allreduce: true,
            nccl_gpus: gpus,
            nccl_max_bytes: 16 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    (s, calls, util)
}

fn set(util: &Util, gpu: usize, u: f64) {
    util.0
        .lock()
        .unwrap()
        .insert(format!("GPU-{gpu}"), (gpu as u32, u));
}

#[test]
fn a_busy_gpu_of_the_set_skips_the_run_and_an_idle_set_is_measured_and_the_probe_rests() {
    let (mut s, calls, util) = source(false, Some(vec![0, 2]));
    set(&util, 0, 0.0);
    set(&util, 1, 0.0);
    set(&util, 2, 0.9);
    let out = s.poll().unwrap().samples;
    assert_eq!(
        value(&out, Metric::ProbeNcclRuns, &["skipped_busy"]),
        Some(1.0)
    );
    assert!(value(&out, Metric::ProbeNcclLargestBusBandwidth, &[]).is_none());
    assert!(calls
        .0
        .lock()
        .unwrap()
        .iter()
        .all(|c| !c.starts_with("nccl")));
    // The GPU probes go on meanwhile (GPU 1 is outside the set).
    for _ in 0..3 {
        s.poll().unwrap();
    }
    assert!(calls.0.lock().unwrap().contains(&"copy_d2d 1".to_string()));

    let (mut s, calls, util) = source(false, Some(vec![0, 2]));
    set(&util, 0, 0.0);
    set(&util, 1, 0.0);
    set(&util, 2, 0.0);
    let out = s.poll().unwrap().samples;
    assert_eq!(
        calls.0.lock().unwrap().as_slice(),
        ["nccl 0,2 16777216".to_string()]
    );
    assert_eq!(value(&out, Metric::ProbeNcclRuns, &["ok"]), Some(1.0));
    assert_eq!(value(&out, Metric::ProbeNcclGpus, &[]), Some(2.0));
    // Two H100s of three: the 8-GPU ring figure does not apply.
    assert_eq!(
        value(&out, Metric::ProbeNcclExpectedBusBandwidth, &[]),
        None
    );
    let largest = value(&out, Metric::ProbeNcclLargestBusBandwidth, &[]).unwrap();
    assert_eq!(largest, (16u64 << 20) as f64 * 1e3 * 4.0 / 3.0);
    assert_eq!(
        value(&out, Metric::ProbeNcclAlgorithmBandwidth, &["1048576"]),
        Some((1u64 << 20) as f64 * 1e3)
    );
    // The all-reduce rests (50 ms held, on its half of duty 0.5: 200 ms), not the GPUs of
    // its set: each GPU gets its own probe in the next polls (issue 44: they used to rest as
    // long as the all-reduce, which at the default duty cycle starved them).
    for _ in 0..3 {
        s.poll().unwrap();
    }
    let log = calls.0.lock().unwrap().clone();
    assert_eq!(
        log[1..],
        ["copy_d2d 0", "copy_d2d 1", "copy_d2d 2"].map(String::from),
        "{log:?}"
    );
}

#[test]
fn the_expected_figure_is_served_only_for_a_whole_8_gpu_baseboard() {
    for (count, list, expected) in [
        (8, None, Some(370e9)),
        (8, Some((0..8).collect()), Some(370e9)),
        (8, Some((0..4).collect()), None),
        (4, None, None),
    ] {
        let (mut s, calls, util) = source_of(count, false, list.clone());
        for g in 0..count {
            set(&util, g, 0.0);
        }
        let out = s.poll().unwrap().samples;
        assert!(
            calls.0.lock().unwrap()[0].starts_with("nccl"),
            "{count} {list:?}"
        );
        assert_eq!(
            value(&out, Metric::ProbeNcclExpectedBusBandwidth, &[]),
            expected,
            "{count} GPUs, set {list:?}"
        );
    }
}

#[test]
fn a_missing_nccl_is_its_own_outcome_and_serves_nothing() {
    let (mut s, calls, util) = source(true, None);
    for g in 0..3 {
        set(&util, g, 0.0);
    }
    let out = s.poll().unwrap().samples;
    assert_eq!(calls.0.lock().unwrap()[0], "nccl 0,1,2 16777216");
    assert_eq!(
        value(&out, Metric::ProbeNcclRuns, &["skipped_no_nccl"]),
        Some(1.0)
    );
    assert_eq!(value(&out, Metric::ProbeNcclRuns, &["error"]), Some(0.0));
    assert!(value(&out, Metric::ProbeNcclGpus, &[]).is_none());
    // It waits before trying again: the next polls run the GPU probes.
    s.poll().unwrap();
    let log = calls.0.lock().unwrap().clone();
    assert_eq!(
        log.iter().filter(|c| c.starts_with("nccl")).count(),
        1,
        "{log:?}"
    );
}

#[test]
fn the_set_and_its_size_are_checked() {
    let bad = |f: &dyn Fn(&mut ScheduleSettings)| {
        let mut s = ScheduleSettings {
            nccl_allreduce: true,
            ..Default::default()
        };
        f(&mut s);
        s.validate().unwrap_err().to_string()
    };
    assert!(bad(&|s| s.nccl_gpus = Some(vec![1])).contains("two GPUs or more"));
    assert!(bad(&|s| s.nccl_gpus = Some(vec![1, 2, 1])).contains("GPU 1 is listed twice"));
    assert!(bad(&|s| s.nccl_max_bytes = 1000).contains("probes.nccl_max_bytes"));
    assert!(bad(&|s| s.nccl_max_bytes = 2 << 30).contains("memory_limit_bytes"));
}

#[test]
fn node_probes_due_at_every_poll_alternate_with_the_gpu_probes() {
    let (mut s, calls, util) = source(false, None);
    for g in 0..3 {
        set(&util, g, 0.0);
    }
    for _ in 0..6 {
        s.poll().unwrap();
        // Longer than the all-reduce's rest (50 ms held, on its half of duty 0.5: 200 ms): due
        // again at every poll.
        std::thread::sleep(Duration::from_millis(250));
    }
    let log = calls.0.lock().unwrap().clone();
    let kinds: Vec<bool> = log.iter().map(|c| c.starts_with("nccl")).collect();
    assert_eq!(kinds, [true, false, true, false, true, false], "{log:?}");
}

#[test]
fn a_storage_path_due_at_every_poll_does_not_starve_the_all_reduce() {
    let calls = Calls::default();
    let util = Util::default();
    let dir = std::env::temp_dir();
    let mut s = ProbeSource::new(
        Fake {
            calls: calls.clone(),
            missing: false,
            count: 3,
        },
        util.clone(),
        ScheduleSettings {
            probes: vec![ProbeKind::CopyD2D],
            duty_cycle: 1.0,
            settle: Duration::ZERO,
            nccl_allreduce: true,
            nccl_max_bytes: 16 << 20,
            storage_paths: vec![dir.clone()],
            ..Default::default()
        },
    )
    .unwrap();
    for g in 0..3 {
        set(&util, g, 0.0);
    }
    for _ in 0..8 {
        s.poll().unwrap();
        std::thread::sleep(Duration::from_millis(120));
    }
    // The fake reads no storage (an error, due again after no time): still every kind runs.
    let log = calls.0.lock().unwrap().clone();
    assert!(
        log.iter().filter(|c| c.starts_with("nccl")).count() >= 2,
        "{log:?}"
    );
    assert!(log.iter().any(|c| c.starts_with("copy_d2d")), "{log:?}");
}
